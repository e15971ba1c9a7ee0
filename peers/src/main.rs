//! tenure side by side with the crates people pick instead, on the same
//! servers, in one run (issue 19, "Peers side by side").
//!
//! A user choosing a lease, lock or queue library wants two things: how
//! fast each one is on the store they already run, and what each one
//! promises when a holder stalls. This program measures the first; the
//! "Peers" section of the benchmark log
//! (benchmarks/archive/2026-11-29_to_2026-12-02.md, linked from
//! BENCHMARKS.md) sets the figures beside the second.
//!
//! * **queue**: tenure's `claim` + `complete_many` against `apalis` with
//!   `apalis-postgres`, at 1, 10 and 100 jobs per claim;
//! * **hot key**: 8 workers race for one lock (hold 5 ms): tenure on
//!   PostgreSQL against sqlx's `PgAdvisoryLock`, tenure on Redis against
//!   `rslock` (Redlock);
//! * **latency**: one uncontended acquire/release, the same pairs;
//! * **a holder paused past its ttl** (not timed): what each side answers
//!   the holder that comes back, and whether its token can be refused
//!   downstream (module `pause`).
//!
//! The machine is shared, so nothing is measured one side after the other:
//! each cell alternates slices (tenure, peer, peer, tenure, …) and reports
//! the median slice, the slowest and fastest slice, and the range of the
//! per-pair ratios. Before any timing, each peer is checked to really
//! work: apalis drains a small queue from PostgreSQL to `Done`, each lock
//! excludes a second holder and shows on its server.
//!
//! It lives outside the root workspace (its own `[workspace]`, excluded by
//! the root manifest) so `cargo test --workspace` never builds the peers.
//! PostgreSQL runs in a database this program creates and drops, Redis
//! under a key prefix of its own, deleted at the end.

mod locks;
mod pause;
mod queue;
mod stats;

use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use sqlx::{AssertSqlSafe, Connection};
use tenure::wait::Waiter;

use crate::locks::Kind;
use crate::stats::{Latencies, Slices};

type Error = Box<dyn std::error::Error + Send + Sync>;
type Result<T> = std::result::Result<T, Error>;

/// tenure beside apalis, PgAdvisoryLock and rslock, interleaved on the
/// same PostgreSQL and Redis servers.
#[derive(Parser)]
struct Options {
    /// A PostgreSQL database to connect to first; the run creates its own
    /// database next to it and drops it at the end.
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/test")]
    pg_url: String,
    /// Redis; every key of the run is under a prefix of its own, deleted at
    /// the end.
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    redis_url: String,
    /// Queue rounds per batch size (each round drains a tenure queue and
    /// an apalis queue, each first in every other round).
    #[arg(long, default_value_t = 6)]
    rounds: usize,
    /// Jobs per round at 1 job per claim; ×4 at 10, ×10 at 100.
    #[arg(long, default_value_t = 1000)]
    jobs: usize,
    /// Queue workers per side.
    #[arg(long, default_value_t = 4)]
    queue_workers: usize,
    /// Slices per side of each lock cell.
    #[arg(long, default_value_t = 6)]
    slices: usize,
    /// Length of one hot-key slice, in ms.
    #[arg(long, default_value_t = 2000)]
    cell_ms: u64,
    /// Hot-key workers.
    #[arg(long, default_value_t = 8)]
    hot_workers: usize,
    /// Acquire/release pairs per latency slice.
    #[arg(long, default_value_t = 300)]
    latency_ops: usize,
    /// Tiny sizes, to see that everything runs.
    #[arg(long)]
    quick: bool,
}

#[tokio::main]
async fn main() -> Result<()> {
    let mut options = Options::parse();
    if options.quick {
        (options.rounds, options.jobs, options.slices) = (2, 100, 2);
        (options.cell_ms, options.latency_ops) = (300, 30);
    }
    let run = format!("peers_{}", std::process::id());
    let db_url = database_url(&options.pg_url, &run)?;
    let mut admin = sqlx::PgConnection::connect(&options.pg_url).await?;
    sqlx::raw_sql(AssertSqlSafe(format!("CREATE DATABASE {run}")))
        .execute(&mut admin)
        .await?;
    let outcome = bench(&options, &db_url, &run).await;
    sqlx::raw_sql(AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {run} WITH (FORCE)"
    )))
    .execute(&mut admin)
    .await?;
    let deleted = delete_keys(&options.redis_url, &run).await?;
    println!("\ncleaned up: database {run} dropped, {deleted} Redis keys of the run deleted");
    outcome
}

/// `url` with `pair` added to its query (the URL's own options kept).
fn with_query(url: &str, pair: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}{pair}")
}

/// `url` with its database (the last path segment) replaced by `database`.
fn database_url(url: &str, database: &str) -> Result<String> {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let authority = base
        .find("://")
        .ok_or("a PostgreSQL URL without a scheme")?
        + 3;
    let base = match base[authority..].find('/') {
        Some(slash) => &base[..authority + slash],
        None => base,
    };
    Ok(match query {
        "" => format!("{base}/{database}"),
        query => format!("{base}/{database}?{query}"),
    })
}

/// Deletes every Redis key of the run: tenure's namespace and the Redlock
/// prefix. Answers how many.
async fn delete_keys(redis_url: &str, run: &str) -> Result<usize> {
    let client = redis::Client::open(redis_url)?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let mut deleted = 0;
    for pattern in [format!("tenure:{{{run}}}:*"), format!("{run}:*")] {
        let mut cursor = 0u64;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut conn)
                .await?;
            if !keys.is_empty() {
                deleted += keys.len();
                redis::cmd("UNLINK")
                    .arg(&keys)
                    .query_async::<()>(&mut conn)
                    .await?;
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
    }
    Ok(deleted)
}

async fn bench(options: &Options, db_url: &str, run: &str) -> Result<()> {
    let tenure_pg = tenure::connect(&with_query(db_url, "schema=tenure")).await?;
    let tenure_redis =
        tenure::connect(&with_query(&options.redis_url, &format!("namespace={run}"))).await?;
    let pool = apalis_postgres::PgPool::connect(db_url).await?;
    apalis_postgres::PostgresStorage::setup(&pool).await?;
    let redlock = rslock::LockManager::new(vec![options.redis_url.as_str()]);
    let pairs = [
        (
            "PostgreSQL",
            Kind::Tenure(Arc::clone(&tenure_pg)),
            "PgAdvisoryLock (try, poll 1 ms)",
            Kind::Advisory(db_url.to_owned()),
        ),
        (
            "PostgreSQL",
            Kind::Tenure(Arc::clone(&tenure_pg)),
            "PgAdvisoryLock (blocking acquire)",
            Kind::AdvisoryBlocking(db_url.to_owned()),
        ),
        (
            "PostgreSQL, tenure waiter",
            Kind::TenureWaiting(Arc::new(Waiter::new(Arc::clone(&tenure_pg)))),
            "PgAdvisoryLock (blocking acquire)",
            Kind::AdvisoryBlocking(db_url.to_owned()),
        ),
        (
            "Redis",
            Kind::Tenure(Arc::clone(&tenure_redis)),
            "rslock (one try, poll 1 ms)",
            Kind::Redlock(redlock.clone()),
        ),
        (
            "Redis, tenure waiter",
            Kind::TenureWaiting(Arc::new(Waiter::new(Arc::clone(&tenure_redis)))),
            "rslock (one try, poll 1 ms)",
            Kind::Redlock(redlock.clone()),
        ),
    ];

    println!("## checks (nothing timed)\n");
    for (store, tenure_side, peer, peer_side) in &pairs {
        locks::check(tenure_side, &format!("{run}:check")).await?;
        locks::check(peer_side, &format!("{run}:check")).await?;
        println!(
            "- {store}: tenure and {peer} each exclude a second holder and show on the server"
        );
    }
    for (name, drain) in [
        (
            "tenure",
            queue::tenure(&tenure_pg, "check-tenure", 50, 10, 2).await?,
        ),
        (
            "apalis",
            queue::apalis(&pool, "check-apalis", 50, 10, 2).await?,
        ),
    ] {
        if drain.duplicates + drain.lost > 0 || drain.done != 50 {
            return Err(format!(
                "{name} check: {} duplicates, {} lost, {} done",
                drain.duplicates, drain.lost, drain.done
            )
            .into());
        }
        println!("- queue: {name} drained 50 jobs from PostgreSQL, each handled once, {} recorded done by the store", drain.done);
    }
    println!();

    pause_table(&tenure_pg, &tenure_redis, &pool, &redlock, db_url, run).await?;
    queue_table(options, &tenure_pg, &pool).await?;
    hot_key_table(options, &pairs, run).await?;
    latency_table(options, &pairs[..], run).await?;
    Ok(())
}

/// What a holder paused past its ttl meets, side by side.
async fn pause_table(
    tenure_pg: &Arc<dyn tenure::Store>,
    tenure_redis: &Arc<dyn tenure::Store>,
    pool: &apalis_postgres::PgPool,
    redlock: &rslock::LockManager,
    db_url: &str,
    run: &str,
) -> Result<()> {
    let key = format!("{run}:pause");
    let rows = [
        pause::tenure_lock("tenure lock (PostgreSQL)", tenure_pg, &key).await?,
        pause::advisory(db_url, &key).await?,
        pause::tenure_lock("tenure lock (Redis)", tenure_redis, &key).await?,
        pause::redlock(redlock, &key).await?,
        pause::tenure_job(tenure_pg, "pause-tenure").await?,
        pause::apalis_job(pool, "pause-apalis").await?,
    ];
    println!("## a holder paused past its ttl (300 ms ttl, 700 ms pause; nothing timed)\n");
    println!("| side | a second worker, after the ttl | the holder's renewal, after its pause | its release / completion | its token at a fence check after the second's |");
    println!("|---|---|---|---|---|");
    for row in rows {
        println!(
            "| {} | {} | {} | {} | {} |",
            row.side, row.second, row.renewal, row.release, row.fenced_write
        );
    }
    println!();
    Ok(())
}

/// One side of a pair, slice by slice, and the per-pair ratios.
#[derive(Default)]
struct Pair {
    tenure: Slices,
    peer: Slices,
    ratios: Slices,
}

impl Pair {
    fn add(&mut self, tenure: f64, peer: f64) {
        self.tenure.push(tenure);
        self.peer.push(peer);
        self.ratios.push(tenure / peer);
    }

    fn ratio(&self) -> String {
        let (low, high) = self.ratios.range();
        format!(
            "{:.2} ({low:.2}–{high:.2})",
            self.tenure.median() / self.peer.median()
        )
    }
}

/// `median (slowest–fastest)`.
fn spread(slices: &Slices) -> String {
    let (low, high) = slices.range();
    format!("{:.0} ({low:.0}–{high:.0})", slices.median())
}

async fn queue_table(
    options: &Options,
    store: &Arc<dyn tenure::Store>,
    pool: &apalis_postgres::PgPool,
) -> Result<()> {
    println!(
        "## queue: jobs/s, PostgreSQL, {} workers a side, {} rounds (median (slowest–fastest round))\n",
        options.queue_workers, options.rounds
    );
    println!("| jobs per claim | jobs per round | tenure | apalis | tenure ÷ apalis (per-round range) | duplicates tenure / apalis | lost tenure / apalis |");
    println!("|---|---|---|---|---|---|---|");
    for (batch, scale) in [(1, 1), (10, 4), (100, 10)] {
        let jobs = options.jobs * scale;
        let mut pair = Pair::default();
        let (mut duplicates, mut lost) = ([0u64; 2], [0u64; 2]);
        for round in 0..options.rounds {
            let (t_queue, a_queue) = (format!("t-{batch}-{round}"), format!("a-{batch}-{round}"));
            let workers = options.queue_workers;
            let (t, a) = if round % 2 == 0 {
                let t = queue::tenure(store, &t_queue, jobs, batch, workers).await?;
                (
                    t,
                    queue::apalis(pool, &a_queue, jobs, batch, workers).await?,
                )
            } else {
                let a = queue::apalis(pool, &a_queue, jobs, batch, workers).await?;
                (
                    queue::tenure(store, &t_queue, jobs, batch, workers).await?,
                    a,
                )
            };
            pair.add(t.jobs_per_sec, a.jobs_per_sec);
            for (side, drain) in [t, a].iter().enumerate() {
                duplicates[side] += drain.duplicates;
                lost[side] += drain.lost;
            }
        }
        println!(
            "| {batch} | {jobs} | {} | {} | {} | {} / {} | {} / {} |",
            spread(&pair.tenure),
            spread(&pair.peer),
            pair.ratio(),
            duplicates[0],
            duplicates[1],
            lost[0],
            lost[1]
        );
    }
    println!("\ntenure: each worker `claim(ClaimRequest::new(q, worker, 120 s).limit(n))`, then one `complete_many` of the n claims.");
    println!(
        "apalis, at n jobs per claim: {}.\n",
        queue::apalis_setup("n")
    );
    Ok(())
}

async fn hot_key_table(
    options: &Options,
    pairs: &[(&str, Kind, &str, Kind)],
    run: &str,
) -> Result<()> {
    let cell = Duration::from_millis(options.cell_ms);
    println!(
        "## hot key: acquisitions/s, M = 1 key, N = {} workers, hold {:?}, {} slices of {cell:?} a side; ceiling {:.0}/s\n",
        options.hot_workers,
        locks::HOLD,
        options.slices,
        1.0 / locks::HOLD.as_secs_f64()
    );
    println!("| store | tenure acq/s | Jain | peer | peer acq/s | Jain | tenure ÷ peer (per-pair range) | overlaps |");
    println!("|---|---|---|---|---|---|---|---|");
    for (store, tenure_side, peer, peer_side) in pairs {
        let (mut pair, mut jain, mut overlaps) =
            (Pair::default(), [Slices::default(), Slices::default()], 0);
        for slice in 0..options.slices {
            let key = format!("{run}:hot");
            let (t, p) = if slice % 2 == 0 {
                let t = locks::race(tenure_side, &key, options.hot_workers, cell).await?;
                (
                    t,
                    locks::race(peer_side, &key, options.hot_workers, cell).await?,
                )
            } else {
                let p = locks::race(peer_side, &key, options.hot_workers, cell).await?;
                (
                    locks::race(tenure_side, &key, options.hot_workers, cell).await?,
                    p,
                )
            };
            pair.add(t.acquisitions_per_sec, p.acquisitions_per_sec);
            jain[0].push(t.jain);
            jain[1].push(p.jain);
            overlaps += t.overlaps + p.overlaps;
        }
        println!(
            "| {store} | {} | {:.2} | {peer} | {} | {:.2} | {} | {overlaps} |",
            spread(&pair.tenure),
            jain[0].median(),
            spread(&pair.peer),
            jain[1].median(),
            pair.ratio()
        );
    }
    println!();
    Ok(())
}

async fn latency_table(
    options: &Options,
    pairs: &[(&str, Kind, &str, Kind)],
    run: &str,
) -> Result<()> {
    println!(
        "## single lock, uncontended: acquire / release latency in µs, {} slices of {} pairs a side (p50 slice range in brackets)\n",
        options.slices, options.latency_ops
    );
    println!("| store | tenure acquire p50 / p99 | tenure release p50 / p99 | peer | peer acquire p50 / p99 | peer release p50 / p99 | acquire p50, tenure ÷ peer |");
    println!("|---|---|---|---|---|---|---|");
    for (store, tenure_side, peer, peer_side) in pairs {
        if matches!(peer_side, Kind::AdvisoryBlocking(_)) {
            continue; // uncontended, `acquire` and `try_acquire` are the same round trip
        }
        let key = format!("{run}:latency");
        let mut all = [locks::Latency::default(), locks::Latency::default()];
        let mut p50s = [Slices::default(), Slices::default()];
        for slice in 0..options.slices {
            let order = if slice % 2 == 0 { [0, 1] } else { [1, 0] };
            for side in order {
                let kind = if side == 0 { tenure_side } else { peer_side };
                let figures = locks::latency(kind, &key, options.latency_ops).await?;
                p50s[side].push(figures.acquire.p(50.0));
                all[side].acquire.extend(figures.acquire);
                all[side].release.extend(figures.release);
            }
        }
        let cell =
            |latencies: &Latencies| format!("{:.0} / {:.0}", latencies.p(50.0), latencies.p(99.0));
        let [t, p] = &all;
        println!(
            "| {store} | {} ({}) | {} | {peer} | {} ({}) | {} | {:.2} |",
            cell(&t.acquire),
            range(&p50s[0]),
            cell(&t.release),
            cell(&p.acquire),
            range(&p50s[1]),
            cell(&p.release),
            t.acquire.p(50.0) / p.acquire.p(50.0)
        );
    }
    Ok(())
}

fn range(slices: &Slices) -> String {
    let (low, high) = slices.range();
    format!("{low:.0}–{high:.0}")
}

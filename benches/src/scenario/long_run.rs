//! long-run: is throughput steady as the tables grow? Consecutive rounds on
//! one store, nothing truncated or purged between them: each round enqueues
//! and drains a queue (claim of one + `complete`, like `queue`) and runs a
//! lock workload (admit a fresh id + renew + succeed, 8 workers, each on its
//! own scope), so every round starts on the finished jobs and leases of all
//! the rounds before it. The figure is each round's throughput and the last
//! round's ÷ the first's.
//!
//! On PostgreSQL the rounds run three times, each in a fresh schema: with
//! the schema's tables left to autovacuum (`autovacuum_enabled = true`; the
//! server's own `autovacuum` setting decides whether the daemon runs at
//! all, and is reported), with autovacuum off for them (`ALTER TABLE … SET
//! (autovacuum_enabled = false)`, as on many test servers), and off with a
//! `VACUUM (ANALYZE)` of the schema's tables after each round (what the
//! daemon would do, for servers where it is off). Only the benchmark's own
//! tables are touched, never a server setting. Each pass reports
//! `pg_stat_user_tables` of the schema's tables over its rounds (sequential
//! scans, the tuples they read, HOT updates). Elsewhere the rounds run once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use tenure_lease_core::{
    Admission, AdmitRequest, Claim, LeaseStore, Renewal, StatusChange, Transition,
};

use super::queue::{drain, enqueue_jobs, Drainer, Mode, Tally};
use crate::backend::{self, Backend, Probe, TableStat};
use crate::options::{BackendKind, Options};
use crate::progress::Progress;
use crate::stats::ratio;
use crate::BenchResult;

/// Workers of the lock workload.
const ADMISSION_WORKERS: usize = 8;
const TTL: Duration = Duration::from_secs(120);
/// How long PostgreSQL may keep an idle session's statistics before it
/// reports them (`PGSTAT_IDLE_INTERVAL`, 10 s), plus a margin: waited
/// before the last read of `pg_stat_user_tables`.
const STATS_FLUSH: Duration = Duration::from_millis(11_000);

/// How a pass treats the tables between rounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Vacuum {
    /// No setting: the store has no such thing (memory, SQLite, Redis, etcd).
    NotApplicable,
    /// `autovacuum_enabled = true` on the schema's tables.
    AutovacuumOn,
    /// `autovacuum_enabled = false` on the schema's tables.
    AutovacuumOff,
    /// Autovacuum off, and `VACUUM (ANALYZE)` of the schema's tables after
    /// every round.
    VacuumEachRound,
}

impl Vacuum {
    /// The name used in the tables.
    pub fn name(self) -> &'static str {
        match self {
            Vacuum::NotApplicable => "-",
            Vacuum::AutovacuumOn => "autovacuum on",
            Vacuum::AutovacuumOff => "autovacuum off",
            Vacuum::VacuumEachRound => "VACUUM each round",
        }
    }
}

/// One round's figures.
#[derive(Debug, Clone, Serialize)]
pub struct LongRunRound {
    /// Jobs drained per second.
    pub queue_jobs_per_sec: f64,
    /// admit + renew + succeed cycles per second.
    pub admissions_per_sec: f64,
    /// Jobs completed in the round (must be the round's jobs).
    pub jobs_completed: u64,
    /// Jobs completed twice (must be 0).
    pub duplicates: u64,
    /// Completions refused (must be 0).
    pub refused_completions: u64,
    /// Cycles whose admission, renewal or transition did not succeed (must
    /// be 0: every worker has a scope of its own).
    pub failed_cycles: u64,
    /// On PostgreSQL, before the round's drain (its jobs enqueued) and
    /// after its admissions: what the claim's index walk to the first
    /// queued job and a holder read cost (`EXPLAIN (ANALYZE, BUFFERS)`).
    pub probe: Option<Probe>,
}

/// One pass of the rounds.
#[derive(Debug, Clone, Serialize)]
pub struct LongRunPass {
    /// How the tables were vacuumed.
    pub vacuum: Vacuum,
    /// Each round, in order.
    pub rounds: Vec<LongRunRound>,
    /// Queue jobs/s of the last round ÷ the first.
    pub queue_last_to_first: Option<f64>,
    /// Admissions/s of the last round ÷ the first.
    pub admissions_last_to_first: Option<f64>,
    /// `pg_stat_user_tables` of the schema's tables, counted over the rounds
    /// (row estimates as of the end); empty off PostgreSQL.
    pub tables: Vec<TableStat>,
}

/// The long-run report.
#[derive(Debug, Clone, Serialize)]
pub struct LongRunReport {
    /// Rounds per pass.
    pub rounds: usize,
    /// Jobs per round.
    pub jobs_per_round: usize,
    /// Queue workers.
    pub queue_workers: usize,
    /// admit + renew + succeed cycles per round.
    pub admissions_per_round: usize,
    /// Workers of the lock workload.
    pub admission_workers: usize,
    /// The server's `autovacuum` setting, where there is one (read, never
    /// changed).
    pub server_autovacuum: Option<String>,
    /// One pass per vacuum setting.
    pub passes: Vec<LongRunPass>,
}

/// Runs the scenario on `kind`, opening a fresh store for every pass.
pub async fn run(
    kind: BackendKind,
    options: &Options,
    progress: &Progress,
) -> BenchResult<LongRunReport> {
    let sizes = &options.sizes;
    let mut report = LongRunReport {
        rounds: sizes.long_run_rounds,
        jobs_per_round: sizes.long_run_jobs,
        queue_workers: sizes.queue_workers,
        admissions_per_round: sizes.long_run_admissions,
        admission_workers: ADMISSION_WORKERS,
        server_autovacuum: None,
        passes: Vec::new(),
    };
    let passes: &[Vacuum] = if kind == BackendKind::Postgres {
        &[
            Vacuum::AutovacuumOn,
            Vacuum::AutovacuumOff,
            Vacuum::VacuumEachRound,
        ]
    } else {
        &[Vacuum::NotApplicable]
    };
    for &vacuum in passes {
        let backend = backend::open(kind, options).await?;
        let pass = run_pass(&backend, options, vacuum, progress, &mut report).await;
        let cleaned = backend.cleanup().await;
        report.passes.push(pass?);
        cleaned?;
    }
    Ok(report)
}

async fn run_pass(
    backend: &Backend,
    options: &Options,
    vacuum: Vacuum,
    progress: &Progress,
    report: &mut LongRunReport,
) -> BenchResult<LongRunPass> {
    let sizes = &options.sizes;
    let tables = backend.tables.clone();
    if let Some(tables) = &tables {
        report.server_autovacuum = Some(tables.server_setting("autovacuum").await?);
        match vacuum {
            Vacuum::AutovacuumOn => tables.set_autovacuum(true).await?,
            Vacuum::AutovacuumOff | Vacuum::VacuumEachRound => {
                tables.set_autovacuum(false).await?;
            }
            Vacuum::NotApplicable => {}
        }
    }
    let before = match &tables {
        Some(tables) => tables.table_stats().await?,
        None => Vec::new(),
    };
    let drainer = Arc::new(Drainer::Tenure(backend.queue.clone()));
    let mut rounds = Vec::with_capacity(sizes.long_run_rounds);
    for round in 0..sizes.long_run_rounds {
        let label = format!("long-run {}: round {}", vacuum.name(), round + 1);
        progress.cell(format!("{label}, queue"));
        enqueue_jobs(
            &*backend.queue,
            "long-run",
            round * sizes.long_run_jobs,
            sizes.long_run_jobs,
        )
        .await?;
        let claim_probe = match &tables {
            Some(tables) => Some(tables.probe("long-run", "long-run-scope-0").await?),
            None => None,
        };
        let mut tally = Tally::default();
        drain(
            &drainer,
            "long-run",
            sizes.queue_workers,
            Mode::One,
            &mut tally,
        )
        .await?;
        let queue = tally.into_run();
        progress.cell(format!("{label}, admissions"));
        let (admissions_per_sec, failed_cycles) =
            admissions(&backend.store, round, sizes.long_run_admissions).await?;
        let probe = match (&tables, claim_probe) {
            (Some(tables), Some(claim)) => {
                let holder = tables.probe("long-run", "long-run-scope-0").await?;
                Some(Probe {
                    holder_buffers: holder.holder_buffers,
                    holder_us: holder.holder_us,
                    ..claim
                })
            }
            _ => None,
        };
        rounds.push(LongRunRound {
            queue_jobs_per_sec: queue.jobs_per_sec,
            admissions_per_sec,
            jobs_completed: queue.completed,
            duplicates: queue.duplicates,
            refused_completions: queue.refused_completions,
            failed_cycles,
            probe,
        });
        if let (Some(tables), Vacuum::VacuumEachRound) = (&tables, vacuum) {
            progress.cell(format!("{label}, VACUUM (ANALYZE)"));
            tables.vacuum().await?;
        }
    }
    let tables = match &tables {
        Some(tables) => {
            progress.cell(format!(
                "long-run {}: waiting for the statistics",
                vacuum.name()
            ));
            tokio::time::sleep(STATS_FLUSH).await;
            tables
                .table_stats()
                .await?
                .iter()
                .map(|after| after.since(before.iter().find(|row| row.table == after.table)))
                .collect()
        }
        None => Vec::new(),
    };
    let last_to_first = |figure: fn(&LongRunRound) -> f64| match (rounds.first(), rounds.last()) {
        (Some(first), Some(last)) => ratio(figure(last), figure(first)),
        _ => None,
    };
    Ok(LongRunPass {
        vacuum,
        queue_last_to_first: last_to_first(|round| round.queue_jobs_per_sec),
        admissions_last_to_first: last_to_first(|round| round.admissions_per_sec),
        rounds,
        tables,
    })
}

/// `cycles` admit + renew + succeed cycles by [`ADMISSION_WORKERS`] workers,
/// each on a scope of its own; answers cycles/s and the cycles that did not
/// go through.
async fn admissions(
    store: &Arc<dyn LeaseStore>,
    round: usize,
    cycles: usize,
) -> BenchResult<(f64, u64)> {
    let started = Instant::now();
    let tasks: Vec<_> = (0..ADMISSION_WORKERS)
        .map(|worker| {
            let store = Arc::clone(store);
            let share =
                cycles / ADMISSION_WORKERS + usize::from(worker < cycles % ADMISSION_WORKERS);
            tokio::spawn(async move {
                let owner = format!("long-run-{worker}");
                let mut failed = 0_u64;
                for cycle in 0..share {
                    let request =
                        AdmitRequest::new(format!("lr-{round}-{worker}-{cycle}"), owner.as_str())
                            .ttl(TTL)
                            .scope(format!("long-run-scope-{worker}"));
                    let Admission::Admitted { record, .. } = store.admit(&request).await? else {
                        failed += 1;
                        continue;
                    };
                    let claim = Claim::new(record.id.as_str(), owner.as_str(), record.fence);
                    let renewed = store.renew(&claim, TTL).await?;
                    let done = store.transition(&claim, &StatusChange::succeeded()).await?;
                    if !matches!(renewed, Renewal::Renewed { .. })
                        || !matches!(done, Transition::Applied(_))
                    {
                        failed += 1;
                    }
                }
                Ok::<_, crate::BenchError>(failed)
            })
        })
        .collect();
    let mut failed = 0;
    for task in tasks {
        failed += task.await??;
    }
    let seconds = started.elapsed().as_secs_f64().max(f64::MIN_POSITIVE);
    Ok((cycles as f64 / seconds, failed))
}

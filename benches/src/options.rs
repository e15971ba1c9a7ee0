//! Command-line options, parsed by hand (a dozen flags do not need a parser
//! crate), and the sizes each scenario runs at.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;
use tenure_lease_core::redact::redact_url;

/// The environment variable naming the PostgreSQL server.
pub const PG_URL_VAR: &str = "TENURE_PG_URL";
/// The environment variable naming the Redis server.
pub const REDIS_URL_VAR: &str = "TENURE_REDIS_URL";
/// The environment variable naming the etcd cluster (`etcd://host:port,...`).
pub const ETCD_URL_VAR: &str = "TENURE_ETCD_URL";
/// The environment variable naming the MySQL server
/// (`mysql://user@host:port/database`; the runs create databases of their
/// own beside it).
pub const MYSQL_URL_VAR: &str = "TENURE_MYSQL_URL";

/// The usage text `--help` prints.
pub const USAGE: &str = "\
usage: benches [options]

With no options: every scenario on the embedded default (SQLite in a temp
file) and on memory, about a minute, figures as ratios to a raw baseline
measured in the same run.

  --backend B     memory | sqlite | postgres | redis | etcd | mysql | all
                  (repeatable, or a comma list); default memory,sqlite.
                  postgres, redis, etcd and mysql read TENURE_PG_URL /
                  TENURE_REDIS_URL / TENURE_ETCD_URL / TENURE_MYSQL_URL (or
                  --pg-url / --redis-url / --etcd-url / --mysql-url); `all`
                  skips a server whose URL is not set
  --scenario S    single-op | scaling | hot-key | queue | heartbeat-scale |
                  takeover | queue-batch | long-run (repeatable, or a comma
                  list); default the first six, and queue-batch with --full.
                  queue-batch: claim batches of 1, 10, 100 completed with
                  complete_many, against the bare batch claim; long-run: 10
                  rounds of queue and admissions on growing tables (on
                  PostgreSQL with autovacuum on, off, and a VACUUM between
                  rounds), never run unless named
  --quick         tiny sizes: a few seconds per backend
  --full          the whole matrix (more worker counts, longer cells, 10k
                  heartbeat leases, queue-batch): a few minutes per backend
  --huge          heartbeat-scale also holds 1M leases at a 60 s ttl
  --hot-workers N hot-key worker counts, a comma list (e.g. 2,8,32; default 8;
                  at most 40): every cell runs once per count
  --out DIR       where the JSON and SVG files go (default target/bench-results)
  --pg-url URL    PostgreSQL server (overrides TENURE_PG_URL)
  --redis-url URL Redis server (overrides TENURE_REDIS_URL)
  --etcd-url URL  etcd cluster, etcd://host:port,host:port,... (overrides
                  TENURE_ETCD_URL)
  --mysql-url URL MySQL or MariaDB server, mysql://user@host:port/database
                  (overrides TENURE_MYSQL_URL)
  --redis-floor   Redis's baselines become the script floors instead of the
                  bare commands: an admission, a fenced renewal, a
                  transition, a takeover, a claim and a completion doing
                  the least tenure's must on its own layout (a fence with
                  its failover check, the indexes its reads need, the
                  record answered where tenure answers it), to tell the
                  layout's cost from the scripts'
  --no-progress   never show the progress bar
  -h, --help      this text
";

/// A backend the benchmark can run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// `backend-memory`.
    Memory,
    /// `backend-sqlite`, in a temporary file.
    Sqlite,
    /// `backend-postgres`, in a fresh schema.
    Postgres,
    /// `backend-redis`, in a fresh namespace.
    Redis,
    /// `backend-etcd`, under a fresh key prefix.
    Etcd,
    /// `backend-mysql`, in a fresh database.
    Mysql,
}

impl BackendKind {
    /// Every backend, embedded first.
    pub const ALL: [BackendKind; 6] = [
        BackendKind::Memory,
        BackendKind::Sqlite,
        BackendKind::Postgres,
        BackendKind::Redis,
        BackendKind::Etcd,
        BackendKind::Mysql,
    ];

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Memory => "memory",
            BackendKind::Sqlite => "sqlite",
            BackendKind::Postgres => "postgres",
            BackendKind::Redis => "redis",
            BackendKind::Etcd => "etcd",
            BackendKind::Mysql => "mysql",
        }
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A benchmark scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ScenarioKind {
    /// admit, renew, transition, takeover; one worker.
    SingleOp,
    /// renew with 1..32 concurrent workers on distinct keys.
    Scaling,
    /// N workers racing for M scopes.
    HotKey,
    /// claim + complete of K jobs by N workers.
    Queue,
    /// one keeper renewing thousands of leases.
    HeartbeatScale,
    /// an owner killed at a random point and replaced.
    Takeover,
    /// claim batches of 1, 10 and 100 completed with `complete_many`.
    QueueBatch,
    /// consecutive rounds of queue and admissions on growing tables.
    LongRun,
}

impl ScenarioKind {
    /// Every scenario, in report order.
    pub const ALL: [ScenarioKind; 8] = [
        ScenarioKind::SingleOp,
        ScenarioKind::Scaling,
        ScenarioKind::HotKey,
        ScenarioKind::Queue,
        ScenarioKind::HeartbeatScale,
        ScenarioKind::Takeover,
        ScenarioKind::QueueBatch,
        ScenarioKind::LongRun,
    ];

    /// What a run without `--scenario` runs (`--full` adds
    /// [`ScenarioKind::QueueBatch`]; [`ScenarioKind::LongRun`] runs only
    /// when named).
    pub const STANDARD: [ScenarioKind; 6] = [
        ScenarioKind::SingleOp,
        ScenarioKind::Scaling,
        ScenarioKind::HotKey,
        ScenarioKind::Queue,
        ScenarioKind::HeartbeatScale,
        ScenarioKind::Takeover,
    ];

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            ScenarioKind::SingleOp => "single-op",
            ScenarioKind::Scaling => "scaling",
            ScenarioKind::HotKey => "hot-key",
            ScenarioKind::Queue => "queue",
            ScenarioKind::HeartbeatScale => "heartbeat-scale",
            ScenarioKind::Takeover => "takeover",
            ScenarioKind::QueueBatch => "queue-batch",
            ScenarioKind::LongRun => "long-run",
        }
    }
}

impl fmt::Display for ScenarioKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How big and how long every scenario runs.
#[derive(Debug, Clone, Serialize)]
pub struct Sizes {
    /// Length of each timed cell (one operation or one worker count).
    #[serde(rename = "cell_us", serialize_with = "crate::stats::serialize_us")]
    pub cell: Duration,
    /// Keys renewed per worker in `scaling`.
    pub keys_per_worker: usize,
    /// Worker counts of `scaling`.
    pub workers: Vec<usize>,
    /// Workers racing in `hot-key`.
    pub hot_workers: Vec<usize>,
    /// Scope counts of `hot-key`.
    pub hot_scopes: Vec<usize>,
    /// How long a `hot-key` winner holds its scope.
    #[serde(rename = "hold_us", serialize_with = "crate::stats::serialize_us")]
    pub hold: Duration,
    /// Jobs of `queue`.
    pub queue_jobs: usize,
    /// Workers of `queue` (and of `queue-batch`, and the queue of
    /// `long-run`).
    pub queue_workers: usize,
    /// What `queue-batch` drains: one entry per claim limit.
    pub queue_batches: Vec<QueueBatchSize>,
    /// Consecutive rounds of `long-run`.
    pub long_run_rounds: usize,
    /// Jobs enqueued and drained per round of `long-run`.
    pub long_run_jobs: usize,
    /// admit + renew + succeed cycles per round of `long-run`.
    pub long_run_admissions: usize,
    /// What `heartbeat-scale` holds, one run (or two) per entry.
    pub heartbeat: Vec<HeartbeatSize>,
    /// Beats measured per entry of `heartbeat-scale`.
    pub heartbeat_beats: u32,
    /// Owners killed in `takeover`.
    pub takeover_trials: usize,
    /// Lease length in `takeover`.
    #[serde(
        rename = "takeover_ttl_us",
        serialize_with = "crate::stats::serialize_us"
    )]
    pub takeover_ttl: Duration,
    /// Grace in `takeover`.
    #[serde(
        rename = "takeover_grace_us",
        serialize_with = "crate::stats::serialize_us"
    )]
    pub takeover_grace: Duration,
    /// The rival keeper's reconcile interval in `takeover`.
    #[serde(
        rename = "takeover_reconcile_interval_us",
        serialize_with = "crate::stats::serialize_us"
    )]
    pub takeover_reconcile_interval: Duration,
}

/// One entry of `queue-batch`: jobs drained at one claim limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct QueueBatchSize {
    /// Jobs per claim (and per `complete_many`).
    pub limit: usize,
    /// Jobs drained at this limit, by tenure and by raw each.
    pub jobs: usize,
}

impl QueueBatchSize {
    /// Claim limits 1, 10 and 100 draining `jobs` jobs each.
    fn three(jobs: [usize; 3]) -> Vec<QueueBatchSize> {
        [1, 10, 100]
            .into_iter()
            .zip(jobs)
            .map(|(limit, jobs)| QueueBatchSize { limit, jobs })
            .collect()
    }
}

/// One entry of `heartbeat-scale`: how many leases one keeper holds, for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct HeartbeatSize {
    /// Leases held.
    pub leases: usize,
    /// Their lease length (the beat is a third of it).
    #[serde(rename = "ttl_us", serialize_with = "crate::stats::serialize_us")]
    pub ttl: Duration,
    /// Whether a second run renews them one `renew` call per lease, to show
    /// what `renew_many` buys.
    pub compare_solo: bool,
}

impl HeartbeatSize {
    /// `--huge`: a million leases at a 60 s ttl, renewed in batches only
    /// (one call per lease cannot keep up at that size, and filling a second
    /// keeper would double the minutes spent admitting).
    pub const HUGE: HeartbeatSize = HeartbeatSize {
        leases: 1_000_000,
        ttl: Duration::from_secs(60),
        compare_solo: false,
    };

    /// `leases` at `ttl`, renewed both ways.
    pub fn compared(leases: usize, ttl: Duration) -> Self {
        HeartbeatSize {
            leases,
            ttl,
            compare_solo: true,
        }
    }
}

impl Sizes {
    /// The default run: about half a minute per embedded backend on an idle
    /// two-core machine; every scenario still measures each of its axes.
    pub fn standard() -> Self {
        Sizes {
            cell: Duration::from_millis(300),
            keys_per_worker: 8,
            workers: vec![1, 4, 16],
            hot_workers: vec![8],
            hot_scopes: vec![1, 4, 16],
            hold: Duration::from_millis(5),
            queue_jobs: 1000,
            queue_workers: 4,
            queue_batches: QueueBatchSize::three([1000, 4000, 12_000]),
            long_run_rounds: 10,
            long_run_jobs: 1000,
            long_run_admissions: 1000,
            heartbeat: vec![
                HeartbeatSize::compared(1_000, Duration::from_millis(1500)),
                HeartbeatSize::compared(3_000, Duration::from_millis(1500)),
            ],
            heartbeat_beats: 3,
            takeover_trials: 5,
            takeover_ttl: Duration::from_millis(300),
            takeover_grace: Duration::from_millis(100),
            takeover_reconcile_interval: Duration::from_millis(10),
        }
    }

    /// `--full`: the whole matrix, a few minutes per backend.
    pub fn full() -> Self {
        Sizes {
            cell: Duration::from_millis(800),
            keys_per_worker: 8,
            workers: vec![1, 2, 4, 8, 16, 32],
            hot_workers: vec![8],
            hot_scopes: vec![1, 4, 16],
            hold: Duration::from_millis(5),
            queue_jobs: 2000,
            queue_workers: 4,
            queue_batches: QueueBatchSize::three([2000, 8000, 24_000]),
            long_run_rounds: 10,
            long_run_jobs: 2000,
            long_run_admissions: 2000,
            heartbeat: vec![
                HeartbeatSize::compared(1_000, Duration::from_secs(3)),
                HeartbeatSize::compared(10_000, Duration::from_secs(3)),
            ],
            heartbeat_beats: 3,
            takeover_trials: 8,
            takeover_ttl: Duration::from_millis(300),
            takeover_grace: Duration::from_millis(100),
            takeover_reconcile_interval: Duration::from_millis(10),
        }
    }

    /// `--quick`: a few seconds per backend; the figures are rough.
    pub fn quick() -> Self {
        Sizes {
            cell: Duration::from_millis(150),
            keys_per_worker: 4,
            workers: vec![1, 4, 16],
            hot_workers: vec![4],
            hot_scopes: vec![1, 4],
            hold: Duration::from_millis(2),
            queue_jobs: 200,
            queue_workers: 4,
            queue_batches: QueueBatchSize::three([200, 800, 2400]),
            long_run_rounds: 10,
            long_run_jobs: 200,
            long_run_admissions: 200,
            heartbeat: vec![
                HeartbeatSize::compared(100, Duration::from_millis(900)),
                HeartbeatSize::compared(1_000, Duration::from_millis(900)),
            ],
            heartbeat_beats: 2,
            takeover_trials: 3,
            takeover_ttl: Duration::from_millis(100),
            takeover_grace: Duration::from_millis(30),
            takeover_reconcile_interval: Duration::from_millis(5),
        }
    }

    /// The smoke test's sizes: every code path, no meaningful figure.
    pub fn tiny() -> Self {
        Sizes {
            cell: Duration::from_millis(40),
            keys_per_worker: 2,
            workers: vec![1, 3],
            hot_workers: vec![2, 3],
            hot_scopes: vec![1, 2],
            hold: Duration::from_millis(1),
            queue_jobs: 30,
            queue_workers: 3,
            queue_batches: QueueBatchSize::three([30, 60, 300]),
            long_run_rounds: 2,
            long_run_jobs: 30,
            long_run_admissions: 30,
            heartbeat: vec![HeartbeatSize::compared(40, Duration::from_millis(600))],
            heartbeat_beats: 1,
            takeover_trials: 1,
            takeover_ttl: Duration::from_millis(60),
            takeover_grace: Duration::from_millis(20),
            takeover_reconcile_interval: Duration::from_millis(5),
        }
    }
}

/// Everything a run needs to know. `Debug` never prints a password of the
/// server URLs.
#[derive(Clone)]
pub struct Options {
    /// Backends to run, in order.
    pub backends: Vec<BackendKind>,
    /// Whether the backends came from `all` (a server without a URL is then
    /// skipped with a note instead of failing the run).
    pub skip_unconfigured: bool,
    /// Scenarios to run, in order.
    pub scenarios: Vec<ScenarioKind>,
    /// How big.
    pub sizes: Sizes,
    /// Name of the size preset, for the report.
    pub preset: &'static str,
    /// Where the JSON and SVG files go.
    pub out_dir: PathBuf,
    /// PostgreSQL server URL.
    pub pg_url: Option<String>,
    /// Redis server URL.
    pub redis_url: Option<String>,
    /// etcd cluster URL.
    pub etcd_url: Option<String>,
    /// MySQL server URL.
    pub mysql_url: Option<String>,
    /// Whether Redis's baselines are the script floors (`--redis-floor`)
    /// rather than the bare commands.
    pub redis_floor: bool,
    /// Whether a progress bar may be shown (it is hidden anyway when stdout
    /// is not a terminal).
    pub progress: bool,
}

impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let redacted = |url: &Option<String>| url.as_deref().map(redact_url);
        f.debug_struct("Options")
            .field("backends", &self.backends)
            .field("skip_unconfigured", &self.skip_unconfigured)
            .field("scenarios", &self.scenarios)
            .field("sizes", &self.sizes)
            .field("preset", &self.preset)
            .field("out_dir", &self.out_dir)
            .field("pg_url", &redacted(&self.pg_url))
            .field("redis_url", &redacted(&self.redis_url))
            .field("etcd_url", &redacted(&self.etcd_url))
            .field("mysql_url", &redacted(&self.mysql_url))
            .field("redis_floor", &self.redis_floor)
            .field("progress", &self.progress)
            .finish()
    }
}

impl Options {
    /// The no-argument run: memory and SQLite, every scenario, standard sizes.
    pub fn standard() -> Self {
        Options {
            backends: vec![BackendKind::Memory, BackendKind::Sqlite],
            skip_unconfigured: false,
            scenarios: ScenarioKind::STANDARD.to_vec(),
            sizes: Sizes::standard(),
            preset: "standard",
            out_dir: PathBuf::from("target/bench-results"),
            pg_url: non_empty_var(PG_URL_VAR),
            redis_url: non_empty_var(REDIS_URL_VAR),
            etcd_url: non_empty_var(ETCD_URL_VAR),
            mysql_url: non_empty_var(MYSQL_URL_VAR),
            redis_floor: false,
            progress: true,
        }
    }
}

/// What the command line asked for.
#[derive(Debug)]
pub enum Command {
    /// Run the benchmark.
    Run(Box<Options>),
    /// Print [`USAGE`].
    Help,
}

/// Parses the arguments (without the program name).
pub fn parse<I>(args: I) -> Result<Command, String>
where
    I: IntoIterator<Item = String>,
{
    let mut options = Options::standard();
    let mut backends: Vec<BackendKind> = Vec::new();
    let mut scenarios: Vec<ScenarioKind> = Vec::new();
    let mut huge = false;
    let mut full = false;
    let mut hot_workers = None;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => {
                (flag.to_owned(), Some(value.to_owned()))
            }
            _ => (arg.clone(), None),
        };
        let mut value = |name: &str| {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match flag.as_str() {
            "-h" | "--help" => return Ok(Command::Help),
            "--quick" => {
                options.sizes = Sizes::quick();
                options.preset = "quick";
            }
            "--full" => {
                options.sizes = Sizes::full();
                options.preset = "full";
                full = true;
            }
            "--huge" => huge = true,
            "--hot-workers" => {
                hot_workers = Some(
                    value("--hot-workers")?
                        .split(',')
                        .map(worker_count)
                        .collect::<Result<Vec<_>, _>>()?,
                );
            }
            "--no-progress" => options.progress = false,
            "--redis-floor" => options.redis_floor = true,
            "--out" => options.out_dir = PathBuf::from(value("--out")?),
            "--pg-url" => options.pg_url = Some(value("--pg-url")?),
            "--redis-url" => options.redis_url = Some(value("--redis-url")?),
            "--etcd-url" => options.etcd_url = Some(value("--etcd-url")?),
            "--mysql-url" => options.mysql_url = Some(value("--mysql-url")?),
            "--backend" => {
                for name in value("--backend")?.split(',') {
                    if name == "all" {
                        options.skip_unconfigured = true;
                        backends.extend(BackendKind::ALL);
                    } else {
                        backends.push(find(&BackendKind::ALL, name, BackendKind::name, "backend")?);
                    }
                }
            }
            "--scenario" => {
                for name in value("--scenario")?.split(',') {
                    scenarios.push(find(
                        &ScenarioKind::ALL,
                        name,
                        ScenarioKind::name,
                        "scenario",
                    )?);
                }
            }
            other => return Err(format!("unknown argument {other:?}\n\n{USAGE}")),
        }
    }
    if !backends.is_empty() {
        dedup(&mut backends);
        options.backends = backends;
    }
    if !scenarios.is_empty() {
        dedup(&mut scenarios);
        options.scenarios = scenarios;
    } else if full {
        options.scenarios.push(ScenarioKind::QueueBatch);
    }
    if huge {
        options.sizes.heartbeat.push(HeartbeatSize::HUGE);
    }
    if let Some(mut counts) = hot_workers {
        dedup(&mut counts);
        options.sizes.hot_workers = counts;
    }
    Ok(Command::Run(Box::new(options)))
}

/// Most workers one hot-key cell may race: on PostgreSQL each holds two
/// connections, and a default server allows 100.
const MAX_HOT_WORKERS: usize = 40;

fn worker_count(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(count) if (1..=MAX_HOT_WORKERS).contains(&count) => Ok(count),
        _ => Err(format!(
            "--hot-workers takes counts from 1 to {MAX_HOT_WORKERS}, got {text:?}"
        )),
    }
}

fn find<T: Copy>(
    all: &[T],
    name: &str,
    name_of: fn(T) -> &'static str,
    what: &str,
) -> Result<T, String> {
    all.iter()
        .copied()
        .find(|item| name_of(*item) == name.trim())
        .ok_or_else(|| {
            let known: Vec<&str> = all.iter().map(|item| name_of(*item)).collect();
            format!(
                "unknown {what} {name:?}; expected one of {}",
                known.join(", ")
            )
        })
}

fn dedup<T: PartialEq + Copy>(items: &mut Vec<T>) {
    let mut seen = Vec::with_capacity(items.len());
    items.retain(|item| {
        let fresh = !seen.contains(item);
        seen.push(*item);
        fresh
    });
}

fn non_empty_var(name: &str) -> Option<String> {
    std::env::var(name)
        .ok()
        .filter(|value| !value.trim().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Options {
        match parse(args.iter().map(std::string::ToString::to_string)) {
            Ok(Command::Run(options)) => *options,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn no_arguments_run_the_embedded_default() {
        let options = run(&[]);
        assert_eq!(options.backends, [BackendKind::Memory, BackendKind::Sqlite]);
        assert_eq!(options.scenarios, ScenarioKind::STANDARD);
    }

    #[test]
    fn full_adds_queue_batch_and_long_run_runs_only_when_named() {
        let full = run(&["--full"]);
        assert!(full.scenarios.contains(&ScenarioKind::QueueBatch));
        assert!(!full.scenarios.contains(&ScenarioKind::LongRun));
        let alone = run(&["--scenario", "queue-batch"]);
        assert_eq!(alone.scenarios, [ScenarioKind::QueueBatch]);
        let long = run(&["--full", "--scenario=long-run"]);
        assert_eq!(long.scenarios, [ScenarioKind::LongRun]);
    }

    #[test]
    fn lists_and_repeats_are_accepted_once_each() {
        let options = run(&[
            "--backend",
            "redis,sqlite",
            "--backend=redis",
            "--scenario",
            "queue",
            "--quick",
        ]);
        assert_eq!(options.backends, [BackendKind::Redis, BackendKind::Sqlite]);
        assert_eq!(options.scenarios, [ScenarioKind::Queue]);
        assert_eq!(options.preset, "quick");
        assert!(!options.redis_floor);
        assert!(run(&["--redis-floor"]).redis_floor);
        assert!(parse(["--backend".to_owned(), "oracle".to_owned()]).is_err());
        assert!(parse(["--out".to_owned()]).is_err());
    }

    #[test]
    fn hot_worker_counts_survive_a_later_preset_and_are_bounded() {
        let options = run(&["--hot-workers", "2,8,32,8", "--quick"]);
        assert_eq!(options.sizes.hot_workers, [2, 8, 32]);
        for bad in ["0", "41", "two", ""] {
            let args = ["--hot-workers".to_owned(), bad.to_owned()];
            assert!(parse(args).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn debug_never_prints_a_server_password() {
        let options = run(&[
            "--pg-url",
            "postgres://app:pa/ss@db/jobs",
            "--redis-url",
            "redis://:h@nter?2@cache:6379",
        ]);
        let shown = format!("{options:?}");
        for secret in ["pa/ss", "h@nter?2"] {
            assert!(!shown.contains(secret), "{shown}");
        }
        assert!(shown.contains("cache:6379"), "{shown}");
    }
}

//! # tenure-cli
//!
//! `tenure`, the operator command line for [`tenure`] stores: for the
//! person on call, to see who holds what, repair what a crashed worker left
//! behind, and check a deployment, on any backend a URL names (`memory:`,
//! `sqlite:PATH`, `postgres://...`, `redis://...`, `etcd://...`,
//! `mysql://...`, as [`tenure::connect`] reads them).
//!
//! ```text
//! tenure --url postgres://app@db/jobs?schema=tenure leases --expired
//! TENURE_URL=redis://cache:6379 tenure take-over run-42 --fail "host lost"
//! tenure --url sqlite:/var/lib/app/leases.db purge --older-than 7d --dry-run --queue emails
//! tenure release run-42 --owner tenure-cli --fence 17   # give an adopted lease up
//! tenure cancel run-43                                  # only once its owner's lease has ended
//! tenure retry --all --queue emails                     # every dead letter of the queue
//! ```
//!
//! The store's URL comes from `--url`, or from the environment variable
//! `TENURE_URL` when `--url` is not given (`--url` wins). Every message
//! prints it with its password replaced by `***` ([`tenure::redact_url`]).
//!
//! The commands never change a PostgreSQL schema (they connect with
//! [`Connect::migrate_schema(false)`](tenure::Connect::migrate_schema)),
//! except `migrate`, and never create a SQLite file, except `migrate`: a
//! mistyped URL answers an error instead of an empty new store.
//!
//! `tenure serve` is the same for a browser: a web view of the store on
//! loopback, read-only unless `--allow-write`, whose actions need a token,
//! a CSRF token and a confirmation ([`serve`]).
//!
//! `tenure check-history FILE` needs no store: it judges a history of store
//! calls recorded by the conformance kit ([`tenure::conformance::history`],
//! one JSON entry a line; `-` reads standard input) against the contract's
//! safety properties, and exits 1 when the history breaks one.
//!
//! The read-only commands (`leases`, `show`, `jobs`, `watch`) still read a
//! store that fails a deployment check it can be read despite (a Redis
//! server whose eviction policy may evict keys), with a warning on stderr
//! naming the check; every command that writes refuses it.
//!
//! Exit codes: 0 done; 1 not found or refused (no such id, a takeover the
//! store declined, a failed deployment check, a schema this version does
//! not know, a history that breaks a safety property); 2 usage (a bad
//! argument, duration, JSON payload, or URL, a history file that cannot be
//! read); 3 the store is unavailable or did not answer in time (retry when
//! it is back).
//!
//! The binary calls [`main`]; the commands are described by `tenure --help`
//! and `tenure <command> --help`.

use std::fmt::Write as _;
use std::io::{IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, CommandFactory as _, Parser, Subcommand};
use tenure::conformance::history;
use tenure::queue::{Enqueued, Job, JobState, NewJob, UniquePolicy};
use tenure::{
    Claim, Connect, ErrorKind, ExpiredQuery, LeaseRecord, Status, Store, TakeoverRequest,
    Timestamp, Verdict,
};

mod operations;
pub mod serve;
mod table;

use table::Table;

/// The environment variable that names the store when `--url` does not.
pub const URL_VAR: &str = "TENURE_URL";

/// Exit code: not found, or refused.
const EXIT_REFUSED: u8 = 1;
/// Exit code: bad usage (clap's own for a bad argument).
const EXIT_USAGE: u8 = 2;
/// Exit code: the store is unavailable.
const EXIT_UNAVAILABLE: u8 = 3;

/// The stop reason `release` writes unless given one.
const RELEASED_REASON: &str = "released by an operator (tenure release)";

/// Inspect and repair the leases and jobs of a tenure store.
#[derive(Debug, Parser)]
#[command(name = "tenure", version, about, long_about = None)]
#[command(
    after_help = "The read-only commands (leases, show, jobs, watch) still read a store \
                        that fails a deployment check it can be read despite (a Redis server \
                        that may evict keys), with a warning on stderr naming the check; the \
                        commands that write refuse it.\n\n\
                        Exit codes: 0 done, 1 not found or refused (or a history \
                        that breaks a safety property), 2 usage, 3 store unavailable \
                        (retry when it is back)."
)]
struct Cli {
    /// The store: memory:, sqlite:PATH, postgres://..., redis://..., etcd://...,
    /// mysql://... (?schema= for PostgreSQL, ?namespace= for Redis). Wins over
    /// TENURE_URL.
    #[arg(long, env = URL_VAR, global = true, hide_env_values = true)]
    url: Option<String>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List lease records: the active ones by default.
    Leases(LeasesArgs),
    /// Show one lease record, or the job with that id.
    Show {
        /// The lease's or job's id.
        id: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Take over an orphaned lease whose owner's lease has ended: mark it
    /// failed, or adopt it under a new lease. Prints the new fence.
    #[command(name = "take-over")]
    TakeOver(TakeOverArgs),
    /// Give up a lease at once, fenced: write it `interrupted` under its
    /// claim (ID, --owner, --fence), freeing its scopes now instead of when
    /// its lease ends.
    ///
    /// For a run adopted with `take-over --adopt` (which prints the fence
    /// and owner to give here), or any lease whose claim you hold. It is
    /// the store's fenced status write (`LeaseStore::transition`, contract
    /// §5): `interrupted` is "given up", stopped by its owner, not
    /// finished: it frees every scope at once, nobody owns it, it is never
    /// renewed, adopted or taken over again, and `purge` removes it like a
    /// finished record. A record still `pending` cannot be interrupted
    /// (contract §5) and is written `failed` instead, with the same stop
    /// reason.
    ///
    /// The write applies only while the claim still holds the record: a
    /// stale fence or owner (someone took it over since), a record already
    /// finished or interrupted, or no record answers exit 1, nothing
    /// changed.
    Release(ReleaseArgs),
    /// Cancel a run whose owner's lease has ended: take it over and mark
    /// it failed, stop reason `cancelled`. A live holder is refused.
    ///
    /// The stores have no safe way to stop a run whose owner still holds a
    /// valid lease from outside that owner: a fenced write needs the
    /// owner's claim, and overwriting it would leave two workers believing
    /// they own the run. So `cancel` does what the keeper's
    /// `Keeper::cancel_anywhere` does for a run held elsewhere: one atomic
    /// `claim_for_takeover` that succeeds only when the owner's lease has
    /// ended (plus --grace), failing the record under a new, greater fence,
    /// so the old owner's writes are refused from then on. A live owner
    /// answers exit 1 with how long its lease still runs (cancel it where
    /// it runs, with `Keeper::cancel`, or use `release` with its claim);
    /// a finished or interrupted record, or no record, answers exit 1.
    /// Nothing changes on a refusal.
    Cancel(CancelArgs),
    /// Delete finished lease records and jobs older than a retention.
    ///
    /// With --dry-run nothing is deleted: it checks the retention as purge
    /// does (at most 100 years), names the cutoff by the store's clock, and
    /// counts what would go: the lease records (and of them, those naming
    /// each --scope), and the jobs of every queue (or of each --queue).
    Purge(PurgeArgs),
    /// Every queue with a job, its jobs counted by state (queued, claimed,
    /// completed, dead-lettered), in name order.
    Queues {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// List a queue's jobs, oldest first: all of them, one state, or its
    /// dead letters.
    Jobs(JobsArgs),
    /// The fence gates the store keeps, by resource: each one's highest
    /// accepted fence and last accepted check.
    Gates {
        /// Only gates whose resource sorts after this one (the last of a
        /// previous page).
        #[arg(long, value_name = "RESOURCE")]
        after: Option<String>,
        /// At most this many gates.
        #[arg(long, default_value_t = 1000)]
        limit: usize,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Send a dead-lettered job back to its queue, attempts reset; or
    /// every dead letter of a queue, with --all --queue Q.
    Retry(RetryArgs),
    /// Add a job to a queue (for testing a worker). Prints its id.
    Enqueue {
        /// The queue.
        queue: String,
        /// The job's payload, as JSON.
        #[arg(long, value_parser = parse_json)]
        payload: serde_json::Value,
        /// The job's id (default: a new one).
        #[arg(long)]
        id: Option<String>,
        /// Higher runs first.
        #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
        priority: i32,
        /// Attempts before it is dead-lettered.
        #[arg(long, default_value_t = tenure::queue::DEFAULT_MAX_ATTEMPTS)]
        max_attempts: u32,
        /// A uniqueness key in the queue: the job is created only while no
        /// job of the queue holds the key; otherwise exit 1 naming the job
        /// that does. Held while the job is unfinished unless
        /// --unique-while or --unique-for says otherwise.
        #[arg(long)]
        unique_key: Option<String>,
        /// Hold the key while the job is `queued`, or `unfinished` (queued
        /// or claimed).
        #[arg(
            long,
            value_enum,
            requires = "unique_key",
            conflicts_with = "unique_for"
        )]
        unique_while: Option<UniqueWhile>,
        /// Hold the key this long from the enqueue, whatever the job's
        /// state (e.g. 1h).
        #[arg(long, value_parser = parse_duration, requires = "unique_key")]
        unique_for: Option<Duration>,
        /// Print the job as JSON instead of its id.
        #[arg(long)]
        json: bool,
    },
    /// Create the PostgreSQL schema and apply the migrations it lacks, with
    /// a role that may create tables (SQLite: create the file's tables).
    Migrate,
    /// Run the deployment checks the store makes at connect: schema
    /// version, eviction policy, persistence, clock. Exit 1 when one fails.
    Check {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// A live view of the active leases and their expiries, refreshed until
    /// Ctrl-C.
    Watch(WatchArgs),
    /// Serve the operator's web view of the store: leases, queues, jobs,
    /// dead letters, gates; read-only unless --allow-write.
    ///
    /// Listens on loopback (127.0.0.1:7474 by default) and prints the
    /// address. With --allow-write, the actions (take over, cancel,
    /// release, retry, purge) need a session signed in with a token: read
    /// from --token-file, or generated and printed once on stderr; each
    /// asks for confirmation, carries a CSRF token, and is logged on
    /// stderr. With --token-file every page needs the token; a
    /// non-loopback --listen address is refused without one. Stops on
    /// Ctrl-C or SIGTERM.
    Serve(ServeArgs),
    /// Check a recorded history of store calls against the contract's
    /// safety properties. Needs no store. Exit 1 when one is broken.
    ///
    /// The history is JSON lines, one entry a line, as the conformance
    /// kit's history recorder writes them (`tenure::conformance::history`).
    /// The properties: fences grow, exclusive ownership, gates never go
    /// back, acknowledged writes are kept; each violation is printed with
    /// the two or three entries that show it. Exit 2 when the file cannot
    /// be read or a line is not an entry. --url is ignored.
    #[command(name = "check-history")]
    CheckHistory {
        /// The history file; `-` reads standard input.
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// Print a JSON summary (counts, violations by property, excerpts)
        /// instead of text.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
#[group(skip)]
#[command(group(clap::ArgGroup::new("which").args(["active", "expired", "scope"])))]
struct LeasesArgs {
    /// Active records (pending or running), by id. The default.
    #[arg(long)]
    active: bool,
    /// Active records whose lease has ended: orphans to take over.
    #[arg(long)]
    expired: bool,
    /// Every record naming this scope, in any status, newest first.
    #[arg(long, value_name = "S")]
    scope: Option<String>,
    /// Only records of this kind.
    #[arg(long, value_name = "K")]
    kind: Option<String>,
    /// With --expired: how long past its end a lease still counts as held.
    #[arg(long, value_parser = parse_duration, default_value = "0s")]
    grace: Duration,
    /// With --expired: at most this many records.
    #[arg(long, default_value_t = 1000)]
    limit: usize,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
#[group(skip)]
#[command(group(clap::ArgGroup::new("action").required(true).args(["fail", "adopt"])))]
struct TakeOverArgs {
    /// The orphan's id.
    id: String,
    /// Mark it failed with this error text.
    #[arg(long, value_name = "REASON")]
    fail: Option<String>,
    /// Resume it as running, owned by --claimer, under a lease of --ttl.
    #[arg(long, requires = "ttl")]
    adopt: bool,
    /// With --adopt: the new lease's length (30s, 5m, 2h).
    #[arg(long, value_parser = parse_duration, requires = "adopt")]
    ttl: Option<Duration>,
    /// Who takes it over: the owner recorded on it.
    #[arg(long, default_value = "tenure-cli")]
    claimer: String,
    /// How long past its end the owner's lease still counts as held.
    #[arg(long, value_parser = parse_duration, default_value = "0s")]
    grace: Duration,
    /// Print the record as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct ReleaseArgs {
    /// The lease's id.
    id: String,
    /// The claim's owner: the record's owner (`take-over --claimer`, by
    /// default tenure-cli).
    #[arg(long, default_value = "tenure-cli")]
    owner: String,
    /// The claim's fence, as `take-over` or `show` printed it.
    #[arg(long)]
    fence: u64,
    /// The stop reason kept on the record.
    #[arg(long, value_name = "REASON", default_value = RELEASED_REASON)]
    reason: String,
    /// Print the record as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct CancelArgs {
    /// The run's id.
    id: String,
    /// Who cancels: the owner recorded on it.
    #[arg(long, default_value = "tenure-cli")]
    claimer: String,
    /// The error text kept on the record (its stop reason is `cancelled`).
    #[arg(long, value_name = "REASON", default_value = tenure::keeper::CANCELLED)]
    reason: String,
    /// How long past its end the owner's lease still counts as held.
    #[arg(long, value_parser = parse_duration, default_value = "0s")]
    grace: Duration,
    /// Print the record as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct PurgeArgs {
    /// Delete what finished (or was interrupted) at least this long ago:
    /// 30s, 5m, 2h, 7d (at most 100 years).
    #[arg(long, value_parser = parse_duration)]
    older_than: Duration,
    /// Say what would be deleted, and count it where the stores can list
    /// it, deleting nothing.
    #[arg(long)]
    dry_run: bool,
    /// With --dry-run: count the completed and dead-lettered jobs of this
    /// queue that would go (repeatable; default: every queue).
    #[arg(long, value_name = "Q", requires = "dry_run")]
    queue: Vec<String>,
    /// With --dry-run: also count the lease records naming this scope that
    /// would go (repeatable).
    #[arg(long, value_name = "S", requires = "dry_run")]
    scope: Vec<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
#[group(skip)]
struct RetryArgs {
    /// The job's id.
    #[arg(required_unless_present = "all", conflicts_with_all = ["all", "queue", "json"])]
    job: Option<String>,
    /// Every dead letter of --queue, read a page at a time, each retried
    /// once; prints how many were requeued.
    #[arg(long, requires = "queue")]
    all: bool,
    /// With --all: the queue.
    #[arg(long, value_name = "Q", requires = "all")]
    queue: Option<String>,
    /// Dead letters read per page with --all.
    #[arg(long, default_value_t = 500, hide = true)]
    page_size: usize,
    /// With --all: print the counts as JSON.
    #[arg(long, requires = "all")]
    json: bool,
}

#[derive(Debug, Args)]
struct JobsArgs {
    /// The queue (`tenure queues` lists them).
    #[arg(long, value_name = "Q")]
    queue: Option<String>,
    /// Dead-lettered jobs only, oldest update first.
    #[arg(long, conflicts_with = "state")]
    dead: bool,
    /// Jobs in this state only: queued, claimed, completed or dead_lettered.
    #[arg(long, value_parser = parse_job_state)]
    state: Option<JobState>,
    /// At most this many jobs.
    #[arg(long, default_value_t = 1000)]
    limit: usize,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct ServeArgs {
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1:7474")]
    listen: std::net::SocketAddr,
    /// Allow the actions (take over, cancel, release, retry, purge) to a
    /// session signed in with the token.
    #[arg(long)]
    allow_write: bool,
    /// Read the token from this file's first line (at least 16
    /// characters); every page then needs it. Required for a non-loopback
    /// --listen address.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// Who takeovers and cancellations from the web view are recorded as.
    #[arg(long, default_value = serve::DEFAULT_CLAIMER)]
    claimer: String,
    /// How often the watch view refreshes (1s, 500ms).
    #[arg(long, value_parser = parse_duration, default_value = "2s")]
    refresh: Duration,
}

#[derive(Debug, Args)]
struct WatchArgs {
    /// Time between refreshes (1s, 500ms).
    #[arg(long, value_parser = parse_duration, default_value = "2s")]
    interval: Duration,
    /// Stop after this many refreshes (default: until Ctrl-C).
    #[arg(long, value_name = "N")]
    iterations: Option<u64>,
    /// One view, then exit: --iterations 1.
    #[arg(long, conflicts_with = "iterations")]
    once: bool,
}

/// `30s`, `5m`, `2h`, `7d`, `1h 30m`.
fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text)
        .map_err(|error| format!("{error}; write a duration such as 30s, 5m, 2h or 7d"))
}

fn parse_job_state(text: &str) -> Result<JobState, String> {
    JobState::ALL
        .into_iter()
        .find(|state| state.as_str() == text)
        .ok_or_else(|| {
            "not a job state; write one of queued, claimed, completed, dead_lettered".to_owned()
        })
}

fn parse_json(text: &str) -> Result<serde_json::Value, String> {
    serde_json::from_str(text).map_err(|error| {
        format!("not JSON ({error}); quote it for the shell, e.g. --payload '{{\"n\": 1}}'")
    })
}

/// `enqueue --unique-while`: while the job holds its key.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum UniqueWhile {
    /// While it waits in the queue.
    Queued,
    /// While it waits or is claimed.
    Unfinished,
}

/// The policy `enqueue`'s uniqueness flags name: a period when given, else
/// while queued or (by default) unfinished.
fn unique_policy(unique_while: Option<UniqueWhile>, unique_for: Option<Duration>) -> UniquePolicy {
    match (unique_for, unique_while) {
        (Some(period), _) => UniquePolicy::ForPeriod(period),
        (None, Some(UniqueWhile::Queued)) => UniquePolicy::WhileQueued,
        (None, Some(UniqueWhile::Unfinished) | None) => UniquePolicy::WhileUnfinished,
    }
}

/// Why a command did not do its work, and how the process exits.
#[derive(Debug)]
enum Failure {
    /// Not found, or refused: exit 1.
    Refused(String),
    /// What was typed is wrong: exit 2.
    Usage(String),
    /// From the store, exit code by its kind.
    Store(tenure::Error),
}

impl From<tenure::Error> for Failure {
    fn from(error: tenure::Error) -> Self {
        Failure::Store(error)
    }
}

type Outcome = Result<(), Failure>;

/// Runs the command line: parses the arguments (exit 2 and clap's message
/// on bad usage), runs the command, and answers the exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::CheckHistory { file, json } = &cli.command {
        // Judged offline: no store, no URL, no runtime.
        return match check_history(file, *json) {
            Ok(()) => ExitCode::SUCCESS,
            Err(failure) => report("", failure),
        };
    }
    let Some(url) = cli.url.clone() else {
        Cli::command()
            .error(
                clap::error::ErrorKind::MissingRequiredArgument,
                format!("name the store with --url URL or the environment variable {URL_VAR}"),
            )
            .exit();
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("tenure: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(&url, cli.command)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => report(&url, failure),
    }
}

/// Prints the failure and answers its exit code.
fn report(url: &str, failure: Failure) -> ExitCode {
    let (code, message) = match failure {
        Failure::Refused(message) => (EXIT_REFUSED, message),
        Failure::Usage(message) => (EXIT_USAGE, message),
        Failure::Store(error) => {
            let shown = shown_url(url);
            match error.kind() {
                _ if error.is_retryable() => (
                    EXIT_UNAVAILABLE,
                    format!(
                        "the store at {shown} is unavailable: {}\n\
                         check that the server is running and reachable and that the URL \
                         (--url or {URL_VAR}) is right, then retry; nothing was changed \
                         unless the store had already applied it",
                        error.message()
                    ),
                ),
                ErrorKind::Config | ErrorKind::InvalidInput => {
                    (EXIT_USAGE, format!("{}: {}", error.kind(), error.message()))
                }
                kind => {
                    let mut message =
                        format!("the store at {shown} answered {kind}: {}", error.message());
                    if kind == ErrorKind::Incompatible && error.message().contains("migration") {
                        message.push_str(
                            "\n`tenure migrate` applies this version's migrations, run with a \
                             role that may create tables",
                        );
                    }
                    (EXIT_REFUSED, message)
                }
            }
        }
    };
    eprintln!("tenure: {message}");
    ExitCode::from(code)
}

/// The URL as messages show it: without its password. `memory:` and a
/// SQLite path carry none and are shown as given.
fn shown_url(url: &str) -> String {
    let lower = url.to_ascii_lowercase();
    if (lower.starts_with("memory:") || lower.starts_with("sqlite:")) && !url.contains('@') {
        url.to_owned()
    } else {
        tenure::redact_url(url)
    }
}

/// Opens the store for a command that must not create or migrate it.
async fn open(url: &str) -> Result<Arc<dyn Store>, Failure> {
    refuse_missing_sqlite_file(url)?;
    Ok(Connect::new(url).migrate_schema(false).open().await?)
}

/// Opens the store for a command that only reads (`leases`, `show`, `jobs`,
/// `watch`): despite a failed deployment check that leaves it readable (a
/// Redis server that may evict keys, [`Connect::open_for_reading`]),
/// warning on stderr with the check's name and detail. Commands that write
/// go through [`open`], which keeps refusing it.
async fn open_for_reading(url: &str) -> Result<Arc<dyn Store>, Failure> {
    refuse_missing_sqlite_file(url)?;
    let (store, failed) = Connect::new(url)
        .migrate_schema(false)
        .open_for_reading()
        .await?;
    for finding in &failed {
        eprintln!(
            "tenure: warning: the store at {} fails the deployment check `{}`: {}
             tenure: showing what it holds anyway; commands that write refuse it until this              is fixed (`tenure check` lists every check)",
            shown_url(url),
            finding.check,
            finding.detail
        );
    }
    Ok(store)
}

/// A SQLite URL naming no file would create an empty store: refuse it.
fn refuse_missing_sqlite_file(url: &str) -> Outcome {
    let Some(rest) = url
        .get(..7)
        .filter(|scheme| scheme.eq_ignore_ascii_case("sqlite:"))
        .map(|_| &url[7..])
    else {
        return Ok(());
    };
    let config = tenure::sqlite::SqliteConfig::from_url(&format!("sqlite:{rest}"))?;
    if config.path().exists() {
        return Ok(());
    }
    Err(Failure::Refused(format!(
        "there is no SQLite store at {}: check the path (`tenure migrate` creates one)",
        config.path().display()
    )))
}

async fn run(url: &str, command: Command) -> Outcome {
    if let Command::Migrate = command {
        Connect::new(url).migrate().await?;
        println!(
            "the store at {} carries every migration of this version",
            shown_url(url)
        );
        return Ok(());
    }
    if let Command::Check { json } = command {
        return check(url, json).await;
    }
    if let Command::Serve(args) = command {
        return run_serve(url, args).await;
    }
    let read_only = matches!(
        command,
        Command::Leases(_)
            | Command::Show { .. }
            | Command::Queues { .. }
            | Command::Jobs(_)
            | Command::Gates { .. }
            | Command::Watch(_)
    );
    let store = if read_only {
        open_for_reading(url).await?
    } else {
        open(url).await?
    };
    let store = &*store;
    match command {
        Command::Leases(args) => leases(store, args).await,
        Command::Show { id, json } => show(store, &id, json).await,
        Command::TakeOver(args) => take_over(store, args).await,
        Command::Release(args) => release(store, args).await,
        Command::Cancel(args) => cancel(store, args).await,
        Command::Purge(args) => purge(store, args).await,
        Command::Queues { json } => queues(store, json).await,
        Command::Jobs(args) => jobs(store, args).await,
        Command::Gates { after, limit, json } => gates(store, after.as_deref(), limit, json).await,
        Command::Retry(args) => match (args.job, args.queue) {
            (Some(job), _) => retry(store, &job).await,
            (None, Some(queue)) => retry_all(store, &queue, args.page_size, args.json).await,
            (None, None) => Err(Failure::Usage(
                "name the job, or --all --queue Q".to_owned(),
            )),
        },
        Command::Enqueue {
            queue,
            payload,
            id,
            priority,
            max_attempts,
            unique_key,
            unique_while,
            unique_for,
            json,
        } => {
            let mut job = NewJob::new(queue, payload)
                .priority(priority)
                .max_attempts(max_attempts);
            if let Some(id) = id {
                job = job.id(id);
            }
            if let Some(key) = unique_key {
                job = job.unique(key, unique_policy(unique_while, unique_for));
            }
            let job = match store.enqueue_unique(&job).await? {
                Enqueued::Created(job) => job,
                Enqueued::Duplicate(holder) => {
                    return Err(Failure::Refused(format!(
                        "not enqueued: job {} ({}) holds the unique key {} in queue {}",
                        holder.id,
                        holder.state,
                        unique_text(&holder),
                        holder.queue
                    )))
                }
                other => {
                    return Err(Failure::Refused(format!(
                        "not enqueued: the store answered {other:?}"
                    )))
                }
            };
            if json {
                print_json(&job)
            } else {
                println!("{}", job.id);
                Ok(())
            }
        }
        Command::Watch(args) => watch(store, args).await,
        Command::Migrate
        | Command::Check { .. }
        | Command::Serve(_)
        | Command::CheckHistory { .. } => Ok(()),
    }
}

async fn leases(store: &dyn Store, args: LeasesArgs) -> Outcome {
    let mut records = if args.expired {
        let query = ExpiredQuery::new(args.grace).limit(args.limit);
        let scan = store.list_expired(&query).await?;
        for skipped in &scan.skipped {
            eprintln!(
                "tenure: left out record {:?}, which cannot be decoded: {}",
                skipped.id, skipped.reason
            );
        }
        scan.records
    } else if let Some(scope) = &args.scope {
        store.list_by_scope(scope).await?
    } else {
        store.list_active().await?
    };
    if let Some(kind) = &args.kind {
        records.retain(|record| &record.kind == kind);
    }
    if args.json {
        return print_json(&records);
    }
    let now = store.now().await?;
    print!("{}", lease_table(&records, now));
    Ok(())
}

fn lease_table(records: &[LeaseRecord], now: Timestamp) -> String {
    let mut table = Table::new(["ID", "KIND", "STATUS", "OWNER", "FENCE", "LEASE", "SCOPES"]);
    for record in records {
        table.row([
            record.id.clone(),
            record.kind.clone(),
            record.status.as_str().to_owned(),
            record.owner.clone().unwrap_or_else(|| "-".to_owned()),
            record.fence.to_string(),
            record
                .lease_expires_at
                .map_or_else(|| "none".to_owned(), |at| relative(at, now)),
            scopes(record),
        ]);
    }
    table.render_or("no lease records\n")
}

/// The record's scopes, each counted one with the slot it holds:
/// `exports (slot 2),tenant:7`.
fn scopes(record: &LeaseRecord) -> String {
    if record.scopes.is_empty() {
        return "-".to_owned();
    }
    record
        .scopes
        .iter()
        .map(|scope| match record.slots.get(scope) {
            Some(slot) => format!("{scope} (slot {slot})"),
            None => scope.clone(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// `in 25s` or `ended 3m 2s ago`, to the second.
fn relative(at: Timestamp, now: Timestamp) -> String {
    let seconds = |delta: chrono::TimeDelta| {
        humantime::format_duration(Duration::from_secs(delta.num_seconds().unsigned_abs()))
            .to_string()
    };
    if at > now {
        format!("ends in {}", seconds(at - now))
    } else {
        format!("ended {} ago", seconds(now - at))
    }
}

fn timestamp(at: Timestamp) -> String {
    at.format("%Y-%m-%d %H:%M:%S%.3f UTC").to_string()
}

async fn show(store: &dyn Store, id: &str, json: bool) -> Outcome {
    if let Some(record) = store.get(id).await? {
        if json {
            return print_json(&record);
        }
        let now = store.now().await?;
        print!("{}", describe_lease(&record, now));
        return Ok(());
    }
    if let Some(job) = store.get_job(id).await? {
        if json {
            return print_json(&job);
        }
        print!("{}", describe_job(&job));
        return Ok(());
    }
    Err(Failure::Refused(format!(
        "no lease record or job has the id {id:?}"
    )))
}

fn describe_lease(record: &LeaseRecord, now: Timestamp) -> String {
    let mut text = String::new();
    let mut line = |name: &str, value: String| {
        let _ = writeln!(text, "{name:<12} {value}");
    };
    line("lease", record.id.clone());
    line("kind", record.kind.clone());
    line("status", record.status.as_str().to_owned());
    line(
        "owner",
        record.owner.clone().unwrap_or_else(|| "-".to_owned()),
    );
    line("fence", record.fence.to_string());
    line(
        "lease ends",
        record.lease_expires_at.map_or_else(
            || "none".to_owned(),
            |at| format!("{} ({})", timestamp(at), relative(at, now)),
        ),
    );
    line("scopes", scopes(record));
    line("created", timestamp(record.created_at));
    line("updated", timestamp(record.updated_at));
    if let Some(error) = &record.error {
        line("error", error.clone());
    }
    if let Some(reason) = &record.stop_reason {
        line("stop reason", reason.clone());
    }
    if !record.metadata.is_empty() {
        line(
            "metadata",
            serde_json::Value::Object(record.metadata.clone()).to_string(),
        );
    }
    if let Some(progress) = &record.progress {
        line("progress", progress.to_string());
    }
    text
}

fn describe_job(job: &Job) -> String {
    let mut text = String::new();
    let mut line = |name: &str, value: String| {
        let _ = writeln!(text, "{name:<12} {value}");
    };
    line("job", job.id.clone());
    line("queue", job.queue.clone());
    line("state", job.state.as_str().to_owned());
    line(
        "attempt",
        format!("{} of {}", job.attempt, job.max_attempts),
    );
    line("owner", job.owner.clone().unwrap_or_else(|| "-".to_owned()));
    line("fence", job.fence.to_string());
    line("priority", job.priority.to_string());
    line("run at", timestamp(job.run_at));
    if let Some(at) = job.lease_expires_at {
        line("lease ends", timestamp(at));
    }
    if let Some(reason) = job.dead_reason {
        line("dead reason", reason.as_str().to_owned());
    }
    if let Some(error) = &job.last_error {
        line("last error", error.clone());
    }
    line("created", timestamp(job.created_at));
    line("updated", timestamp(job.updated_at));
    if let Some(progress) = &job.progress {
        line("progress", progress.to_string());
    }
    if job.unique.is_some() {
        line("unique key", unique_text(job));
    }
    line("payload", job.payload.to_string());
    text
}

/// A job's uniqueness key with its policy (`-` without one): `KEY (while
/// queued)`, `KEY (while unfinished)`, `KEY (until 2026-12-06T…)`.
fn unique_text(job: &Job) -> String {
    let Some(unique) = &job.unique else {
        return "-".to_owned();
    };
    let held = match (unique.policy, job.unique_until()) {
        (UniquePolicy::WhileQueued, _) => "while queued".to_owned(),
        (UniquePolicy::ForPeriod(_), Some(until)) => format!("until {}", timestamp(until)),
        _ => "while unfinished".to_owned(),
    };
    format!("{:?} ({held})", unique.key)
}

/// Progress as a table cell: its JSON, cut to [`PROGRESS_CELL`] characters
/// (`show` prints it whole); `-` when none was reported.
fn progress_cell(progress: Option<&serde_json::Value>) -> String {
    let Some(progress) = progress else {
        return "-".to_owned();
    };
    let text = progress.to_string();
    match text.char_indices().nth(PROGRESS_CELL) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

/// The most characters of progress a table cell shows.
const PROGRESS_CELL: usize = 40;

async fn take_over(store: &dyn Store, args: TakeOverArgs) -> Outcome {
    let request = match (args.fail, args.ttl) {
        (Some(reason), _) => TakeoverRequest::fail(&args.id, &args.claimer, reason),
        (None, ttl) => TakeoverRequest::adopt(&args.id, &args.claimer, ttl),
    }
    .grace(args.grace);
    let record = operations::take_over(store, &request).await?;
    if args.json {
        return print_json(&record);
    }
    let owner = record.owner.as_deref().unwrap_or("-");
    println!(
        "took over {:?}: {} by {owner}, fence {}",
        record.id,
        record.status.as_str(),
        record.fence
    );
    if record.status.is_active() {
        println!(
            "give it up at once with: tenure release {} --owner {owner} --fence {}",
            record.id, record.fence
        );
    }
    Ok(())
}

/// `tenure release`: the fenced write that gives a lease up.
async fn release(store: &dyn Store, args: ReleaseArgs) -> Outcome {
    if args.fence == 0 {
        return Err(Failure::Usage(
            "--fence 0 is no claim's fence (fences start at 1); give the fence `take-over` \
             or `show` printed"
                .to_owned(),
        ));
    }
    let claim = Claim::new(&args.id, &args.owner, args.fence);
    let record = operations::release(store, &claim, &args.reason).await?;
    if args.json {
        return print_json(&record);
    }
    println!(
        "released {:?}: {}, its scopes are free (owner {}, fence {})",
        record.id,
        record.status.as_str(),
        record.owner.as_deref().unwrap_or("-"),
        record.fence
    );
    Ok(())
}

/// `tenure cancel`: a takeover that fails the run, only once its owner's
/// lease has ended.
async fn cancel(store: &dyn Store, args: CancelArgs) -> Outcome {
    let record =
        operations::cancel(store, &args.id, &args.claimer, &args.reason, args.grace).await?;
    if args.json {
        return print_json(&record);
    }
    println!(
        "cancelled {:?}: {} by {}, fence {}; the previous owner's writes are refused",
        record.id,
        record.status.as_str(),
        record.owner.as_deref().unwrap_or("-"),
        record.fence
    );
    Ok(())
}

async fn purge(store: &dyn Store, args: PurgeArgs) -> Outcome {
    if args.dry_run {
        return purge_dry_run(store, args).await;
    }
    let (leases, jobs) = operations::purge(store, args.older_than).await?;
    if args.json {
        return print_json(&serde_json::json!({ "leases": leases, "jobs": jobs }));
    }
    println!("deleted {leases} lease records and {jobs} jobs");
    Ok(())
}

/// What `purge` would delete, counted where the stores can list it.
async fn purge_dry_run(store: &dyn Store, args: PurgeArgs) -> Outcome {
    let cutoff = operations::purge_cutoff(store, args.older_than).await?;
    let all_leases = store.count_purgeable(args.older_than).await?;
    let mut leases = std::collections::BTreeSet::new();
    for scope in &args.scope {
        for record in store.list_by_scope(scope).await? {
            if (record.status.is_terminal() || record.status == Status::Interrupted)
                && operations::old_enough(cutoff, record.updated_at)
            {
                leases.insert(record.id);
            }
        }
    }
    let queues = operations::count_purgeable_jobs(store, &args.queue, cutoff)
        .await?
        .into_iter()
        .map(|counted| (counted.queue, counted.count, counted.at_least))
        .collect::<Vec<_>>();

    let cutoff_text = cutoff.map_or_else(|| "the beginning of time".to_owned(), timestamp);
    if args.json {
        let jobs: serde_json::Map<String, serde_json::Value> = queues
            .iter()
            .map(|(queue, count, partial)| {
                (
                    queue.clone(),
                    serde_json::json!({ "count": count, "at_least": partial }),
                )
            })
            .collect();
        return print_json(&serde_json::json!({
            "dry_run": true,
            "finished_before": cutoff_text,
            "leases": all_leases,
            "leases_naming_scopes": if args.scope.is_empty() {
                serde_json::Value::Null
            } else {
                leases.len().into()
            },
            "lease_scopes": args.scope,
            "jobs": jobs,
        }));
    }
    println!(
        "would delete the finished and interrupted lease records and the completed and \
         dead-lettered jobs last updated at or before {cutoff_text} (the store's clock); active \
         records and queued or claimed jobs stay."
    );
    println!("would delete {all_leases} lease records");
    if !args.scope.is_empty() {
        println!(
            "of them, {} lease records naming {}",
            leases.len(),
            args.scope.join(", ")
        );
    }
    for (queue, count, partial) in &queues {
        let at_least = if *partial { "at least " } else { "" };
        println!("would delete {at_least}{count} jobs of queue {queue:?}");
    }
    if queues.is_empty() {
        println!("would delete no job: no queue holds a finished job");
    }
    println!("Nothing was deleted.");
    Ok(())
}

async fn queues(store: &dyn Store, json: bool) -> Outcome {
    let queues = store.count_jobs().await?;
    if json {
        return print_json(&queues);
    }
    let mut table = Table::new(["QUEUE", "QUEUED", "CLAIMED", "COMPLETED", "DEAD", "TOTAL"]);
    for counts in &queues {
        table.row([
            counts.queue.clone(),
            counts.queued.to_string(),
            counts.claimed.to_string(),
            counts.completed.to_string(),
            counts.dead_lettered.to_string(),
            counts.total().to_string(),
        ]);
    }
    print!("{}", table.render_or("no queue holds a job\n"));
    Ok(())
}

async fn jobs(store: &dyn Store, args: JobsArgs) -> Outcome {
    let Some(queue) = args.queue else {
        return Err(Failure::Usage(
            "name the queue: tenure jobs --queue Q (tenure queues lists every queue)".to_owned(),
        ));
    };
    let jobs = if args.dead {
        store.list_dead_letters(&queue, args.limit).await?
    } else {
        store.list_jobs(&queue, args.state, args.limit).await?
    };
    if args.json {
        return print_json(&jobs);
    }
    let mut table = Table::new([
        "ID",
        "STATE",
        "REASON",
        "ATTEMPT",
        "UPDATED",
        "PROGRESS",
        "UNIQUE KEY",
        "LAST ERROR",
    ]);
    for job in &jobs {
        table.row([
            job.id.clone(),
            job.state.as_str().to_owned(),
            job.dead_reason
                .map_or_else(|| "-".to_owned(), |reason| reason.as_str().to_owned()),
            format!("{}/{}", job.attempt, job.max_attempts),
            timestamp(job.updated_at),
            progress_cell(job.progress.as_ref()),
            unique_text(job),
            job.last_error.clone().unwrap_or_else(|| "-".to_owned()),
        ]);
    }
    print!(
        "{}",
        table.render_or(&format!("no such jobs in queue {queue:?}\n"))
    );
    Ok(())
}

async fn gates(store: &dyn Store, after: Option<&str>, limit: usize, json: bool) -> Outcome {
    let gates = store.list_fences(after, limit).await?;
    if json {
        return print_json(&gates);
    }
    let mut table = Table::new(["RESOURCE", "FENCE", "LAST ACCEPTED"]);
    for gate in &gates {
        table.row([
            gate.resource.clone(),
            gate.fence.to_string(),
            timestamp(gate.checked_at),
        ]);
    }
    print!("{}", table.render_or("no gates\n"));
    if gates.len() == limit {
        if let Some(last) = gates.last() {
            println!("(more may follow: --after {:?})", last.resource);
        }
    }
    Ok(())
}

async fn retry(store: &dyn Store, id: &str) -> Outcome {
    let job = operations::retry(store, id).await?;
    println!(
        "requeued {:?} on queue {:?}, attempts reset",
        job.id, job.queue
    );
    Ok(())
}

/// `tenure retry --all --queue Q`: every dead letter of the queue.
async fn retry_all(store: &dyn Store, queue: &str, page_size: usize, json: bool) -> Outcome {
    let done = match operations::retry_all(store, queue, page_size).await {
        Ok(done) => done,
        Err((done, error)) => {
            eprintln!(
                "tenure: requeued {} dead letters before the store failed",
                done.requeued
            );
            return Err(Failure::Store(error));
        }
    };
    if json {
        return print_json(&serde_json::json!({
            "queue": queue,
            "requeued": done.requeued,
            "skipped": done.skipped,
        }));
    }
    println!(
        "requeued {} dead letters of queue {queue:?}, attempts reset",
        done.requeued
    );
    if done.skipped > 0 {
        println!(
            "{} were no longer dead-lettered when retried (left as they were)",
            done.skipped
        );
    }
    Ok(())
}

async fn check(url: &str, json: bool) -> Outcome {
    refuse_missing_sqlite_file(url)?;
    let findings = Connect::new(url).check().await?;
    let failed = findings
        .iter()
        .filter(|finding| finding.verdict == Verdict::Fail)
        .count();
    if json {
        let findings: Vec<_> = findings
            .iter()
            .map(|finding| {
                serde_json::json!({
                    "check": finding.check,
                    "verdict": finding.verdict.as_str(),
                    "detail": finding.detail,
                })
            })
            .collect();
        print_json(&findings)?;
    } else {
        let mut table = Table::new(["CHECK", "VERDICT", "DETAIL"]);
        for finding in &findings {
            table.row([
                finding.check.to_owned(),
                finding.verdict.as_str().to_owned(),
                finding.detail.clone(),
            ]);
        }
        print!("{}", table.render_or("no checks\n"));
    }
    if failed > 0 {
        return Err(Failure::Refused(format!(
            "{failed} deployment check(s) failed at {}",
            shown_url(url)
        )));
    }
    Ok(())
}

/// `tenure check-history`: reads the history at `file` (`-`: standard
/// input), prints the checker's verdict, and fails with exit 1 when it
/// names a violation.
fn check_history(file: &Path, json: bool) -> Outcome {
    let verdict = history::check(&read_history(file)?);
    if json {
        print_json(&verdict_json(&verdict))?;
    } else {
        let text = verdict.to_string();
        if text.ends_with('\n') {
            print!("{text}");
        } else {
            println!("{text}");
        }
    }
    if verdict.is_clean() {
        return Ok(());
    }
    let broken: Vec<String> = history::Property::ALL
        .into_iter()
        .filter(|property| verdict.count(*property) > 0)
        .map(|property| format!("{property} ({})", verdict.count(property)))
        .collect();
    Err(Failure::Refused(format!(
        "the history in {} breaks {}",
        shown_file(file),
        broken.join(", ")
    )))
}

/// The history's entries; exit 2 when the file cannot be read or a line is
/// not an entry.
fn read_history(file: &Path) -> Result<Vec<history::Entry>, Failure> {
    let read = if file.as_os_str() == "-" {
        history::read_json_lines(std::io::stdin().lock())
    } else {
        std::fs::File::open(file)
            .and_then(|opened| history::read_json_lines(std::io::BufReader::new(opened)))
    };
    read.map_err(|error| {
        Failure::Usage(format!(
            "cannot read the history in {}: {error}",
            shown_file(file)
        ))
    })
}

/// The file as messages name it.
fn shown_file(file: &Path) -> String {
    if file.as_os_str() == "-" {
        "standard input".to_owned()
    } else {
        file.display().to_string()
    }
}

/// The verdict as `check-history --json` prints it.
fn verdict_json(verdict: &history::Verdict) -> serde_json::Value {
    let violations: serde_json::Map<String, serde_json::Value> = history::Property::ALL
        .into_iter()
        .map(|property| (property.name().to_owned(), verdict.count(property).into()))
        .collect();
    let excerpts: Vec<serde_json::Value> = verdict
        .violations
        .iter()
        .map(|violation| {
            serde_json::json!({
                "property": violation.property.name(),
                "explanation": violation.explanation,
                "entries": violation.excerpt,
            })
        })
        .collect();
    serde_json::json!({
        "clean": verdict.is_clean(),
        "calls": verdict.calls,
        "unknown": verdict.unknown,
        "ownership_changes": verdict.ownership_changes,
        "writes_accepted": verdict.writes_accepted,
        "writes_refused": verdict.writes_refused,
        "violations": violations,
        "excerpts": excerpts,
    })
}

async fn watch(store: &dyn Store, args: WatchArgs) -> Outcome {
    let iterations = if args.once { Some(1) } else { args.iterations };
    let terminal = std::io::stdout().is_terminal();
    // Listening before the first view, so a Ctrl-C after it always stops
    // the loop rather than the process.
    let mut interrupt = Interrupt::listen()
        .map_err(|error| Failure::Refused(format!("cannot listen for Ctrl-C: {error}")))?;
    let mut shown = 0_u64;
    loop {
        let frame = watch_frame(store).await?;
        let mut out = std::io::stdout().lock();
        // Clear the screen and go home on a terminal; a blank line between
        // views otherwise.
        let _ = if terminal {
            write!(out, "\x1b[2J\x1b[H{frame}")
        } else {
            writeln!(out, "{frame}")
        };
        let _ = out.flush();
        drop(out);
        shown += 1;
        if iterations.is_some_and(|limit| shown >= limit) {
            return Ok(());
        }
        tokio::select! {
            () = interrupt.received() => return Ok(()),
            () = tokio::time::sleep(args.interval) => {}
        }
    }
}

/// Ctrl-C (SIGINT), listened for from when it is made.
struct Interrupt {
    #[cfg(unix)]
    signal: tokio::signal::unix::Signal,
    #[cfg(not(unix))]
    signal: std::pin::Pin<Box<dyn std::future::Future<Output = std::io::Result<()>>>>,
}

impl Interrupt {
    fn listen() -> std::io::Result<Self> {
        #[cfg(unix)]
        let signal = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
        #[cfg(not(unix))]
        let signal = Box::pin(tokio::signal::ctrl_c());
        Ok(Interrupt { signal })
    }

    /// Waits for the next Ctrl-C.
    async fn received(&mut self) {
        #[cfg(unix)]
        let _ = self.signal.recv().await;
        #[cfg(not(unix))]
        let _ = (&mut self.signal).await;
    }
}

async fn watch_frame(store: &dyn Store) -> Result<String, Failure> {
    let (records, now) = operations::active_by_expiry(store).await?;
    let ended = records
        .iter()
        .filter(|record| record.lease_expires_at.is_some_and(|at| at <= now))
        .count();
    Ok(format!(
        "tenure watch: {} active, {ended} with an ended lease, at {} (Ctrl-C to stop)\n{}",
        records.len(),
        timestamp(now),
        lease_table(&records, now)
    ))
}

/// `tenure serve`: the web view until Ctrl-C or SIGTERM.
async fn run_serve(url: &str, args: ServeArgs) -> Outcome {
    if !args.listen.ip().is_loopback() && args.token_file.is_none() {
        return Err(Failure::Usage(format!(
            "refusing to listen on {}, which is not a loopback address, without \
             --token-file: anyone who reaches it could read the store (and, with \
             --allow-write, change it)",
            args.listen
        )));
    }
    let file_token = match &args.token_file {
        Some(path) => Some(serve::read_token(path).map_err(Failure::Usage)?),
        None => None,
    };
    let write_token = match (&file_token, args.allow_write) {
        (_, false) => None,
        (Some(token), true) => Some(token.clone()),
        (None, true) => Some(
            serve::Token::generate()
                .map_err(|error| Failure::Refused(format!("cannot make a token: {error}")))?,
        ),
    };
    let store = if args.allow_write {
        open(url).await?
    } else {
        open_for_reading(url).await?
    };
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|error| Failure::Refused(format!("cannot listen on {}: {error}", args.listen)))?;
    let address = listener
        .local_addr()
        .map_err(|error| Failure::Refused(format!("cannot read the listening address: {error}")))?;
    let mut options = serve::Options::read_only(shown_url(url))
        .claimer(&args.claimer)
        .refresh(args.refresh);
    if let Some(token) = &file_token {
        options = options.token_for_reads(token.clone());
    }
    if let Some(token) = &write_token {
        options = options.allow_write(token.clone());
    }
    if address.ip().is_loopback() {
        options = options.only_host(address);
    }
    let mode = if args.allow_write {
        "actions allowed to signed-in sessions"
    } else {
        "read-only"
    };
    println!(
        "tenure serve: http://{address}/ ({mode}) for {}",
        shown_url(url)
    );
    let _ = std::io::stdout().flush();
    if let (Some(token), None) = (&write_token, &file_token) {
        eprintln!(
            "tenure serve: sign in to act with the token {} (shown only now; --token-file \
             chooses one)",
            token.reveal()
        );
    }
    let mut interrupt = Interrupt::listen()
        .map_err(|error| Failure::Refused(format!("cannot listen for Ctrl-C: {error}")))?;
    #[cfg(unix)]
    let mut terminate =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .map_err(|error| Failure::Refused(format!("cannot listen for SIGTERM: {error}")))?;
    let shutdown = async move {
        #[cfg(unix)]
        tokio::select! {
            () = interrupt.received() => {}
            _ = terminate.recv() => {}
        }
        #[cfg(not(unix))]
        interrupt.received().await;
    };
    serve::serve(listener, serve::router(store, options), shutdown)
        .await
        .map_err(|error| Failure::Refused(format!("the web server stopped: {error}")))?;
    eprintln!("tenure serve: stopped");
    Ok(())
}

fn print_json<T: serde::Serialize + ?Sized>(value: &T) -> Outcome {
    let text = serde_json::to_string_pretty(value)
        .map_err(|error| Failure::Refused(format!("cannot print as JSON: {error}")))?;
    println!("{text}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn durations_read_as_operators_write_them() {
        for (text, seconds) in [("30s", 30), ("5m", 300), ("2h", 7200), ("7d", 604_800)] {
            assert_eq!(parse_duration(text), Ok(Duration::from_secs(seconds)));
        }
        assert!(parse_duration("soon").is_err_and(|why| why.contains("30s, 5m")));
    }

    #[test]
    fn urls_are_shown_without_their_password() {
        assert_eq!(
            shown_url("postgres://app:hunter2@db/jobs"),
            "postgres://app:***@db/jobs"
        );
        assert_eq!(shown_url("sqlite:/tmp/x.db"), "sqlite:/tmp/x.db");
        assert_eq!(shown_url("memory:"), "memory:");
        assert!(!shown_url("SQLITE:x@y:hunter2").contains("hunter2"));
    }

    #[test]
    fn expiries_read_relative_to_the_store_clock() {
        let now = Timestamp::default();
        let later = now + chrono::TimeDelta::seconds(65);
        assert_eq!(relative(later, now), "ends in 1m 5s");
        assert_eq!(relative(now, later), "ended 1m 5s ago");
    }
}

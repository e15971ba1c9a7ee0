//! # benches
//!
//! tenure's benchmark: every backend, every scenario, each figure beside a
//! raw baseline measured in the same run on the same store (the bare
//! statement a hand-rolled lease would run), because the machines these
//! numbers come from are noisy and only ratios survive the noise.
//!
//! `cargo run --release -p tenure-benches` runs the embedded default (SQLite in a
//! temporary file, and memory); `--backend all` adds PostgreSQL and Redis
//! (`TENURE_PG_URL`, `TENURE_REDIS_URL`), each run in a fresh schema or
//! namespace that is removed afterwards. See [`options::USAGE`] and
//! BENCHMARKS.md at the repository root.
//!
//! Layout: [`backend`] adapts each store and its baseline, [`scenario`] holds
//! one module per scenario, [`report`] prints and saves, [`plot`] draws.

pub mod backend;
pub mod options;
pub mod plot;
pub mod progress;
pub mod report;
pub mod scenario;
pub mod stats;

use options::{Options, ScenarioKind};
use progress::Progress;
use report::{BackendReport, Report};

/// Any failure of a benchmark run, with its message.
pub type BenchError = Box<dyn std::error::Error + Send + Sync>;
/// Shorthand for results of benchmark code.
pub type BenchResult<T> = Result<T, BenchError>;

/// Runs every selected scenario on every selected backend, each scenario on
/// a freshly opened store that is cleaned up afterwards. A scenario that
/// fails is recorded in its backend's `failures` and the run goes on.
///
/// Fails only when a backend named explicitly cannot run (no server URL).
pub async fn run(options: &Options, progress: &Progress) -> BenchResult<Report> {
    let mut report = Report::new(options);
    for &kind in &options.backends {
        let mut entry = BackendReport::new(kind);
        if let Some(reason) = backend::unavailable_reason(kind, options) {
            if !options.skip_unconfigured {
                return Err(format!("cannot run {kind}: {reason}").into());
            }
            progress.println(format!("skipping {kind}: {reason}"));
            entry.skipped = Some(reason);
            for _ in &options.scenarios {
                progress.step_done();
            }
            report.backends.push(entry);
            continue;
        }
        for &scenario in &options.scenarios {
            progress.cell(format!("{kind}: opening for {scenario}"));
            if let Err(error) = run_scenario(kind, scenario, options, progress, &mut entry).await {
                progress.println(format!("{kind} {scenario} failed: {error}"));
                entry.failures.push(format!("{scenario}: {error}"));
            }
            progress.step_done();
        }
        report.backends.push(entry);
    }
    Ok(report)
}

async fn run_scenario(
    kind: options::BackendKind,
    scenario: ScenarioKind,
    options: &Options,
    progress: &Progress,
    entry: &mut BackendReport,
) -> BenchResult<()> {
    if scenario == ScenarioKind::LongRun {
        // A fresh store per pass: the scenario opens its own.
        entry.long_run = Some(scenario::long_run::run(kind, options, progress).await?);
        return Ok(());
    }
    let opened = backend::open(kind, options).await?;
    let backend = &opened;
    let sizes = &options.sizes;
    let outcome: BenchResult<()> = async {
        match scenario {
            ScenarioKind::SingleOp => {
                entry.single_op = Some(scenario::single_op::run(backend, sizes, progress).await?);
            }
            ScenarioKind::Scaling => {
                entry.scaling = Some(scenario::scaling::run(backend, sizes, progress).await?);
            }
            ScenarioKind::HotKey => {
                entry.hot_key = Some(scenario::hot_key::run(backend, sizes, progress).await?);
            }
            ScenarioKind::Queue => {
                entry.queue = Some(scenario::queue::run(backend, sizes, progress).await?);
            }
            ScenarioKind::HeartbeatScale => {
                entry.heartbeat = Some(scenario::heartbeat::run(backend, sizes, progress).await?);
            }
            ScenarioKind::Takeover => {
                entry.takeover = Some(scenario::takeover::run(backend, sizes, progress).await?);
            }
            ScenarioKind::QueueBatch => {
                entry.queue_batch =
                    Some(scenario::queue_batch::run(backend, sizes, progress).await?);
            }
            ScenarioKind::LongRun => return Err("long-run opens a store per pass".into()),
        }
        Ok(())
    }
    .await;
    let cleaned = backend.cleanup().await;
    outcome?;
    cleaned
}

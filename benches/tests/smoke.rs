//! Every scenario on memory and SQLite at tiny sizes: no timing is asserted,
//! only that the runs are sane (no duplicate job, no stale write, no overlap,
//! no early takeover, counts that add up) and that every figure lands in the
//! report. Redis's script floors (`--redis-floor`) likewise, on the shared
//! server or a private one.
//!
//! The tiny sizes' leases are short (a 60 ms takeover ttl, 600 ms heartbeat
//! leases), so on a loaded machine deadlines are missed while every safety
//! promise holds: missed deadlines and latencies are figures here, never
//! failures (the benchmark binary still fails a real run that misses one).

use tenure_benches::options::{BackendKind, Options, ScenarioKind, Sizes};
use tenure_benches::progress::Progress;
use tenure_benches::report::Report;
use tenure_benches::scenario::hot_key::RetryStrategy;

async fn tiny_run(backend: BackendKind, out: &std::path::Path) -> Report {
    let options = Options {
        backends: vec![backend],
        scenarios: ScenarioKind::ALL.to_vec(),
        sizes: Sizes::tiny(),
        preset: "tiny",
        out_dir: out.to_path_buf(),
        progress: false,
        ..Options::standard()
    };
    tenure_benches::run(&options, &Progress::hidden())
        .await
        .expect("embedded backends always run")
}

fn check(report: &Report) {
    assert_eq!(report.safety_violations(), Vec::<String>::new());
    let entry = &report.backends[0];
    let sizes = Sizes::tiny();

    let single = entry.single_op.as_ref().expect("single-op ran");
    assert_eq!(single.ops.len(), 4);
    assert!(single
        .ops
        .iter()
        .all(|op| op.tenure.ops > 0 && op.raw.ops > 0));

    let scaling = entry.scaling.as_ref().expect("scaling ran");
    let counts: Vec<usize> = scaling.points.iter().map(|point| point.workers).collect();
    assert_eq!(counts, sizes.workers);

    let hot = entry.hot_key.as_ref().expect("hot-key ran");
    // Both locks with every strategy, but tenure's waiter for tenure alone.
    assert_eq!(
        hot.cells.len(),
        (2 * RetryStrategy::ALL.len() - 1) * sizes.hot_scopes.len() * sizes.hot_workers.len()
    );
    assert!(hot
        .cells
        .iter()
        .all(|cell| cell.acquisitions > 0 && cell.overlaps == 0));
    for cell in &hot.cells {
        if cell.strategy == RetryStrategy::WakeOnRelease {
            // In process, a wake-up racing a timeout is taken, never lost.
            assert_eq!(cell.wake_ups, cell.wakes_sent, "{cell:?}");
        } else {
            assert_eq!(
                (cell.wakes_sent, cell.wake_ups, cell.wake_timeouts),
                (0, 0, 0)
            );
        }
    }

    let queue = entry.queue.as_ref().expect("queue ran");
    for run in [&queue.tenure, &queue.raw] {
        assert_eq!(run.completed, sizes.queue_jobs as u64);
        assert_eq!((run.duplicates, run.refused_completions), (0, 0));
    }

    let heartbeat = entry.heartbeat.as_ref().expect("heartbeat-scale ran");
    assert_eq!(heartbeat.points.len(), 2 * sizes.heartbeat.len());

    let batch = entry.queue_batch.as_ref().expect("queue-batch ran");
    let limits: Vec<usize> = batch.points.iter().map(|point| point.limit).collect();
    assert_eq!(limits, [1, 10, 100]);
    for point in &batch.points {
        for run in [&point.tenure, &point.raw] {
            assert_eq!(run.completed, point.jobs as u64, "{point:?}");
            assert_eq!((run.duplicates, run.refused_completions), (0, 0));
        }
        assert!(
            point.speedup.is_some() && point.raw_speedup.is_some(),
            "{point:?}"
        );
    }

    let long = entry.long_run.as_ref().expect("long-run ran");
    assert_eq!(long.passes.len(), 1, "one pass off PostgreSQL");
    let pass = &long.passes[0];
    assert_eq!(pass.rounds.len(), sizes.long_run_rounds);
    assert!(pass.queue_last_to_first.is_some() && pass.admissions_last_to_first.is_some());
    for round in &pass.rounds {
        assert_eq!(round.jobs_completed, sizes.long_run_jobs as u64);
        assert_eq!(
            (
                round.duplicates,
                round.refused_completions,
                round.failed_cycles
            ),
            (0, 0, 0)
        );
    }
    assert!(pass.tables.is_empty());

    let takeover = entry.takeover.as_ref().expect("takeover ran");
    assert_eq!(takeover.trials, sizes.takeover_trials);
    assert_eq!(
        takeover.death_to_first_write.count,
        sizes.takeover_trials as u64
    );
    assert_eq!(
        (takeover.stale_writes_accepted, takeover.early_takeovers),
        (0, 0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_scenario_runs_sanely_on_memory() {
    let out = tempfile::tempdir().expect("temp dir");
    let report = tiny_run(BackendKind::Memory, out.path()).await;
    check(&report);
    let json = std::fs::read_to_string(report.write_json(out.path()).expect("json"))
        .expect("the JSON figures are readable");
    // One unit for every duration: microseconds, in fields named `*_us`.
    for other_unit in ["\"secs\"", "\"nanos\"", "_ms\"", "seconds\""] {
        assert!(!json.contains(other_unit), "{other_unit} in {json}");
    }
    assert!(json.contains("\"cell_us\""), "{json}");
    let charts = tenure_benches::plot::draw_all(&report, out.path()).expect("charts");
    let names: Vec<_> = charts
        .iter()
        .filter_map(|path| path.file_name()?.to_str())
        .collect();
    assert_eq!(
        names,
        [
            "scaling.svg",
            "hot-key.svg",
            "queue.svg",
            "heartbeat.svg",
            "takeover.svg"
        ]
    );
    let chart = |name: &str| std::fs::read_to_string(out.path().join(name)).expect("a chart");
    let takeover = chart("takeover.svg");
    assert!(
        takeover.contains("last renewal") && takeover.contains("floor: ttl + grace"),
        "the takeover chart counts bars and floor from one instant: {takeover}"
    );
    let hot_key = chart("hot-key.svg");
    let lines = hot_key.matches(" N=").count();
    assert!(
        (1..=2 * RetryStrategy::ALL.len()).contains(&lines),
        "{lines} hot-key series: one per lock and strategy, at the most racers"
    );
    let text = tenure_benches::report::render(&report);
    assert!(text.contains("hot-key fairness"), "{text}");
    assert!(text.contains("== queue-batch"), "{text}");
    assert!(text.contains("== long-run"), "{text}");
    for line in text.lines() {
        let width = line.chars().count();
        assert!(
            width <= tenure_benches::report::MAX_WIDTH,
            "{width} wide: {line}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_scenario_runs_sanely_on_sqlite() {
    let out = tempfile::tempdir().expect("temp dir");
    check(&tiny_run(BackendKind::Sqlite, out.path()).await);
}

/// The script floors stand in for Redis's baselines and keep the books the
/// bare ones keep: every admission renewed by its own fence, every job
/// claimed once and completed by the fence it was handed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_script_floors_run_sanely() {
    let Some(url) = tenure_test_support::shared::redis_url_for("redis_script_floors_run_sanely")
    else {
        return;
    };
    let out = tempfile::tempdir().expect("temp dir");
    let options = Options {
        backends: vec![BackendKind::Redis],
        scenarios: vec![
            ScenarioKind::SingleOp,
            ScenarioKind::Queue,
            ScenarioKind::QueueBatch,
        ],
        sizes: Sizes::tiny(),
        preset: "tiny",
        out_dir: out.path().to_path_buf(),
        redis_url: Some(url),
        redis_floor: true,
        progress: false,
        ..Options::standard()
    };
    let report = tenure_benches::run(&options, &Progress::hidden())
        .await
        .expect("the floors run");
    assert_eq!(report.safety_violations(), Vec::<String>::new());
    let entry = &report.backends[0];
    let single = entry.single_op.as_ref().expect("single-op ran");
    assert!(
        single.raw_baseline.contains("script floors"),
        "{}",
        single.raw_baseline
    );
    assert!(
        single.ops.iter().all(|op| op.raw.ops > 0),
        "{:?}",
        single.ops
    );
    let queue = entry.queue.as_ref().expect("queue ran");
    assert_eq!(queue.raw.completed, Sizes::tiny().queue_jobs as u64);
    assert_eq!(
        (queue.raw.duplicates, queue.raw.refused_completions),
        (0, 0)
    );
    let batch = entry.queue_batch.as_ref().expect("queue-batch ran");
    for point in &batch.points {
        assert_eq!(point.raw.completed, point.jobs as u64, "{point:?}");
        assert_eq!(
            (point.raw.duplicates, point.raw.refused_completions),
            (0, 0)
        );
    }
}

//! The run's figures: one serialisable [`Report`], printed as tables and
//! saved as JSON, plus the sanity checks every run must pass: safety (no
//! duplicate job, no stale write, no overlap, no early takeover) and timing
//! (no missed deadline), kept apart because only safety holds whatever the
//! machine's load.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::options::{BackendKind, Options, Sizes};
use crate::scenario::heartbeat::{HeartbeatReport, RenewMode};
use crate::scenario::hot_key::{HotKeyReport, RetryStrategy};
use crate::scenario::long_run::LongRunReport;
use crate::scenario::queue::QueueReport;
use crate::scenario::queue_batch::QueueBatchReport;
use crate::scenario::scaling::ScalingReport;
use crate::scenario::single_op::SingleOpReport;
use crate::scenario::takeover::TakeoverReport;
use crate::BenchResult;

/// Every figure of one run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// `standard`, `quick` or `tiny`.
    pub preset: &'static str,
    /// The sizes used.
    pub sizes: Sizes,
    /// When the run started (UTC, RFC 3339).
    pub started_at: String,
    /// CPUs the process could use.
    pub cpus: usize,
    /// Whether this was an optimised build (debug figures mean little).
    pub release_build: bool,
    /// One entry per backend.
    pub backends: Vec<BackendReport>,
}

impl Report {
    /// An empty report for a run with `options`.
    pub fn new(options: &Options) -> Self {
        Report {
            preset: options.preset,
            sizes: options.sizes.clone(),
            started_at: chrono::Utc::now().to_rfc3339(),
            cpus: std::thread::available_parallelism().map_or(1, usize::from),
            release_build: !cfg!(debug_assertions),
            backends: Vec::new(),
        }
    }

    /// Every sanity violation, one line each (empty when all is well): the
    /// [`safety_violations`](Report::safety_violations), then the
    /// [`timing_misses`](Report::timing_misses). A real run must have none.
    pub fn violations(&self) -> Vec<String> {
        let mut found = self.safety_violations();
        found.extend(self.timing_misses());
        found
    }

    /// Every broken promise that no load excuses, one line each: a failed
    /// scenario, an overlap or error in hot-key, a lost, duplicated or
    /// refused job, an early takeover or an accepted stale write.
    pub fn safety_violations(&self) -> Vec<String> {
        let mut found = Vec::new();
        for entry in &self.backends {
            let name = entry.backend;
            for failure in &entry.failures {
                found.push(format!("{name}: scenario failed: {failure}"));
            }
            if let Some(hot) = &entry.hot_key {
                for cell in hot
                    .cells
                    .iter()
                    .filter(|cell| cell.overlaps > 0 || cell.errors > 0)
                {
                    found.push(format!(
                        "{name} hot-key {:?} {} M={}: {} overlaps, {} errors",
                        cell.lock,
                        cell.strategy.name(),
                        cell.scopes,
                        cell.overlaps,
                        cell.errors
                    ));
                }
            }
            if let Some(queue) = &entry.queue {
                for (label, run) in [("tenure", &queue.tenure), ("raw", &queue.raw)] {
                    if run.duplicates > 0
                        || run.refused_completions > 0
                        || run.completed != queue.jobs as u64
                    {
                        found.push(format!(
                            "{name} queue {label}: {} completed of {}, {} duplicates, {} refused",
                            run.completed, queue.jobs, run.duplicates, run.refused_completions
                        ));
                    }
                }
            }
            if let Some(batch) = &entry.queue_batch {
                for point in &batch.points {
                    for (label, run) in [("tenure", &point.tenure), ("raw", &point.raw)] {
                        if run.duplicates > 0
                            || run.refused_completions > 0
                            || run.completed != point.jobs as u64
                        {
                            found.push(format!(
                                "{name} queue-batch {label} limit {}: {} completed of {}, \
                                 {} duplicates, {} refused",
                                point.limit,
                                run.completed,
                                point.jobs,
                                run.duplicates,
                                run.refused_completions
                            ));
                        }
                    }
                }
            }
            if let Some(long) = &entry.long_run {
                for pass in &long.passes {
                    for (index, round) in pass.rounds.iter().enumerate() {
                        if round.duplicates > 0
                            || round.refused_completions > 0
                            || round.failed_cycles > 0
                            || round.jobs_completed != long.jobs_per_round as u64
                        {
                            found.push(format!(
                                "{name} long-run {} round {}: {} completed of {}, {} duplicates, \
                                 {} refused, {} failed cycles",
                                pass.vacuum.name(),
                                index + 1,
                                round.jobs_completed,
                                long.jobs_per_round,
                                round.duplicates,
                                round.refused_completions,
                                round.failed_cycles
                            ));
                        }
                    }
                }
            }
            if let Some(takeover) = &entry.takeover {
                if takeover.stale_writes_accepted > 0 || takeover.early_takeovers > 0 {
                    found.push(format!(
                        "{name} takeover: {} stale writes accepted, {} early takeovers",
                        takeover.stale_writes_accepted, takeover.early_takeovers
                    ));
                }
            }
        }
        found
    }

    /// Every deadline the run missed, one line each: renewals with
    /// `renew_many` that came too late to keep a lease, and rival
    /// completions refused because the rival's own lease ran out (or its
    /// write timed out) first. These measure the machine as much as the
    /// library: a starved machine misses deadlines with every safety promise
    /// kept, which is why a keeper fail-stops.
    pub fn timing_misses(&self) -> Vec<String> {
        let mut found = Vec::new();
        for entry in &self.backends {
            let name = entry.backend;
            if let Some(heartbeat) = &entry.heartbeat {
                for point in heartbeat.points.iter().filter(|point| {
                    point.mode == RenewMode::RenewMany
                        && point.missed_while_admitting + point.missed_steady_state > 0
                }) {
                    found.push(format!(
                        "{name} heartbeat-scale L={}: {} missed deadlines with renew_many \
                         while admitting, {} once every lease was held",
                        point.leases, point.missed_while_admitting, point.missed_steady_state
                    ));
                }
            }
            if let Some(takeover) = &entry.takeover {
                if takeover.late_rival_completions > 0 {
                    found.push(format!(
                        "{name} takeover: {} rival completions came after the rival's own \
                         confirmed deadline",
                        takeover.late_rival_completions
                    ));
                }
            }
        }
        found
    }

    /// Writes `results.json` into `directory` and answers its path.
    pub fn write_json(&self, directory: &Path) -> BenchResult<PathBuf> {
        std::fs::create_dir_all(directory)?;
        let path = directory.join("results.json");
        std::fs::write(&path, serde_json::to_string_pretty(self)?)?;
        Ok(path)
    }
}

/// The figures of one backend.
#[derive(Debug, Clone, Serialize)]
pub struct BackendReport {
    /// Which backend.
    pub backend: BackendKind,
    /// Why it did not run, if it did not.
    pub skipped: Option<String>,
    /// single-op figures.
    pub single_op: Option<SingleOpReport>,
    /// scaling figures.
    pub scaling: Option<ScalingReport>,
    /// hot-key figures.
    pub hot_key: Option<HotKeyReport>,
    /// queue figures.
    pub queue: Option<QueueReport>,
    /// heartbeat-scale figures.
    pub heartbeat: Option<HeartbeatReport>,
    /// takeover figures.
    pub takeover: Option<TakeoverReport>,
    /// queue-batch figures.
    pub queue_batch: Option<QueueBatchReport>,
    /// long-run figures.
    pub long_run: Option<LongRunReport>,
    /// Scenarios that failed, with why.
    pub failures: Vec<String>,
}

impl BackendReport {
    /// An entry with no figures yet.
    pub fn new(backend: BackendKind) -> Self {
        BackendReport {
            backend,
            skipped: None,
            single_op: None,
            scaling: None,
            hot_key: None,
            queue: None,
            heartbeat: None,
            takeover: None,
            queue_batch: None,
            long_run: None,
            failures: Vec::new(),
        }
    }
}

/// Microseconds as a short human figure.
fn us(micros: u64) -> String {
    match micros {
        0..=999 => format!("{micros}µs"),
        1_000..=999_999 => format!("{:.2}ms", micros as f64 / 1e3),
        _ => format!("{:.2}s", micros as f64 / 1e6),
    }
}

fn rate(per_sec: f64) -> String {
    if per_sec >= 10_000.0 {
        format!("{:.0}k", per_sec / 1e3)
    } else {
        format!("{per_sec:.0}")
    }
}

fn micros_per_job(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_owned(), |value| format!("{value:.1}"))
}

fn times(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_owned(), |value| format!("{value:.2}"))
}

/// Widest line [`render`] prints.
pub const MAX_WIDTH: usize = 120;

/// Fastest slice ÷ slowest slice above which a cell is flagged as noise.
const NOISY_SPREAD: f64 = 2.0;

/// The legend of the `*` flag, printed once under a table that has one.
const NOISE_LEGEND: &str = "* noise, not a finding: a ratio above 1 (tenure runs the baseline's \
    statement and more, so the baseline lost time to the machine) or slices more than 2× apart \
    on one side (the machine's load moved during the cell). Lines: ops/s of the slowest–fastest \
    slice of each side, and the ratio they bound.";

/// `value` with a `*` when `flagged` (the table's notes say why).
fn flag(value: String, flagged: bool) -> String {
    if flagged {
        format!("{value}*")
    } else {
        value
    }
}

/// Whether a tenure ÷ raw cell is noise, and the note saying so: a ratio
/// above 1 (tenure does the baseline's work and more, so it cannot really be
/// faster) or slices too far apart on either side.
fn noise_note(
    cell: &str,
    ratio_value: Option<f64>,
    tenure: &crate::stats::Throughput,
    raw: &crate::stats::Throughput,
) -> Option<String> {
    let above_one = ratio_value.is_some_and(|r| r > 1.0);
    let spread = tenure.slice_spread().max(raw.slice_spread());
    if !above_one && spread <= NOISY_SPREAD {
        return None;
    }
    let why = if above_one {
        "ratio above 1"
    } else {
        "slices apart"
    };
    let range = crate::stats::ratio_range(tenure, raw)
        .map_or_else(String::new, |(lo, hi)| format!("; ratio {lo:.2}–{hi:.2}"));
    Some(format!(
        "* {cell} ({why}): tenure {}–{}, raw {}–{} ops/s{range}",
        rate(tenure.slice_min_per_sec),
        rate(tenure.slice_max_per_sec),
        rate(raw.slice_min_per_sec),
        rate(raw.slice_max_per_sec),
    ))
}

/// A plain text table: header, rule, rows, columns padded to fit, then
/// notes explaining flagged rows.
struct Table {
    title: String,
    header: Vec<&'static str>,
    rows: Vec<Vec<String>>,
    notes: Vec<String>,
}

impl Table {
    fn new(title: impl Into<String>, header: Vec<&'static str>) -> Self {
        Table {
            title: title.into(),
            header,
            rows: Vec::new(),
            notes: Vec::new(),
        }
    }

    fn render(&self, out: &mut String) {
        if self.rows.is_empty() {
            return;
        }
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let line = |cells: Vec<String>| {
            cells
                .iter()
                .zip(&widths)
                .map(|(cell, width)| format!("{cell:>width$}"))
                .collect::<Vec<_>>()
                .join("  ")
        };
        let _ = writeln!(out, "\n{}", wrap(&format!("== {}", self.title), MAX_WIDTH));
        let _ = writeln!(
            out,
            "{}",
            line(
                self.header
                    .iter()
                    .map(std::string::ToString::to_string)
                    .collect()
            )
        );
        let _ = writeln!(
            out,
            "{}",
            "-".repeat(widths.iter().sum::<usize>() + 2 * (widths.len() - 1))
        );
        for row in &self.rows {
            let _ = writeln!(out, "{}", line(row.clone()));
        }
        if self.notes.iter().any(|note| note.starts_with('*')) {
            let _ = writeln!(out, "{}", wrap(NOISE_LEGEND, MAX_WIDTH));
        }
        for note in &self.notes {
            let _ = writeln!(out, "{}", wrap(note, MAX_WIDTH));
        }
    }
}

/// `text` wrapped at spaces to lines of at most `width` characters, later
/// lines indented by two.
fn wrap(text: &str, width: usize) -> String {
    let mut lines = vec![String::new()];
    for word in text.split(' ') {
        let current = lines.last_mut().map_or(0, |line| line.chars().count());
        if current > 0 && current + 1 + word.chars().count() > width {
            lines.push("  ".to_owned());
        }
        if let Some(line) = lines.last_mut() {
            if !line.trim().is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
    }
    lines.join("\n")
}

/// The whole report as text tables, each line at most [`MAX_WIDTH`] wide.
pub fn render(report: &Report) -> String {
    let mut single = Table::new(
        "single-op (one worker; ratio = tenure ops/s ÷ raw ops/s)",
        vec![
            "backend",
            "op",
            "ops/s",
            "p50",
            "p99",
            "p999",
            "raw op",
            "raw ops/s",
            "raw p50",
            "ratio",
            "p50 ×",
        ],
    );
    let mut scaling = Table::new(
        "scaling (renew, distinct keys; ratio = tenure ÷ raw at the same N)",
        vec![
            "backend",
            "N",
            "ops/s",
            "p99",
            "raw ops/s",
            "raw p99",
            "ratio",
            "p99 ×",
        ],
    );
    let mut hot = Table::new(
        "hot-key: N workers race for M scopes (ceiling = M / hold; \
         gap = release start → next acquisition)",
        vec![
            "backend",
            "lock",
            "retry",
            "M",
            "N",
            "acq/s",
            "ceiling",
            "of ceiling",
            "fails/win",
            "gap p50",
            "gap p99",
        ],
    );
    let mut hot_fair = Table::new(
        "hot-key fairness and safety (jain = 1 when wins are even; starve = longest \
         time a worker went without a win; woken / timeouts = waits ended by a wake-up / \
         by the fallback)",
        vec![
            "backend", "lock", "retry", "M", "N", "jain", "starve", "woken", "timeouts",
            "overlaps", "errors",
        ],
    );
    let mut queue = Table::new(
        "queue (claim + complete until empty; ratio = tenure jobs/s ÷ raw jobs/s)",
        vec![
            "backend",
            "jobs",
            "N",
            "jobs/s",
            "claim p99",
            "dups",
            "raw jobs/s",
            "raw claim p99",
            "ratio",
        ],
    );
    let mut heartbeat = Table::new(
        "heartbeat-scale (one keeper; round = first renewal sent → last answered; n rounds, \
         p50 and max of them; calls and renewed are per round; lost adm = leases lost by the time the \
         last admission was answered, lost held = lost after that, while only renewing)",
        vec![
            "backend",
            "leases",
            "ttl",
            "mode",
            "admit",
            "n",
            "p50",
            "max",
            "max/beat",
            "calls",
            "renewed",
            "lost adm",
            "lost held",
            "B/lease",
        ],
    );
    let mut takeover = Table::new(
        "takeover (owner killed at random; floor = ttl + grace after its last renewal; \
         a rival keeper's reconciler adopts)",
        vec![
            "backend",
            "trials",
            "floor",
            "reconcile",
            "death→write p50",
            "max",
            "beyond floor p50",
            "max",
            "early",
            "stale accepted",
        ],
    );
    let mut batch = Table::new(
        "queue-batch (claim of `limit` jobs + complete_many until empty; ratio = tenure jobs/s ÷ raw \
         jobs/s at the same limit; × lim 1 = jobs/s ÷ the same side's at limit 1; srv µs/job = the server's \
         CPU time per job (Redis: main thread, INFO cpu; every client's), tenure's and raw's, where it says it)",
        vec![
            "backend",
            "limit",
            "jobs",
            "N",
            "jobs/s",
            "claim p99",
            "dups",
            "raw jobs/s",
            "ratio",
            "× lim 1",
            "raw × lim 1",
            "srv µs/job",
            "raw srv",
        ],
    );
    let mut long_run = Table::new(
        "long-run (consecutive rounds on growing tables; queue = jobs/s of claim + complete, \
         admit = admit + renew + succeed cycles/s; last/first = last round ÷ first; on PostgreSQL \
         claim bufs / holder bufs = shared buffers an EXPLAIN (ANALYZE, BUFFERS) of the claim's walk \
         to the first queued job / of a holder read touched, each round)",
        vec![
            "backend",
            "vacuum",
            "series",
            "rounds, in order",
            "last/first",
        ],
    );
    let mut long_tables = Table::new(
        "long-run pg_stat_user_tables over each pass (seq = sequential scans, read = tuples they \
         read, idx = index scans, upd / hot = rows updated / of them HOT, live / dead = rows at the \
         end, av = autovacuums)",
        vec![
            "backend", "vacuum", "table", "seq", "read", "idx", "upd", "hot", "live", "dead", "av",
        ],
    );
    let mut notes = Vec::new();
    for entry in &report.backends {
        let name = entry.backend.name().to_owned();
        if let Some(reason) = &entry.skipped {
            notes.push(format!("{name}: skipped ({reason})"));
        }
        if let Some(report) = &entry.single_op {
            for op in &report.ops {
                let note = noise_note(
                    &format!("{name} {}", op.op),
                    op.throughput_ratio,
                    &op.tenure,
                    &op.raw,
                );
                single.rows.push(vec![
                    name.clone(),
                    op.op.to_owned(),
                    rate(op.tenure.ops_per_sec),
                    us(op.tenure.latency.p50_us),
                    us(op.tenure.latency.p99_us),
                    us(op.tenure.latency.p999_us),
                    op.raw_op.to_owned(),
                    rate(op.raw.ops_per_sec),
                    us(op.raw.latency.p50_us),
                    flag(times(op.throughput_ratio), note.is_some()),
                    times(op.p50_ratio),
                ]);
                single.notes.extend(note);
            }
        }
        if let Some(report) = &entry.scaling {
            for point in &report.points {
                let note = noise_note(
                    &format!("{name} N={}", point.workers),
                    point.throughput_ratio,
                    &point.tenure,
                    &point.raw,
                );
                scaling.rows.push(vec![
                    name.clone(),
                    point.workers.to_string(),
                    rate(point.tenure.ops_per_sec),
                    us(point.tenure.latency.p99_us),
                    rate(point.raw.ops_per_sec),
                    us(point.raw.latency.p99_us),
                    flag(times(point.throughput_ratio), note.is_some()),
                    times(point.p99_ratio),
                ]);
                scaling.notes.extend(note);
            }
        }
        if let Some(report) = &entry.hot_key {
            for cell in &report.cells {
                let (woken, timeouts) = match cell.strategy {
                    RetryStrategy::WakeOnRelease => {
                        (cell.wake_ups.to_string(), cell.wake_timeouts.to_string())
                    }
                    RetryStrategy::FixedPoll
                    | RetryStrategy::JitteredBackoff
                    | RetryStrategy::TenureWaiter => ("-".to_owned(), "-".to_owned()),
                };
                let key = vec![
                    name.clone(),
                    format!("{:?}", cell.lock).to_lowercase(),
                    cell.strategy.name().to_owned(),
                    cell.scopes.to_string(),
                    cell.workers.to_string(),
                ];
                let mut speed = key.clone();
                speed.extend([
                    format!("{:.0}", cell.acquisitions_per_sec),
                    format!("{:.0}", cell.ceiling_per_sec),
                    format!("{:.0}%", cell.ceiling_ratio * 100.0),
                    format!("{:.1}", cell.failed_per_success),
                    us(cell.handoff_gap.p50_us),
                    us(cell.handoff_gap.p99_us),
                ]);
                hot.rows.push(speed);
                let mut fair = key;
                fair.extend([
                    format!("{:.2}", cell.jain_fairness),
                    us(cell.longest_starvation_us as u64),
                    woken,
                    timeouts,
                    cell.overlaps.to_string(),
                    cell.errors.to_string(),
                ]);
                hot_fair.rows.push(fair);
            }
            notes.push(format!("{name}: hot-key peer lock = {}", report.peer_lock));
            notes.push(format!(
                "{name}: hot-key wake-on-release = {}",
                report.wake_channel
            ));
        }
        if let Some(report) = &entry.queue {
            let above_one = report.throughput_ratio.is_some_and(|r| r > 1.0);
            if above_one {
                queue.notes.push(format!(
                    "* {name} (ratio above 1): one drain each, one after the other, so the \
                     baseline's drain met a busier machine"
                ));
            }
            queue.rows.push(vec![
                name.clone(),
                report.jobs.to_string(),
                report.workers.to_string(),
                rate(report.tenure.jobs_per_sec),
                us(report.tenure.claim.p99_us),
                report.tenure.duplicates.to_string(),
                rate(report.raw.jobs_per_sec),
                us(report.raw.claim.p99_us),
                flag(times(report.throughput_ratio), above_one),
            ]);
        }
        if let Some(report) = &entry.queue_batch {
            for point in &report.points {
                batch.rows.push(vec![
                    name.clone(),
                    point.limit.to_string(),
                    point.jobs.to_string(),
                    report.workers.to_string(),
                    rate(point.tenure.jobs_per_sec),
                    us(point.tenure.claim.p99_us),
                    point.tenure.duplicates.to_string(),
                    rate(point.raw.jobs_per_sec),
                    times(point.throughput_ratio),
                    times(point.speedup),
                    times(point.raw_speedup),
                    micros_per_job(point.tenure.server_us_per_job),
                    micros_per_job(point.raw.server_us_per_job),
                ]);
            }
            notes.push(format!(
                "{name}: queue-batch raw baseline = {}",
                report.raw_baseline
            ));
        }
        if let Some(report) = &entry.long_run {
            for pass in &report.passes {
                type Figure = fn(&crate::scenario::long_run::LongRunRound) -> f64;
                let series: [(&str, Figure, Option<f64>); 2] = [
                    (
                        "queue",
                        |round| round.queue_jobs_per_sec,
                        pass.queue_last_to_first,
                    ),
                    (
                        "admit",
                        |round| round.admissions_per_sec,
                        pass.admissions_last_to_first,
                    ),
                ];
                for (label, figure, last_to_first) in series {
                    let values: Vec<String> = pass
                        .rounds
                        .iter()
                        .map(|round| rate(figure(round)))
                        .collect();
                    long_run.rows.push(vec![
                        name.clone(),
                        pass.vacuum.name().to_owned(),
                        label.to_owned(),
                        values.join(" "),
                        times(last_to_first),
                    ]);
                }
                type Probed = fn(&crate::backend::Probe) -> i64;
                let probes: [(&str, Probed); 2] = [
                    ("claim bufs", |probe| probe.claim_buffers),
                    ("holder bufs", |probe| probe.holder_buffers),
                ];
                for (label, figure) in probes {
                    let values: Vec<i64> = pass
                        .rounds
                        .iter()
                        .filter_map(|round| round.probe.as_ref().map(figure))
                        .collect();
                    let (Some(first), Some(last)) = (values.first(), values.last()) else {
                        continue;
                    };
                    let last_to_first = crate::stats::ratio(*last as f64, *first as f64);
                    let shown: Vec<String> = values.iter().map(ToString::to_string).collect();
                    long_run.rows.push(vec![
                        name.clone(),
                        pass.vacuum.name().to_owned(),
                        label.to_owned(),
                        shown.join(" "),
                        times(last_to_first),
                    ]);
                }
                for table in &pass.tables {
                    long_tables.rows.push(vec![
                        name.clone(),
                        pass.vacuum.name().to_owned(),
                        table.table.clone(),
                        table.seq_scan.to_string(),
                        table.seq_tup_read.to_string(),
                        table.idx_scan.to_string(),
                        table.n_tup_upd.to_string(),
                        table.n_tup_hot_upd.to_string(),
                        table.n_live_tup.to_string(),
                        table.n_dead_tup.to_string(),
                        table.autovacuum_count.to_string(),
                    ]);
                }
            }
            if let Some(setting) = &report.server_autovacuum {
                long_run.notes.push(format!(
                    "{name}: the server's autovacuum = {setting} (read, never changed){}",
                    if setting == "off" {
                        "; with it off no table is autovacuumed, whatever its own setting"
                    } else {
                        ""
                    }
                ));
            }
        }
        if let Some(report) = &entry.heartbeat {
            for point in &report.points {
                heartbeat.rows.push(vec![
                    name.clone(),
                    point.leases.to_string(),
                    us(point.ttl_us as u64),
                    match point.mode {
                        RenewMode::RenewMany => "renew_many".to_owned(),
                        RenewMode::Solo => "solo†".to_owned(),
                    },
                    us(point.admit_us as u64),
                    point.rounds.to_string(),
                    us(point.round_p50_us as u64),
                    us(point.round_max_us as u64),
                    format!("{:.2}", point.round_to_beat),
                    format!("{:.0}", point.calls_per_round),
                    format!("{:.0}", point.renewals_per_round),
                    point.missed_while_admitting.to_string(),
                    point.missed_steady_state.to_string(),
                    point
                        .bytes_per_lease
                        .map_or_else(|| "-".to_owned(), |bytes| format!("{bytes:.0}")),
                ]);
            }
        }
        if let Some(report) = &entry.takeover {
            takeover.rows.push(vec![
                name.clone(),
                report.trials.to_string(),
                us(report.floor_us as u64),
                us(report.reconcile_interval_us as u64),
                us(report.death_to_first_write.p50_us),
                us(report.death_to_first_write.max_us),
                us(report.beyond_floor.p50_us),
                us(report.beyond_floor.max_us),
                report.early_takeovers.to_string(),
                report.stale_writes_accepted.to_string(),
            ]);
        }
    }
    let mut out = format!(
        "tenure benchmark: preset {}, {} CPUs, {} build, started {}\n",
        report.preset,
        report.cpus,
        if report.release_build {
            "release"
        } else {
            "DEBUG (figures meaningless)"
        },
        report.started_at
    );
    if heartbeat.rows.iter().any(|row| row[3].starts_with("solo")) {
        heartbeat.notes.push(
            "† solo: a comparison run, not how the keeper renews: the same leases renewed one \
             `renew` call each, to show what `renew_many` saves. Its long rounds, a max/beat \
             above 1 and leases missed are the point of the comparison, not a fault (the run \
             fails only on a renew_many row that misses)."
                .to_owned(),
        );
    }
    heartbeat.notes.push(
        "max/beat above 1 on a renew_many row means a round outlasted the beat: \
         the machine (or the store) could not keep up. B/lease: the benchmark process's \
         resident memory grown while admitting, per lease held (the keeper's state and the \
         caller's guard; allocator slack included)."
            .to_owned(),
    );
    for table in [
        &single,
        &scaling,
        &hot,
        &hot_fair,
        &queue,
        &heartbeat,
        &takeover,
        &batch,
        &long_run,
        &long_tables,
    ] {
        table.render(&mut out);
    }
    if !notes.is_empty() {
        let _ = writeln!(out);
        for note in notes {
            let _ = writeln!(out, "note: {note}");
        }
    }
    out
}

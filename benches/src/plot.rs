//! SVG charts of the scenarios whose shape says more than one figure:
//! scaling (ops/s by worker count, tenure beside its raw baseline), hot-key
//! (acquisitions/s by scope count, against the ceiling), queue (tenure's
//! jobs/s ÷ the baseline's, per backend), heartbeat-scale (round time by leases held, against
//! the beat) and takeover (death → first write, against the floor).
//!
//! Every measured value carries a marker, the x axis is labelled at every
//! measured x, and the y axis reads 10k, 1M, 2.5ms rather than raw digits.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::report::Report;
use crate::scenario::heartbeat::RenewMode;
use crate::scenario::hot_key::{LockKind, RetryStrategy};
use crate::stats::LatencySummary;
use crate::BenchResult;

/// Tableau's ten colours: distinct from one another on white.
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// The colour of the `index`th series; past ten, colours repeat with
/// hollow markers (see [`line_chart`]).
fn colour(index: usize) -> RGBColor {
    PALETTE[index % PALETTE.len()]
}

/// One line of a chart.
struct Series {
    label: String,
    points: Vec<(f64, f64)>,
    /// A bound to read the others against (ceiling, beat), drawn in black.
    reference: bool,
}

/// How a chart's y values read.
#[derive(Clone, Copy)]
enum Unit {
    /// A rate: 950, 12k, 1.2M.
    PerSec,
    /// Microseconds: 850µs, 2.5ms, 1.2s.
    Micros,
    /// A ratio: 0.54.
    Ratio,
}

impl Unit {
    fn format(self, value: f64) -> String {
        match self {
            Unit::PerSec => si(value),
            Unit::Micros if value >= 1e6 => format!("{}s", trim(value / 1e6)),
            Unit::Micros if value >= 1e3 => format!("{}ms", trim(value / 1e3)),
            Unit::Micros if value > 0.0 => format!("{}µs", trim(value)),
            Unit::Micros => "0".to_owned(),
            Unit::Ratio => format!("{value:.2}"),
        }
    }
}

/// `value` with a k / M suffix.
fn si(value: f64) -> String {
    if value >= 1e6 {
        format!("{}M", trim(value / 1e6))
    } else if value >= 1e3 {
        format!("{}k", trim(value / 1e3))
    } else {
        trim(value)
    }
}

/// At most three significant digits, no trailing zeros.
fn trim(value: f64) -> String {
    let text = if value >= 100.0 {
        format!("{value:.0}")
    } else if value >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    };
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    }
}

/// Draws every chart the report has data for into `directory`; answers
/// the files written.
pub fn draw_all(report: &Report, directory: &Path) -> BenchResult<Vec<PathBuf>> {
    std::fs::create_dir_all(directory)?;
    let mut written = Vec::new();
    let mut draw = |name: &str, drawn: Option<Chart>| -> BenchResult<()> {
        if let Some(chart) = drawn {
            let path = directory.join(name);
            chart.draw(&path)?;
            written.push(path);
        }
        Ok(())
    };
    draw("scaling.svg", scaling(report))?;
    draw("hot-key.svg", hot_key(report))?;
    draw("queue.svg", queue(report))?;
    draw("heartbeat.svg", heartbeat(report))?;
    draw("takeover.svg", takeover(report))?;
    Ok(written)
}

/// A chart to draw: a line chart over a log-2 x axis, or grouped bars.
enum Chart {
    Lines {
        title: String,
        x_label: &'static str,
        y_label: &'static str,
        unit: Unit,
        series: Vec<Series>,
    },
    Bars {
        title: String,
        y_label: &'static str,
        unit: Unit,
        groups: Vec<String>,
        /// One entry per bar of each group: its label and one value per group.
        bars: Vec<(String, Vec<f64>)>,
        /// A value every bar is read against, drawn as a line across the
        /// chart, with its label.
        reference: Option<(String, f64)>,
    },
}

impl Chart {
    fn draw(&self, path: &Path) -> BenchResult<()> {
        match self {
            Chart::Lines {
                title,
                x_label,
                y_label,
                unit,
                series,
            } => line_chart(path, title, x_label, y_label, *unit, series),
            Chart::Bars {
                title,
                y_label,
                unit,
                groups,
                bars,
                reference,
            } => bar_chart(
                path,
                title,
                y_label,
                *unit,
                groups,
                bars,
                reference.as_ref(),
            ),
        }
    }
}

fn scaling(report: &Report) -> Option<Chart> {
    let mut series = Vec::new();
    for entry in &report.backends {
        let Some(figures) = &entry.scaling else {
            continue;
        };
        let name = entry.backend.name();
        let points = |pick: fn(&crate::scenario::scaling::ScalingPoint) -> f64| {
            figures
                .points
                .iter()
                .map(|p| (p.workers as f64, pick(p)))
                .collect()
        };
        series.push(Series {
            label: format!("{name} tenure renew"),
            points: points(|p| p.tenure.ops_per_sec),
            reference: false,
        });
        series.push(Series {
            label: format!("{name} raw cas"),
            points: points(|p| p.raw.ops_per_sec),
            reference: false,
        });
    }
    (!series.is_empty()).then(|| Chart::Lines {
        title: "scaling: renewals/s by concurrent workers".to_owned(),
        x_label: "workers (N)",
        y_label: "ops/s (log)",
        unit: Unit::PerSec,
        series,
    })
}

fn hot_key(report: &Report) -> Option<Chart> {
    let mut series = Vec::new();
    let mut ceiling: Vec<(f64, f64)> = Vec::new();
    for entry in &report.backends {
        let Some(figures) = &entry.hot_key else {
            continue;
        };
        let name = entry.backend.name();
        // The most racers only: one line per lock and strategy stays
        // readable, and the contention the chart is about is at its worst
        // there (every racer count is in the report's table).
        let Some(racers) = figures.cells.iter().map(|c| c.workers).max() else {
            continue;
        };
        for lock in [LockKind::Tenure, LockKind::Peer] {
            for strategy in RetryStrategy::ALL {
                let points: Vec<(f64, f64)> = figures
                    .cells
                    .iter()
                    .filter(|c| c.lock == lock && c.strategy == strategy)
                    .filter(|c| c.workers == racers)
                    .map(|c| (c.scopes as f64, c.acquisitions_per_sec.max(1.0)))
                    .collect();
                if !points.is_empty() {
                    let lock = format!("{lock:?}").to_lowercase();
                    series.push(Series {
                        label: format!("{name} {lock} {} N={racers}", strategy.name()),
                        points,
                        reference: false,
                    });
                }
            }
        }
        if ceiling.is_empty() {
            ceiling = figures
                .cells
                .iter()
                .map(|c| (c.scopes as f64, c.ceiling_per_sec))
                .collect();
            ceiling.sort_by(|a, b| a.0.total_cmp(&b.0));
            ceiling.dedup();
        }
    }
    if series.is_empty() {
        return None;
    }
    series.push(Series {
        label: "ceiling M / hold".to_owned(),
        points: ceiling,
        reference: true,
    });
    Some(Chart::Lines {
        title: "hot-key: acquisitions/s by scopes raced for, at the most racers".to_owned(),
        x_label: "scopes (M)",
        y_label: "acquisitions/s (log)",
        unit: Unit::PerSec,
        series,
    })
}

fn queue(report: &Report) -> Option<Chart> {
    let runs: Vec<_> = report
        .backends
        .iter()
        .filter_map(|entry| Some((entry.backend.name(), entry.queue.as_ref()?)))
        .collect();
    let first = runs.first()?.1;
    Some(Chart::Bars {
        title: format!(
            "queue: {} jobs, {} workers: tenure jobs/s ÷ raw (1 = as fast; above 1 = noise)",
            first.jobs, first.workers
        ),
        y_label: "tenure ÷ raw",
        unit: Unit::Ratio,
        groups: runs.iter().map(|(name, _)| (*name).to_owned()).collect(),
        bars: vec![(
            "tenure claim + complete ÷ the bare claim + complete".to_owned(),
            runs.iter()
                .map(|(_, q)| q.throughput_ratio.unwrap_or(0.0))
                .collect(),
        )],
        reference: Some(("as fast as the bare statements".to_owned(), 1.0)),
    })
}

fn heartbeat(report: &Report) -> Option<Chart> {
    let mut series = Vec::new();
    let mut beats: Vec<(f64, f64)> = Vec::new();
    for entry in &report.backends {
        let Some(figures) = &entry.heartbeat else {
            continue;
        };
        let name = entry.backend.name();
        for (mode, label) in [
            (RenewMode::RenewMany, "renew_many"),
            (RenewMode::Solo, "solo (comparison)"),
        ] {
            let points: Vec<(f64, f64)> = figures
                .points
                .iter()
                .filter(|p| p.mode == mode)
                .map(|p| (p.leases as f64, p.round_max_us.max(1.0)))
                .collect();
            if !points.is_empty() {
                series.push(Series {
                    label: format!("{name} {label} slowest round"),
                    points,
                    reference: false,
                });
            }
        }
        if beats.is_empty() {
            beats = figures
                .points
                .iter()
                .map(|p| (p.leases as f64, p.beat_us))
                .collect();
            beats.sort_by(|a, b| a.0.total_cmp(&b.0));
            beats.dedup();
        }
    }
    if series.is_empty() {
        return None;
    }
    series.push(Series {
        label: "the beat (ttl / 3): a round must end within it".to_owned(),
        points: beats,
        reference: true,
    });
    Some(Chart::Lines {
        title: "heartbeat-scale: one keeper's slowest renewal round by leases held".to_owned(),
        x_label: "leases held (L)",
        y_label: "round time (log)",
        unit: Unit::Micros,
        series,
    })
}

fn takeover(report: &Report) -> Option<Chart> {
    let runs: Vec<_> = report
        .backends
        .iter()
        .filter_map(|entry| Some((entry.backend.name(), entry.takeover.as_ref()?)))
        .collect();
    runs.first()?;
    // Every bar and the floor count from one instant, the owner's last
    // renewal: from its death, the write could look sooner than the floor.
    let floor = runs.first()?.1.floor_us;
    let since_last_renewal = |pick: fn(&LatencySummary) -> u64| -> Vec<f64> {
        runs.iter()
            .map(|(_, t)| t.floor_us + pick(&t.beyond_floor) as f64)
            .collect()
    };
    Some(Chart::Bars {
        title: "takeover: the owner's last renewal → the rival's first fenced write".to_owned(),
        y_label: "time",
        unit: Unit::Micros,
        groups: runs.iter().map(|(name, _)| (*name).to_owned()).collect(),
        bars: vec![
            ("p50".to_owned(), since_last_renewal(|l| l.p50_us)),
            ("max".to_owned(), since_last_renewal(|l| l.max_us)),
        ],
        reference: Some((
            "floor: ttl + grace (nothing may come sooner)".to_owned(),
            floor,
        )),
    })
}

/// Tick values for a log axis from `low` to `high`: 1, 2 and 5 times each
/// power of ten, or only the powers when the range spans over three decades.
fn log_ticks(low: f64, high: f64) -> Vec<f64> {
    let steps: &[f64] = if high / low > 1e3 {
        &[1.0]
    } else {
        &[1.0, 2.0, 5.0]
    };
    let (first, last) = (low.log10().floor() as i32, high.log10().ceil() as i32);
    (first..=last)
        .flat_map(|power| steps.iter().map(move |step| step * 10_f64.powi(power)))
        .filter(|tick| (low..=high).contains(tick))
        .collect()
}

/// Pixels beside a line chart for its legend.
const LEGEND_WIDTH: u32 = 340;

/// The light grey of the major grid lines.
fn grid() -> ShapeStyle {
    RGBColor(220, 220, 220).stroke_width(1)
}

/// A line chart with a log-2 x axis labelled at every measured x and a
/// log-10 y axis; a marker on every measured point.
fn line_chart(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    unit: Unit,
    series: &[Series],
) -> BenchResult<()> {
    let mut xs: Vec<f64> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    let (x_min, x_max) = (
        xs.first().copied().unwrap_or(1.0),
        xs.last().copied().unwrap_or(2.0),
    );
    let (mut y_min, mut y_max) = (f64::MAX, 1.0_f64);
    for (_, y) in series.iter().flat_map(|s| s.points.iter().copied()) {
        y_min = y_min.min(y.max(1.0));
        y_max = y_max.max(y);
    }
    let root = SVGBackend::new(path, (1000 + LEGEND_WIDTH, 640)).into_drawing_area();
    root.fill(&WHITE)?;
    // The legend goes beside the plot, never over a measured point.
    let (plot, legend) = root.split_horizontally(1000);
    let mut chart = ChartBuilder::on(&plot)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .build_cartesian_2d(
            (x_min / 1.3..(x_max * 1.3).max(x_min * 2.0))
                .log_scale()
                .with_key_points(xs),
            (y_min / 2.0..y_max * 3.0)
                .log_scale()
                .with_key_points(log_ticks(y_min / 2.0, y_max * 3.0)),
        )?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .bold_line_style(grid())
        .light_line_style(TRANSPARENT)
        .x_label_formatter(&|x| si(*x))
        .y_label_formatter(&|y| unit.format(*y))
        .label_style(("sans-serif", 15))
        .draw()?;
    let mut measured = 0;
    let mut entries = Vec::new();
    for line in series {
        let (color, marker) = if line.reference {
            (BLACK, BLACK.stroke_width(2))
        } else {
            let color = colour(measured);
            // Past ten series colours repeat, with hollow markers.
            let filled = measured < PALETTE.len();
            measured += 1;
            let marker = if filled {
                color.filled()
            } else {
                color.stroke_width(2)
            };
            (color, marker)
        };
        let width = if line.reference { 1 } else { 2 };
        chart.draw_series(LineSeries::new(
            line.points.iter().copied(),
            color.stroke_width(width),
        ))?;
        entries.push((&line.label, color.stroke_width(width), marker));
        chart.draw_series(
            line.points
                .iter()
                .map(move |&point| Circle::new(point, 4, marker)),
        )?;
    }
    for (row, (label, stroke, marker)) in (0_i32..).zip(entries) {
        let y = 60 + row * 22;
        legend.draw(&PathElement::new(vec![(4, y), (28, y)], stroke))?;
        legend.draw(&Circle::new((16, y), 4, marker))?;
        legend.draw(&Text::new(label.clone(), (36, y - 8), ("sans-serif", 14)))?;
    }
    root.present()?;
    Ok(())
}

/// Grouped bars on a linear y axis from 0, the value written above each bar.
fn bar_chart(
    path: &Path,
    title: &str,
    y_label: &str,
    unit: Unit,
    groups: &[String],
    bars: &[(String, Vec<f64>)],
    reference: Option<&(String, f64)>,
) -> BenchResult<()> {
    let y_max = bars
        .iter()
        .flat_map(|(_, values)| values.iter().copied())
        .chain(reference.map(|(_, value)| *value))
        .fold(1.0_f64, f64::max);
    let width = (bars.len() + 1) as f64;
    let root = SVGBackend::new(path, (1000, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..groups.len() as f64, 0.0..y_max * 1.25)?;
    let names = groups.to_vec();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .bold_line_style(grid())
        .light_line_style(TRANSPARENT)
        .x_labels(groups.len() * 2 + 1)
        .x_label_formatter(&|x| {
            let index = x.floor() as usize;
            let centred = (x - x.floor() - 0.5).abs() < 1e-6;
            match names.get(index) {
                Some(name) if centred => name.clone(),
                _ => String::new(),
            }
        })
        .y_desc(y_label)
        .y_label_formatter(&|y| unit.format(*y))
        .label_style(("sans-serif", 15))
        .draw()?;
    for (bar, (label, values)) in bars.iter().enumerate() {
        let color = colour(bar);
        let left = |group: usize| group as f64 + (bar as f64 + 0.5) / width;
        let right = |group: usize| group as f64 + (bar as f64 + 1.5) / width;
        chart
            .draw_series(values.iter().enumerate().map(|(group, &value)| {
                Rectangle::new([(left(group), 0.0), (right(group), value)], color.filled())
            }))?
            .label(label.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], color.filled()));
        chart.draw_series(values.iter().enumerate().map(|(group, &value)| {
            Text::new(
                unit.format(value),
                (
                    (left(group) + right(group)) / 2.0 - 0.04,
                    value + y_max * 0.03,
                ),
                ("sans-serif", 13),
            )
        }))?;
    }
    if let Some((label, value)) = reference {
        let value = *value;
        chart
            .draw_series(DashedLineSeries::new(
                [(0.0, value), (groups.len() as f64, value)],
                8,
                5,
                BLACK.stroke_width(2),
            ))?
            .label(label.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 14, y)], BLACK.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .position(SeriesLabelPosition::UpperRight)
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_labels_read_as_people_write_them() {
        assert_eq!(log_ticks(150.0, 3000.0), [200.0, 500.0, 1000.0, 2000.0]);
        assert_eq!(log_ticks(1.0, 1e5), [1.0, 10.0, 100.0, 1e3, 1e4, 1e5]);
        assert_eq!(si(10_000_000.0), "10M");
        assert_eq!(si(12_500.0), "12.5k");
        assert_eq!(si(16.0), "16");
        assert_eq!(Unit::Micros.format(2_500.0), "2.5ms");
        assert_eq!(Unit::Micros.format(1_200_000.0), "1.2s");
        assert_eq!(Unit::Micros.format(850.0), "850µs");
    }
}

//! SVG charts of the two scenarios whose shape matters more than any one
//! figure: scaling (ops/s by worker count, tenure beside its raw baseline)
//! and hot-key (acquisitions/s by scope count, against the ceiling).

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::report::Report;
use crate::scenario::hot_key::{LockKind, RetryStrategy};
use crate::BenchResult;

/// One line of a chart.
struct Series {
    label: String,
    points: Vec<(f64, f64)>,
}

/// Draws every chart the report has data for into `directory`; answers
/// the files written.
pub fn draw_all(report: &Report, directory: &Path) -> BenchResult<Vec<PathBuf>> {
    std::fs::create_dir_all(directory)?;
    let mut written = Vec::new();

    let mut scaling = Vec::new();
    for entry in &report.backends {
        let Some(figures) = &entry.scaling else {
            continue;
        };
        let name = entry.backend.name();
        scaling.push(Series {
            label: format!("{name} tenure renew"),
            points: figures
                .points
                .iter()
                .map(|p| (p.workers as f64, p.tenure.ops_per_sec))
                .collect(),
        });
        scaling.push(Series {
            label: format!("{name} raw cas"),
            points: figures
                .points
                .iter()
                .map(|p| (p.workers as f64, p.raw.ops_per_sec))
                .collect(),
        });
    }
    if !scaling.is_empty() {
        let path = directory.join("scaling.svg");
        chart(
            &path,
            "scaling: renewals/s by concurrent workers",
            "workers",
            "ops/s (log)",
            &scaling,
        )?;
        written.push(path);
    }

    let mut hot = Vec::new();
    let mut ceiling: Vec<(f64, f64)> = Vec::new();
    for entry in &report.backends {
        let Some(figures) = &entry.hot_key else {
            continue;
        };
        let name = entry.backend.name();
        let mut worker_counts: Vec<usize> = figures.cells.iter().map(|c| c.workers).collect();
        worker_counts.sort_unstable();
        worker_counts.dedup();
        for lock in [LockKind::Tenure, LockKind::Peer] {
            for strategy in RetryStrategy::ALL {
                for &racers in &worker_counts {
                    let points: Vec<(f64, f64)> = figures
                        .cells
                        .iter()
                        .filter(|c| c.lock == lock && c.strategy == strategy)
                        .filter(|c| c.workers == racers)
                        .map(|c| (c.scopes as f64, c.acquisitions_per_sec.max(1.0)))
                        .collect();
                    if !points.is_empty() {
                        let lock = format!("{lock:?}").to_lowercase();
                        hot.push(Series {
                            label: format!("{name} {lock} {} N={racers}", strategy.name()),
                            points,
                        });
                    }
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
    if !hot.is_empty() {
        hot.push(Series {
            label: "ceiling M / hold".to_owned(),
            points: ceiling,
        });
        let path = directory.join("hot-key.svg");
        chart(
            &path,
            "hot-key: acquisitions/s by scopes raced for",
            "scopes (M)",
            "acquisitions/s (log)",
            &hot,
        )?;
        written.push(path);
    }
    Ok(written)
}

/// A line chart with a log-2 x axis and a log-10 y axis.
fn chart(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> BenchResult<()> {
    let all = series.iter().flat_map(|s| s.points.iter().copied());
    let (mut x_max, mut y_min, mut y_max) = (1.0_f64, f64::MAX, 1.0_f64);
    for (x, y) in all {
        x_max = x_max.max(x);
        y_min = y_min.min(y.max(1.0));
        y_max = y_max.max(y);
    }
    let root = SVGBackend::new(path, (960, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(
            (1.0..x_max.max(2.0)).log_scale(),
            (y_min / 2.0..y_max * 2.0).log_scale(),
        )?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()?;
    for (index, line) in series.iter().enumerate() {
        let color = Palette99::pick(index).to_rgba();
        chart
            .draw_series(LineSeries::new(
                line.points.iter().copied(),
                color.stroke_width(2),
            ))?
            .label(line.label.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()?;
    root.present()?;
    Ok(())
}

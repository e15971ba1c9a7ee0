//! The progress bar of long runs: one step per (backend, scenario), the
//! current cell as its message. Hidden when stdout is not a terminal, so
//! redirected output and CI logs stay clean.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// A progress bar, possibly hidden.
#[derive(Debug, Clone)]
pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// A bar of `steps` steps, shown only when `wanted` and stdout is a terminal.
    pub fn new(steps: u64, wanted: bool) -> Self {
        if !wanted || !std::io::stdout().is_terminal() {
            return Self::hidden();
        }
        let bar = ProgressBar::new(steps);
        if let Ok(style) =
            ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
        {
            bar.set_style(style);
        }
        bar.enable_steady_tick(Duration::from_millis(200));
        Progress { bar }
    }

    /// A bar that shows nothing.
    pub fn hidden() -> Self {
        Progress {
            bar: ProgressBar::hidden(),
        }
    }

    /// Names what runs now.
    pub fn cell(&self, label: impl Into<String>) {
        self.bar.set_message(label.into());
    }

    /// One (backend, scenario) step done.
    pub fn step_done(&self) {
        self.bar.inc(1);
    }

    /// Prints a line above the bar (or plainly when hidden).
    pub fn println(&self, line: impl AsRef<str>) {
        if self.bar.is_hidden() {
            eprintln!("{}", line.as_ref());
        } else {
            self.bar.println(line.as_ref());
        }
    }

    /// Removes the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

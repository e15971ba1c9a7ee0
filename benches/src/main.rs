//! `cargo run --release -p tenure-benches -- [options]`: see `--help` and
//! BENCHMARKS.md.

use std::process::ExitCode;

use tenure_benches::options::{self, Command};
use tenure_benches::progress::Progress;

fn main() -> ExitCode {
    let options = match options::parse(std::env::args().skip(1)) {
        Ok(Command::Run(options)) => options,
        Ok(Command::Help) => {
            print!("{}", options::USAGE);
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let steps = (options.backends.len() * options.scenarios.len()) as u64;
    let progress = Progress::new(steps, options.progress);
    let outcome = runtime.block_on(tenure_benches::run(&options, &progress));
    progress.finish();
    let report = match outcome {
        Ok(report) => report,
        Err(error) => {
            eprintln!("{error}");
            return ExitCode::FAILURE;
        }
    };
    print!("{}", tenure_benches::report::render(&report));
    match report.write_json(&options.out_dir) {
        Ok(path) => println!("\nfigures: {}", path.display()),
        Err(error) => eprintln!("could not write the JSON figures: {error}"),
    }
    match tenure_benches::plot::draw_all(&report, &options.out_dir) {
        Ok(paths) => {
            for path in paths {
                println!("chart: {}", path.display());
            }
        }
        Err(error) => eprintln!("could not draw the charts: {error}"),
    }
    let violations = report.violations();
    if violations.is_empty() {
        return ExitCode::SUCCESS;
    }
    for violation in &violations {
        eprintln!("VIOLATION {violation}");
    }
    ExitCode::FAILURE
}

//! The `tenure` operator command line; see the `tenure_cli` crate docs.

fn main() -> std::process::ExitCode {
    tenure_cli::main()
}

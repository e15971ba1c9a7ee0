//! Private servers whose wall clock runs a chosen offset from the host's.
//!
//! The kit's clock cases (`tenure_conformance::offset_clock`) need a store
//! whose clock disagrees with the process's. A server reads the host's
//! clock, which no test may move; so it is started with a small library
//! preloaded (`offset_clock.c`, built here with the system's C compiler,
//! the one Rust links with) that adds the offset to every wall-clock
//! reading the server makes and leaves its monotonic clocks alone.
//! libfaketime does the same in general, but hangs redis-server, whose
//! allocator reads the clock while libfaketime is still starting.

use std::ffi::OsString;
use std::io;
use std::path::Path;

use tokio::process::Command;

/// The preloaded library's source.
const SOURCE: &str = include_str!("offset_clock.c");
/// The variable the library reads its offset from, in microseconds.
const OFFSET_VARIABLE: &str = "TENURE_CLOCK_OFFSET_MICROS";

/// Variables a server is started with, beside the test process's own.
pub(crate) type Environment = Vec<(String, OsString)>;

/// The environment under which a server's wall clock runs `offset_micros`
/// from the host's (ahead when positive); builds the library in `dir`, the
/// server's own directory, removed with it.
///
/// # Errors
///
/// When the C compiler `cc` is missing or cannot build the library.
pub(crate) async fn environment(dir: &Path, offset_micros: i64) -> io::Result<Environment> {
    let source = dir.join("offset_clock.c");
    let library = dir.join("offset_clock.so");
    std::fs::write(&source, SOURCE)?;
    let output = Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(&library)
        .arg(&source)
        .output()
        .await
        .map_err(|error| {
            io::Error::new(
                error.kind(),
                format!("cannot run `cc` to build the clock-offset library: {error}"),
            )
        })?;
    if !output.status.success() {
        return Err(io::Error::other(format!(
            "`cc` could not build the clock-offset library: {}",
            String::from_utf8_lossy(&output.stderr)
        )));
    }
    Ok(vec![
        ("LD_PRELOAD".to_owned(), library.into_os_string()),
        (OFFSET_VARIABLE.to_owned(), offset_micros.to_string().into()),
    ])
}

//! Server processes that die with the test process.
//!
//! A server kept in a `static` for a whole test binary is never dropped, so
//! no destructor can stop it. Each one therefore runs under a small `sh`
//! watchdog that holds a pipe from the test process: when the test process
//! exits, however it exits, the pipe closes and the watchdog kills its
//! server. Dropping a [`Watched`] closes the pipe too, and waits (bounded)
//! until the watchdog has reaped the server.

use std::ffi::OsStr;
use std::io;
use std::path::Path;
use std::process::Stdio;

use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, ChildStdin, Command};

use crate::offset_clock::Environment;
use crate::servers::{READY_BOUND, REAP_STEP};

/// Pause between two reads of a starting server's log.
const LOG_POLL: std::time::Duration = std::time::Duration::from_millis(20);

/// The watchdog: starts `$PROGRAM` with the arguments it is given, its log
/// appended to `$LOG`, prints its PID, and kills it once its own standard
/// input closes.
const WATCHDOG: &str = r#""$PROGRAM" "$@" >>"$LOG" 2>&1 & pid=$!; echo "$pid"; read _ignored; kill -9 "$pid" 2>/dev/null; wait "$pid""#;

/// A running server: its watchdog, the pipe that keeps it waiting, and the
/// server's own PID.
#[derive(Debug)]
pub(crate) struct Watched {
    watchdog: Child,
    lifeline: Option<ChildStdin>,
    pid: u32,
}

impl Watched {
    /// Starts `program` with `args` and `environment` under a watchdog, its
    /// output appended to `log`; answers once the watchdog reported the
    /// server's PID (the server may not accept connections yet).
    pub(crate) async fn launch<Arg: AsRef<OsStr>>(
        program: &str,
        args: impl IntoIterator<Item = Arg>,
        environment: &Environment,
        log: &Path,
    ) -> io::Result<Self> {
        let mut watchdog = Command::new("sh")
            .args(["-c", WATCHDOG, "sh"])
            .args(args)
            .envs(environment.iter().map(|(name, value)| (name, value)))
            .env("PROGRAM", program)
            .env("LOG", log)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()?;
        let lifeline = watchdog.stdin.take();
        let stdout = watchdog
            .stdout
            .take()
            .ok_or_else(|| io::Error::other("the watchdog's output is not piped"))?;
        let mut line = String::new();
        let read =
            tokio::time::timeout(READY_BOUND, BufReader::new(stdout).read_line(&mut line)).await;
        let pid = match read {
            Ok(Ok(_)) => line.trim().parse::<u32>().ok(),
            _ => None,
        };
        let Some(pid) = pid else {
            // Closing the pipe has the watchdog kill a server it started;
            // killing the watchdog itself would leave that server running.
            drop(lifeline);
            if tokio::time::timeout(READY_BOUND, watchdog.wait())
                .await
                .is_err()
            {
                let _ = watchdog.start_kill();
            }
            return Err(io::Error::other(format!(
                "the watchdog of {program} did not report a PID: {line:?}"
            )));
        };
        Ok(Watched {
            watchdog,
            lifeline,
            pid,
        })
    }

    /// Starts `program` with `args` and `environment` as
    /// [`launch`](Self::launch) does, and waits (bounded) until what it
    /// appends to `log` from now on holds a line containing `ready`. Killed
    /// when it exits or does not get ready in time.
    pub(crate) async fn launch_until_logged<Arg: AsRef<OsStr>>(
        program: &str,
        args: impl IntoIterator<Item = Arg>,
        environment: &Environment,
        log: &Path,
        ready: &str,
    ) -> io::Result<Self> {
        let logged_before = std::fs::metadata(log).map_or(0, |metadata| metadata.len());
        let server = Self::launch(program, args, environment, log).await?;
        let give_up = tokio::time::Instant::now() + READY_BOUND;
        loop {
            let text = std::fs::read(log).unwrap_or_default();
            let new = text
                .get(usize::try_from(logged_before).unwrap_or(usize::MAX)..)
                .unwrap_or_default();
            if String::from_utf8_lossy(new).contains(ready) {
                return Ok(server);
            }
            let why = if server.exited() {
                format!("{program} exited before it logged {ready:?}")
            } else if tokio::time::Instant::now() >= give_up {
                format!("{program} did not log {ready:?} within {READY_BOUND:?}")
            } else {
                tokio::time::sleep(LOG_POLL).await;
                continue;
            };
            let _ = server.stop().await;
            return Err(io::Error::other(format!("{why} (log: {})", log.display())));
        }
    }

    /// The server's PID.
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether the server has exited (it is gone, or a zombie its watchdog
    /// has not reaped yet).
    fn exited(&self) -> bool {
        match std::fs::read_to_string(format!("/proc/{}/stat", self.pid)) {
            // The state follows the command name, which is in parentheses.
            Ok(stat) => stat
                .rsplit_once(") ")
                .is_none_or(|(_, fields)| fields.starts_with('Z')),
            Err(_) => true,
        }
    }

    /// Kills the server by its PID (SIGKILL), then lets the watchdog exit
    /// and reaps it.
    pub(crate) async fn stop(mut self) -> io::Result<()> {
        let _ = Command::new("kill")
            .args(["-KILL", &self.pid.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .await;
        drop(self.lifeline.take());
        self.watchdog.wait().await.map(drop)
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        // The watchdog kills its server once the pipe closes; reaped here,
        // as the test process may exit right after, leaving nobody to.
        if self.lifeline.take().is_none() {
            return;
        }
        let give_up = std::time::Instant::now() + READY_BOUND;
        while matches!(self.watchdog.try_wait(), Ok(None)) && std::time::Instant::now() < give_up {
            std::thread::sleep(REAP_STEP);
        }
    }
}

/// A shell that runs a clean-up script once the test process exits, however
/// it exits: the pipe from the test process closes, the shell's `read`
/// returns, and the script runs. For a server kept in a `static` for a whole
/// test binary, whose destructor never runs.
#[derive(Debug)]
pub(crate) struct Lifeline {
    /// Kept so the shell is a child of the test process until it exits;
    /// never waited for (it outlives the test process by design).
    _shell: std::process::Child,
    _pipe: std::process::ChildStdin,
}

impl Lifeline {
    /// Starts the shell that will run `script` (`sh` syntax).
    pub(crate) fn spawn(script: &str) -> io::Result<Self> {
        let mut shell = std::process::Command::new("sh")
            .args(["-c", &format!("read _ignored; {script}")])
            .stdin(Stdio::piped())
            // Nothing of the test's output: `cargo test` reads it until
            // every holder has closed it.
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let pipe = shell
            .stdin
            .take()
            .ok_or_else(|| io::Error::other("the clean-up shell's input is not piped"))?;
        Ok(Lifeline {
            _shell: shell,
            _pipe: pipe,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::Lifeline;

    #[test]
    fn a_lifeline_runs_its_script_once_the_pipe_closes() {
        let dir = crate::servers::fresh_dir("tenure-lifeline").expect("a fresh directory");
        let script = format!("rm -rf '{}'", dir.display());
        let Lifeline {
            _shell: mut shell,
            _pipe: pipe,
        } = Lifeline::spawn(&script).expect("the shell starts");
        assert!(dir.exists(), "the script ran before the pipe closed");
        drop(pipe);
        let status = shell.wait().expect("the shell is reaped");
        assert!(status.success(), "{status}");
        assert!(!dir.exists(), "the script did not run");
    }
}

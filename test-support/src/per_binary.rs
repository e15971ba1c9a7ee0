//! A private server (or cluster) started once per test binary and shared
//! by its tests: the first test that asks starts it, the rest reuse it, and
//! it stops when the binary exits (its processes run under a
//! [watchdog](crate::watchdog)).
//!
//! It is started on a thread and runtime of its own, kept beside it: the
//! test that happens to start it runs in a runtime of its own, which ends
//! with that test, and would take the server's tasks with it.

use std::future::Future;
use std::io;
use std::sync::OnceLock;

/// One per-binary server (see the [module](self)); keep it in a `static`.
pub struct PerBinary<T> {
    started: OnceLock<Result<(tokio::runtime::Runtime, T), String>>,
}

impl<T> Default for PerBinary<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> PerBinary<T> {
    /// Nothing started yet.
    pub const fn new() -> Self {
        PerBinary {
            started: OnceLock::new(),
        }
    }
}

impl<T: Send + Sync + 'static> PerBinary<T> {
    /// The server, `start`ed on first use; or why it could not be
    /// (`what` names it), the same answer for every later test.
    ///
    /// # Errors
    ///
    /// Why the server could not be started.
    pub fn get_or_start<F, Fut>(&self, what: &str, start: F) -> Result<&T, String>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = io::Result<T>>,
    {
        let started = self.started.get_or_init(|| {
            let what = what.to_owned();
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .enable_all()
                    .build()
                    .map_err(|error| error.to_string())?;
                let server = runtime
                    .block_on(start())
                    .map_err(|error| format!("cannot start {what}: {error}"))?;
                Ok((runtime, server))
            })
            .join()
            .unwrap_or_else(|_| Err("starting a per-binary server panicked".to_owned()))
        });
        match started {
            Ok((_, server)) => Ok(server),
            Err(reason) => Err(reason.clone()),
        }
    }
}

//! Private database servers a test may restart.
//!
//! The shared servers (`TENURE_PG_URL`, `TENURE_REDIS_URL`) serve every test
//! run on the machine at once, so no test may stop them. A test that needs a
//! server going away and coming back starts its own: [`PrivatePostgres`]
//! (`initdb` + `pg_ctl` in a temporary directory) or [`PrivateRedis`]
//! (`redis-server` with an fsync-always append-only file in a temporary
//! directory), each on a free loopback port, each stopped and its directory
//! removed when dropped — also when the test panics.
//!
//! Both are the conformance kit's [`RestartableServer`]: a backend's test
//! factory hands one to the kit's restart suite
//! (`tenure_conformance::suites::restart`), which holds the scenario.

use std::io;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use tenure_conformance::suites::restart::RestartableServer;
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};

/// `call` until it answers `Ok`, at most 20 times, every error meanwhile
/// retryable: the first calls after a restart meet the dead connection.
///
/// # Panics
///
/// On an error that is not retryable, or when the 20th call still fails.
pub async fn until_ok<T, Fut>(mut call: impl FnMut() -> Fut) -> T
where
    Fut: std::future::Future<Output = tenure_lease_core::Result<T>>,
{
    let mut last = None;
    for _ in 0..20 {
        match call().await {
            Ok(value) => return value,
            Err(error) => {
                assert!(error.is_retryable(), "{error}");
                last = Some(error);
            }
        }
    }
    panic!("still failing after a restart: {last:?}");
}

/// Where Debian-style packages install PostgreSQL's server programs, one
/// directory per major version.
const POSTGRES_ROOT: &str = "/usr/lib/postgresql";
/// The `redis-server` program.
const REDIS_SERVER: &str = "/usr/bin/redis-server";
/// The account PostgreSQL's programs run as when the test runs as root
/// (`initdb` refuses root).
const POSTGRES_ACCOUNT: &str = "postgres";
/// The most a server may take to come up or go down.
pub(crate) const READY_BOUND: Duration = Duration::from_secs(20);
/// Pause between two looks at whether a killed server has exited.
pub(crate) const REAP_STEP: Duration = Duration::from_millis(5);

/// A free TCP port on the loopback interface (free a moment ago: the server
/// binds it right after).
pub(crate) fn free_port() -> io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// A new, empty directory under the system's temporary directory.
pub(crate) fn fresh_dir(prefix: &str) -> io::Result<PathBuf> {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let dir = std::env::temp_dir().join(format!("{prefix}-{}-{nanos}", std::process::id()));
    std::fs::create_dir(&dir)?;
    Ok(dir)
}

/// `output` as an error unless its program succeeded.
fn succeeded(what: &str, output: Output) -> io::Result<()> {
    if output.status.success() {
        return Ok(());
    }
    Err(io::Error::other(format!(
        "{what} failed ({}): {}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )))
}

/// A PostgreSQL server of its own: a fresh cluster in a temporary
/// directory, trust authentication, superuser `postgres`, listening on
/// `127.0.0.1` only (its Unix socket sits in the same directory).
#[derive(Debug)]
pub struct PrivatePostgres {
    bin: PathBuf,
    base: PathBuf,
    port: u16,
    /// The programs run through `runuser -u postgres` (the test runs as
    /// root).
    as_postgres_account: bool,
}

impl PrivatePostgres {
    /// The directory holding `initdb` and `pg_ctl` (newest version first),
    /// if PostgreSQL's server programs are installed.
    pub fn binaries() -> Option<PathBuf> {
        let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir(POSTGRES_ROOT)
            .ok()?
            .filter_map(|entry| {
                let entry = entry.ok()?;
                let version = entry.file_name().to_str()?.parse().ok()?;
                let bin = entry.path().join("bin");
                (bin.join("initdb").exists() && bin.join("pg_ctl").exists())
                    .then_some((version, bin))
            })
            .collect();
        versions.sort();
        versions.pop().map(|(_, bin)| bin)
    }

    /// Why a private server cannot be started here, if it cannot.
    pub fn unavailable_reason() -> Option<String> {
        match Self::binaries() {
            Some(_) => None,
            None => Some(format!(
                "no initdb/pg_ctl under {POSTGRES_ROOT}/*/bin (PostgreSQL server not installed)"
            )),
        }
    }

    /// Creates a cluster and starts it; answers once it accepts connections.
    pub async fn start() -> io::Result<Self> {
        let bin = Self::binaries().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                Self::unavailable_reason().unwrap_or_default(),
            )
        })?;
        let base = fresh_dir("tenure-pg")?;
        // The directory was created by this process: root owns it iff the
        // test runs as root.
        let as_postgres_account = std::fs::metadata(&base)?.uid() == 0;
        let server = PrivatePostgres {
            bin,
            base,
            port: free_port()?,
            as_postgres_account,
        };
        if as_postgres_account {
            let chown = Command::new("chown")
                .arg(POSTGRES_ACCOUNT)
                .arg(&server.base)
                .output()
                .await?;
            succeeded("chown", chown)?;
        }
        let initdb = server
            .program("initdb")
            .args(["--auth=trust", "--username=postgres", "--no-sync", "-D"])
            .arg(server.data_dir())
            .output()
            .await?;
        succeeded("initdb", initdb)?;
        server.pg_ctl(PgCtl::Start).await?;
        Ok(server)
    }

    /// The URL of the `postgres` database as superuser `postgres`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Stops the server (fast shutdown: sessions are cut, committed work is
    /// kept), keeps it down for `down_for`, and starts it again on the same
    /// data and port; answers once it accepts connections again.
    pub async fn restart(&self, down_for: Duration) -> io::Result<()> {
        self.stop_and_start(PgCtl::Stop, down_for).await
    }

    /// Like [`restart`](Self::restart), but an immediate stop: every server
    /// process quits at once, with no checkpoint, as after a kill, and the
    /// next start recovers from the write-ahead log.
    pub async fn crash_restart(&self, down_for: Duration) -> io::Result<()> {
        self.stop_and_start(PgCtl::Crash, down_for).await
    }

    async fn stop_and_start(&self, stop: PgCtl, down_for: Duration) -> io::Result<()> {
        self.pg_ctl(stop).await?;
        tokio::time::sleep(down_for).await;
        self.pg_ctl(PgCtl::Start).await
    }

    fn data_dir(&self) -> PathBuf {
        self.base.join("data")
    }

    /// A command running `program` from the server's binaries, as the
    /// `postgres` account when needed.
    fn program(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        let mut command = if self.as_postgres_account {
            let mut command = Command::new("runuser");
            command.args(["-u", POSTGRES_ACCOUNT, "--"]).arg(path);
            command
        } else {
            Command::new(path)
        };
        command.stdin(Stdio::null()).kill_on_drop(true);
        command
    }

    /// Runs `pg_ctl start` or `pg_ctl stop`, waiting (bounded) until done.
    async fn pg_ctl(&self, action: PgCtl) -> io::Result<()> {
        let options = format!(
            "-c port={} -c listen_addresses=127.0.0.1 -c unix_socket_directories={}",
            self.port,
            self.base.display()
        );
        let mut command = self.program("pg_ctl");
        command
            .arg(action.verb())
            .arg("-D")
            .arg(self.data_dir())
            .args(["-w", "-t", &READY_BOUND.as_secs().to_string()]);
        match action {
            PgCtl::Start => command
                .arg("-l")
                .arg(self.base.join("server.log"))
                .args(["-o", &options]),
            PgCtl::Stop => command.args(["-m", "fast"]),
            PgCtl::Crash => command.args(["-m", "immediate"]),
        };
        let output = command.output().await?;
        succeeded(&format!("pg_ctl {}", action.verb()), output)
    }
}

#[async_trait]
impl RestartableServer for PrivatePostgres {
    async fn restart(&mut self, down_for: Duration) -> io::Result<()> {
        PrivatePostgres::restart(self, down_for).await
    }

    async fn kill_and_restart(&mut self, down_for: Duration) -> io::Result<()> {
        self.crash_restart(down_for).await
    }
}

/// What [`PrivatePostgres::pg_ctl`] does.
#[derive(Debug, Clone, Copy)]
enum PgCtl {
    Start,
    Stop,
    /// `stop -m immediate`.
    Crash,
}

impl PgCtl {
    fn verb(self) -> &'static str {
        match self {
            PgCtl::Start => "start",
            PgCtl::Stop | PgCtl::Crash => "stop",
        }
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        // Immediate: nothing here needs keeping, and a panicking test must
        // not wait on a checkpoint.
        let bin = self.bin.join("pg_ctl");
        let mut command = if self.as_postgres_account {
            let mut command = std::process::Command::new("runuser");
            command.args(["-u", POSTGRES_ACCOUNT, "--"]).arg(bin);
            command
        } else {
            std::process::Command::new(bin)
        };
        let _ = command
            .args(["stop", "-m", "immediate", "-w", "-D"])
            .arg(self.data_dir())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

/// A `redis-server` of its own on a free loopback port, persisting every
/// write to an append-only file fsynced before the reply (`appendfsync
/// always`), no snapshots, in a temporary directory; [`start_with`](Self::start_with)
/// adds settings of the test's own.
#[derive(Debug)]
pub struct PrivateRedis {
    dir: PathBuf,
    port: u16,
    server: Child,
    /// Settings given after the defaults (so they override them), kept for
    /// restarts.
    extra_args: Vec<String>,
}

impl PrivateRedis {
    /// Why a private server cannot be started here, if it cannot.
    pub fn unavailable_reason() -> Option<String> {
        (!Path::new(REDIS_SERVER).exists()).then(|| format!("{REDIS_SERVER} is not installed"))
    }

    /// Starts a server; answers once it accepts connections.
    pub async fn start() -> io::Result<Self> {
        Self::start_with(&[]).await
    }

    /// Starts a server with `extra_args` after the default settings, which
    /// they override (`["--appendonly", "no"]`, `["--requirepass", "pw"]`,
    /// `["--rename-command", "CONFIG", ""]`...), on every restart too;
    /// answers once it accepts connections.
    pub async fn start_with(extra_args: &[&str]) -> io::Result<Self> {
        let dir = fresh_dir("tenure-redis")?;
        let port = free_port()?;
        let extra_args: Vec<String> = extra_args.iter().map(|&arg| arg.to_owned()).collect();
        let server = match launch_redis(&dir, port, &extra_args).await {
            Ok(server) => server,
            Err(error) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(error);
            }
        };
        Ok(PrivateRedis {
            dir,
            port,
            server,
            extra_args,
        })
    }

    /// The server's URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Kills the server (SIGKILL: no shutdown save, only what the
    /// append-only file already holds survives), keeps it down for
    /// `down_for`, and starts it again on the same directory and port;
    /// answers once it accepts connections again.
    pub async fn restart(&mut self, down_for: Duration) -> io::Result<()> {
        self.server.kill().await?;
        tokio::time::sleep(down_for).await;
        self.server = launch_redis(&self.dir, self.port, &self.extra_args).await?;
        Ok(())
    }
}

#[async_trait]
impl RestartableServer for PrivateRedis {
    async fn restart(&mut self, down_for: Duration) -> io::Result<()> {
        PrivateRedis::restart(self, down_for).await
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        // Killed and reaped here: the test process may exit right after,
        // leaving nobody to reap it.
        if self.server.start_kill().is_ok() {
            let give_up = std::time::Instant::now() + READY_BOUND;
            while matches!(self.server.try_wait(), Ok(None)) && std::time::Instant::now() < give_up
            {
                std::thread::sleep(REAP_STEP);
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Starts `redis-server` on `port` with its files in `dir`, `extra_args`
/// last, and waits (bounded) until its log says it accepts connections.
async fn launch_redis(dir: &Path, port: u16, extra_args: &[String]) -> io::Result<Child> {
    let mut server = Command::new(REDIS_SERVER)
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--appendonly", "yes", "--appendfsync", "always"])
        .args(["--save", ""])
        .arg("--dir")
        .arg(dir)
        .args(extra_args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let stdout = server
        .stdout
        .take()
        .ok_or_else(|| io::Error::other("redis-server's log is not piped"))?;
    let mut lines = BufReader::new(stdout).lines();
    let ready = tokio::time::timeout(READY_BOUND, async {
        while let Some(line) = lines.next_line().await? {
            if line.contains("Ready to accept connections") {
                return Ok(());
            }
        }
        Err(io::Error::other("redis-server exited before it was ready"))
    })
    .await
    .unwrap_or_else(|_| {
        Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("redis-server not ready within {READY_BOUND:?}"),
        ))
    });
    if let Err(error) = ready {
        let _ = server.start_kill();
        return Err(error);
    }
    // Keep draining the log so the server never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok(server)
}

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
use tokio::process::Command;

use crate::certificates::TestCertificates;
use crate::offset_clock::{self, Environment};
use crate::watchdog::Watched;

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
pub(crate) const REDIS_SERVER: &str = "/usr/bin/redis-server";
/// The account PostgreSQL's programs run as when the test runs as root
/// (`initdb` refuses root).
const POSTGRES_ACCOUNT: &str = "postgres";
/// The most a server may take to come up or go down: generous, since a
/// loaded machine (two cores, builds and other tests beside) once took
/// more than 20 s to bring a PostgreSQL standby up to accepting
/// connections.
pub(crate) const READY_BOUND: Duration = Duration::from_secs(60);
/// Pause between two looks at whether a killed server has exited.
pub(crate) const REAP_STEP: Duration = Duration::from_millis(5);

/// A free TCP port on the loopback interface (free a moment ago: the server
/// binds it right after).
pub fn free_port() -> io::Result<u16> {
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

/// `path` as one `sh` word.
fn shell_quoted(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', r"'\''"))
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
    /// `-c name=value` settings given on every start, after the defaults.
    settings: Vec<String>,
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
        Self::start_with(|_| Ok(Vec::new())).await
    }

    /// [`start`](Self::start) with `settings` (`name=value`, as
    /// `postgres -c` takes them) on every start.
    pub async fn start_with_settings(settings: &[&str]) -> io::Result<Self> {
        let settings = settings.iter().map(|&setting| setting.to_owned()).collect();
        Self::start_with(|_| Ok(settings)).await
    }

    /// [`start`](Self::start), also accepting TLS connections (`ssl = on`)
    /// with the server certificate of `certificates`; plain connections
    /// stay allowed, so a test can tell what `sslmode` changes.
    pub async fn start_tls(certificates: &TestCertificates) -> io::Result<Self> {
        Self::start_with(|server| {
            let certificate = server.install(&certificates.server_file(), "server.crt")?;
            let key = server.install(&certificates.server_key_file(), "server.key")?;
            Ok(vec![
                "ssl=on".to_owned(),
                format!("ssl_cert_file={}", certificate.display()),
                format!("ssl_key_file={}", key.display()),
            ])
        })
        .await
    }

    /// Creates the cluster, asks `settings` for the settings of every
    /// start (it may put files in the data directory first), and starts it.
    async fn start_with(
        settings: impl FnOnce(&PrivatePostgres) -> io::Result<Vec<String>>,
    ) -> io::Result<Self> {
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
        let mut server = PrivatePostgres {
            bin,
            base,
            port: free_port()?,
            as_postgres_account,
            settings: Vec::new(),
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
        server.settings = settings(&server)?;
        server.pg_ctl(PgCtl::Start).await?;
        Ok(server)
    }

    /// A streaming standby of `primary` (`pg_basebackup -R`), started;
    /// answers once it accepts connections. It refuses every write.
    pub async fn start_standby_of(primary: &PrivatePostgres) -> io::Result<Self> {
        let standby = PrivatePostgres {
            bin: primary.bin.clone(),
            base: fresh_dir("tenure-pg-standby")?,
            port: free_port()?,
            as_postgres_account: primary.as_postgres_account,
            settings: primary.settings.clone(),
        };
        if standby.as_postgres_account {
            let chown = Command::new("chown")
                .arg(POSTGRES_ACCOUNT)
                .arg(&standby.base)
                .output()
                .await?;
            succeeded("chown", chown)?;
        }
        let backup = standby
            .program("pg_basebackup")
            .args(["-h", "127.0.0.1", "-p", &primary.port.to_string()])
            // An immediate checkpoint: a spread one can take many seconds.
            .args([
                "-U",
                "postgres",
                "-R",
                "-X",
                "stream",
                "--checkpoint=fast",
                "-D",
            ])
            .arg(standby.data_dir())
            .output()
            .await?;
        succeeded("pg_basebackup", backup)?;
        standby.pg_ctl(PgCtl::Start).await?;
        Ok(standby)
    }

    /// Copies `source` into the data directory as `name`, readable by the
    /// server's account alone (as PostgreSQL wants of a key), and answers
    /// its path.
    fn install(&self, source: &Path, name: &str) -> io::Result<PathBuf> {
        use std::os::unix::fs::PermissionsExt as _;
        let target = self.data_dir().join(name);
        std::fs::copy(source, &target)?;
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600))?;
        if self.as_postgres_account {
            let status = std::process::Command::new("chown")
                .arg(POSTGRES_ACCOUNT)
                .arg(&target)
                .status()?;
            if !status.success() {
                return Err(io::Error::other(format!(
                    "chown {}: {status}",
                    target.display()
                )));
            }
        }
        Ok(target)
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

    /// Stops the server (fast shutdown) and leaves it down, until
    /// [`resume`](Self::resume).
    pub async fn stop(&self) -> io::Result<()> {
        self.pg_ctl(PgCtl::Stop).await
    }

    /// Starts a stopped server again on the same data and port; answers
    /// once it accepts connections.
    pub async fn resume(&self) -> io::Result<()> {
        self.pg_ctl(PgCtl::Start).await
    }

    /// Stops the server at once (every process quits, no checkpoint, as
    /// after a kill) and leaves it down.
    pub async fn crash(&self) -> io::Result<()> {
        self.pg_ctl(PgCtl::Crash).await
    }

    /// Where the server listens.
    pub fn address(&self) -> std::net::SocketAddr {
        (std::net::Ipv4Addr::LOCALHOST, self.port).into()
    }

    /// Promotes a standby to a primary (`pg_ctl promote`, on a new WAL
    /// timeline); answers once it takes writes.
    pub async fn promote(&self) -> io::Result<()> {
        self.pg_ctl(PgCtl::Promote).await
    }

    async fn stop_and_start(&self, stop: PgCtl, down_for: Duration) -> io::Result<()> {
        self.pg_ctl(stop).await?;
        tokio::time::sleep(down_for).await;
        self.pg_ctl(PgCtl::Start).await
    }

    fn data_dir(&self) -> PathBuf {
        self.base.join("data")
    }

    /// A shell script stopping the server at once (as its destructor does)
    /// and deleting its files, for a [`Lifeline`](crate::watchdog::Lifeline).
    pub(crate) fn cleanup_script(&self) -> String {
        let run_as = if self.as_postgres_account {
            format!("runuser -u {POSTGRES_ACCOUNT} -- ")
        } else {
            String::new()
        };
        format!(
            "{run_as}{} stop -m immediate -w -D {} >/dev/null 2>&1; rm -rf {}",
            shell_quoted(&self.bin.join("pg_ctl")),
            shell_quoted(&self.data_dir()),
            shell_quoted(&self.base),
        )
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

    /// Runs `pg_ctl start`, `stop` or `promote`, waiting (bounded) until
    /// done.
    async fn pg_ctl(&self, action: PgCtl) -> io::Result<()> {
        let mut options = format!(
            "-c port={} -c listen_addresses=127.0.0.1 -c unix_socket_directories={}",
            self.port,
            self.base.display()
        );
        for setting in &self.settings {
            options.push_str(" -c ");
            options.push_str(setting);
        }
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
            PgCtl::Promote => &mut command,
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
    Promote,
}

impl PgCtl {
    fn verb(self) -> &'static str {
        match self {
            PgCtl::Start => "start",
            PgCtl::Stop | PgCtl::Crash => "stop",
            PgCtl::Promote => "promote",
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
    /// `None` while killed.
    server: Option<Watched>,
    /// Settings given after the defaults (so they override them), kept for
    /// restarts.
    extra_args: Vec<String>,
    /// It speaks TLS only.
    tls: bool,
    /// Variables it is started with, kept for restarts.
    environment: Environment,
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
        let extra_args: Vec<String> = extra_args.iter().map(|&arg| arg.to_owned()).collect();
        Self::start_on(free_port()?, extra_args, false, None).await
    }

    /// Starts a server (no persistence) whose wall clock, the one `TIME`
    /// and key expiry read, runs `offset_micros` from the host's (ahead
    /// when positive), on every restart too; answers once it accepts
    /// connections. Needs the C compiler `cc`, which builds the library
    /// that moves the server's clock.
    pub async fn start_with_clock_offset(offset_micros: i64) -> io::Result<Self> {
        let extra_args = ["--appendonly", "no"].map(str::to_owned).to_vec();
        Self::start_on(free_port()?, extra_args, false, Some(offset_micros)).await
    }

    /// Starts a server that speaks TLS only, with the server certificate
    /// of `certificates`; when `client_certificates` it also asks each
    /// client for a certificate their authority signed
    /// (`tls-auth-clients yes`). `extra_args` as for
    /// [`start_with`](Self::start_with). Its [`url`](Self::url) is
    /// `rediss://`.
    pub async fn start_tls(
        certificates: &TestCertificates,
        client_certificates: bool,
        extra_args: &[&str],
    ) -> io::Result<Self> {
        let port = free_port()?;
        let file = |path: PathBuf| path.display().to_string();
        let mut args = vec![
            "--port".to_owned(),
            "0".to_owned(),
            "--tls-port".to_owned(),
            port.to_string(),
            "--tls-cert-file".to_owned(),
            file(certificates.server_file()),
            "--tls-key-file".to_owned(),
            file(certificates.server_key_file()),
            "--tls-ca-cert-file".to_owned(),
            file(certificates.ca_file()),
            "--tls-auth-clients".to_owned(),
            if client_certificates { "yes" } else { "no" }.to_owned(),
        ];
        args.extend(extra_args.iter().map(|&arg| arg.to_owned()));
        Self::start_on(port, args, true, None).await
    }

    async fn start_on(
        port: u16,
        extra_args: Vec<String>,
        tls: bool,
        clock_offset_micros: Option<i64>,
    ) -> io::Result<Self> {
        let dir = fresh_dir("tenure-redis")?;
        let started = async {
            let environment = match clock_offset_micros {
                Some(offset) => offset_clock::environment(&dir, offset).await?,
                None => Environment::new(),
            };
            let server = launch_redis(&dir, port, &extra_args, &environment).await?;
            Ok((server, environment))
        };
        let (server, environment) = match started.await {
            Ok(started) => started,
            Err(error) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(error);
            }
        };
        Ok(PrivateRedis {
            dir,
            port,
            server: Some(server),
            extra_args,
            tls,
            environment,
        })
    }

    /// The server's URL (`rediss://` when it speaks TLS).
    pub fn url(&self) -> String {
        let scheme = if self.tls { "rediss" } else { "redis" };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Kills the server (SIGKILL: no shutdown save, only what the
    /// append-only file already holds survives), keeps it down for
    /// `down_for`, and starts it again on the same directory and port;
    /// answers once it accepts connections again.
    pub async fn restart(&mut self, down_for: Duration) -> io::Result<()> {
        self.kill().await?;
        tokio::time::sleep(down_for).await;
        self.server =
            Some(launch_redis(&self.dir, self.port, &self.extra_args, &self.environment).await?);
        Ok(())
    }

    /// Kills the server (SIGKILL) and waits until it has exited.
    pub async fn kill(&mut self) -> io::Result<()> {
        match self.server.take() {
            Some(server) => server.stop().await,
            None => Ok(()),
        }
    }

    /// Starts the (killed) server again on its directory and port as a
    /// replica of the server on `primary_port`, on every later restart too;
    /// answers once it accepts connections.
    pub async fn start_as_replica_of(&mut self, primary_port: u16) -> io::Result<()> {
        if let Some(at) = self.extra_args.iter().position(|arg| arg == "--replicaof") {
            self.extra_args
                .drain(at..(at + 3).min(self.extra_args.len()));
        }
        self.extra_args.extend([
            "--replicaof".to_owned(),
            "127.0.0.1".to_owned(),
            primary_port.to_string(),
        ]);
        self.server =
            Some(launch_redis(&self.dir, self.port, &self.extra_args, &self.environment).await?);
        Ok(())
    }
}

#[async_trait]
impl RestartableServer for PrivateRedis {
    async fn restart(&mut self, down_for: Duration) -> io::Result<()> {
        PrivateRedis::restart(self, down_for).await
    }
}

impl PrivateRedis {
    /// A shell script deleting the server's files, for a
    /// [`Lifeline`](crate::watchdog::Lifeline) (its watchdog stops the
    /// server itself when the test process exits).
    pub(crate) fn cleanup_script(&self) -> String {
        format!("rm -rf {}", shell_quoted(&self.dir))
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        // The watchdog kills the server and is reaped as it is dropped.
        drop(self.server.take());
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Starts `redis-server` on `port` with its files (and its log,
/// `redis.log`) in `dir`, `extra_args` last, and `environment`, under a
/// [watchdog](crate::watchdog), and waits (bounded) until its log says it
/// accepts connections.
pub(crate) async fn launch_redis(
    dir: &Path,
    port: u16,
    extra_args: &[String],
    environment: &Environment,
) -> io::Result<Watched> {
    let mut args: Vec<std::ffi::OsString> = vec![
        "--port".into(),
        port.to_string().into(),
        "--bind".into(),
        "127.0.0.1".into(),
        "--appendonly".into(),
        "yes".into(),
        "--appendfsync".into(),
        "always".into(),
        "--save".into(),
        "".into(),
        "--dir".into(),
        dir.into(),
    ];
    args.extend(extra_args.iter().map(Into::into));
    Watched::launch_until_logged(
        REDIS_SERVER,
        args,
        environment,
        &dir.join("redis.log"),
        "Ready to accept connections",
    )
    .await
}

/// The MariaDB (or MySQL) server program.
pub(crate) const MARIADBD: &str = "/usr/sbin/mariadbd";
/// The program that creates a MariaDB data directory.
const MARIADB_INSTALL_DB: &str = "/usr/bin/mariadb-install-db";

/// A MariaDB server of its own: a fresh data directory in a temporary
/// directory, account `root` with no password, database `test`, listening
/// on `127.0.0.1` only (its socket in the same directory), every commit
/// flushed (`innodb_flush_log_at_trx_commit = 1`, the default).
#[derive(Debug)]
pub struct PrivateMariadb {
    dir: PathBuf,
    port: u16,
    /// `None` while killed.
    server: Option<Watched>,
    /// Options given after the defaults (`--name=value`), kept for
    /// restarts.
    extra_args: Vec<String>,
    /// Variables it is started with (a moved clock), kept for restarts.
    environment: Environment,
}

impl PrivateMariadb {
    /// Why a private server cannot be started here, if it cannot.
    pub fn unavailable_reason() -> Option<String> {
        [MARIADBD, MARIADB_INSTALL_DB]
            .into_iter()
            .find(|program| !Path::new(program).exists())
            .map(|program| format!("{program} is not installed"))
    }

    /// Creates a data directory and starts a server on it; answers once it
    /// accepts connections.
    pub async fn start() -> io::Result<Self> {
        Self::start_with(&[]).await
    }

    /// [`start`](Self::start) with `extra_args` (`--name=value` server
    /// options) after the defaults, which they override, on every restart
    /// too.
    pub async fn start_with(extra_args: &[&str]) -> io::Result<Self> {
        Self::start_on(extra_args, None).await
    }

    /// [`start`](Self::start) with the server's wall clock (the one
    /// `UTC_TIMESTAMP()` reads) `offset_micros` from the host's (ahead when
    /// positive), on every restart too. Needs the C compiler `cc`, which
    /// builds the library that moves the clock.
    pub async fn start_with_clock_offset(offset_micros: i64) -> io::Result<Self> {
        Self::start_on(&[], Some(offset_micros)).await
    }

    async fn start_on(extra_args: &[&str], clock_offset_micros: Option<i64>) -> io::Result<Self> {
        let dir = fresh_dir("tenure-mariadb")?;
        let environment = match clock_offset_micros {
            Some(offset) => offset_clock::environment(&dir, offset).await?,
            None => Environment::new(),
        };
        let mut server = PrivateMariadb {
            dir,
            port: free_port()?,
            server: None,
            extra_args: extra_args.iter().map(|&arg| arg.to_owned()).collect(),
            environment,
        };
        // Temporary files in the server's own directory: installs running
        // at once in the shared one remove each other's.
        let installed = Command::new(MARIADB_INSTALL_DB)
            .arg("--no-defaults")
            .arg(format!("--datadir={}", server.dir.join("data").display()))
            .arg(format!("--tmpdir={}", server.dir.display()))
            .args([
                "--user=root",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ])
            .stdin(Stdio::null())
            .output()
            .await?;
        succeeded("mariadb-install-db", installed)?;
        std::fs::write(
            server.dir.join("init.sql"),
            "CREATE DATABASE IF NOT EXISTS test;\n",
        )?;
        server.launch().await?;
        Ok(server)
    }

    async fn launch(&mut self) -> io::Result<()> {
        let dir = &self.dir;
        let mut args = vec![
            "--no-defaults".to_owned(),
            format!("--datadir={}", dir.join("data").display()),
            format!("--port={}", self.port),
            "--bind-address=127.0.0.1".to_owned(),
            format!("--socket={}", dir.join("mariadbd.sock").display()),
            format!("--pid-file={}", dir.join("mariadbd.pid").display()),
            format!("--init-file={}", dir.join("init.sql").display()),
            format!("--tmpdir={}", dir.display()),
            "--user=root".to_owned(),
            "--innodb-buffer-pool-size=32M".to_owned(),
        ];
        args.extend(self.extra_args.iter().cloned());
        self.server = Some(
            Watched::launch_until_logged(
                MARIADBD,
                args,
                &self.environment,
                &dir.join("mariadbd.log"),
                "ready for connections",
            )
            .await?,
        );
        Ok(())
    }

    /// The URL of its database `test`, as `root`.
    pub fn url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}/test", self.port)
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Kills the server (SIGKILL: only what InnoDB's log holds survives),
    /// keeps it down for `down_for`, and starts it again on the same
    /// directory and port; answers once it accepts connections again.
    pub async fn restart(&mut self, down_for: Duration) -> io::Result<()> {
        self.kill().await?;
        tokio::time::sleep(down_for).await;
        self.launch().await
    }

    /// Kills the server (SIGKILL) and waits until it has exited.
    pub async fn kill(&mut self) -> io::Result<()> {
        match self.server.take() {
            Some(server) => server.stop().await,
            None => Ok(()),
        }
    }

    /// A shell script deleting the server's files, for a
    /// [`Lifeline`](crate::watchdog::Lifeline) (its watchdog stops the
    /// server itself when the test process exits).
    pub(crate) fn cleanup_script(&self) -> String {
        format!("rm -rf {}", shell_quoted(&self.dir))
    }
}

#[async_trait]
impl RestartableServer for PrivateMariadb {
    async fn restart(&mut self, down_for: Duration) -> io::Result<()> {
        PrivateMariadb::restart(self, down_for).await
    }
}

impl Drop for PrivateMariadb {
    fn drop(&mut self) {
        // The watchdog kills the server and is reaped as it is dropped.
        drop(self.server.take());
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

//! A private Redis Sentinel deployment: a primary, replicas and three
//! Sentinels monitoring them, each on a free loopback port, which a test
//! may fail over as often as it likes ([`PrivateSentinels::fail_over`]:
//! the primary killed, a replica promoted by the Sentinels, the killed
//! server started again as a replica of the new primary).

use std::io;

use async_trait::async_trait;
use std::path::PathBuf;
use std::time::Duration;
use tenure_conformance::suites::nemesis::FailoverControl;

use tokio::time::Instant;

use crate::servers::{free_port, fresh_dir, PrivateRedis, READY_BOUND, REDIS_SERVER};
use crate::watchdog::Watched;

/// The name the Sentinels monitor the primary by.
pub const SERVICE: &str = "tenure-primary";
/// How many Sentinels watch the deployment (a quorum of two).
const SENTINELS: usize = 3;
/// A replica's full synchronisation starts at once (by default a primary
/// waits five seconds for more replicas to sync with).
const IMMEDIATE_SYNC: [&str; 2] = ["--repl-diskless-sync-delay", "0"];
/// Pause between two looks at the deployment while it settles.
const POLL: Duration = Duration::from_millis(50);

/// A primary, its replicas and three Sentinels, stopped and their
/// directories removed when dropped.
pub struct PrivateSentinels {
    servers: Vec<PrivateRedis>,
    sentinels: Vec<Sentinel>,
}

struct Sentinel {
    port: u16,
    dir: PathBuf,
    /// Taken when dropped.
    process: Option<Watched>,
}

impl PrivateSentinels {
    /// Starts a primary with `replicas` replicas (at least one) and three
    /// Sentinels; answers once every replica is in sync and every Sentinel
    /// knows every replica.
    pub async fn start(replicas: usize) -> io::Result<Self> {
        let primary = PrivateRedis::start_with(&IMMEDIATE_SYNC).await?;
        let primary_port = primary.port();
        let mut servers = vec![primary];
        for _ in 0..replicas.max(1) {
            let port = primary_port.to_string();
            let mut args = IMMEDIATE_SYNC.to_vec();
            args.extend(["--replicaof", "127.0.0.1", &port]);
            servers.push(PrivateRedis::start_with(&args).await?);
        }
        let mut sentinels = Vec::with_capacity(SENTINELS);
        for _ in 0..SENTINELS {
            sentinels.push(Sentinel::start(primary_port).await?);
        }
        let deployment = PrivateSentinels { servers, sentinels };
        deployment.settled(primary_port).await?;
        Ok(deployment)
    }

    /// `redis+sentinel://` naming every Sentinel and the service.
    pub fn url(&self) -> String {
        let sentinels: Vec<String> = self
            .sentinels
            .iter()
            .map(|sentinel| format!("127.0.0.1:{}", sentinel.port))
            .collect();
        format!("redis+sentinel://{}/{SERVICE}", sentinels.join(","))
    }

    /// The URL of the server the first Sentinel names the primary.
    pub async fn primary_url(&self) -> io::Result<String> {
        Ok(format!("redis://127.0.0.1:{}", self.primary_port().await?))
    }

    /// Kills the primary, has the first Sentinel promote a replica, waits
    /// until that Sentinel names it and it accepts writes, then starts the
    /// killed server again as its replica and waits until it is in sync
    /// and every Sentinel names the new primary and sees the replica up, so
    /// the deployment can fail over again.
    ///
    /// # Errors
    ///
    /// When a step does not happen within its bound.
    pub async fn fail_over(&mut self) -> io::Result<()> {
        let old_port = self.primary_port().await?;
        let old = self.server_on(old_port)?;
        self.servers[old].kill().await?;
        let give_up = Instant::now() + READY_BOUND;
        // The first Sentinel promotes a replica at once (SENTINEL FAILOVER
        // needs no agreement that the primary is down).
        loop {
            let asked: redis::RedisResult<String> = redis::cmd("SENTINEL")
                .arg("FAILOVER")
                .arg(SERVICE)
                .query_async(&mut self.sentinels[0].connection().await?)
                .await;
            match asked {
                Ok(_) => break,
                Err(error) if error.code() == Some("INPROG") => break,
                Err(error) if Instant::now() >= give_up => {
                    return Err(io::Error::other(format!(
                        "the Sentinel would not fail over: {error}"
                    )))
                }
                Err(_) => tokio::time::sleep(POLL).await,
            }
        }
        let new_port = loop {
            let named = self.sentinels[0].primary_port().await?;
            if let Some(port) = named.filter(|&port| port != old_port) {
                if role(port).await?.as_deref() == Some("master") {
                    break port;
                }
            }
            if Instant::now() >= give_up {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the Sentinels named no new primary in time",
                ));
            }
            tokio::time::sleep(POLL).await;
        };
        self.servers[old].start_as_replica_of(new_port).await?;
        self.settled(new_port).await
    }

    /// The port of the server the first Sentinel names the primary.
    async fn primary_port(&self) -> io::Result<u16> {
        self.sentinels[0]
            .primary_port()
            .await?
            .ok_or_else(|| io::Error::other("the Sentinel names no primary"))
    }

    fn server_on(&self, port: u16) -> io::Result<usize> {
        self.servers
            .iter()
            .position(|server| server.port() == port)
            .ok_or_else(|| io::Error::other(format!("no server of the deployment on {port}")))
    }

    /// Waits until every Sentinel names `primary_port` and sees every
    /// other server up as its replica, and every replica is in sync: a
    /// Sentinel still naming an earlier primary could fail it over on its
    /// own and demote the real one.
    async fn settled(&self, primary_port: u16) -> io::Result<()> {
        let give_up = Instant::now() + READY_BOUND;
        let replicas = self.servers.len() - 1;
        loop {
            let mut ready = true;
            for sentinel in &self.sentinels {
                ready = ready
                    && sentinel.primary_port().await? == Some(primary_port)
                    && sentinel.replicas_up().await? >= replicas;
            }
            for server in &self.servers {
                if server.port() != primary_port {
                    ready = ready && linked(server.port()).await?;
                }
            }
            if ready {
                return Ok(());
            }
            if Instant::now() >= give_up {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("the Sentinel deployment did not settle within {READY_BOUND:?}"),
                ));
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

impl Sentinel {
    async fn start(primary_port: u16) -> io::Result<Self> {
        let port = free_port()?;
        let dir = fresh_dir("tenure-sentinel")?;
        let config = dir.join("sentinel.conf");
        std::fs::write(
            &config,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {dir}\n\
                 sentinel monitor {SERVICE} 127.0.0.1 {primary_port} 2\n\
                 sentinel down-after-milliseconds {SERVICE} 1000\n\
                 sentinel failover-timeout {SERVICE} 2000\n\
                 sentinel parallel-syncs {SERVICE} 1\n",
                dir = dir.display()
            ),
        )?;
        let args: [std::ffi::OsString; 2] = [config.into(), "--sentinel".into()];
        let log = dir.join("sentinel.log");
        let process = match Watched::launch_until_logged(
            REDIS_SERVER,
            args,
            &Vec::new(),
            &log,
            "+monitor master",
        )
        .await
        {
            Ok(process) => process,
            Err(error) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(error);
            }
        };
        Ok(Sentinel {
            port,
            dir,
            process: Some(process),
        })
    }

    async fn connection(&self) -> io::Result<redis::aio::MultiplexedConnection> {
        connect(self.port).await
    }

    /// The port of the server this Sentinel names the primary.
    async fn primary_port(&self) -> io::Result<Option<u16>> {
        let named: Option<(String, String)> = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(SERVICE)
            .query_async(&mut self.connection().await?)
            .await
            .map_err(io::Error::other)?;
        Ok(named.and_then(|(_, port)| port.parse().ok()))
    }

    /// How many replicas this Sentinel sees up.
    async fn replicas_up(&self) -> io::Result<usize> {
        let replicas: Vec<std::collections::HashMap<String, String>> = redis::cmd("SENTINEL")
            .arg("REPLICAS")
            .arg(SERVICE)
            .query_async(&mut self.connection().await?)
            .await
            .map_err(io::Error::other)?;
        Ok(replicas
            .iter()
            .filter(|replica| replica.get("flags").map(String::as_str) == Some("slave"))
            .count())
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        // The watchdog kills the Sentinel and is reaped as it is dropped.
        drop(self.process.take());
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub(crate) async fn connect(port: u16) -> io::Result<redis::aio::MultiplexedConnection> {
    let client =
        redis::Client::open(format!("redis://127.0.0.1:{port}")).map_err(io::Error::other)?;
    tokio::time::timeout(READY_BOUND, client.get_multiplexed_async_connection())
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no connection"))?
        .map_err(io::Error::other)
}

/// The role the server on `port` reports, `None` when it cannot be reached.
async fn role(port: u16) -> io::Result<Option<String>> {
    let Ok(mut connection) = connect(port).await else {
        return Ok(None);
    };
    let answer: redis::RedisResult<redis::Value> =
        redis::cmd("ROLE").query_async(&mut connection).await;
    Ok(match answer {
        Ok(redis::Value::Array(fields)) => match fields.first() {
            Some(redis::Value::BulkString(role)) => {
                Some(String::from_utf8_lossy(role).into_owned())
            }
            _ => None,
        },
        _ => None,
    })
}

/// Whether the replica on `port` is linked to its primary and in sync.
async fn linked(port: u16) -> io::Result<bool> {
    let Ok(mut connection) = connect(port).await else {
        return Ok(false);
    };
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query_async(&mut connection)
        .await
        .unwrap_or_default();
    Ok(info.contains("master_link_status:up") && !info.contains("master_sync_in_progress:1"))
}

#[async_trait]
impl FailoverControl for PrivateSentinels {
    async fn fail_over(&mut self) -> io::Result<()> {
        PrivateSentinels::fail_over(self).await
    }
}

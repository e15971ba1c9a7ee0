//! A private etcd cluster a test may break: one or three members on free
//! loopback ports, each with its own data directory under one temporary
//! directory, stopped (by PID) and removed when dropped — also when the
//! test panics.
//!
//! Each member runs under a small `sh` watchdog that holds a pipe from the
//! test process: when the test process exits, even without running any
//! destructor (a cluster kept in a `static` for a whole test binary), the
//! pipe closes and the watchdog kills its member.
//!
//! A member can be killed (SIGKILL: only what it had fsynced survives) and
//! restarted from its data directory, rejoining the cluster; the cluster's
//! leader can be asked for, so a test can kill exactly it.

use std::io;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, ChildStdin, Command};

use crate::servers::{free_port, fresh_dir, READY_BOUND, REAP_STEP};

/// The `etcd` server program (Debian's `etcd-server`).
const ETCD: &str = "/usr/bin/etcd";
/// The `etcdctl` program (Debian's `etcd-client`).
const ETCDCTL: &str = "/usr/bin/etcdctl";
/// Pause between two looks at whether members are healthy.
const HEALTH_STEP: Duration = Duration::from_millis(100);
/// The largest transaction the cluster accepts (etcd's default is 128):
/// the kit's wide admissions and batches fit.
pub const MAX_TXN_OPS: usize = 4096;

/// The watchdog: starts etcd with the arguments it is given, its log
/// appended to `$LOG`, prints its PID, and kills it once its own standard
/// input closes.
const WATCHDOG: &str = r#"etcd "$@" >>"$LOG" 2>&1 & pid=$!; echo "$pid"; read _ignored; kill -9 "$pid" 2>/dev/null; wait "$pid""#;

/// A running member: its watchdog, the pipe that keeps it waiting, and
/// etcd's own PID.
#[derive(Debug)]
struct Running {
    watchdog: Child,
    lifeline: Option<ChildStdin>,
    pid: u32,
}

impl Running {
    /// Kills etcd by its PID, then lets the watchdog exit and reaps it.
    async fn stop(mut self) -> io::Result<()> {
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

/// One member: its ports, directory and process (none while killed).
#[derive(Debug)]
struct Member {
    name: String,
    client_port: u16,
    peer_port: u16,
    dir: PathBuf,
    process: Option<Running>,
}

impl Member {
    fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.client_port)
    }

    fn peer_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.peer_port)
    }
}

/// A private etcd cluster (see the [module](self)).
#[derive(Debug)]
pub struct PrivateEtcd {
    base: PathBuf,
    members: Vec<Member>,
    initial_cluster: String,
    token: String,
}

impl PrivateEtcd {
    /// Why a private cluster cannot be started here, if it cannot.
    pub fn unavailable_reason() -> Option<String> {
        [ETCD, ETCDCTL]
            .into_iter()
            .find(|program| !Path::new(program).exists())
            .map(|program| {
                format!("{program} is not installed (apt-get install etcd-server etcd-client)")
            })
    }

    /// Starts a cluster of `size` members; answers once every member
    /// reports healthy.
    pub async fn start(size: usize) -> io::Result<Self> {
        let base = fresh_dir("tenure-etcd")?;
        let mut members = Vec::with_capacity(size);
        for index in 0..size {
            members.push(Member {
                name: format!("m{index}"),
                client_port: free_port()?,
                peer_port: free_port()?,
                dir: base.join(format!("m{index}")),
                process: None,
            });
        }
        let initial_cluster = members
            .iter()
            .map(|member| format!("{}={}", member.name, member.peer_url()))
            .collect::<Vec<_>>()
            .join(",");
        let token = base
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut cluster = PrivateEtcd {
            base,
            members,
            initial_cluster,
            token,
        };
        for index in 0..size {
            cluster.launch(index).await?;
        }
        cluster.wait_healthy().await?;
        Ok(cluster)
    }

    /// The client endpoints (`127.0.0.1:port`), one per member.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(Member::endpoint).collect()
    }

    /// The URL of a store under `prefix` naming every member.
    pub fn url(&self, prefix: &str) -> String {
        format!("etcd://{}/{prefix}", self.endpoints().join(","))
    }

    /// How many members the cluster has (killed ones included).
    pub fn size(&self) -> usize {
        self.members.len()
    }

    /// The PID of member `index`, while it runs.
    pub fn pid(&self, index: usize) -> Option<u32> {
        self.members
            .get(index)
            .and_then(|member| member.process.as_ref())
            .map(|running| running.pid)
    }

    /// Kills member `index` (SIGKILL, by its PID) and waits until it has
    /// exited.
    pub async fn kill(&mut self, index: usize) -> io::Result<()> {
        match self
            .members
            .get_mut(index)
            .and_then(|member| member.process.take())
        {
            Some(running) => running.stop().await,
            None => Ok(()),
        }
    }

    /// Starts member `index` again from its data directory; answers once
    /// the running members all report healthy.
    pub async fn restart(&mut self, index: usize) -> io::Result<()> {
        self.kill(index).await?;
        self.launch(index).await?;
        self.wait_healthy().await
    }

    /// The index of the member that is leader now, as a running member
    /// reports it.
    pub async fn leader(&self) -> io::Result<usize> {
        let running: Vec<String> = self
            .members
            .iter()
            .filter(|member| member.process.is_some())
            .map(Member::endpoint)
            .collect();
        let output = Command::new(ETCDCTL)
            .arg(format!("--endpoints={}", running.join(",")))
            .args(["endpoint", "status", "-w", "json"])
            .stdin(Stdio::null())
            .output()
            .await?;
        let statuses: serde_json::Value = serde_json::from_slice(&output.stdout)
            .map_err(|error| io::Error::other(format!("etcdctl endpoint status: {error}")))?;
        let leader_of = |status: &serde_json::Value| status["Status"]["leader"].as_u64();
        let member_of =
            |status: &serde_json::Value| status["Status"]["header"]["member_id"].as_u64();
        let statuses = statuses.as_array().cloned().unwrap_or_default();
        let leader = statuses
            .iter()
            .find_map(leader_of)
            .ok_or_else(|| io::Error::other("no member names a leader"))?;
        let endpoint = statuses
            .iter()
            .find(|status| member_of(status) == Some(leader))
            .and_then(|status| status["Endpoint"].as_str())
            .ok_or_else(|| io::Error::other("the leader is not among the running members"))?;
        self.members
            .iter()
            .position(|member| member.endpoint() == endpoint)
            .ok_or_else(|| io::Error::other(format!("unknown endpoint {endpoint}")))
    }

    /// Waits (bounded) until every running member reports healthy: it can
    /// commit a proposal through the cluster.
    pub async fn wait_healthy(&self) -> io::Result<()> {
        let running: Vec<String> = self
            .members
            .iter()
            .filter(|member| member.process.is_some())
            .map(Member::endpoint)
            .collect();
        let give_up = tokio::time::Instant::now() + READY_BOUND;
        loop {
            let status = Command::new(ETCDCTL)
                .arg(format!("--endpoints={}", running.join(",")))
                .args(["endpoint", "health", "--command-timeout=2s"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .await?;
            if status.success() {
                return Ok(());
            }
            if tokio::time::Instant::now() >= give_up {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "etcd members {running:?} not healthy within {READY_BOUND:?} (logs in {})",
                        self.base.display()
                    ),
                ));
            }
            tokio::time::sleep(HEALTH_STEP).await;
        }
    }

    /// Starts member `index` under its watchdog, its log beside its
    /// directory.
    async fn launch(&mut self, index: usize) -> io::Result<()> {
        let member = &self.members[index];
        let client_url = format!("http://{}", member.endpoint());
        let state = if member.dir.exists() {
            "existing"
        } else {
            "new"
        };
        let mut watchdog = Command::new("sh")
            .args(["-c", WATCHDOG, "sh"])
            .env("LOG", self.base.join(format!("{}.log", member.name)))
            .args(["--name", &member.name])
            .arg("--data-dir")
            .arg(&member.dir)
            .args([
                "--listen-client-urls",
                &client_url,
                "--advertise-client-urls",
                &client_url,
            ])
            .args(["--listen-peer-urls", &member.peer_url()])
            .args(["--initial-advertise-peer-urls", &member.peer_url()])
            .args(["--initial-cluster", &self.initial_cluster])
            .args(["--initial-cluster-state", state])
            .args(["--initial-cluster-token", &self.token])
            .args(["--max-txn-ops", &MAX_TXN_OPS.to_string()])
            .args(["--max-request-bytes", "10485760"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()?;
        let lifeline = watchdog.stdin.take();
        let stdout = watchdog
            .stdout
            .take()
            .ok_or_else(|| io::Error::other("the etcd watchdog's output is not piped"))?;
        let mut line = String::new();
        let read =
            tokio::time::timeout(READY_BOUND, BufReader::new(stdout).read_line(&mut line)).await;
        let pid = match read {
            Ok(Ok(_)) => line.trim().parse::<u32>().ok(),
            _ => None,
        };
        let Some(pid) = pid else {
            let _ = watchdog.start_kill();
            return Err(io::Error::other(format!(
                "the etcd watchdog did not report a PID: {line:?}"
            )));
        };
        self.members[index].process = Some(Running {
            watchdog,
            lifeline,
            pid,
        });
        Ok(())
    }
}

impl Drop for PrivateEtcd {
    fn drop(&mut self) {
        // Killed and reaped here: the test process may exit right after,
        // leaving nobody to reap them.
        for member in &mut self.members {
            if let Some(running) = member.process.as_mut() {
                // The watchdog kills its member once the pipe closes.
                drop(running.lifeline.take());
                let give_up = std::time::Instant::now() + READY_BOUND;
                while matches!(running.watchdog.try_wait(), Ok(None))
                    && std::time::Instant::now() < give_up
                {
                    std::thread::sleep(REAP_STEP);
                }
            }
        }
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

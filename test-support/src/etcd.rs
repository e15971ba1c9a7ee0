//! A private etcd cluster a test may break: one or three members on free
//! loopback ports, each with its own data directory under one temporary
//! directory, stopped (by PID) and removed when dropped — also when the
//! test panics.
//!
//! Each member runs under a [watchdog](crate::watchdog), so a cluster kept
//! in a `static` for a whole test binary stops when the binary exits.
//!
//! A member can be killed (SIGKILL: only what it had fsynced survives) and
//! restarted from its data directory, rejoining the cluster; the cluster's
//! leader can be asked for, so a test can kill exactly it.

use std::io;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;

use crate::certificates::TestCertificates;
use crate::servers::{free_port, fresh_dir};
use crate::watchdog::Watched;

/// How long members may take to report healthy: longer than a single
/// server's start, since three members must also elect a leader and commit
/// through it, on a machine that may be running every test binary's
/// clusters and a whole kit at once.
const HEALTHY_BOUND: Duration = Duration::from_secs(60);

/// The `etcd` server program (Debian's `etcd-server`).
const ETCD: &str = "/usr/bin/etcd";
/// The `etcdctl` program (Debian's `etcd-client`).
const ETCDCTL: &str = "/usr/bin/etcdctl";
/// Pause between two looks at whether members are healthy.
const HEALTH_STEP: Duration = Duration::from_millis(100);
/// The largest transaction the cluster accepts (etcd's default is 128):
/// the kit's wide admissions and batches fit.
pub const MAX_TXN_OPS: usize = 4096;

/// One member: its ports, directory and process (none while killed).
#[derive(Debug)]
struct Member {
    name: String,
    client_port: u16,
    peer_port: u16,
    dir: PathBuf,
    process: Option<Watched>,
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
    /// The members serve clients over TLS with these files, and ask every
    /// client for a certificate the same authority signed.
    tls: Option<TlsFiles>,
}

/// A member's TLS files: its certificate and key, and the authority its
/// clients' certificates must be signed by.
#[derive(Debug, Clone)]
struct TlsFiles {
    ca: PathBuf,
    certificate: PathBuf,
    key: PathBuf,
    client_certificate: PathBuf,
    client_key: PathBuf,
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
        Self::start_with(size, None).await
    }

    /// [`start`](Self::start), the members serving clients over TLS with
    /// the server certificate of `certificates` and asking each client for
    /// one their authority signed (`--client-cert-auth`).
    pub async fn start_tls(size: usize, certificates: &TestCertificates) -> io::Result<Self> {
        let files = TlsFiles {
            ca: certificates.ca_file(),
            certificate: certificates.server_file(),
            key: certificates.server_key_file(),
            client_certificate: certificates.client_file(),
            client_key: certificates.client_key_file(),
        };
        Self::start_with(size, Some(files)).await
    }

    async fn start_with(size: usize, tls: Option<TlsFiles>) -> io::Result<Self> {
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
            tls,
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

    /// The URL of a store under `prefix` naming every member (`etcds://`
    /// when they serve TLS).
    pub fn url(&self, prefix: &str) -> String {
        let scheme = if self.tls.is_some() { "etcds" } else { "etcd" };
        format!("{scheme}://{}/{prefix}", self.endpoints().join(","))
    }

    /// `etcdctl` reaching the running members (with the client
    /// certificate, under TLS).
    fn etcdctl(&self) -> Command {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let running: Vec<String> = self
            .members
            .iter()
            .filter(|member| member.process.is_some())
            .map(|member| format!("{scheme}://{}", member.endpoint()))
            .collect();
        let mut command = Command::new(ETCDCTL);
        command.arg(format!("--endpoints={}", running.join(",")));
        if let Some(tls) = &self.tls {
            command
                .arg("--cacert")
                .arg(&tls.ca)
                .arg("--cert")
                .arg(&tls.client_certificate)
                .arg("--key")
                .arg(&tls.client_key);
        }
        command.stdin(Stdio::null());
        command
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
            .map(Watched::pid)
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
        let output = self
            .etcdctl()
            .args(["endpoint", "status", "-w", "json"])
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
            .position(|member| endpoint.ends_with(&member.endpoint()))
            .ok_or_else(|| io::Error::other(format!("unknown endpoint {endpoint}")))
    }

    /// Waits (bounded) until every running member reports healthy: it can
    /// commit a proposal through the cluster.
    pub async fn wait_healthy(&self) -> io::Result<()> {
        let give_up = tokio::time::Instant::now() + HEALTHY_BOUND;
        loop {
            let status = self
                .etcdctl()
                .args(["endpoint", "health", "--command-timeout=2s"])
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
                        "etcd members not healthy within {HEALTHY_BOUND:?} (logs in {})",
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
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let client_url = format!("{scheme}://{}", member.endpoint());
        let mut tls_flags: Vec<std::ffi::OsString> = Vec::new();
        if let Some(tls) = &self.tls {
            for (flag, file) in [
                ("--cert-file", &tls.certificate),
                ("--key-file", &tls.key),
                ("--trusted-ca-file", &tls.ca),
            ] {
                tls_flags.push(flag.into());
                tls_flags.push(file.into());
            }
            tls_flags.push("--client-cert-auth".into());
        }
        let state = if member.dir.exists() {
            "existing"
        } else {
            "new"
        };
        let mut args: Vec<std::ffi::OsString> = vec![
            "--name".into(),
            member.name.clone().into(),
            "--data-dir".into(),
            member.dir.clone().into(),
        ];
        for (flag, value) in [
            ("--listen-client-urls", client_url.clone()),
            ("--advertise-client-urls", client_url),
            ("--listen-peer-urls", member.peer_url()),
            ("--initial-advertise-peer-urls", member.peer_url()),
            ("--initial-cluster", self.initial_cluster.clone()),
            ("--initial-cluster-state", state.to_owned()),
            ("--initial-cluster-token", self.token.clone()),
            ("--max-txn-ops", MAX_TXN_OPS.to_string()),
            ("--max-request-bytes", "10485760".to_owned()),
        ] {
            args.push(flag.into());
            args.push(value.into());
        }
        args.extend(tls_flags);
        let log = self.base.join(format!("{}.log", member.name));
        self.members[index].process = Some(Watched::launch(ETCD, args, &Vec::new(), &log).await?);
        Ok(())
    }
}

impl Drop for PrivateEtcd {
    fn drop(&mut self) {
        // Each member's watchdog kills it and is reaped as it is dropped.
        for member in &mut self.members {
            drop(member.process.take());
        }
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

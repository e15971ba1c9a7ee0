//! A private Redis Cluster: three (or more) primaries on free loopback
//! ports, each serving an equal share of the 16,384 hash slots, optionally
//! each with a replica, with its files in one temporary directory. The
//! primary of a key's slot can be failed over as often as a test likes
//! ([`PrivateRedisCluster::fail_over_slot_of`]: the primary killed, its
//! replica promoted with `CLUSTER FAILOVER TAKEOVER`, the killed node
//! started again, rejoining as the new primary's replica). Each node runs under a
//! [watchdog](crate::watchdog), so a cluster kept in a `static` for a whole
//! test binary stops when the binary exits; dropping it stops the nodes and
//! removes the directory.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use tenure_conformance::suites::nemesis::FailoverControl;
use tokio::time::Instant;

use crate::certificates::TestCertificates;
use crate::sentinel::connect;
use crate::servers::{free_port, fresh_dir, launch_redis, READY_BOUND, REDIS_SERVER};
use crate::watchdog::Watched;

/// The hash slots of a Redis Cluster.
const SLOTS: u16 = 16_384;
/// Pause between two looks at the cluster while it forms.
const POLL: Duration = Duration::from_millis(50);

/// A private Redis Cluster (see the [module](self)).
#[derive(Debug)]
pub struct PrivateRedisCluster {
    base: PathBuf,
    /// Every node's port, the first ones the primaries at the start.
    ports: Vec<u16>,
    /// Every node's cluster bus port, in the order of `ports` (free ports
    /// of their own: the default, the port plus 10,000, may be taken or
    /// beyond 65,535).
    bus_ports: Vec<u16>,
    /// Every node's process, `None` while killed.
    nodes: Vec<Option<Watched>>,
    primaries: usize,
    /// When the nodes speak TLS to clients and to each other: the port
    /// each takes TLS clients on (in the order of `ports`, which then
    /// serve the helper's own plain-text calls), and the certificate
    /// arguments every node starts with.
    tls: Option<(Vec<u16>, Vec<String>)>,
}

impl PrivateRedisCluster {
    /// Why a private cluster cannot be started here, if it cannot.
    pub fn unavailable_reason() -> Option<String> {
        (!Path::new(REDIS_SERVER).exists()).then(|| format!("{REDIS_SERVER} is not installed"))
    }

    /// Starts `primaries` nodes (at least three, as Redis Cluster asks),
    /// gives each an equal range of slots and introduces them; answers once
    /// every node reports the cluster ok.
    ///
    /// # Errors
    ///
    /// When a node does not start or the cluster does not form within its
    /// bound.
    pub async fn start(primaries: usize) -> io::Result<Self> {
        Self::start_with_replicas(primaries, false).await
    }

    /// [`start`](Self::start), each primary with a replica when `replicas`;
    /// answers once every replica is in sync.
    ///
    /// # Errors
    ///
    /// As for [`start`](Self::start).
    pub async fn start_with_replicas(primaries: usize, replicas: bool) -> io::Result<Self> {
        Self::start_nodes(primaries, replicas, None).await
    }

    /// [`start`](Self::start), each node also taking TLS clients on a port
    /// of its own with the server certificate of `certificates` (clients
    /// need no certificate), the cluster bus and replication over TLS too
    /// (the nodes present the client certificate to each other);
    /// [`url`](Self::url) is then `rediss+cluster://` naming the TLS ports.
    ///
    /// # Errors
    ///
    /// As for [`start`](Self::start).
    pub async fn start_tls(primaries: usize, certificates: &TestCertificates) -> io::Result<Self> {
        let file = |path: PathBuf| path.display().to_string();
        let arguments = vec![
            "--tls-cert-file".to_owned(),
            file(certificates.server_file()),
            "--tls-key-file".to_owned(),
            file(certificates.server_key_file()),
            "--tls-ca-cert-file".to_owned(),
            file(certificates.ca_file()),
            "--tls-auth-clients".to_owned(),
            "no".to_owned(),
            "--tls-cluster".to_owned(),
            "yes".to_owned(),
            "--tls-replication".to_owned(),
            "yes".to_owned(),
            // The cluster bus asks every node for a client certificate.
            "--tls-client-cert-file".to_owned(),
            file(certificates.client_file()),
            "--tls-client-key-file".to_owned(),
            file(certificates.client_key_file()),
        ];
        Self::start_nodes(primaries, false, Some(arguments)).await
    }

    async fn start_nodes(
        primaries: usize,
        replicas: bool,
        tls_arguments: Option<Vec<String>>,
    ) -> io::Result<Self> {
        let primaries = primaries.max(3);
        let size = if replicas { 2 * primaries } else { primaries };
        let base = fresh_dir("tenure-redis-cluster")?;
        let mut cluster = PrivateRedisCluster {
            base,
            ports: Vec::with_capacity(size),
            bus_ports: Vec::with_capacity(size),
            nodes: Vec::with_capacity(size),
            primaries,
            tls: tls_arguments.map(|arguments| (Vec::with_capacity(size), arguments)),
        };
        for _ in 0..size {
            let port = free_port()?;
            let mut bus_port = free_port()?;
            while bus_port == port {
                bus_port = free_port()?;
            }
            if let Some((tls_ports, _)) = &mut cluster.tls {
                let mut tls_port = free_port()?;
                while tls_port == port || tls_port == bus_port {
                    tls_port = free_port()?;
                }
                tls_ports.push(tls_port);
            }
            cluster.ports.push(port);
            cluster.bus_ports.push(bus_port);
            let node = cluster.launch(cluster.nodes.len()).await?;
            cluster.nodes.push(Some(node));
        }
        cluster.form().await?;
        Ok(cluster)
    }

    /// `redis+cluster://` naming every node (`rediss+cluster://` and the
    /// TLS ports for a cluster [started with TLS](Self::start_tls)).
    pub fn url(&self) -> String {
        let (scheme, ports) = match &self.tls {
            Some((tls_ports, _)) => ("rediss+cluster", tls_ports),
            None => ("redis+cluster", &self.ports),
        };
        let nodes: Vec<String> = ports
            .iter()
            .map(|port| format!("127.0.0.1:{port}"))
            .collect();
        format!("{scheme}://{}", nodes.join(","))
    }

    /// `redis://` of each node.
    pub fn node_urls(&self) -> Vec<String> {
        self.ports
            .iter()
            .map(|port| format!("redis://127.0.0.1:{port}"))
            .collect()
    }

    /// Starts node `index` on its ports and waits until it accepts
    /// connections.
    async fn launch(&self, index: usize) -> io::Result<Watched> {
        let (port, bus_port) = (self.ports[index], self.bus_ports[index]);
        let dir = self.base.join(port.to_string());
        std::fs::create_dir_all(&dir)?;
        let nodes_file = dir.join("nodes.conf").display().to_string();
        let mut args = [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            &nodes_file,
            "--cluster-node-timeout",
            "2000",
            "--cluster-port",
            &bus_port.to_string(),
        ]
        .map(str::to_owned)
        .to_vec();
        if let Some((tls_ports, arguments)) = &self.tls {
            args.extend(["--tls-port".to_owned(), tls_ports[index].to_string()]);
            args.extend(arguments.iter().cloned());
        }
        launch_redis(&dir, port, &args, &Vec::new()).await
    }

    /// Assigns the slots, has the first node meet the others, and waits
    /// until every node says the cluster is ok.
    async fn form(&self) -> io::Result<()> {
        let share = SLOTS / u16::try_from(self.primaries).unwrap_or(SLOTS);
        for (index, &port) in self.ports.iter().take(self.primaries).enumerate() {
            let first = share * u16::try_from(index).unwrap_or(0);
            let last = if index + 1 == self.primaries {
                SLOTS - 1
            } else {
                first + share - 1
            };
            let _: () = redis::cmd("CLUSTER")
                .arg("ADDSLOTSRANGE")
                .arg(first)
                .arg(last)
                .query_async(&mut connect(port).await?)
                .await
                .map_err(io::Error::other)?;
        }
        let mut first = connect(self.ports[0]).await?;
        for (&port, &bus_port) in self.ports.iter().zip(&self.bus_ports).skip(1) {
            let _: () = redis::cmd("CLUSTER")
                .arg("MEET")
                .arg("127.0.0.1")
                .arg(port)
                .arg(bus_port)
                .query_async(&mut first)
                .await
                .map_err(io::Error::other)?;
        }
        self.until("the cluster formed", || self.all_know_each_other())
            .await?;
        for (replica, primary) in self.ports[self.primaries..].iter().zip(&self.ports) {
            let id: String = redis::cmd("CLUSTER")
                .arg("MYID")
                .query_async(&mut connect(*primary).await?)
                .await
                .map_err(io::Error::other)?;
            let _: () = redis::cmd("CLUSTER")
                .arg("REPLICATE")
                .arg(id)
                .query_async(&mut connect(*replica).await?)
                .await
                .map_err(io::Error::other)?;
        }
        self.until("every replica in sync", || self.replicas_in_sync())
            .await
    }

    /// Whether every running node knows every node and serves every slot.
    async fn all_know_each_other(&self) -> io::Result<bool> {
        let mut ready = true;
        for port in self.running_ports() {
            let info: String = redis::cmd("CLUSTER")
                .arg("INFO")
                .query_async(&mut connect(port).await?)
                .await
                .map_err(io::Error::other)?;
            ready = ready
                && info.contains("cluster_state:ok")
                && info.contains(&format!("cluster_known_nodes:{}", self.ports.len()));
        }
        Ok(ready)
    }

    /// Whether every node but the primaries is a replica in sync, and the
    /// primaries count each of them among their connected replicas (a
    /// replica's link comes up a moment before its primary lists it).
    async fn replicas_in_sync(&self) -> io::Result<bool> {
        let (mut primaries, mut replicas, mut listed) = (0, 0_u64, 0_u64);
        for port in self.running_ports() {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query_async(&mut connect(port).await?)
                .await
                .map_err(io::Error::other)?;
            if info.contains("role:master") {
                primaries += 1;
                listed += info
                    .lines()
                    .find_map(|line| line.strip_prefix("connected_slaves:"))
                    .and_then(|count| count.trim().parse::<u64>().ok())
                    .unwrap_or(0);
            } else if !info.contains("master_link_status:up")
                || info.contains("master_sync_in_progress:1")
            {
                return Ok(false);
            } else {
                replicas += 1;
            }
        }
        Ok(primaries == self.primaries && listed == replicas && self.all_know_each_other().await?)
    }

    /// Kills the primary serving the slot of `key`, promotes its replica
    /// (`CLUSTER FAILOVER TAKEOVER`: no vote of the other primaries), waits
    /// until every running node names the new primary for the slot, then
    /// starts the killed node again and waits until it rejoined as the new
    /// primary's replica and is in sync, so the slot can fail over again.
    ///
    /// # Errors
    ///
    /// When the cluster has no replica of the slot's primary, or a step
    /// does not happen within its bound.
    pub async fn fail_over_slot_of(&mut self, key: &str) -> io::Result<()> {
        // A replica in sync may reach the asked node's slot map a gossip
        // round later.
        self.until("a replica of the slot's primary announced", || async {
            Ok(self.serving(key).await?.1.is_some())
        })
        .await?;
        let (old, replica) = self.serving(key).await?;
        let replica = replica
            .ok_or_else(|| io::Error::other(format!("no replica serves the slot of {key:?}")))?;
        let old_index = self.index_of(old)?;
        if let Some(node) = self.nodes[old_index].take() {
            node.stop().await?;
        }
        let _: () = redis::cmd("CLUSTER")
            .arg("FAILOVER")
            .arg("TAKEOVER")
            .query_async(&mut connect(replica).await?)
            .await
            .map_err(io::Error::other)?;
        self.until("the replica took the slot over", || async {
            Ok(self.serving(key).await?.0 == replica)
        })
        .await?;
        self.nodes[old_index] = Some(self.launch(old_index).await?);
        self.until("the old primary rejoined as a replica", || async {
            Ok(self.serving(key).await?.1 == Some(old) && self.replicas_in_sync().await?)
        })
        .await
    }

    /// The ports of the primary and of a replica serving the slot of `key`,
    /// as the first running node sees them (`CLUSTER SLOTS`).
    async fn serving(&self, key: &str) -> io::Result<(u16, Option<u16>)> {
        let port = self
            .running_ports()
            .next()
            .ok_or_else(|| io::Error::other("no node of the cluster runs"))?;
        let mut connection = connect(port).await?;
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query_async(&mut connection)
            .await
            .map_err(io::Error::other)?;
        let ranges: Vec<redis::Value> = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query_async(&mut connection)
            .await
            .map_err(io::Error::other)?;
        for range in ranges {
            let redis::Value::Array(fields) = range else {
                continue;
            };
            let bound = |at: usize| match fields.get(at) {
                Some(redis::Value::Int(bound)) => u16::try_from(*bound).ok(),
                _ => None,
            };
            let node_port = |at: usize| match fields.get(at) {
                Some(redis::Value::Array(node)) => match node.get(1) {
                    Some(redis::Value::Int(port)) => u16::try_from(*port).ok(),
                    _ => None,
                },
                _ => None,
            };
            if let (Some(first), Some(last), Some(primary)) = (bound(0), bound(1), node_port(2)) {
                if (first..=last).contains(&slot) {
                    return Ok((primary, node_port(3)));
                }
            }
        }
        Err(io::Error::other(format!("no node serves slot {slot}")))
    }

    fn index_of(&self, port: u16) -> io::Result<usize> {
        self.ports
            .iter()
            .position(|&known| known == port)
            .ok_or_else(|| io::Error::other(format!("no node of the cluster on {port}")))
    }

    fn running_ports(&self) -> impl Iterator<Item = u16> + '_ {
        self.ports
            .iter()
            .zip(&self.nodes)
            .filter(|(_, node)| node.is_some())
            .map(|(&port, _)| port)
    }

    /// Waits until `ready` answers true (errors meanwhile count as not
    /// yet: a node may be restarting).
    /// The last lines of every node's log, by port.
    fn log_tails(&self) -> String {
        const LINES: usize = 5;
        self.ports
            .iter()
            .map(|port| {
                let log = self.base.join(port.to_string()).join("redis.log");
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                let tail = lines[lines.len().saturating_sub(LINES)..].join("\n  ");
                format!("node {port}:\n  {tail}")
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    async fn until<Fut>(&self, what: &str, mut ready: impl FnMut() -> Fut) -> io::Result<()>
    where
        Fut: std::future::Future<Output = io::Result<bool>>,
    {
        let give_up = Instant::now() + READY_BOUND;
        loop {
            if let Ok(true) = ready().await {
                return Ok(());
            }
            if Instant::now() >= give_up {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "not {what} within {READY_BOUND:?}; the nodes' last log lines (the \
                         logs go with the cluster):\n{}",
                        self.log_tails()
                    ),
                ));
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

/// A cluster whose failovers are those of one key's slot (the slot of the
/// namespace a test's store keeps).
pub struct SlotFailover {
    /// The cluster.
    pub cluster: PrivateRedisCluster,
    /// A key of the slot to fail over.
    pub key: String,
}

#[async_trait]
impl FailoverControl for SlotFailover {
    async fn fail_over(&mut self) -> io::Result<()> {
        self.cluster.fail_over_slot_of(&self.key).await
    }
}

impl Drop for PrivateRedisCluster {
    fn drop(&mut self) {
        // Each node's watchdog kills it and is reaped as it is dropped.
        self.nodes.clear();
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

//! Helpers for tests that need a misbehaving network between a store and its
//! server.
//!
//! The backends' contract says an `Err` means "the store could not say":
//! checking that takes a network that fails on demand, at a chosen moment,
//! which a real server on loopback never does. [`FaultProxy`] sits between
//! the store and the server and fails on command: latency per direction, a
//! blackhole, dropped connections, and a reply lost after its request reached
//! the server. It is byte-level and protocol-agnostic; the one protocol hook
//! is a marker (e.g. a lease id) that tells which request's reply to lose.
//!
//! The proxy is the workspace's [`NetworkFaults`]: a backend's test
//! factory hands it to the conformance kit's network suite
//! (`tenure_conformance::suites::network`), which holds the scenarios.
//!
//! It only ever listens on and connects to loopback addresses, and every
//! task it starts ends with [`FaultProxy::stop`] (or when it is dropped).

pub mod certificates;
pub mod etcd;
mod offset_clock;
pub mod per_binary;
pub mod postgres_pair;
pub mod redis_cluster;
pub mod sentinel;
pub mod servers;
pub mod shared;
mod watchdog;

use std::collections::HashMap;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use tenure_conformance::suites::network::NetworkFaults;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Bytes read from one side in one go.
const CHUNK_BYTES: usize = 16 * 1024;
/// Chunks read but not yet written (held back by latency) per direction.
const QUEUED_CHUNKS: usize = 64;
/// Bound on connecting to the target; loopback answers at once or never.
const CONNECT_BOUND: Duration = Duration::from_secs(5);

/// Which way bytes travel through the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// From the client (the store) to the server: requests.
    ClientToServer,
    /// From the server to the client: replies.
    ServerToClient,
}

/// One proxied connection's fault state.
struct Link {
    /// Cancelled to drop both sockets at once.
    cut: CancellationToken,
    /// Replies on this connection are discarded (armed by a marker).
    dropping_replies: AtomicBool,
    /// Bytes were discarded: the stream has a gap and cannot carry on.
    lost_bytes: AtomicBool,
    /// The client sent something the server has not answered yet.
    awaiting_reply: AtomicBool,
}

/// The controls shared by the proxy handle and its tasks.
struct Controls {
    /// Where new connections go ([`FaultProxy::retarget`] moves it).
    target: Mutex<SocketAddr>,
    latency: Mutex<HashMap<Direction, Duration>>,
    blackhole: AtomicBool,
    /// The marker whose request's reply is to be lost; one-shot.
    armed_marker: Mutex<Option<Vec<u8>>>,
    /// True once the request carrying the armed marker was written to the
    /// server.
    marker_delivered: watch::Sender<bool>,
    links: Mutex<HashMap<u64, Arc<Link>>>,
    next_link: AtomicU64,
    /// Request/reply exchanges forwarded, over every connection.
    round_trips: AtomicU64,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Controls {
    fn latency(&self, direction: Direction) -> Duration {
        lock(&self.latency)
            .get(&direction)
            .copied()
            .unwrap_or_default()
    }

    /// Drops the connections `which` selects.
    fn cut_links(&self, which: impl Fn(&Link) -> bool) {
        lock(&self.links).retain(|_, link| {
            let cut = which(link);
            if cut {
                link.cut.cancel();
            }
            !cut
        });
    }
}

/// A TCP proxy on `127.0.0.1` that forwards to one loopback target and
/// injects faults on command; see the [crate docs](crate).
///
/// Controls act on current and future connections alike, at once.
pub struct FaultProxy {
    address: SocketAddr,
    controls: Arc<Controls>,
    stop: CancellationToken,
    acceptor: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultProxy")
            .field("address", &self.address)
            .field("target", &*lock(&self.controls.target))
            .finish_non_exhaustive()
    }
}

impl FaultProxy {
    /// Starts a proxy to `target`, listening on an ephemeral loopback port.
    /// `target` must be a loopback address.
    pub async fn start(target: SocketAddr) -> io::Result<Self> {
        if !target.ip().is_loopback() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("the fault proxy only forwards to loopback, not {target}"),
            ));
        }
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let address = listener.local_addr()?;
        let controls = Arc::new(Controls {
            target: Mutex::new(target),
            latency: Mutex::new(HashMap::new()),
            blackhole: AtomicBool::new(false),
            armed_marker: Mutex::new(None),
            marker_delivered: watch::Sender::new(false),
            links: Mutex::new(HashMap::new()),
            next_link: AtomicU64::new(0),
            round_trips: AtomicU64::new(0),
        });
        let stop = CancellationToken::new();
        let acceptor = tokio::spawn(accept(listener, Arc::clone(&controls), stop.clone()));
        Ok(FaultProxy {
            address,
            controls,
            stop,
            acceptor: Mutex::new(Some(acceptor)),
        })
    }

    /// Starts a proxy to the server `url` names (`scheme://[user@]host[:port][/...]`,
    /// host `localhost` or a loopback IP, port defaulting to 5432 for
    /// `postgres`/`postgresql` and 6379 for `redis`) and answers it with the
    /// same URL pointed at the proxy.
    pub async fn in_front_of(url: &str) -> io::Result<(Self, String)> {
        let invalid =
            |why: &str| io::Error::new(io::ErrorKind::InvalidInput, format!("{url:?}: {why}"));
        let (scheme, rest) = url.split_once("://").ok_or_else(|| invalid("not a URL"))?;
        let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(authority_end);
        let (user_info, host_port) = match authority.rsplit_once('@') {
            Some((user_info, host_port)) => (Some(user_info), host_port),
            None => (None, authority),
        };
        let default_port = match scheme {
            "postgres" | "postgresql" => 5432,
            "redis" => 6379,
            "mysql" | "mariadb" => 3306,
            _ => return Err(invalid("unknown scheme")),
        };
        let (host, port) = match host_port.rsplit_once(':') {
            Some((host, port)) if !port.contains(']') => {
                (host, port.parse().map_err(|_| invalid("bad port"))?)
            }
            _ => (host_port, default_port),
        };
        let ip = match host.trim_start_matches('[').trim_end_matches(']') {
            "localhost" => Ipv4Addr::LOCALHOST.into(),
            literal => literal
                .parse()
                .map_err(|_| invalid("the host must be localhost or a loopback IP"))?,
        };
        let proxy = Self::start(SocketAddr::new(ip, port)).await?;
        let user = user_info.map(|user| format!("{user}@")).unwrap_or_default();
        let rerouted = format!("{scheme}://{user}{}{path}", proxy.address());
        Ok((proxy, rerouted))
    }

    /// Where clients connect.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Delays every chunk travelling in `direction` by `delay` (zero: none).
    pub fn set_latency(&self, direction: Direction, delay: Duration) {
        lock(&self.controls.latency).insert(direction, delay);
    }

    /// Starts a blackhole: connections are still accepted and read, but
    /// nothing is forwarded either way and nothing is answered.
    pub fn blackhole(&self) {
        self.controls.blackhole.store(true, Ordering::SeqCst);
    }

    /// Arms a one-shot reply drop: the next request containing `marker` is
    /// forwarded to the server, and from then on every reply on that
    /// connection is discarded, until [`heal`](Self::heal) or
    /// [`reset`](Self::reset). The server acts on the request; the client
    /// never hears. [`request_reached_server`](Self::request_reached_server)
    /// tells when the request was written to the server.
    pub fn drop_reply_after(&self, marker: impl Into<Vec<u8>>) {
        let marker = marker.into();
        assert!(!marker.is_empty(), "a reply-drop marker must not be empty");
        self.controls.marker_delivered.send_replace(false);
        *lock(&self.controls.armed_marker) = Some(marker);
    }

    /// Waits (at most `within`) until the request carrying the armed marker
    /// was written to the server; false if it was not in time.
    pub async fn request_reached_server(&self, within: Duration) -> bool {
        let mut delivered = self.controls.marker_delivered.subscribe();
        let reached = tokio::time::timeout(within, delivered.wait_for(|done| *done)).await;
        matches!(reached, Ok(Ok(_)))
    }

    /// The request/reply exchanges forwarded so far, over every connection:
    /// bytes from the client followed by bytes from the server on the same
    /// connection count once, however many reads either took, so a batch of
    /// pipelined requests with its replies is one. Bytes the server sends
    /// unasked (a notice, a keepalive) count for nothing. What a test reads
    /// to know how many network round trips an operation costs.
    pub fn round_trips(&self) -> u64 {
        self.controls.round_trips.load(Ordering::SeqCst)
    }

    /// Ends the blackhole and any reply drop, and drops every connection
    /// that lost bytes meanwhile: a stream with a gap cannot carry on (TCP
    /// would never deliver one), so its client must reconnect.
    pub fn heal(&self) {
        self.controls.blackhole.store(false, Ordering::SeqCst);
        *lock(&self.controls.armed_marker) = None;
        self.controls.cut_links(|link| {
            link.dropping_replies.load(Ordering::SeqCst) || link.lost_bytes.load(Ordering::SeqCst)
        });
    }

    /// Forwards every new connection to `target` (a loopback address) and
    /// drops every current one, as a virtual address moved to another
    /// server would: how a test repoints clients after a failover.
    ///
    /// # Errors
    ///
    /// When `target` is not a loopback address.
    pub fn retarget(&self, target: SocketAddr) -> io::Result<()> {
        if !target.ip().is_loopback() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("the fault proxy only forwards to loopback, not {target}"),
            ));
        }
        *lock(&self.controls.target) = target;
        self.reset();
        Ok(())
    }

    /// Drops every current connection (both sockets) and disarms a pending
    /// reply drop. The blackhole and latencies stay as they are.
    pub fn reset(&self) {
        *lock(&self.controls.armed_marker) = None;
        self.controls.cut_links(|_| true);
    }

    /// Stops accepting, drops every connection and waits for the proxy's
    /// tasks to end.
    pub async fn stop(&self) {
        self.stop.cancel();
        let acceptor = lock(&self.acceptor).take();
        if let Some(acceptor) = acceptor {
            // The acceptor only ends by cancellation; a panic in it has
            // nothing left to clean up.
            let _ = acceptor.await;
        }
    }
}

#[async_trait]
impl NetworkFaults for FaultProxy {
    fn blackhole(&self) {
        FaultProxy::blackhole(self);
    }

    fn heal(&self) {
        FaultProxy::heal(self);
    }

    fn reset(&self) {
        FaultProxy::reset(self);
    }

    fn drop_reply_after(&self, marker: &[u8]) {
        FaultProxy::drop_reply_after(self, marker);
    }

    async fn request_reached_server(&self, within: Duration) -> bool {
        FaultProxy::request_reached_server(self, within).await
    }

    fn round_trips(&self) -> u64 {
        FaultProxy::round_trips(self)
    }

    async fn stop(&self) {
        FaultProxy::stop(self).await;
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Accepts clients until `stop`, one task per connection; on `stop` aborts
/// them all.
async fn accept(listener: TcpListener, controls: Arc<Controls>, stop: CancellationToken) {
    let mut connections = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            _ = stop.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        while connections.try_join_next().is_some() {}
        let Ok((client, _)) = accepted else { continue };
        let id = controls.next_link.fetch_add(1, Ordering::SeqCst);
        let link = Arc::new(Link {
            cut: stop.child_token(),
            dropping_replies: AtomicBool::new(false),
            lost_bytes: AtomicBool::new(false),
            awaiting_reply: AtomicBool::new(false),
        });
        lock(&controls.links).insert(id, Arc::clone(&link));
        let controls = Arc::clone(&controls);
        connections.spawn(async move {
            tokio::select! {
                _ = link.cut.cancelled() => {}
                _ = relay(client, &controls, &link) => {}
            }
            lock(&controls.links).remove(&id);
        });
    }
    connections.shutdown().await;
}

/// Connects to the target and pumps both directions until both end.
async fn relay(client: TcpStream, controls: &Controls, link: &Link) {
    let target = *lock(&controls.target);
    let Ok(Ok(server)) = tokio::time::timeout(CONNECT_BOUND, TcpStream::connect(target)).await
    else {
        return;
    };
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    tokio::join!(
        pump(
            client_read,
            server_write,
            Direction::ClientToServer,
            controls,
            link
        ),
        pump(
            server_read,
            client_write,
            Direction::ServerToClient,
            controls,
            link
        ),
    );
}

/// A chunk read from one side, due on the other at `due`.
struct Chunk {
    due: Instant,
    bytes: Vec<u8>,
}

/// Moves bytes one way: reads chunks, holds each for the direction's
/// latency, then forwards or discards it as the controls say at that moment.
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    direction: Direction,
    controls: &Controls,
    link: &Link,
) {
    let (queue, mut queued) = mpsc::channel::<Chunk>(QUEUED_CHUNKS);
    let reading = async move {
        let mut buffer = vec![0; CHUNK_BYTES];
        while let Ok(read) = from.read(&mut buffer).await {
            if read == 0 {
                break;
            }
            let chunk = Chunk {
                due: Instant::now() + controls.latency(direction),
                bytes: buffer[..read].to_vec(),
            };
            if queue.send(chunk).await.is_err() {
                break;
            }
        }
    };
    let writing = async move {
        // The end of the previous chunk, so a marker split across two reads
        // is still found.
        let mut tail: Vec<u8> = Vec::new();
        while let Some(chunk) = queued.recv().await {
            tokio::time::sleep_until(chunk.due).await;
            if controls.blackhole.load(Ordering::SeqCst) {
                link.lost_bytes.store(true, Ordering::SeqCst);
                continue;
            }
            let mut carries_marker = false;
            match direction {
                Direction::ServerToClient => {
                    if link.dropping_replies.load(Ordering::SeqCst) {
                        continue;
                    }
                    // Counted before the client can read it, so a caller
                    // that has its answer sees the count include it.
                    if link.awaiting_reply.swap(false, Ordering::SeqCst) {
                        controls.round_trips.fetch_add(1, Ordering::SeqCst);
                    }
                }
                Direction::ClientToServer => {
                    let mut armed = lock(&controls.armed_marker);
                    if let Some(marker) = armed.as_deref() {
                        let mut window = std::mem::take(&mut tail);
                        window.extend_from_slice(&chunk.bytes);
                        carries_marker = window.windows(marker.len()).any(|w| w == marker);
                        let keep = window.len().saturating_sub(marker.len() - 1);
                        tail = window.split_off(keep);
                    }
                    if carries_marker {
                        // Before the request leaves: its reply must not
                        // overtake this flag.
                        link.dropping_replies.store(true, Ordering::SeqCst);
                        *armed = None;
                    }
                    link.awaiting_reply.store(true, Ordering::SeqCst);
                }
            }
            if to.write_all(&chunk.bytes).await.is_err() {
                break;
            }
            if carries_marker {
                controls.marker_delivered.send_replace(true);
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(reading, writing);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A loopback echo server, ended by the returned token.
    async fn echo_server() -> (SocketAddr, CancellationToken) {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let address = listener.local_addr().unwrap();
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        tokio::spawn(async move {
            let mut sessions = JoinSet::new();
            loop {
                let (mut socket, _) = tokio::select! {
                    _ = stopped.cancelled() => break,
                    accepted = listener.accept() => accepted.unwrap(),
                };
                sessions.spawn(async move {
                    let mut buffer = [0; 1024];
                    while let Ok(read @ 1..) = socket.read(&mut buffer).await {
                        if socket.write_all(&buffer[..read]).await.is_err() {
                            break;
                        }
                    }
                });
            }
            sessions.shutdown().await;
        });
        (address, stop)
    }

    const ANSWER_BOUND: Duration = Duration::from_secs(5);
    /// How long "no answer" is watched for; the only wait here that is not
    /// a signal, kept short.
    const SILENCE: Duration = Duration::from_millis(200);

    async fn round_trip(socket: &mut TcpStream, message: &[u8]) -> io::Result<Vec<u8>> {
        socket.write_all(message).await?;
        let mut answer = vec![0; message.len()];
        tokio::time::timeout(ANSWER_BOUND, socket.read_exact(&mut answer))
            .await
            .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))??;
        Ok(answer)
    }

    async fn silent(socket: &mut TcpStream) -> bool {
        let mut byte = [0; 1];
        tokio::time::timeout(SILENCE, socket.read(&mut byte))
            .await
            .is_err()
    }

    async fn closed(socket: &mut TcpStream) -> bool {
        let mut byte = [0; 1];
        matches!(
            tokio::time::timeout(ANSWER_BOUND, socket.read(&mut byte)).await,
            Ok(Ok(0) | Err(_))
        )
    }

    #[tokio::test]
    async fn forwards_both_ways() {
        let (server, server_stop) = echo_server().await;
        let proxy = FaultProxy::start(server).await.unwrap();
        let mut client = TcpStream::connect(proxy.address()).await.unwrap();
        assert_eq!(round_trip(&mut client, b"hello").await.unwrap(), b"hello");
        proxy.stop().await;
        assert!(closed(&mut client).await, "stop drops connections");
        server_stop.cancel();
    }

    #[tokio::test]
    async fn counts_each_request_answered_once() {
        let (server, server_stop) = echo_server().await;
        let proxy = FaultProxy::start(server).await.unwrap();
        let mut client = TcpStream::connect(proxy.address()).await.unwrap();
        assert_eq!(proxy.round_trips(), 0);
        round_trip(&mut client, b"one").await.unwrap();
        assert_eq!(
            proxy.round_trips(),
            1,
            "counted by the time the answer is read"
        );
        // Two requests written before either answer is read: the echo may
        // come back in one read or two, an exchange or two; never more.
        client.write_all(b"two").await.unwrap();
        round_trip(&mut client, b"three").await.unwrap();
        let mut rest = [0; 3];
        client.read_exact(&mut rest).await.unwrap();
        assert!(
            (2..=3).contains(&proxy.round_trips()),
            "{}",
            proxy.round_trips()
        );
        let mut second = TcpStream::connect(proxy.address()).await.unwrap();
        let before = proxy.round_trips();
        round_trip(&mut second, b"four").await.unwrap();
        assert_eq!(proxy.round_trips(), before + 1, "every connection counts");
        proxy.stop().await;
        server_stop.cancel();
    }

    #[tokio::test]
    async fn reroutes_server_urls_through_the_proxy() {
        let (server, server_stop) = echo_server().await;
        let url = format!("postgres://app:secret@127.0.0.1:{}/db?x=1", server.port());
        let (proxy, rerouted) = FaultProxy::in_front_of(&url).await.unwrap();
        assert_eq!(
            rerouted,
            format!("postgres://app:secret@{}/db?x=1", proxy.address())
        );
        proxy.stop().await;
        let error = FaultProxy::in_front_of("redis://example.com:6379")
            .await
            .unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
        server_stop.cancel();
    }

    #[tokio::test]
    async fn refuses_non_loopback_targets() {
        let error = FaultProxy::start("192.0.2.1:5432".parse().unwrap())
            .await
            .unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
    }

    #[tokio::test]
    async fn latency_delays_each_direction() {
        let (server, server_stop) = echo_server().await;
        let proxy = FaultProxy::start(server).await.unwrap();
        let mut client = TcpStream::connect(proxy.address()).await.unwrap();
        proxy.set_latency(Direction::ClientToServer, Duration::from_millis(100));
        proxy.set_latency(Direction::ServerToClient, Duration::from_millis(150));
        let started = Instant::now();
        assert_eq!(round_trip(&mut client, b"slow").await.unwrap(), b"slow");
        assert!(started.elapsed() >= Duration::from_millis(250));
        proxy.stop().await;
        server_stop.cancel();
    }

    #[tokio::test]
    async fn blackhole_swallows_and_heal_drops_the_gapped_connection() {
        let (server, server_stop) = echo_server().await;
        let proxy = FaultProxy::start(server).await.unwrap();
        let mut before = TcpStream::connect(proxy.address()).await.unwrap();
        assert_eq!(round_trip(&mut before, b"up").await.unwrap(), b"up");
        proxy.blackhole();
        before.write_all(b"lost").await.unwrap();
        assert!(silent(&mut before).await);
        let mut during = TcpStream::connect(proxy.address()).await.unwrap();
        during.write_all(b"lost too").await.unwrap();
        assert!(silent(&mut during).await);
        proxy.heal();
        assert!(closed(&mut before).await);
        assert!(closed(&mut during).await);
        let mut after = TcpStream::connect(proxy.address()).await.unwrap();
        assert_eq!(round_trip(&mut after, b"back").await.unwrap(), b"back");
        proxy.stop().await;
        server_stop.cancel();
    }

    #[tokio::test]
    async fn reply_after_marker_is_dropped_until_heal() {
        let (server, server_stop) = echo_server().await;
        let proxy = FaultProxy::start(server).await.unwrap();
        let mut client = TcpStream::connect(proxy.address()).await.unwrap();
        proxy.drop_reply_after(b"MARK".to_vec());
        assert_eq!(round_trip(&mut client, b"plain").await.unwrap(), b"plain");
        assert!(!proxy.request_reached_server(Duration::ZERO).await);
        client.write_all(b"..MA").await.unwrap();
        client.write_all(b"RK..").await.unwrap();
        assert!(proxy.request_reached_server(ANSWER_BOUND).await);
        // The echo of the two halves may come back before the second half
        // was read; whatever arrives must stop before the marker's end.
        let mut heard = Vec::new();
        let mut buffer = [0; 16];
        while let Ok(Ok(read @ 1..)) = tokio::time::timeout(SILENCE, client.read(&mut buffer)).await
        {
            heard.extend_from_slice(&buffer[..read]);
        }
        assert!(heard.len() < 8, "heard {heard:?}");
        proxy.heal();
        assert!(closed(&mut client).await);
        let mut fresh = TcpStream::connect(proxy.address()).await.unwrap();
        assert_eq!(round_trip(&mut fresh, b"MARK").await.unwrap(), b"MARK");
        proxy.stop().await;
        server_stop.cancel();
    }

    #[tokio::test]
    async fn reset_drops_current_connections_only() {
        let (server, server_stop) = echo_server().await;
        let proxy = FaultProxy::start(server).await.unwrap();
        let mut client = TcpStream::connect(proxy.address()).await.unwrap();
        assert_eq!(round_trip(&mut client, b"one").await.unwrap(), b"one");
        proxy.reset();
        assert!(closed(&mut client).await);
        let mut again = TcpStream::connect(proxy.address()).await.unwrap();
        assert_eq!(round_trip(&mut again, b"two").await.unwrap(), b"two");
        proxy.stop().await;
        server_stop.cancel();
    }
}

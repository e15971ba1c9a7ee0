//! Leader election among three campaigners sharing one SQLite file (each
//! with its own store handle and keeper, as three processes would have):
//!
//! 1. one of them is elected and writes the ledger under its term's fence;
//! 2. it crashes (its election is dropped, nothing is released): the others
//!    wait out its lease, then one takes over under a greater fence, and
//!    the crashed leader's fence is refused by the ledger's gate;
//! 3. the new leader shuts down gracefully: its work finishes, its term is
//!    released, and the last campaigner takes over at once.
//!
//! `cargo run --example election --features sqlite`

use std::sync::Arc;
use std::time::Duration;

use tenure::keeper::{Election, Keeper, KeeperConfig, Leadership, Term, TermEnd};
use tenure::sqlite::{SqliteConfig, SqliteStore};
use tenure::FenceGate;
use tokio::time::Instant;

const ELECTION: &str = "leader:ledger";
const TTL: Duration = Duration::from_secs(2);
const WRITE_EVERY: Duration = Duration::from_millis(300);

/// One campaigner: a store handle on the shared file, a keeper, an election.
struct Node {
    name: &'static str,
    keeper: Arc<Keeper>,
    election: Election,
}

async fn start(name: &'static str, path: &std::path::Path, ledger: Arc<FenceGate>) -> Node {
    let store = SqliteStore::connect(SqliteConfig::new(path))
        .await
        .expect("the SQLite file opens");
    let config = KeeperConfig::with_ttl(TTL)
        .renew_interval(TTL / 4)
        .worker_id(name);
    let keeper = Arc::new(
        Keeper::builder(Arc::new(store), config)
            .start()
            .expect("the keeper starts"),
    );
    let election = Election::builder(keeper.clone(), ELECTION)
        .retry_interval(Duration::from_millis(100))
        .on_term_end(move |end: TermEnd| println!("  {name}: term ended: {end:?}"))
        .start(move |term: Term| lead(name, term, ledger.clone()))
        .expect("the election starts");
    Node {
        name,
        keeper,
        election,
    }
}

/// The leader's work: write the ledger under the term's fence until asked
/// to step down, then write a last entry and return.
async fn lead(name: &'static str, term: Term, ledger: Arc<FenceGate>) -> Result<(), String> {
    println!("  {name}: elected, fence {}", term.fence());
    let stepping_down = term.stepping_down();
    loop {
        ledger
            .admit("ledger", term.fence())
            .map_err(|stale| stale.to_string())?;
        tokio::select! {
            _ = stepping_down.cancelled() => break,
            _ = tokio::time::sleep(WRITE_EVERY) => {}
        }
    }
    ledger
        .admit("ledger", term.fence())
        .map_err(|stale| stale.to_string())?;
    println!("  {name}: last entry written, stepping down");
    Ok(())
}

/// Waits until one of `nodes` leads; answers its index and fence.
async fn leader(nodes: &[Node]) -> (usize, u64) {
    let mut watches: Vec<_> = nodes.iter().map(|node| node.election.watch()).collect();
    loop {
        for (index, watch) in watches.iter_mut().enumerate() {
            if let Leadership::Leading { claim } = &*watch.borrow_and_update() {
                return (index, claim.fence);
            }
        }
        let changes = watches.iter_mut().map(|watch| Box::pin(watch.changed()));
        let _ = futures_util::future::select_all(changes).await;
    }
}

#[tokio::main]
async fn main() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let path = directory.path().join("leases.db");
    let ledger = Arc::new(FenceGate::new());
    let mut nodes = Vec::new();
    for name in ["node-a", "node-b", "node-c"] {
        nodes.push(start(name, &path, ledger.clone()).await);
    }

    println!("1. campaigning");
    let (first, first_fence) = leader(&nodes).await;
    tokio::time::sleep(WRITE_EVERY * 3).await;

    println!("2. {} crashes", nodes[first].name);
    let crashed = nodes.remove(first);
    let crashed_at = Instant::now();
    drop(crashed.election);
    let (second, second_fence) = leader(&nodes).await;
    println!(
        "  {} took over after {:?} (the crashed leader's lease had to run out)",
        nodes[second].name,
        crashed_at.elapsed()
    );
    assert!(second_fence > first_fence);
    tokio::time::sleep(WRITE_EVERY).await;
    match ledger.admit("ledger", first_fence) {
        Err(stale) => println!("  the crashed leader's write is refused: {stale}"),
        Ok(()) => unreachable!("a newer fence has written the ledger"),
    }
    crashed.keeper.shutdown(Instant::now()).await;

    println!("3. {} shuts down gracefully", nodes[second].name);
    let graceful = nodes.remove(second);
    let stepped_at = Instant::now();
    let ended = graceful
        .election
        .shutdown(Instant::now() + Duration::from_secs(5))
        .await;
    assert_eq!(ended, Some(TermEnd::SteppedDown));
    let (_, third_fence) = leader(&nodes).await;
    println!(
        "  {} took over {:?} after the step-down began (no lease to wait out)",
        nodes[0].name,
        stepped_at.elapsed()
    );
    assert!(third_fence > second_fence);
    graceful
        .keeper
        .shutdown(Instant::now() + Duration::from_secs(5))
        .await;

    let last = nodes.remove(0);
    last.election
        .shutdown(Instant::now() + Duration::from_secs(5))
        .await;
    last.keeper
        .shutdown(Instant::now() + Duration::from_secs(5))
        .await;
}

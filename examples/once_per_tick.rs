//! A schedule fired once per tick by three hosts sharing one SQLite file
//! (each with its own store handle and keeper, as three processes would
//! have): every second exactly one host delivers the tick.
//!
//! 1. three hosts tick for a few seconds: one delivery per tick, whoever
//!    wins it; one delivery fails and is kept as a failed run;
//! 2. every host is down for a few ticks;
//! 3. one host comes back: its first delivery reports the ticks nobody
//!    fired.
//!
//! `cargo run --example once_per_tick --features sqlite`

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tenure::keeper::{Firing, Keeper, KeeperConfig, Schedule, TickOutcome, Ticker};
use tenure::sqlite::{SqliteConfig, SqliteStore};
use tenure::{LeaseStore, Status};
use tokio::time::Instant;

const INTERVAL: Duration = Duration::from_secs(1);

async fn keeper(host: &str, path: &std::path::Path) -> Arc<Keeper> {
    let store = SqliteStore::connect(SqliteConfig::new(path))
        .await
        .expect("the SQLite file opens");
    let config = KeeperConfig::with_ttl(Duration::from_secs(10)).worker_id(host);
    Arc::new(
        Keeper::builder(Arc::new(store), config)
            .start()
            .expect("the keeper starts"),
    )
}

/// The tick's work: the third delivery overall fails, to show a failed run.
fn deliver(
    host: &'static str,
    deliveries: Arc<AtomicUsize>,
) -> impl Fn(Firing) -> std::future::Ready<Result<(), String>> + Send + Sync + 'static {
    move |firing: Firing| {
        if !firing.missed().ticks().is_empty() {
            let missed: Vec<String> = firing
                .missed()
                .ticks()
                .iter()
                .map(ToString::to_string)
                .collect();
            println!("  {host}: ticks nobody fired: {}", missed.join(", "));
        }
        let answer = if deliveries.fetch_add(1, Ordering::SeqCst) == 2 {
            Err("the mail server refused the digest".to_owned())
        } else {
            println!(
                "  {host}: delivers tick {} (fence {})",
                firing.tick(),
                firing.fence()
            );
            Ok(())
        };
        std::future::ready(answer)
    }
}

fn start(
    host: &'static str,
    keeper: Arc<Keeper>,
    schedule: &Schedule,
    deliveries: Arc<AtomicUsize>,
) -> Ticker {
    Ticker::builder(keeper, schedule.clone())
        .on_outcome(move |outcome| match outcome {
            Ok(TickOutcome::DeliveryFailed { tick, error, .. }) => {
                println!("  {host}: tick {tick} failed: {error}");
            }
            Ok(_) => {}
            Err(error) => println!("  {host}: could not fire: {error}"),
        })
        .start(deliver(host, deliveries))
        .expect("the ticker starts")
}

#[tokio::main]
async fn main() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let path = directory.path().join("leases.db");
    let schedule = Schedule::every("digest", INTERVAL).expect("a valid schedule");
    let deliveries = Arc::new(AtomicUsize::new(0));
    let hosts = ["host-a", "host-b", "host-c"];
    let mut keepers = Vec::new();
    for host in hosts {
        keepers.push(keeper(host, &path).await);
    }

    let observer = SqliteStore::connect(SqliteConfig::new(&path))
        .await
        .expect("the SQLite file opens");
    let first = schedule.tick_at(observer.now().await.expect("the store's clock"));

    println!("1. three hosts tick");
    let tickers: Vec<Ticker> = hosts
        .iter()
        .zip(&keepers)
        .map(|(host, keeper)| start(host, keeper.clone(), &schedule, deliveries.clone()))
        .collect();
    tokio::time::sleep(INTERVAL * 4).await;
    for ticker in &tickers {
        ticker
            .shutdown(Instant::now() + Duration::from_secs(5))
            .await;
    }

    println!("2. every host is down");
    tokio::time::sleep(INTERVAL * 3).await;

    println!("3. host-b comes back");
    let back = start("host-b", keepers[1].clone(), &schedule, deliveries.clone());
    tokio::time::sleep(INTERVAL / 2).await;
    back.shutdown(Instant::now() + Duration::from_secs(5)).await;

    let mut runs: Vec<_> = observer
        .list_active()
        .await
        .expect("a read")
        .into_iter()
        .map(|run| run.id)
        .collect();
    runs.sort();
    assert!(runs.is_empty(), "every tick's run finished: {runs:?}");
    let now = observer.now().await.expect("the store's clock");
    let mut failed = 0;
    let mut tick = first;
    while tick.start() <= now {
        if let Some(run) = observer.get(&schedule.run_id(tick)).await.expect("a read") {
            if run.status == Status::Failed {
                failed += 1;
                println!("  {} is kept as a failed run: {:?}", run.id, run.error);
            }
        }
        tick = schedule.tick_at(tenure::clock::add(tick.start(), INTERVAL));
    }
    assert_eq!(failed, 1);
    for keeper in &keepers {
        keeper
            .shutdown(Instant::now() + Duration::from_secs(5))
            .await;
    }
}

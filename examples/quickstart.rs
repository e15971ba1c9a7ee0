//! Admit a run, keep its lease alive, finish it; see a second worker refused
//! while the lease is valid and taking over once it has lapsed.
//!
//! `cargo run --example quickstart`

use std::sync::Arc;
use std::time::Duration;

use tenure::memory::MemoryStore;
use tenure::{
    Admission, AdmitRequest, LeaseStore, ManualClock, Renewal, StatusChange, Takeover,
    TakeoverRequest, Transition,
};

#[tokio::main(flavor = "current_thread")]
async fn main() -> tenure::Result<()> {
    // A manual clock lets the example show expiry without waiting.
    let clock = Arc::new(ManualClock::starting_now());
    let store = MemoryStore::with_clock(clock.clone());
    let ttl = Duration::from_secs(30);

    let request = AdmitRequest::new("nightly-report", "worker-a")
        .scope("cron:nightly-report")
        .ttl(ttl);
    let Admission::Admitted { record, .. } = store.admit(&request).await? else {
        unreachable!("the store is empty");
    };
    let claim = record.claim().expect("an admitted record has an owner");
    println!("worker-a admitted {} with fence {}", claim.id, claim.fence);

    // Heartbeat: renew well before the lease ends (a Keeper does this for you).
    if let Renewal::Renewed { expires_at } = store.renew(&claim, ttl).await? {
        println!("worker-a renewed until {expires_at}");
    }

    // A second worker asking for the same scope is refused while the lease is valid.
    let rival = AdmitRequest::new("nightly-report-retry", "worker-b")
        .scope("cron:nightly-report")
        .ttl(ttl);
    if let Admission::Conflict {
        holder,
        retry_after,
    } = store.admit(&rival).await?
    {
        println!(
            "worker-b refused: {} holds it, retry after {retry_after:?}",
            holder.id
        );
    }

    // worker-a stalls past its lease; worker-b takes over and gets a greater fence.
    clock.advance(ttl + Duration::from_secs(1));
    let takeover = TakeoverRequest::adopt("nightly-report", "worker-b", Some(ttl));
    let Takeover::Taken(adopted) = store.claim_for_takeover(&takeover).await? else {
        unreachable!("the lease has lapsed");
    };
    println!("worker-b took over with fence {}", adopted.fence);

    // worker-a wakes up: its late success is refused, so it cannot overwrite worker-b.
    let late = store.transition(&claim, &StatusChange::succeeded()).await?;
    println!("worker-a's late success: {late:?}");
    assert!(matches!(late, Transition::Rejected(_)));

    let new_claim = adopted.claim().expect("taken records have an owner");
    store
        .transition(&new_claim, &StatusChange::succeeded())
        .await?;
    println!("worker-b finished it");
    Ok(())
}

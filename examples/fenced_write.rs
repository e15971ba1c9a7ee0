//! Fences that reach the resource: two workers own a lease in turn, and the
//! database itself refuses the first one's late write.
//!
//! Worker A takes the lease and pauses (a GC pause, a suspended VM) until
//! its short lease lapses; worker B takes over under a greater fence and
//! writes an invoice through a fence check inside its own transaction; then
//! A resumes and tries to write the same invoice. Its check, in the same
//! transaction as its write, is refused, so nothing of A's reaches the
//! table. The store and the invoices share one SQLite file (a temporary
//! one here).
//!
//! `cargo run --example fenced_write --features sqlite`

use std::error::Error;
use std::time::Duration;

use tenure::sqlite::rusqlite::{params, Connection, TransactionBehavior};
use tenure::sqlite::{FenceTable, SqliteStore};
use tenure::{Admission, AdmitRequest, Claim, FenceCheck, LeaseStore, Takeover, TakeoverRequest};

/// A's lease: short, so its pause outlasts it.
const SHORT_TTL: Duration = Duration::from_millis(100);
/// The resource the fence guards: the invoices table.
const INVOICES: &str = "invoices";

/// Writes invoice `number` for `total` as `claim`'s owner, in one
/// transaction with the fence check: either both commit, or neither.
fn write_invoice(
    connection: &mut Connection,
    gates: &FenceTable,
    claim: &Claim,
    number: i64,
    total: i64,
) -> Result<FenceCheck, Box<dyn Error>> {
    let transaction = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let check = gates.check(&transaction, INVOICES, claim.fence)?;
    if check.is_accepted() {
        transaction.execute(
            "INSERT OR REPLACE INTO invoices (number, total, written_by, fence) \
             VALUES (?1, ?2, ?3, ?4)",
            params![number, total, claim.owner, claim.fence as i64],
        )?;
        transaction.commit()?;
    }
    // Refused: the transaction is dropped, rolled back, nothing written.
    Ok(check)
}

/// The whole story; `Err` when a write went otherwise than a fence says
/// (`tests/suite/fenced_write_example.rs` runs it).
#[tokio::main(flavor = "current_thread")]
pub async fn main() -> Result<(), Box<dyn Error>> {
    let directory = tempfile::tempdir()?;
    let path = directory.path().join("app.db");
    let store = SqliteStore::connect(path.as_path()).await?;
    let gates = store.fence_table();
    let mut invoices = Connection::open(store.path())?;
    invoices.execute_batch(
        "CREATE TABLE invoices (number INTEGER PRIMARY KEY, total INTEGER NOT NULL, \
         written_by TEXT NOT NULL, fence INTEGER NOT NULL)",
    )?;

    // Worker A takes the lease...
    let request = AdmitRequest::new("invoice-run", "worker-a").ttl(SHORT_TTL);
    let Admission::Admitted { record, .. } = store.admit(&request).await? else {
        return Err("the store is empty, yet A was not admitted".into());
    };
    let a = record.claim().ok_or("an admitted record has an owner")?;
    println!("worker-a holds the run with fence {}", a.fence);

    // ...and pauses past its lease.
    tokio::time::sleep(SHORT_TTL * 2).await;

    // Worker B takes over under a greater fence and writes invoice 1.
    let takeover = TakeoverRequest::adopt("invoice-run", "worker-b", Some(Duration::from_secs(30)));
    let Takeover::Taken(record) = store.claim_for_takeover(&takeover).await? else {
        return Err("A's lease lapsed, yet B could not take over".into());
    };
    let b = record.claim().ok_or("a taken record has an owner")?;
    println!("worker-b took over with fence {}", b.fence);
    let written = write_invoice(&mut invoices, &gates, &b, 1, 200)?;
    println!("worker-b writes invoice 1: {}", written.label());
    if !written.is_accepted() {
        return Err(format!("the current owner's write was refused: {written:?}").into());
    }

    // Worker A resumes, unaware, and writes the same invoice.
    match write_invoice(&mut invoices, &gates, &a, 1, 100)? {
        FenceCheck::Stale(stale) => println!("worker-a's late write is refused: {stale}"),
        other => return Err(format!("the stale owner's write passed: {other:?}").into()),
    }

    let (total, written_by): (i64, String) = invoices.query_row(
        "SELECT total, written_by FROM invoices WHERE number = 1",
        [],
        |row| Ok((row.get(0)?, row.get(1)?)),
    )?;
    println!("invoice 1: total {total}, written by {written_by}");
    if (total, written_by.as_str()) != (200, "worker-b") {
        return Err("the invoice is not the current owner's".into());
    }
    Ok(())
}

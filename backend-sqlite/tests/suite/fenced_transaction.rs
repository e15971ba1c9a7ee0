//! Fence checks inside the caller's own transaction (`FenceTable`): the
//! guarded write and the gate commit or roll back together, a stale check
//! keeps the caller's write out, and a damaged gate is `Corrupt`.

use tempfile::TempDir;
use tenure_backend_sqlite::rusqlite::{Connection, TransactionBehavior};
use tenure_backend_sqlite::{FenceTable, SqliteStore};
use tenure_lease_core::{ErrorKind, FenceCheck, FenceStore, StaleFence};

/// A store in a fresh file, and a connection of the caller's on it with a
/// table to guard.
async fn setup() -> (TempDir, SqliteStore, Connection) {
    let directory = TempDir::with_prefix("tenure-sqlite-fenced-").expect("a temporary directory");
    let path = directory.path().join("app.db");
    let store = SqliteStore::connect(path.as_path())
        .await
        .expect("open the store");
    let connection = Connection::open(store.path()).expect("the caller's connection");
    connection
        .execute_batch("CREATE TABLE ledger (entry TEXT NOT NULL, fence INTEGER NOT NULL)")
        .expect("the caller's table");
    (directory, store, connection)
}

/// In one transaction: check `fence`, write an entry only when accepted,
/// then commit or roll back as `commit` says. Answers the check.
fn fenced_write(
    connection: &mut Connection,
    table: &FenceTable,
    fence: u64,
    commit: bool,
) -> FenceCheck {
    let transaction = connection
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .expect("begin");
    let check = table
        .check(&transaction, "ledger", fence)
        .expect("the check answers");
    if check.is_accepted() {
        transaction
            .execute(
                "INSERT INTO ledger (entry, fence) VALUES ('entry', ?1)",
                [fence as i64],
            )
            .expect("the guarded write");
    }
    if commit {
        transaction.commit().expect("commit");
    } else {
        transaction.rollback().expect("roll back");
    }
    check
}

fn entries(connection: &Connection) -> Vec<i64> {
    connection
        .prepare("SELECT fence FROM ledger ORDER BY rowid")
        .expect("prepare")
        .query_map([], |row| row.get(0))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows")
}

#[tokio::test]
async fn the_check_and_the_guarded_write_commit_together() {
    let (_directory, store, mut connection) = setup().await;
    let table = store.fence_table();
    assert_eq!(
        fenced_write(&mut connection, &table, 7, true),
        FenceCheck::Accepted
    );
    assert_eq!(entries(&connection), vec![7]);
    assert_eq!(store.highest_fence("ledger").await.unwrap(), Some(7));
    assert!(matches!(
        store.check_fence("ledger", 6).await.unwrap(),
        FenceCheck::Stale(_)
    ));
}

#[tokio::test]
async fn a_rolled_back_transaction_leaves_the_gate_where_it_was() {
    let (_directory, store, mut connection) = setup().await;
    let table = store.fence_table();
    assert!(store.check_fence("ledger", 5).await.unwrap().is_accepted());
    assert_eq!(
        fenced_write(&mut connection, &table, 9, false),
        FenceCheck::Accepted
    );
    assert_eq!(entries(&connection), Vec::<i64>::new());
    assert_eq!(
        store.highest_fence("ledger").await.unwrap(),
        Some(5),
        "the rolled-back check did not raise the gate"
    );
    assert!(
        store.check_fence("ledger", 6).await.unwrap().is_accepted(),
        "a fence between the two still passes"
    );
}

#[tokio::test]
async fn a_stale_check_in_a_transaction_refuses_and_nothing_is_committed() {
    let (_directory, store, mut connection) = setup().await;
    let table = store.fence_table();
    assert!(store.check_fence("ledger", 9).await.unwrap().is_accepted());
    assert_eq!(
        fenced_write(&mut connection, &table, 5, true),
        FenceCheck::Stale(StaleFence {
            presented: 5,
            highest_seen: 9
        })
    );
    assert_eq!(entries(&connection), Vec::<i64>::new());
    assert_eq!(store.highest_fence("ledger").await.unwrap(), Some(9));
    assert_eq!(
        fenced_write(&mut connection, &table, 9, true),
        FenceCheck::Accepted,
        "the current owner still writes"
    );
    assert_eq!(entries(&connection), vec![9]);
}

#[tokio::test]
async fn invalid_input_is_refused_before_the_connection_is_touched() {
    let (_directory, store, connection) = setup().await;
    let table = store.fence_table();
    for (resource, fence, field) in [("", 1, "resource"), ("ledger", 0, "fence")] {
        let error = table
            .check(&connection, resource, fence)
            .expect_err("bad input");
        assert_eq!(
            (error.kind(), error.field()),
            (ErrorKind::InvalidInput, Some(field))
        );
    }
    assert_eq!(store.highest_fence("ledger").await.unwrap(), None);
}

#[tokio::test]
async fn a_connection_on_another_file_answers_an_error_not_a_panic() {
    let (directory, store, _connection) = setup().await;
    let elsewhere = Connection::open(directory.path().join("other.db")).expect("another file");
    let error = store
        .fence_table()
        .check(&elsewhere, "ledger", 1)
        .expect_err("no fence_gates table there");
    assert_eq!(error.kind(), ErrorKind::Unavailable);
}

#[tokio::test]
async fn a_damaged_gate_is_corrupt_and_left_as_it_is() {
    let (_directory, store, connection) = setup().await;
    let table = store.fence_table();
    for (damage, value) in [
        ("'garbage'", "garbage"),
        ("-3", "-3"),
        ("0", "0"),
        ("1.5", "1.5"),
        ("9007199254740992", "9007199254740992"),
    ] {
        assert!(store.check_fence("ledger", 1).await.unwrap().is_accepted());
        connection
            .execute_batch(&format!(
                "UPDATE fence_gates SET fence = {damage} WHERE resource = 'ledger'"
            ))
            .expect("damage the gate");
        let stored = || -> String {
            connection
                .query_row(
                    "SELECT CAST(fence AS TEXT) FROM fence_gates WHERE resource = 'ledger'",
                    [],
                    |row| row.get(0),
                )
                .expect("read the gate")
        };
        for answer in [
            store.check_fence("ledger", 5).await.map(drop),
            store.highest_fence("ledger").await.map(drop),
            table.check(&connection, "ledger", 5).map(drop),
        ] {
            let error = answer.expect_err(&format!("a gate holding {damage}"));
            assert_eq!(error.kind(), ErrorKind::Corrupt, "{damage}: {error}");
        }
        assert_eq!(stored(), value, "nothing was written over {damage}");
        connection
            .execute_batch("DELETE FROM fence_gates")
            .expect("clear the gate");
    }
}

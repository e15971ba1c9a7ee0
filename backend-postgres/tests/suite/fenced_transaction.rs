//! Fence checks inside the caller's own transaction
//! (`PgStore::check_fence_in`): the guarded write and the gate commit or
//! roll back together, a stale check keeps the caller's write out, checks
//! on one resource take turns, and a damaged gate is `Corrupt`, checked,
//! read or listed.

use crate::support;

use sqlx::{Postgres, Transaction};
use tenure_backend_postgres::PgStore;
use tenure_lease_core::{ErrorKind, FenceCheck, FenceStore, StaleFence};

use support::{execute, with_store};

/// The caller's table, in the store's schema (dropped with it).
async fn create_ledger(url: &str, store: &PgStore) {
    execute(
        url,
        store,
        "CREATE TABLE $schema.ledger (entry text NOT NULL, fence bigint NOT NULL)",
    )
    .await;
}

fn ledger(store: &PgStore) -> String {
    format!("\"{}\".ledger", store.schema())
}

/// Writes an entry in `transaction` when `check` accepted `fence`.
async fn write_if_accepted(
    store: &PgStore,
    transaction: &mut Transaction<'_, Postgres>,
    check: FenceCheck,
    fence: u64,
) {
    if check.is_accepted() {
        sqlx::query(&format!(
            "INSERT INTO {} (entry, fence) VALUES ('entry', $1)",
            ledger(store)
        ))
        .bind(fence as i64)
        .execute(&mut **transaction)
        .await
        .expect("the guarded write");
    }
}

/// In one transaction: check `fence`, write when accepted, then commit or
/// roll back as `commit` says. Answers the check.
async fn fenced_write(store: &PgStore, fence: u64, commit: bool) -> FenceCheck {
    let mut transaction = store.pool().begin().await.expect("begin");
    let check = store
        .check_fence_in(&mut transaction, "ledger", fence)
        .await
        .expect("the check answers");
    write_if_accepted(store, &mut transaction, check, fence).await;
    if commit {
        transaction.commit().await.expect("commit");
    } else {
        transaction.rollback().await.expect("roll back");
    }
    check
}

async fn entries(store: &PgStore) -> Vec<i64> {
    sqlx::query_scalar(&format!(
        "SELECT fence FROM {} ORDER BY fence",
        ledger(store)
    ))
    .fetch_all(store.pool())
    .await
    .expect("read the ledger")
}

#[tokio::test]
async fn the_check_and_the_guarded_write_commit_together() {
    with_store(
        "the_check_and_the_guarded_write_commit_together",
        |store, url| async move {
            create_ledger(&url, &store).await;
            assert_eq!(fenced_write(&store, 7, true).await, FenceCheck::Accepted);
            assert_eq!(entries(&store).await, vec![7]);
            assert_eq!(store.highest_fence("ledger").await.unwrap(), Some(7));
            assert!(matches!(
                store.check_fence("ledger", 6).await.unwrap(),
                FenceCheck::Stale(_)
            ));
        },
    )
    .await;
}

#[tokio::test]
async fn a_rolled_back_transaction_leaves_the_gate_where_it_was() {
    with_store(
        "a_rolled_back_transaction_leaves_the_gate_where_it_was",
        |store, url| async move {
            create_ledger(&url, &store).await;
            assert!(store.check_fence("ledger", 5).await.unwrap().is_accepted());
            assert_eq!(fenced_write(&store, 9, false).await, FenceCheck::Accepted);
            assert_eq!(entries(&store).await, Vec::<i64>::new());
            assert_eq!(store.highest_fence("ledger").await.unwrap(), Some(5));
            assert!(store.check_fence("ledger", 6).await.unwrap().is_accepted());
        },
    )
    .await;
}

#[tokio::test]
async fn a_stale_check_in_a_transaction_refuses_and_nothing_is_committed() {
    with_store(
        "a_stale_check_in_a_transaction_refuses_and_nothing_is_committed",
        |store, url| async move {
            create_ledger(&url, &store).await;
            assert!(store.check_fence("ledger", 9).await.unwrap().is_accepted());
            assert_eq!(
                fenced_write(&store, 5, true).await,
                FenceCheck::Stale(StaleFence {
                    presented: 5,
                    highest_seen: 9
                })
            );
            assert_eq!(entries(&store).await, Vec::<i64>::new());
            assert_eq!(store.highest_fence("ledger").await.unwrap(), Some(9));
            assert_eq!(fenced_write(&store, 9, true).await, FenceCheck::Accepted);
            assert_eq!(entries(&store).await, vec![9]);
        },
    )
    .await;
}

/// A newer owner's transaction has checked its fence and not committed
/// yet; the older owner's check waits for it, then sees the newer fence
/// (refused) when it commits, or the gate as it was (accepted) when it
/// rolls back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checks_of_one_resource_take_turns_with_open_transactions() {
    with_store(
        "checks_of_one_resource_take_turns_with_open_transactions",
        |store, url| async move {
            create_ledger(&url, &store).await;
            for commit in [true, false] {
                let resource = format!("ledger-{commit}");
                assert!(store.check_fence(&resource, 3).await.unwrap().is_accepted());
                let mut newer = store.pool().begin().await.expect("begin");
                assert!(store
                    .check_fence_in(&mut newer, &resource, 9)
                    .await
                    .unwrap()
                    .is_accepted());
                let older = tokio::spawn({
                    let store = store.clone();
                    let resource = resource.clone();
                    async move { store.check_fence(&resource, 5).await }
                });
                write_if_accepted(&store, &mut newer, FenceCheck::Accepted, 9).await;
                if commit {
                    newer.commit().await.expect("commit");
                } else {
                    newer.rollback().await.expect("roll back");
                }
                let older = older.await.expect("the older check ran").unwrap();
                if commit {
                    assert_eq!(
                        older,
                        FenceCheck::Stale(StaleFence {
                            presented: 5,
                            highest_seen: 9
                        })
                    );
                    assert_eq!(store.highest_fence(&resource).await.unwrap(), Some(9));
                } else {
                    assert_eq!(older, FenceCheck::Accepted);
                    assert_eq!(store.highest_fence(&resource).await.unwrap(), Some(5));
                }
            }
        },
    )
    .await;
}

#[tokio::test]
async fn a_repeatable_read_transaction_checks_alike() {
    with_store(
        "a_repeatable_read_transaction_checks_alike",
        |store, _url| async move {
            let mut transaction = store
                .pool()
                .begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ")
                .await
                .expect("begin");
            assert!(store
                .check_fence_in(&mut transaction, "ledger", 4)
                .await
                .unwrap()
                .is_accepted());
            assert!(matches!(
                store
                    .check_fence_in(&mut transaction, "ledger", 3)
                    .await
                    .unwrap(),
                FenceCheck::Stale(StaleFence {
                    presented: 3,
                    highest_seen: 4
                })
            ));
            transaction.commit().await.expect("commit");
            assert_eq!(store.highest_fence("ledger").await.unwrap(), Some(4));
        },
    )
    .await;
}

#[tokio::test]
async fn invalid_input_is_refused_before_the_connection_is_touched() {
    with_store(
        "invalid_input_is_refused_before_the_connection_is_touched",
        |store, _url| async move {
            let mut transaction = store.pool().begin().await.expect("begin");
            for (resource, fence, field) in [("", 1, "resource"), ("ledger", 0, "fence")] {
                let error = store
                    .check_fence_in(&mut transaction, resource, fence)
                    .await
                    .expect_err("bad input");
                assert_eq!(
                    (error.kind(), error.field()),
                    (ErrorKind::InvalidInput, Some(field))
                );
            }
            // Nothing ran: the transaction is still usable.
            assert!(store
                .check_fence_in(&mut transaction, "ledger", 1)
                .await
                .unwrap()
                .is_accepted());
            transaction.rollback().await.expect("roll back");
            assert_eq!(store.highest_fence("ledger").await.unwrap(), None);
        },
    )
    .await;
}

#[tokio::test]
async fn a_damaged_gate_is_corrupt_and_left_as_it_is() {
    with_store(
        "a_damaged_gate_is_corrupt_and_left_as_it_is",
        |store, url| async move {
            assert!(store.check_fence("ledger", 1).await.unwrap().is_accepted());
            execute(
                &url,
                &store,
                "UPDATE $schema.fence_gates SET fence = 9007199254740992",
            )
            .await;
            let mut transaction = store.pool().begin().await.expect("begin");
            let in_transaction = store
                .check_fence_in(&mut transaction, "ledger", 5)
                .await
                .map(drop);
            transaction.rollback().await.expect("roll back");
            for answer in [
                store.check_fence("ledger", 5).await.map(drop),
                store.highest_fence("ledger").await.map(drop),
                in_transaction,
            ] {
                let error = answer.expect_err("a fence beyond every store's");
                assert_eq!(error.kind(), ErrorKind::Corrupt, "{error}");
            }
            let stored: i64 = sqlx::query_scalar(&format!(
                "SELECT fence FROM \"{}\".fence_gates",
                store.schema()
            ))
            .fetch_one(store.pool())
            .await
            .expect("read the gate");
            assert_eq!(stored, 9_007_199_254_740_992, "nothing written over it");
        },
    )
    .await;
}

#[tokio::test]
async fn a_damaged_gate_listed_is_corrupt_and_left_as_it_is() {
    with_store(
        "a_damaged_gate_listed_is_corrupt_and_left_as_it_is",
        |store, url| async move {
            for (fence, resource) in (1..).zip(["a", "b", "c"]) {
                assert!(store
                    .check_fence(resource, fence)
                    .await
                    .unwrap()
                    .is_accepted());
            }
            execute(
                &url,
                &store,
                "UPDATE $schema.fence_gates SET fence = 9007199254740992 WHERE resource = 'a'; \
                 UPDATE $schema.fence_gates SET checked_at = 'infinity' WHERE resource = 'b'",
            )
            .await;
            let gates = || async {
                sqlx::query_scalar::<_, String>(&format!(
                    "SELECT g::text FROM \"{}\".fence_gates g ORDER BY resource",
                    store.schema()
                ))
                .fetch_all(store.pool())
                .await
                .expect("read the gates")
            };
            let damaged = gates().await;
            for (after, resource) in [(None, "\"a\""), (Some("a"), "\"b\"")] {
                let error = store
                    .list_fences(after, 10)
                    .await
                    .expect_err("a listed gate no store can hold");
                assert_eq!(error.kind(), ErrorKind::Corrupt, "{error}");
                assert!(error.message().contains(resource), "{error}");
            }
            let listed = store.list_fences(Some("b"), 10).await.unwrap();
            assert_eq!(
                listed
                    .iter()
                    .map(|gate| gate.resource.as_str())
                    .collect::<Vec<_>>(),
                ["c"],
                "a page past the damage lists"
            );
            assert_eq!(gates().await, damaged, "nothing written over them");
        },
    )
    .await;
}

//! Every statement of every operation runs through [`PgStore::fetch_all`],
//! which gives it `READ COMMITTED` semantics whatever the session's default
//! isolation level.
//!
//! The store's statements are written for `READ COMMITTED`: a conditional
//! update that finds its row changed by a concurrent commit re-checks the
//! row's new version instead of failing. In a session whose
//! `default_transaction_isolation` is `repeatable read` or `serializable`
//! (a pool option, a role or database setting), the same statement answers
//! SQLSTATE 40001 instead. Rather than pay for an explicit transaction on
//! every call, a statement runs on its own first; only one that answers a
//! serialization failure (which rolled it back whole, so nothing was
//! applied) runs again, once, inside `BEGIN ISOLATION LEVEL READ COMMITTED`,
//! where no serialization failure can occur. At `READ COMMITTED` the second
//! run never happens. Admissions, which need a transaction anyway, start
//! theirs at `READ COMMITTED` explicitly (see the crate docs).

use std::future::Future;
use std::time::Duration;

use sqlx::postgres::{PgArguments, PgRow};
use sqlx::query::Query;
use sqlx::{Connection as _, Postgres};
use tenure_lease_core::Result;

use crate::error::{sqlstate, store_error, SERIALIZATION_FAILURE};
use crate::lease::{changed_concurrently, fence_param, interval, WRITE_ATTEMPTS};
use crate::PgStore;

/// How a transaction of the store starts: a fresh snapshot per statement,
/// whatever the session's default isolation level.
pub(crate) const BEGIN_READ_COMMITTED: &str = "BEGIN ISOLATION LEVEL READ COMMITTED";

/// One statement with its parameters bound.
pub(crate) type PgQuery<'q> = Query<'q, Postgres, PgArguments>;

/// A fenced renewal of the claim `(id, owner, fence)` for `ttl` (`$1` to
/// `$4`): the `plain` statement, or `with_progress` with `progress` as `$5`.
pub(crate) fn renewal<'q>(
    (plain, with_progress): (&'q str, &'q str),
    (id, owner, fence): (&'q str, &'q str, u64),
    ttl: Duration,
    progress: Option<&'q serde_json::Value>,
) -> PgQuery<'q> {
    let query = sqlx::query(if progress.is_some() {
        with_progress
    } else {
        plain
    })
    .bind(id)
    .bind(owner)
    .bind(fence_param(fence))
    .bind(interval(ttl));
    match progress {
        Some(progress) => query.bind(sqlx::types::Json(progress)),
        None => query,
    }
}

impl PgStore {
    /// Runs the statement `statement` builds and answers its rows, with
    /// `READ COMMITTED` semantics (see the module docs). `statement` is
    /// called once, or twice if the first run was a serialization failure.
    pub(crate) async fn fetch_all<'q>(
        &self,
        statement: impl Fn() -> PgQuery<'q>,
    ) -> Result<Vec<PgRow>> {
        self.fetch_all_raw(statement).await.map_err(store_error)
    }

    /// [`fetch_all`](Self::fetch_all), answering the server's error as it
    /// is, for a caller that tells some of them apart.
    pub(crate) async fn fetch_all_raw<'q>(
        &self,
        statement: impl Fn() -> PgQuery<'q>,
    ) -> std::result::Result<Vec<PgRow>, sqlx::Error> {
        let mut session = self.sessions.take().await?;
        match statement().fetch_all(&mut *session).await {
            Err(error) if sqlstate(&error).as_deref() == Some(SERIALIZATION_FAILURE) => {
                tracing::debug!(
                    schema = self.schema(),
                    %error,
                    "statement hit a serialization failure above READ COMMITTED; \
                     running it again at READ COMMITTED"
                );
                let rows = async {
                    let mut transaction = session.begin_with(BEGIN_READ_COMMITTED).await?;
                    let rows = statement().fetch_all(&mut *transaction).await?;
                    transaction.commit().await?;
                    Ok(rows)
                }
                .await;
                // A transaction that failed is left open until its queued
                // ROLLBACK goes out: the pool's check sends it at once.
                session.keep_if(rows.is_ok());
                rows
            }
            answer => {
                session.keep_after(&answer);
                answer
            }
        }
    }

    /// [`fetch_all`](Self::fetch_all) for a statement answering at most one
    /// row.
    pub(crate) async fn fetch_optional<'q>(
        &self,
        statement: impl Fn() -> PgQuery<'q>,
    ) -> Result<Option<PgRow>> {
        Ok(self.fetch_all(statement).await?.into_iter().next())
    }

    /// A conditional write whose `WHERE` holds the contract's conditions:
    /// the row it returns is turned into the answer by `applied`. When it
    /// matches no row, `explain` reads the record back and answers why it
    /// was refused; `None` means the record read back allows the write (it
    /// changed between the two statements), and the write runs again, at
    /// most [`WRITE_ATTEMPTS`] times in all. `what` and `id` name it in the
    /// error that ends a persistent race.
    pub(crate) async fn write_or_explain<'q, T, Explained>(
        &self,
        (what, id): (&str, &str),
        write: impl Fn() -> PgQuery<'q>,
        applied: impl Fn(&PgRow) -> Result<T>,
        explain: impl Fn() -> Explained,
    ) -> Result<T>
    where
        Explained: Future<Output = Result<Option<T>>>,
    {
        for _ in 0..WRITE_ATTEMPTS {
            if let Some(row) = self.fetch_optional(&write).await? {
                return applied(&row);
            }
            if let Some(refusal) = explain().await? {
                return Ok(refusal);
            }
        }
        Err(changed_concurrently(what, id))
    }
}

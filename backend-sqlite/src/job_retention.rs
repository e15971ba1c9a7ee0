//! `purge_jobs`: deleting finished jobs past their retention.
//!
//! A job row is the only thing the file keeps for a job (its indexes are
//! SQLite's own), so deleting the row leaves nothing behind.

use std::time::Duration;

use rusqlite::Connection;
use tenure_lease_core::{Result, Timestamp};

use crate::ops::delete_finished_before;

/// Finished jobs (`rules::job_purgeable`) whose finish time, their last
/// update, is at or before `?1`. A row whose `updated_at` is not an integer
/// (edited by hand) compares greater than any integer and stays, for an
/// operator to see.
const PURGE_FINISHED: &str = "DELETE FROM jobs INDEXED BY jobs_finished_by_update \
     WHERE state IN ('completed', 'dead_lettered') AND updated_at <= ?1";

/// Deletes the jobs [`tenure_lease_core::backend::queue_rules::job_purgeable`] allows:
/// finished with `updated_at + older_than <= now`; answers how many.
pub(crate) fn purge_finished(
    connection: &Connection,
    now: Timestamp,
    older_than: Duration,
) -> Result<u64> {
    delete_finished_before(connection, PURGE_FINISHED, now, older_than)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SqliteConfig;
    use crate::ops::tests::plan;

    #[test]
    fn purge_uses_the_finished_jobs_index() {
        let directory = tempfile::TempDir::new().expect("a temporary directory");
        let connection = crate::schema::open(&SqliteConfig::new(directory.path().join("plan.db")))
            .expect("open");
        let plan = plan(&connection, PURGE_FINISHED);
        assert!(
            plan.contains("USING INDEX jobs_finished_by_update (updated_at<?)"),
            "{plan}"
        );
    }
}

//! Opening the file: connection settings and the versioned schema.
//!
//! The schema version lives in `PRAGMA user_version`. Opening creates the
//! schema in an empty file and migrates an older one forward, inside one
//! `BEGIN IMMEDIATE` transaction so that processes opening the same file at
//! once never both create it. A file written by a newer version of this
//! crate is refused ([`ErrorKind::Incompatible`]), never downgraded.

use rusqlite::{Connection, OpenFlags, TransactionBehavior};
use tenure_lease_core::{Error, ErrorKind, Result};

use crate::config::SqliteConfig;
use crate::error::map_sqlite_error;

/// The schema version this crate writes and understands.
pub const SCHEMA_VERSION: i64 = 9;

/// Statuses of records that no longer hold their scopes. Queries for active
/// records say `status NOT IN (...)` with exactly this list, so SQLite can
/// use the partial indexes below, and so rows with an unknown status (edited
/// by hand) are still seen and reported as undecodable rather than ignored.
macro_rules! finished_statuses {
    () => {
        "('interrupted', 'succeeded', 'failed')"
    };
}
pub(crate) use finished_statuses;

/// Version 1: the whole schema.
///
/// * `leases`: one row per record; timestamps are INTEGER microseconds since
///   the Unix epoch, metadata is JSON text, status is its lower-case name.
/// * `lease_scopes`: every (lease, scope) pair, kept until the record is
///   purged, for `list_by_scope` and for reading a record's scopes.
/// * `held_scopes`: one row per scope held by an active record, deleted when
///   the record stops being active. Its primary key is the "one active
///   record per scope" rule, enforced by SQLite itself.
/// * `fence_counter`: the one-row store-wide fence sequence, never reset by
///   purge.
const SCHEMA_V1: &str = concat!(
    "CREATE TABLE leases (
        id TEXT PRIMARY KEY NOT NULL,
        kind TEXT NOT NULL,
        status TEXT NOT NULL,
        owner TEXT,
        fence INTEGER NOT NULL,
        lease_expires_at INTEGER,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        error TEXT,
        stop_reason TEXT,
        metadata TEXT NOT NULL
    );
    CREATE INDEX leases_unfinished_by_expiry ON leases (lease_expires_at, id)
        WHERE status NOT IN ",
    finished_statuses!(),
    ";
    CREATE INDEX leases_terminal_by_update ON leases (updated_at)
        WHERE status IN ('succeeded', 'failed');
    CREATE TABLE lease_scopes (
        lease_id TEXT NOT NULL REFERENCES leases (id) ON DELETE CASCADE,
        scope TEXT NOT NULL,
        PRIMARY KEY (lease_id, scope)
    ) WITHOUT ROWID;
    CREATE INDEX lease_scopes_by_scope ON lease_scopes (scope, lease_id);
    CREATE TABLE held_scopes (
        scope TEXT PRIMARY KEY NOT NULL,
        lease_id TEXT NOT NULL REFERENCES leases (id) ON DELETE CASCADE
    ) WITHOUT ROWID;
    CREATE INDEX held_scopes_by_lease ON held_scopes (lease_id);
    CREATE TABLE fence_counter (
        singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
        last_fence INTEGER NOT NULL
    );
    INSERT INTO fence_counter (singleton, last_fence) VALUES (1, 0);"
);

/// Version 2: the job queue ([contract §9](tenure_lease_core::contract)).
///
/// * `jobs`: one row per job; timestamps are INTEGER microseconds since the
///   Unix epoch, `payload` is JSON text, `required_capabilities` a JSON
///   array of strings, `state` and `dead_reason` their lower-case names.
///   Jobs draw their fences from `fence_counter`, like leases.
/// * `jobs_claim_order`: the queued jobs of each queue in claim order
///   (`rules::claim_order`), so `claim` walks them best first and stops.
/// * `jobs_claimed_by_expiry`: claimed jobs by lease expiry, for `reap`.
/// * `jobs_dead_letters`: dead letters of each queue, oldest update first.
const SCHEMA_V2: &str = "CREATE TABLE jobs (
        id TEXT PRIMARY KEY NOT NULL,
        queue TEXT NOT NULL,
        payload TEXT NOT NULL,
        priority INTEGER NOT NULL,
        run_at INTEGER NOT NULL,
        attempt INTEGER NOT NULL,
        max_attempts INTEGER NOT NULL,
        required_capabilities TEXT NOT NULL,
        state TEXT NOT NULL,
        owner TEXT,
        fence INTEGER NOT NULL,
        lease_expires_at INTEGER,
        last_error TEXT,
        dead_reason TEXT,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
    );
    CREATE INDEX jobs_claim_order ON jobs (queue, priority DESC, run_at, created_at, id)
        WHERE state = 'queued';
    CREATE INDEX jobs_claimed_by_expiry ON jobs (lease_expires_at, id)
        WHERE state = 'claimed';
    CREATE INDEX jobs_dead_letters ON jobs (queue, updated_at, id)
        WHERE state = 'dead_lettered';";

/// Version 3: job retention.
///
/// * `jobs_finished_by_update`: completed and dead-lettered jobs by last
///   update (their finish time), for `purge_jobs`.
const SCHEMA_V3: &str = "CREATE INDEX jobs_finished_by_update ON jobs (updated_at)
        WHERE state IN ('completed', 'dead_lettered');";

/// Version 4: fence gates ([contract §7](tenure_lease_core::contract)).
///
/// * `fence_gates`: one row per resource, the highest fence accepted
///   (`fence`) and the store time of the last accepted check
///   (`checked_at`, INTEGER microseconds).
/// * `fence_gates_by_check`: gates by that time, for `purge_fences`.
const SCHEMA_V4: &str = "CREATE TABLE fence_gates (
        resource TEXT PRIMARY KEY NOT NULL,
        fence INTEGER NOT NULL,
        checked_at INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX fence_gates_by_check ON fence_gates (checked_at);";

/// Version 5: interrupted records are purged too, and a take-back leaves a
/// trace on its job.
///
/// * `leases_finished_by_update`: records that hold no scope (interrupted
///   or terminal) by last update, for `purge`; it replaces
///   `leases_terminal_by_update`, which left interrupted records out.
/// * `jobs.taken_back` (a count, 0 for every job stored before) and
///   `jobs.taken_back_at` (INTEGER microseconds, `NULL` until the first
///   take-back).
const SCHEMA_V5: &str = concat!(
    "DROP INDEX leases_terminal_by_update;
    CREATE INDEX leases_finished_by_update ON leases (updated_at)
        WHERE status IN ",
    finished_statuses!(),
    ";
    ALTER TABLE jobs ADD COLUMN taken_back INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN taken_back_at INTEGER;"
);

/// Version 6: the progress holders report with their renewals, as JSON
/// text, `NULL` until the first report.
const SCHEMA_V6: &str = "ALTER TABLE leases ADD COLUMN progress TEXT;
    ALTER TABLE jobs ADD COLUMN progress TEXT;";

/// Version 7: jobs' uniqueness keys: the key, the kind of policy and, for
/// a period, its end (INTEGER microseconds), all `NULL` for a job without
/// a key; the jobs of a queue with a key found by index.
const SCHEMA_V7: &str = "ALTER TABLE jobs ADD COLUMN unique_key TEXT;
    ALTER TABLE jobs ADD COLUMN unique_policy TEXT;
    ALTER TABLE jobs ADD COLUMN unique_until INTEGER;
    CREATE INDEX jobs_by_unique_key ON jobs (queue, unique_key)
        WHERE unique_key IS NOT NULL;";

/// Version 8: rate logs, one row per limit: its uses as a JSON array of
/// microseconds, and when the newest stops counting (INTEGER microseconds),
/// indexed for the purge.
const SCHEMA_V8: &str = "CREATE TABLE rate_logs (
        key TEXT NOT NULL,
        permits INTEGER NOT NULL,
        period_ms INTEGER NOT NULL,
        uses TEXT NOT NULL,
        ends_at INTEGER NOT NULL,
        PRIMARY KEY (key, permits, period_ms)
    ) WITHOUT ROWID;
    CREATE INDEX rate_logs_by_end ON rate_logs (ends_at);";

/// Version 9: counted scopes ([contract §17](tenure_lease_core::contract)).
///
/// * `leases.slots`: the slot a record holds in each counted scope, a JSON
///   object from scope to slot number, `NULL` for a record with exclusive
///   scopes only (every record stored before).
/// * `held_scopes.scope` holds slot keys from now on
///   ([`slot_key`](tenure_lease_core::backend::rules::slot_key)): slot 0's
///   key is the scope itself, and an exclusive scope is slot 0, so the rows
///   stored before are keys already and stay as they are.
const SCHEMA_V9: &str = "ALTER TABLE leases ADD COLUMN slots TEXT;";

/// Statements that bring a file from version `index` to `index + 1`. A
/// released entry never changes: files written with it exist.
const MIGRATIONS: [&str; SCHEMA_VERSION as usize] = [
    SCHEMA_V1, SCHEMA_V2, SCHEMA_V3, SCHEMA_V4, SCHEMA_V5, SCHEMA_V6, SCHEMA_V7, SCHEMA_V8,
    SCHEMA_V9,
];

/// Opens (creating if needed) the file, and the directories above it, applies
/// the connection settings and brings the schema to [`SCHEMA_VERSION`].
pub(crate) fn open(config: &SqliteConfig) -> Result<Connection> {
    create_directory(&config.path)?;
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let mut connection = Connection::open_with_flags(&config.path, flags).map_err(|error| {
        Error::new(
            ErrorKind::Config,
            format!("cannot open SQLite file {}", config.path.display()),
        )
        .with_source(error)
    })?;
    connection
        .busy_timeout(config.busy_timeout)
        .map_err(map_sqlite_error)?;
    let journal_mode: String = connection
        .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
        .map_err(map_sqlite_error)?;
    if !journal_mode.eq_ignore_ascii_case("wal") {
        return Err(Error::new(
            ErrorKind::Config,
            format!(
                "SQLite file {} cannot use write-ahead logging (journal mode stays {journal_mode:?}); \
                 use a file on a local file system",
                config.path.display()
            ),
        ));
    }
    connection
        .pragma_update(None, "synchronous", config.durability.synchronous_pragma())
        .map_err(map_sqlite_error)?;
    connection
        .pragma_update(None, "foreign_keys", "ON")
        .map_err(map_sqlite_error)?;
    connection.set_prepared_statement_cache_capacity(32);
    migrate(&mut connection, config)?;
    Ok(connection)
}

/// Creates the directories above `path` that are missing.
fn create_directory(path: &std::path::Path) -> Result<()> {
    let Some(directory) = path
        .parent()
        .filter(|parent| !parent.as_os_str().is_empty())
    else {
        return Ok(());
    };
    std::fs::create_dir_all(directory).map_err(|error| {
        Error::new(
            ErrorKind::Config,
            format!(
                "cannot create the directory {} for SQLite file {}: {error}; \
                 create it, or choose a path in a directory the process may write",
                directory.display(),
                path.display()
            ),
        )
        .with_source(error)
    })
}

fn migrate(connection: &mut Connection, config: &SqliteConfig) -> Result<()> {
    let transaction = connection
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(map_sqlite_error)?;
    let on_disk: i64 = transaction
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .map_err(map_sqlite_error)?;
    if on_disk > SCHEMA_VERSION {
        return Err(Error::new(
            ErrorKind::Incompatible,
            format!(
                "SQLite file {} has schema version {on_disk}, newer than the {SCHEMA_VERSION} \
                 this version of tenure knows; upgrade tenure, or use another file",
                config.path.display()
            ),
        ));
    }
    let start = usize::try_from(on_disk).map_err(|_| {
        Error::new(
            ErrorKind::Incompatible,
            format!(
                "SQLite file {} has a negative schema version {on_disk}; it is not a tenure store",
                config.path.display()
            ),
        )
    })?;
    for (index, statements) in MIGRATIONS.iter().enumerate().skip(start) {
        transaction.execute_batch(statements).map_err(|error| {
            let mapped = map_sqlite_error(error);
            if mapped.is_retryable() {
                return mapped;
            }
            Error::new(
                ErrorKind::Incompatible,
                format!(
                    "cannot bring SQLite file {} to schema version {} (does it belong to \
                     another application?)",
                    config.path.display(),
                    index + 1
                ),
            )
            .with_source(mapped)
        })?;
    }
    if start < MIGRATIONS.len() {
        transaction
            .pragma_update(None, "user_version", SCHEMA_VERSION)
            .map_err(map_sqlite_error)?;
    }
    transaction.commit().map_err(map_sqlite_error)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tenure_lease_core::queue::{ClaimRequest, JobQueue, NewJob};
    use tenure_lease_core::{AdmitRequest, FenceStore, LeaseStore, Status};

    use super::*;
    use crate::SqliteStore;

    /// A file as version 1 of this crate left it: one running lease holding
    /// a scope, seven fences handed out.
    fn write_version_1_file(path: &std::path::Path) {
        let connection = Connection::open(path).expect("create the file");
        connection
            .execute_batch(MIGRATIONS[0])
            .expect("the version 1 schema");
        connection
            .execute_batch(
                "INSERT INTO leases (id, kind, status, owner, fence, lease_expires_at, \
                 created_at, updated_at, error, stop_reason, metadata) \
                 VALUES ('old', 'run', 'running', 'worker-a', 7, NULL, \
                 1700000000000000, 1700000000000000, NULL, NULL, '{\"k\":1}');
                 INSERT INTO lease_scopes (lease_id, scope) VALUES ('old', 's');
                 INSERT INTO held_scopes (scope, lease_id) VALUES ('s', 'old');
                 UPDATE fence_counter SET last_fence = 7;
                 PRAGMA user_version = 1;",
            )
            .expect("a version 1 record");
    }

    /// A file as version 3 of this crate left it: a record interrupted long
    /// ago and never finalised, and a job the reaper dead-lettered under
    /// `worker-a`'s claim of fence 5.
    fn write_version_3_file(path: &std::path::Path) {
        let connection = Connection::open(path).expect("create the file");
        for statements in &MIGRATIONS[..3] {
            connection
                .execute_batch(statements)
                .expect("the version 3 schema");
        }
        connection
            .execute_batch(
                "INSERT INTO leases (id, kind, status, owner, fence, lease_expires_at, \
                 created_at, updated_at, error, stop_reason, metadata) \
                 VALUES ('stopped', 'run', 'interrupted', 'worker-b', 4, NULL, \
                 1700000000000000, 1700000000000000, NULL, 'interrupted_by_admission', '{}');
                 INSERT INTO jobs (id, queue, payload, priority, run_at, attempt, max_attempts, \
                 required_capabilities, state, owner, fence, lease_expires_at, last_error, \
                 dead_reason, created_at, updated_at) \
                 VALUES ('reaped', 'q', '{}', 0, 1700000000000000, 1, 1, '[]', \
                 'dead_lettered', 'worker-a', 5, NULL, NULL, 'lease_expired', \
                 1700000000000000, 1700000000000000);
                 UPDATE fence_counter SET last_fence = 5;
                 PRAGMA user_version = 3;",
            )
            .expect("version 3 rows");
    }

    #[tokio::test]
    async fn a_version_3_file_gains_interrupted_retention_and_take_back_traces() {
        let directory = tempfile::TempDir::new().expect("a temporary directory");
        let path = directory.path().join("v3.db");
        write_version_3_file(&path);

        let store = SqliteStore::connect(SqliteConfig::new(&path))
            .await
            .expect("a version 3 file opens");
        let reaped = store
            .get_job("reaped")
            .await
            .expect("get_job")
            .expect("the old job");
        assert_eq!(
            (reaped.taken_back, reaped.taken_back_at),
            (0, None),
            "a job stored before the trace existed was never taken back"
        );
        let claim = tenure_lease_core::queue::JobClaim {
            id: "reaped".into(),
            owner: "worker-a".into(),
            fence: 5,
            attempt: 1,
        };
        let taken = match store
            .take_back(&claim, Duration::from_secs(30))
            .await
            .expect("take_back")
        {
            tenure_lease_core::queue::TakeBack::Taken(taken) => taken,
            other => panic!("the live copy takes its job back: {other:?}"),
        };
        assert_eq!(taken.claim.fence, 6, "the file's fence sequence goes on");
        assert_eq!(
            (taken.job.taken_back, taken.job.taken_back_at),
            (1, Some(taken.job.updated_at))
        );
        assert_eq!(
            store.get_job("reaped").await.expect("get_job"),
            Some(taken.job)
        );
        assert_eq!(
            store
                .purge(Duration::from_secs(24 * 3600))
                .await
                .expect("purge"),
            1,
            "the record interrupted long ago is purged"
        );
        assert_eq!(store.get("stopped").await.expect("get"), None);
    }

    /// A version 8 file, before counted scopes: `old` running and holding
    /// scope `s`, by its name.
    fn write_version_8_file(path: &std::path::Path) {
        let connection = Connection::open(path).expect("create the file");
        for statements in &MIGRATIONS[..8] {
            connection
                .execute_batch(statements)
                .expect("the version 8 schema");
        }
        connection
            .execute_batch(
                "INSERT INTO leases (id, kind, status, owner, fence, lease_expires_at, \
                 created_at, updated_at, error, stop_reason, metadata, progress) \
                 VALUES ('old', 'run', 'running', 'worker-a', 3, NULL, \
                 1700000000000000, 1700000000000000, NULL, NULL, '{}', NULL);
                 INSERT INTO lease_scopes (lease_id, scope) VALUES ('old', 's');
                 INSERT INTO held_scopes (scope, lease_id) VALUES ('s', 'old');
                 UPDATE fence_counter SET last_fence = 3;
                 PRAGMA user_version = 8;",
            )
            .expect("a version 8 record");
    }

    /// The keys `held_scopes` holds, and by whom, in key order.
    fn held(path: &std::path::Path) -> Vec<(String, String)> {
        let connection = Connection::open(path).expect("a second connection");
        let mut statement = connection
            .prepare("SELECT scope, lease_id FROM held_scopes ORDER BY scope")
            .expect("select");
        statement
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
            .expect("query")
            .collect::<rusqlite::Result<_>>()
            .expect("rows")
    }

    #[tokio::test]
    async fn a_version_8_files_holders_are_slot_0_of_counted_scopes() {
        let directory = tempfile::TempDir::new().expect("a temporary directory");
        let path = directory.path().join("v8.db");
        write_version_8_file(&path);
        let store = SqliteStore::connect(SqliteConfig::new(&path))
            .await
            .expect("a version 8 file opens");

        let old = store.get("old").await.expect("get").expect("the old lease");
        assert!(old.slots.is_empty(), "{old:?}");
        assert_eq!(old.slot("s"), Some(0));
        let counted = |id: &str| {
            AdmitRequest::new(id, "worker-b")
                .counted_scope("s", 2)
                .ttl(Duration::from_secs(30))
        };
        let second = store.admit(&counted("second")).await.expect("admit");
        let second = second.admitted().expect("slot 1 is free").clone();
        assert_eq!(second.slots, [("s".to_owned(), 1)].into());
        assert_eq!(
            store.get("second").await.expect("get"),
            Some(second.clone())
        );
        let third = store.admit(&counted("third")).await.expect("admit");
        assert!(
            matches!(&third, tenure_lease_core::Admission::Conflict { holder, .. } if holder.id == "second"),
            "the holder freeing first is named (old has no lease): {third:?}"
        );
        assert_eq!(
            held(&path),
            [
                ("s".into(), "old".into()),
                ("s\u{1f}1".into(), "second".into())
            ]
        );

        let claim = old.claim().expect("owned");
        store
            .transition(&claim, &tenure_lease_core::StatusChange::succeeded())
            .await
            .expect("the old lease finishes");
        assert_eq!(held(&path), [("s\u{1f}1".into(), "second".into())]);
        let third = store.admit(&counted("third")).await.expect("admit");
        assert_eq!(
            third.admitted().and_then(|record| record.slot("s")),
            Some(0),
            "the slot the old lease freed: {third:?}"
        );
        let listed: Vec<String> = store
            .list_by_scope("s")
            .await
            .expect("list_by_scope")
            .into_iter()
            .map(|record| record.id)
            .collect();
        assert_eq!(
            listed.len(),
            3,
            "every record naming s, any slot: {listed:?}"
        );
    }

    #[tokio::test]
    async fn a_version_1_file_migrates_forward_keeping_leases_and_fences() {
        let directory = tempfile::TempDir::new().expect("a temporary directory");
        let path = directory.path().join("v1.db");
        write_version_1_file(&path);

        let store = SqliteStore::connect(SqliteConfig::new(&path))
            .await
            .expect("a version 1 file opens");
        let on_disk: i64 = Connection::open(&path)
            .expect("a second connection")
            .pragma_query_value(None, "user_version", |row| row.get(0))
            .expect("read user_version");
        assert_eq!(on_disk, SCHEMA_VERSION);

        let old = store.get("old").await.expect("get").expect("the old lease");
        assert_eq!(
            (old.status, old.fence, old.owner.as_deref()),
            (Status::Running, 7, Some("worker-a"))
        );
        let blocked = store
            .admit(&AdmitRequest::new("new", "worker-b").scope("s"))
            .await
            .expect("admit answers");
        assert!(blocked.admitted().is_none(), "the scope is still held");

        store
            .enqueue(&NewJob::new("q", serde_json::json!({})).id("job"))
            .await
            .expect("the migrated file has a jobs table");
        let claimed = store
            .claim(&ClaimRequest::new("q", "worker-b", Duration::from_secs(30)))
            .await
            .expect("claim");
        assert_eq!(
            claimed.iter().map(|c| c.claim.fence).collect::<Vec<_>>(),
            vec![8],
            "job claims continue the file's fence sequence"
        );

        assert!(store
            .check_fence("resource", 8)
            .await
            .expect("the migrated file has fence gates")
            .is_accepted());

        drop(store);
        let reopened = SqliteStore::connect(SqliteConfig::new(&path))
            .await
            .expect("a migrated file reopens without migrating again");
        assert_eq!(
            reopened
                .get_job("job")
                .await
                .expect("get_job")
                .map(|job| job.fence),
            Some(8)
        );
    }

    #[tokio::test]
    async fn opening_creates_the_missing_directories_or_says_which_it_cannot() {
        let directory = tempfile::TempDir::new().expect("a temporary directory");
        let path = directory.path().join("var/lib/app/leases.db");
        let store = SqliteStore::connect(SqliteConfig::new(&path))
            .await
            .expect("the directories are created");
        store
            .admit(&AdmitRequest::new("run", "worker").ttl(Duration::from_secs(30)))
            .await
            .expect("the new file takes writes");
        assert!(path.is_file());

        let blocker = directory.path().join("a-file");
        std::fs::write(&blocker, b"not a directory").expect("write a plain file");
        let beneath = blocker.join("leases.db");
        let error = SqliteStore::connect(SqliteConfig::new(&beneath))
            .await
            .expect_err("a directory cannot be made under a file");
        assert_eq!(error.kind(), tenure_lease_core::ErrorKind::Config);
        assert!(
            error.message().contains(&blocker.display().to_string()),
            "{error}"
        );
        assert!(!beneath.exists());
    }
}

//! The tables, and their versions.
//!
//! Every table lives in the database the URL names, prefixed `tenure_`.
//! `tenure_migrations` lists the migrations applied, one row each.
//! Applying takes the server's named lock `tenure_migrate:<SHA-1 of the
//! database name>`, so
//! workers starting at once apply each migration once; MySQL commits each
//! `CREATE` and `ALTER` on its own, so every statement is written to be
//! run again (`IF NOT EXISTS`, `INSERT IGNORE`) should an earlier apply
//! have stopped half way. MySQL has no `ADD COLUMN IF NOT EXISTS`, so a
//! migration adds columns and indexes to a table in one `ALTER`, applied
//! whole or not at all: run again, it fails with a duplicate column or
//! index name, which says it was applied.
//!
//! Ids, scopes, queues and resources are `VARBINARY`: compared byte for
//! byte, as the contract compares them (a text collation would make `a`,
//! `A` and `a ` one name). Timestamps are `BIGINT` microseconds since the
//! Unix epoch, as the server's `UTC_TIMESTAMP(6)` reads them, whatever the
//! session's time zone.

use sqlx::{MySql, MySqlConnection, Row};
use tenure_lease_core::{Error, ErrorKind, Result};

use crate::error::{server_number, store_error};

/// One migration: its version, what it does, its statements.
struct Migration {
    version: i64,
    description: &'static str,
    statements: &'static [&'static str],
}

/// Every migration of this version, in order.
const MIGRATIONS: &[Migration] = &[TABLES_AND_JOBS, UNIQUE_JOBS, RATE_LIMITS, COUNTED_SCOPES];

/// Migration 1: the tables of the first version.
const TABLES_AND_JOBS: Migration = Migration {
    version: 1,
    description: "leases, scopes, the fence counter, jobs and fence gates",
    statements: &[
        // One row per record; `body` is the record as JSON, the other
        // columns are derived from it for the indexes.
        "CREATE TABLE IF NOT EXISTS tenure_leases (
            id VARBINARY(256) NOT NULL PRIMARY KEY,
            active BOOLEAN NOT NULL,
            expires_at BIGINT NULL,
            created_at BIGINT NOT NULL,
            updated_at BIGINT NOT NULL,
            body MEDIUMBLOB NOT NULL,
            KEY tenure_leases_active_by_expiry (active, expires_at, id),
            KEY tenure_leases_by_update (active, updated_at)
        ) ENGINE = InnoDB",
        // Every (record, scope) pair, kept until the record is purged.
        "CREATE TABLE IF NOT EXISTS tenure_lease_scopes (
            scope VARBINARY(256) NOT NULL,
            lease_id VARBINARY(256) NOT NULL,
            PRIMARY KEY (scope, lease_id),
            KEY tenure_lease_scopes_by_lease (lease_id)
        ) ENGINE = InnoDB",
        // One row per scope an active record holds: its primary key is
        // "one active record per scope" (per slot key since migration 4).
        "CREATE TABLE IF NOT EXISTS tenure_held_scopes (
            scope VARBINARY(256) NOT NULL PRIMARY KEY,
            lease_id VARBINARY(256) NOT NULL,
            KEY tenure_held_scopes_by_lease (lease_id)
        ) ENGINE = InnoDB",
        // The store-wide fence sequence, never reset by purge.
        "CREATE TABLE IF NOT EXISTS tenure_fences (
            singleton TINYINT NOT NULL PRIMARY KEY,
            last_fence BIGINT UNSIGNED NOT NULL
        ) ENGINE = InnoDB",
        "INSERT IGNORE INTO tenure_fences (singleton, last_fence) VALUES (1, 0)",
        // One row per job; `body` is the job as JSON. `priority_rank` is
        // the priority negated, so `tenure_jobs_claim_order` walks the
        // queued jobs of a queue best first on any server version.
        "CREATE TABLE IF NOT EXISTS tenure_jobs (
            id VARBINARY(256) NOT NULL PRIMARY KEY,
            queue VARBINARY(256) NOT NULL,
            state VARCHAR(16) CHARACTER SET ascii NOT NULL,
            priority_rank BIGINT NOT NULL,
            run_at BIGINT NOT NULL,
            created_at BIGINT NOT NULL,
            updated_at BIGINT NOT NULL,
            expires_at BIGINT NULL,
            capabilities JSON NOT NULL,
            body MEDIUMBLOB NOT NULL,
            KEY tenure_jobs_claim_order (queue, state, priority_rank, run_at, created_at, id),
            KEY tenure_jobs_by_expiry (state, expires_at, id),
            KEY tenure_jobs_by_update (queue, state, updated_at, id),
            KEY tenure_jobs_by_creation (queue, created_at, id),
            KEY tenure_jobs_finished (state, updated_at)
        ) ENGINE = InnoDB",
        // One row per resource: the highest fence accepted, and when.
        "CREATE TABLE IF NOT EXISTS tenure_fence_gates (
            resource VARBINARY(256) NOT NULL PRIMARY KEY,
            fence BIGINT NOT NULL,
            checked_at BIGINT NOT NULL,
            KEY tenure_fence_gates_by_check (checked_at)
        ) ENGINE = InnoDB",
    ],
};

/// Migration 2: unique jobs.
const UNIQUE_JOBS: Migration = Migration {
    version: 2,
    description: "unique jobs: the uniqueness key of a job, and a slot per key",
    statements: &[
        // The job's uniqueness key, the kind of its policy and, for a
        // period, its end, derived from the body (NULL for a job without a
        // key, every job stored before).
        "ALTER TABLE tenure_jobs
            ADD COLUMN unique_key VARBINARY(256) NULL,
            ADD COLUMN unique_policy VARCHAR(16) CHARACTER SET ascii NULL,
            ADD COLUMN unique_until BIGINT NULL,
            ADD KEY tenure_jobs_by_unique_key (queue, unique_key)",
        // One row per key of a queue an enqueue has judged, used only as
        // its lock: an absent job row locks nothing, so enqueues of one key
        // lock this row first, and are judged one after the other.
        // `purge_jobs` deletes the rows no job names any more.
        "CREATE TABLE IF NOT EXISTS tenure_unique_slots (
            queue VARBINARY(256) NOT NULL,
            unique_key VARBINARY(256) NOT NULL,
            PRIMARY KEY (queue, unique_key)
        ) ENGINE = InnoDB",
    ],
};

/// Migration 3: rate limits.
const RATE_LIMITS: Migration = Migration {
    version: 3,
    description: "rate limits: a log of the last uses per limit",
    statements: &[
        // One row per log (a limit's key, permits and period): `uses` the
        // instants of its last uses, a JSON array of microseconds
        // (`rate_rules::encode_uses`), and `ends_at` when the last of them
        // stops counting, for `purge`. Admissions and claims with the limit
        // upsert the row and lock it first, so they are judged one after
        // the other.
        "CREATE TABLE IF NOT EXISTS tenure_rate_logs (
            rate_key VARBINARY(256) NOT NULL,
            permits INT UNSIGNED NOT NULL,
            period_ms BIGINT NOT NULL,
            uses BLOB NOT NULL,
            ends_at BIGINT NOT NULL,
            PRIMARY KEY (rate_key, permits, period_ms),
            KEY tenure_rate_logs_by_end (ends_at)
        ) ENGINE = InnoDB",
    ],
};

/// Migration 4: counted scopes.
const COUNTED_SCOPES: Migration = Migration {
    version: 4,
    description: "counted scopes: slot keys in tenure_held_scopes",
    statements: &[
        // An active record holds slot k > 0 of a counted scope under the
        // key `scope U+001F k` (`rules::slot_key`): up to 256 + 5 bytes.
        // Its slots are in its body (`LeaseRecord::slots`); the body of a
        // record stored before reads back with none. Widening a column is
        // its own repeat, so the statement may run again.
        "ALTER TABLE tenure_held_scopes MODIFY scope VARBINARY(261) NOT NULL",
    ],
};

/// Every table this version keeps, for [`drop_tables`] and the deployment
/// checks.
pub(crate) const TABLES: &[&str] = &[
    "tenure_leases",
    "tenure_lease_scopes",
    "tenure_held_scopes",
    "tenure_fences",
    "tenure_jobs",
    "tenure_fence_gates",
    "tenure_unique_slots",
    "tenure_rate_logs",
    "tenure_migrations",
];

const MIGRATIONS_TABLE: &str = "CREATE TABLE IF NOT EXISTS tenure_migrations (
    version BIGINT NOT NULL PRIMARY KEY,
    description VARCHAR(200) NOT NULL,
    applied_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE = InnoDB";

/// How long a worker waits for another one's migration to finish.
const MIGRATION_LOCK_SECONDS: i64 = 60;

/// Creates the tables if missing and applies the migrations they lack.
///
/// # Errors
///
/// `Incompatible` when the tables carry a migration this version does not
/// know (a newer version wrote them); `Timeout` when another worker's
/// migration holds the lock for a minute; the server's errors.
pub(crate) async fn apply(connection: &mut MySqlConnection) -> Result<()> {
    // MySQL takes lock names of at most 64 characters.
    let lock = "CONCAT('tenure_migrate:', SHA1(DATABASE()))";
    let locked: Option<i64> = sqlx::query_scalar(&format!("SELECT GET_LOCK({lock}, ?)"))
        .bind(MIGRATION_LOCK_SECONDS)
        .fetch_one(&mut *connection)
        .await
        .map_err(store_error)?;
    if locked != Some(1) {
        return Err(Error::new(
            ErrorKind::Timeout,
            "another worker held the MySQL migration lock for a minute; retry once it is done",
        ));
    }
    let applied = apply_locked(connection).await;
    let released = sqlx::query(&format!("DO RELEASE_LOCK({lock})"))
        .execute(&mut *connection)
        .await
        .map_err(store_error);
    applied.and(released.map(drop))
}

async fn apply_locked(connection: &mut MySqlConnection) -> Result<()> {
    sqlx::query(MIGRATIONS_TABLE)
        .execute(&mut *connection)
        .await
        .map_err(store_error)?;
    let applied = applied_versions(connection).await?;
    refuse_unknown(&applied)?;
    for migration in MIGRATIONS {
        if applied.contains(&migration.version) {
            continue;
        }
        for statement in migration.statements {
            match sqlx::query(statement).execute(&mut *connection).await {
                Err(error) if applied_before(&error) => {}
                answer => answer.map(drop).map_err(store_error)?,
            }
        }
        sqlx::query("INSERT INTO tenure_migrations (version, description) VALUES (?, ?)")
            .bind(migration.version)
            .bind(migration.description)
            .execute(&mut *connection)
            .await
            .map_err(store_error)?;
    }
    Ok(())
}

/// `ER_DUP_FIELDNAME`: the column an `ALTER` adds is there.
const DUPLICATE_COLUMN: u16 = 1060;
/// `ER_DUP_KEYNAME`: the index an `ALTER` adds is there.
const DUPLICATE_INDEX: u16 = 1061;

/// Whether a statement failed because an earlier apply, stopped before
/// recording its migration, ran it (only an `ALTER` adding columns or
/// indexes fails so).
fn applied_before(error: &sqlx::Error) -> bool {
    matches!(
        server_number(error),
        Some(DUPLICATE_COLUMN | DUPLICATE_INDEX)
    )
}

/// Checks, changing nothing, that the tables carry every migration of this
/// version and none it does not know.
///
/// # Errors
///
/// `Incompatible` naming the first migration missing or unknown; the
/// server's errors (a missing `tenure_migrations` table is `Incompatible`
/// too).
pub(crate) async fn verify(connection: &mut MySqlConnection) -> Result<()> {
    let applied = applied_versions(connection).await.map_err(|error| {
        if error.kind() == ErrorKind::Incompatible {
            Error::new(
                ErrorKind::Incompatible,
                "the database has no tenure tables: apply the migrations first \
                 (MySqlStore::apply_migrations, as an account that may create tables)",
            )
            .with_source(error)
        } else {
            error
        }
    })?;
    refuse_unknown(&applied)?;
    if let Some(missing) = MIGRATIONS
        .iter()
        .find(|migration| !applied.contains(&migration.version))
    {
        return Err(Error::new(
            ErrorKind::Incompatible,
            format!(
                "the tenure tables lack migration {} ({}): apply the migrations first \
                 (MySqlStore::apply_migrations, as an account that may alter tables)",
                missing.version, missing.description
            ),
        ));
    }
    Ok(())
}

async fn applied_versions(connection: &mut MySqlConnection) -> Result<Vec<i64>> {
    sqlx::query::<MySql>("SELECT version FROM tenure_migrations ORDER BY version")
        .fetch_all(&mut *connection)
        .await
        .map_err(store_error)?
        .iter()
        .map(|row| row.try_get::<i64, _>(0).map_err(store_error))
        .collect()
}

fn refuse_unknown(applied: &[i64]) -> Result<()> {
    let newest = MIGRATIONS.last().map_or(0, |migration| migration.version);
    match applied.iter().find(|version| **version > newest) {
        Some(unknown) => Err(Error::new(
            ErrorKind::Incompatible,
            format!(
                "the tenure tables carry migration {unknown}, which this version (up to \
                 {newest}) does not know: a newer version of tenure wrote them; upgrade \
                 this one"
            ),
        )),
        None => Ok(()),
    }
}

/// Drops every table of the store, and what they keep.
///
/// # Errors
///
/// The server's errors.
pub(crate) async fn drop_tables(connection: &mut MySqlConnection) -> Result<()> {
    sqlx::query(&format!("DROP TABLE IF EXISTS {}", TABLES.join(", ")))
        .execute(&mut *connection)
        .await
        .map_err(store_error)
        .map(drop)
}

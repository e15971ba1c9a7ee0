//! What the server may forget or lose in a failover, read on demand for
//! deployment checks (`tenure check`): the settings that decide whether an
//! acknowledged write survives a crash, whether dead rows are cleaned up,
//! and how the server replicates.

use sqlx::Row;
use tenure_lease_core::{Error, ErrorKind, Result};

use crate::error::store_error;
use crate::PgStore;

/// One row of the settings [`ServerSettings`] holds.
const SETTINGS: &str = "SELECT current_setting('fsync') = 'on' AS fsync, \
     current_setting('synchronous_commit') AS synchronous_commit, \
     current_setting('autovacuum') = 'on' AS autovacuum, \
     current_setting('synchronous_standby_names') AS synchronous_standby_names, \
     (SELECT count(*) FROM pg_stat_replication) AS standbys, \
     (SELECT CASE WHEN bool_or(state IS NULL) THEN NULL \
          ELSE count(*) FILTER (WHERE state = 'streaming' AND sync_state IN ('sync', 'quorum')) \
          END \
      FROM pg_stat_replication) AS synchronous_standbys";

/// The server's settings that decide what a crash or a failover loses, as
/// [`PgStore::server_settings`] read them.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerSettings {
    /// `fsync`: off, a crash may corrupt the whole cluster.
    pub fsync: bool,
    /// `synchronous_commit`: `off` acknowledges commits a crash may lose
    /// (fences among them: a crash could hand them out again).
    pub synchronous_commit: String,
    /// `autovacuum`: off, finished records and jobs leave dead rows that
    /// nothing reclaims, and admissions and claims slow down.
    pub autovacuum: bool,
    /// `synchronous_standby_names`: empty, replication is asynchronous and
    /// a failover may lose the last acknowledged writes.
    pub synchronous_standby_names: String,
    /// Standbys connected to the server now (rows of
    /// `pg_stat_replication`), synchronous or not, streaming or catching up.
    pub standbys: i64,
    /// Standbys streaming now that a commit waits for (`sync_state` `sync`
    /// or `quorum`): with none, a commit on a server that names standbys
    /// waits until one connects. `None` when the store's role may not see
    /// replication states (grant it `pg_read_all_stats` or `pg_monitor`).
    pub synchronous_standbys: Option<i64>,
}

impl ServerSettings {
    /// Whether a commit is acknowledged only once a synchronous standby
    /// has it too (`synchronous_standby_names` set, `synchronous_commit`
    /// `on`, `remote_write` or `remote_apply`).
    pub fn replicates_synchronously(&self) -> bool {
        !self.synchronous_standby_names.trim().is_empty()
            && matches!(
                self.synchronous_commit.as_str(),
                "on" | "remote_write" | "remote_apply"
            )
    }
}

impl PgStore {
    /// Refuses a server on which no commit waits for a standby
    /// ([`PgStoreConfig::require_synchronous_standby`](crate::PgStoreConfig::require_synchronous_standby)).
    pub(crate) async fn refuse_asynchronous_replication(&self) -> Result<()> {
        let settings = self.server_settings().await?;
        if settings.replicates_synchronously() {
            return Ok(());
        }
        Err(Error::new(
            ErrorKind::Incompatible,
            format!(
                "the store requires a synchronous standby, but the server's \
                 synchronous_standby_names is empty (synchronous_commit {:?}): every commit is \
                 acknowledged before any standby has it, and a failover may lose it; set \
                 synchronous_standby_names on the primary (e.g. 'FIRST 1 (standby1)'), or stop \
                 requiring a synchronous standby",
                settings.synchronous_commit
            ),
        ))
    }

    /// Reads the server's durability and replication settings.
    ///
    /// # Errors
    ///
    /// The store's errors.
    pub async fn server_settings(&self) -> Result<ServerSettings> {
        let row = tenure_lease_core::layer::bounded(
            self.operation_timeout,
            "reading the server's settings on PostgreSQL",
            self.fetch_optional(|| sqlx::query(SETTINGS)),
        )
        .await?
        .ok_or_else(|| Error::corrupt("the server's settings answered no row"))?;
        let field = |name: &str| row.try_get(name).map_err(store_error);
        Ok(ServerSettings {
            fsync: field("fsync")?,
            synchronous_commit: row.try_get("synchronous_commit").map_err(store_error)?,
            autovacuum: field("autovacuum")?,
            synchronous_standby_names: row
                .try_get("synchronous_standby_names")
                .map_err(store_error)?,
            standbys: row.try_get("standbys").map_err(store_error)?,
            synchronous_standbys: row.try_get("synchronous_standbys").map_err(store_error)?,
        })
    }
}

//! The store's SQL, schema-qualified once per store.
//!
//! Every name is qualified with the (validated, quoted) schema, so a store
//! works on any pool whatever its `search_path`. Everything else a statement
//! needs is a bound parameter.

use crate::config::SchemaName;

/// The columns of a record, in the order [`crate::decode`] reads them by name.
const RECORD_COLUMNS: [&str; 12] = [
    "id",
    "scopes",
    "kind",
    "status",
    "owner",
    "fence",
    "lease_expires_at",
    "created_at",
    "updated_at",
    "error",
    "stop_reason",
    "metadata",
];

/// The statuses that hold scopes, as an SQL list.
const ACTIVE: &str = "('pending', 'running')";
/// The statuses a record can be decoded with that are not active. A row
/// whose status is none of the five is neither active nor inactive: scans
/// include it so it is reported instead of silently never reaped.
const DECODABLE_INACTIVE: &str = "('interrupted', 'succeeded', 'failed')";

fn columns(alias: &str) -> String {
    RECORD_COLUMNS
        .iter()
        .map(|column| format!("{alias}.{column}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Every statement of one store.
#[derive(Debug)]
pub(crate) struct Statements {
    /// `$1` id → `(now, taken)`: the transaction's clock and whether the id exists.
    pub(crate) admit_probe: String,
    /// `$1` scopes → `scope, <record>` of their active holders, locked in
    /// scope order.
    pub(crate) lock_holders: String,
    /// The same, without locks: for the answer after lost races.
    pub(crate) read_holders: String,
    /// `$1` count → that many new fences.
    pub(crate) draw_fences: String,
    /// `$1` ids, `$2` fences, `$3` requester, `$4` stop reason → the
    /// interrupted records; their held scopes released.
    pub(crate) interrupt: String,
    /// `$1` id, `$2` scopes, `$3` kind, `$4` owner, `$5` fence, `$6` ttl,
    /// `$7` metadata → the new record, its scopes named and held.
    pub(crate) insert: String,
    /// `$1` id, `$2` owner, `$3` fence, `$4` ttl → the new expiry, if renewed.
    pub(crate) renew: String,
    /// `$1` ids, `$2` owners, `$3` fences, `$4` ttl → per claim position:
    /// `renewed_until`, or the record as it was (all null when missing).
    pub(crate) renew_many: String,
    /// `$1` id, `$2` owner, `$3` fence, `$4` target, `$5` error,
    /// `$6` stop reason, `$7` allowed current statuses → the record, if applied.
    pub(crate) transition: String,
    /// `$1` id, `$2` claimer, `$3` target status, `$4` error, `$5` stop
    /// reason, `$6` adopt?, `$7` adopter's ttl, `$8` grace → the record, if taken.
    pub(crate) take_over: String,
    /// `$1` id → `store_now, <record>`.
    pub(crate) get_with_now: String,
    /// `$1` grace, `$2` created before, `$3` limit, `$4` offset.
    pub(crate) list_expired: String,
    /// `$1` id.
    pub(crate) get: String,
    /// `$1` scope.
    pub(crate) list_by_scope: String,
    pub(crate) list_active: String,
    /// `$1` retention → deleted rows.
    pub(crate) purge: String,
}

impl Statements {
    pub(crate) fn new(schema: &SchemaName) -> Self {
        let s = schema.quoted();
        // The sequence's name as a regclass literal; the schema check leaves
        // no quote to escape.
        let fence_seq = format!("'{s}.fence_seq'");
        let record = columns("l");
        let held_release = format!(
            "released AS (DELETE FROM {s}.held_scopes h USING changed c \
             WHERE h.lease_id = c.id AND NOT c.is_active)"
        );
        Statements {
            admit_probe: format!(
                "SELECT now() AS store_now, \
                 EXISTS (SELECT 1 FROM {s}.leases WHERE id = $1) AS taken"
            ),
            lock_holders: format!(
                "SELECT h.scope, {record} FROM {s}.held_scopes h \
                 JOIN {s}.leases l ON l.id = h.lease_id \
                 WHERE h.scope = ANY($1::text[]) \
                 ORDER BY h.scope FOR UPDATE OF h, l"
            ),
            read_holders: format!(
                "SELECT h.scope, {record} FROM {s}.held_scopes h \
                 JOIN {s}.leases l ON l.id = h.lease_id \
                 WHERE h.scope = ANY($1::text[]) ORDER BY h.scope"
            ),
            draw_fences: format!(
                "SELECT nextval({fence_seq}) AS fence FROM generate_series(1, $1::bigint)"
            ),
            interrupt: format!(
                "WITH targets AS (SELECT * FROM unnest($1::text[], $2::bigint[]) AS t(id, fence)), \
                 changed AS (UPDATE {s}.leases l SET status = 'interrupted', owner = $3, \
                   fence = t.fence, stop_reason = $4, updated_at = now() \
                   FROM targets t WHERE l.id = t.id RETURNING {record}, l.is_active), \
                 {held_release} \
                 SELECT {record} FROM changed l"
            ),
            insert: format!(
                "WITH created AS (INSERT INTO {s}.leases AS l \
                   (id, scopes, kind, status, owner, fence, lease_expires_at, created_at, updated_at, metadata) \
                   VALUES ($1, $2::text[], $3, 'pending', $4, $5, now() + $6::interval, now(), now(), $7) \
                   RETURNING {record}), \
                 named AS (INSERT INTO {s}.lease_scopes (scope, lease_id) \
                   SELECT scope, $1 FROM unnest($2::text[]) AS scope), \
                 held AS (INSERT INTO {s}.held_scopes (scope, lease_id) \
                   SELECT scope, $1 FROM unnest($2::text[]) AS scope) \
                 SELECT {record} FROM created l"
            ),
            renew: format!(
                "UPDATE {s}.leases SET lease_expires_at = now() + $4::interval, updated_at = now() \
                 WHERE id = $1 AND owner = $2 AND fence = $3 AND status IN {ACTIVE} \
                 RETURNING lease_expires_at"
            ),
            renew_many: format!(
                "WITH claims AS (SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[]) \
                   WITH ORDINALITY AS c(id, owner, fence, position)), \
                 renewed AS (UPDATE {s}.leases l \
                   SET lease_expires_at = now() + $4::interval, updated_at = now() \
                   FROM claims c WHERE l.id = c.id AND l.owner = c.owner AND l.fence = c.fence \
                   AND l.status IN {ACTIVE} RETURNING c.position, l.lease_expires_at) \
                 SELECT c.position, r.lease_expires_at AS renewed_until, {record} \
                 FROM claims c LEFT JOIN renewed r ON r.position = c.position \
                 LEFT JOIN {s}.leases l ON l.id = c.id AND r.position IS NULL \
                 ORDER BY c.position"
            ),
            transition: format!(
                "WITH changed AS (UPDATE {s}.leases l SET status = $4, \
                   error = COALESCE($5, error), stop_reason = COALESCE($6, stop_reason), \
                   updated_at = now() \
                   WHERE id = $1 AND owner = $2 AND fence = $3 AND status = ANY($7::text[]) \
                   RETURNING {record}, l.is_active), \
                 {held_release} \
                 SELECT {record} FROM changed l"
            ),
            take_over: format!(
                "WITH changed AS (UPDATE {s}.leases l SET owner = $2, fence = nextval({fence_seq}), \
                   status = $3, error = COALESCE($4, error), stop_reason = COALESCE($5, stop_reason), \
                   lease_expires_at = CASE WHEN $6 THEN now() + $7::interval ELSE lease_expires_at END, \
                   updated_at = now() \
                   WHERE id = $1 AND status IN {ACTIVE} \
                   AND (lease_expires_at IS NULL OR lease_expires_at <= now() - $8::interval) \
                   RETURNING {record}, l.is_active), \
                 {held_release} \
                 SELECT {record} FROM changed l"
            ),
            get_with_now: format!(
                "SELECT now() AS store_now, {record} FROM {s}.leases l WHERE l.id = $1"
            ),
            list_expired: format!(
                "SELECT {record} FROM {s}.leases l \
                 WHERE l.status NOT IN {DECODABLE_INACTIVE} \
                 AND (l.lease_expires_at IS NULL OR l.lease_expires_at <= now() - $1::interval) \
                 AND ($2::timestamptz IS NULL OR l.created_at <= $2) \
                 ORDER BY l.lease_expires_at NULLS FIRST, l.id LIMIT $3 OFFSET $4"
            ),
            get: format!("SELECT {record} FROM {s}.leases l WHERE l.id = $1"),
            list_by_scope: format!(
                "SELECT {record} FROM {s}.lease_scopes ls JOIN {s}.leases l ON l.id = ls.lease_id \
                 WHERE ls.scope = $1 ORDER BY l.created_at DESC, l.fence DESC"
            ),
            list_active: format!(
                "SELECT {record} FROM {s}.leases l WHERE l.status IN {ACTIVE} ORDER BY l.id"
            ),
            purge: format!(
                "DELETE FROM {s}.leases WHERE status IN ('succeeded', 'failed') \
                 AND updated_at <= now() - $1::interval"
            ),
        }
    }
}

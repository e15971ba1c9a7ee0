//! The store's SQL, schema-qualified once per store.
//!
//! Every name is qualified with the (validated, quoted) schema, so a store
//! works on any pool whatever its `search_path`. Everything else a statement
//! needs is a bound parameter.

use tenure_lease_core::backend::queue_rules::MAX_ATTEMPTS;
use tenure_lease_core::limits::{MAX_NAME_BYTES, MAX_UNIQUE_PERIOD};
use tenure_lease_core::queue::DeadReason;

use crate::config::SchemaName;
use crate::gate::GateStatements;

/// The columns of a record, in the order [`crate::decode`] reads them by name.
const RECORD_COLUMNS: [&str; 14] = [
    "id",
    "scopes",
    "slots",
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
    "progress",
];

/// The statuses that hold scopes, as an SQL list.
const ACTIVE: &str = "('pending', 'running')";
/// The statuses a record can be decoded with that are not active. A row
/// whose status is none of the five is neither active nor inactive: scans
/// include it so it is reported instead of silently never reaped.
const DECODABLE_INACTIVE: &str = "('interrupted', 'succeeded', 'failed')";

/// The rows `claim` and `reap` may pick: those [`crate::decode::job`] can
/// represent, so a damaged row is left exactly as it is instead of being
/// rewritten and then not answered. (State, owner and payload are judged
/// by the statements themselves or never fail to decode.)
///
/// The test is one `CASE` expression, not a conjunction: the planner gives
/// each of some twenty conjuncts a default selectivity (a third for each
/// function call), estimates that a handful of rows match, and, once the
/// table has statistics, prefers reading and sorting every queued job to
/// walking the claim index with its `LIMIT`. A `CASE` is estimated as one
/// clause (half the rows), which keeps the index plan.
fn decodable_job() -> String {
    let dead_reasons = DeadReason::ALL.map(|reason| format!("'{}'", reason.as_str()));
    // PostgreSQL's calendar starts after chrono's but ends long after it.
    let latest = chrono::DateTime::<chrono::Utc>::MAX_UTC
        .format("%Y-%m-%d %H:%M:%S%.6f+00")
        .to_string();
    let latest = latest.trim_start_matches('+');
    let instant = |column: &str| format!("(isfinite({column}) AND {column} <= '{latest}')");
    format!(
        "(CASE WHEN {} AND {} AND {} AND (lease_expires_at IS NULL OR {}) \
         AND attempt BETWEEN 0 AND {MAX_ATTEMPTS} AND max_attempts BETWEEN 0 AND {MAX_ATTEMPTS} \
         AND fence >= 0 AND (dead_reason IS NULL OR dead_reason IN ({})) \
         AND COALESCE(array_ndims(required_capabilities), 1) = 1 \
         AND array_position(required_capabilities, NULL) IS NULL \
         AND taken_back BETWEEN 0 AND {} AND (taken_back_at IS NULL OR {}) \
         AND (taken_back = 0) = (taken_back_at IS NULL) \
         AND (unique_key IS NULL) = (unique_policy IS NULL) \
         AND (unique_key IS NULL OR (octet_length(unique_key) BETWEEN 1 AND {} \
           AND unique_key !~ '[\\u0001-\\u001f\\u007f-\\u009f]')) \
         AND (CASE unique_policy WHEN 'for_period' THEN {} AND unique_until > created_at \
           AND unique_until - created_at <= interval '{} seconds' \
           AND (EXTRACT(EPOCH FROM unique_until - created_at) * 1000000)::bigint % 1000 = 0 \
           WHEN 'while_queued' THEN unique_until IS NULL \
           WHEN 'while_unfinished' THEN unique_until IS NULL \
           ELSE unique_policy IS NULL AND unique_until IS NULL END) \
         THEN true ELSE false END)",
        instant("run_at"),
        instant("created_at"),
        instant("updated_at"),
        instant("lease_expires_at"),
        dead_reasons.join(", "),
        u32::MAX,
        instant("taken_back_at"),
        MAX_NAME_BYTES,
        instant("unique_until"),
        MAX_UNIQUE_PERIOD.as_secs(),
    )
}

/// The columns of a job, read by name in [`crate::decode::job`].
const JOB_COLUMNS: [&str; 22] = [
    "id",
    "queue",
    "payload",
    "priority",
    "run_at",
    "attempt",
    "max_attempts",
    "required_capabilities",
    "state",
    "owner",
    "fence",
    "lease_expires_at",
    "last_error",
    "dead_reason",
    "created_at",
    "updated_at",
    "taken_back",
    "taken_back_at",
    "progress",
    "unique_key",
    "unique_policy",
    "unique_until",
];

fn columns(alias: &str) -> String {
    qualified(&RECORD_COLUMNS, alias)
}

fn qualified(names: &[&str], alias: &str) -> String {
    names
        .iter()
        .map(|column| format!("{alias}.{column}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Every statement of one store.
#[derive(Debug)]
pub(crate) struct Statements {
    /// `$1` scope-lock keys (ascending, distinct), `$2` id, `$3` scopes,
    /// `$4` kind, `$5` owner, `$6` ttl, `$7` metadata, `$8` lock the
    /// holders? → `store_now, outcome, <record>`: a call of the schema's
    /// `admit_if_free` function (migration 0003), which says what each
    /// outcome carries.
    pub(crate) admit_if_free: String,
    /// As `admit_if_free`, then a rate limit ([`crate::rate::bind`], `$9`
    /// to `$14`) → `store_now, outcome, rate_uses, <record>`: a call of
    /// the schema's `admit_if_free_limited` function (migration 0013),
    /// which says what each outcome carries.
    pub(crate) admit_if_free_limited: String,
    /// For a request with counted scopes: `$1` scope-lock keys, `$2` id,
    /// `$3` scopes, `$4` their capacities (null where exclusive), `$5` the
    /// slots to contend for (null: the lowest free ones), `$6` kind, `$7`
    /// owner, `$8` ttl, `$9` metadata, `$10` lock the holders?, `$11` to
    /// `$16` a rate limit ([`crate::rate::bind`], all null for none) →
    /// `store_now, outcome, rate_uses, slots_chosen, <record>`: a call of
    /// the schema's `admit_counted` function (migration 0014), which says
    /// what each outcome carries.
    pub(crate) admit_counted: String,
    /// `$1` scopes → every (scope, holder) pair, unlocked: for the answer
    /// after lost races.
    pub(crate) read_holders: String,
    /// `$1` scopes → every active record holding a slot of one of them
    /// (any key of the scope), unlocked: for the answer after lost races
    /// of a request with counted scopes.
    pub(crate) read_slot_holders: String,
    /// `$1` ids (distinct, in the plan's order), `$2` requester, `$3` stop
    /// reason, `$4` now → the interrupted records, each with a new fence,
    /// ascending in the order of `$1`; their held scopes released.
    pub(crate) interrupt: String,
    /// `$1` id, `$2` owner, `$3` fence, `$4` ttl → the new expiry, if renewed.
    pub(crate) renew: String,
    /// As `renew`, and `$5` the progress recorded in the same update.
    pub(crate) renew_with_progress: String,
    /// `$1` ids, `$2` owners, `$3` fences, `$4` ttl → per claim position:
    /// `renewed_until`, or the record as it was (all null when missing).
    /// Locks the named records first, in id order (the order admissions
    /// lock holders in), so two overlapping batches, or a batch and an
    /// admission, wait for one another instead of deadlocking. The update
    /// then waits for nothing: every row it writes is already locked.
    pub(crate) renew_many: String,
    pub(crate) get_many: String,
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
    /// `$1` retention → `purged`, the count of deleted rows: interrupted
    /// and terminal records last updated at least the retention ago. Also
    /// deletes, uncounted, the rate logs whose uses all stopped counting.
    pub(crate) purge: String,
    /// `$1` retention → `purged`, the count of rows `purge` would delete
    /// now, deleting nothing.
    pub(crate) count_purgeable: String,
    /// The job queue's statements.
    pub(crate) jobs: JobStatements,
    /// The fence gates' statements.
    pub(crate) gates: GateStatements,
}

/// The statements of the job queue. Every one answers whole jobs (the
/// columns of [`JOB_COLUMNS`]) unless it says otherwise. A fenced write's
/// `$1` id, `$2` owner, `$3` fence name the claim; it matches only while
/// that claim holds the job (`tenure_lease_core::backend::queue_rules::judge_job`).
#[derive(Debug)]
pub(crate) struct JobStatements {
    /// Per job position: `$1` ids, `$2` queues, `$3` payloads, `$4`
    /// priorities, `$5` run_at (null: now), `$6` max attempts, `$7` required
    /// capabilities as JSON arrays, `$8` uniqueness keys, `$9` their policies'
    /// kinds, `$10` their periods (null but for `for_period`); then `$11`
    /// now (null: the statement's `now()`) → the new jobs, in batch order.
    pub(crate) enqueue: String,
    /// `$1` the advisory-lock keys of the batch's (queue, uniqueness key)
    /// pairs, ascending and distinct: takes them, for the transaction.
    pub(crate) lock_unique_keys: String,
    /// Under those locks: `$1` the batch's ids, `$2` queues and `$3`
    /// uniqueness keys (one distinct pair per position) → `store_now`
    /// (`clock_timestamp()`, after the locks), `taken_ids` (the ids of `$1`
    /// that exist) and the stored jobs with those pairs that may hold their
    /// key at `store_now` (queued, claimed or within their period), on as
    /// many rows, or one row whose job columns are null when there are none.
    pub(crate) unique_holders: String,
    /// `$1` ids → those that exist.
    pub(crate) existing_ids: String,
    /// `$1` queue, `$2` worker capabilities, `$3` limit, `$4` worker, `$5`
    /// ttl → the claimed jobs, best first, fences ascending in that order.
    pub(crate) claim: String,
    /// As `claim`, within a rate limit ([`crate::rate::bind`], `$6` to
    /// `$11`): takes the log's lock (the schema's `lock_rate_log`,
    /// migration 0013), claims at the log's instant at most as many jobs
    /// as permits are left, looking for one more, and writes a use per job
    /// claimed. One row per job claimed, best first (or one row whose job
    /// columns are null), each with `store_now` (the log's instant),
    /// `rate_uses` (the log as read), `rate_log_damaged` (then nothing was
    /// picked) and `held_back` (the limit held back a claimable job).
    pub(crate) claim_limited: String,
    /// Fenced; `$4` ttl → the new expiry.
    pub(crate) renew: String,
    /// As `renew`, and `$5` the progress recorded in the same update.
    pub(crate) renew_with_progress: String,
    /// `$1` ids, `$2` owners, `$3` fences, one claim per index, `$4` ttl →
    /// `id` and the new `lease_expires_at` of each job those claims renewed
    /// (each job named once).
    pub(crate) renew_many: String,
    /// `$1` ids → those jobs.
    pub(crate) get_many: String,
    /// Fenced.
    pub(crate) complete: String,
    /// `$1` ids, `$2` owners, `$3` fences, one claim per index → the jobs
    /// those claims completed (each job named once).
    pub(crate) complete_many: String,
    /// Fenced; `$4` error, `$5` retry (else dead-letter), `$6` backoff.
    pub(crate) fail: String,
    /// Fenced; `$4` missing capabilities.
    pub(crate) defer: String,
    /// `$1` grace, `$2` limit → the reaped jobs, oldest expiry first.
    pub(crate) reap: String,
    /// `$1` id, `$2` owner, `$3` fence of the reaped claim, `$4` ttl; counts
    /// the take-back on the job (`taken_back`, `taken_back_at`).
    pub(crate) take_back: String,
    /// `$1` id.
    pub(crate) get: String,
    /// `$1` queue, `$2` limit.
    pub(crate) list_dead_letters: String,
    /// `$1` queue, `$2` state or NULL for any, `$3` limit.
    pub(crate) list_jobs: String,
    /// Every queue's jobs counted by state: `queue`, `state`, `jobs`.
    pub(crate) count_jobs: String,
    /// `$1` id.
    pub(crate) retry_dead_letter: String,
    /// `$1` retention → `purged`, the count of deleted finished jobs whose
    /// last update (their finish time) is at least the retention ago and
    /// whose uniqueness period, if any, has ended.
    pub(crate) purge_finished: String,
}

impl JobStatements {
    fn new(s: &str, next_fence: &str) -> Self {
        let job = qualified(&JOB_COLUMNS, "j");
        let claimed_by = "j.id = $1 AND j.state = 'claimed' AND j.owner = $2 AND j.fence = $3";
        // fail: `Retry` with attempts left goes back to the queue.
        let retry = "($5::boolean AND j.attempt < j.max_attempts)";
        let attempts_left = "j.attempt < j.max_attempts";
        let decodable = decodable_job();
        let enqueued_at = "COALESCE($11::timestamptz, now())";
        // A claim's steps, at the instant `now`. Only decodable rows with
        // attempts below MAX_ATTEMPTS are picked (rules::claimable), so
        // `attempt + 1` is one a reader accepts. Fences are drawn after
        // the jobs are picked and locked, then paired with them in claim
        // order: values of one sequence, sorted ascending, are in the
        // order they were drawn.
        let picking = |now: &str, limit: &str| {
            format!(
                "SELECT id, priority, run_at, created_at FROM {s}.jobs \
                 WHERE queue = $1 AND state = 'queued' AND run_at <= {now} \
                 AND required_capabilities <@ $2::text[] AND {decodable} \
                 AND attempt < {MAX_ATTEMPTS} \
                 ORDER BY priority DESC, run_at, created_at, id LIMIT {limit} \
                 FOR UPDATE SKIP LOCKED"
            )
        };
        let ranked = "SELECT id, row_number() OVER \
             (ORDER BY priority DESC, run_at, created_at, id) AS claim_order FROM picked";
        let fences = |claiming: &str| {
            format!(
                "SELECT fence, row_number() OVER (ORDER BY fence) AS claim_order \
                 FROM {s}.draw_fences((SELECT count(*) FROM {claiming})) AS fence"
            )
        };
        let claiming = |now: &str, claiming: &str| {
            format!(
                "UPDATE {s}.jobs j SET state = 'claimed', owner = $4, \
                 attempt = j.attempt + 1, fence = f.fence, \
                 lease_expires_at = {now} + $5::interval, dead_reason = NULL, updated_at = {now} \
                 FROM {claiming} r JOIN fences f ON f.claim_order = r.claim_order \
                 WHERE j.id = r.id RETURNING r.claim_order, {job}"
            )
        };
        JobStatements {
            enqueue: format!(
                "WITH batch AS (SELECT * FROM unnest($1::text[], $2::text[], $3::jsonb[], \
                   $4::integer[], $5::timestamptz[], $6::integer[], $7::jsonb[], $8::text[], \
                   $9::text[], $10::interval[]) \
                   WITH ORDINALITY AS b(id, queue, payload, priority, run_at, max_attempts, \
                   capabilities, unique_key, unique_policy, unique_period, position)), \
                 created AS (INSERT INTO {s}.jobs AS j (id, queue, payload, priority, run_at, \
                   attempt, max_attempts, required_capabilities, state, created_at, updated_at, \
                   unique_key, unique_policy, unique_until) \
                   SELECT b.id, b.queue, b.payload, b.priority, COALESCE(b.run_at, {enqueued_at}), \
                   0, b.max_attempts, ARRAY(SELECT jsonb_array_elements_text(b.capabilities)), \
                   'queued', {enqueued_at}, {enqueued_at}, b.unique_key, b.unique_policy, \
                   {enqueued_at} + b.unique_period FROM batch b \
                   RETURNING {job}) \
                 SELECT {job} FROM created j JOIN batch b ON b.id = j.id ORDER BY b.position"
            ),
            lock_unique_keys: "SELECT pg_advisory_xact_lock(k) FROM unnest($1::bigint[]) AS k"
                .to_owned(),
            unique_holders: format!(
                "SELECT c.store_now, c.taken_ids, {job} FROM (SELECT clock_timestamp() AS store_now, \
                   ARRAY(SELECT id FROM {s}.jobs WHERE id = ANY($1::text[])) AS taken_ids) c \
                 LEFT JOIN ({s}.jobs j JOIN unnest($2::text[], $3::text[]) AS k(queue, unique_key) \
                   ON j.queue = k.queue AND j.unique_key = k.unique_key) \
                 ON j.state IN ('queued', 'claimed') OR j.unique_until > c.store_now"
            ),
            existing_ids: format!("SELECT id FROM {s}.jobs WHERE id = ANY($1::text[])"),
            claim: format!(
                "WITH picked AS ({}), \
                 ranked AS ({ranked}), \
                 fences AS ({}), \
                 claimed AS ({}) \
                 SELECT {job} FROM claimed j ORDER BY j.claim_order",
                picking("now()", "$3"),
                fences("picked"),
                claiming("now()", "ranked"),
            ),
            claim_limited: format!(
                "WITH log AS MATERIALIZED (SELECT l.*, CASE WHEN l.damaged THEN 0 \
                   WHEN l.permits_left < $3 THEN l.permits_left + 1 ELSE $3 END AS looked_for \
                   FROM {s}.lock_rate_log($6::bigint, $7::text, $8::integer, $9::bigint, \
                   $10::bigint, $11::bigint) l), \
                 picked AS ({}), \
                 ranked AS ({ranked}), \
                 taken AS (SELECT id, claim_order FROM ranked \
                   WHERE claim_order <= (SELECT permits_left FROM log)), \
                 fences AS ({}), \
                 claimed AS ({}), \
                 spent AS (INSERT INTO {s}.rate_logs (key, permits, period_ms, uses, ends_at) \
                   SELECT $7, $8, $9, a.spent_uses, a.spent_ends_at FROM log l, \
                   {s}.spent_rate_log(l.uses, $8, $9, l.judged_at, l.judged_micros, \
                     (SELECT count(*) FROM claimed)) a \
                   WHERE EXISTS (SELECT 1 FROM claimed) \
                   ON CONFLICT (key, permits, period_ms) \
                   DO UPDATE SET uses = EXCLUDED.uses, ends_at = EXCLUDED.ends_at) \
                 SELECT l.judged_at AS store_now, l.uses AS rate_uses, \
                   l.damaged AS rate_log_damaged, \
                   (SELECT count(*) FROM picked) > l.permits_left AS held_back, {job} \
                 FROM log l LEFT JOIN claimed j ON true ORDER BY j.claim_order",
                picking("(SELECT judged_at FROM log)", "(SELECT looked_for FROM log)"),
                fences("taken"),
                claiming("(SELECT judged_at FROM log)", "taken"),
            ),
            renew: format!(
                "UPDATE {s}.jobs j SET lease_expires_at = now() + $4::interval, updated_at = now() \
                 WHERE {claimed_by} RETURNING j.lease_expires_at"
            ),
            renew_with_progress: format!(
                "UPDATE {s}.jobs j SET lease_expires_at = now() + $4::interval, updated_at = now(), \
                 progress = $5::jsonb WHERE {claimed_by} RETURNING j.lease_expires_at"
            ),
            renew_many: format!(
                "UPDATE {s}.jobs j SET lease_expires_at = now() + $4::interval, updated_at = now() \
                 FROM unnest($1::text[], $2::text[], $3::bigint[]) AS c(id, owner, fence) \
                 WHERE j.id = c.id AND j.state = 'claimed' AND j.owner = c.owner \
                   AND j.fence = c.fence RETURNING j.id, j.lease_expires_at"
            ),
            get_many: format!("SELECT {job} FROM {s}.jobs j WHERE j.id = ANY($1::text[])"),
            complete: format!(
                "UPDATE {s}.jobs j SET state = 'completed', lease_expires_at = NULL, \
                 updated_at = now() WHERE {claimed_by} RETURNING {job}"
            ),
            complete_many: format!(
                "UPDATE {s}.jobs j SET state = 'completed', lease_expires_at = NULL, \
                 updated_at = now() \
                 FROM unnest($1::text[], $2::text[], $3::bigint[]) AS c(id, owner, fence) \
                 WHERE j.id = c.id AND j.state = 'claimed' AND j.owner = c.owner \
                   AND j.fence = c.fence RETURNING {job}"
            ),
            fail: format!(
                "UPDATE {s}.jobs j SET last_error = $4, lease_expires_at = NULL, updated_at = now(), \
                 state = CASE WHEN {retry} THEN 'queued' ELSE 'dead_lettered' END, \
                 run_at = CASE WHEN {retry} THEN now() + $6::interval ELSE j.run_at END, \
                 dead_reason = CASE WHEN {retry} THEN j.dead_reason \
                   WHEN $5::boolean THEN 'attempts_exhausted' ELSE 'failed' END \
                 WHERE {claimed_by} RETURNING {job}"
            ),
            defer: format!(
                "UPDATE {s}.jobs j SET state = 'queued', attempt = greatest(j.attempt - 1, 0), \
                 required_capabilities = ARRAY(SELECT DISTINCT capability \
                   FROM unnest(j.required_capabilities || $4::text[]) AS capability), \
                 run_at = now(), lease_expires_at = NULL, updated_at = now() \
                 WHERE {claimed_by} RETURNING {job}"
            ),
            reap: format!(
                "WITH expired AS (SELECT id, lease_expires_at AS expired_at FROM {s}.jobs \
                   WHERE state = 'claimed' AND lease_expires_at <= now() - $1::interval \
                   AND {decodable} \
                   ORDER BY lease_expires_at, id LIMIT $2 FOR UPDATE SKIP LOCKED), \
                 reaped AS (UPDATE {s}.jobs j SET lease_expires_at = NULL, updated_at = now(), \
                   state = CASE WHEN {attempts_left} THEN 'queued' ELSE 'dead_lettered' END, \
                   run_at = CASE WHEN {attempts_left} THEN now() ELSE j.run_at END, \
                   dead_reason = CASE WHEN {attempts_left} THEN j.dead_reason \
                     ELSE 'lease_expired' END \
                   FROM expired e WHERE j.id = e.id RETURNING e.expired_at, {job}) \
                 SELECT {job} FROM reaped j ORDER BY j.expired_at, j.id"
            ),
            take_back: format!(
                "UPDATE {s}.jobs j SET state = 'claimed', dead_reason = NULL, \
                 fence = {next_fence}, lease_expires_at = now() + $4::interval, \
                 updated_at = now(), taken_back = least(j.taken_back + 1, {}), \
                 taken_back_at = now() \
                 WHERE j.id = $1 AND j.state = 'dead_lettered' AND j.dead_reason = 'lease_expired' \
                 AND j.owner = $2 AND j.fence = $3 RETURNING {job}",
                u32::MAX
            ),
            get: format!("SELECT {job} FROM {s}.jobs j WHERE j.id = $1"),
            list_dead_letters: format!(
                "SELECT {job} FROM {s}.jobs j WHERE j.queue = $1 AND j.state = 'dead_lettered' \
                 ORDER BY j.updated_at, j.id LIMIT $2"
            ),
            list_jobs: format!(
                "SELECT {job} FROM {s}.jobs j WHERE j.queue = $1 \
                   AND ($2::text IS NULL OR j.state = $2::text) \
                 ORDER BY j.created_at, j.id LIMIT $3"
            ),
            count_jobs: format!(
                "SELECT queue, state, count(*) AS jobs FROM {s}.jobs GROUP BY queue, state"
            ),
            retry_dead_letter: format!(
                "UPDATE {s}.jobs j SET state = 'queued', dead_reason = NULL, attempt = 0, \
                 run_at = now(), updated_at = now() \
                 WHERE j.id = $1 AND j.state = 'dead_lettered' RETURNING {job}"
            ),
            purge_finished: format!(
                "WITH purged AS (DELETE FROM {s}.jobs WHERE state IN ('completed', 'dead_lettered') \
                   AND updated_at <= now() - $1::interval \
                   AND (unique_until IS NULL OR unique_until <= now()) RETURNING 1) \
                 SELECT count(*) AS purged FROM purged"
            ),
        }
    }
}

impl Statements {
    pub(crate) fn new(schema: &SchemaName) -> Self {
        let s = schema.quoted();
        // The next fence, above the server's WAL timeline's floor
        // (migrations 0008 and 0010).
        let next_fence = format!("{s}.draw_fence()");
        let record = columns("l");
        let admitted_or_holder = columns("(a.lease)");
        let held_release = format!(
            "released AS (DELETE FROM {s}.held_scopes h USING changed c \
             WHERE h.lease_id = c.id AND NOT c.is_active)"
        );
        Statements {
            admit_if_free: format!(
                "SELECT a.store_now, a.outcome, {admitted_or_holder} \
                 FROM {s}.admit_if_free($1::bigint[], $2, $3::text[], $4, $5, $6::interval, \
                   $7::jsonb, $8) a"
            ),
            admit_if_free_limited: format!(
                "SELECT a.store_now, a.outcome, a.rate_uses, {admitted_or_holder} \
                 FROM {s}.admit_if_free_limited($1::bigint[], $2, $3::text[], $4, $5, \
                   $6::interval, $7::jsonb, $8, $9::bigint, $10::text, $11::integer, \
                   $12::bigint, $13::bigint, $14::bigint) a"
            ),
            admit_counted: format!(
                "SELECT a.store_now, a.outcome, a.rate_uses, a.slots_chosen, {admitted_or_holder} \
                 FROM {s}.admit_counted($1::bigint[], $2, $3::text[], $4::integer[], \
                   $5::integer[], $6, $7, $8::interval, $9::jsonb, $10, $11::bigint, $12::text, \
                   $13::integer, $14::bigint, $15::bigint, $16::bigint) a"
            ),
            // The keys of a scope are the rows from the scope up to the
            // scope followed by a space (migration 0014).
            read_slot_holders: format!(
                "SELECT {record} FROM {s}.leases l \
                 WHERE l.is_active AND l.scopes && $1::text[] AND l.id = ANY(ARRAY( \
                   SELECT h.lease_id FROM unnest($1::text[]) AS r(scope) \
                   JOIN {s}.held_scopes h ON h.scope >= r.scope AND h.scope < r.scope || ' ')) \
                 ORDER BY l.id"
            ),
            read_holders: format!(
                "SELECT h.scope, {record} FROM {s}.held_scopes h \
                 JOIN {s}.leases l ON l.id = h.lease_id \
                 WHERE h.scope = ANY($1::text[]) AND l.is_active AND h.scope = ANY(l.scopes) \
                 ORDER BY h.scope"
            ),
            // Fences are drawn apart from the update, then paired with the
            // holders in the plan's order (values of one sequence, sorted
            // ascending, are in the order they were drawn): `nextval()` inside
            // the update would follow the table's physical row order instead.
            interrupt: format!(
                "WITH planned AS (SELECT p.id, p.position \
                   FROM unnest($1::text[]) WITH ORDINALITY AS p(id, position)), \
                 fences AS (SELECT fence, row_number() OVER (ORDER BY fence) AS position \
                   FROM (SELECT {next_fence} AS fence FROM planned) drawn), \
                 changed AS (UPDATE {s}.leases l SET status = 'interrupted', owner = $2, \
                   fence = f.fence, stop_reason = $3, updated_at = $4::timestamptz \
                   FROM planned p JOIN fences f ON f.position = p.position \
                   WHERE l.id = p.id RETURNING {record}, l.is_active), \
                 {held_release} \
                 SELECT {record} FROM changed l"
            ),
            renew: format!(
                "UPDATE {s}.leases SET lease_expires_at = now() + $4::interval, updated_at = now() \
                 WHERE id = $1 AND owner = $2 AND fence = $3 AND status IN {ACTIVE} \
                 RETURNING lease_expires_at"
            ),
            renew_with_progress: format!(
                "UPDATE {s}.leases SET lease_expires_at = now() + $4::interval, updated_at = now(), \
                 progress = $5::jsonb \
                 WHERE id = $1 AND owner = $2 AND fence = $3 AND status IN {ACTIVE} \
                 RETURNING lease_expires_at"
            ),
            // `locked` takes the row locks in id order (the order admissions
            // lock holders in) before the UPDATE touches any row: the
            // uncorrelated sub-select is evaluated once, up front. Only
            // renewed claims come back; refused ones are read afterwards.
            renew_many: format!(
                "WITH claims AS (SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[]) \
                   WITH ORDINALITY AS c(id, owner, fence, position)), \
                 locked AS MATERIALIZED (SELECT l.id FROM {s}.leases l \
                   WHERE l.id = ANY($1::text[]) ORDER BY l.id FOR NO KEY UPDATE) \
                 UPDATE {s}.leases l \
                   SET lease_expires_at = now() + $4::interval, updated_at = now() \
                   FROM claims c WHERE l.id = c.id \
                   AND l.owner = c.owner AND l.fence = c.fence \
                   AND l.status IN {ACTIVE} AND (SELECT count(*) FROM locked) >= 0 \
                   RETURNING c.position, l.lease_expires_at"
            ),
            get_many: format!("SELECT {record} FROM {s}.leases l WHERE l.id = ANY($1::text[])"),
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
                "WITH changed AS (UPDATE {s}.leases l SET owner = $2, fence = {next_fence}, \
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
                 WHERE ls.scope = $1 AND ls.scope = ANY(l.scopes) \
                 ORDER BY l.created_at DESC, l.fence DESC"
            ),
            list_active: format!(
                "SELECT {record} FROM {s}.leases l WHERE l.status IN {ACTIVE} ORDER BY l.id"
            ),
            purge: format!(
                "WITH purged AS (DELETE FROM {s}.leases WHERE status IN {DECODABLE_INACTIVE} \
                   AND updated_at <= now() - $1::interval RETURNING id, scopes), \
                 unnamed AS (DELETE FROM {s}.lease_scopes ls \
                   USING (SELECT p.id, unnest(p.scopes) AS scope FROM purged p) named \
                   WHERE ls.scope = named.scope AND ls.lease_id = named.id), \
                 dead_rate_logs AS (DELETE FROM {s}.rate_logs WHERE ends_at <= now()) \
                 SELECT count(*) AS purged FROM purged"
            ),
            count_purgeable: format!(
                "SELECT count(*) AS purged FROM {s}.leases WHERE status IN {DECODABLE_INACTIVE} \
                   AND updated_at <= now() - $1::interval"
            ),
            jobs: JobStatements::new(&s, &next_fence),
            gates: GateStatements::new(&s),
        }
    }
}

#[cfg(test)]
mod tests {
    //! The plans of the claim on a jobs table with statistics, as autovacuum
    //! or any `ANALYZE` leaves it on a real server (the kit's fresh schemas
    //! never have any). Only the plans are read: `EXPLAIN` without
    //! `ANALYZE` runs nothing.

    use std::panic::AssertUnwindSafe;

    use futures_util::FutureExt as _;
    use sqlx::Row as _;
    use tenure_lease_core::queue::{JobQueue as _, NewJob};

    use crate::{PgStore, PgStoreConfig};

    /// The parameters of a claim of one job of queue `plans`: their types,
    /// then their values.
    const PLAIN_CLAIM: (&str, &str) = (
        "text, text[], bigint, text, interval",
        "'plans', '{}', 1, 'claimer', '30 seconds'",
    );
    /// As [`PLAIN_CLAIM`], within a rate limit.
    const LIMITED_CLAIM: (&str, &str) = (
        "text, text[], bigint, text, interval, bigint, text, integer, bigint, bigint, bigint",
        "'plans', '{}', 1, 'claimer', '30 seconds', 7, 'k', 10, 1000, -1, 1",
    );

    /// The plan of the store's claim `statement` with `parameters` (as
    /// [`PLAIN_CLAIM`]), under `plan_cache_mode` (a custom plan for the
    /// bound values, or the generic plan a prepared statement settles on).
    async fn claim_plan(
        store: &PgStore,
        statement: &str,
        (types, values): (&str, &str),
        plan_cache_mode: &str,
    ) -> sqlx::Result<String> {
        let mut connection = store.pool().acquire().await?;
        sqlx::raw_sql(&format!(
            "SET plan_cache_mode = {plan_cache_mode}; \
             PREPARE tenure_claim({types}) AS {statement}"
        ))
        .execute(&mut *connection)
        .await?;
        let rows = sqlx::query(&format!("EXPLAIN EXECUTE tenure_claim({values})"))
            .fetch_all(&mut *connection)
            .await?;
        sqlx::raw_sql("DEALLOCATE tenure_claim; RESET plan_cache_mode")
            .execute(&mut *connection)
            .await?;
        rows.iter()
            .map(|row| row.try_get::<String, _>(0))
            .collect::<sqlx::Result<Vec<_>>>()
            .map(|lines| lines.join("\n"))
    }

    /// Fills the queue with many queued jobs beside many finished ones,
    /// analyzes the table and answers the custom and generic plans of the
    /// claim, with and without a rate limit.
    async fn plans_on_an_analyzed_table(store: &PgStore) -> Vec<(String, String)> {
        for _ in 0..12 {
            let batch: Vec<NewJob> = (0..500)
                .map(|_| NewJob::new("plans", serde_json::json!({})))
                .collect();
            store.enqueue_batch(&batch).await.expect("enqueue");
        }
        sqlx::raw_sql(&format!(
            "INSERT INTO {s}.jobs (id, queue, payload, priority, run_at, attempt, \
               max_attempts, state, created_at, updated_at) \
             SELECT 'finished-' || n, 'plans', '{{}}', 0, now(), 1, 3, 'completed', now(), now() \
             FROM generate_series(1, 20000) AS n; \
             ANALYZE {s}.jobs",
            s = store.schema.quoted()
        ))
        .execute(store.pool())
        .await
        .expect("finished jobs and statistics");
        let mut plans = Vec::new();
        let claims = [
            ("claim", &store.sql.jobs.claim, PLAIN_CLAIM),
            (
                "rate-limited claim",
                &store.sql.jobs.claim_limited,
                LIMITED_CLAIM,
            ),
        ];
        for (claim, statement, parameters) in claims {
            for mode in ["force_custom_plan", "force_generic_plan"] {
                let plan = claim_plan(store, statement, parameters, mode)
                    .await
                    .expect("the claim's plan");
                plans.push((format!("{claim}, {mode}"), plan));
            }
        }
        plans
    }

    /// A claim of one job reads one entry of the claim index, however many
    /// jobs are queued: neither a sequential scan of the table nor a bitmap
    /// scan of every queued job (then sorted), which is what the planner
    /// picked while the "decodable row" test was a conjunction.
    #[tokio::test]
    async fn a_claim_walks_the_claim_index_once_the_table_has_statistics() {
        let test = "a_claim_walks_the_claim_index_once_the_table_has_statistics";
        let url = match tenure_test_support::shared::postgres_url() {
            Ok(url) => url,
            Err(why) => return tenure_conformance::skip_unless_required(test, &why),
        };
        let schema = format!(
            "tenure_test_{}",
            tenure_lease_core::generate_id().replace('-', "")
        );
        let store = PgStore::connect(PgStoreConfig::new(url).schema(schema).max_connections(2))
            .await
            .expect("a store in a fresh schema");
        let plans = AssertUnwindSafe(plans_on_an_analyzed_table(&store))
            .catch_unwind()
            .await;
        store.drop_schema().await.expect("drop the test schema");
        let plans = plans.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        for (mode, plan) in plans {
            assert!(
                plan.contains("Index Scan using jobs_claim_order on jobs"),
                "{mode}: the claim does not walk the claim index:\n{plan}"
            );
            for whole_table in ["Seq Scan on jobs", "Bitmap Heap Scan on jobs"] {
                assert!(
                    !plan.contains(whole_table),
                    "{mode}: the claim reads every queued job ({whole_table}):\n{plan}"
                );
            }
        }
    }
}

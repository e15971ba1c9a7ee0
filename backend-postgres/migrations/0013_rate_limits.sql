-- tenure lease store and job queue, schema version 13: rate limits.
--
-- Runs with search_path set to the store's schema, in one transaction.
--
-- An admission or a claim may carry a rate limit (key, permits, period):
-- it names a log, the instants of the last uses of that limit, and is
-- judged against it and writes its uses in the same atomic step
-- (tenure_lease_core::backend::rate_rules holds the rules mirrored here).
-- Callers of one log take turns on a transaction-scoped advisory lock,
-- hashed by the crate in a family of its own (see scope_locks.rs), so a
-- log needs no row until its first use. Nothing existing changes: the
-- plain admission (admit_if_free) and claim are as they were. Processes
-- of version 12 already connected keep working on this schema: their
-- statements name no new object, and their purge leaves dead logs behind
-- for the next purge of version 13.

-- One row per log with a use that may still count:
--   uses: the instants of its last uses, microseconds since the Unix
--     epoch, ascending, at most `permits` of them;
--   ends_at: when the newest use stops counting (its instant plus the
--     period), after which the log is as good as none and purge deletes
--     it.
CREATE TABLE rate_logs (
    key       text COLLATE "C" NOT NULL,
    permits   integer NOT NULL CONSTRAINT rate_logs_permits_positive CHECK (permits > 0),
    period_ms bigint NOT NULL CONSTRAINT rate_logs_period_positive CHECK (period_ms > 0),
    uses      bigint[] NOT NULL,
    ends_at   timestamptz NOT NULL,
    PRIMARY KEY (key, permits, period_ms)
);

-- purge: dead logs by their end.
CREATE INDEX rate_logs_ends_at ON rate_logs (ends_at);

-- Takes the log's advisory lock (lock_key) for the transaction, then
-- reads its instant (clock_timestamp(), after the wait, so never earlier
-- than a use the log's previous locker wrote) and the log, with a fresh
-- snapshot: it sees everything the previous locker committed. A log that
-- is not a list of at most `log_permits` instants (no null, one
-- dimension, each within earliest_use ..= latest_use, the range of
-- instants the crate can represent) is `damaged`: the crate decodes it
-- (rate_rules::stored_uses) to say why, and the caller writes nothing.
-- permits_left: the permits free at judged_at (rate_rules::permits_left:
-- a use counts while judged_at < use + period), 0 for a damaged log.
-- Outside READ COMMITTED the read would see the transaction's snapshot,
-- taken before the wait: there it answers a serialization failure
-- instead, and the crate runs its statement again at READ COMMITTED.
CREATE FUNCTION lock_rate_log(
    lock_key bigint,
    log_key text,
    log_permits integer,
    log_period_ms bigint,
    earliest_use bigint,
    latest_use bigint
) RETURNS TABLE (
    judged_at timestamptz,
    judged_micros bigint,
    uses bigint[],
    damaged boolean,
    permits_left integer
)
LANGUAGE plpgsql VOLATILE
ROWS 1
SET search_path FROM CURRENT
AS $$
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'serialization_failure',
            MESSAGE = 'rate logs are judged at READ COMMITTED only';
    END IF;
    PERFORM pg_advisory_xact_lock(lock_key);
    judged_at := clock_timestamp();
    -- Exact on every version: a double (before PostgreSQL 14) holds the
    -- whole seconds and the microseconds apart, not their sum.
    judged_micros := EXTRACT(EPOCH FROM date_trunc('second', judged_at))::bigint * 1000000
        + EXTRACT(MICROSECONDS FROM judged_at)::bigint % 1000000;
    SELECT r.uses INTO uses FROM rate_logs r
        WHERE r.key = log_key AND r.permits = log_permits AND r.period_ms = log_period_ms;
    IF NOT FOUND THEN
        uses := '{}';
    END IF;
    -- array_position refuses an array of more than one dimension.
    IF uses IS NULL OR array_ndims(uses) > 1 THEN
        damaged := true;
    ELSE
        damaged := array_position(uses, NULL) IS NOT NULL
            OR cardinality(uses) > log_permits
            OR EXISTS (SELECT 1 FROM unnest(uses) AS u
                       WHERE u NOT BETWEEN earliest_use AND latest_use);
    END IF;
    IF damaged THEN
        permits_left := 0;
    ELSE
        permits_left := greatest(log_permits - (SELECT count(*) FROM unnest(uses) AS u
            WHERE u > judged_micros - log_period_ms * 1000), 0);
    END IF;
    RETURN NEXT;
END
$$;

-- The log `stored` after `spending` more uses at judged_at
-- (rate_rules::spent): the uses still counting and the new ones, the
-- newest `log_permits` kept, ascending; and when it stops counting
-- (rate_rules::log_ends_at: its newest use plus the period).
CREATE FUNCTION spent_rate_log(
    stored bigint[],
    log_permits integer,
    log_period_ms bigint,
    judged_at timestamptz,
    judged_micros bigint,
    spending bigint
) RETURNS TABLE (spent_uses bigint[], spent_ends_at timestamptz)
LANGUAGE sql STABLE
ROWS 1
AS $$
    SELECT kept.uses,
        judged_at + (kept.uses[cardinality(kept.uses)] - judged_micros) * interval '1 microsecond'
            + log_period_ms * interval '1 millisecond'
    FROM (SELECT ARRAY(
        SELECT newest.u FROM (
            SELECT counting.u FROM (
                SELECT u FROM unnest(stored) AS u WHERE u > judged_micros - log_period_ms * 1000
                UNION ALL
                SELECT judged_micros FROM generate_series(1, spending)
            ) AS counting(u)
            ORDER BY counting.u DESC LIMIT log_permits
        ) AS newest(u)
        ORDER BY newest.u) AS uses) AS kept
$$;

-- admit_if_free (migrations 0003 and 0010) judging a rate limit: once no
-- holder blocks and the id is free, it takes the log's lock
-- (lock_rate_log), admits at the log's instant and writes one use, or,
-- with no permit left, writes nothing. The answers are admit_if_free's,
-- each with rate_uses (null but where named), and:
--   'rate_limited', the log as read, at the instant it was judged: no
--     permit was left (nothing written);
--   'rate_log_damaged', the log as read: it cannot be decoded (nothing
--     written).
-- A taken id is answered before the log is read: it uses no permit.
CREATE FUNCTION admit_if_free_limited(
    scope_keys bigint[],
    requested_id text,
    requested_scopes text[],
    requested_kind text,
    requested_owner text,
    ttl interval,
    requested_metadata jsonb,
    lock_holders boolean,
    rate_lock bigint,
    rate_key text,
    rate_permits integer,
    rate_period_ms bigint,
    earliest_use bigint,
    latest_use bigint
) RETURNS TABLE (store_now timestamptz, outcome text, lease leases, rate_uses bigint[])
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
DECLARE
    scope_key bigint;
    held_by text[];
    holders leases[];
    admission_now timestamptz;
    admitted leases;
    rate_log record;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RETURN;
    END IF;
    FOREACH scope_key IN ARRAY scope_keys LOOP
        PERFORM pg_advisory_xact_lock(scope_key);
    END LOOP;
    held_by := ARRAY(SELECT h.lease_id FROM held_scopes h WHERE h.scope = ANY (requested_scopes));
    IF lock_holders THEN
        holders := ARRAY(
            SELECT l FROM leases l
            WHERE l.is_active AND l.id = ANY (held_by) AND l.scopes && requested_scopes
            ORDER BY l.id FOR UPDATE OF l);
    ELSE
        holders := ARRAY(
            SELECT l FROM leases l
            WHERE l.is_active AND l.id = ANY (held_by) AND l.scopes && requested_scopes);
    END IF;
    IF cardinality(holders) > 0 THEN
        admission_now := clock_timestamp();
        IF EXISTS (SELECT 1 FROM leases l WHERE l.id = requested_id) THEN
            RETURN QUERY SELECT admission_now, 'taken', NULL::leases, NULL::bigint[];
        ELSE
            RETURN QUERY SELECT admission_now, 'held', holder, NULL::bigint[]
                FROM unnest(holders) AS holder;
        END IF;
        RETURN;
    END IF;
    IF EXISTS (SELECT 1 FROM leases l WHERE l.id = requested_id) THEN
        RETURN QUERY SELECT clock_timestamp(), 'taken', NULL::leases, NULL::bigint[];
        RETURN;
    END IF;
    SELECT * INTO rate_log FROM lock_rate_log(
        rate_lock, rate_key, rate_permits, rate_period_ms, earliest_use, latest_use);
    IF rate_log.damaged THEN
        RETURN QUERY SELECT rate_log.judged_at, 'rate_log_damaged', NULL::leases, rate_log.uses;
        RETURN;
    END IF;
    IF rate_log.permits_left = 0 THEN
        RETURN QUERY SELECT rate_log.judged_at, 'rate_limited', NULL::leases, rate_log.uses;
        RETURN;
    END IF;
    admission_now := rate_log.judged_at;
    INSERT INTO leases AS l (id, scopes, kind, status, owner, fence, lease_expires_at,
                             created_at, updated_at, metadata)
    VALUES (requested_id, requested_scopes, requested_kind, 'pending', requested_owner,
            draw_fence(), admission_now + ttl, admission_now, admission_now,
            requested_metadata)
    ON CONFLICT (id) DO NOTHING
    RETURNING l.* INTO admitted;
    IF NOT FOUND THEN
        RETURN QUERY SELECT admission_now, 'taken', NULL::leases, NULL::bigint[];
        RETURN;
    END IF;
    IF cardinality(held_by) > 0 THEN
        DELETE FROM held_scopes h WHERE h.scope = ANY (requested_scopes)
            AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.id = h.lease_id
                AND h.scope = ANY (l.scopes)
                AND l.status NOT IN ('interrupted', 'succeeded', 'failed'));
    END IF;
    INSERT INTO lease_scopes (scope, lease_id)
    SELECT scope, requested_id FROM unnest(requested_scopes) AS scope
    ON CONFLICT DO NOTHING;
    INSERT INTO held_scopes (scope, lease_id)
    SELECT scope, requested_id FROM unnest(requested_scopes) AS scope;
    INSERT INTO rate_logs AS r (key, permits, period_ms, uses, ends_at)
    SELECT rate_key, rate_permits, rate_period_ms, spent.spent_uses, spent.spent_ends_at
    FROM spent_rate_log(rate_log.uses, rate_permits, rate_period_ms, rate_log.judged_at,
                        rate_log.judged_micros, 1) AS spent
    ON CONFLICT (key, permits, period_ms)
    DO UPDATE SET uses = EXCLUDED.uses, ends_at = EXCLUDED.ends_at;
    RETURN QUERY SELECT admission_now, 'admitted', admitted, NULL::bigint[];
END;
$$;

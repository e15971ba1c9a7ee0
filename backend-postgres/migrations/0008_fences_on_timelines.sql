-- tenure lease store, schema version 8: fences that survive a promotion.
--
-- Runs with search_path set to the store's schema, in one transaction.
--
-- Fences were the bare sequence. A standby replays the sequence as it
-- receives the primary's write-ahead log, so a standby promoted while it
-- lagged (asynchronous replication, the default) went on from an older
-- value and handed out again fences the old primary had already handed out
-- (measured: the sequence went back from 1,514 to 1,353, 160 fences issued
-- twice). A promotion always starts a new WAL timeline, numbered above
-- every timeline before it, and the server knows its own at once. So every
-- fence is now drawn at or above its timeline's floor, the timeline times
-- 2^40: the first draw on a new timeline finds the sequence below the
-- floor and moves it there, and every fence a promoted server draws
-- exceeds every fence of the timelines before it, whatever it never
-- received. The sequence itself jumps, so processes of version 7 still
-- running on the schema (their bare nextval) draw above every fence drawn
-- before: fences keep growing through a rolling upgrade.
--
-- Bounds: a timeline may draw 2^40 fences (3.5 years at 10,000 a second),
-- and fences stay below 2^53, the largest a fence gate keeps, up to
-- timeline 8191.

-- The timeline this server writes its write-ahead log on now: the first
-- eight hex digits of the current WAL file's name.
CREATE FUNCTION wal_timeline() RETURNS bigint
LANGUAGE sql VOLATILE PARALLEL SAFE
AS $$ SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint $$;

-- The lowest fence this server's timeline may draw: above every fence of
-- the timelines before it. No fence is ever the floor itself.
CREATE FUNCTION timeline_floor() RETURNS bigint
LANGUAGE sql VOLATILE PARALLEL SAFE
SET search_path FROM CURRENT
AS $$ SELECT wal_timeline() * 1099511627776 $$;

-- The next fence: the sequence's next value, or, when that is below the
-- timeline's floor (the first draw after a promotion, or after this
-- migration), the first value past the floor. Concurrent first draws take
-- turns on an advisory lock (released at the end of the caller's
-- transaction; taken once per timeline) so none moves the sequence back.
-- It runs as the schema's owner (SECURITY DEFINER, its search_path fixed),
-- so the application role needs no more than USAGE on the sequence.
CREATE FUNCTION next_fence() RETURNS bigint
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    drawn bigint := nextval('fence_seq');
    floor bigint := timeline_floor();
BEGIN
    IF drawn > floor THEN
        RETURN drawn;
    END IF;
    PERFORM pg_advisory_xact_lock(8387236825053469442);
    IF (SELECT last_value FROM fence_seq) <= floor THEN
        PERFORM setval('fence_seq', floor);
    END IF;
    RETURN nextval('fence_seq');
END
$$;

-- Version 7's admission, drawing its fence with next_fence().
CREATE OR REPLACE FUNCTION admit_if_free(
    scope_keys bigint[],
    requested_id text,
    requested_scopes text[],
    requested_kind text,
    requested_owner text,
    ttl interval,
    requested_metadata jsonb,
    lock_holders boolean
) RETURNS TABLE (store_now timestamptz, outcome text, lease leases)
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
DECLARE
    scope_key bigint;
    holders leases[];
    admission_now timestamptz;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RETURN;
    END IF;
    FOREACH scope_key IN ARRAY scope_keys LOOP
        PERFORM pg_advisory_xact_lock(scope_key);
    END LOOP;
    -- Holders are locked in id order, so admissions sharing holders never
    -- deadlock; one released while this waited for its row lock is
    -- re-checked on its new version and dropped by is_active. Only the
    -- records are locked: every statement that deletes a held_scopes row
    -- updates (so locks) its record first, and only admissions, which hold
    -- the scope locks, insert them.
    IF lock_holders THEN
        holders := ARRAY(
            SELECT l FROM leases l
            WHERE l.is_active AND l.id = ANY (ARRAY(
                SELECT h.lease_id FROM held_scopes h WHERE h.scope = ANY (requested_scopes)))
            ORDER BY l.id FOR UPDATE OF l);
    ELSE
        holders := ARRAY(
            SELECT l FROM leases l
            WHERE l.is_active AND l.id = ANY (ARRAY(
                SELECT h.lease_id FROM held_scopes h WHERE h.scope = ANY (requested_scopes))));
    END IF;
    -- After the holder read: every release it saw committed before this
    -- instant, so the new record is never stamped earlier than a release.
    admission_now := clock_timestamp();
    IF EXISTS (SELECT 1 FROM leases l WHERE l.id = requested_id) THEN
        RETURN QUERY SELECT admission_now, 'taken', NULL::leases;
    ELSIF cardinality(holders) > 0 THEN
        RETURN QUERY SELECT admission_now, 'held', holder FROM unnest(holders) AS holder;
    ELSE
        RETURN QUERY
        WITH created AS (
            INSERT INTO leases AS l (id, scopes, kind, status, owner, fence, lease_expires_at,
                                     created_at, updated_at, metadata)
            VALUES (requested_id, requested_scopes, requested_kind, 'pending', requested_owner,
                    next_fence(), admission_now + ttl, admission_now, admission_now,
                    requested_metadata)
            RETURNING l),
        named AS (
            INSERT INTO lease_scopes (scope, lease_id)
            SELECT scope, requested_id FROM unnest(requested_scopes) AS scope),
        held AS (
            INSERT INTO held_scopes (scope, lease_id)
            SELECT scope, requested_id FROM unnest(requested_scopes) AS scope)
        SELECT admission_now, 'admitted', created.l FROM created;
    END IF;
END;
$$;

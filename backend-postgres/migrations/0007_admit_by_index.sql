-- tenure lease store, schema version 7: admissions that never scan `leases`.
--
-- Runs with search_path set to the store's schema, in one transaction.
-- Replaces admit_if_free (same signature, same answers, same grants) so
-- that its holder read is index lookups on every plan. Version 3 read the
-- holders as `l.id IN (SELECT h.lease_id FROM held_scopes h ...)`, whose
-- generic plan (the function always plans generically) is a hash semi-join
-- over a sequential scan of `leases`: one full scan per admission, so
-- admissions slowed as finished records piled up (measured: 20,000
-- admissions on a growing table, 20,005 sequential scans reading 197M
-- tuples, throughput halving over five rounds). Comparing `l.id` with the
-- array of holder ids gives the read an index plan; `enable_seqscan = off`
-- makes the planner take it at every table size. Without that, a session
-- whose first admission met a nearly empty table cached a sequential-scan
-- plan for good wherever nothing re-analyzed the table (autovacuum off:
-- 17,857 scans in the same run). Every statement here has an index to use.

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
                    nextval('fence_seq'), admission_now + ttl, admission_now, admission_now,
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

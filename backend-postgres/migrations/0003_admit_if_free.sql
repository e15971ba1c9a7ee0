-- tenure lease store, schema version 3: admission in one call.
--
-- Runs with search_path set to the store's schema: the function lands there,
-- and keeps that search_path (SET ... FROM CURRENT), so its statements name
-- this schema's tables whatever the caller's search_path. Its statements
-- always run on generic plans: their parameters are a few ids and scopes,
-- every plan is a handful of index lookups, and planning each call afresh
-- (which the server otherwise does, its estimates for a parameter array
-- being larger than any real one) would cost more than the work itself.
--
-- The function takes an admission's scope locks and reads the holders of
-- its scopes in one call. That is only sound because each statement of a
-- VOLATILE PL/pgSQL function takes a fresh snapshot under READ COMMITTED:
-- the holder read starts after the lock waits, so it sees everything the
-- scopes' previous lockers committed. (A single statement would not: its
-- snapshot is taken when it starts, before it waits.) In a REPEATABLE READ
-- or SERIALIZABLE transaction every statement shares the transaction's
-- snapshot, so there the function does nothing and answers no row.
--
-- It decides nothing but "no holder and a free id: admit". Everything else
-- (conflict, interrupt, retry-after) is decided by the caller from the
-- holders it answers, with the rules every backend shares.

-- scope_keys: the requested scopes' advisory-lock keys, ascending and
--   distinct (the order every admission takes them in), derived by the crate.
-- lock_holders: lock the holders (FOR UPDATE, in id order) until the end of
--   the caller's transaction, for the caller to interrupt them; otherwise
--   they are only read, and a call that admits nothing writes nothing.
--
-- Answers, each row with the admission's instant (taken after every wait):
--   'admitted', the new record: nothing held the scopes and the id was free;
--   'taken', no record: the id exists (nothing written);
--   'held', one row per active holder of the scopes (nothing written);
--   no row at all outside READ COMMITTED (nothing done).
CREATE FUNCTION admit_if_free(
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
            WHERE l.is_active AND l.id IN (
                SELECT h.lease_id FROM held_scopes h WHERE h.scope = ANY (requested_scopes))
            ORDER BY l.id FOR UPDATE OF l);
    ELSE
        holders := ARRAY(
            SELECT l FROM leases l
            WHERE l.is_active AND l.id IN (
                SELECT h.lease_id FROM held_scopes h WHERE h.scope = ANY (requested_scopes)));
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

-- tenure lease store, schema version 10: leaner admissions and fence draws.
--
-- Runs with search_path set to the store's schema, in one transaction.
--
-- An admission wrote three tables with three foreign-key checks and four
-- secondary index entries, and every fence draw (admission, takeover,
-- interruption, claim) went through next_fence(), a SECURITY DEFINER
-- function whose privilege switch and nested function calls cost about
-- as much as the rest of an admission's inserts (measured: a bare
-- fenced insert 15 % faster with nextval() in its place). Neither bought
-- safety the admission does not already have:
--
-- * the foreign keys from held_scopes stood guard over rules every
--   statement keeps by construction (a record leaves the active states in
--   the same statement that deletes its held_scopes rows; an admission
--   names its scopes in lease_scopes in the statement that holds them),
--   and the kit checks both on every run: what a scope's release and a
--   listing by scope answer;
-- * lease_scopes' foreign key only cascaded purges, which now delete the
--   pairs themselves; leases_id_activity existed only as that foreign
--   key's target, and lease_scopes_by_lease only to make the cascade
--   cheap.
--
-- Processes of version 9 already connected keep working on this schema
-- (one connecting anew refuses it as newer than it knows: upgrade the
-- library): their statements name no dropped object, and a purge they run
-- leaves the purged records' pairs in lease_scopes behind, which nothing
-- answers (listings join the record and check its scopes) and an
-- admission of the same id again passes over.
--
-- Roles that call the functions: draw_fence() and draw_fences() are new,
-- called by fenced writes as the caller (not as the schema's owner, as next_fence()
-- is), so where EXECUTE was revoked from PUBLIC, grant it, and keep
-- pg_current_wal_lsn() and pg_walfile_name() executable as they are by
-- default.

ALTER TABLE held_scopes
    DROP CONSTRAINT held_scopes_named_by_lease,
    DROP CONSTRAINT held_scopes_lease_is_active,
    DROP COLUMN lease_active;
ALTER TABLE lease_scopes DROP CONSTRAINT lease_scopes_lease_id_fkey;
ALTER TABLE leases DROP CONSTRAINT leases_id_activity;
DROP INDEX lease_scopes_by_lease;

-- The next fence, as next_fence() answers it, without its privilege switch
-- on the common path: the sequence's next value when it is above the
-- timeline's floor, next_fence() (which moves the sequence past the floor)
-- otherwise. It has no SET clause (each costs a configuration save and
-- restore per call), so its names are qualified with the schema here.
DO $migration$
BEGIN
    EXECUTE format($function$
        CREATE FUNCTION draw_fence() RETURNS bigint
        LANGUAGE plpgsql VOLATILE
        AS $body$
        DECLARE
            drawn bigint := nextval('%1$s.fence_seq');
        BEGIN
            IF drawn > %1$s.wal_timeline() * 1099511627776 THEN
                RETURN drawn;
            END IF;
            RETURN %1$s.next_fence();
        END
        $body$ $function$, quote_ident(current_schema()));
END
$migration$;

-- The next `wanted` fences, ascending, each as draw_fence() draws it, in
-- one call: a claim of many jobs draws one per job, and a function call
-- per job cost more than the draw.
DO $migration$
BEGIN
    EXECUTE format($function$
        CREATE FUNCTION draw_fences(wanted bigint) RETURNS SETOF bigint
        LANGUAGE plpgsql VOLATILE
        AS $body$
        DECLARE
            floor bigint := %1$s.wal_timeline() * 1099511627776;
            drawn bigint;
        BEGIN
            FOR i IN 1 .. wanted LOOP
                drawn := nextval('%1$s.fence_seq');
                IF drawn <= floor THEN
                    drawn := %1$s.next_fence();
                END IF;
                RETURN NEXT drawn;
            END LOOP;
        END
        $body$ $function$, quote_ident(current_schema()));
END
$migration$;

-- Version 8's admission (migration 0003 says what it answers) with the
-- leaner write: the fence from draw_fence(), the pairs in lease_scopes
-- written over any a purge of version 9 left behind, the id's existence
-- judged by the insert itself when nothing holds the scopes (so a 'taken'
-- answer may have used up a value of the fence sequence, and writes no
-- row), and held_scopes rows that hold nothing dropped.
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
    held_by text[];
    holders leases[];
    admission_now timestamptz;
    admitted leases;
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
    -- updates (so locks) its record first, but for the drop of rows that
    -- hold nothing below, and only admissions, which hold the scope locks,
    -- insert them. A holder is an active record naming a requested scope:
    -- a row of an id admitted again on other scopes after its record was
    -- deleted by hand holds nothing.
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
    -- After the holder read: every release it saw committed before this
    -- instant, so the new record is never stamped earlier than a release.
    admission_now := clock_timestamp();
    IF cardinality(holders) > 0 THEN
        IF EXISTS (SELECT 1 FROM leases l WHERE l.id = requested_id) THEN
            RETURN QUERY SELECT admission_now, 'taken', NULL::leases;
        ELSE
            RETURN QUERY SELECT admission_now, 'held', holder FROM unnest(holders) AS holder;
        END IF;
        RETURN;
    END IF;
    INSERT INTO leases AS l (id, scopes, kind, status, owner, fence, lease_expires_at,
                             created_at, updated_at, metadata)
    VALUES (requested_id, requested_scopes, requested_kind, 'pending', requested_owner,
            draw_fence(), admission_now + ttl, admission_now, admission_now,
            requested_metadata)
    ON CONFLICT (id) DO NOTHING
    RETURNING l.* INTO admitted;
    IF NOT FOUND THEN
        RETURN QUERY SELECT admission_now, 'taken', NULL::leases;
        RETURN;
    END IF;
    -- A held_scopes row whose record is gone, finished, or no longer names
    -- the scope holds nothing. Nothing this crate runs leaves one (foreign
    -- keys refused it until this version), but a record deleted or
    -- finished by hand does, and its row would refuse every admission of
    -- its scopes: it is dropped here, under the scopes' locks. A row of a
    -- record whose status is none of the five is kept: that record is
    -- reported as undecodable, never silently released.
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
    RETURN QUERY SELECT admission_now, 'admitted', admitted;
END;
$$;

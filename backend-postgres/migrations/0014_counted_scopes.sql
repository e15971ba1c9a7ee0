-- tenure lease store, schema version 14: counted scopes (semaphores).
--
-- Runs with search_path set to the store's schema, in one transaction.
--
-- A counted scope admits up to a capacity of holders at once, each in a
-- numbered slot (contract §17). A record keeps the slot it holds in each
-- counted scope in `slots`, a JSON object from scope to slot number; NULL
-- for a record with exclusive scopes only, as for every record stored
-- before (adding a nullable column without a default rewrites no row).
--
-- `held_scopes` now holds KEYS (tenure_lease_core::backend::rules::slot_key):
-- slot 0 of a scope is the scope itself, so an exclusive scope is slot 0 of
-- the counted scope of that name and every row written before means what it
-- meant; slot k above 0 is the scope, U+001F and k in decimal. No name holds
-- a control character, so no scope's key is another's, and the keys of a
-- scope are exactly the rows from the scope up to (not including) the scope
-- followed by a space, in the "C" collation: one index range. `lease_scopes`
-- keeps naming scopes, so list_by_scope lists every slot's records.
--
-- A release notice names the scope, not the key: announce_release strips
-- the slot.
--
-- The plain admission (admit_if_free, admit_if_free_limited) is unchanged:
-- a request without counted scopes holds slot 0 of each, the scope itself.
-- A request with counted scopes calls admit_counted below. Processes of
-- version 13 already connected keep working on this schema: their
-- statements name no new object and admit with exclusive scopes only, which
-- keep their rows as before.

ALTER TABLE leases ADD COLUMN slots jsonb;

CREATE OR REPLACE FUNCTION announce_release() RETURNS trigger
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    PERFORM pg_notify('tenure_released_' || md5(TG_TABLE_SCHEMA), split_part(OLD.scope, chr(31), 1));
    RETURN NULL;
END
$$;

-- admit_if_free_limited (migrations 0003, 0010 and 0013) for a request
-- with counted scopes. Arguments as there, and:
--   requested_capacities: per requested scope (same order), its capacity
--     when counted, NULL when exclusive;
--   fixed_slots: NULL to take the lowest free slot of each counted scope;
--     else per requested scope, the slot to contend for in each counted one
--     (the caller decided, under the same transaction's locks);
--   rate_lock .. latest_use: the rate limit as admit_if_free_limited takes
--     it, or all NULL for none.
--
-- Every admission touching a scope, whatever its slots, takes the scope's
-- advisory lock (scope_keys: the scope names' keys, as admit_if_free takes
-- them), so admissions of one counted scope take turns and each sees what
-- the one before committed. Under them, for each counted scope (in scope
-- order), the function reads the active holders of its slots below the
-- request's capacity (one index range of held_scopes) and contends for the
-- lowest free slot; when none is free, the scope is "full" and every one of
-- those holders is answered, for the caller to choose a slot
-- (rules::choose_slot). Exclusive scopes contend for slot 0.
--
-- Answers, each row with the admission's instant (after every wait) and
-- slots_chosen (per requested scope: the slot contended for in a counted
-- scope, NULL in a full or exclusive one):
--   'admitted', the new record (with its slots): nothing held the keys
--     contended for, no scope was full, the id was free (and the rate limit
--     had a permit left: one use written);
--   'taken', no record: the id exists (nothing written);
--   'held', one row per active holder of a key contended for or of a slot
--     of a full scope (nothing written; locked, in id order, when
--     lock_holders);
--   'rate_limited', 'rate_log_damaged': as admit_if_free_limited;
--   no row at all outside READ COMMITTED (nothing done).
-- A holder of a full scope released while the call read the holders makes
-- it read them again.
CREATE FUNCTION admit_counted(
    scope_keys bigint[],
    requested_id text,
    requested_scopes text[],
    requested_capacities integer[],
    fixed_slots integer[],
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
) RETURNS TABLE (store_now timestamptz, outcome text, lease leases, rate_uses bigint[],
                 slots_chosen integer[])
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
DECLARE
    scope_key bigint;
    scope_count integer := cardinality(requested_scopes);
    i integer;
    this_scope text;
    this_slot integer;
    chosen integer[];
    -- The keys contended for, one per requested scope but the full ones,
    -- with the scope and slot each stands for.
    key_scopes text[];
    key_slots integer[];
    keys text[];
    taken_slots integer[];
    taken_by text[];
    live text[];
    full_holders text[];
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
    LOOP
        chosen := array_fill(NULL::integer, ARRAY[scope_count]);
        key_scopes := '{}';
        key_slots := '{}';
        full_holders := '{}';
        FOR i IN 1 .. scope_count LOOP
            this_scope := requested_scopes[i];
            IF requested_capacities[i] IS NULL THEN
                this_slot := 0;
            ELSIF fixed_slots IS NOT NULL THEN
                this_slot := fixed_slots[i];
                chosen[i] := this_slot;
            ELSE
                -- The active holders of the scope's slots below the
                -- capacity: each key of the scope (the scope, or the scope,
                -- U+001F and a slot number) whose record is active and
                -- names the scope, as admit_if_free judges a holder (its
                -- slots are the crate's to read: one that does not decode
                -- stops the admission as Corrupt). The rows first, then
                -- their records by id: an index range, then index lookups,
                -- whatever the tables hold.
                SELECT coalesce(array_agg(k.slot), '{}'), coalesce(array_agg(k.lease_id), '{}')
                    INTO taken_slots, taken_by
                FROM (SELECT h.lease_id,
                          CASE WHEN h.scope = this_scope THEN 0
                               WHEN substr(h.scope, char_length(this_scope) + 1, 1) = chr(31)
                                    AND substr(h.scope, char_length(this_scope) + 2) ~ '^[1-9][0-9]{0,8}$'
                               THEN substr(h.scope, char_length(this_scope) + 2)::integer
                          END AS slot
                      FROM held_scopes h
                      WHERE h.scope >= this_scope AND h.scope < this_scope || ' ') k
                WHERE k.slot < requested_capacities[i];
                live := ARRAY(SELECT l.id FROM leases l
                              WHERE l.id = ANY (taken_by) AND l.is_active
                                  AND this_scope = ANY (l.scopes));
                SELECT coalesce(array_agg(k.slot), '{}'), coalesce(array_agg(k.lease_id), '{}')
                    INTO taken_slots, taken_by
                FROM unnest(taken_slots, taken_by) AS k(slot, lease_id)
                JOIN unnest(live) AS v(id) ON v.id = k.lease_id;
                this_slot := (SELECT min(free.slot)
                         FROM generate_series(0, requested_capacities[i] - 1) AS free(slot)
                         WHERE NOT EXISTS (SELECT 1 FROM unnest(taken_slots) AS t(slot)
                                           WHERE t.slot = free.slot));
                IF this_slot IS NULL THEN
                    full_holders := full_holders || taken_by;
                    CONTINUE;
                END IF;
                chosen[i] := this_slot;
            END IF;
            key_scopes := key_scopes || this_scope;
            key_slots := key_slots || this_slot;
        END LOOP;
        keys := ARRAY(SELECT CASE WHEN k.slot = 0 THEN k.scope ELSE k.scope || chr(31) || k.slot END
                      FROM unnest(key_scopes, key_slots) AS k(scope, slot));
        -- The holders: active records holding a key contended for (naming
        -- its scope), and those of the full scopes' slots; locked in id
        -- order, as admit_if_free locks them.
        held_by := ARRAY(SELECT h.lease_id FROM held_scopes h WHERE h.scope = ANY (keys))
            || full_holders;
        IF lock_holders THEN
            holders := ARRAY(
                SELECT l FROM leases l
                WHERE l.is_active AND l.id = ANY (held_by)
                    AND (l.id = ANY (full_holders) OR l.scopes && key_scopes)
                ORDER BY l.id FOR UPDATE OF l);
        ELSE
            holders := ARRAY(
                SELECT l FROM leases l
                WHERE l.is_active AND l.id = ANY (held_by)
                    AND (l.id = ANY (full_holders) OR l.scopes && key_scopes));
        END IF;
        -- A full scope's holder released meanwhile freed its slot: read
        -- again (under the same scope locks; the released holder stays
        -- released).
        EXIT WHEN NOT EXISTS (SELECT 1 FROM unnest(full_holders) AS f(id)
                              WHERE f.id <> ALL (ARRAY(SELECT u.id FROM unnest(holders) AS u)));
    END LOOP;
    admission_now := clock_timestamp();
    IF cardinality(holders) > 0 THEN
        IF EXISTS (SELECT 1 FROM leases l WHERE l.id = requested_id) THEN
            RETURN QUERY SELECT admission_now, 'taken', NULL::leases, NULL::bigint[], chosen;
        ELSE
            RETURN QUERY SELECT admission_now, 'held', holder, NULL::bigint[], chosen
                FROM unnest(holders) AS holder;
        END IF;
        RETURN;
    END IF;
    IF rate_lock IS NOT NULL THEN
        IF EXISTS (SELECT 1 FROM leases l WHERE l.id = requested_id) THEN
            RETURN QUERY SELECT clock_timestamp(), 'taken', NULL::leases, NULL::bigint[], chosen;
            RETURN;
        END IF;
        SELECT * INTO rate_log FROM lock_rate_log(
            rate_lock, rate_key, rate_permits, rate_period_ms, earliest_use, latest_use);
        IF rate_log.damaged THEN
            RETURN QUERY SELECT rate_log.judged_at, 'rate_log_damaged', NULL::leases,
                rate_log.uses, chosen;
            RETURN;
        END IF;
        IF rate_log.permits_left = 0 THEN
            RETURN QUERY SELECT rate_log.judged_at, 'rate_limited', NULL::leases,
                rate_log.uses, chosen;
            RETURN;
        END IF;
        admission_now := rate_log.judged_at;
    END IF;
    INSERT INTO leases AS l (id, scopes, slots, kind, status, owner, fence, lease_expires_at,
                             created_at, updated_at, metadata)
    VALUES (requested_id, requested_scopes,
            (SELECT jsonb_object_agg(requested_scopes[c], chosen[c])
             FROM generate_subscripts(requested_scopes, 1) AS c
             WHERE requested_capacities[c] IS NOT NULL),
            requested_kind, 'pending', requested_owner,
            draw_fence(), admission_now + ttl, admission_now, admission_now,
            requested_metadata)
    ON CONFLICT (id) DO NOTHING
    RETURNING l.* INTO admitted;
    IF NOT FOUND THEN
        RETURN QUERY SELECT admission_now, 'taken', NULL::leases, NULL::bigint[], chosen;
        RETURN;
    END IF;
    -- A held_scopes row of a key taken here whose record is gone, finished,
    -- or does not name the key's scope holds nothing (as in admit_if_free):
    -- it is dropped, under the scopes' locks. A row of a record whose
    -- status is none of the five is kept.
    IF cardinality(held_by) > 0 THEN
        DELETE FROM held_scopes h WHERE h.scope = ANY (keys)
            AND NOT EXISTS (SELECT 1 FROM leases l
                JOIN unnest(key_scopes, keys) AS k(scope, key) ON k.key = h.scope
                WHERE l.id = h.lease_id AND k.scope = ANY (l.scopes)
                    AND l.status NOT IN ('interrupted', 'succeeded', 'failed'));
    END IF;
    INSERT INTO lease_scopes (scope, lease_id)
    SELECT s, requested_id FROM unnest(requested_scopes) AS s
    ON CONFLICT DO NOTHING;
    INSERT INTO held_scopes (scope, lease_id)
    SELECT k, requested_id FROM unnest(keys) AS k;
    IF rate_lock IS NOT NULL THEN
        INSERT INTO rate_logs AS r (key, permits, period_ms, uses, ends_at)
        SELECT rate_key, rate_permits, rate_period_ms, spent.spent_uses, spent.spent_ends_at
        FROM spent_rate_log(rate_log.uses, rate_permits, rate_period_ms, rate_log.judged_at,
                            rate_log.judged_micros, 1) AS spent
        ON CONFLICT (key, permits, period_ms)
        DO UPDATE SET uses = EXCLUDED.uses, ends_at = EXCLUDED.ends_at;
    END IF;
    RETURN QUERY SELECT admission_now, 'admitted', admitted, NULL::bigint[], chosen;
END;
$$;

-- tenure lease store, schema version 9: release notices.
--
-- Runs with search_path set to the store's schema, in one transaction.
--
-- A scope is free when its `held_scopes` row is deleted: by a transition
-- or takeover to an inactive status, or by an interrupting admission that
-- takes the scope again in the same transaction. Each deletion notifies
-- the schema's channel, `tenure_released_` and the md5 of the schema's
-- name (a channel name has at most 63 bytes, a schema name as many), with
-- the scope as payload; the notice is delivered when the transaction
-- commits, and not at all when it rolls back. Stores listening on the
-- channel (PgStore::releases) wake the callers waiting for that scope
-- instead of leaving them to poll. A notice is a hint: an interrupting
-- admission's notice names a scope held again. pg_notify needs no
-- privilege, so the application role needs no grant; LISTEN needs none
-- either, so any role that can connect to the database can hear the scope
-- names.

CREATE FUNCTION announce_release() RETURNS trigger
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    PERFORM pg_notify('tenure_released_' || md5(TG_TABLE_SCHEMA), OLD.scope);
    RETURN NULL;
END
$$;

CREATE TRIGGER held_scope_released AFTER DELETE ON held_scopes
    FOR EACH ROW EXECUTE FUNCTION announce_release();

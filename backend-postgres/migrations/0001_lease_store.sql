-- tenure lease store, schema version 1.
--
-- Runs with search_path set to the store's schema, so every name below lands
-- there. Identifiers and scopes use the "C" collation: byte order, the same
-- order Rust gives `String`s, so listings sort identically on every backend.

-- The store-wide fence: every admission and change of owner draws from it.
CREATE SEQUENCE fence_seq AS bigint MINVALUE 1 START WITH 1;

CREATE TABLE leases (
    id               text COLLATE "C" PRIMARY KEY,
    -- Immutable after admission; `lease_scopes` holds the same pairs, indexed.
    scopes           text[] NOT NULL DEFAULT '{}',
    kind             text NOT NULL,
    status           text NOT NULL
        CONSTRAINT leases_status_known
        CHECK (status IN ('pending', 'running', 'interrupted', 'succeeded', 'failed')),
    is_active        boolean GENERATED ALWAYS AS (status IN ('pending', 'running')) STORED,
    owner            text,
    fence            bigint NOT NULL CONSTRAINT leases_fence_positive CHECK (fence > 0),
    lease_expires_at timestamptz,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    error            text,
    stop_reason      text,
    metadata         jsonb NOT NULL DEFAULT '{}'
        CONSTRAINT leases_metadata_object CHECK (jsonb_typeof(metadata) = 'object'),
    -- Target of held_scopes' activity foreign key below.
    CONSTRAINT leases_id_activity UNIQUE (id, is_active)
);

-- Every (scope, record) pair ever admitted, for list_by_scope.
CREATE TABLE lease_scopes (
    scope    text COLLATE "C" NOT NULL,
    lease_id text COLLATE "C" NOT NULL REFERENCES leases (id) ON DELETE CASCADE,
    PRIMARY KEY (scope, lease_id)
);
CREATE INDEX lease_scopes_by_lease ON lease_scopes (lease_id);

-- The admission lock: one row per scope held by an active record. The primary
-- key makes two active holders of one scope impossible; the foreign key on
-- (lease_id, lease_active) makes a record unable to leave the active states
-- while it still holds a scope (the release must happen in the same
-- statement or transaction).
CREATE TABLE held_scopes (
    scope        text COLLATE "C" PRIMARY KEY,
    lease_id     text COLLATE "C" NOT NULL,
    lease_active boolean NOT NULL DEFAULT true CONSTRAINT held_scopes_only_active CHECK (lease_active),
    CONSTRAINT held_scopes_named_by_lease
        FOREIGN KEY (scope, lease_id) REFERENCES lease_scopes (scope, lease_id) ON DELETE CASCADE,
    CONSTRAINT held_scopes_lease_is_active
        FOREIGN KEY (lease_id, lease_active) REFERENCES leases (id, is_active)
);
CREATE INDEX held_scopes_by_lease ON held_scopes (lease_id);

-- list_expired: active (or undecodable) records by expiry, no lease first.
CREATE INDEX leases_expiry ON leases (lease_expires_at NULLS FIRST, id)
    WHERE status NOT IN ('interrupted', 'succeeded', 'failed');

-- purge: terminal records by age.
CREATE INDEX leases_terminal_age ON leases (updated_at)
    WHERE status IN ('succeeded', 'failed');

-- tenure fence gates, schema version 5 (contract §7).
--
-- Runs with search_path set to the store's schema.

-- One row per resource: the highest fence accepted, and the store time of
-- the last accepted check (purge_fences finds unused gates by it).
CREATE TABLE fence_gates (
    resource   text COLLATE "C" PRIMARY KEY,
    fence      bigint NOT NULL CONSTRAINT fence_gates_fence_positive CHECK (fence > 0),
    checked_at timestamptz NOT NULL
);
CREATE INDEX fence_gates_by_check ON fence_gates (checked_at);

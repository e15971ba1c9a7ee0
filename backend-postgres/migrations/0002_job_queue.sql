-- tenure job queue, schema version 2.
--
-- Runs with search_path set to the store's schema. Jobs draw their fences
-- from the same fence_seq as leases (version 1), so a job claim and a lease
-- admission never share a fence. Ids and queue names use the "C" collation,
-- like the lease tables: byte order, the order Rust gives `String`s.

CREATE TABLE jobs (
    id                    text COLLATE "C" PRIMARY KEY,
    queue                 text COLLATE "C" NOT NULL,
    payload               jsonb NOT NULL,
    priority              integer NOT NULL,
    run_at                timestamptz NOT NULL,
    attempt               integer NOT NULL CONSTRAINT jobs_attempt_counted CHECK (attempt >= 0),
    max_attempts          integer NOT NULL CONSTRAINT jobs_max_attempts_positive CHECK (max_attempts > 0),
    required_capabilities text[] NOT NULL DEFAULT '{}',
    state                 text NOT NULL
        CONSTRAINT jobs_state_known
        CHECK (state IN ('queued', 'claimed', 'completed', 'dead_lettered')),
    -- The holder of the latest claim: kept after the claim ends, so the live
    -- copy of a reaped job can prove it held that claim (take_back).
    owner                 text,
    -- 0 until the first claim.
    fence                 bigint NOT NULL DEFAULT 0 CONSTRAINT jobs_fence_counted CHECK (fence >= 0),
    lease_expires_at      timestamptz,
    last_error            text,
    dead_reason           text
        CONSTRAINT jobs_dead_reason_known
        CHECK (dead_reason IN ('lease_expired', 'attempts_exhausted', 'failed')),
    created_at            timestamptz NOT NULL,
    updated_at            timestamptz NOT NULL
);

-- claim: the visible jobs of a queue, best first. Partial on the state, so
-- claimed and finished jobs cost the claimer nothing.
CREATE INDEX jobs_claim_order ON jobs (queue, priority DESC, run_at, created_at, id)
    WHERE state = 'queued';

-- reap: claimed jobs by expiry.
CREATE INDEX jobs_claim_expiry ON jobs (lease_expires_at, id)
    WHERE state = 'claimed';

-- list_dead_letters: a queue's dead letters, oldest update first.
CREATE INDEX jobs_dead_letters ON jobs (queue, updated_at, id)
    WHERE state = 'dead_lettered';

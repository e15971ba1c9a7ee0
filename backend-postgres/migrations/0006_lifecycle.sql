-- tenure lease store and job queue, schema version 6: no dead ends.
--
-- Runs with search_path set to the store's schema, in one transaction.
-- Every change is additive for the code of version 5, which keeps working
-- on it. Until the migration commits, DROP INDEX holds an ACCESS EXCLUSIVE
-- lock on `leases` and ALTER TABLE one on `jobs` (blocking reads too), and
-- the CHECK scans every job: on large tables, upgrade at a quiet moment.

-- purge: records that hold no scope (interrupted or terminal) by last
-- update, their interruption or finish time. Replaces leases_terminal_age,
-- which left interrupted records out. Building it scans `leases` once.
CREATE INDEX leases_finished_age ON leases (updated_at)
    WHERE status IN ('interrupted', 'succeeded', 'failed');
DROP INDEX leases_terminal_age;

-- take_back's trace on the job: how many times its worker took it back
-- after a false dead letter, and when last. Every job stored before counts
-- 0 (a constant default: adding the columns rewrites no row).
ALTER TABLE jobs
    ADD COLUMN taken_back bigint NOT NULL DEFAULT 0
        CONSTRAINT jobs_taken_back_counted CHECK (taken_back BETWEEN 0 AND 4294967295),
    ADD COLUMN taken_back_at timestamptz;

-- tenure job queue, schema version 4: job retention.
--
-- Runs with search_path set to the store's schema.

-- purge_jobs: finished jobs (completed or dead-lettered) by last update,
-- which is their finish time. Building it locks writes to `jobs` for as
-- long as the build takes (one scan of the table).
CREATE INDEX jobs_finished_age ON jobs (updated_at)
    WHERE state IN ('completed', 'dead_lettered');

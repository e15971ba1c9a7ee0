-- tenure job queue, schema version 12: unique jobs.
--
-- Runs with search_path set to the store's schema, in one transaction.
--
-- A job may be enqueued with a uniqueness key in its queue
-- (JobQueue::enqueue_unique): the key, the kind of its policy
-- ('while_queued', 'while_unfinished' or 'for_period') and, for a period,
-- its end (created_at plus the period: the period is read back as
-- unique_until - created_at, and purge_jobs keeps the job until then).
-- All three are NULL for a job without a key, as for every job stored
-- before. Adding nullable columns without a default rewrites no row; the
-- CHECK and the index each scan `jobs` once, under a lock that blocks its
-- writes until the migration commits. Processes of version 11 already
-- connected keep working on this schema: their statements name no new
-- object and the jobs they enqueue have no key, but their purge_jobs may
-- delete a finished job before its period ends, freeing its key early.

ALTER TABLE jobs
    ADD COLUMN unique_key text COLLATE "C",
    ADD COLUMN unique_policy text
        CONSTRAINT jobs_unique_policy_known
        CHECK (unique_policy IN ('while_queued', 'while_unfinished', 'for_period')),
    ADD COLUMN unique_until timestamptz;

-- enqueue_unique: the jobs of a queue with a key, looked up by the key
-- while the enqueue holds the key's advisory lock.
CREATE INDEX jobs_unique_key ON jobs (queue, unique_key)
    WHERE unique_key IS NOT NULL;

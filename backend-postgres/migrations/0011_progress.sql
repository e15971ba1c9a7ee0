-- tenure lease store, schema version 11: progress reports.
--
-- Runs with search_path set to the store's schema, in one transaction.
--
-- A holder may report progress with a renewal, in the same fenced update
-- (LeaseStore::renew_with_progress, JobQueue::renew_job_with_progress):
-- any JSON value, kept until the next report, NULL until the first.
-- Adding a nullable column without a default rewrites no row. Processes
-- of version 10 already connected keep working on this schema: their
-- statements name no new object and never touch the column.

ALTER TABLE leases ADD COLUMN progress jsonb;
ALTER TABLE jobs ADD COLUMN progress jsonb;

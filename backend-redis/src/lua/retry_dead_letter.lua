-- retry_dead_letter: an operator's retry (contract §9 (tenure_lease_core::contract),
-- rules::retry_dead_letter): queued again, attempts reset, visible at once.
-- KEYS[1] job hash.
-- ARGV[1] key prefix (the job's queue keys are built from it), ARGV[2] id.
-- Reply: { 'requeued', job } | { 'missing' } | { 'not_dead_lettered', state }
-- where a job is { id, field pairs }.

local prefix, id = ARGV[1], ARGV[2]
local job = load_job(KEYS[1], id)
if not job then
  return { 'missing' }
end
if job.state ~= 'dead_lettered' then
  return { 'not_dead_lettered', job.state }
end
local now = now_us()
local now_text = fmt(now)
write_fields(job, { 'state', 'queued', 'attempt', '0', 'run_at', now_text,
  'updated', now_text })
delete_field(job, 'dead')
redis.call('ZREM', prefix .. 'dead:' .. job.queue, id)
redis.call('ZREM', prefix .. 'finished', id)
index_queued(prefix, id, job.queue, job.priority, job.fields.created, now_text,
  time_rank(now_text), now)
return { 'requeued', reply_record(job) }

-- enqueue and enqueue_batch: adds jobs, all or none
-- (contract §9 (tenure_lease_core::contract), rules::new_job).
-- Every id is checked before the first write.
-- KEYS[i] job hash of job i (i = 1..n).
-- ARGV[1] key prefix (the queues' ready and delayed keys are built from it),
-- then 8 values per job i, from ARGV[8i-6]: id, queue, payload JSON,
--   priority, run_at in us ('' = now), run_at in claim rank form ('' = now),
--   max_attempts, required capabilities as a JSON array.
-- Reply: { 'exists', id } (nothing written) | { 'enqueued', now }
-- where now is store time in us, the jobs' created_at.

local prefix = ARGV[1]
for i = 1, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    return { 'exists', ARGV[8 * i - 6] }
  end
end

local now = now_us()
local now_text = fmt(now)
for i = 1, #KEYS do
  local base = 8 * i - 7
  local id, queue, priority = ARGV[base + 1], ARGV[base + 2], tonumber(ARGV[base + 4])
  local run_at, run_at_rank = ARGV[base + 5], ARGV[base + 6]
  if run_at == '' then
    run_at, run_at_rank = now_text, time_rank(now_text)
  end
  redis.call('HSET', KEYS[i], 'queue', queue, 'payload', ARGV[base + 3],
    'priority', ARGV[base + 4], 'run_at', run_at, 'attempt', '0',
    'max_attempts', ARGV[base + 7], 'caps', ARGV[base + 8], 'state', 'queued',
    'fence', '0', 'created', now_text, 'updated', now_text)
  index_queued(prefix, id, queue, priority, now_text, run_at, run_at_rank, now)
end
return { 'enqueued', now_text }

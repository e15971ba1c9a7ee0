-- reap: handles claimed jobs whose lease expired beyond grace, oldest expiry
-- first, then by id (contract §9 (tenure_lease_core::contract), rules::reapable,
-- rules::reap_order, rules::reap_job).
-- KEYS[1] claimed zset.
-- ARGV[1] key prefix (job hashes and queue keys are built from it),
-- ARGV[2] grace in us (rounded up), ARGV[3] most entries looked at.
-- Reply: { { { 'requeued' | 'dead_lettered', job }, ... }, { { id, reason }, ... } }:
-- the jobs handled, as they now are and in reap order, where a job is
-- { id, field pairs }; then the jobs met that could not be judged (left
-- alone, reported by the caller).

local prefix = ARGV[1]
local now = now_us()
local grace = tonumber(ARGV[2])
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', fmt(now - grace),
  'LIMIT', 0, tonumber(ARGV[3]))

local expired, stale, skipped = {}, {}, {}
for _, id in ipairs(ids) do
  local key = prefix .. 'job:' .. id
  local ok, job = pcall(load_job, key, id)
  if not ok then
    skipped[#skipped + 1] = { id, failure_reason(job) }
  elseif job and job.state == 'claimed' and job.expires ~= nil then
    if job.expires + grace <= now then
      expired[#expired + 1] = job
    else
      stale[#stale + 1] = { id, fmt(job.expires) }
    end
  else
    stale[#stale + 1] = { id }
  end
end

-- Decided: from here on only writes. Entries that disagree with their job
-- are corrected: dropped, or scored by the job's own expiry.
for _, entry in ipairs(stale) do
  if entry[2] then
    redis.call('ZADD', KEYS[1], entry[2], entry[1])
  else
    redis.call('ZREM', KEYS[1], entry[1])
  end
end
local handled = {}
for _, job in ipairs(expired) do
  local outcome = 'requeued'
  if job.attempt < job.max_attempts then
    requeue(prefix, job, now, now)
  else
    dead_letter(prefix, job, 'lease_expired', now)
    outcome = 'dead_lettered'
  end
  handled[#handled + 1] = { outcome, reply_record(job) }
end
return { handled, skipped }

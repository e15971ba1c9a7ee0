-- renew_jobs: extends the leases of a batch of job claims, each judged and
-- written as renew_job.lua does (contract §9 (tenure_lease_core::contract),
-- rules::judge_job, rules::renew_job), all at one now.
-- Every claim is judged before any job is written, so a corrupt job fails
-- the whole call with nothing written. Each job is named once (validated
-- by the caller).
-- KEYS[1] claimed zset, KEYS[1+i] job hash of claim i (i = 1..n).
-- ARGV[1] ttl in us; per claim i: ARGV[3i-1] id, ARGV[3i] owner,
-- ARGV[3i+1] fence.
-- Reply: { reply of claim 1, ..., reply of claim n }, each as renew_job.lua's:
--   { 'renewed', expires_at in us } | { 'lost', loss... }.

local count = #KEYS - 1
local losses = {}
for i = 1, count do
  local base = 3 * (i - 1) + 1
  losses[i] = judge_job(load_job(KEYS[1 + i], ARGV[base + 1]), ARGV[base + 2], ARGV[base + 3])
end
local now = now_us()
local expires = fmt(now + tonumber(ARGV[1]))
local updated = fmt(now)
local replies = {}
for i = 1, count do
  if losses[i] then
    replies[i] = { 'lost', unpack(losses[i]) }
  else
    local key, id = KEYS[1 + i], ARGV[3 * (i - 1) + 2]
    redis.call('HSET', key, 'expires', expires, 'updated', updated)
    redis.call('ZADD', KEYS[1], expires, id)
    replies[i] = { 'renewed', expires }
  end
end
return replies

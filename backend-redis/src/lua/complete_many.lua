-- complete_many: the fenced "done" write of a batch of job claims, each
-- judged and written as complete.lua does (contract §9
-- (tenure_lease_core::contract), rules::judge_job, rules::complete_job).
-- Every claim is judged before any job is written, so a corrupt job fails
-- the whole call with nothing written. Each job is named once (validated
-- by the caller).
-- KEYS[1] claimed zset, KEYS[2] finished zset, KEYS[2+i] job hash of claim i
-- (i = 1..n).
-- ARGV per claim i: ARGV[3i-2] id, ARGV[3i-1] owner, ARGV[3i] fence.
-- Reply: { reply of claim 1, ..., reply of claim n }, each as complete.lua's:
--   { 'settled', job } | { 'rejected', loss... }.

local count = #KEYS - 2
local jobs, losses = {}, {}
for i = 1, count do
  local base = 3 * (i - 1)
  jobs[i] = load_job(KEYS[2 + i], ARGV[base + 1])
  losses[i] = judge_job(jobs[i], ARGV[base + 2], ARGV[base + 3])
end
local now = now_us()
local replies = {}
for i = 1, count do
  if losses[i] then
    replies[i] = { 'rejected', unpack(losses[i]) }
  else
    complete_job(jobs[i], KEYS[1], KEYS[2], now)
    replies[i] = { 'settled', reply_record(jobs[i]) }
  end
end
return replies

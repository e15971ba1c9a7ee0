-- complete: the fenced "done" write (contract §9 (tenure_lease_core::contract),
-- rules::judge_job, rules::complete_job).
-- KEYS[1] job hash, KEYS[2] claimed zset, KEYS[3] finished zset.
-- ARGV[1] id, ARGV[2] owner, ARGV[3] fence.
-- Reply: { 'settled', job } | { 'rejected', loss... } with the loss parts of
-- renew_job.lua, where a job is { id, field pairs }.

local job = load_job(KEYS[1], ARGV[1])
local loss = judge_job(job, ARGV[2], ARGV[3])
if loss then
  return { 'rejected', unpack(loss) }
end
complete_job(job, KEYS[2], KEYS[3], now_us())
return { 'settled', reply_record(job) }

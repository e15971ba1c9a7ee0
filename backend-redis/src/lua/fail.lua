-- fail: records a failed attempt (contract §9 (tenure_lease_core::contract),
-- rules::judge_job, rules::fail_job).
-- KEYS[1] job hash.
-- ARGV[1] key prefix (the claimed zset and the job's queue keys are built
-- from it), ARGV[2] id, ARGV[3] owner, ARGV[4] fence,
-- ARGV[5] 'retry' | 'dead_letter', ARGV[6] backoff in us (retry),
-- ARGV[7] error text.
-- Reply: { 'settled', job } | { 'rejected', loss... } with the loss parts of
-- renew_job.lua, where a job is { id, field pairs }.

local prefix, id = ARGV[1], ARGV[2]
local job = load_job(KEYS[1], id)
local loss = judge_job(job, ARGV[3], ARGV[4])
if loss then
  return { 'rejected', unpack(loss) }
end
local now = now_us()
write_fields(job, { 'error', ARGV[7] })
if ARGV[5] == 'retry' and job.attempt < job.max_attempts then
  requeue(prefix, job, now + tonumber(ARGV[6]), now)
elseif ARGV[5] == 'retry' then
  dead_letter(prefix, job, 'attempts_exhausted', now)
else
  dead_letter(prefix, job, 'failed', now)
end
return { 'settled', reply_record(job) }

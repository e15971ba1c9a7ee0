-- defer: the worker cannot run the job (contract §9 (tenure_lease_core::contract),
-- rules::judge_job, rules::defer_job): un-claimed, attempt refunded, the
-- missing capabilities added to its requirements, visible at once.
-- KEYS[1] job hash.
-- ARGV[1] key prefix (the claimed zset and the job's queue keys are built
-- from it), ARGV[2] id, ARGV[3] owner, ARGV[4] fence,
-- ARGV[5..] the missing capabilities.
-- Reply: { 'settled', job } | { 'rejected', loss... } with the loss parts of
-- renew_job.lua, where a job is { id, field pairs }.

local prefix, id = ARGV[1], ARGV[2]
local job = load_job(KEYS[1], id)
local loss = judge_job(job, ARGV[3], ARGV[4])
if loss then
  return { 'rejected', unpack(loss) }
end
local required = {}
for _, cap in ipairs(job.caps) do
  required[cap] = true
end
for i = 5, #ARGV do
  required[ARGV[i]] = true
end
local now = now_us()
write_fields(job, { 'attempt', fmt(math.max(job.attempt - 1, 0)),
  'caps', encode_set(required) })
requeue(prefix, job, now, now)
return { 'settled', reply_record(job) }

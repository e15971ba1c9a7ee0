-- complete: the fenced "done" write (contract §9 (tenure_lease_core::contract),
-- rules::judge_job, rules::complete_job).
-- KEYS[1] job hash, KEYS[2] claimed zset, KEYS[3] finished zset.
-- ARGV[1] id, ARGV[2] owner, ARGV[3] fence.
-- Reply: { 'settled', job } | { 'rejected', loss... } with the loss parts of
-- renew_job.lua, where a job is { id, HGETALL pairs }.

local id = ARGV[1]
local loss = judge_job(load_job(KEYS[1], id), ARGV[2], ARGV[3])
if loss then
  return { 'rejected', unpack(loss) }
end
local now = now_us()
redis.call('HSET', KEYS[1], 'state', 'completed', 'updated', fmt(now))
redis.call('HDEL', KEYS[1], 'expires')
redis.call('ZREM', KEYS[2], id)
redis.call('ZADD', KEYS[3], fmt(now), id)
return { 'settled', reply_record(KEYS[1], id) }

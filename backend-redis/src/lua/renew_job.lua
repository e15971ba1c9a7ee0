-- renew_job: extends a claimed job's lease (contract §9
-- (tenure_lease_core::contract), rules::judge_job, rules::renew_job).
-- KEYS[1] job hash, KEYS[2] claimed zset.
-- ARGV[1] id, ARGV[2] owner, ARGV[3] fence, ARGV[4] ttl in us, ARGV[5]
-- progress (JSON text) to record, or '' for none.
-- Reply: { 'renewed', expires_at in us } | { 'lost', 'missing' }
--      | { 'lost', 'finished', state } | { 'lost', 'requeued' }
--      | { 'lost', 'owner_changed' } | { 'lost', 'fence_changed' }.

local id = ARGV[1]
local loss = judge_job(load_job(KEYS[1], id), ARGV[2], ARGV[3])
if loss then
  return { 'lost', unpack(loss) }
end
local now = now_us()
local expires = fmt(now + tonumber(ARGV[4]))
redis.call('HSET', KEYS[1], 'expires', expires, 'updated', fmt(now))
if ARGV[5] ~= '' then
  redis.call('HSET', KEYS[1], 'progress', ARGV[5])
end
redis.call('ZADD', KEYS[2], expires, id)
return { 'renewed', expires }

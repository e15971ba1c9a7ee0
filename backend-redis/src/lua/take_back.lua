-- take_back: a live copy takes back a job the reaper dead-lettered
-- (contract §9 (tenure_lease_core::contract), rules::judge_take_back,
-- rules::take_back_job), counting it on the job (taken_back, taken_back_at).
-- KEYS[1] job hash, KEYS[2] fence counter, KEYS[3] claimed zset.
-- ARGV[1] key prefix (the job's dead-letter and finished keys are built
-- from it),
-- ARGV[2] id, ARGV[3] owner, ARGV[4] fence, ARGV[5] ttl in us.
-- Reply: { 'taken', job } | { 'refused', 'missing' }
--      | { 'refused', 'not_dead_lettered', state }
--      | { 'refused', 'not_by_reaper', reason }
--      | { 'refused', 'not_the_reaped_claim' }
-- where a job is { id, field pairs }.

local prefix, id = ARGV[1], ARGV[2]
local job = load_job(KEYS[1], id)
if not job then
  return { 'refused', 'missing' }
end
if job.state ~= 'dead_lettered' or job.fields.dead == nil then
  return { 'refused', 'not_dead_lettered', job.state }
end
if job.fields.dead ~= 'lease_expired' then
  return { 'refused', 'not_by_reaper', job.fields.dead }
end
if job.owner ~= ARGV[3] or job.fence ~= ARGV[4] then
  return { 'refused', 'not_the_reaped_claim' }
end

local now = now_us()
local fence = draw_fence(fence_counter(KEYS[2], now))
local expires = fmt(now + tonumber(ARGV[5]))
write_fields(job, { 'state', 'claimed', 'fence', fmt(fence), 'expires', expires,
  'updated', fmt(now), 'taken_back', fmt(math.min(job.taken_back + 1, 4294967295)),
  'taken_back_at', fmt(now) })
delete_field(job, 'dead')
redis.call('ZREM', prefix .. 'dead:' .. job.queue, id)
redis.call('ZREM', prefix .. 'finished', id)
redis.call('ZADD', KEYS[3], expires, id)
return { 'taken', reply_record(job) }

-- The queue's script floor, claim side (`--redis-floor`): the least a claim
-- of one can do on tenure's job layout (backend-redis/src/lua/queue_common.lua)
-- and still hand out a fence that outlives a failover. Left out, against
-- tenure's claim: the delayed index, capabilities, validation of any field,
-- stale entries, batches. Written against floor_prelude.lua (now_us,
-- draw_fence).
-- KEYS[1] ready zset (members: 50 rank characters, then the id),
-- KEYS[2] fence counter, KEYS[3] failover epoch hash, KEYS[4] claimed zset.
-- ARGV[1] job key prefix (the job's key is the prefix and its id),
-- ARGV[2] worker, ARGV[3] ttl in us.
-- Reply: {} when nothing is ready, else { id, fence, { job field pairs } }.

local now = now_us()
local ranks = redis.call('ZRANGE', KEYS[1], 0, 0)
if #ranks == 0 then
  return {}
end
local id = string.sub(ranks[1], 51)

local fence = draw_fence(KEYS[2], KEYS[3], now)

local key = ARGV[1] .. id
local expires = string.format('%d', now + tonumber(ARGV[3]))
redis.call('HSET', key, 'state', 'claimed', 'owner', ARGV[2], 'fence', fence,
  'attempt', '1', 'expires', expires, 'updated', string.format('%d', now))
redis.call('ZREM', KEYS[1], ranks[1])
redis.call('ZADD', KEYS[4], expires, id)
return { id, fence, redis.call('HGETALL', key) }

-- The queue's script floor, claim side (`--redis-floor`): the least a claim
-- of one can do on tenure's job layout (backend-redis/src/lua/queue_common.lua)
-- and still hand out a fence that outlives a failover. Left out, against
-- tenure's claim: the delayed index, capabilities, validation of any field,
-- stale entries, batches.
-- KEYS[1] ready zset (members: 50 rank characters, then the id),
-- KEYS[2] fence counter, KEYS[3] failover epoch hash, KEYS[4] claimed zset.
-- ARGV[1] job key prefix (the job's key is the prefix and its id),
-- ARGV[2] worker, ARGV[3] ttl in us.
-- Reply: {} when nothing is ready, else { id, fence, { job field pairs } }.

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local ranks = redis.call('ZRANGE', KEYS[1], 0, 0)
if #ranks == 0 then
  return {}
end
local id = string.sub(ranks[1], 51)

local last = tonumber(redis.call('GET', KEYS[2]) or '0')
local replid = string.match(redis.call('INFO', 'replication'), 'master_replid:(%x+)') or ''
local epoch = redis.call('HMGET', KEYS[3], 'replid', 'floor')
local fence = string.format('%d', math.max(last + 1, now))
redis.call('SET', KEYS[2], fence)
if epoch[1] ~= replid then
  redis.call('HSET', KEYS[3], 'replid', replid, 'floor', fence)
end

local key = ARGV[1] .. id
local expires = string.format('%d', now + tonumber(ARGV[3]))
redis.call('HSET', key, 'state', 'claimed', 'owner', ARGV[2], 'fence', fence,
  'attempt', '1', 'expires', expires, 'updated', string.format('%d', now))
redis.call('ZREM', KEYS[1], ranks[1])
redis.call('ZADD', KEYS[4], expires, id)
return { id, fence, redis.call('HGETALL', key) }

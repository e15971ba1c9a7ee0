-- The queue's script floor, completion side (`--redis-floor`): the least a
-- fenced completion can do on tenure's job layout: judge the three fields
-- tenure judges, write the state and the indexes, answer the job. Left
-- out, against tenure's complete: validation of any field.
-- KEYS[1] job hash, KEYS[2] claimed zset, KEYS[3] finished zset.
-- ARGV[1] id, ARGV[2] worker, ARGV[3] fence.
-- Reply: 0 when the claim no longer holds the job, else { id, { job field
-- pairs } }.

local held = redis.call('HMGET', KEYS[1], 'state', 'owner', 'fence')
if held[1] ~= 'claimed' or held[2] ~= ARGV[2] or held[3] ~= ARGV[3] then
  return 0
end
local time = redis.call('TIME')
local now = string.format('%d', tonumber(time[1]) * 1000000 + tonumber(time[2]))
redis.call('HSET', KEYS[1], 'state', 'completed', 'updated', now)
redis.call('HDEL', KEYS[1], 'expires')
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZADD', KEYS[3], now, ARGV[1])
return { ARGV[1], redis.call('HGETALL', KEYS[1]) }

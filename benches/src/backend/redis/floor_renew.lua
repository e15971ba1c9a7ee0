-- The script floor, fenced write side (`--redis-floor`): the least a
-- fenced renewal can do on tenure's record layout: judge the three fields
-- tenure judges, write the expiry and its index. Left out, against
-- tenure's renew: checking that the status is one of the five and the
-- fence a number, batches.
-- KEYS[1] record hash, KEYS[2] expiry zset.
-- ARGV[1] id, ARGV[2] owner, ARGV[3] fence, ARGV[4] ttl in us.
-- Reply: 0 when the claim no longer holds the record, else the new expiry
-- (us).

local held = redis.call('HMGET', KEYS[1], 'status', 'owner', 'fence')
if (held[1] ~= 'pending' and held[1] ~= 'running') or held[2] ~= ARGV[2]
  or held[3] ~= ARGV[3] then
  return 0
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local expires = string.format('%d', now + tonumber(ARGV[4]))
redis.call('HSET', KEYS[1], 'expires', expires, 'updated', string.format('%d', now))
redis.call('ZADD', KEYS[2], expires, ARGV[1])
return expires

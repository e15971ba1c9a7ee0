-- The script floor, admission side (`--redis-floor`): the least an
-- admission of one scope can do on tenure's record layout
-- (backend-redis/src/lua/common.lua): refuse an id in use and a held
-- scope, draw a fence that outlives a failover, write the record, its
-- holder key and the three indexes tenure's reads need. Left out, against
-- tenure's admit: loading and judging holders, several scopes, the record
-- answered whole (the caller knows all of it but the fence and the time).
-- Written against floor_prelude.lua (now_us, draw_fence).
-- KEYS[1] record hash, KEYS[2] the scope's holder key, KEYS[3] the scope's
-- history zset, KEYS[4] active zset, KEYS[5] expiry zset, KEYS[6] fence
-- counter, KEYS[7] failover epoch hash.
-- ARGV[1] id, ARGV[2] owner, ARGV[3] ttl in us, ARGV[4] scopes as a JSON
-- array.
-- Reply: 0 when the id is in use or the scope held, else { fence, now }
-- (us).

if redis.call('EXISTS', KEYS[1]) == 1 or redis.call('EXISTS', KEYS[2]) == 1 then
  return 0
end
local now = now_us()
local fence = draw_fence(KEYS[6], KEYS[7], now)

local now_text = string.format('%d', now)
local expires = string.format('%d', now + tonumber(ARGV[3]))
redis.call('HSET', KEYS[1], 'kind', 'bench', 'status', 'pending', 'owner', ARGV[2],
  'fence', fence, 'created', now_text, 'updated', now_text, 'scopes', ARGV[4],
  'meta', '{}', 'expires', expires)
redis.call('SET', KEYS[2], ARGV[1])
redis.call('ZADD', KEYS[3], now_text, ARGV[1])
redis.call('ZADD', KEYS[4], 0, ARGV[1])
redis.call('ZADD', KEYS[5], expires, ARGV[1])
return { fence, now_text }

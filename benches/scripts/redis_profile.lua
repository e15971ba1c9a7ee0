-- redis_profile: where a Redis job script's microseconds go, measured inside
-- the server. Not a tenure script: run by hand, after the job-queue
-- preludes, on a key prefix of its own (everything it writes it deletes):
--
--   cat backend-redis/src/lua/common.lua backend-redis/src/lua/queue_common.lua \
--       benches/scripts/redis_profile.lua > /tmp/profile.lua
--   redis-cli --eval /tmp/profile.lua , 'tenure:{profile}:' 2000
--
-- KEYS: none (the job hashes are named from ARGV[1], in one hash slot).
-- ARGV[1] key prefix, ARGV[2] how many job hashes to time each step on.
-- Reply: { 'step µs-per-job', ... }: the wall time (TIME) each step of
-- claim.lua and complete_many.lua takes per job, averaged over ARGV[2]
-- jobs shaped like the benchmark's (13 fields, a tiny payload).

local prefix, n = ARGV[1], tonumber(ARGV[2])
local out = {}
local function clock()
  local x = redis.call('TIME')
  return tonumber(x[1]) * 1e6 + tonumber(x[2])
end
local now = fmt(now_us())
local function key(i) return prefix .. 'job:' .. i end
for i = 1, n do
  redis.call('HSET', key(i), 'queue', 'long-run', 'payload', '{"n":' .. i .. '}', 'priority', '0',
    'run_at', now, 'attempt', '1', 'max_attempts', '3', 'caps', '[]', 'state', 'claimed',
    'owner', 'queue-worker-1', 'fence', tostring(i), 'expires', now, 'created', now, 'updated', now)
end
local function timed(name, f)
  local started = clock()
  for i = 1, n do f(i) end
  out[#out + 1] = name .. ' ' .. string.format('%.2f', (clock() - started) / n)
end
timed('empty loop', function(i) end)
timed('HMGET 4 fields', function(i) redis.call('HMGET', key(i), 'state', 'queue', 'run_at', 'caps') end)
timed('HGETALL (13 fields)', function(i) redis.call('HGETALL', key(i)) end)
timed('hash_fields (HGETALL into a table)', function(i) hash_fields(key(i)) end)
timed('load_job (hash_fields + validation + payload decode)', function(i) load_job(key(i), tostring(i)) end)
timed('cjson.decode payload', function(i) cjson.decode('{"n":' .. i .. '}') end)
timed('string_array caps', function(i) string_array(key(i), 'caps', '[]') end)
timed('HSET 6 fields', function(i) redis.call('HSET', key(i), 'state', 'claimed', 'owner', 'queue-worker-1', 'fence', tostring(i), 'attempt', '1', 'expires', now, 'updated', now) end)
timed('HDEL absent field', function(i) redis.call('HDEL', key(i), 'dead') end)
timed('ZADD', function(i) redis.call('ZADD', prefix .. 'claimed', now, tostring(i)) end)
timed('ZREM', function(i) redis.call('ZREM', prefix .. 'claimed', tostring(i)) end)
timed('reply_record (HGETALL as reply)', function(i) reply_record(key(i), tostring(i)) end)
timed('TIME', function(i) redis.call('TIME') end)
for i = 1, n do redis.call('DEL', key(i)) end
redis.call('DEL', prefix .. 'claimed')
return out

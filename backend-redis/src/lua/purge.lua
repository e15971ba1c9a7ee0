-- purge: deletes interrupted and terminal records last updated at least a
-- retention ago (contract §8 (tenure_lease_core::contract), rules::purgeable),
-- and the rate logs whose uses all stopped counting (contract §16,
-- rate_rules::log_ends_at at or before now), at most one batch of each
-- per call.
-- KEYS[1] terminal zset (interrupted and terminal ids), KEYS[2] the rate
-- logs' index (names by when they stop counting).
-- ARGV[1] key prefix (record, scope index and rate log keys of the ids and
-- names found), ARGV[2] retention in us (rounded up), ARGV[3] batch size.
-- Reply: { records deleted, rate logs deleted }.

local prefix = ARGV[1]
local now = now_us()
local batch = tonumber(ARGV[3])
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', fmt(now - tonumber(ARGV[2])),
  'LIMIT', 0, batch)
local ended = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', fmt(now), 'LIMIT', 0, batch)
for _, id in ipairs(ids) do
  local key = prefix .. 'rec:' .. id
  -- A record whose scopes cannot be read is deleted all the same (it holds
  -- nothing and is past retention); only its scope index entries stay behind,
  -- and readers skip ids whose record is gone.
  local ok, scopes = pcall(cjson.decode, redis.call('HGET', key, 'scopes') or '[]')
  if ok and type(scopes) == 'table' then
    for _, scope in ipairs(scopes) do
      if type(scope) == 'string' then
        redis.call('ZREM', prefix .. 'scope:' .. scope, id)
      end
    end
  end
  redis.call('DEL', key)
  redis.call('ZREM', KEYS[1], id)
end
-- Whatever a log holds, its index says it ended: every use it had stopped
-- counting, so it goes, readable or not.
for _, name in ipairs(ended) do
  redis.call('DEL', prefix .. 'rate:' .. name)
  redis.call('ZREM', KEYS[2], name)
end
return { #ids, #ended }

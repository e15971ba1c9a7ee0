-- purge: deletes interrupted and terminal records last updated at least a
-- retention ago (contract §8 (tenure_lease_core::contract), rules::purgeable), at
-- most one batch per call.
-- KEYS[1] terminal zset (interrupted and terminal ids).
-- ARGV[1] key prefix (record and scope index keys of the ids found),
-- ARGV[2] retention in us (rounded up), ARGV[3] batch size.
-- Reply: the number of records deleted.

local prefix = ARGV[1]
local now = now_us()
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', fmt(now - tonumber(ARGV[2])),
  'LIMIT', 0, tonumber(ARGV[3]))
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
return #ids

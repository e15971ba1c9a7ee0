-- list_by_scope and list_active: every record an index names, read at one
-- instant.
-- KEYS[1] the index: a scope's zset (list_by_scope) or the active zset (list_active).
-- ARGV[1] key prefix (record keys of the ids found in the index).
-- Reply: { record, ... } in index order, where a record is
-- { id, HGETALL pairs }; ids whose record is gone are left out.

local ids = redis.call('ZRANGE', KEYS[1], 0, -1)
local found = {}
for _, id in ipairs(ids) do
  local key = ARGV[1] .. 'rec:' .. id
  local flat = redis.call('HGETALL', key)
  if #flat > 0 then
    found[#found + 1] = { id, flat }
  end
end
return found

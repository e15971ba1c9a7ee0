-- list_dead_letters: a queue's dead letters, oldest update first, then by id
-- (contract §9 (tenure_lease_core::contract), rules::dead_letter_order).
-- KEYS[1] the queue's dead-letter zset.
-- ARGV[1] key prefix (job hashes are built from it), ARGV[2] limit.
-- Reply: { job, ... } in index order, where a job is { id, HGETALL pairs };
-- ids whose job is gone are left out.

local ids = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[2]) - 1)
local found = {}
for _, id in ipairs(ids) do
  local key = ARGV[1] .. 'job:' .. id
  local flat = redis.call('HGETALL', key)
  if #flat > 0 then
    found[#found + 1] = { id, flat }
  end
end
return found

-- purge_fences: deletes the gates last accepted at least a retention ago
-- (gate_rules::gate_purgeable), at most one batch per call.
-- KEYS[1] gates zset.
-- ARGV[1] key prefix (gate keys of the resources found), ARGV[2] retention
-- in us (rounded up), ARGV[3] batch size.
-- Reply: the number of gates deleted.

local resources = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', fmt(now_us() - tonumber(ARGV[2])),
  'LIMIT', 0, tonumber(ARGV[3]))
for _, resource in ipairs(resources) do
  redis.call('DEL', ARGV[1] .. 'gate:' .. resource)
  redis.call('ZREM', KEYS[1], resource)
end
return #resources

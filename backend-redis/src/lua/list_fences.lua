-- list_fences: the gates of the resources named, read at one instant. The
-- caller reads the names from the index (ZRANGE) and orders them itself:
-- Lua compares strings by the server's locale (strcoll), not by bytes.
-- KEYS[1] gates zset.
-- ARGV[1] key prefix (gate keys of the resources named), ARGV[2..] the
-- resources.
-- Reply: one entry per resource named, in order: { fence (decimal), the
-- server time in us of its last accepted check (decimal) }, or {} when it
-- has no gate (purged since its name was read). A gate that cannot be
-- decoded raises TENURE_CORRUPT as highest_fence does, and so does one
-- missing from the index or stamped with no time in us.

local reply = {}
for i = 2, #ARGV do
  local resource = ARGV[i]
  local gate_key = ARGV[1] .. 'gate:' .. resource
  local fence = gate_fence(gate_key)
  if fence == nil then
    reply[i - 1] = {}
  else
    local stamp = tonumber(redis.call('ZSCORE', KEYS[1], resource))
    if stamp == nil then
      corrupt(gate_key, 'the gate is missing from the gate index')
    end
    if stamp ~= math.floor(stamp) or stamp < -TIMESTAMP_BOUND or stamp > TIMESTAMP_BOUND then
      corrupt(KEYS[1], 'the last check of ' .. resource .. ' is not a time in microseconds')
    end
    reply[i - 1] = { fmt(fence), fmt(stamp) }
  end
end
return reply

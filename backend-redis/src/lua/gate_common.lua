-- Fence gates prelude (contract §7 (tenure_lease_core::contract)): scripts.rs
-- prepends it, after common.lua, to every gate script.
--
-- Keys of the namespace (see common.lua for the prefix):
--   <prefix>gate:<resource>  string: the highest fence accepted for the
--                            resource, decimal
--   <prefix>gates            zset: resources by the server time, in us, of
--                            their last accepted check (purge_fences)
--
-- A gate's fence is an integer from 1 to 2^53 - 1
-- (limits::MAX_GATE_FENCE), the largest Lua's doubles hold exactly, so
-- comparisons are exact.

local GATE_FENCE_MAX = 9007199254740991

-- The fence of the gate at `gate_key`, checked (nil when there is no gate);
-- raises TENURE_CORRUPT when it is not an integer from 1 to GATE_FENCE_MAX,
-- and WRONGTYPE when the key is not a string.
local function gate_fence(gate_key)
  local text = redis.call('GET', gate_key)
  if not text then
    return nil
  end
  if not string.match(text, '^%d+$') or #text > 16 then
    corrupt(gate_key, 'the gate fence is not an integer')
  end
  local fence = tonumber(text)
  if fence < 1 or fence > GATE_FENCE_MAX then
    corrupt(gate_key, 'the gate fence is out of range')
  end
  return fence
end

-- gate_rules::judge_fence for `presented` (decimal text, validated by the
-- caller) at the gate of `resource`: when accepted, stores it as the
-- highest, stamps the resource in the index and answers nil; when stale,
-- answers the highest fence and writes nothing. When `refuse_before` is
-- '1', a fence below the failover floor of the counter at `counter_key`
-- (common.lua) is stale too, answered with the floor as the highest (the
-- floor recorded first when it is not yet). Judges (the gate, the counter,
-- the epoch and the index's type) before its first write.
local function check_gate(gate_key, index_key, resource, presented, counter_key, refuse_before)
  local highest = gate_fence(gate_key)
  local counter = nil
  if refuse_before == '1' then
    counter = fence_counter(counter_key, now_us())
  end
  if highest ~= nil and highest > tonumber(presented) then
    return highest
  end
  local index_type = redis.call('TYPE', index_key).ok
  if index_type ~= 'zset' and index_type ~= 'none' then
    corrupt(index_key, 'the gate index is not a sorted set')
  end
  if counter ~= nil then
    local floor = failover_floor(counter)
    if floor > tonumber(presented) then
      return floor
    end
  end
  redis.call('SET', gate_key, presented)
  redis.call('ZADD', index_key, now_us(), resource)
  return nil
end

-- A check's reply: { 'accepted' } or { 'stale', highest (decimal) }.
local function gate_reply(highest)
  if highest == nil then
    return { 'accepted' }
  end
  return { 'stale', fmt(highest) }
end

-- highest_fence: the highest fence accepted at a resource's gate.
-- KEYS[1] gate string.
-- ARGV: none.
-- Reply: { fence (decimal) } or {} when there is no gate.

local fence = gate_fence(KEYS[1])
if fence == nil then
  return {}
end
return { fmt(fence) }

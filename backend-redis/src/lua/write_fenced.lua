-- write_fenced: check_fence, and when accepted SET the caller's key to the
-- value, in the same script: a stale owner's value is never written.
-- KEYS[1] gate string, KEYS[2] gates zset, KEYS[3] the caller's key,
-- KEYS[4] fence counter.
-- ARGV[1] resource, ARGV[2] fence (decimal, 1 to 2^53 - 1), ARGV[3] value,
-- ARGV[4] '1': refuse fences from before a failover, '0': do not.
-- Reply: { 'accepted' } (the value written) or { 'stale', highest fence
-- (decimal) } (nothing written).

local highest = check_gate(KEYS[1], KEYS[2], ARGV[1], ARGV[2], KEYS[4], ARGV[4])
if highest == nil then
  redis.call('SET', KEYS[3], ARGV[3])
end
return gate_reply(highest)

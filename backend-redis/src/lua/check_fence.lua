-- check_fence: checks a fence at a resource's gate, raising it when
-- accepted (gate_rules::judge_fence).
-- KEYS[1] gate string, KEYS[2] gates zset, KEYS[3] fence counter.
-- ARGV[1] resource, ARGV[2] fence (decimal, 1 to 2^53 - 1),
-- ARGV[3] '1': refuse fences from before a failover, '0': do not.
-- Reply: { 'accepted' } or { 'stale', highest fence (decimal) }.

return gate_reply(check_gate(KEYS[1], KEYS[2], ARGV[1], ARGV[2], KEYS[3], ARGV[3]))

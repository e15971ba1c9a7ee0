-- check_fence: checks a fence at a resource's gate, raising it when
-- accepted (gate_rules::judge_fence).
-- KEYS[1] gate string, KEYS[2] gates zset.
-- ARGV[1] resource, ARGV[2] fence (decimal, 1 to 2^53 - 1).
-- Reply: { 'accepted' } or { 'stale', highest fence (decimal) }.

return gate_reply(check_gate(KEYS[1], KEYS[2], ARGV[1], ARGV[2]))

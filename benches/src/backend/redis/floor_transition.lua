-- The script floor, status write side (`--redis-floor`): the least a
-- fenced transition to running can do on tenure's record layout: read the
-- record whole (the answer carries it), judge status, owner and fence,
-- write the status and the time, answer the record as it now is. Left
-- out, against tenure's transition: checking every field decodes (status
-- one of five, fence and times numbers, scopes and metadata JSON), the
-- other targets (a terminal one also releases the scopes). A record
-- already running is moved again, so the floor can run on the same keys
-- round after round.
-- Written against floor_prelude.lua (now_us, hash_fields, field_pairs).
-- KEYS[1] record hash.
-- ARGV[1] owner, ARGV[2] fence.
-- Reply: 0 when the claim no longer holds the record, else its field
-- pairs after the write.

local fields = hash_fields(KEYS[1])
if (fields.status ~= 'pending' and fields.status ~= 'running') or fields.owner ~= ARGV[1]
  or fields.fence ~= ARGV[2] then
  return 0
end
local now = string.format('%d', now_us())
redis.call('HSET', KEYS[1], 'status', 'running', 'updated', now)
fields.status, fields.updated = 'running', now
return field_pairs(fields)

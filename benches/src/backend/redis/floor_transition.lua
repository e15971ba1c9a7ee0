-- The script floor, status write side (`--redis-floor`): the least a
-- fenced transition to running can do on tenure's record layout: read the
-- record whole (the answer carries it), judge status, owner and fence,
-- write the status and the time, answer the record as it now is. Left
-- out, against tenure's transition: checking every field decodes (status
-- one of five, fence and times numbers, scopes and metadata JSON), the
-- other targets (a terminal one also releases the scopes). A record
-- already running is moved again, so the floor can run on the same keys
-- round after round.
-- KEYS[1] record hash.
-- ARGV[1] owner, ARGV[2] fence.
-- Reply: 0 when the claim no longer holds the record, else its field
-- pairs after the write.

local flat = redis.call('HGETALL', KEYS[1])
local fields = {}
for i = 1, #flat, 2 do
  fields[flat[i]] = flat[i + 1]
end
if (fields.status ~= 'pending' and fields.status ~= 'running') or fields.owner ~= ARGV[1]
  or fields.fence ~= ARGV[2] then
  return 0
end
local time = redis.call('TIME')
local now = string.format('%d', tonumber(time[1]) * 1000000 + tonumber(time[2]))
redis.call('HSET', KEYS[1], 'status', 'running', 'updated', now)
fields.status, fields.updated = 'running', now
local reply = {}
for name, text in pairs(fields) do
  reply[#reply + 1] = name
  reply[#reply + 1] = text
end
return reply

-- The script floor, takeover side (`--redis-floor`): the least an adopting
-- takeover can do on tenure's record layout: read the record whole (the
-- answer carries it), judge its status and its lease's lapse, draw a fence
-- that outlives a failover, write the new holder, fence, status, expiry
-- and time and the expiry index, answer the record as it now is. Left
-- out, against tenure's takeover: checking every field decodes, the
-- failing takeover (which also releases the scopes). The lapse is judged
-- with a grace given by the caller: a negative one beyond the leases the
-- floor writes judges every lease lapsed, so the floor can take the same
-- keys over round after round.
-- Written against floor_prelude.lua (now_us, draw_fence, hash_fields,
-- field_pairs).
-- KEYS[1] record hash, KEYS[2] expiry zset, KEYS[3] fence counter,
-- KEYS[4] failover epoch hash.
-- ARGV[1] id, ARGV[2] claimer, ARGV[3] grace in us, ARGV[4] ttl in us.
-- Reply: 0 when the record is not active or its lease still runs, else
-- its field pairs after the write.

local fields = hash_fields(KEYS[1])
local now = now_us()
if (fields.status ~= 'pending' and fields.status ~= 'running')
  or tonumber(fields.expires) + tonumber(ARGV[3]) > now then
  return 0
end
local fence = draw_fence(KEYS[3], KEYS[4], now)
local now_text = string.format('%d', now)
local expires = string.format('%d', now + tonumber(ARGV[4]))
redis.call('HSET', KEYS[1], 'owner', ARGV[2], 'fence', fence, 'status', 'running',
  'expires', expires, 'updated', now_text)
redis.call('ZADD', KEYS[2], expires, ARGV[1])
fields.owner, fields.fence, fields.status = ARGV[2], fence, 'running'
fields.expires, fields.updated = expires, now_text
return field_pairs(fields)

-- claim_for_takeover: orphan recovery (contract §6 (tenure_lease_core::contract),
-- rules::judge_takeover).
-- KEYS[1] record hash, KEYS[2] fence counter, KEYS[3] expiry zset,
-- KEYS[4] active zset, KEYS[5] terminal zset.
-- ARGV[1] key prefix (the record's holder keys are found at run time),
-- ARGV[2] id, ARGV[3] claimer, ARGV[4] grace in us (rounded up),
-- ARGV[5] 'fail' | 'adopt', ARGV[6] error (fail),
-- ARGV[7] '1' when a stop reason is given, ARGV[8] stop reason (fail),
-- ARGV[9] ttl in us ('' = no lease) (adopt).
-- Publishes each scope it frees on `<prefix>released` (common.lua release).
-- Reply: { 'taken', record } | { 'missing' } | { 'terminal', status }
--      | { 'interrupted' } | { 'lease_valid', now, record }
-- where a record is { id, field pairs } and now is store time in us.

local prefix, id = ARGV[1], ARGV[2]
local record = load(KEYS[1], id)
if not record then
  return { 'missing' }
end
if TERMINAL[record.status] then
  return { 'terminal', record.status }
end
if record.status == 'interrupted' then
  return { 'interrupted' }
end
local now = now_us()
if lease_valid(record, tonumber(ARGV[4]), now) then
  return { 'lease_valid', fmt(now), reply_record(record) }
end
local fences = fence_counter(KEYS[2], now)

local changes = { 'owner', ARGV[3], 'fence', fmt(draw_fence(fences)), 'updated', fmt(now) }
if ARGV[5] == 'fail' then
  add_change(changes, 'status', 'failed')
  add_change(changes, 'error', ARGV[6])
  if ARGV[7] == '1' then
    add_change(changes, 'stop', ARGV[8])
  end
  write_fields(record, changes)
  release(prefix, record, KEYS[3], KEYS[4])
  redis.call('ZADD', KEYS[5], fmt(now), id)
else
  add_change(changes, 'status', 'running')
  local expiry_score = '-inf'
  if ARGV[9] ~= '' then
    expiry_score = fmt(now + tonumber(ARGV[9]))
    add_change(changes, 'expires', expiry_score)
  else
    delete_field(record, 'expires')
  end
  write_fields(record, changes)
  redis.call('ZADD', KEYS[3], expiry_score, id)
end
return { 'taken', reply_record(record) }

-- transition: the fenced status write (contract §5 (tenure_lease_core::contract),
-- rules::judge_transition).
-- KEYS[1] record hash, KEYS[2] expiry zset, KEYS[3] active zset, KEYS[4] terminal zset.
-- ARGV[1] key prefix (the record's holder keys are found at run time),
-- ARGV[2] id, ARGV[3] owner, ARGV[4] fence, ARGV[5] target status,
-- ARGV[6] '1' when an error is given, ARGV[7] error,
-- ARGV[8] '1' when a stop reason is given, ARGV[9] stop reason.
-- Publishes each scope it frees on `<prefix>released` (common.lua release).
-- Reply: { 'applied', record } | { 'rejected', 'missing' }
--      | { 'rejected', 'terminal', status } | { 'rejected', 'stale' }
--      | { 'rejected', 'not_allowed', from, to }
-- where a record is { id, field pairs }.

local ALLOWED = {
  pending = { running = true, succeeded = true, failed = true },
  running = { succeeded = true, failed = true, interrupted = true },
  interrupted = { failed = true },
}

local prefix, id, to = ARGV[1], ARGV[2], ARGV[5]
local record = load(KEYS[1], id)
if not record then
  return { 'rejected', 'missing' }
end
if record.owner ~= ARGV[3] or record.fence ~= ARGV[4] then
  return { 'rejected', 'stale' }
end
if TERMINAL[record.status] then
  return { 'rejected', 'terminal', record.status }
end
if not (ALLOWED[record.status] or {})[to] then
  return { 'rejected', 'not_allowed', record.status, to }
end

local now = now_us()
local changes = { 'status', to, 'updated', fmt(now) }
if ARGV[6] == '1' then
  add_change(changes, 'error', ARGV[7])
end
if ARGV[8] == '1' then
  add_change(changes, 'stop', ARGV[9])
end
write_fields(record, changes)
if not ACTIVE[to] then
  release(prefix, record, KEYS[2], KEYS[3])
  redis.call('ZADD', KEYS[4], fmt(now), id)
end
return { 'applied', reply_record(record) }

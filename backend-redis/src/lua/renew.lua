-- renew: extends the leases of a batch of claims (renew and renew_many),
-- rules::judge_renewal per claim. Every claim is judged before any is renewed,
-- so a corrupt record fails the whole call with nothing written.
-- KEYS[1] expiry zset, KEYS[1+i] record hash of claim i (i = 1..n).
-- ARGV[1] ttl in us, ARGV[2] progress (JSON text) to record on every
-- renewed claim, or '' for none (renew_with_progress names one claim),
-- then per claim i: ARGV[3i] id, ARGV[3i+1] owner, ARGV[3i+2] fence.
-- Reply: { outcome of claim 1, ..., outcome of claim n }, each one of
--   { 'renewed', expires_at in us } | { 'lost', 'missing' }
--   | { 'lost', 'terminal', status } | { 'lost', 'interrupted' }
--   | { 'lost', 'owner_changed' } | { 'lost', 'fence_changed' }.

local function judge(key, owner, fence)
  local fields = redis.call('HMGET', key, 'status', 'owner', 'fence')
  local status, holder, current = fields[1], fields[2], fields[3]
  if not status then
    if redis.call('EXISTS', key) == 0 then
      return { 'lost', 'missing' }
    end
    corrupt(key, 'unknown status')
  end
  if not KNOWN[status] then
    corrupt(key, 'unknown status')
  end
  if not current or not string.match(current, '^%d+$') then
    corrupt(key, 'fence is not a number')
  end
  if status == 'interrupted' then
    return { 'lost', 'interrupted' }
  end
  if holder ~= owner then
    return { 'lost', 'owner_changed' }
  end
  if current ~= fence then
    return { 'lost', 'fence_changed' }
  end
  if TERMINAL[status] then
    return { 'lost', 'terminal', status }
  end
  return nil
end

local outcomes = {}
for i = 2, #KEYS do
  outcomes[i - 1] = judge(KEYS[i], ARGV[3 * i - 2], ARGV[3 * i - 1]) or false
end

local now = now_us()
local expires = fmt(now + tonumber(ARGV[1]))
local updated = fmt(now)
for i = 2, #KEYS do
  if not outcomes[i - 1] then
    redis.call('HSET', KEYS[i], 'expires', expires, 'updated', updated)
    if ARGV[2] ~= '' then
      redis.call('HSET', KEYS[i], 'progress', ARGV[2])
    end
    redis.call('ZADD', KEYS[1], expires, ARGV[3 * i - 3])
    outcomes[i - 1] = { 'renewed', expires }
  end
end
return outcomes

-- admit: creates a record, with per-scope admission
-- (contract §3 (tenure_lease_core::contract), rules::plan_admission).
-- KEYS[1] fence counter, KEYS[2] expiry zset, KEYS[3] active zset,
-- KEYS[4] record hash of the new id, KEYS[5] terminal zset,
-- KEYS[5+i] holder key of scope i, KEYS[5+n+i] scope index of scope i
--   (i = 1..n, scopes in sorted order), then, with a rate limit only,
--   KEYS[6+2n] its log and KEYS[7+2n] the rate logs' index (rate_log).
-- ARGV[1] key prefix (holders' record keys are found at run time),
-- ARGV[2] id, ARGV[3] owner, ARGV[4] kind, ARGV[5] ttl in us ('' = no lease),
-- ARGV[6] 'reject' | 'interrupt', ARGV[7] grace in us (rounded up),
-- ARGV[8] metadata JSON object, ARGV[9] scopes JSON array,
-- ARGV[10] stop reason given to interrupted holders,
-- ARGV[11] the rate limit's log name ('' = no rate limit), ARGV[12] its
-- permits, ARGV[13] its period in us ('' without a limit).
-- Publishes each scope it frees on `<prefix>released` (common.lua release).
-- Reply: { 'exists' }
--      | { 'conflict', now, holder }
--      | { 'rate_limited', now, { use, ... } } (nothing written; the uses
--        that count, in us, from which the caller computes retry_after)
--      | { 'admitted', record, { interrupted holder, ... } }
-- where a record is { id, field pairs } and now is store time in us.

local prefix, id, owner = ARGV[1], ARGV[2], ARGV[3]
if redis.call('EXISTS', KEYS[4]) == 1 then
  return { 'exists' }
end
local now = now_us()
local fences = fence_counter(KEYS[1], now)
local grace = tonumber(ARGV[7])
local limited = ARGV[11] ~= ''
local scope_count = (#KEYS - 5) / 2
if limited then
  scope_count = (#KEYS - 7) / 2
end

-- Active holders of the requested scopes, deduplicated, in scope order.
local holders, seen = {}, {}
for i = 1, scope_count do
  local holder_id = redis.call('GET', KEYS[5 + i])
  if holder_id and not seen[holder_id] then
    seen[holder_id] = true
    local holder = load(prefix .. 'rec:' .. holder_id, holder_id)
    if holder and ACTIVE[holder.status] then
      holders[#holders + 1] = holder
    end
  end
end

for _, holder in ipairs(holders) do
  if ARGV[6] == 'reject' or (holder.owner ~= owner and lease_valid(holder, grace, now)) then
    return { 'conflict', fmt(now), reply_record(holder) }
  end
end

-- rate_rules, after the scopes: a permit left, or nothing changes.
local rate = nil
if limited then
  rate = rate_log(KEYS[#KEYS - 1], KEYS[#KEYS], ARGV[11], tonumber(ARGV[12]),
    tonumber(ARGV[13]), now)
  if #rate.uses >= rate.permits then
    return { 'rate_limited', fmt(now), rate_texts(rate.uses) }
  end
end

-- Decided: from here on only writes.
-- The holders' fences first, then the new record's: it gets the greatest.
local drawn = draw_fences(fences, #holders + 1)
local interrupted = {}
for i, holder in ipairs(holders) do
  local fence = drawn[i]
  release(prefix, holder, KEYS[2], KEYS[3])
  write_fields(holder, { 'status', 'interrupted', 'owner', owner, 'fence', fmt(fence),
    'stop', ARGV[10], 'updated', fmt(now) })
  redis.call('ZADD', KEYS[5], fmt(now), holder.id)
  interrupted[#interrupted + 1] = reply_record(holder)
end

local fence = drawn[#holders + 1]
local fields = { 'kind', ARGV[4], 'status', 'pending', 'owner', owner, 'fence', fmt(fence),
  'created', fmt(now), 'updated', fmt(now), 'scopes', ARGV[9], 'meta', ARGV[8] }
local expiry_score = '-inf'
if ARGV[5] ~= '' then
  expiry_score = fmt(now + tonumber(ARGV[5]))
  fields[#fields + 1] = 'expires'
  fields[#fields + 1] = expiry_score
end
local record = create_hash(KEYS[4], id, fields)
for i = 1, scope_count do
  redis.call('SET', KEYS[5 + i], id)
  redis.call('ZADD', KEYS[5 + scope_count + i], fmt(now), id)
end
redis.call('ZADD', KEYS[3], 0, id)
redis.call('ZADD', KEYS[2], expiry_score, id)
if rate then
  save_rate_log(rate, rate_spent(rate, 1))
end
return { 'admitted', reply_record(record), interrupted }

-- admit: creates a record, with per-scope admission and a slot chosen in
-- each counted scope (contract §3 and §17 (tenure_lease_core::contract),
-- rules::choose_slot, rules::plan_admission).
-- KEYS[1] fence counter, KEYS[2] expiry zset, KEYS[3] active zset,
-- KEYS[4] record hash of the new id, KEYS[5] terminal zset,
-- KEYS[5+i] holder key of scope i (slot 0's), KEYS[5+n+i] scope index of
--   scope i (i = 1..n, scopes in sorted order), then, with a rate limit
--   only, KEYS[6+2n] its log and KEYS[7+2n] the rate logs' index (rate_log).
--   The holder keys of a counted scope's other slots are KEYS[5+i], U+001F
--   and the slot number (common.lua slot_key), built at run time.
-- ARGV[1] key prefix (holders' record keys are found at run time),
-- ARGV[2] id, ARGV[3] owner, ARGV[4] kind, ARGV[5] ttl in us ('' = no lease),
-- ARGV[6] 'reject' | 'interrupt', ARGV[7] grace in us (rounded up),
-- ARGV[8] metadata JSON object, ARGV[9] scopes JSON array,
-- ARGV[10] stop reason given to interrupted holders,
-- ARGV[11] the rate limit's log name ('' = no rate limit), ARGV[12] its
-- permits, ARGV[13] its period in us ('' without a limit),
-- ARGV[14] the capacities: '' when no scope is counted, else one decimal
-- per scope i, in scope order, separated by spaces, 0 for an exclusive
-- scope (a counted one's is 1 to 1000).
-- Publishes each scope it frees on `<prefix>released` (common.lua release).
-- Reply: { 'exists' }
--      | { 'conflict', now, holder } (the holder of the chosen slot, of the
--        first scope in order where one blocks)
--      | { 'rate_limited', now, { use, ... } } (nothing written; the uses
--        that count, in us, from which the caller computes retry_after)
--      | { 'admitted', record, { interrupted holder, ... } }
-- where a record is { id, field pairs } and now is store time in us; an
-- admitted record with a counted scope has a `slots` field, the slot it
-- holds in each.

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

-- The active record holding `key`, each loaded once (by id in `loaded`);
-- nil when the key is free.
local loaded = {}
local function active_holder(key)
  local holder_id = redis.call('GET', key)
  if not holder_id then
    return nil
  end
  local holder = loaded[holder_id]
  if holder == nil then
    holder = load(prefix .. 'rec:' .. holder_id, holder_id) or false
    loaded[holder_id] = holder
  end
  if holder and ACTIVE[holder.status] then
    return holder
  end
  return nil
end

-- rules::choose_slot for the counted scope whose slot 0 is held at
-- `base_key`: its holders read up to the first free slot, the lowest free
-- one; when none is, under interrupt the lowest whose holder the request
-- may interrupt; else the one whose holder frees first (the earliest
-- expiry, holders without a lease last, then the lowest slot). Answers the
-- slot and its holder key.
local function choose_slot(base_key, capacity)
  local held = {}
  for slot = 0, capacity - 1 do
    local key = base_key
    if slot > 0 then
      key = base_key .. SLOT_SEPARATOR .. fmt(slot)
    end
    local holder = active_holder(key)
    if holder == nil then
      return slot, key
    end
    held[slot + 1] = { slot = slot, key = key, holder = holder }
  end
  if ARGV[6] == 'interrupt' then
    for _, each in ipairs(held) do
      if each.holder.owner == owner or not lease_valid(each.holder, grace, now) then
        return each.slot, each.key
      end
    end
  end
  local best = held[1]
  for i = 2, #held do
    local expires, best_expires = held[i].holder.expires, best.holder.expires
    if expires ~= nil and (best_expires == nil or expires < best_expires) then
      best = held[i]
    end
  end
  return best.slot, best.key
end

-- The key each scope is held under: slot 0's (KEYS[5+i]) for an exclusive
-- scope, the chosen slot's for a counted one, whose slot is in `slots`
-- (scope name to slot) for the record.
local held_key, slots = {}, nil
local capacity_index = 0
if ARGV[14] ~= '' then
  slots = {}
  for capacity in string.gmatch(ARGV[14], '%d+') do
    capacity_index = capacity_index + 1
    local i = capacity_index
    local base_key = KEYS[5 + i]
    if capacity == '0' then
      held_key[i] = base_key
    else
      local slot, key = choose_slot(base_key, tonumber(capacity))
      held_key[i] = key
      slots[string.sub(base_key, #prefix + 8)] = slot
    end
  end
else
  for i = 1, scope_count do
    held_key[i] = KEYS[5 + i]
  end
end

-- Active holders of the keys the admission would hold, deduplicated, in
-- scope order.
local holders, seen = {}, {}
for i = 1, scope_count do
  local holder = active_holder(held_key[i])
  if holder and not seen[holder.id] then
    seen[holder.id] = true
    holders[#holders + 1] = holder
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
if slots then
  fields[#fields + 1] = 'slots'
  fields[#fields + 1] = cjson.encode(slots)
end
local expiry_score = '-inf'
if ARGV[5] ~= '' then
  expiry_score = fmt(now + tonumber(ARGV[5]))
  fields[#fields + 1] = 'expires'
  fields[#fields + 1] = expiry_score
end
local record = create_hash(KEYS[4], id, fields)
for i = 1, scope_count do
  redis.call('SET', held_key[i], id)
  redis.call('ZADD', KEYS[5 + scope_count + i], fmt(now), id)
end
redis.call('ZADD', KEYS[3], 0, id)
redis.call('ZADD', KEYS[2], expiry_score, id)
if rate then
  save_rate_log(rate, rate_spent(rate, 1))
end
return { 'admitted', reply_record(record), interrupted }

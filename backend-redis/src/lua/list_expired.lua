-- list_expired: the reaper's scan (contract §6 (tenure_lease_core::contract),
-- rules::matches_expired).
-- KEYS[1] expiry zset.
-- ARGV[1] key prefix (record keys of the ids found in the index),
-- ARGV[2] grace in us (rounded up), ARGV[3] created_before in us ('' = any),
-- ARGV[4] limit.
-- Reply: { now, { record, ... }, { { id, reason }, ... } } where a record is
-- { id, HGETALL pairs }: up to `limit` matching records in index order (no
-- lease first, then by expiry, then by id), then every record met on the way
-- that could not be judged, with why (the caller reports those as skipped).

local PAGE = 256
local prefix, limit = ARGV[1], tonumber(ARGV[4])
local cutoff = nil
if ARGV[3] ~= '' then
  cutoff = tonumber(ARGV[3])
end
local now = now_us()
local latest_expiry = fmt(now - tonumber(ARGV[2]))

local found, skipped, matched, offset = {}, {}, 0, 0
while matched < limit do
  local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', latest_expiry, 'LIMIT', offset, PAGE)
  if #ids == 0 then
    break
  end
  for _, id in ipairs(ids) do
    local key = prefix .. 'rec:' .. id
    local ok, record = pcall(load, key, id)
    if not ok then
      skipped[#skipped + 1] = { id, failure_reason(record) }
    elseif record and ACTIVE[record.status] and (cutoff == nil or record.created <= cutoff) then
      found[#found + 1] = { id, record.flat }
      matched = matched + 1
      if matched == limit then
        break
      end
    end
  end
  offset = offset + #ids
end
return { fmt(now), found, skipped }

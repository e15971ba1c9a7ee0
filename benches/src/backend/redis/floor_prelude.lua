-- Prelude of the script floors that draw fences or answer a record
-- (`--redis-floor`; floor.rs prepends it to floor_admit.lua,
-- floor_transition.lua, floor_takeover.lua and floor_claim.lua): the least
-- a fence draw can do and still outlive a failover, as tenure's does (the
-- hybrid clock over the counter, the replication id checked per draw), and
-- a record's fields read and answered as HGETALL answers them.

-- The server's time in us.
local function now_us()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000000 + tonumber(time[2])
end

-- The next fence after the counter at `counter_key`, at store time `now`,
-- stored there, its failover floor recorded at `epoch_key` when the
-- server's replication id is new; as decimal text.
local function draw_fence(counter_key, epoch_key, now)
  local last = tonumber(redis.call('GET', counter_key) or '0')
  local replid = string.match(redis.call('INFO', 'replication'), 'master_replid:(%x+)') or ''
  local epoch = redis.call('HMGET', epoch_key, 'replid', 'floor')
  local fence = string.format('%d', math.max(last + 1, now))
  redis.call('SET', counter_key, fence)
  if epoch[1] ~= replid then
    redis.call('HSET', epoch_key, 'replid', replid, 'floor', fence)
  end
  return fence
end

-- The fields of the hash at `key`, a table of names to texts (empty when
-- there is no such key).
local function hash_fields(key)
  local flat = redis.call('HGETALL', key)
  local fields = {}
  for i = 1, #flat, 2 do
    fields[flat[i]] = flat[i + 1]
  end
  return fields
end

-- A hash's fields (a table of names to texts) as the flat list of pairs
-- HGETALL answers, in any order.
local function field_pairs(fields)
  local pairs_list = {}
  for name, text in pairs(fields) do
    pairs_list[#pairs_list + 1] = name
    pairs_list[#pairs_list + 1] = text
  end
  return pairs_list
end

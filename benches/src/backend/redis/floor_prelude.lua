-- Prelude of the script floors that draw fences (`--redis-floor`; floor.rs
-- prepends it to floor_admit.lua, floor_takeover.lua and floor_claim.lua):
-- the least a fence draw can do and still outlive a failover, as tenure's
-- does (the hybrid clock over the counter, the replication id checked per
-- draw).

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

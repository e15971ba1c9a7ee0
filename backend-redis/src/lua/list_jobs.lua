-- list_jobs: a queue's jobs, in one state or any, oldest first (by creation,
-- then id), at most a limit (contract §9 (tenure_lease_core::contract),
-- rules::job_listing_order). An operator's read: it walks the indexes that
-- can hold a job of that state (the queue's ready, delayed and dead-letter
-- zsets; the namespace's claimed and finished zsets, filtered by queue).
-- KEYS[1] the queue's ready zset, KEYS[2] its delayed zset, KEYS[3] claimed
-- zset, KEYS[4] finished zset, KEYS[5] the queue's dead-letter zset.
-- ARGV[1] key prefix (job hashes are built from it), ARGV[2] queue,
-- ARGV[3] state ('' for any), ARGV[4] limit.
-- Reply: { job, ... } oldest first, where a job is { id, HGETALL pairs }.

local prefix, queue, wanted, limit = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
-- The ready and delayed zsets hold claim ranks, whose id starts at
-- RANK_ID_START; the others hold ids.
local ready, delayed = { KEYS[1], true }, { KEYS[2], true }
local claimed, finished, dead = { KEYS[3], false }, { KEYS[4], false }, { KEYS[5], false }
local sources = {
  queued = { ready, delayed },
  claimed = { claimed },
  completed = { finished },
  dead_lettered = { dead },
}
local indexes
if wanted == '' then
  indexes = { ready, delayed, claimed, finished }
else
  indexes = sources[wanted] or {}
end

local seen, found = {}, {}
for _, index in ipairs(indexes) do
  for _, member in ipairs(redis.call('ZRANGE', index[1], 0, -1)) do
    local id = member
    if index[2] then
      id = string.sub(member, RANK_ID_START)
    end
    if not seen[id] then
      seen[id] = true
      local fields = redis.call('HMGET', prefix .. 'job:' .. id, 'queue', 'state', 'created')
      if fields[1] == queue and (wanted == '' or fields[2] == wanted) then
        found[#found + 1] = { id = id, created = tonumber(fields[3]) or 0 }
      end
    end
  end
end
table.sort(found, function(a, b)
  if a.created ~= b.created then
    return a.created < b.created
  end
  return a.id < b.id
end)

local reply = {}
for i = 1, math.min(limit, #found) do
  local id = found[i].id
  reply[i] = { id, redis.call('HGETALL', prefix .. 'job:' .. id) }
end
return reply

-- purge_jobs: deletes finished jobs (completed or dead-lettered) that
-- finished at least a retention ago, but those still holding a for_period
-- uniqueness key (contract §9 (tenure_lease_core::contract),
-- rules::job_purgeable), with their index entries, at most one batch per
-- call.
-- KEYS[1] finished zset.
-- ARGV[1] key prefix (job hash, dead-letter and uniqueness index keys of the
-- ids found), ARGV[2] retention in us (rounded up), ARGV[3] batch size,
-- ARGV[4] how many of the due ids to pass over first: those earlier calls of
-- the same purge kept, which stay first among the due ids.
-- Reply: { deleted, looked_at, unreadable, kept }: the number of jobs
-- deleted, of ids taken from the index after those passed over (a full
-- batch means more may be due), of ids whose job key is not a hash (left as
-- they are, dropped from the index), and of due jobs kept, in the index,
-- for the key they hold.

local prefix = ARGV[1]
local now = now_us()
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', fmt(now - tonumber(ARGV[2])),
  'LIMIT', tonumber(ARGV[4]), tonumber(ARGV[3]))
local deleted, unreadable, kept = 0, 0, 0
for _, id in ipairs(ids) do
  local key = prefix .. 'job:' .. id
  -- pcall: a key of another type must neither stop this batch half done
  -- nor wedge every later purge on the same id.
  local fields = redis.pcall('HMGET', key, 'state', 'queue', 'unique_key', 'unique_policy',
    'unique_until')
  if fields.err then
    unreadable = unreadable + 1
    redis.call('ZREM', KEYS[1], id)
  else
    local state, queue, unique_key = fields[1], fields[2], fields[3]
    local finished = state == 'completed' or state == 'dead_lettered'
    if finished and holds_unique_key(fields[4], state, fields[5], now) then
      kept = kept + 1
    else
      -- Only a job the hash says is finished goes. An id whose hash is gone
      -- or not finished is an index entry left behind, dropped from the
      -- index only.
      if finished then
        if type(queue) == 'string' then
          redis.pcall('ZREM', prefix .. 'dead:' .. queue, id)
          if type(unique_key) == 'string' then
            redis.pcall('ZREM', unique_index(prefix, queue, unique_key), id)
          end
        end
        redis.call('DEL', key)
        deleted = deleted + 1
      end
      redis.call('ZREM', KEYS[1], id)
    end
  end
end
return { deleted, #ids, unreadable, kept }

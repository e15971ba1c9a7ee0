-- purge_jobs: deletes finished jobs (completed or dead-lettered) that
-- finished at least a retention ago (contract §9 (tenure_lease_core::contract),
-- rules::job_purgeable), with their index entries, at most one batch per
-- call.
-- KEYS[1] finished zset.
-- ARGV[1] key prefix (job hash and dead-letter keys of the ids found),
-- ARGV[2] retention in us (rounded up), ARGV[3] batch size.
-- Reply: { deleted, looked_at, unreadable }: the number of jobs deleted, of
-- ids taken from the index (a full batch means more may be due), and of ids
-- whose job key is not a hash (left as they are, dropped from the index).

local prefix = ARGV[1]
local now = now_us()
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', fmt(now - tonumber(ARGV[2])),
  'LIMIT', 0, tonumber(ARGV[3]))
local deleted, unreadable = 0, 0
for _, id in ipairs(ids) do
  local key = prefix .. 'job:' .. id
  -- pcall: a key of another type must neither stop this batch half done
  -- nor wedge every later purge on the same id.
  local fields = redis.pcall('HMGET', key, 'state', 'queue')
  if fields.err then
    unreadable = unreadable + 1
  else
    local state, queue = fields[1], fields[2]
    -- Only a job the hash says is finished goes. An id whose hash is gone
    -- or not finished is an index entry left behind, dropped from the
    -- index only.
    if state == 'completed' or state == 'dead_lettered' then
      if type(queue) == 'string' then
        redis.pcall('ZREM', prefix .. 'dead:' .. queue, id)
      end
      redis.call('DEL', key)
      deleted = deleted + 1
    end
  end
  redis.call('ZREM', KEYS[1], id)
end
return { deleted, #ids, unreadable }

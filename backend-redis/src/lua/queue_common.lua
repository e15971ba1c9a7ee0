-- Queue prelude: scripts.rs prepends this file, after common.lua, to every
-- job-queue script.
--
-- Job keys, under the same namespace prefix (and so in the same hash slot)
-- as the lease keys. Job ids and queue names are kept verbatim in their own
-- families, apart from lease ids, so a job may share an id with a lease:
--   <prefix>job:<id>          hash: one job (fields below)
--   <prefix>ready:<queue>     zset: queued jobs of the queue already visible,
--                             all scored 0, members are claim ranks (below),
--                             so ZRANGE walks them in claim order
--   <prefix>delayed:<queue>   zset: queued jobs of the queue not yet visible
--                             when indexed, scored by run_at in us, members
--                             are claim ranks; claim first moves the due ones
--                             into ready (no background process needed)
--   <prefix>claimed           zset: claimed job ids by lease expiry in us (reap)
--   <prefix>dead:<queue>      zset: dead-lettered job ids by updated_at in us
--   <prefix>finished          zset: completed and dead-lettered job ids by
--                             updated_at in us, their finish time (purge_jobs)
--   <prefix>unique:<n>:<queue>:<key>
--                             zset: ids of the jobs of the queue enqueued with
--                             the uniqueness key, by created_at in us (so in
--                             rules::job_listing_order), until purged; <n> is
--                             the queue's length in bytes, so no queue and key
--                             can make two such keys collide (unique_index)
-- Jobs draw fences from the lease counter <prefix>fence (one sequence).
-- A queued job is in exactly one of ready and delayed; a claimed job is in
-- claimed; a dead-lettered job is in dead and finished; a completed job in
-- finished only.
--
-- Claim rank: a string whose byte order is rules::claim_order (members of
-- one score sort by bytes; the fixed widths make field order tuple order):
--   10 digits  2147483647 - priority (higher priority sorts first)
--   20 chars   run_at: 'p' and 19 digits when >= 0, else 'n' and the 19
--              digits of 10^19 + run_at ('n' < 'p'); see time_rank
--   20 chars   created_at, the same form
--   the id, verbatim, from byte RANK_ID_START on
--
-- Job hash fields: queue, payload (JSON), priority, run_at, attempt,
-- max_attempts, caps (JSON array of strings), state, owner (absent: none),
-- fence, expires (absent: no lease), error (absent: none), dead (absent: not
-- dead-lettered), created, updated, taken_back and taken_back_at (the
-- take-back count and its latest instant; both absent until the first
-- take-back, as in jobs stored by versions that kept no trace), unique_key
-- and unique_policy (the uniqueness key and its policy's kind, both absent
-- for a job without a key) and unique_until (the end of a for_period key,
-- created_at plus the period; absent for the other kinds). Integers and
-- timestamps (us since the epoch) are decimal text.

local JOB_STATES = { queued = true, claimed = true, completed = true, dead_lettered = true }
local DEAD_REASONS = { lease_expired = true, attempts_exhausted = true, failed = true }
local UNIQUE_POLICIES = { while_queued = true, while_unfinished = true, for_period = true }
local RANK_ID_START = 51

-- The rank form of a non-negative time in us given as decimal text (the
-- Rust side encodes caller-given, possibly negative run_at itself).
local function time_rank(micros)
  return 'p' .. string.rep('0', 19 - #micros) .. micros
end

local function claim_rank(priority, run_at_rank, created, id)
  return string.format('%010d', 2147483647 - priority) .. run_at_rank .. time_rank(created) .. id
end

-- A JSON array of strings, decoded; raises TENURE_CORRUPT otherwise.
local function string_array(key, name, text)
  local ok, items = pcall(cjson.decode, text or '')
  if not ok or type(items) ~= 'table' then
    corrupt(key, name .. ' are not a JSON array')
  end
  local count = 0
  for _, item in pairs(items) do
    count = count + 1
    if type(item) ~= 'string' then
      corrupt(key, name .. ' are not strings')
    end
  end
  if count ~= #items then
    corrupt(key, name .. ' are not a JSON array')
  end
  return items
end

-- A set of strings as a JSON array (cjson encodes an empty table as '{}').
local function encode_set(set)
  local items = {}
  for item in pairs(set) do
    items[#items + 1] = item
  end
  if #items == 0 then
    return '[]'
  end
  table.sort(items)
  return cjson.encode(items)
end

-- The job whose hash at `key` holds `fields` (by name; `flat`, as HGETALL
-- answered them) as a table; raises TENURE_CORRUPT when any field the Rust
-- side decodes cannot be read (but the UTF-8 of texts), so a job a script
-- writes is one the caller can decode. `caps`, when given, are the
-- capabilities already decoded from fields.caps.
local function job_of(key, id, fields, flat, caps)
  if not JOB_STATES[fields.state] then
    corrupt(key, 'unknown job state ' .. tostring(fields.state))
  end
  fence_field(key, fields)
  if type(fields.queue) ~= 'string' then
    corrupt(key, 'queue is missing')
  end
  if fields.dead ~= nil and not DEAD_REASONS[fields.dead] then
    corrupt(key, 'unknown dead-letter reason ' .. fields.dead)
  end
  if not pcall(cjson.decode, fields.payload or '') then
    corrupt(key, 'payload is not JSON')
  end
  if fields.progress ~= nil then
    local decoded, progress = pcall(cjson.decode, fields.progress)
    if not decoded or progress == cjson.null then
      corrupt(key, 'progress is not JSON, or is a JSON null')
    end
  end
  local job = {
    id = id,
    key = key,
    fields = fields,
    flat = flat,
    state = fields.state,
    queue = fields.queue,
    owner = fields.owner,
    fence = fields.fence,
    priority = bounded(key, fields, 'priority', -2147483648, 2147483647),
    run_at = timestamp(key, fields, 'run_at'),
    -- 1000: rules::MAX_ATTEMPTS, above which a count is damage.
    attempt = bounded(key, fields, 'attempt', 0, 1000),
    max_attempts = bounded(key, fields, 'max_attempts', 0, 1000),
    created = timestamp(key, fields, 'created'),
    updated = timestamp(key, fields, 'updated'),
    caps = caps or string_array(key, 'caps', fields.caps),
  }
  if fields.expires ~= nil then
    job.expires = timestamp(key, fields, 'expires')
  end
  -- rules::stored_take_back_trace: both or neither.
  job.taken_back = 0
  if fields.taken_back ~= nil then
    job.taken_back = bounded(key, fields, 'taken_back', 0, 4294967295)
  end
  if fields.taken_back_at ~= nil then
    timestamp(key, fields, 'taken_back_at')
  end
  if (job.taken_back == 0) ~= (fields.taken_back_at == nil) then
    corrupt(key, 'taken_back and taken_back_at disagree')
  end
  -- The uniqueness key and policy: a key with a known kind or neither, an
  -- end exactly for for_period, after created (a period is positive).
  local policy = fields.unique_policy
  if (fields.unique_key == nil) ~= (policy == nil) then
    corrupt(key, 'unique_key and unique_policy disagree')
  end
  if policy ~= nil and not UNIQUE_POLICIES[policy] then
    corrupt(key, 'unknown uniqueness policy ' .. policy)
  end
  if (policy == 'for_period') ~= (fields.unique_until ~= nil) then
    corrupt(key, 'unique_until and unique_policy disagree')
  end
  if fields.unique_until ~= nil then
    -- validate::job_unique: whole milliseconds, at most 366 days.
    local period = timestamp(key, fields, 'unique_until') - job.created
    if period <= 0 or period > 31622400000000 or period % 1000 ~= 0 then
      corrupt(key, 'unique_until does not end a period of whole milliseconds up to 366 days')
    end
  end
  local unique_key = fields.unique_key
  if unique_key ~= nil and (#unique_key == 0 or #unique_key > 256
      or string.find(unique_key, '%c') or string.find(unique_key, '\194[\128-\159]')) then
    corrupt(key, 'unique_key is no name (1 to 256 bytes, no control characters)')
  end
  return job
end

-- The job stored at `key` as a table (nil when there is none), as job_of
-- reads it: raises TENURE_CORRUPT when a field cannot be read and
-- WRONGTYPE when the key is not a hash.
local function load_job(key, id)
  local fields, flat = hash_fields(key)
  if fields == nil then
    return nil
  end
  return job_of(key, id, fields, flat)
end

-- The index of the jobs of `queue` enqueued with the uniqueness key `key`
-- (Keys::unique on the Rust side).
local function unique_index(prefix, queue, key)
  return prefix .. 'unique:' .. #queue .. ':' .. queue .. ':' .. key
end

-- rules::holds_unique_key on a job hash's unique_policy, state and
-- unique_until fields at `now` (false for a policy or an end that is not an
-- integer: such a job cannot be decoded, and holds nothing).
local function holds_unique_key(policy, state, ends, now)
  if policy == 'while_queued' then
    return state == 'queued'
  elseif policy == 'while_unfinished' then
    return state == 'queued' or state == 'claimed'
  elseif policy == 'for_period' then
    return type(ends) == 'string' and string.match(ends, '^%-?%d+$') ~= nil
      and now < tonumber(ends)
  end
  return false
end

-- rules::judge_job: nil when the claim (owner, fence as decimal text) still
-- holds the job, else the loss as reply parts.
local function judge_job(job, owner, fence)
  if not job then
    return { 'missing' }
  end
  if job.state == 'completed' or job.state == 'dead_lettered' then
    return { 'finished', job.state }
  end
  if job.state == 'queued' then
    return { 'requeued' }
  end
  if job.owner ~= owner then
    return { 'owner_changed' }
  end
  if job.fence ~= fence then
    return { 'fence_changed' }
  end
  return nil
end

-- Indexes a queued job in its queue's ready zset when run_at has passed,
-- else in its delayed zset.
local function index_queued(prefix, id, queue, priority, created, run_at, run_at_rank, now)
  local rank = claim_rank(priority, run_at_rank, created, id)
  if tonumber(run_at) <= now then
    redis.call('ZADD', prefix .. 'ready:' .. queue, 0, rank)
  else
    redis.call('ZADD', prefix .. 'delayed:' .. queue, run_at, rank)
  end
end

-- Puts a loaded job back in its queue, visible from `run_at` (us, >= 0),
-- its lease cleared: the state change shared by fail (retry), defer and reap.
local function requeue(prefix, job, run_at, now)
  local run_at_text = fmt(run_at)
  write_fields(job, { 'state', 'queued', 'run_at', run_at_text, 'updated', fmt(now) })
  delete_field(job, 'expires')
  redis.call('ZREM', prefix .. 'claimed', job.id)
  index_queued(prefix, job.id, job.queue, job.priority, job.fields.created, run_at_text,
    time_rank(run_at_text), now)
end

-- Dead-letters a loaded job for `reason`, its lease cleared.
local function dead_letter(prefix, job, reason, now)
  write_fields(job, { 'state', 'dead_lettered', 'dead', reason, 'updated', fmt(now) })
  delete_field(job, 'expires')
  redis.call('ZREM', prefix .. 'claimed', job.id)
  redis.call('ZADD', prefix .. 'dead:' .. job.queue, fmt(now), job.id)
  redis.call('ZADD', prefix .. 'finished', fmt(now), job.id)
end

-- Completes a loaded job, its lease cleared: complete and complete_many.
local function complete_job(job, claimed_key, finished_key, now)
  write_fields(job, { 'state', 'completed', 'updated', fmt(now) })
  delete_field(job, 'expires')
  redis.call('ZREM', claimed_key, job.id)
  redis.call('ZADD', finished_key, fmt(now), job.id)
end

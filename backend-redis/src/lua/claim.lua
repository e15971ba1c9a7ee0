-- claim: hands out up to `limit` visible jobs of a queue, best first
-- (contract §9 (tenure_lease_core::contract), rules::claimable, rules::claim_order,
-- rules::claim_job).
-- KEYS[1] the queue's ready zset, KEYS[2] the queue's delayed zset,
-- KEYS[3] fence counter, KEYS[4] claimed zset, then, with a rate limit
-- only, KEYS[5] its log and KEYS[6] the rate logs' index (rate_log).
-- ARGV[1] key prefix (job hashes are found at run time), ARGV[2] queue,
-- ARGV[3] worker, ARGV[4] ttl in us, ARGV[5] limit, ARGV[6] most ready
-- entries looked at, ARGV[7] most due delayed entries moved into ready,
-- ARGV[8] the rate limit's log name ('' = no rate limit), ARGV[9] its
-- permits, ARGV[10] its period in us ('' without a limit),
-- ARGV[11..] the worker's capabilities.
-- Reply: { { job, ... }, { { id, reason }, ... } }: the jobs claimed, as
-- they now are and in the order their fences were drawn, where a job is
-- { id, field pairs }; then the jobs met that could not be judged (left
-- alone, reported by the caller); when the rate limit held back a
-- claimable job, then also now (store time in us) and the log as written
-- ({ use, ... }, in us), from which the caller computes retry_after.
--
-- The rate log is read and checked first: one that cannot be decoded
-- fails the claim before any write. Then the delayed jobs now due move
-- into ready (at most ARGV[7], earliest run_at first): that write only
-- re-indexes jobs that are queued either way. Then ready is walked in claim
-- order, at most ARGV[6] entries, and every job is judged before the first
-- claim is written. With a rate limit at most as many jobs as it has
-- permits left are claimed, each writing one use at now
-- (queue_engine::claim); one more claimable job looked for tells whether
-- it held one back.

local prefix, queue, worker = ARGV[1], ARGV[2], ARGV[3]
local wanted, scan_bound = tonumber(ARGV[5]), tonumber(ARGV[6])
local now = now_us()
local fences = fence_counter(KEYS[3], now)
local rate, permits = nil, wanted
if ARGV[8] ~= '' then
  rate = rate_log(KEYS[5], KEYS[6], ARGV[8], tonumber(ARGV[9]), tonumber(ARGV[10]), now)
  permits = rate.permits - #rate.uses
end
local limit = wanted
if permits < wanted then
  limit = permits + 1
end

local due = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', fmt(now), 'LIMIT', 0, tonumber(ARGV[7]))
for _, rank in ipairs(due) do
  redis.call('ZADD', KEYS[1], 0, rank)
  redis.call('ZREM', KEYS[2], rank)
end

local capable = {}
for i = 11, #ARGV do
  capable[ARGV[i]] = true
end

local function fits(caps)
  for _, cap in ipairs(caps) do
    if not capable[cap] then
      return false
    end
  end
  return true
end

-- Judges the job a ready entry names: 'pick' (with the job), 'skip' (not
-- claimable now), 'stale' (the entry names no queued job of this queue) or
-- 'corrupt' (with the reason). One HGETALL reads the job: what decides
-- first, then the whole job for the one picked.
local function judge(rank)
  local id = string.sub(rank, RANK_ID_START)
  if id == '' then
    return 'stale'
  end
  local key = prefix .. 'job:' .. id
  local read, fields, flat = pcall(hash_fields, key)
  if not read then
    return 'corrupt', id, failure_reason(fields)
  end
  if not fields then
    return 'stale'
  end
  local state = fields.state
  if not JOB_STATES[state] then
    return 'corrupt', id, 'unknown job state ' .. tostring(state)
  end
  if state ~= 'queued' or fields.queue ~= queue then
    return 'stale'
  end
  local run_at = fields.run_at
  if not run_at or not string.match(run_at, '^%-?%d+$') then
    return 'corrupt', id, 'run_at is not an integer'
  end
  if tonumber(run_at) > now then
    return 'skip'
  end
  local ok, caps = pcall(string_array, key, 'caps', fields.caps)
  if not ok then
    return 'corrupt', id, failure_reason(caps)
  end
  if not fits(caps) then
    return 'skip'
  end
  local loaded, job = pcall(job_of, key, id, fields, flat, caps)
  if not loaded then
    return 'corrupt', id, failure_reason(job)
  end
  -- rules::claimable: a count at MAX_ATTEMPTS (1000) is never claimed into
  -- one no reader accepts.
  if job.attempt >= 1000 then
    return 'skip'
  end
  return 'pick', job
end

-- Ranks are read `limit` at a time at first (most ready jobs are
-- claimable), twice as many each time after, at most 256.
local picked, stale, skipped, seen = {}, {}, {}, {}
local offset, chunk = 0, math.min(limit, 256)
while #picked < limit and offset < scan_bound do
  local ranks = redis.call('ZRANGE', KEYS[1], offset, math.min(offset + chunk, scan_bound) - 1)
  chunk = math.min(chunk * 2, 256)
  if #ranks == 0 then
    break
  end
  for _, rank in ipairs(ranks) do
    local verdict, subject, reason = judge(rank)
    if verdict == 'pick' and not seen[subject.id] then
      seen[subject.id] = true
      picked[#picked + 1] = { rank = rank, job = subject }
      if #picked == limit then
        break
      end
    elseif verdict == 'stale' then
      stale[#stale + 1] = rank
    elseif verdict == 'corrupt' then
      skipped[#skipped + 1] = { subject, reason }
    end
  end
  offset = offset + #ranks
end

local held_back = #picked > permits
for i = #picked, permits + 1, -1 do
  picked[i] = nil
end

-- Decided: from here on only writes.
for _, rank in ipairs(stale) do
  redis.call('ZREM', KEYS[1], rank)
end
local expires = fmt(now + tonumber(ARGV[4]))
local claimed = {}
local drawn = draw_fences(fences, #picked)
for i, pick in ipairs(picked) do
  local job = pick.job
  local fence = drawn[i]
  write_fields(job, { 'state', 'claimed', 'owner', worker, 'fence', fmt(fence),
    'attempt', fmt(job.attempt + 1), 'expires', expires, 'updated', fmt(now) })
  delete_field(job, 'dead')
  redis.call('ZREM', KEYS[1], pick.rank)
  redis.call('ZADD', KEYS[4], expires, job.id)
  claimed[#claimed + 1] = reply_record(job)
end
if rate then
  local spent = rate_spent(rate, #picked)
  if #picked > 0 then
    save_rate_log(rate, spent)
  end
  if held_back then
    return { claimed, skipped, fmt(now), rate_texts(spent) }
  end
end
return { claimed, skipped }

-- enqueue and enqueue_batch, enqueue_unique and enqueue_unique_batch: adds
-- jobs, refusing all of them for a taken id, then judging each in order
-- against the jobs holding its uniqueness key (contract §9 and §9.6
-- (tenure_lease_core::contract), rules::new_job, queue_engine::enqueue_batch).
-- Every id, and the type of every uniqueness index, is checked before the
-- first write.
-- KEYS[i] job hash of job i (i = 1..n), then the uniqueness index
--   (unique_index) of each job with a key, in the jobs' order.
-- ARGV[1] key prefix (the queues' ready and delayed keys and the hashes of
-- the indexed jobs are built from it), then 11 values per job i, from
--   ARGV[11i-9]: id, queue, payload JSON, priority, run_at in us ('' = now),
--   run_at in claim rank form ('' = now), max_attempts, required
--   capabilities as a JSON array, uniqueness key, its policy's kind and its
--   period in us (the last three '' when the job has no key, the period ''
--   unless the kind is for_period).
-- Reply: { 'exists', id } (nothing written) |
-- { 'enqueued', now, duplicates, skipped } where now is store time in us,
-- the created jobs' created_at; duplicates are { i, holder } for each job i
-- not created because holder ({ id, HGETALL pairs }, stored or created
-- earlier in the batch) holds its key; skipped are { id, reason } for the
-- indexed jobs met that could not be judged, passed over.

local FIELDS = 11
-- Index entries read per ZRANGE while looking for a key's holder.
local PAGE = 100
local prefix = ARGV[1]
local count = (#ARGV - 1) / FIELDS
for i = 1, count do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    return { 'exists', ARGV[FIELDS * i - 9] }
  end
end
for i = count + 1, #KEYS do
  local kind = redis.call('TYPE', KEYS[i]).ok
  if kind ~= 'none' and kind ~= 'zset' then
    corrupt(KEYS[i], 'the uniqueness index is a ' .. kind)
  end
end

-- The first job of `index` in (created_at, id) order that holds `key` of
-- `queue` at `now` and can be decoded, or nil; those that hold it but
-- cannot be decoded are added to `skipped`.
local function unique_holder(index, queue, key, now, skipped)
  local start, ids = 0, nil
  repeat
    ids = redis.call('ZRANGE', index, start, start + PAGE - 1)
    for _, id in ipairs(ids) do
      local job_key = prefix .. 'job:' .. id
      local fields = redis.pcall('HMGET', job_key, 'queue', 'unique_key', 'unique_policy',
        'state', 'unique_until')
      if fields.err then
        skipped[#skipped + 1] = { id, fields.err }
      elseif fields[1] == queue and fields[2] == key
        and holds_unique_key(fields[3], fields[4], fields[5], now) then
        local ok, job = pcall(load_job, job_key, id)
        if ok then
          return job
        end
        skipped[#skipped + 1] = { id, failure_reason(job) }
      end
    end
    start = start + PAGE
  until #ids < PAGE
  return nil
end

local now = now_us()
local now_text = fmt(now)
local duplicates, skipped = {}, {}
local indexes = count
for i = 1, count do
  local base = FIELDS * (i - 1) + 1
  local id, queue, priority = ARGV[base + 1], ARGV[base + 2], tonumber(ARGV[base + 4])
  local unique_key, policy, period = ARGV[base + 9], ARGV[base + 10], ARGV[base + 11]
  local index, holder = nil, nil
  if policy ~= '' then
    indexes = indexes + 1
    index = KEYS[indexes]
    holder = unique_holder(index, queue, unique_key, now, skipped)
  end
  if holder then
    duplicates[#duplicates + 1] = { i, reply_record(holder) }
  else
    local run_at, run_at_rank = ARGV[base + 5], ARGV[base + 6]
    if run_at == '' then
      run_at, run_at_rank = now_text, time_rank(now_text)
    end
    redis.call('HSET', KEYS[i], 'queue', queue, 'payload', ARGV[base + 3],
      'priority', ARGV[base + 4], 'run_at', run_at, 'attempt', '0',
      'max_attempts', ARGV[base + 7], 'caps', ARGV[base + 8], 'state', 'queued',
      'fence', '0', 'created', now_text, 'updated', now_text)
    if index then
      local unique = { 'unique_key', unique_key, 'unique_policy', policy }
      if period ~= '' then
        add_change(unique, 'unique_until', fmt(now + tonumber(period)))
      end
      redis.call('HSET', KEYS[i], unpack(unique))
      redis.call('ZADD', index, now_text, id)
    end
    index_queued(prefix, id, queue, priority, now_text, run_at, run_at_rank, now)
  end
end
return { 'enqueued', now_text, duplicates, skipped }

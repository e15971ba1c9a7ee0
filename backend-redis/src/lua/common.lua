-- Shared prelude: scripts.rs prepends this file to every script of the crate.
--
-- Key layout. Every key of a namespace starts with the prefix
-- `tenure:{<namespace>}:` (namespaces never contain `{` or `}`), so all of
-- them share one hash slot and a script may build keys at run time from that
-- prefix, which scripts that need it receive as ARGV[1]:
--   <prefix>fence            string: the last fence handed out, decimal (see
--                            draw_fences); the store-wide fence sequence
--   <prefix>epoch            hash: the server's replication id when a fence
--                            was last drawn or checked (replid) and the
--                            first fence drawn under it (floor); see
--                            failover_floor
--   <prefix>expiry           zset: active ids by lease expiry in us (no lease: -inf)
--   <prefix>active           zset: active ids, all scored 0 (so ordered by id)
--   <prefix>terminal         zset: interrupted and terminal ids (those purge
--                            deletes once old enough) by updated_at in us
--   <prefix>rec:<id>         hash: one record (fields below)
--   <prefix>holder:<key>     string: id of the active record holding the key, a
--                            scope's rules::slot_key: the scope itself (an
--                            exclusive scope, or slot 0 of a counted one),
--                            else the scope, U+001F and the slot number in
--                            decimal (slot_key below)
--   <prefix>scope:<scope>    zset: ids of every record naming the scope, by created_at
--   <prefix>rate:<name>      string: a rate limit's log (see rate_log), <name>
--                            being rate_rules::log_name, `<permits>:<period
--                            in ms>:<key>` (digits first, so unambiguous)
--   <prefix>rates            zset: the names of the rate logs by when they stop
--                            counting in us (purge deletes those ended)
-- The job-queue keys (job:, ready:, delayed:, dead:, unique:, claimed and
-- finished) are described in queue_common.lua, the fence-gate keys (gate: and gates) in
-- gate_common.lua.
-- The fixed keys have no `:` after the prefix and each family has its own
-- fixed prefix ending in `:`, so no id, scope or queue can make two keys
-- collide.
--
-- Record hash fields: kind, status, owner, fence, expires (absent: no lease),
-- created, updated (timestamps as integer microseconds since the epoch),
-- error, stop (absent: none), scopes (JSON array of strings), meta (JSON object),
-- slots (absent: no counted scope; else a JSON object, each counted scope
-- to the slot it holds there, a u32 in plain decimal, see record_slots).
-- Replies carry a record (or a job) as { id, field pairs }: the pairs HGETALL
-- answers, in any order (see reply_record).
--
-- Every script reads and judges everything first, then writes: Lua does not
-- roll back, so no script may fail after its first write.

local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- Integers as plain decimal text (tostring would switch to exponent form).
local function fmt(n)
  return string.format('%d', n)
end

-- JSON's whitespace, as a pattern.
local JSON_SPACE = '[ \t\r\n]*'

local ACTIVE = { pending = true, running = true }
-- limits::MAX_SCOPE_CAPACITY: every slot is below it.
local MAX_SCOPE_CAPACITY = 1000
local TERMINAL = { succeeded = true, failed = true }
local KNOWN = { pending = true, running = true, interrupted = true, succeeded = true, failed = true }

local function corrupt(key, why)
  error({ err = 'TENURE_CORRUPT ' .. key .. ': ' .. why })
end

-- The reason a pcall'ed load failed for, as text.
local function failure_reason(failure)
  if type(failure) == 'table' and failure.err then
    return failure.err
  end
  return tostring(failure)
end

local function integer(key, fields, name)
  local value = fields[name]
  if type(value) ~= 'string' or not string.match(value, '^%-?%d+$') then
    corrupt(key, name .. ' is not an integer')
  end
  return tonumber(value)
end

-- Field `name` as an integer in [low, high]; raises TENURE_CORRUPT
-- otherwise.
local function bounded(key, fields, name, low, high)
  local value = integer(key, fields, name)
  if value < low or value > high then
    corrupt(key, name .. ' is out of range')
  end
  return value
end

-- A timestamp field: integer microseconds within the range the Rust side
-- represents (chrono's, about year +-262000; the bound is a little inside
-- it, and far from where a double's rounding could matter).
local TIMESTAMP_BOUND = 8.2e18
local function timestamp(key, fields, name)
  return bounded(key, fields, name, -TIMESTAMP_BOUND, TIMESTAMP_BOUND)
end

-- A fence field: a decimal u64 (the bound is 2^64, as a double).
local function fence_field(key, fields)
  local fence = fields.fence
  if type(fence) ~= 'string' or not string.match(fence, '^%d+$') or #fence > 20
    or tonumber(fence) >= 18446744073709551616 then
    corrupt(key, 'fence is not a number')
  end
  return fence
end

-- The fields of the hash at `key` as a table, and as HGETALL answered them;
-- nil when there is no such key; WRONGTYPE when the key is not a hash.
local function hash_fields(key)
  local flat = redis.call('HGETALL', key)
  if #flat == 0 then
    return nil
  end
  local fields = {}
  for i = 1, #flat, 2 do
    fields[flat[i]] = flat[i + 1]
  end
  return fields, flat
end

-- rules::SLOT_SEPARATOR, between a counted scope and its slot in a key.
local SLOT_SEPARATOR = '\31'

-- rules::slot_key: the key under which slot `slot` of `scope` is held
-- (`<prefix>holder:` before it makes its holder key).
local function slot_key(scope, slot)
  if slot == 0 then
    return scope
  end
  return scope .. SLOT_SEPARATOR .. fmt(slot)
end

-- A JSON text with every string literal emptied (to '""'), or nil when a
-- literal does not end: what is left holds the text's numbers and
-- punctuation, for record_slots to check.
local function without_strings(text)
  local parts, at = {}, 1
  while true do
    local quote = string.find(text, '"', at, true)
    if quote == nil then
      parts[#parts + 1] = string.sub(text, at)
      return table.concat(parts)
    end
    parts[#parts + 1] = string.sub(text, at, quote - 1)
    parts[#parts + 1] = '""'
    local from = quote + 1
    while true do
      local stop = string.find(text, '["\\]', from)
      if stop == nil then
        return nil
      end
      if string.sub(text, stop, stop) == '"' then
        at = stop + 1
        break
      end
      from = stop + 2
    end
  end
end

-- The `slots` field of the record at `key` (fields as hash_fields answers
-- them) as a table, counted scope to slot; empty when absent. Raises
-- TENURE_CORRUPT for anything the Rust side does not decode as a JSON
-- object of u32 (no array, no fraction, exponent, sign or leading zero, no
-- slot above 2^32 - 1), or refuses as no admission's (a slot of a scope
-- the record does not name, or one of 1000 or more: stored::check_slots),
-- before any write of the script.
local function record_slots(key, fields, scopes)
  local text = fields.slots
  if text == nil then
    return {}
  end
  local ok, slots = pcall(cjson.decode, text)
  local bare = without_strings(text)
  if not ok or type(slots) ~= 'table' or bare == nil
    or not string.match(bare, '^' .. JSON_SPACE .. '{[%d:, \t\r\n"]*}' .. JSON_SPACE .. '$')
    or string.match(bare, '[^%d]0%d') then
    corrupt(key, 'slots are not a JSON object of slot numbers')
  end
  for scope, slot in pairs(slots) do
    if type(scope) ~= 'string' or type(slot) ~= 'number' or slot ~= math.floor(slot)
      or slot < 0 or slot > 4294967295 then
      corrupt(key, 'slots are not a JSON object of slot numbers')
    end
    if slot >= MAX_SCOPE_CAPACITY then
      corrupt(key, 'slots: a slot beyond the largest capacity')
    end
    local named = false
    for _, each in ipairs(scopes) do
      if each == scope then
        named = true
      end
    end
    if not named then
      corrupt(key, 'slots: a slot of a scope the record does not name')
    end
  end
  return slots
end

-- The record stored at `key` as a table (nil when there is none); raises
-- TENURE_CORRUPT when a field cannot be read (every field the Rust side
-- decodes but the UTF-8 of texts and that metadata is an object, not an
-- array), and WRONGTYPE when the key is not a hash.
local function load(key, id)
  local fields, flat = hash_fields(key)
  if fields == nil then
    return nil
  end
  if not KNOWN[fields.status] then
    corrupt(key, 'unknown status ' .. tostring(fields.status))
  end
  if type(fields.kind) ~= 'string' then
    corrupt(key, 'kind is missing')
  end
  local meta_ok, meta = pcall(cjson.decode, fields.meta or '')
  if not meta_ok or type(meta) ~= 'table' then
    corrupt(key, 'metadata is not a JSON object')
  end
  local record = {
    id = id,
    key = key,
    fields = fields,
    flat = flat,
    status = fields.status,
    owner = fields.owner,
    fence = fence_field(key, fields),
    created = timestamp(key, fields, 'created'),
    updated = timestamp(key, fields, 'updated'),
  }
  if fields.expires ~= nil then
    record.expires = timestamp(key, fields, 'expires')
  end
  local ok, scopes = pcall(cjson.decode, fields.scopes or '')
  if not ok or type(scopes) ~= 'table' then
    corrupt(key, 'scopes are not a JSON array')
  end
  for _, scope in ipairs(scopes) do
    if type(scope) ~= 'string' then
      corrupt(key, 'scopes are not strings')
    end
  end
  record.scopes = scopes
  record.slots = record_slots(key, fields, scopes)
  return record
end

-- Fences: a hybrid logical clock. Each fence is the greater of the last fence
-- + 1 and the server's time in us, so the sequence goes on from the clock
-- when the counter is lost (a restart without persistence, a lost second of
-- writes, a lagging replica promoted): every fence drawn afterwards still
-- exceeds every fence drawn before, as long as the counter never ran ahead
-- of the clock by more than the time the loss went back (it runs ahead only
-- while more than one fence per us is drawn) and the new server's clock is
-- not behind the old one's.
--
-- Lua numbers are doubles, exact only up to 2^53 (about 9.007e15 us, the
-- year 2255): a counter or a clock at or beyond FENCE_HORIZON is refused
-- rather than rounded, with room left below 2^53 for the fences one script
-- draws. The counter is only ever compared and incremented, never otherwise
-- computed on.
local FENCE_HORIZON = 9007199254740992 - 4294967296

-- Failovers. A promoted replica starts a new replication id (INFO
-- replication's master_replid), and so does a server restarted without
-- its replication state. The first script that draws or checks a fence
-- under a new id records it with a floor: the first fence drawn under it.
-- Every fence drawn before (on the old primary, those the promoted replica
-- never received included) is below the floor, by the hybrid clock's
-- argument above; every fence drawn after is at or above it. A gate that
-- refuses fences from before a failover refuses every fence below it.
--
-- The epoch beside the counter at `counter_key` (<prefix>fence →
-- <prefix>epoch), read and checked: { key, replid (the server's now),
-- floor (nil when the recorded id is another: a failover not yet
-- recorded) }. Raises TENURE_CORRUPT for a floor that is not a number
-- (and WRONGTYPE when the key is not a hash).
local function failover_epoch(counter_key)
  local key = string.sub(counter_key, 1, -6) .. 'epoch'
  local info = redis.call('INFO', 'replication')
  local replid = string.match(info, 'master_replid:(%x+)') or ''
  local recorded = redis.call('HMGET', key, 'replid', 'floor')
  local floor = nil
  if recorded[1] == replid then
    if type(recorded[2]) ~= 'string' or not string.match(recorded[2], '^%d+$')
      or #recorded[2] > 16 then
      corrupt(key, 'the failover floor is not an integer')
    end
    floor = tonumber(recorded[2])
  end
  return { key = key, replid = replid, floor = floor }
end

-- Records `first` as the floor of a failover not yet recorded.
local function record_failover(epoch, first)
  if epoch.floor == nil then
    epoch.floor = first
    redis.call('HSET', epoch.key, 'replid', epoch.replid, 'floor', fmt(first))
  end
end

-- The fence counter at `key` at store time `now`, checked: call it while
-- judging, before the first write, since it raises TENURE_CORRUPT when the
-- counter is not a decimal integer below FENCE_HORIZON (and WRONGTYPE when
-- the key is not a string).
local function fence_counter(key, now)
  local text = redis.call('GET', key)
  local last = 0
  if text then
    if not string.match(text, '^%d+$') or #text > 16 then
      corrupt(key, 'the fence counter is not an integer')
    end
    last = tonumber(text)
  end
  if last >= FENCE_HORIZON or now >= FENCE_HORIZON then
    corrupt(key, 'the fence counter or the server clock is beyond 2^53 - 2^32, '
      .. 'where Lua numbers lose precision')
  end
  return { key = key, last = last, now = now, epoch = failover_epoch(key) }
end

-- The next `count` fences of a checked counter, ascending, the last one
-- stored as the counter: one write however many are drawn (a batch claim
-- draws one per job).
local function draw_fences(counter, count)
  local drawn = {}
  local last = counter.last
  for i = 1, count do
    last = math.max(last + 1, counter.now)
    drawn[i] = last
  end
  if count > 0 then
    counter.last = last
    redis.call('SET', counter.key, fmt(last))
    record_failover(counter.epoch, drawn[1])
  end
  return drawn
end

-- The failover floor of a checked counter: the floor recorded under the
-- server's replication id, or, when none is yet, the next fence, drawn
-- here (no owner holds it) and recorded as the floor.
local function failover_floor(counter)
  if counter.epoch.floor == nil then
    draw_fences(counter, 1)
  end
  return counter.epoch.floor
end

-- The next fence of a checked counter, stored as the last one.
local function draw_fence(counter)
  return draw_fences(counter, 1)[1]
end

-- rules::lease_valid, with grace rounded up to whole microseconds (which
-- decides exactly as the nanosecond comparison does on microsecond times).
local function lease_valid(record, grace, now)
  return ACTIVE[record.status] and record.expires ~= nil and record.expires + grace > now
end

-- Drops `record` from every index of active records: the keys it holds
-- (rules::held_keys: one slot of each counted scope), the expiry index and the
-- active set. Each scope freed is published, by name (not by key), on
-- channel `<prefix>released` (the store's release notices), which
-- subscribers hear once the script has run whole. With pcall: a user
-- without the channel's permission (Redis 7 ACL users get none by default)
-- loses the notices, never a release half written.
local function release(prefix, record, expiry_key, active_key)
  for _, scope in ipairs(record.scopes) do
    local holder_key = prefix .. 'holder:' .. slot_key(scope, record.slots[scope] or 0)
    if redis.call('GET', holder_key) == record.id then
      redis.call('DEL', holder_key)
      redis.pcall('PUBLISH', prefix .. 'released', scope)
    end
  end
  redis.call('ZREM', expiry_key, record.id)
  redis.call('ZREM', active_key, record.id)
end

-- Writes to a hash a script loaded (a record of load, a job of load_job):
-- each writes the hash and its fields table alike, so the table stays what
-- HGETALL would answer and reply_record answers from it. Neither reads the
-- store, so both belong after judging.

-- HSETs `changes`, a list of field names and their texts (name, text, ...),
-- on `hash`.
local function write_fields(hash, changes)
  redis.call('HSET', hash.key, unpack(changes))
  local fields = hash.fields
  for i = 1, #changes, 2 do
    fields[changes[i]] = changes[i + 1]
  end
  hash.written = true
end

-- Adds field `name`, set to `text`, to a list of changes for write_fields.
local function add_change(changes, name, text)
  changes[#changes + 1] = name
  changes[#changes + 1] = text
end

-- HDELs field `name` of `hash`, if it has one.
local function delete_field(hash, name)
  if hash.fields[name] ~= nil then
    redis.call('HDEL', hash.key, name)
    hash.fields[name] = nil
    hash.written = true
  end
end

-- A new hash at `key`: HSETs `field_pairs` (name, text, ..., no name twice)
-- and answers it for reply_record, which answers those pairs. It keeps no
-- fields table: write_fields and delete_field do not take it.
local function create_hash(key, id, field_pairs)
  redis.call('HSET', key, unpack(field_pairs))
  return { id = id, key = key, flat = field_pairs }
end

-- A hash as replies carry it: { id, field pairs }, the pairs HGETALL would
-- answer now: the list HGETALL answered at load (or the pairs create_hash
-- wrote) while nothing else was written, else its fields table, in any
-- order, rewritten over that list (already about the right size, so no
-- table grows).
local function reply_record(hash)
  local flat = hash.flat
  if hash.written then
    local loaded = #flat
    local count = 0
    for name, text in pairs(hash.fields) do
      flat[count + 1] = name
      flat[count + 2] = text
      count = count + 2
    end
    for i = count + 1, loaded do
      flat[i] = nil
    end
  end
  return { hash.id, flat }
end

-- Rate logs (contract §16, rate_rules). A limit's log, <prefix>rate:<name>,
-- holds the instants of its last uses as rate_rules::encode_uses writes
-- them: a JSON array of integers, us since the epoch, at most `permits` of
-- them. The script that judges a limit writes its uses in the same run;
-- <prefix>rates scores each log's name by rate_rules::log_ends_at (its
-- newest use + period), which purge walks: no key has an expiry.

-- The log of a limit of `permits` uses per `period` us at store time `now`:
-- its key, the index of logs and its name there. Read and checked as
-- rate_rules::stored_uses checks it, and answered as { key, index, name,
-- permits, period, now, uses }, where uses are those that count at now
-- (rate_rules::counts), ascending, each { at = its instant, text = as
-- stored }. Raises TENURE_CORRUPT when the log is no JSON array of instants
-- or holds more uses than permits, WRONGTYPE when it is no string or the
-- index no zset: call it while judging, before the first write.
local function rate_log(key, index, name, permits, period, now)
  redis.call('ZSCORE', index, name)
  local text = redis.call('GET', key)
  local uses = {}
  if text then
    local items = string.match(text, '^' .. JSON_SPACE .. '%[(.*)%]' .. JSON_SPACE .. '$')
    if items == nil then
      corrupt(key, 'the rate log is no JSON array')
    end
    local stored = 0
    if not string.match(items, '^' .. JSON_SPACE .. '$') then
      for item in string.gmatch(items .. ',', '([^,]*),') do
        local digits = string.match(item, '^' .. JSON_SPACE .. '(%-?%d+)' .. JSON_SPACE .. '$')
        if digits == nil or string.match(digits, '^%-?0%d') then
          corrupt(key, 'the rate log holds ' .. string.sub(item, 1, 40) .. ', which is no integer')
        end
        local at = tonumber(digits)
        if at < -TIMESTAMP_BOUND or at > TIMESTAMP_BOUND then
          corrupt(key, 'the rate log holds ' .. digits .. ', which is no instant')
        end
        stored = stored + 1
        if now < at or now - at < period then
          uses[#uses + 1] = { at = at, text = digits }
        end
      end
    end
    if stored > permits then
      corrupt(key, 'the rate log holds ' .. stored .. ' uses, above its ' .. permits
        .. ' permits')
    end
    table.sort(uses, function(a, b) return a.at < b.at end)
  end
  return { key = key, index = index, name = name, permits = permits, period = period,
    now = now, uses = uses }
end

-- rate_rules::spent: the uses of `log` after `count` more at its now, the
-- uses counting and the new ones, ascending, the newest `permits` kept.
local function rate_spent(log, count)
  local uses = {}
  for _, use in ipairs(log.uses) do
    uses[#uses + 1] = use
  end
  for _ = 1, count do
    uses[#uses + 1] = { at = log.now, text = fmt(log.now) }
  end
  table.sort(uses, function(a, b) return a.at < b.at end)
  local kept = {}
  for i = math.max(#uses - log.permits, 0) + 1, #uses do
    kept[#kept + 1] = uses[i]
  end
  return kept
end

-- The instants of `uses`, as their text, for a reply.
local function rate_texts(uses)
  local texts = {}
  for i, use in ipairs(uses) do
    texts[i] = use.text
  end
  return texts
end

-- Stores `uses` (of rate_spent, never empty) as `log`, indexed by when
-- they stop counting (rate_rules::log_ends_at).
local function save_rate_log(log, uses)
  redis.call('SET', log.key, '[' .. table.concat(rate_texts(uses), ',') .. ']')
  redis.call('ZADD', log.index, fmt(uses[#uses].at + log.period), log.name)
end

-- count_jobs: one page of the walk count_jobs makes over a namespace's job
-- hashes (contract §9 (tenure_lease_core::contract)): one SCAN step from a
-- cursor, then each hash's queue and state. One page per call keeps the
-- server free for other clients between pages; the caller tallies the pages
-- and drops keys SCAN hands out twice.
-- KEYS[1] the namespace's finished zset (it names the namespace's hash
-- slot; the script does not read it).
-- ARGV[1] cursor ('0' to start), ARGV[2] SCAN MATCH pattern of the job
-- hashes, ARGV[3] SCAN COUNT hint.
-- Reply: { next cursor ('0' when the walk is done), { key, queue, state,
-- key, queue, state, ... } }, with '' for a queue or state the key does not
-- hold as a string (a key of another type, a field missing).

local page = redis.call('SCAN', ARGV[1], 'MATCH', ARGV[2], 'COUNT', tonumber(ARGV[3]))
local found = {}
for _, key in ipairs(page[2]) do
  -- pcall: a key of another type is reported, never stops the walk.
  local fields = redis.pcall('HMGET', key, 'queue', 'state')
  local queue, state = '', ''
  if not fields.err then
    if type(fields[1]) == 'string' then queue = fields[1] end
    if type(fields[2]) == 'string' then state = fields[2] end
  end
  found[#found + 1] = key
  found[#found + 1] = queue
  found[#found + 1] = state
end
return { page[1], found }

-- get and get_job: one record or one job.
-- KEYS[1] record hash or job hash. ARGV[1] id.
-- Reply: { record } or {} when there is none, where a record (or job) is
-- { id, HGETALL pairs }.

local flat = redis.call('HGETALL', KEYS[1])
if #flat == 0 then
  return {}
end
return { { ARGV[1], flat } }

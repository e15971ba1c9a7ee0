-- count_purgeable: how many records purge.lua would delete now (contract §8
-- (tenure_lease_core::contract), rules::purgeable): interrupted and terminal
-- records last updated at least a retention ago, counted on the index purge
-- walks; deletes nothing.
-- KEYS[1] terminal zset (interrupted and terminal ids by last update).
-- ARGV[1] retention in us (rounded up).
-- Reply: the count.

return redis.call('ZCOUNT', KEYS[1], '-inf', fmt(now_us() - tonumber(ARGV[1])))

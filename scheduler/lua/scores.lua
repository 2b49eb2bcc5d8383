-- scores.lua: the scores of the same members in two sorted sets of one shard, as of one instant.
--
-- KEYS[1]  {chrono:<s>}:due       ZSET
-- KEYS[2]  {chrono:<s>}:inflight  ZSET
-- ARGV     timer ids
--
-- Returns {due scores, inflight scores}, each in ARGV's order, nil where a member is absent.
-- (The reconciler's read: a script rather than MULTI, whose error path corrupts redis-py 6.4's
-- cluster client for every thread of the process after a failover; see reconcile.py.)
return {redis.call('ZMSCORE', KEYS[1], unpack(ARGV)), redis.call('ZMSCORE', KEYS[2], unpack(ARGV))}

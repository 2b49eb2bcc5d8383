-- renew_lease.lua: extend a shard lease only if the caller still holds exactly this lease value.
--
-- KEYS[1]  {chrono:<s>}:lease  STRING "<replica id>|<fencing token>"
-- ARGV[1]  the caller's lease value
-- ARGV[2]  lease TTL (ms)
--
-- Returns 1 when extended, 0 when the lease expired or passed to another replica (the caller
-- must stop dispatching that shard at once).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0

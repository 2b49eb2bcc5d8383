-- release_lease.lua: give a shard up at a clean stop, so its next owner takes it at once.
--
-- KEYS[1]  {chrono:<s>}:lease  STRING "<replica id>|<fencing token>"
-- ARGV[1]  the caller's lease value
--
-- Returns 1 when released, 0 when the caller no longer held it.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0

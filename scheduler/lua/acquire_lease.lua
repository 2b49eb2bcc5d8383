-- acquire_lease.lua: take (or keep) the lease on one shard, bumping its fencing token.
--
-- KEYS[1]  {chrono:<s>}:lease  STRING "<replica id>|<fencing token>", PX = lease TTL
-- KEYS[2]  {chrono:<s>}:fence  STRING counter, incremented on every acquire, never reset
-- ARGV[1]  replica id
-- ARGV[2]  lease TTL (ms)
--
-- Returns the new lease value when the shard was free (or already the caller's), else false.
-- Every acquire gets a fresh token, so a lease value seen before a pause never matches again.
local current = redis.call('GET', KEYS[1])
if current then
  local owner = string.match(current, '^(.*)|%d+$')
  if owner ~= ARGV[1] then
    return false
  end
end
local token = redis.call('INCR', KEYS[2])
local value = ARGV[1] .. '|' .. token
redis.call('SET', KEYS[1], value, 'PX', ARGV[2])
return value

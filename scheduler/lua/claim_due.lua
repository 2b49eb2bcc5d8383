-- claim_due.lua: move due timers of one shard from `due` to `inflight`, if the caller holds the
-- shard's lease. A replica whose lease expired (paused, cut off) gets FENCED and claims nothing.
--
-- KEYS[1]  {chrono:<s>}:due       ZSET  member = timer id, score = fire time (epoch ms)
-- KEYS[2]  {chrono:<s>}:inflight  ZSET  member = timer id, score = ack deadline (epoch ms)
-- KEYS[3]  {chrono:<s>}:claimed   HASH  timer id -> fire time (epoch ms) of the claimed occurrence
-- KEYS[4]  {chrono:<s>}:lease     STRING "<replica id>|<fencing token>", expires with the lease
-- ARGV[1]  the caller's lease value "<replica id>|<fencing token>"
-- ARGV[2]  now (epoch ms): timers with score <= now are due
-- ARGV[3]  ack deadline (epoch ms) given to what this call claims
-- ARGV[4]  the most timers to claim in this call
-- ARGV[5]  inflight entries with a deadline at or before this (epoch ms) are claimed again;
--          the caller passes now, or, for a shard it just took over, the time it took it plus
--          the ack deadline: everything the previous owner claimed and did not acknowledge
--
-- Returns a flat array: timer id, fire time, redelivered (0/1), … Inflight entries whose deadline
-- passed (their claimer died between claim and ack) are claimed again first, with redelivered = 1.
if redis.call('GET', KEYS[4]) ~= ARGV[1] then
  return redis.error_reply('FENCED lease on ' .. KEYS[4] .. ' is not held by the caller')
end
local limit = tonumber(ARGV[4])
local deadline = ARGV[3]
local out = {}

local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[5], 'LIMIT', 0, limit)
for _, member in ipairs(expired) do
  local fire = redis.call('HGET', KEYS[3], member)
  redis.call('ZADD', KEYS[2], deadline, member)
  if fire then
    out[#out + 1] = member
    out[#out + 1] = fire
    out[#out + 1] = 1
  else
    redis.call('ZREM', KEYS[2], member)
  end
end

local room = limit - #expired
if room > 0 then
  local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[2], 'WITHSCORES', 'LIMIT', 0, room)
  for i = 1, #due, 2 do
    local member, fire = due[i], due[i + 1]
    redis.call('ZREM', KEYS[1], member)
    redis.call('ZADD', KEYS[2], deadline, member)
    redis.call('HSET', KEYS[3], member, fire)
    out[#out + 1] = member
    out[#out + 1] = fire
    out[#out + 1] = 0
  end
end
return out

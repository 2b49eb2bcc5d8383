-- ack.lua: acknowledge published timers of one shard, and add the next occurrence of cron jobs.
--
-- KEYS[1]  {chrono:<s>}:due       ZSET  member = timer id, score = fire time (epoch ms)
-- KEYS[2]  {chrono:<s>}:inflight  ZSET  member = timer id, score = ack deadline (epoch ms)
-- KEYS[3]  {chrono:<s>}:claimed   HASH  timer id -> fire time (epoch ms) of the claimed occurrence
-- KEYS[4]  {chrono:<s>}:lease     STRING "<replica id>|<fencing token>"
-- ARGV[1]  the caller's lease value
-- ARGV[2…] triples: timer id, fire time that was published, next fire time or '' for none
--
-- An inflight entry is removed only when it still holds the occurrence that was published, so an
-- ack never removes a newer claim of the same timer. Returns the number of entries acknowledged.
if redis.call('GET', KEYS[4]) ~= ARGV[1] then
  return redis.error_reply('FENCED lease on ' .. KEYS[4] .. ' is not held by the caller')
end
local acked = 0
for i = 2, #ARGV, 3 do
  local member, fired, next_fire = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local claimed = redis.call('HGET', KEYS[3], member)
  if claimed and tonumber(claimed) == tonumber(fired) then
    redis.call('ZREM', KEYS[2], member)
    redis.call('HDEL', KEYS[3], member)
    acked = acked + 1
  end
  if next_fire ~= '' then
    redis.call('ZADD', KEYS[1], next_fire, member)
  end
end
return acked

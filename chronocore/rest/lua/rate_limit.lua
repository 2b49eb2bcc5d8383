-- Generic cell rate algorithm (GCRA): may one more request of a caller (a tenant, a staff user,
-- a client address) go through now?
--
-- KEYS[1]  STRING  theoretical arrival time (TAT) of the caller's next request, epoch ms;
--                  expires when the caller has been idle long enough to have its full burst back.
-- ARGV[1]  emission interval in ms (60,000 / requests per minute)
-- ARGV[2]  burst tolerance in ms (how far the TAT may run ahead of now: a minute's allowance)
-- ARGV[3]  optional: '0' only asks (nothing is counted or written), anything else or nothing
--          counts the request when it is allowed
--
-- Returns {1, 0} when the request is allowed (and counts it), or {0, wait_ms} when it is not,
-- wait_ms being how long until one more request would be allowed. The clock is Redis's own, so
-- every web process agrees on it.
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local count = ARGV[3] ~= '0'
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then
    tat = now
end
local new_tat = tat + interval
local allow_at = new_tat - burst
if allow_at > now then
    return {0, allow_at - now}
end
if count then
    redis.call('SET', KEYS[1], new_tat, 'PX', math.ceil(new_tat - now))
end
return {1, 0}

-- Generic cell rate algorithm (GCRA): may one more request of a tenant go through now?
--
-- KEYS[1]  STRING  theoretical arrival time (TAT) of the tenant's next request, epoch ms;
--                  expires when the tenant has been idle long enough to have its full burst back.
-- ARGV[1]  emission interval in ms (60,000 / requests per minute)
-- ARGV[2]  burst tolerance in ms (how far the TAT may run ahead of now: a minute's allowance)
--
-- Returns {1, 0} when the request is allowed (and counts it), or {0, wait_ms} when it is not,
-- wait_ms being how long until one more request would be allowed. The clock is Redis's own, so
-- every web process agrees on it.
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
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
redis.call('SET', KEYS[1], new_tat, 'PX', math.ceil(new_tat - now))
return {1, 0}

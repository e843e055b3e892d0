-- GCRA as redis_rate and upstash publish it: the TAT in seconds (a float) under the key, time from
-- TIME, SET .. EX with the time until the bucket is full again. ARGV: burst, rate, period (s), cost.
local key = KEYS[1]
local burst, rate, period, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local interval = period / rate
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local tat = tonumber(redis.call('GET', key)) or now
if tat < now then tat = now end
local new_tat = tat + interval * cost
local allow_at = new_tat - interval * burst
if now < allow_at then
  return {0, 0, tostring(allow_at - now), tostring(tat - now)}
end
redis.call('SET', key, tostring(new_tat), 'EX', math.ceil(new_tat - now))
return {1, math.floor((now - allow_at) / interval), '0', tostring(new_tat - now)}

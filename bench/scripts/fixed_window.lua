-- The fixed-window seed's two calls (INCR, then PEXPIRE on the window's first request) made atomic:
-- no TIME (the key's expiry is the window). ARGV: limit, window (ms), cost.
local count = redis.call('INCRBY', KEYS[1], ARGV[3])
if count == tonumber(ARGV[3]) then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
if count > tonumber(ARGV[1]) then return {0, 0, redis.call('PTTL', KEYS[1])} end
return {1, tonumber(ARGV[1]) - count}

-- CLOCK BEGIN
-- The clock: the server's, read here and nowhere else (the tests replace this block to pass the time):
-- the seconds and the microseconds as TIME writes them, and the nanoseconds below (none here).
local function clock(args)
  local t = redis.call("TIME")
  return t[1], t[2], nil
end
-- CLOCK END

------------------------------------------------------------------------------------------------------------
-- Small numbers below 2^53 as bytes (microsecond times, weights).
------------------------------------------------------------------------------------------------------------
local W32 = 4294967296

local function u32le(x)
  local b0 = x % 256
  x = (x - b0) / 256
  local b1 = x % 256
  x = (x - b1) / 256
  local b2 = x % 256
  return char(b0, b1, b2, (x - b2) / 256)
end

local function u64le(x)
  local lo = x % W32
  return u32le(lo) .. u32le((x - lo) / W32)
end

local function u32at(s, at)
  local b0, b1, b2, b3 = byte(s, at, at + 3)
  return ((b3 * 256 + b2) * 256 + b1) * 256 + b0
end

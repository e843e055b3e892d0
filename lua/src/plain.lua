------------------------------------------------------------------------------------------------------------
-- Plain numbers and bytes, before the library: what the fast path of RL.TOKEN needs (it runs without
-- building the library, so an EVALSHA script of rl_token builds it only when that path does not apply),
-- and what the library uses too. Every value here is a whole number below 2^53, exact in a double.
------------------------------------------------------------------------------------------------------------
-- math.floor, string.char, string.byte: set on the first call (Redis 7.0 loads a library without them).
local floor, char, byte
local LIMB, MS = 10000000, 1000000
local FAST = 4503599627370496 -- 2^52: every quantity of the fast paths stays below it

-- `floor(a / b)` of whole numbers 0 <= a < 2^52, 0 < b < 2^52, exactly: the double quotient is off by at
-- most one, and `q * b` is exact below 2^53, so one correction settles it.
local function idiv(a, b)
  local q = floor(a / b)
  local r = a - q * b
  if r < 0 then return q - 1 end
  if r >= b then return q + 1 end
  return q
end

-- Small numbers below 2^53 as bytes (microsecond times, weights, counts).
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

-- The u64 at byte `at` of s where it is below 2^52; nothing otherwise.
local function small_at(s, at)
  local hi = u32at(s, at + 4)
  if hi >= 1048576 then return nil end
  return hi * W32 + u32at(s, at)
end

-- The clock's reading (its text) as the three base-10^7 limbs of ns (low first), for the seconds of any
-- real clock; nothing for any other text.
local function now_limbs(sec, usec, ns)
  if #sec < 8 or #sec > 12 or not sec:find("^%d+$") or not usec:find("^%d+$") or (ns and not ns:find("^%d+$")) then
    return nil
  end
  local v = tonumber(usec) * 1000 + (ns and tonumber(ns) or 0)
  if v >= 1000000000 then return nil end
  local v1 = v % LIMB
  local h = tonumber(sec) * 100 + (v - v1) / LIMB
  local h1 = h % LIMB
  return v1, h1, (h - h1) / LIMB
end

-- Parameters that most calls repeat, remembered by their two texts (at most 1024, then forgotten at
-- once): `make(a, b)` once per pair; false where the library must parse them.
local function remembered_pairs(make)
  local seen, count = {}, 0
  return function(a, b)
    local row = seen[a]
    local v = row and row[b]
    if v == nil then
      v = make(a, b)
      if count >= 1024 then seen, count = {}, 0 end
      row = seen[a]
      if not row then
        row = {}
        seen[a] = row
      end
      row[b], count = v, count + 1
    end
    return v
  end
end

-- Milliseconds, rounded up, of ns in [0, 2^52) (time.rs' ceil_ms).
local function ms_up(ns)
  if ns <= 0 then return 0 end
  local q = idiv(ns, MS)
  if q * MS < ns then return q + 1 end
  return q
end

-- The milliseconds (rounded down) of a time given as its three base-10^7 limbs.
local function ms_of_limbs(l1, l2, l3) return l3 * 100000000 + floor((l2 * LIMB + l1) / MS) end

-- Eight little-endian bytes: the low 16 bits r, then q (below 2^48) in the other six.
local function le64_of(r, q)
  local b2 = q % 256
  q = (q - b2) / 256
  local b3 = q % 256
  q = (q - b3) / 256
  local b4 = q % 256
  q = (q - b4) / 256
  local b5 = q % 256
  q = (q - b5) / 256
  local b6 = q % 256
  return char(r % 256, floor(r / 256), b2, b3, b4, b5, b6, (q - b6) / 256)
end

-- The eight bytes of the value of three limbs (>= 2^53, < 2^64): one division by 65536 on them; the
-- quotient, below 2^48, is then a plain number.
local function le64_limbs(l1, l2, l3)
  local q3 = floor(l3 / 65536)
  local cur = (l3 - q3 * 65536) * LIMB + l2
  local q2 = floor(cur / 65536)
  cur = (cur - q2 * 65536) * LIMB + l1
  local q1 = floor(cur / 65536)
  return le64_of(cur - q1 * 65536, (q3 * LIMB + q2) * LIMB + q1)
end

-- The three base-10^7 limbs (low first) of the u64 whose 32-bit halves are hi and lo, hi >= 2^21 (the
-- value is >= 2^53 and < 2^64).
local function limbs_of_halves(hi, lo)
  local h1 = hi % LIMB
  local h2 = (hi - h1) / LIMB
  local t = h1 * 65536
  local c = floor(t / LIMB)
  local l1 = t - c * LIMB
  t = h2 * 65536 + c
  c = floor(t / LIMB)
  local l2 = t - c * LIMB
  local l3 = c
  t = l1 * 65536 + lo
  c = floor(t / LIMB)
  l1 = t - c * LIMB
  t = l2 * 65536 + c
  c = floor(t / LIMB)
  l2 = t - c * LIMB
  return l1, l2, l3 * 65536 + c
end

-- The limbs of a time of any real clock stored as a little-endian i64 at byte `at` of s (>= 2^53 ns,
-- below 2^63); nothing for any other value.
local function time_at(s, at)
  local b1, b2, b3, b4, b5, b6, b7, b8 = byte(s, at, at + 7)
  local hi = ((b8 * 256 + b7) * 256 + b6) * 256 + b5
  if hi < 2097152 or hi >= 2147483648 then return nil end
  return limbs_of_halves(hi, ((b4 * 256 + b3) * 256 + b2) * 256 + b1)
end

-- The first point of a grid of `step` ms at or after `ms`.
local function on_grid(ms, step)
  if ms % step ~= 0 then ms = (floor(ms / step) + 1) * step end
  return ms
end

-- The key's absolute expiry (Unix ms), or nil. Redis 6.2 has no PEXPIRETIME: there, the time left (PTTL)
-- after this call's clock (`now_ms`), which may be off by the milliseconds the call has run.
local function expiry_of(key, now_ms)
  local at = redis.pcall("PEXPIRETIME", key)
  if type(at) == "table" then
    local ttl = redis.call("PTTL", key)
    if ttl < 0 then return nil end
    return now_ms + ttl
  end
  if at < 0 then return nil end
  return at
end

-- `set` at `key` with core's Expiry::change of a derived expiry (its point `at`, the state's end
-- `at_least`, the point the replaced state implied, `previous`, and the whole second it is at least,
-- `certain`): set when new, replaced or moved; kept without reading when the replaced state's whole
-- second covers the new one; else kept only when the expiry in place is a whole second within
-- [at_least, at].
local function derived_set(key, old, set, at, at_least, previous, certain, now_ms)
  local keep = false
  if old ~= nil and #old == #set and previous == at then
    if certain and certain >= at_least then
      keep = true
    else
      local current = expiry_of(key, now_ms)
      keep = current and current % 1000 == 0 and current >= at_least and current <= at or false
    end
  end
  if keep then
    redis.call("SET", key, set, "KEEPTTL")
  else
    redis.call("SET", key, set, "PXAT", at)
  end
end

local TOKEN_TAG = TAG_OF.token

------------------------------------------------------------------------------------------------------------
-- B: exact signed integers. Below 2^53 a value is a plain Lua number; from there on it is a table of
-- little-endian limbs of base 10^7 with a field `neg`. Every operation is exact, and its result is a
-- number again whenever it is below 2^53 (so most of a decision's arithmetic allocates nothing).
------------------------------------------------------------------------------------------------------------
local B = {}
local BASE = 10000000
local SMALL = 9007199254740992 -- 2^53

local function norm(a)
  local n = #a
  while n > 0 and a[n] == 0 do
    a[n] = nil
    n = n - 1
  end
  if n == 0 then a.neg = false end
  return a
end

-- A number below 2^53 as limbs.
local function limbs(x)
  local a = { neg = x < 0 }
  if x < 0 then x = -x end
  local i = 1
  while x > 0 do
    local d = x % BASE
    a[i] = d
    x = (x - d) / BASE
    i = i + 1
  end
  return norm(a)
end

local function tdigits(s)
  local a = { neg = false }
  local i, n = 1, #s
  while n > 0 do
    local from = n - 6
    if from < 1 then from = 1 end
    a[i] = tonumber(s:sub(from, n))
    i = i + 1
    n = from - 1
  end
  return norm(a)
end

local function mcmp(a, b)
  if #a ~= #b then return #a < #b and -1 or 1 end
  for i = #a, 1, -1 do
    if a[i] ~= b[i] then return a[i] < b[i] and -1 or 1 end
  end
  return 0
end

-- Constants are written as their limbs (a script builds the library on every call, and parsing
-- their digits was a fifth of that): each says its value; `constants_are_their_values` in
-- tests/lua_lab.rs checks them.
local function const(value_text, l) return l end
local TWO53_LIMBS = const("9007199254740992", { 4740992, 719925, 90, neg = false })

-- A result in limbs as the caller gets it: a number below 2^53.
local function out(t)
  local n = #t
  if n <= 2 or (n == 3 and mcmp(t, TWO53_LIMBS) < 0) then
    local x = 0
    for i = n, 1, -1 do x = x * BASE + t[i] end
    return t.neg and -x or x
  end
  return t
end

local function tab(x)
  if type(x) == "number" then return limbs(x) end
  return x
end

local function madd(a, b)
  local r, carry = { neg = false }, 0
  local n = #a > #b and #a or #b
  for i = 1, n do
    local s = (a[i] or 0) + (b[i] or 0) + carry
    if s >= BASE then
      r[i], carry = s - BASE, 1
    else
      r[i], carry = s, 0
    end
  end
  if carry > 0 then r[n + 1] = carry end
  return r
end

-- |a| - |b|, for |a| >= |b|.
local function msub(a, b)
  local r, borrow = { neg = false }, 0
  for i = 1, #a do
    local s = a[i] - (b[i] or 0) - borrow
    if s < 0 then
      r[i], borrow = s + BASE, 1
    else
      r[i], borrow = s, 0
    end
  end
  return norm(r)
end

local function tcmp(a, b)
  if a.neg ~= b.neg then return a.neg and -1 or 1 end
  local c = mcmp(a, b)
  return a.neg and -c or c
end

-- a + b, with b's sign flipped when `negate`.
local function tadd(a, b, negate)
  local bneg = b.neg
  if negate and #b > 0 then bneg = not bneg end
  local r
  if a.neg == bneg then
    r = madd(a, b)
    r.neg = a.neg
  elseif mcmp(a, b) >= 0 then
    r = msub(a, b)
    r.neg = a.neg
  else
    r = msub(b, a)
    r.neg = bneg
  end
  return norm(r)
end

local function tmul(a, b)
  local r = { neg = false }
  local na, nb = #a, #b
  for i = 1, na + nb do r[i] = 0 end
  for i = 1, na do
    local carry, ai = 0, a[i]
    for j = 1, nb do
      local t = r[i + j - 1] + ai * b[j] + carry
      carry = floor(t / BASE)
      r[i + j - 1] = t - carry * BASE
    end
    local k = i + nb
    while carry > 0 do
      local t = r[k] + carry
      carry = floor(t / BASE)
      r[k] = t - carry * BASE
      k = k + 1
    end
  end
  r.neg = a.neg ~= b.neg
  return norm(r)
end

-- |a| * m + c for small m, c (m * BASE below 2^53).
local function mulsmall(a, m, c)
  local r, carry = { neg = false }, c or 0
  for i = 1, #a do
    local t = a[i] * m + carry
    carry = floor(t / BASE)
    r[i] = t - carry * BASE
  end
  local k = #a + 1
  while carry > 0 do
    local d = carry % BASE
    r[k] = d
    carry = (carry - d) / BASE
    k = k + 1
  end
  return norm(r)
end

-- |a| divided by a small d: quotient and remainder (a number).
local function divsmall(a, d)
  local q, rem = { neg = false }, 0
  for i = #a, 1, -1 do
    local cur = rem * BASE + a[i]
    local qi = floor(cur / d)
    q[i] = qi
    rem = cur - qi * d
  end
  return norm(q), rem
end

-- The value of a as a double (inexact above 2^53): to estimate a quotient's digit.
local function approx(a)
  local x = 0
  for i = #a, 1, -1 do x = x * BASE + a[i] end
  return x
end

-- Floor division of a >= 0 by b > 0, in limbs. Schoolbook, one limb of the quotient at a time: its
-- estimate from doubles is off by at most one, then corrected exactly.
local function tdivmod(a, b)
  if mcmp(a, b) < 0 then return { neg = false }, a end
  if #b == 1 then
    local q, r = divsmall(a, b[1])
    return q, limbs(r)
  end
  local q, r, bx = { neg = false }, { neg = false }, approx(b)
  for i = #a, 1, -1 do
    table.insert(r, 1, a[i])
    norm(r)
    local d = 0
    if mcmp(r, b) >= 0 then
      d = floor(approx(r) / bx)
      if d > BASE - 1 then d = BASE - 1 end
      local p = mulsmall(b, d)
      while mcmp(p, r) > 0 do
        d = d - 1
        p = mulsmall(b, d)
      end
      local next = mulsmall(b, d + 1)
      while mcmp(next, r) <= 0 do
        d, p = d + 1, next
        next = mulsmall(b, d + 1)
      end
      r = msub(r, p)
    end
    q[i] = d
  end
  return norm(q), r
end

-- From a Lua integer below 2^53.
function B.int(x) return x end

-- From decimal digits (no sign).
function B.digits(s)
  if s == "" then return 0 end
  if #s <= 15 then return tonumber(s) end
  return out(tdigits(s))
end

-- tcmp(limbs(x), t) for a number |x| < 2^53 (at most 3 limbs), without building limbs(x).
local function cmp_num_tab(x, t)
  local xneg = x < 0
  if xneg ~= t.neg then return xneg and -1 or 1 end
  if xneg then x = -x end
  local l1 = x % BASE
  x = (x - l1) / BASE
  local l2 = x % BASE
  local l3 = (x - l2) / BASE
  local n = l3 > 0 and 3 or l2 > 0 and 2 or l1 > 0 and 1 or 0
  local nt, c = #t, 0
  if n ~= nt then
    c = n < nt and -1 or 1
  elseif n >= 3 and l3 ~= t[3] then
    c = l3 < t[3] and -1 or 1
  elseif n >= 2 and l2 ~= t[2] then
    c = l2 < t[2] and -1 or 1
  elseif n >= 1 and l1 ~= t[1] then
    c = l1 < t[1] and -1 or 1
  end
  return xneg and -c or c
end

function B.cmp(a, b)
  local ta, tb = type(a), type(b)
  if ta == "number" then
    if tb == "number" then
      if a < b then return -1 end
      return a > b and 1 or 0
    end
    if a < SMALL and a > -SMALL then return cmp_num_tab(a, b) end
  elseif tb == "number" and b < SMALL and b > -SMALL then
    local c = cmp_num_tab(b, a)
    return c == 0 and 0 or -c
  end
  return tcmp(tab(a), tab(b))
end
function B.lt(a, b) return B.cmp(a, b) < 0 end
function B.le(a, b) return B.cmp(a, b) <= 0 end
function B.eq(a, b) return B.cmp(a, b) == 0 end
function B.min(a, b) return B.cmp(a, b) <= 0 and a or b end
function B.max(a, b) return B.cmp(a, b) >= 0 and a or b end
function B.zero(a) return a == 0 end
function B.pos(a)
  if type(a) == "number" then return a > 0 end
  return not a.neg
end
function B.negative(a)
  if type(a) == "number" then return a < 0 end
  return a.neg
end

-- A sum, difference or product of numbers is exact when it lies below 2^53, and lies there exactly
-- when the exact one does.
function B.add(a, b)
  local ta, tb = type(a), type(b)
  if ta == "number" then
    if tb == "number" then
      local s = a + b
      if s < SMALL and s > -SMALL then return s end
    end
  elseif tb == "number" and not a.neg and #a == 3 and b >= 0 and b < SMALL then
    -- A time plus a duration: madd on three limbs in locals; >= 2^53, so limbs as out() keeps them.
    local b1 = b % BASE
    local rest = (b - b1) / BASE
    local b2 = rest % BASE
    local s1 = a[1] + b1
    local c = s1 >= BASE and 1 or 0
    local s2 = a[2] + b2 + c
    local c2 = s2 >= BASE and 1 or 0
    local s3 = a[3] + (rest - b2) / BASE + c2
    if s3 < BASE then return { s1 - c * BASE, s2 - c2 * BASE, s3, neg = false } end
  end
  return out(tadd(tab(a), tab(b)))
end

function B.sub(a, b)
  local ta, tb = type(a), type(b)
  if ta == "number" then
    if tb == "number" then
      local s = a - b
      if s < SMALL and s > -SMALL then return s end
    end
  elseif tb == "table" and #a == 3 and #b == 3 and not a.neg and not b.neg then
    -- Two times: when their top limbs are within 80 the difference is below 2^53, exact as a number.
    local d3 = a[3] - b[3]
    if d3 <= 80 and d3 >= -80 then
      local d = d3 * 100000000000000 + (a[2] - b[2]) * BASE + (a[1] - b[1])
      if d == 0 then return 0 end
      return d
    end
  end
  return out(tadd(tab(a), tab(b), true))
end

function B.mul(a, b)
  if type(a) == "number" and type(b) == "number" then
    local p = a * b
    if p < SMALL and p > -SMALL then return p end
  end
  return out(tmul(tab(a), tab(b)))
end

-- Floor division of a >= 0 by b > 0: quotient and remainder.
function B.divmod(a, b)
  if type(a) == "number" and type(b) == "number" and a < SMALL / 2 then
    -- a and b below 2^52: q * b stays below 2^53, exact, so the estimate is corrected exactly.
    local q = floor(a / b)
    local r = a - q * b
    if r < 0 then
      q, r = q - 1, r + b
    elseif r >= b then
      q, r = q + 1, r - b
    end
    return q, r
  end
  local q, r = tdivmod(tab(a), tab(b))
  return out(q), out(r)
end

function B.div(a, b) return (B.divmod(a, b)) end
function B.divceil(a, b)
  local q, r = B.divmod(a, b)
  if r ~= 0 then q = B.add(q, 1) end
  return q
end

-- As a Lua number; only for values below 2^53 (callers bound them).
function B.num(a)
  if type(a) == "number" then return a end
  return approx(a) * (a.neg and -1 or 1)
end

local ZERO, ONE, THOUSAND, MILLION = 0, 1, 1000, 1000000
local NS_PER_SEC = 1000000000
local TWO53 = TWO53_LIMBS
local TWO63 = const("9223372036854775808", { 4775808, 7203685, 92233, neg = false })
local TWO64 = const("18446744073709551616", { 9551616, 4407370, 184467, neg = false })
local I64MAX = const("9223372036854775807", { 4775807, 7203685, 92233, neg = false })
local I64MIN = const("-9223372036854775808", { 4775808, 7203685, 92233, neg = true })
local U64MAX = const("18446744073709551615", { 9551615, 4407370, 184467, neg = false })
local U128MAX =
  const("340282366920938463463374607431768211455",
    { 8211455, 743176, 4633746, 938463, 8236692, 3402, neg = false })
-- The longest horizon (a refill, a window, a lease): 3e9 s (limits.rs).
local HORIZON_NS = CONTRACT.max_horizon_ns
local MAX_RATE = CONTRACT.max_rate_per_sec

-- (A number, below 2^53 in magnitude, is within i64.)
function B.sat_i64(a)
  if type(a) == "number" then return a end
  return B.max(I64MIN, B.min(a, I64MAX))
end
function B.sat_u64(a) return B.max(ZERO, B.min(a, U64MAX)) end

B.le64_limbs = le64_limbs

-- The little-endian 8 bytes of a (two's complement when negative), for a in [-2^63, 2^64).
function B.le64(a)
  if type(a) == "number" then
    if a >= 0 then
      local r = a % 65536
      return le64_of(r, (a - r) / 65536)
    end
  elseif not a.neg and #a == 3 then
    return B.le64_limbs(a[1], a[2], a[3])
  end
  local out_bytes = {}
  local v = tab(B.negative(a) and B.add(a, TWO64) or a)
  for i = 1, 4 do
    local r
    v, r = divsmall(v, 65536)
    out_bytes[i] = char(r % 256, floor(r / 256))
  end
  return concat(out_bytes)
end

-- The little-endian u64 (or i64 when signed) at byte `at` (1-based) of s.
function B.fromle(s, at, signed)
  local b1, b2, b3, b4, b5, b6, b7, b8 = byte(s, at, at + 7)
  local lo = ((b4 * 256 + b3) * 256 + b2) * 256 + b1
  local hi = ((b8 * 256 + b7) * 256 + b6) * 256 + b5
  if hi < 2097152 then return hi * 4294967296 + lo end
  local l1, l2, l3 = limbs_of_halves(hi, lo)
  local v = { l1, l2, l3, neg = false }
  if signed and hi >= 2147483648 then v = B.sub(v, TWO64) end -- at or above 2^63: negative
  return v
end

-- B.add(B.mul(sec, NS_PER_SEC), B.mul(usec, THOUSAND)): the clock's ns, built as its three limbs
-- for the seconds of any real clock (10^7 <= sec < 10^12, whole usec < 10^6).
function B.time_ns(sec, usec)
  if type(sec) == "number" and type(usec) == "number" and sec >= 10000000 and sec < 1000000000000
      and sec % 1 == 0 and usec >= 0 and usec < 1000000 and usec % 1 == 0 then
    local v = usec * 1000
    local v1 = v % BASE
    local h = sec * 100 + (v - v1) / BASE
    local h1 = h % BASE
    return { v1, h1, (h - h1) / BASE, neg = false }
  end
  return B.add(B.mul(sec, NS_PER_SEC), B.mul(usec, THOUSAND))
end

-- Milliseconds, rounded up, of a duration or instant in ns (0 for anything <= 0): time.rs' ceil_ms.
local function ceil_ms(ns)
  if type(ns) == "table" and not ns.neg and #ns == 3 then
    -- divsmall by 10^6 on three limbs: ns[3] * 10^8 + ns[2] * 10 + ns[1] / 10^6, rounded up.
    local a1 = ns[1]
    local r = a1 % MILLION
    return ns[3] * 100000000 + ns[2] * 10 + (a1 - r) / MILLION + (r ~= 0 and 1 or 0)
  end
  if not B.pos(ns) then return 0 end
  return B.num(B.divceil(ns, MILLION))
end

#!lua name=ratelimit
-- GENERATED from lua/src/ (library.lua and its parts) by `cargo run -p contract-gen`: do not edit; change lua/src/
--[[
redis-ratelimit's limiters as one Lua library, for servers that cannot load the module (managed Redis).

The same commands as the module (RL.TOKEN, RL.SLIDE, RL.SLIDECOUNT, RL.FIXED, RL.TAKE, RL.RESERVE,
RL.REFUND, RL.ALL, RL.ACQUIRE, RL.RELEASE, RL.RENEW, RL.INSPECT) as functions named rl_token, rl_slide, ...:
the keys first, then each key's parameters in the command's order (FCALL rl_token 2 k1 k2 10 5 1 20 1 1).
The same validation, error texts, replies, stored bytes and expiry as the module's (ratelimit-core); the
tests hold every reply and every stored byte equal to core's (tests/lua_equal.rs).

Exact arithmetic: Lua numbers are doubles, exact only below 2^53, and a Unix time in nanoseconds is about
1.8e18. Times in nanoseconds and everything computed from them are exact integers here (`B`, base 10^7
limbs above 2^53, plain numbers below), as are the decimal parameters (`D`). Microsecond times (logs,
leases: about 1.8e15) are plain numbers. What cannot be replied exactly is refused with an error
(docs/lua.md lists it).

Loaded as it is with `FUNCTION LOAD` (Redis 7.0+, Valkey 7.2+); the EVALSHA scripts (Redis 6.2, ACLs
without FUNCTION) are made from it by contract/contract.json's rule: nothing here is written twice.

The source is lua/src/, one file per module of core's (lua/src/sliding_log.lua beside
core/src/sliding_log.rs); this file (lua/src/library.lua) names them in order, each `--@ part` line
standing for lua/src/<part>.lua (`--@ kinds`: every limiter kind's part, named as its module in core,
in the registry's order), and the contract's generator assembles lua/ratelimit.lua from them.
]]

-- CONTRACT: GENERATED from the Rust reference by `cargo run -p contract-gen`: do not edit (contract/contract.json's library, bounds and errors)
local MAX_RATE_PER_SEC = 1000000000
local MAX_LOG_LIMIT = 1000000
local TAG_OF = { token = "RLT\001", fixed = "RLF\001", counter = "RLC\001", log = "RLS\001", leases = "RLA\001" }
local CONTRACT_DATA = nil
local function contract()
  CONTRACT_DATA = CONTRACT_DATA or {
  version = "0.2.0",
  source_hash = "741e8c344c4123068f12a5c8e76271e230203306",
  functions = { "rl_token", "rl_fixed", "rl_slidecount", "rl_slide", "rl_acquire", "rl_reserve", "rl_take", "rl_refund", "rl_all", "rl_hold", "rl_settle", "rl_release", "rl_renew", "rl_inspect", "rl_version" },
  read_only = { rl_inspect = true, rl_version = true },
  command_of = { rl_token = "rl.token", rl_fixed = "rl.fixed", rl_slidecount = "rl.slidecount", rl_slide = "rl.slide", rl_acquire = "rl.acquire", rl_reserve = "rl.reserve", rl_take = "rl.take", rl_refund = "rl.refund", rl_all = "rl.all", rl_hold = "rl.hold", rl_settle = "rl.settle", rl_release = "rl.release", rl_renew = "rl.renew", rl_inspect = "rl.inspect" },
  max_horizon_ns = { 0, 0, 30000, neg = false }, -- 3000000000000000000
  max_rate_per_sec = 1000000000,
  max_log_limit = 1000000,
  max_lease_limit = 100000,
  hold = { tag = "RLH\1", ledger_tag = "RLL\1", max_holds = 10000, max_id_bytes = 256, max_ttl_ms = 86400000 },
  kinds = {
    token_bucket = { group = "TOKEN", command = "RL.TOKEN", form = "cost", refunds = true },
    fixed_window = { group = "FIXED", command = "RL.FIXED", form = "cost", refunds = true },
    sliding_counter = { group = "SLIDECOUNT", command = "RL.SLIDECOUNT", form = "cost", refunds = true },
    sliding_log = { group = "SLIDE", command = "RL.SLIDE", form = "id", refunds = false },
    concurrency = { group = "ACQUIRE", command = "RL.ACQUIRE", form = "lease", refunds = false },
    reservation = { group = "RESERVE", command = "RL.RESERVE", form = "reserve", refunds = true },
  },
  form_option = { id = { "DEDUP", 0 }, lease = { "WEIGHT", 1 } },
  form_len = { reserve = 2 },
  errors = {
    capacity = "must be a whole number >= 1",
    refill_too_long = "capacity / rate must be at most 3000000000 seconds",
    rate = "must be a number > 0 (tokens per second)",
    rate_too_large = "must be at most 1000000000 tokens per second",
    limit = "must be a whole number >= 1",
    window = "must be a number of seconds > 0, in whole milliseconds (0.001 to 3000000000)",
    slide_limit = "must be a whole number from 1 to 1000000 (use RL.SLIDECOUNT for larger limits)",
    lease_limit = "must be a whole number from 1 to 100000",
    lease = "must be a number of seconds > 0, in whole milliseconds (0.001 to 3000000000)",
    weight = "must be a whole number from 1 to 100000",
    cost = "must be a whole number >= 0",
    max = "must be a whole number >= 1",
    max_wait = "must be a number of seconds >= 0, in whole milliseconds",
    empty_id = "must not be empty",
    hold_ttl = "must be a number of seconds > 0, in whole milliseconds, at most 86400",
    hold_id = "must be 1 to 256 bytes",
    not_held = "must be a key this hold holds",
    ledger_full = "holds at most 10000 holds to return",
    ledger_untagged = "must carry a hash tag ({...}), which the keys of its holds share",
  },
  invalid_reply = "ERR invalid %s: %s",
  arity_reply = "ERR wrong number of arguments for '%s' command",
  syntax_reply = "ERR syntax error",
  state_reply = "ERR the key holds a value that is not this limiter's state",
  duplicate_key_reply = "ERR the same key appears more than once",
  }
  return CONTRACT_DATA
end
-- END CONTRACT

-- CLOCK BEGIN
-- The clock: the server's, read here and nowhere else (the tests replace this block to pass the time):
-- the seconds and the microseconds as TIME writes them, and the nanoseconds below (none here).
local function clock(args)
  local t = redis.call("TIME")
  return t[1], t[2], nil
end
-- CLOCK END

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

-- One request of `cost` on a token bucket (core's TokenBucket::decide, the store's write, the reply) in
-- plain numbers, where every quantity lies below 2^52, as it does near now for any bucket of a
-- realistic size: the backlog (the stored TAT minus now, from the limbs of both), the cost's time and the
-- bucket's parameters (capacity, emission interval, depth = tau + slack, slack, the reply's limit and the
-- expiry grid's step). The reply, or nil where the general path must decide: a state far from now or of
-- another layout, a clock fault, a peek, a cost above the capacity, huge buckets. tests/lua_equal.rs
-- holds both paths to core and reaches both.
local function token_core(key, old, capacity, interval, depth, slack, limit, step, cost, n1, n2, n3)
  if type(cost) ~= "number" or cost <= 0 or type(capacity) ~= "number" or cost > capacity
      or type(depth) ~= "number" or depth >= FAST or type(interval) ~= "number" then
    return nil
  end
  local backlog, t1, t2, t3 = 0, nil, nil, nil
  if old then
    if #old ~= 12 or old:sub(1, 4) ~= TOKEN_TAG then return nil end
    t1, t2, t3 = time_at(old, 5)
    local dh = t3 and t3 - n3
    if not dh or dh > 80 or dh < -80 then return nil end
    backlog = dh * 100000000000000 + (t2 - n2) * LIMB + (t1 - n1)
  end
  if backlog >= FAST or backlog > depth + depth then return nil end
  if backlog < 0 then backlog = 0 end
  local taken = cost * interval
  local after = backlog + taken
  -- (after below 2^52 - 10^14: the new TAT's low limbs plus it stay below 2^52 too)
  if taken >= FAST or after >= FAST - 100000000000000 then return nil end
  if after > depth then
    -- Denied (no wait allowed): nothing written.
    local left = depth - backlog
    local reset = backlog - slack
    return { 0, limit, left > 0 and idiv(left, interval) or 0, ms_up(after - depth), reset > 0 and ms_up(reset) or 0 }
  end
  -- The new TAT, now + after, as limbs; its milliseconds rounded up (ceil_ms), and the replaced TAT's.
  local x = n2 * LIMB + n1 + after
  local x1 = x % LIMB
  local rest = (x - x1) / LIMB
  local x2 = rest % LIMB
  local l3 = n3 + (rest - x2) / LIMB
  local ms = n3 * 100000000 + ms_up(x)
  local previous, certain
  if t1 then
    local r = t1 % MS
    local previous_ms = t3 * 100000000 + t2 * 10 + (t1 - r) / MS + (r ~= 0 and 1 or 0)
    previous, certain = on_grid(previous_ms, step), on_grid(previous_ms, 1000)
  end
  derived_set(key, old, TOKEN_TAG .. le64_limbs(x1, x2, l3), on_grid(ms, step), ms, previous, certain,
    ms_of_limbs(n1, n2, n3))
  local reset = after - slack
  return { 1, limit, idiv(depth - after, interval), 0, reset > 0 and ms_up(reset) or 0 }
end

-- FCALL rl_token's path before the library (its parameters' parser, remembered, and the call), built on
-- its first use: an EVALSHA script of another function does not build it.
local function token_paths()
  -- A token bucket's parameters from their text, where both are plain and small (a capacity of digits, a
  -- rate of digits with at most 6 decimals, every quantity below 2^52): core's TokenBucket::new in plain
  -- numbers (the emission interval and a full refill in ns rounded up, the slack, the depth, the period
  -- and the expiry grid's step). false where the library's exact parser must decide (any other text, an
  -- error to reply, larger values).
  local function token_params(capacity_s, rate_s)
    if #capacity_s > 15 or not capacity_s:find("^[1-9]%d*$") then return false end
    local whole, fraction = rate_s:match("^(%d+)%.?(%d*)$")
    if not whole or #rate_s > 16 or #fraction > 6 or (fraction == "" and rate_s:find("%.")) then return false end
    local capacity = tonumber(capacity_s)
    local scale = 10 ^ #fraction
    local m = tonumber(whole .. fraction)
    if m == 0 or m >= 1000000000000000 then return false end
    local per_sec = idiv(m + scale - 1, scale)
    if per_sec > MAX_RATE_PER_SEC then return false end
    local numerator = 1000000000 * scale
    local interval = idiv(numerator + m - 1, m)
    -- A full refill, ceil(capacity * numerator / m), without the product (past 2^52 for large
    -- buckets): with numerator = q * m + r, it is capacity * q + ceil(capacity * r / m).
    local r = numerator % m
    local whole_part, rest = capacity * ((numerator - r) / m), capacity * r
    if whole_part >= FAST or rest + m >= FAST then return false end
    local exact = whole_part + idiv(rest + m - 1, m)
    local tau = interval * capacity
    if tau >= FAST then return false end
    local slack = math.min(tau - math.min(exact, tau), interval - 1)
    local period = tau - slack
    local step = math.max(floor(floor(period / 16) / 1000000000) * 1000, 1000)
    return { capacity = capacity, interval = interval, depth = tau + slack, slack = slack, step = step }
  end

  local token_params_of = remembered_pairs(token_params)

  -- FCALL rl_token / its EVALSHA script on one bucket, before the library is built, at now (its limbs):
  -- the reply, or nil where the library must decide (nothing is read or written then but the key, which
  -- it reads again).
  local function token_fast(keys, args, n1, n2, n3)
    if #keys ~= 1 or #args ~= 3 then return nil end
    local b, cost_s = token_params_of(args[1], args[2]), args[3]
    if not b or #cost_s > 15 or not cost_s:find("^%d+$") then return nil end
    local old = redis.pcall("GET", keys[1])
    if type(old) == "table" then return nil end
    return token_core(keys[1], old or nil, b.capacity, b.interval, b.depth, b.slack, b.capacity, b.step,
      tonumber(cost_s), n1, n2, n3)
  end
  return { rl_token = token_fast }
end

-- RL.FIXED, RL.SLIDECOUNT and RL.SLIDE on one key (core's FixedWindow, SlidingCounter and SlidingLog, the
-- store's write, the reply) in plain numbers, before the library is built, where every quantity lies below 2^52: windows of
-- whole milliseconds up to 999,999 s, limits whose capacity (limit * window in ns) stays below 2^50, a cost
-- of 1 to the limit, states of the tagged layouts near now. Anything else (other text, an error to reply,
-- a peek, a state of another layout or from a clock that ran ahead, huge counts) is nil: the general path
-- decides. tests/lua_equal.rs holds both paths to core and reaches both. Built on
-- first use: an EVALSHA script of another function does not build it.
local function window_paths()
  local FIXED_TAG, COUNTER_TAG = TAG_OF.fixed, TAG_OF.counter
  local CAPACITY_MAX = 1125899906842624 -- 2^50

  -- `limit window` from their text where both are plain and small (a limit of digits; a window of digits
  -- with at most 3 decimals, not zero): the limit, the window in ms and in ns; false otherwise.
  local function window_params(limit_s, window_s)
    if #limit_s > 15 or not limit_s:find("^[1-9]%d*$") then return false end
    local whole, fraction = window_s:match("^(%d+)%.?(%d*)$")
    if not whole or #whole > 6 or #fraction > 3 then return false end
    local ms = tonumber(whole) * 1000 + (fraction ~= "" and tonumber((fraction .. "00"):sub(1, 3)) or 0)
    local limit = tonumber(limit_s)
    if ms == 0 or limit * ms * MS >= CAPACITY_MAX then return false end
    return { limit = limit, window_ms = ms, window = ms * MS }
  end

  local window_params_of = remembered_pairs(window_params)

  -- The window's parameters and the cost of a call `key limit window [cost]`, or nothing.
  local function window_call(keys, args)
    if #keys ~= 1 or #args < 2 or #args > 3 then return nil end
    local p, cost_s = window_params_of(args[1], args[2]), args[3] or "1"
    if not p or #cost_s > 15 or not cost_s:find("^%d+$") then return nil end
    local cost = tonumber(cost_s)
    if cost == 0 or cost > p.limit then return nil end
    return p, cost
  end

  -- The store's write of a state whose expiry is one point (`at`, ms): core keeps an expiry in place only
  -- when it is that point, so the key ends with it either way.
  local function set_at(key, bytes, at) redis.call("SET", key, bytes, "PXAT", at) end

  -- RL.FIXED: the count (u64) and the window's end (i64 ns) behind `RLF\x01`.
  local function fixed_fast(keys, args, n1, n2, n3)
    local p, cost = window_call(keys, args)
    if not p then return nil end
    local key = keys[1]
    local old = redis.pcall("GET", key)
    if type(old) == "table" then return nil end
    local count, open_for, ends, at = 0, p.window, nil, nil
    if old then
      if #old ~= 20 or old:sub(1, 4) ~= FIXED_TAG then return nil end
      local t1, t2, t3 = time_at(old, 13)
      local dh = t3 and t3 - n3
      count = small_at(old, 5)
      if not count or not dh or dh > 80 or dh < -80 then return nil end
      local left = dh * 100000000000000 + (t2 - n2) * LIMB + (t1 - n1)
      -- A window ending beyond now + window (a clock that ran ahead) is repaired by the general path.
      if left > p.window then return nil end
      if left > 0 then
        open_for, ends = left, old:sub(13, 20)
        local r = t1 % MS
        at = t3 * 100000000 + t2 * 10 + (t1 - r) / MS + (r ~= 0 and 1 or 0)
      else
        count = 0
      end
    end
    local total = count + cost
    if total > p.limit then
      -- Denied: nothing written.
      local wait = ms_up(open_for)
      return { 0, p.limit, count < p.limit and p.limit - count or 0, wait, wait }
    end
    if not ends then
      -- A new window: it ends at now + window.
      local x = n2 * LIMB + n1 + p.window
      local x1 = x % LIMB
      local rest = (x - x1) / LIMB
      local x2 = rest % LIMB
      ends, at = le64_limbs(x1, x2, n3 + (rest - x2) / LIMB), n3 * 100000000 + ms_up(x)
    end
    set_at(key, FIXED_TAG .. u64le(total) .. ends, at)
    return { 1, p.limit, p.limit - total, 0, ms_up(open_for) }
  end

  -- RL.SLIDECOUNT: the window's index, the current and the previous window's counts behind `RLC\x01`.
  local function counter_fast(keys, args, n1, n2, n3)
    local p, cost = window_call(keys, args)
    if not p then return nil end
    local key = keys[1]
    local old = redis.pcall("GET", key)
    if type(old) == "table" then return nil end
    local w, limit = p.window, p.limit
    local now_ms = ms_of_limbs(n1, n2, n3)
    local index = idiv(now_ms, p.window_ms)
    local elapsed = (now_ms - index * p.window_ms) * MS + (n2 * LIMB + n1) % MS
    local current, previous = 0, 0
    if old then
      if #old ~= 28 or old:sub(1, 4) ~= COUNTER_TAG then return nil end
      local sw, sc, sp = small_at(old, 5), small_at(old, 13), small_at(old, 21)
      -- A window ahead of now (a clock that ran ahead) is repaired by the general path.
      if not (sw and sc and sp) or sw > index then return nil end
      if sw == index then
        current, previous = sc, sp
      elseif sw + 1 == index then
        previous = sc
      end
    end
    local after = current + cost
    if after * w >= CAPACITY_MAX or previous * w >= CAPACITY_MAX then return nil end
    local capacity, to_end = limit * w, w - elapsed
    local weighted = previous * to_end
    if weighted + after * w <= capacity then
      set_at(key, COUNTER_TAG .. u64le(index) .. u64le(after) .. u64le(previous), (index + 2) * p.window_ms)
      return { 1, limit, idiv(capacity - weighted - after * w, w), 0, ms_up(to_end + w) }
    end
    -- Denied: nothing written; the wait until the cost fits (core's fits_at), then the reply.
    local function fits_at(count, room)
      if count == 0 then return 0 end
      local at = w - idiv(room * w, count)
      return at > 0 and at or 0
    end
    local room, wait = limit - current - cost, nil
    if room >= 0 then
      wait = fits_at(previous, room) - elapsed
      if wait < 0 then wait = 0 end
    else
      wait = to_end + fits_at(current, limit - cost)
    end
    local used = weighted + current * w
    local reset = current > 0 and to_end + w or (previous > 0 and to_end or 0)
    return { 0, limit, used < capacity and idiv(capacity - used, w) or 0, ms_up(wait), ms_up(reset) }
  end
  -- RL.SLIDE without DEDUP on a log of 8-byte slots (times in us, oldest at the pivot of a ring): a new
  -- log, a request recorded in the oldest slot when it is dead or in a log grown by a quarter when every
  -- slot is live, or a denial. A log to shrink or widen, one from a clock that ran ahead, DEDUP: the
  -- general path.
  local LOG_HEADER, FILLER_CEILING, FUTURE_TOLERANCE_US = TAG_OF.log .. "\8\0\0\0", 4294967296, 1000
  local function slot(s, p) return small_at(s, 9 + p * 8) end
  local function slide_fast(keys, args, n1, n2, n3)
    if #keys ~= 1 or #args ~= 3 or args[3] == "" then return nil end
    local p = window_params_of(args[1], args[2])
    if not p or p.limit > MAX_LOG_LIMIT then return nil end
    local key, limit, window_us = keys[1], p.limit, p.window_ms * 1000
    local now_us = n3 * 100000000000 + n2 * 10000 + (n1 - n1 % 1000) / 1000
    local old = redis.pcall("GET", key)
    local function reset_ms(ts)
      local us = ts + window_us - now_us
      if us > window_us then us = window_us end
      return us > 0 and math.ceil(us / 1000) or 0
    end
    if not old then
      -- A new log of one slot; its expiry the latest the store allows, as for any new key.
      set_at(key, LOG_HEADER .. u64le(now_us), math.ceil((now_us + window_us) / 1000) + 999)
      return { 1, limit, limit - 1, 0, reset_ms(now_us) }
    end
    if type(old) == "table" or #old < 16 or (#old - 8) % 8 ~= 0 or old:sub(1, 8) ~= LOG_HEADER then
      return nil
    end
    local n = (#old - 8) / 8
    -- The pivot (the oldest slot): the first of the ring's ascending run.
    local lo, hi = 0, n - 1
    while lo < hi do
      local mid = lo + floor((hi - lo) / 2)
      local a, b = slot(old, mid), slot(old, hi)
      if not a or not b then return nil end
      if a > b then lo = mid + 1 else hi = mid end
    end
    local pivot = lo
    local newest = slot(old, (pivot + n - 1) % n)
    if not newest or newest > now_us + FUTURE_TOLERANCE_US then return nil end
    -- The first live entry (above the window's start and the fillers' ceiling).
    local threshold = now_us - window_us
    if threshold < FILLER_CEILING then threshold = FILLER_CEILING end
    lo, hi = 0, n
    while lo < hi do
      local mid = lo + floor((hi - lo) / 2)
      local t = slot(old, (pivot + mid) % n)
      if not t then return nil end
      if t > threshold then hi = mid else lo = mid + 1 end
    end
    local live = n - lo
    if live >= limit then
      -- Denied: nothing written; the retry is when the oldest of the last `limit` leaves.
      local leaving = slot(old, (pivot + n - limit) % n)
      if not leaving then return nil end
      local wait = leaving + window_us - now_us
      wait = wait > 0 and math.ceil(wait / 1000) or 0
      return { 0, limit, 0, wait > 0 and wait or 1, live > 0 and reset_ms(newest) or 0 }
    end
    if n >= 16 and (live + 1) * 4 <= n then return nil end
    local stamp = newest + 1
    if now_us > stamp then stamp = now_us end
    -- The store keeps an expiry within [at_least, at_least + 999 ms] of the log's end; else the latest.
    local at_least = math.ceil((stamp + window_us) / 1000)
    local current = expiry_of(key, ms_of_limbs(n1, n2, n3))
    local keep = current and current >= at_least and current <= at_least + 999
    if live < n then
      redis.call("SETRANGE", key, 8 + pivot * 8, u64le(stamp))
      if not keep then redis.call("PEXPIREAT", key, at_least + 999) end
    else
      -- Every slot live: the log grows by a quarter (to the limit at most), fillers first, oldest first.
      local slots = n + floor(n / 4)
      if slots < n + 1 then slots = n + 1 end
      local most = limit > n + 1 and limit or n + 1
      if slots > most then slots = most end
      local out = { LOG_HEADER }
      for f = 1, slots - n - 1 do out[f + 1] = u64le(f) end
      out[#out + 1] = old:sub(9 + pivot * 8)
      out[#out + 1] = old:sub(9, 8 + pivot * 8)
      out[#out + 1] = u64le(stamp)
      if keep then
        redis.call("SET", key, table.concat(out), "KEEPTTL")
      else
        set_at(key, table.concat(out), at_least + 999)
      end
    end
    return { 1, limit, limit - live - 1, 0, reset_ms(stamp) }
  end

  return { rl_fixed = fixed_fast, rl_slidecount = counter_fast, rl_slide = slide_fast }
end

-- Redis 7.0 loads a library without the standard globals (math, string, table, ...): the library is
-- built on its first call, and kept.
local function build()
  local CONTRACT = contract()
  local floor, char, byte, concat = math.floor, string.char, string.byte, table.concat

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


  ------------------------------------------------------------------------------------------------------------
  -- Errors: every reply starts with its code, as the module's (src/server/error.rs).
  ------------------------------------------------------------------------------------------------------------
  local E = {}

  -- The error a command replies: kept here while it unwinds (Redis may turn a raised table into a string).
  function E.fail(text)
    E.raised = { err = text }
    error(text, 0)
  end
  function E.invalid(field, expected) E.fail(string.format(CONTRACT.invalid_reply, field, expected)) end
  -- The wrong number of arguments for the command running (`E.command`, set as each function starts).
  function E.arity() E.fail(string.format(CONTRACT.arity_reply, E.command)) end
  function E.syntax() E.fail(CONTRACT.syntax_reply) end
  function E.bad_state() E.fail(CONTRACT.state_reply) end
  function E.duplicate() E.fail(CONTRACT.duplicate_key_reply) end

  -- A parameter beyond what a Lua number replies exactly (2^53): refused rather than answered inexactly.
  local LUA_MAX = "9007199254740991"
  local function reply_bound(value, field)
    if B.cmp(value, TWO53) >= 0 then
      E.invalid(field, "must be at most " .. LUA_MAX .. " with the Lua library (the module takes more)")
    end
    return B.num(value)
  end

  ------------------------------------------------------------------------------------------------------------
  -- D: exact decimals (mantissa * 10^exponent), as core's decimal.rs, within u128 as there.
  ------------------------------------------------------------------------------------------------------------
  local D = {}

  local function pow10(e)
    if e > 38 then return nil end
    return B.digits("1" .. string.rep("0", e))
  end

  -- a * b when it fits an u128, else nil.
  local function cmul(a, b)
    if not a or not b then return nil end
    local r = B.mul(a, b)
    if B.cmp(r, U128MAX) > 0 then return nil end
    return r
  end

  local function parse_exponent(s)
    local c, digits = s:sub(1, 1), s
    local negative = c == "-"
    if c == "-" or c == "+" then digits = s:sub(2) end
    if digits == "" or not digits:match("^%d+$") then return nil, "nan" end
    local value = 0
    for i = 1, #digits do
      value = value * 10 + byte(digits, i) - 48
      if value > 10000 then return nil, "range" end
    end
    return negative and -value or value
  end

  -- `[+]digits[.digits][e[+-]digits]`: the decimal, or nil and why ("nan", "negative", "range").
  function D.parse(s)
    local c, rest = s:sub(1, 1), s
    local negative = c == "-"
    if c == "-" or c == "+" then rest = s:sub(2) end
    local number, exp_part = rest, nil
    local e = rest:find("[eE]")
    if e then number, exp_part = rest:sub(1, e - 1), rest:sub(e + 1) end
    local int_part, frac_part = number, ""
    local dot = number:find(".", 1, true)
    if dot then int_part, frac_part = number:sub(1, dot - 1), number:sub(dot + 1) end
    if int_part == "" and frac_part == "" then return nil, "nan" end
    if not (int_part .. frac_part):match("^%d*$") then return nil, "nan" end
    local exponent = 0
    if exp_part then
      local why
      exponent, why = parse_exponent(exp_part)
      if not exponent then return nil, why end
    end
    local frac_trimmed = frac_part:gsub("0+$", "")
    local significant = (int_part .. frac_trimmed):gsub("^0+", "")
    if #significant > 36 then return nil, "range" end
    exponent = exponent - #frac_trimmed
    if significant == "" then return { m = ZERO, e = 0 } end
    if negative then return nil, "negative" end
    if math.abs(exponent) > 96 then return nil, "range" end
    return { m = B.digits(significant), e = exponent }
  end

  -- ceil(numerator / d), or nil when it does not fit an u128; a divisor too precise to scale loses its
  -- last digits (rounded down), as in core.
  function D.div_ceil_into(d, numerator)
    local m, e = d.m, d.e
    while true do
      if B.zero(m) then return nil end
      if e >= 0 then
        local den = cmul(m, pow10(e))
        if not den then return nil end
        return B.divceil(numerator, den)
      end
      local scaled = cmul(numerator, pow10(-e))
      if scaled then return B.divceil(scaled, m) end
      m = B.div(m, B.int(10))
      e = e + 1
    end
  end

  -- ceil(d * factor), or nil on overflow.
  function D.mul_ceil(d, factor)
    local scaled = cmul(d.m, factor)
    if not scaled then return nil end
    if d.e >= 0 then return cmul(scaled, pow10(d.e)) end
    local den = pow10(-d.e)
    if not den then return B.pos(scaled) and ONE or ZERO end
    return B.divceil(scaled, den)
  end

  -- d * factor when whole, else nil.
  function D.mul_exact(d, factor)
    local scaled = cmul(d.m, factor)
    if not scaled then return nil end
    if d.e >= 0 then return cmul(scaled, pow10(d.e)) end
    local den = pow10(-d.e)
    if not den then return nil end
    local q, r = B.divmod(scaled, den)
    if r ~= 0 then return nil end
    return q
  end

  ------------------------------------------------------------------------------------------------------------
  -- P: the argument grammar (core's args.rs).
  ------------------------------------------------------------------------------------------------------------
  local P = {}

  -- `fn` of one argument string (or of two, `two`), remembered by the strings themselves: for pure
  -- functions of argument strings that most calls repeat. Bounded (at most 1024 remembered, then
  -- forgotten at once); what raises is not kept. Kept across calls where the library is (FUNCTION
  -- LOAD), rebuilt with each script run. No string is built to look one up. Each kind's parameters are
  -- remembered so (its `parse`: most calls repeat them, and the module keeps the last ones too), in the
  -- kind's own file, so that an EVALSHA script holds only the kinds its function reaches.
  local function remembered(fn, two)
    local seen, count = {}, 0
    if not two then
      return function(a)
        local hit = seen[a]
        if hit then return hit end
        local value = fn(a)
        if count >= 1024 then seen, count = {}, 0 end
        seen[a], count = value, count + 1
        return value
      end
    end
    return function(a, b)
      local row = seen[a]
      local hit = row and row[b]
      if hit then return hit end
      local value = fn(a, b)
      if count >= 1024 then seen, count = {}, 0 end
      row = seen[a]
      if not row then
        row = {}
        seen[a] = row
      end
      row[b], count = value, count + 1
      return value
    end
  end

  -- A whole number >= min (plain digits, one optional '+'), within u64, as B.
  function P.whole(s, field, min, expected)
    local digits = s
    if s:sub(1, 1) == "+" then digits = s:sub(2) end
    if digits == "" or not digits:match("^%d+$") then E.invalid(field, expected) end
    local significant = digits:gsub("^0+", "")
    if #significant > 20 then E.invalid(field, "too large") end
    local value = B.digits(significant)
    if B.cmp(value, U64MAX) > 0 then E.invalid(field, "too large") end
    if B.num(B.min(value, B.int(min))) < min then E.invalid(field, expected) end
    return value
  end

  function P.positive_decimal(s, field, expected)
    local d, why = D.parse(s)
    if d and not B.zero(d.m) then return d end
    if why == "range" then E.invalid(field, "out of range") end
    E.invalid(field, expected)
  end

  -- Seconds, decimal, whole milliseconds, within the horizon: ns as B.
  function P.seconds_ns(s, field, expected)
    local seconds = P.positive_decimal(s, field, expected)
    local ms = D.mul_exact(seconds, THOUSAND)
    local ns = ms and cmul(ms, MILLION)
    if not ns or B.cmp(ns, HORIZON_NS) > 0 then E.invalid(field, expected) end
    return ns
  end

  P.cost = remembered(function(s) return P.whole(s, "cost", 0, CONTRACT.errors.cost) end)

  -- A wait in seconds that may be zero (args.rs' wait_ns): ns as B.
  local MAX_WAIT = CONTRACT.errors.max_wait
  function P.wait_ns(s)
    local d = D.parse(s)
    if not d then E.invalid("max_wait", MAX_WAIT) end
    if B.zero(d.m) then return ZERO end
    return P.seconds_ns(s, "max_wait", MAX_WAIT)
  end

  local WINDOW = CONTRACT.errors.window
  function P.window_ns(s) return P.seconds_ns(s, "window", WINDOW) end

  function P.is_option(s, name) return s ~= nil and s:upper() == name end

  ------------------------------------------------------------------------------------------------------------
  -- Stored layouts (core's format.rs): tags, 0.1's untagged lengths, redis-cell's decimal TAT.
  ------------------------------------------------------------------------------------------------------------
  local F = {}
  -- TAG_OF (each layout's tag, from core's) is in the generated block; TAGS reads it backwards.
  local function by_tag(tag_of)
    local by = {}
    for layout, tag in pairs(tag_of) do by[tag] = layout end
    return by
  end
  F.TAG_OF = TAG_OF
  F.TAGS = by_tag(TAG_OF)
  F.UNTAGGED = { [8] = "token", [16] = "fixed", [24] = "counter" }
  local WORDS = { token = 1, fixed = 2, counter = 3 }

  local function tagged_len_fits(layout, len)
    local words = WORDS[layout]
    if words then return len == 4 + words * 8 end
    if layout == "log" then return len >= 16 and len % 8 == 0 end
    return len > 4 and (len - 4) % 28 == 0
  end

  local function decimal_tat(s)
    local digits = s
    if s:sub(1, 1) == "+" then digits = s:sub(2) end
    if digits == "" or #digits > 20 or not digits:match("^%d+$") then return false end
    return B.cmp(B.digits((digits:gsub("^0+", ""))), I64MAX) <= 0
  end

  -- The layout of a stored value: by its tag, else 0.1's length, else redis-cell's digits ("cell").
  function F.layout(s)
    local tagged = #s >= 4 and F.TAGS[s:sub(1, 4)]
    if tagged and tagged_len_fits(tagged, #s) then return tagged end
    return F.UNTAGGED[#s] or (decimal_tat(s) and "cell") or nil
  end

  -- The u64 words of a small state (tagged, or 0.1's untagged form); a state error otherwise.
  function F.words(layout, s, signed)
    local n, at = WORDS[layout], nil
    if #s == 4 + n * 8 and s:sub(1, 4) == F.TAG_OF[layout] then
      at = 5
    elseif #s == n * 8 and F.layout(s) == layout then
      at = 1
    else
      E.bad_state()
    end
    local out = {}
    for i = 1, n do out[i] = B.fromle(s, at + (i - 1) * 8, signed and signed[i]) end
    return out
  end

  function F.tagged(layout, words)
    local out = { F.TAG_OF[layout] }
    for i, w in ipairs(words) do out[i + 1] = B.le64(w) end
    return concat(out)
  end

  ------------------------------------------------------------------------------------------------------------
  -- Verdicts: the five reply fields (core's verdict.rs); retry and reset in ns (B), retry nil = never.
  ------------------------------------------------------------------------------------------------------------
  local V = {}

  function V.new(allowed, limit, remaining, retry, reset)
    return { allowed = allowed, limit = limit, remaining = remaining, retry = retry, reset = reset }
  end

  function V.reply(v, sixth)
    local retry = v.retry and ceil_ms(v.retry) or -1
    local r = { v.allowed and 1 or 0, v.limit, v.remaining, retry, ceil_ms(v.reset) }
    if sixth then r[6] = sixth end
    return r
  end

  -- Whether a is more restrictive than b: a denial; then the longer wait (a denial's retry, "never"
  -- longest; an allowed reservation's wait before its units may be used); then fewer left.
  local function more_restrictive(a, b)
    if a.allowed ~= b.allowed then return not a.allowed end
    local c = B.cmp(a.retry or I64MAX, b.retry or I64MAX)
    if c ~= 0 then return c > 0 end
    return a.remaining < b.remaining
  end

  -- The position of the limiting verdict (ties go to the first).
  function V.most_restrictive(verdicts)
    local best = 1
    for i = 2, #verdicts do
      if more_restrictive(verdicts[i], verdicts[best]) then best = i end
    end
    return best
  end

  local function us_ns(us) return B.mul(B.int(us), THOUSAND) end

  ------------------------------------------------------------------------------------------------------------
  -- Small states (core's state.rs): a kind gives decode, step, write, fields and give_back; decide, peek,
  -- refund and describe follow here, once.
  ------------------------------------------------------------------------------------------------------------
  -- A kind as the contract declares it (its group, command, request form, refunds), with what this
  -- file adds (its layout, its functions).
  local function declared(name, extra)
    local k = {}
    for field, value in pairs(CONTRACT.kinds[name]) do k[field] = value end
    for field, value in pairs(extra) do k[field] = value end
    return k
  end

  local function small_state(k)
    local function read(stored)
      if stored == nil then return nil end
      return k.decode(stored)
    end
    function k.decide(lim, stored, now, cost)
      local state = read(stored)
      local step = k.step(lim, state, now, cost)
      local write = step.next and k.write(lim, step.next, state, now)
      return { verdict = step.verdict, write = write, repair = step.repair }
    end
    function k.peek(lim, stored, now)
      local state = read(stored)
      return { now = k.step(lim, state, now, ZERO).verdict, one = k.step(lim, state, now, ONE).verdict }
    end
    function k.describe(stored, now) return k.fields(k.decode(stored), now) end
    function k.refund(lim, stored, now, units)
      local state = read(stored)
      local refunded = k.give_back(lim, state, now, units)
      local verdict = k.step(lim, refunded or state, now, ZERO).verdict
      return refunded and k.write(lim, refunded, state, now), verdict
    end
    -- A hold's window in the state it left, and a settle's write (core's state.rs mark_of, settled).
    function k.hold_mark(stored)
      local state = read(stored)
      return state and k.mark(state) or 0
    end
    function k.settle(lim, stored, now, mark, delta)
      local state = read(stored)
      local next = k.adjust(lim, state, now, mark, delta)
      return next and k.write(lim, next, state, now)
    end
    function k.request(_, r)
      if r.cost == nil then E.syntax() end
      return P.cost(r.cost)
    end
    return k
  end

  -- A field of RL.INSPECT: a number below 2^53, or the error that names it.
  local function field_value(value)
    if value == nil then return false end
    local clamped = B.min(value, I64MAX)
    if B.cmp(clamped, TWO53) >= 0 then
      E.fail("ERR the key holds a value beyond 2^53, which the Lua library cannot reply exactly")
    end
    return B.num(clamped)
  end

  ------------------------------------------------------------------------------------------------------------
  -- The window limiters' parameters (core's window.rs): `limit window`.
  ------------------------------------------------------------------------------------------------------------
  local function windowed(k)
    function k.parse(limit_s, window_s)
      local limit = P.whole(limit_s, "limit", 1, CONTRACT.errors.limit)
      local window = P.window_ns(window_s)
      return { limit = reply_bound(limit, "limit"), limit_b = limit, window = window }
    end
    k.parse = remembered(k.parse, true)
    -- The time its limit is measured over (core's Declare::period_ns).
    function k.period(w) return w.window end
    return small_state(k)
  end

  ------------------------------------------------------------------------------------------------------------
  -- Request and lease ids: the first bytes of the id's SHA-1, the same in the module (core's ids).
  ------------------------------------------------------------------------------------------------------------
  local function hex_byte(h) return char(tonumber(h, 16)) end
  local function sha1_bytes(id, n)
    local hex = redis.sha1hex(id)
    return (hex:sub(1, n * 2):gsub("..", hex_byte))
  end

  local EMPTY_ID = CONTRACT.errors.empty_id

  ------------------------------------------------------------------------------------------------------------
  -- The token bucket as GCRA (core's token_bucket.rs): the TAT in Unix ns behind `RLT\x01`.
  ------------------------------------------------------------------------------------------------------------
  local token = small_state(declared("token_bucket", { layout = "token" }))
  local REFILL_TOO_LONG = CONTRACT.errors.refill_too_long

  function token.parse(capacity_s, rate_s)
    local capacity = P.whole(capacity_s, "capacity", 1, CONTRACT.errors.capacity)
    local rate = P.positive_decimal(rate_s, "rate", CONTRACT.errors.rate)
    local per_sec = D.mul_ceil(rate, ONE)
    if not per_sec or B.cmp(per_sec, MAX_RATE) > 0 then
      E.invalid("rate", CONTRACT.errors.rate_too_large)
    end
    local interval = D.div_ceil_into(rate, NS_PER_SEC)
    local exact = D.div_ceil_into(rate, B.mul(capacity, NS_PER_SEC))
    local tau = interval and exact and cmul(interval, capacity)
    if not tau or B.cmp(tau, HORIZON_NS) > 0 or B.zero(interval) then
      E.invalid("capacity", REFILL_TOO_LONG)
    end
    local slack = B.min(B.sub(tau, B.min(exact, tau)), B.sub(interval, ONE))
    -- A full refill: the longest wait a reservation counts.
    local period = B.sub(tau, slack)
    return {
      limit = reply_bound(capacity, "capacity"),
      capacity = capacity,
      interval = interval,
      tau = tau,
      slack = slack,
      depth = B.add(tau, slack),
      period = period,
      -- The expiry's grid step, whole seconds (core's TokenBucket::expiry_step_ms).
      expiry_step_ms = math.max(B.num(B.div(B.div(period, 16), NS_PER_SEC)) * 1000, 1000),
    }
  end
  token.parse = remembered(token.parse, true)

  function token.decode(stored) return F.words("token", stored, { true })[1] end

  -- The backlog a stored TAT leaves at `now`, and whether it is a clock fault (more than two full
  -- refills ahead: one of tokens, one of reservations), counted as an empty bucket.
  local function token_backlog(b, tat, now)
    local stored = tat and B.max(B.sat_i64(B.sub(tat, now)), ZERO) or ZERO
    if B.lt(B.mul(b.depth, 2), stored) then return b.depth, true end
    return stored, false
  end

  -- `cost` tokens at `now` (core's reserve_tat): taken now when they fit; else, when they fit within
  -- `max_wait` (at most one full refill), taken from the future: allowed with that wait as retry.
  function token.reserve_step(b, tat, now, cost, max_wait)
    local depth = b.depth
    local backlog, repair = token_backlog(b, tat, now)
    local function verdict(allowed, backlog_after, retry)
      local remaining = B.num(B.div(B.max(B.sub(depth, backlog_after), ZERO), b.interval))
      return V.new(allowed, b.limit, remaining, retry, B.max(B.sub(backlog_after, b.slack), ZERO))
    end
    local function unchanged(v)
      return { verdict = v, next = repair and B.sat_i64(B.add(now, b.tau)) or nil, repair = repair }
    end
    if B.lt(b.capacity, cost) then return unchanged(verdict(false, backlog, nil)) end
    if B.zero(cost) then return unchanged(verdict(true, backlog, ZERO)) end
    local after = B.add(backlog, B.mul(cost, b.interval))
    local wait = B.max(B.sub(after, depth), ZERO)
    if B.lt(B.min(max_wait, b.period), wait) then return unchanged(verdict(false, backlog, wait)) end
    return { verdict = verdict(true, after, wait), next = B.sat_i64(B.add(now, after)), repair = false }
  end

  function token.step(b, tat, now, cost) return token.reserve_step(b, tat, now, cost, ZERO) end

  -- The key expires on the first point of a grid of max(1 s, 1/16 of a full refill) at or after the TAT
  -- (its milliseconds, rounded up).


  -- The grid point, the state's end, the point the replaced TAT implied under these parameters, and
  -- the whole second the expiry in place is at least (core's Expiry::Derived).
  function token.write(b, tat, previous)
    local step = b.expiry_step_ms
    local ms, previous_ms = ceil_ms(tat), previous and ceil_ms(previous)
    return {
      set = F.tagged("token", { tat }),
      derived = {
        at = on_grid(ms, step),
        at_least = ms,
        previous = previous_ms and on_grid(previous_ms, step),
        certain = previous_ms and on_grid(previous_ms, 1000),
      },
    }
  end

  function token.fields(tat, now)
    return { { "tat_ms", ceil_ms(tat) }, { "backlog_ms", ceil_ms(B.sat_i64(B.sub(tat, now))) } }
  end

  function token.give_back(b, tat, now, tokens)
    local backlog = token_backlog(b, tat, now)
    if B.zero(backlog) or B.zero(tokens) then return nil end
    local credit = B.mul(B.min(tokens, b.capacity), b.interval)
    return B.sat_i64(B.add(now, B.max(B.sub(backlog, credit), ZERO)))
  end

  -- A full refill (core's Declare::period_ns).
  function token.period(b) return b.period end

  -- A bucket has no windows (core's SmallState::mark).
  function token.mark() return 0 end

  -- A settle's delta: a return refills (never above capacity); an excess is charged as debt, at most
  -- one full refill beyond empty.
  function token.adjust(b, tat, now, _, delta)
    if B.negative(delta) then return token.give_back(b, tat, now, B.min(B.sub(ZERO, delta), U64MAX)) end
    local backlog = token_backlog(b, tat, now)
    local charged = B.min(B.add(backlog, B.mul(delta, b.interval)), B.mul(b.depth, 2))
    if B.pos(delta) and B.lt(backlog, charged) then return B.sat_i64(B.add(now, charged)) end
    return nil
  end

  -- A request that may wait (core's TokenBucket::reserve): `cost` tokens, now or within `max_wait`,
  -- and as many more as the bucket holds now, up to `upto` in all. The outcome, and the number taken
  -- (0 when denied).
  function token.reserve(b, stored, now, cost, upto, max_wait)
    local tat = stored and token.decode(stored)
    local available = B.int(token.step(b, tat, now, ZERO).verdict.remaining)
    local taken = B.max(B.min(available, upto), cost)
    local step = token.reserve_step(b, tat, now, taken, max_wait)
    local write = step.next and token.write(b, step.next, tat)
    local outcome = { verdict = step.verdict, write = write, repair = step.repair }
    return outcome, step.verdict.allowed and B.num(taken) or 0
  end

  -- RL.TAKE: as many whole tokens as the bucket holds, up to max (a reservation of one that does
  -- not wait, up to max).
  function token.take(b, stored, now, max) return token.reserve(b, stored, now, ONE, max, ZERO) end

  ------------------------------------------------------------------------------------------------------------
  -- The fixed window (core's fixed_window.rs): the count (u64) and the window's end (i64 ns), `RLF\x01`.
  ------------------------------------------------------------------------------------------------------------
  local fixed = windowed(declared("fixed_window", { layout = "fixed" }))

  function fixed.decode(stored)
    local w = F.words("fixed", stored, { false, true })
    return { count = w[1], ends_at = w[2] }
  end

  function fixed.step(f, state, now, cost)
    local latest_end = B.sat_i64(B.add(now, f.window))
    local stored = state and B.lt(now, state.ends_at) and state or nil
    local repaired = stored and B.lt(latest_end, stored.ends_at)
        and { count = stored.count, ends_at = latest_end } or nil
    local current = repaired or stored
    local count = current and current.count or ZERO
    local ends_at = current and current.ends_at or latest_end
    local open_for = current and B.sat_i64(B.sub(ends_at, now)) or ZERO
    local function verdict(allowed, n, retry, reset)
      return V.new(allowed, f.limit, B.num(B.max(B.sub(f.limit_b, n), ZERO)), retry, reset)
    end
    local function unchanged(v)
      return { verdict = v, next = repaired, repair = repaired ~= nil }
    end
    if B.lt(f.limit_b, cost) then return unchanged(verdict(false, count, nil, open_for)) end
    local total = B.add(count, cost)
    if B.cmp(total, U64MAX) <= 0 and B.le(total, f.limit_b) then
      if B.pos(cost) then
        return {
          verdict = verdict(true, total, ZERO, B.sat_i64(B.sub(ends_at, now))),
          next = { count = total, ends_at = ends_at },
          repair = false,
        }
      end
      return unchanged(verdict(true, count, ZERO, open_for))
    end
    return unchanged(verdict(false, count, open_for, open_for))
  end

  function fixed.write(_, state)
    return { set = F.tagged("fixed", { state.count, state.ends_at }), within = { ceil_ms(state.ends_at), 0 } }
  end

  function fixed.fields(s)
    return { { "count", field_value(s.count) }, { "window_ends_at_ms", ceil_ms(s.ends_at) } }
  end

  function fixed.give_back(_, s, now, units)
    if not s or not B.lt(now, s.ends_at) or B.zero(s.count) or B.zero(units) then return nil end
    return { count = B.max(B.sub(s.count, units), ZERO), ends_at = s.ends_at }
  end

  -- A hold's window (core's SmallState::mark): its end, in ms.
  function fixed.mark(s) return ceil_ms(s.ends_at) end

  -- A settle's delta units while the window `mark` is open: never a later one.
  function fixed.adjust(_, s, now, mark, delta)
    if not s or not B.lt(now, s.ends_at) or ceil_ms(s.ends_at) ~= mark then return nil end
    local count = B.sat_u64(B.add(s.count, delta))
    if B.eq(count, s.count) then return nil end
    return { count = count, ends_at = s.ends_at }
  end

  ------------------------------------------------------------------------------------------------------------
  -- The sliding window counter (core's sliding_counter.rs): window index, current, previous, `RLC\x01`.
  ------------------------------------------------------------------------------------------------------------
  local counter = windowed(declared("sliding_counter", { layout = "counter" }))

  function counter.decode(stored)
    local w = F.words("counter", stored)
    return { window = w[1], current = w[2], previous = w[3] }
  end

  -- The counts rolled to the current window, the time elapsed in it and the state's expiry.
  local function counter_roll(c, state, now)
    local w = c.window
    local index_now, elapsed = B.divmod(B.max(now, ZERO), w)
    local repaired = state and B.lt(index_now, state.window)
        and { window = index_now, current = state.current, previous = state.previous } or nil
    local s = repaired or state
    if s and B.eq(B.add(s.window, ONE), index_now) then
      s = { window = index_now, current = ZERO, previous = s.current }
    elseif not (s and B.eq(s.window, index_now)) then
      s = { window = index_now, current = ZERO, previous = ZERO }
    end
    local expires_at = B.min(B.mul(B.add(s.window, B.int(2)), w), I64MAX)
    return s, repaired, elapsed, expires_at
  end

  function counter.step(c, state, now, cost)
    local w, limit = c.window, c.limit_b
    local s, repaired, elapsed, expires_at = counter_roll(c, state, now)
    local weighted_previous = B.mul(s.previous, B.sub(w, elapsed))
    local capacity = B.mul(limit, w)
    local function used(current) return B.min(B.add(weighted_previous, B.mul(current, w)), U128MAX) end
    local function verdict(allowed, current, retry)
      local remaining = B.num(B.div(B.max(B.sub(capacity, used(current)), ZERO), w))
      local to_window_end = B.sub(w, elapsed)
      local reset = ZERO
      if B.pos(current) then
        reset = B.sat_i64(B.add(to_window_end, w))
      elseif B.pos(s.previous) then
        reset = to_window_end
      end
      return V.new(allowed, c.limit, remaining, retry, reset)
    end
    local function fits_at(previous, room)
      if B.zero(previous) then return ZERO end
      return B.max(B.sub(w, B.div(B.mul(room, w), previous)), ZERO)
    end
    local function unchanged(v)
      return { verdict = v, next = repaired, repair = repaired ~= nil, expires_at = expires_at }
    end
    if B.lt(limit, cost) then return unchanged(verdict(false, s.current, nil)) end
    local after = B.sat_u64(B.add(s.current, cost))
    if B.le(used(after), capacity) then
      local next = B.pos(cost) and { window = s.window, current = after, previous = s.previous } or repaired
      local repair = next ~= nil and not B.pos(cost)
      return { verdict = verdict(true, after, ZERO), next = next, repair = repair, expires_at = expires_at }
    end
    local room = B.sub(B.sub(limit, s.current), cost)
    local wait
    if not B.negative(room) then
      wait = B.max(B.sub(fits_at(s.previous, room), elapsed), ZERO)
    else
      wait = B.add(B.sub(w, elapsed), fits_at(s.current, B.sub(limit, cost)))
    end
    return unchanged(verdict(false, s.current, B.min(wait, I64MAX)))
  end

  function counter.write(c, state, _, now)
    local _, _, _, expires_at = counter_roll(c, state, now)
    return {
      set = F.tagged("counter", { state.window, state.current, state.previous }),
      within = { ceil_ms(expires_at), 0 },
    }
  end

  function counter.fields(s)
    return {
      { "window_index", field_value(s.window) },
      { "current", field_value(s.current) },
      { "previous", field_value(s.previous) },
    }
  end

  function counter.give_back(c, s, now, units)
    local index_now = B.div(B.max(now, ZERO), c.window)
    if not s or B.lt(s.window, index_now) or B.zero(s.current) or B.zero(units) then return nil end
    return { window = s.window, current = B.max(B.sub(s.current, units), ZERO), previous = s.previous }
  end

  -- A hold's window (core's SmallState::mark): its index.
  function counter.mark(s) return B.num(B.min(s.window, I64MAX)) end

  -- A settle's delta units in the window `mark` while it is the current or the previous one.
  function counter.adjust(c, s, now, mark, delta)
    local index_now = B.div(B.max(now, ZERO), c.window)
    if mark < 0 or B.lt(B.add(mark, ONE), index_now) then return nil end
    if not s or B.lt(index_now, s.window) then return nil end
    local next
    if B.eq(s.window, mark) then
      next = { window = s.window, current = B.sat_u64(B.add(s.current, delta)), previous = s.previous }
    elseif B.eq(s.window, B.add(mark, ONE)) then
      next = { window = s.window, current = s.current, previous = B.sat_u64(B.add(s.previous, delta)) }
    else
      return nil
    end
    if B.eq(next.current, s.current) and B.eq(next.previous, s.previous) then return nil end
    return next
  end

  ------------------------------------------------------------------------------------------------------------
  -- The sliding log (core's sliding_log.rs): an 8-byte header and slots of a time in us (and an id hash).
  ------------------------------------------------------------------------------------------------------------
  local slide = declared("sliding_log", { layout = "log" })
  local HEADER_LEN, FILLER_CEILING, FUTURE_TOLERANCE_US, MIN_SHRINK_SLOTS = 8, W32, 1000, 16
  local NO_HASH = string.rep("\0", 8)
  local SLIDE_LIMIT = CONTRACT.errors.slide_limit

  local function us_at(s, at)
    local hi = u32at(s, at + 4)
    if hi >= 2097152 then
      E.fail("ERR the key holds a time beyond 2^53 us, which the Lua library cannot compare exactly")
    end
    return hi * W32 + u32at(s, at)
  end

  function slide.parse(limit_s, window_s)
    local limit = P.whole(limit_s, "limit", 1, SLIDE_LIMIT)
    if B.cmp(limit, CONTRACT.max_log_limit) > 0 then E.invalid("limit", SLIDE_LIMIT) end
    local window_us = B.num(B.div(P.window_ns(window_s), THOUSAND))
    return { limit = B.num(limit), window_us = window_us }
  end
  slide.parse = remembered(slide.parse, true)

  function slide.request(_, r)
    if r.id == nil then E.syntax() end
    if r.id == "" then E.invalid("id", EMPTY_ID) end
    return { hash = sha1_bytes(r.id, 8), dedup = r.dedup }
  end

  -- A parsed view of a stored log (one table; its methods are the class's, not closures per call).
  local Log = {}
  Log.__index = Log
  function Log:ts(p) return us_at(self.s, HEADER_LEN + p * self.width + 1) end
  function Log:hash(p)
    if self.width == 8 then return NO_HASH end
    local at = HEADER_LEN + p * 16 + 9
    return self.s:sub(at, at + 7)
  end
  function Log:physical(l) return (self.pivot + l) % self.n end
  function Log:first_above(threshold)
    local l, h = 0, self.n
    while l < h do
      local mid = l + floor((h - l) / 2)
      if self:ts(self:physical(mid)) > threshold then h = mid else l = mid + 1 end
    end
    return l
  end
  function Log:newest() return self:ts(self:physical(self.n - 1)) end
  function Log:entries_from(first)
    local out = {}
    for l = first, self.n - 1 do
      local p = self:physical(l)
      out[#out + 1] = { self:ts(p), self:hash(p) }
    end
    return out
  end

  -- The parsed view of `s`, or nil when the bytes are not a log.
  local function log_parse(s)
    if #s < HEADER_LEN or s:sub(1, 4) ~= TAG_OF.log or s:sub(6, 8) ~= "\0\0\0" then return nil end
    local width = byte(s, 5)
    if width ~= 8 and width ~= 16 then return nil end
    local slots = #s - HEADER_LEN
    if slots == 0 or slots % width ~= 0 then return nil end
    local log = setmetatable({ s = s, width = width, n = slots / width, pivot = 0 }, Log)
    local lo, hi = 0, log.n - 1
    while lo < hi do
      local mid = lo + floor((hi - lo) / 2)
      if log:ts(mid) > log:ts(hi) then lo = mid + 1 else hi = mid end
    end
    log.pivot = lo
    return log
  end

  -- A log laid out oldest first: fillers, then the entries.
  local function log_build(width, slots, entries)
    local out = { TAG_OF.log, char(width), "\0\0\0" }
    local function push(ts, hash)
      out[#out + 1] = u64le(ts)
      if width == 16 then out[#out + 1] = hash end
    end
    for f = 1, slots - #entries do push(f, NO_HASH) end
    for _, e in ipairs(entries) do push(e[1], e[2]) end
    return concat(out)
  end

  local function splice(s, offset, bytes) return s:sub(1, offset) .. bytes .. s:sub(offset + #bytes + 1) end

  local function decide_on(l, log, now_us, id)
    local window_us = l.window_us
    local threshold = math.max(math.max(now_us - window_us, 0), FILLER_CEILING)
    local function wait(ts) return us_ns(math.max(ts + window_us - now_us, 0)) end
    -- Stamps of requests that share a microsecond run ahead of it: the reset is at most one window.
    local function reset(ts) return us_ns(math.max(math.min(ts + window_us - now_us, window_us), 0)) end
    local function verdict(allowed, live, retry, newest)
      return V.new(allowed, l.limit, math.max(l.limit - live, 0), retry, newest and reset(newest) or ZERO)
    end
    local width_for = id.dedup and 16 or 8
    if not log then
      return {
        verdict = verdict(true, 1, ZERO, now_us),
        change = { set = log_build(width_for, 1, { { now_us, id.hash } }) },
        empty_at = now_us + window_us,
        repair = false,
      }
    end
    local first_live = log:first_above(threshold)
    local live = log.n - first_live
    local newest = live > 0 and log:newest() or nil
    local empty_at = newest and newest + window_us
    if id.dedup then
      for _, e in ipairs(log:entries_from(first_live)) do
        if e[2] == id.hash then
          return { verdict = verdict(true, live, ZERO, newest), empty_at = empty_at, repair = false }
        end
      end
    end
    if live >= l.limit then
      local leaving = log:ts(log:physical(log.n - l.limit))
      local retry = B.max(wait(leaving), ONE)
      return { verdict = verdict(false, live, retry, newest), empty_at = empty_at, repair = false }
    end
    local stamp = math.max(now_us, log:newest() + 1)
    local entry_width = math.max(width_for, log.width)
    local live_after = live + 1
    local shrink = log.n >= MIN_SHRINK_SLOTS and live_after * 4 <= log.n
    local change
    if entry_width ~= log.width or live == log.n or shrink then
      local entries = log:entries_from(first_live)
      entries[#entries + 1] = { stamp, id.hash }
      local slots = log.n
      if live_after > log.n then
        slots = math.min(math.max(log.n + floor(log.n / 4), live_after), math.max(l.limit, live_after))
      elseif shrink then
        slots = math.max(live_after * 2, live_after + 1)
      end
      change = { set = log_build(entry_width, slots, entries) }
    else
      local slot = u64le(stamp)
      if log.width == 16 then slot = slot .. id.hash end
      change = { range = { HEADER_LEN + log.pivot * log.width, slot } }
    end
    local allowed = verdict(true, live + 1, ZERO, stamp)
    return { verdict = allowed, change = change, empty_at = stamp + window_us, repair = false }
  end

  -- A log with entries from the future (a clock that ran ahead) is repaired first: they move to now.
  local function decide_repaired(l, log, now_us, id)
    local previous = 0
    local entries = log:entries_from(0)
    for _, e in ipairs(entries) do
      e[1] = math.max(math.min(e[1], now_us), previous + 1)
      previous = e[1]
    end
    local repaired = log_build(log.width, log.n, entries)
    local parsed = log_parse(repaired)
    if not parsed then return decide_on(l, log, now_us, id) end
    local d = decide_on(l, parsed, now_us, id)
    d.repair = d.change == nil
    if d.change and d.change.range then
      d.change = { set = splice(repaired, d.change.range[1], d.change.range[2]) }
    elseif not d.change then
      d.change = { set = repaired }
    end
    return d
  end

  local function decide_log(l, log, now_us, id)
    if log and log:newest() > now_us + FUTURE_TOLERANCE_US then return decide_repaired(l, log, now_us, id) end
    return decide_on(l, log, now_us, id)
  end

  local function now_us_of(now)
    if type(now) == "table" and #now == 3 and not now.neg then
      -- A clock's time as its three limbs: n3 * 10^11 + n2 * 10^4 + floor(n1 / 1000), below 2^53.
      local n1 = now[1]
      return now[3] * 100000000000 + now[2] * 10000 + (n1 - n1 % 1000) / 1000
    end
    return B.num(B.div(B.max(now, ZERO), THOUSAND))
  end

  local function log_read(stored)
    if stored == nil then return nil end
    return log_parse(stored) or E.bad_state()
  end

  function slide.decide(l, stored, now, id)
    local d = decide_log(l, log_read(stored), now_us_of(now), id)
    local write
    if d.change and d.empty_at then
      d.change.within = { math.ceil(d.empty_at / 1000), 999 }
      write = d.change
    end
    return { verdict = d.verdict, write = write, repair = d.repair }
  end

  function slide.peek(l, stored, now)
    local log, now_us = log_read(stored), now_us_of(now)
    local one = decide_log(l, log, now_us, { hash = NO_HASH, dedup = false }).verdict
    local newest = 0
    if log then
      for _, e in ipairs(log:entries_from(0)) do
        if e[1] > FILLER_CEILING then newest = e[1] end
      end
    end
    local remaining = one.allowed and one.remaining + 1 or one.remaining
    local before = V.new(one.allowed, one.limit, remaining, one.retry,
      us_ns(math.max(math.min(newest + l.window_us - now_us, l.window_us), 0)))
    return { now = before, one = one }
  end

  function slide.describe(stored)
    local log = log_parse(stored) or E.bad_state()
    local recorded, oldest, newest = 0, nil, nil
    for _, e in ipairs(log:entries_from(0)) do
      if e[1] > FILLER_CEILING then
        recorded = recorded + 1
        oldest = oldest or e[1]
        newest = e[1]
      end
    end
    local function ms(us) return us and math.ceil(us / 1000) or false end
    return {
      { "recorded", recorded },
      { "slots", log.n },
      { "dedup", log.width == 16 and 1 or 0 },
      { "oldest_ms", ms(oldest) },
      { "newest_ms", ms(newest) },
    }
  end

  ------------------------------------------------------------------------------------------------------------
  -- Leases (core's leases.rs): `RLA\x01`, then 28 bytes per lease: the id's digest (16), its end in us
  -- (u64), its weight (u32).
  ------------------------------------------------------------------------------------------------------------
  local leases = declared("concurrency", { layout = "leases" })
  local LEASE_LIMIT = CONTRACT.errors.lease_limit
  local LEASE = CONTRACT.errors.lease
  local ENTRY = 28

  local function lease_us(s)
    local ok, ns = pcall(P.window_ns, s)
    E.raised = nil
    if not ok then E.invalid("lease", LEASE) end
    return B.num(B.div(ns, THOUSAND))
  end

  local function parse_weight(s)
    local w = P.whole(s, "weight", 1, CONTRACT.errors.weight)
    if B.cmp(w, CONTRACT.max_lease_limit) > 0 then E.invalid("weight", CONTRACT.errors.weight) end
    return B.num(w)
  end

  local function holder(id)
    if id == "" then E.invalid("id", EMPTY_ID) end
    return sha1_bytes(id, 16)
  end

  function leases.parse(limit_s, lease_s)
    local limit = P.whole(limit_s, "limit", 1, LEASE_LIMIT)
    local lease = lease_us(lease_s)
    if B.cmp(limit, CONTRACT.max_lease_limit) > 0 then E.invalid("limit", LEASE_LIMIT) end
    return { limit = B.num(limit), lease_us = lease }
  end
  leases.parse = remembered(leases.parse, true)

  function leases.precheck(r)
    if r.weight then parse_weight(r.weight) end
  end

  function leases.request(_, r)
    if r.holder == nil then E.syntax() end
    local weight = r.weight and parse_weight(r.weight) or 1
    return { id = holder(r.holder), weight = weight }
  end

  local function lease_decode(stored)
    if stored:sub(1, 4) ~= TAG_OF.leases or (#stored - 4) % ENTRY ~= 0 then E.bad_state() end
    local out = {}
    for at = 5, #stored, ENTRY do
      local id, expires, weight = stored:sub(at, at + 15), us_at(stored, at + 16), u32at(stored, at + 24)
      out[#out + 1] = { id = id, expires = expires, weight = weight }
    end
    return out
  end

  local function lease_live(stored, now_us)
    local out = {}
    if stored == nil then return out end
    for _, l in ipairs(lease_decode(stored)) do
      if l.expires > now_us then out[#out + 1] = l end
    end
    return out
  end

  -- The live leases, none ending later than one lease from now (a lease further ahead is cut).
  local function live_within(stored, now_us, lease)
    local held, cut = lease_live(stored, now_us), false
    local latest = now_us + lease
    for _, l in ipairs(held) do
      if l.expires > latest then
        l.expires = latest
        cut = true
      end
    end
    return held, cut
  end

  -- Held leases, expiring within max(1 s, 1/16 of a lease of `lease_us`) after the last one's end.
  local function lease_write(held, lease_us)
    if #held == 0 then return { delete = true } end
    local out, last = { TAG_OF.leases }, 0
    for _, l in ipairs(held) do
      out[#out + 1] = l.id .. u64le(l.expires) .. u32le(l.weight)
      if l.expires > last then last = l.expires end
    end
    local slack = math.max(floor(floor(lease_us / 16) / 1000), 1000)
    return { set = concat(out), within = { math.ceil(last / 1000), slack } }
  end

  local function lease_verdict(ls, allowed, held, now_us, retry)
    local weight, last = 0, now_us
    for _, l in ipairs(held) do
      weight = weight + l.weight
      if l.expires > last then last = l.expires end
    end
    return V.new(allowed, ls.limit, math.max(ls.limit - weight, 0), retry, us_ns(last - now_us))
  end

  local function lease_retry(ls, held, now_us, weight)
    if weight > ls.limit then return nil end
    local ends, load = {}, 0
    for i, l in ipairs(held) do
      ends[i] = { l.expires, l.weight }
      load = load + l.weight
    end
    table.sort(ends, function(a, b) return a[1] < b[1] or (a[1] == b[1] and a[2] < b[2]) end)
    for _, e in ipairs(ends) do
      load = load - e[2]
      if load + weight <= ls.limit then return B.max(us_ns(math.max(e[1] - now_us, 0)), ONE) end
    end
    return ONE
  end

  function leases.decide(ls, stored, now, request)
    local now_us = now_us_of(now)
    local held, cut = live_within(stored, now_us, ls.lease_us)
    local expires = now_us + ls.lease_us
    local found = nil
    for _, l in ipairs(held) do
      if l.id == request.id then
        found = l
        break
      end
    end
    if found then
      found.expires = expires
    else
      local load = 0
      for _, l in ipairs(held) do load = load + l.weight end
      if load + request.weight > ls.limit then
        local retry = lease_retry(ls, held, now_us, request.weight)
        local verdict = lease_verdict(ls, false, held, now_us, retry)
        return { verdict = verdict, write = cut and lease_write(held, ls.lease_us) or nil, repair = cut }
      end
      held[#held + 1] = { id = request.id, expires = expires, weight = request.weight }
    end
    local verdict = lease_verdict(ls, true, held, now_us, ZERO)
    return { verdict = verdict, write = lease_write(held, ls.lease_us), repair = false }
  end

  function leases.peek(ls, stored, now)
    local now_us = now_us_of(now)
    local held = live_within(stored, now_us, ls.lease_us)
    local load = 0
    for _, l in ipairs(held) do load = load + l.weight end
    local fits = load < ls.limit
    local retry = fits and ZERO or lease_retry(ls, held, now_us, 1)
    local now_verdict = lease_verdict(ls, true, held, now_us, ZERO)
    return { now = now_verdict, one = lease_verdict(ls, fits, held, now_us, retry) }
  end

  function leases.describe(stored, now)
    local now_us = now_us_of(now)
    local count, weight, next_end, last_end = 0, 0, nil, nil
    for _, l in ipairs(lease_decode(stored)) do
      if l.expires > now_us then
        count = count + 1
        weight = weight + l.weight
        next_end = next_end and math.min(next_end, l.expires) or l.expires
        last_end = last_end and math.max(last_end, l.expires) or l.expires
      end
    end
    local function ms(us) return us and math.ceil(us / 1000) or false end
    return {
      { "held", count },
      { "weight_held", weight },
      { "next_expiry_ms", ms(next_end) },
      { "last_expiry_ms", ms(last_end) },
    }
  end

  -- RL.RELEASE: true when `id` held a live lease; the write removes it (the last one deletes the key).
  function leases.release(stored, now, id)
    local now_us = now_us_of(now)
    local held = lease_live(stored, now_us)
    if #held <= 1 then
      if held[1] and held[1].id == id then return true, { delete = true } end
      return false, nil
    end
    local kept = {}
    for _, l in ipairs(held) do
      if l.id ~= id then kept[#kept + 1] = l end
    end
    -- The lease length is not known here: the slack is that of the longest time left.
    local left = 0
    for _, l in ipairs(kept) do left = math.max(left, l.expires - now_us) end
    if #kept < #held then return true, lease_write(kept, left) end
    return false, nil
  end

  -- RL.RENEW: the lease `id` holds ends one lease from now; false when it is gone (never re-acquired).
  function leases.renew(stored, now, id, lease)
    local now_us = now_us_of(now)
    local held, cut = live_within(stored, now_us, lease)
    for _, l in ipairs(held) do
      if l.id == id then
        l.expires = now_us + lease
        return true, lease_write(held, lease)
      end
    end
    return false, cut and lease_write(held, lease) or nil
  end

  ------------------------------------------------------------------------------------------------------------
  -- Reservations (core's reservation.rs): a token bucket's decision with a queue in it, on the bucket's
  -- own state; its requests are `cost max_wait`.
  ------------------------------------------------------------------------------------------------------------
  local reserve = declared("reservation", {
    layout = "token", parse = token.parse, peek = token.peek, describe = token.describe, refund = token.refund,
  })

  function reserve.request(_, r)
    return { cost = P.cost(r.cost), max_wait = P.wait_ns(r.max_wait) }
  end

  function reserve.decide(b, stored, now, r)
    return (token.reserve(b, stored, now, r.cost, r.cost, r.max_wait))
  end
  -- GENERATED: every kind, in the registry's order
  local KINDS = { token, fixed, counter, slide, leases, reserve }

  ------------------------------------------------------------------------------------------------------------
  -- The registry of kinds (core's kind.rs) and the request forms (core's declare.rs).
  ------------------------------------------------------------------------------------------------------------
  -- KINDS, every kind in the registry's order, is written after their parts (`--@ kinds`). A kind listed
  -- after another of its layout decides on that one's state (a reservation, on a bucket's): the first
  -- owns the layout.
  local function layout_owners(kinds)
    local by = {}
    for _, k in ipairs(kinds) do by[k.layout] = by[k.layout] or k end
    return by
  end
  local BY_LAYOUT = layout_owners(KINDS)
  local FORM_OPTION = CONTRACT.form_option
  -- How many arguments a form takes without its option (1 unless listed).
  local FORM_LEN = CONTRACT.form_len

  local function kind_of_group(name)
    local upper = name:upper()
    for _, k in ipairs(KINDS) do
      if k.group == upper then return k end
    end
    return nil
  end

  -- The request at args[at..]: its fields and how many arguments it took (core's RequestForm::parse).
  local function request_parse(form, args, at)
    local option = FORM_OPTION[form]
    local len = FORM_LEN[form] or 1
    if option and P.is_option(args[at + 1], option[1]) then len = 2 + option[2] end
    if at + len - 1 > #args then E.arity() end
    local first = args[at]
    if form == "cost" then return { cost = first }, len end
    if form == "reserve" then return { cost = first, max_wait = args[at + 1] }, len end
    if form == "id" then return { id = first, dedup = len == 2 }, len end
    return { holder = first, weight = len == 3 and args[at + 2] or nil }, len
  end

  -- A request that ends its command: one unknown option is a syntax error, more the wrong number.
  local function request_whole(form, args, at)
    local request, len = request_parse(form, args, at)
    local left = #args - (at - 1) - len
    if left == 0 then return request end
    local option = FORM_OPTION[form]
    if option and len == 1 and left == 1 + option[2] then E.syntax() end
    E.arity()
  end

  ------------------------------------------------------------------------------------------------------------
  -- The store (the module's src/server/store.rs): what a limiter asks to write, with its expiry, in
  -- place where the module writes in place. Scripts replicate their writes by effect.
  ------------------------------------------------------------------------------------------------------------
  local S = {}

  function S.read(key)
    local v = redis.pcall("GET", key)
    if type(v) == "table" and v.err then E.fail(v.err) end
    if v == false then return nil end
    return v
  end

  -- The milliseconds (rounded down) of a time in B.
  local function now_ms_of(now)
    if type(now) == "table" and #now == 3 and not now.neg then return ms_of_limbs(now[1], now[2], now[3]) end
    return B.num(B.div(B.max(now, ZERO), MILLION))
  end

  -- The key's absolute expiry (Unix ms), or nil (expiry_of, on this call's clock).
  function S.expiry(key, now) return expiry_of(key, now_ms_of(now)) end

  -- An expiry within [at_least, at_least + slack] stays; else the latest.
  local function expiry_change(key, within, exists, now)
    local at_least, latest = within[1], within[1] + within[2]
    local current = exists and S.expiry(key, now) or nil
    if current and current >= at_least and current <= latest then return nil end
    return latest
  end

  function S.apply(key, old, write, now)
    if write.delete then
      if old then redis.call("DEL", key) end
      return
    end
    if write.range then
      local offset, bytes = write.range[1], write.range[2]
      redis.call("SETRANGE", key, offset, bytes)
      local at = expiry_change(key, write.within, true, now)
      if at then redis.call("PEXPIREAT", key, at) end
      return
    end
    if write.derived then
      local d = write.derived
      return S.set_derived(key, old, write.set, d.at, d.at_least, d.previous, d.certain, now)
    end
    -- An expiry that still fits is kept, whatever the new value's length (the module's store puts
    -- it back after replacing a value of another length).
    local at = expiry_change(key, write.within, old ~= nil, now)
    if at then
      redis.call("SET", key, write.set, "PXAT", at)
    else
      redis.call("SET", key, write.set, "KEEPTTL")
    end
  end

  -- `set` at `key` with core's Expiry::change of a derived expiry (its point `at`, the state's end
  -- `at_least`, the point the replaced state implied, `previous`, and the whole second it is at least,
  -- `certain`): set when new, replaced or moved; kept without reading when the replaced state's whole
  -- second covers the new one; else kept only when the expiry in place is a whole second within
  -- [at_least, at].
  function S.set_derived(key, old, set, at, at_least, previous, certain, now)
    derived_set(key, old, set, at, at_least, previous, certain, now_ms_of(now))
  end

  ------------------------------------------------------------------------------------------------------------
  -- The clock's reading (`clock`, before the library: its seconds, microseconds and nanoseconds below
  -- them, as text) as ns in B.
  ------------------------------------------------------------------------------------------------------------
  local function now_of(sec, usec, ns)
    local now = B.time_ns(B.digits(sec), B.digits(usec))
    if ns then now = B.add(now, B.digits(ns)) end
    return now
  end

  ------------------------------------------------------------------------------------------------------------
  -- The commands.
  ------------------------------------------------------------------------------------------------------------
  local C = {}

  -- One request on one key (the module's limit::decide).
  local function decide_one(key, k, lim, request, now)
    local old = S.read(key)
    local outcome = k.decide(lim, old, now, request)
    if outcome.write then S.apply(key, old, outcome.write, now) end
    return V.reply(outcome.verdict)
  end

  -- RL.TOKEN on one bucket: token_core where it applies (near now, in plain numbers), else the general
  -- path (token.step, then decide_one's write and reply).
  local function token_one(key, b, cost, now)
    local old = S.read(key)
    if type(now) == "table" and #now == 3 and not now.neg then
      local reply = token_core(key, old, b.capacity, b.interval, b.depth, b.slack, b.limit, b.expiry_step_ms,
        cost, now[1], now[2], now[3])
      if reply then return reply end
    end
    local outcome = token.decide(b, old, now, cost)
    if outcome.write then S.apply(key, old, outcome.write, now) end
    return V.reply(outcome.verdict)
  end

  -- One request over several keys, all or nothing (limit::decide_all and core's combine.rs).
  local function decide_all(keys, limits, now)
    local olds, outcomes, verdicts = {}, {}, {}
    for i, key in ipairs(keys) do
      local l = limits[i]
      olds[i] = S.read(key)
      outcomes[i] = l.kind.decide(l.limiter, olds[i], now, l.request)
      verdicts[i] = outcomes[i].verdict
    end
    local limiting = V.most_restrictive(verdicts)
    local verdict = verdicts[limiting]
    for i, key in ipairs(keys) do
      local o = outcomes[i]
      if o.write and (verdict.allowed or o.repair) then S.apply(key, olds[i], o.write, now) end
    end
    return V.reply(verdict, limiting)
  end

  local function no_duplicate(keys, i)
    for j = 1, i - 1 do
      if keys[j] == keys[i] then E.duplicate() end
    end
  end

  function C.rl_token(keys, args, now)
    local groups = #keys
    if groups == 0 or #args ~= groups * 3 then E.arity() end
    if groups == 1 then
      -- One bucket: the common call, without the tables of the multi-key path.
      local bucket = token.parse(args[1], args[2])
      return token_one(keys[1], bucket, P.cost(args[3]), now)
    end
    local limits = {}
    for i = 1, groups do
      local at = (i - 1) * 3
      local bucket = token.parse(args[at + 1], args[at + 2])
      limits[i] = { kind = token, limiter = bucket, request = P.cost(args[at + 3]) }
    end
    if groups == 1 then return decide_one(keys[1], token, limits[1].limiter, limits[1].request, now) end
    for i = 1, groups do no_duplicate(keys, i) end
    return decide_all(keys, limits, now)
  end

  -- RL.FIXED / RL.SLIDECOUNT key limit window [cost]: the cost is read first, as the module reads it.
  local function count_command(k)
    return function(keys, args, now)
      if #keys ~= 1 or #args < 2 or #args > 3 then E.arity() end
      local cost = args[3] and P.cost(args[3]) or ONE
      return decide_one(keys[1], k, k.parse(args[1], args[2]), cost, now)
    end
  end
  C.rl_fixed = count_command(fixed)
  C.rl_slidecount = count_command(counter)

  function C.rl_slide(keys, args, now)
    if #keys ~= 1 or #args < 3 or #args > 5 then E.arity() end
    local request = request_whole("id", args, 3)
    local log = slide.parse(args[1], args[2])
    return decide_one(keys[1], slide, log, slide.request(log, request), now)
  end

  function C.rl_acquire(keys, args, now)
    if #keys ~= 1 or #args < 3 or #args > 6 then E.arity() end
    local request = request_whole("lease", args, 3)
    leases.precheck(request)
    local ls = leases.parse(args[1], args[2])
    return decide_one(keys[1], leases, ls, leases.request(ls, request), now)
  end

  function C.rl_take(keys, args, now)
    if #keys ~= 1 or #args ~= 3 then E.arity() end
    local bucket = token.parse(args[1], args[2])
    local max = P.whole(args[3], "max", 1, CONTRACT.errors.max)
    local old = S.read(keys[1])
    local outcome, taken = token.take(bucket, old, now, max)
    if outcome.write then S.apply(keys[1], old, outcome.write, now) end
    return V.reply(outcome.verdict, taken)
  end

  -- RL.RESERVE key capacity rate cost max_wait [UPTO max]: the options first, then the bucket, the
  -- cost and the wait, as the module reads them; with UPTO, a sixth field: the number taken.
  function C.rl_reserve(keys, args, now)
    if #keys ~= 1 or #args < 4 then E.arity() end
    local upto
    if #args == 6 then
      if not P.is_option(args[5], "UPTO") then E.syntax() end
      upto = P.whole(args[6], "max", 1, CONTRACT.errors.max)
    elseif #args ~= 4 then
      E.arity()
    end
    local bucket = token.parse(args[1], args[2])
    local cost = P.cost(args[3])
    local max_wait = P.wait_ns(args[4])
    local old = S.read(keys[1])
    local outcome, taken = token.reserve(bucket, old, now, cost, B.max(upto or cost, cost), max_wait)
    if outcome.write then S.apply(keys[1], old, outcome.write, now) end
    return V.reply(outcome.verdict, upto and taken)
  end

  -- RL.REFUND KIND key p1 p2 units, called as rl_refund 1 key KIND p1 p2 units.
  function C.rl_refund(keys, args, now)
    if #args < 1 then E.arity() end
    local k = kind_of_group(args[1])
    if not k or not k.refunds then E.syntax() end
    if #keys ~= 1 or #args ~= 4 then E.arity() end
    local lim = k.parse(args[2], args[3])
    local units = P.cost(args[4])
    local old = S.read(keys[1])
    local write, verdict = k.refund(lim, old, now, units)
    if write then S.apply(keys[1], old, write, now) end
    return V.reply(verdict)
  end

  -- RL.ALL's groups `KIND p1 p2 request...` from args[at], one per key, in the keys' order (also
  -- RL.HOLD's): each limit, with its two parameters as given.
  local function parse_groups(keys, args, at)
    local limits = {}
    for i = 1, #keys do
      if #args - at + 1 < 4 then E.arity() end
      local k = kind_of_group(args[at])
      if not k then E.syntax() end
      local request, len = request_parse(k.form, args, at + 3)
      if k.precheck then k.precheck(request) end
      local lim = k.parse(args[at + 1], args[at + 2])
      limits[i] = { kind = k, limiter = lim, request = k.request(lim, request), p1 = args[at + 1], p2 = args[at + 2] }
      no_duplicate(keys, i)
      at = at + 3 + len
    end
    if #keys == 0 or at <= #args then E.arity() end
    return limits
  end

  -- RL.ALL: groups `KIND p1 p2 request...`, one per key, in the keys' order.
  function C.rl_all(keys, args, now)
    return decide_all(keys, parse_groups(keys, args, 1), now)
  end

  function C.rl_release(keys, args, now)
    if #keys ~= 1 or #args ~= 1 then E.arity() end
    local id = holder(args[1])
    local old = S.read(keys[1])
    local released, write = leases.release(old, now, id)
    if write then S.apply(keys[1], old, write, now) end
    return released and 1 or 0
  end

  function C.rl_renew(keys, args, now)
    if #keys ~= 1 or #args ~= 2 then E.arity() end
    local lease = lease_us(args[1])
    local id = holder(args[2])
    local old = S.read(keys[1])
    local renewed, write = leases.renew(old, now, id, lease)
    if write then S.apply(keys[1], old, write, now) end
    return renewed and 1 or 0
  end

  -- RL.INSPECT key [p1 p2]: the fields as a flat array of names and values (RESP2's form of the
  -- module's map).
  function C.rl_inspect(keys, args, now)
    if #keys ~= 1 or (#args ~= 0 and #args ~= 2 and #args ~= 3) then E.arity() end
    local stored = S.read(keys[1])
    if stored == nil then return false end
    local at = S.expiry(keys[1], now)
    local ttl = -1
    if at then ttl = math.max(at - B.num(B.div(now, MILLION)), 0) end
    local layout = F.layout(stored)
    if layout == "cell" then E.fail("ERR RL.INSPECT of a CL.THROTTLE key needs the module") end
    local k = layout and BY_LAYOUT[layout]
    if not k then E.bad_state() end
    local peek
    if #args == 2 then
      peek = k.peek(k.parse(args[1], args[2]), stored, now)
    elseif #args == 3 then
      E.arity()
    end
    local out = { { ok = "limiter" }, { ok = k.command } }
    for _, f in ipairs(k.describe(stored, now)) do
      out[#out + 1] = { ok = f[1] }
      out[#out + 1] = f[2]
    end
    out[#out + 1] = { ok = "ttl_ms" }
    out[#out + 1] = ttl
    if peek then
      local tail = {
        "remaining", peek.now.remaining,
        "retry_after_ms", peek.one.retry and ceil_ms(peek.one.retry) or -1,
        "reset_after_ms", ceil_ms(peek.now.reset),
      }
      for i = 1, #tail, 2 do
        out[#out + 1] = { ok = tail[i] }
        out[#out + 1] = tail[i + 1]
      end
    end
    return out
  end

  -- The library's version and the hash of its source (a client compares them with its own).
  function C.rl_version() return { CONTRACT.version, CONTRACT.source_hash } end

  ------------------------------------------------------------------------------------------------------------
  -- Holds (core's hold.rs): RL.HOLD and RL.SETTLE, and the ledger that records holds (tag `RLH\x01`, then
  -- each hold's netstrings: id, end ms, ttl ms, flags, the hold's reply, the settle's, the number of held
  -- groups, and each group's key, kind group, two parameters, held and used units and window).
  ------------------------------------------------------------------------------------------------------------
  local HOLD = CONTRACT.hold

  -- Decimal text of a whole number (B): what core's to_string writes.
  local function decimal_text(a)
    if type(a) == "number" then return string.format("%.0f", a) end
    local parts = { string.format("%.0f", a[#a]) }
    for i = #a - 1, 1, -1 do parts[#parts + 1] = string.format("%07d", a[i]) end
    return (a.neg and "-" or "") .. concat(parts)
  end

  local function netstring(out, field) out[#out + 1] = #field .. ":" .. field end

  -- The next netstring of s at `at`, and where the one after it starts.
  local function next_field(s, at)
    local colon = s:find(":", at, true)
    if not colon then E.bad_state() end
    local digits = s:sub(at, colon - 1)
    if digits == "" or #digits > 9 or not digits:match("^%d+$") then E.bad_state() end
    local stop = colon + tonumber(digits)
    if stop > #s then E.bad_state() end
    return s:sub(colon + 1, stop), stop + 1
  end

  local function whole_field(f)
    if not f:match("^%d+$") or #f > 20 then E.bad_state() end
    local n = B.digits((f:gsub("^0+(%d)", "%1")))
    if B.cmp(n, U64MAX) > 0 then E.bad_state() end
    return n
  end

  local function int_field(f)
    if not f:match("^%-?%d+$") or #f > 19 then E.bad_state() end
    return tonumber(f)
  end

  local function reply_field(f)
    if f == "" then return nil end
    local r = {}
    for n in f:gmatch("[^,]+") do r[#r + 1] = int_field(n) end
    if #r ~= 6 then E.bad_state() end
    return r
  end

  local FLAGS = { CO = { "C", false }, CS = { "C", true }, RO = { "R", false }, RS = { "R", true } }

  -- A hold's record (core's Hold::parse): a state error when it is not one.
  local function hold_parse(stored)
    if stored:sub(1, 4) ~= HOLD.tag then E.bad_state() end
    local at, f = 5, nil
    local function take() f, at = next_field(stored, at) return f end
    local h = { id = take(), ends_ms = int_field(take()), ttl_ms = int_field(take()), keep_ms = int_field(take()) }
    local flags = FLAGS[take()]
    if not flags then E.bad_state() end
    h.abandon, h.settled = flags[1], flags[2]
    h.hold_reply = reply_field(take())
    if not h.hold_reply then E.bad_state() end
    h.settle_reply = reply_field(take())
    h.groups = {}
    for i = 1, int_field(take()) do
      h.groups[i] = {
        key = take(), group = take(), p1 = take(), p2 = take(),
        held = whole_field(take()), used = whole_field(take()), mark = int_field(take()),
      }
    end
    if at <= #stored then E.bad_state() end
    return h
  end

  local function ints(r) return concat({ decimal_text(r[1]), decimal_text(r[2]), decimal_text(r[3]), decimal_text(r[4]), decimal_text(r[5]), decimal_text(r[6]) }, ",") end

  local function returns(h) return not h.settled and h.abandon == "R" end

  -- What to store for a hold (core's Hold::write).
  local function hold_write(h)
    local out = { HOLD.tag }
    netstring(out, h.id)
    netstring(out, decimal_text(h.ends_ms))
    netstring(out, decimal_text(h.ttl_ms))
    netstring(out, decimal_text(h.keep_ms))
    netstring(out, h.abandon .. (h.settled and "S" or "O"))
    netstring(out, ints(h.hold_reply))
    netstring(out, h.settle_reply and ints(h.settle_reply) or "")
    netstring(out, decimal_text(#h.groups))
    for _, g in ipairs(h.groups) do
      netstring(out, g.key)
      netstring(out, g.group)
      netstring(out, g.p1)
      netstring(out, g.p2)
      netstring(out, decimal_text(g.held))
      netstring(out, decimal_text(g.used))
      netstring(out, decimal_text(g.mark))
    end
    return { set = concat(out), within = { returns(h) and h.keep_ms or h.ends_ms, 0 } }
  end

  -- The ledger: the RETURN holds still open (core's Ledger), behind a header (how many, the earliest
  -- end, the latest time a return matters); the holds' netstrings read only when needed.
  local function ledger_parse(stored)
    if stored == nil then return { count = 0, earliest = 0, latest = 0, body = "" } end
    if stored:sub(1, 4) ~= HOLD.ledger_tag then E.bad_state() end
    local at, f = 5, nil
    local function take() f, at = next_field(stored, at) return f end
    local l = { count = int_field(take()), earliest = int_field(take()), latest = int_field(take()) }
    l.body = stored:sub(at)
    return l
  end

  local function ledger_entries(l)
    local entries, at, f = {}, 1, nil
    local function take() f, at = next_field(l.body, at) return f end
    while at <= #l.body do
      entries[#entries + 1] = { id = take(), ends_ms = int_field(take()), keep_ms = int_field(take()) }
    end
    if #entries ~= l.count then E.bad_state() end
    return entries
  end

  local function ledger_push(l, e)
    local first = l.count == 0
    l.earliest = first and e.ends_ms or math.min(l.earliest, e.ends_ms)
    l.latest = first and e.keep_ms or math.max(l.latest, e.keep_ms)
    l.count = l.count + 1
    local out = { l.body }
    netstring(out, e.id)
    netstring(out, decimal_text(e.ends_ms))
    netstring(out, decimal_text(e.keep_ms))
    l.body = concat(out)
  end

  local function ledger_of(entries)
    local l = { count = 0, earliest = 0, latest = 0, body = "" }
    for _, e in ipairs(entries) do ledger_push(l, e) end
    return l
  end

  local function ledger_write(l)
    if l.count == 0 then return { delete = true } end
    local out = { HOLD.ledger_tag }
    netstring(out, decimal_text(l.count))
    netstring(out, decimal_text(l.earliest))
    netstring(out, decimal_text(l.latest))
    out[#out + 1] = l.body
    return { set = concat(out), within = { l.latest, 0 } }
  end

  -- A ledger's name carries a hash tag; a hold's key is `<ledger>:<id>` (core's ledger, hold_key).
  local function ledger_name(name)
    local open = name:find("{", 1, true)
    local close = open and name:find("}", open + 1, true)
    if not close or close == open + 1 then E.invalid("ledger", CONTRACT.errors.ledger_untagged) end
  end

  local function hold_key(ledger, id) return ledger .. ":" .. id end

  local function check_keys(ledger, id, keys)
    ledger_name(ledger)
    local own = hold_key(ledger, id)
    for i, key in ipairs(keys) do
      if key == ledger or key == own then E.duplicate() end
      for j = 1, i - 1 do
        if keys[j] == key then E.duplicate() end
      end
    end
  end

  local function held_charge(g, settled)
    if settled then return g.used end
    return B.max(g.held, g.used)
  end

  -- The bytes a write leaves (a small state's writes are whole values).
  local function state_after(stored, write)
    if not write then return stored end
    if write.delete then return nil end
    return write.set or stored
  end

  -- A settle's delta units on a held group: its limiter and the state after it. A sweep skips a key
  -- that no longer holds its kind; a settle refuses it.
  local function adjust(g, now, delta, sweeping)
    local k = kind_of_group(g.group)
    if not k or not k.adjust then E.bad_state() end
    local lim = k.parse(g.p1, g.p2)
    local stored = S.read(g.key)
    if stored ~= nil and F.layout(stored) ~= k.layout then
      if sweeping then return k, lim, stored end
      E.bad_state()
    end
    if B.zero(delta) then return k, lim, stored end
    local write = k.settle(lim, stored, now, g.mark, delta)
    if not write then return k, lim, stored end
    S.apply(g.key, stored, write, now)
    return k, lim, state_after(stored, write)
  end

  local function ms_now(now) return B.num(B.div(B.max(now, ZERO), MILLION)) end

  -- The hold of `key` that has not ended at `now`, or nil.
  local function read_hold(key, now)
    local stored = S.read(key)
    if stored == nil then return nil end
    local h = hold_parse(stored)
    if h.ends_ms <= ms_now(now) then return nil end
    return h
  end

  -- Ends the ledger's RETURN holds whose time is over (core's end_holds): each gives back what it held
  -- beyond its usage, and its key goes. The ledger kept, and whether any ended.
  local function end_holds(ledger, l, now)
    local ms = ms_now(now)
    if l.count == 0 or l.earliest > ms then return l, false end
    local kept, ended = {}, {}
    for _, e in ipairs(ledger_entries(l)) do
      if e.ends_ms <= ms then ended[#ended + 1] = e else kept[#kept + 1] = e end
    end
    for _, e in ipairs(ended) do
      local key = hold_key(ledger, e.id)
      local stored = S.read(key)
      local ok, h = true, nil
      if stored ~= nil then ok, h = pcall(hold_parse, stored) end
      if stored ~= nil and ok and returns(h) then
        for _, g in ipairs(h.groups) do adjust(g, now, B.sub(g.used, held_charge(g, false)), true) end
        S.apply(key, stored, { delete = true }, now)
      end
    end
    E.raised = nil
    return ledger_of(kept), #ended > 0
  end

  local function hold_id(s)
    if #s < 1 or #s > HOLD.max_id_bytes then E.invalid("id", CONTRACT.errors.hold_id) end
    return s
  end

  local function hold_ttl_ms(s)
    local expected = CONTRACT.errors.hold_ttl
    local ok, ns = pcall(P.seconds_ns, s, "ttl", expected)
    if not ok then E.invalid("ttl", expected) end
    local ms = B.num(B.div(ns, MILLION))
    if ms > HOLD.max_ttl_ms then E.invalid("ttl", expected) end
    return ms
  end

  local function word_of(s, words)
    local upper = s:upper()
    for i, w in ipairs(words) do
      if upper == w then return i end
    end
    E.syntax()
  end

  -- RL.HOLD ledger id ttl CHARGE|RETURN key KIND p1 p2 units ..., called as rl_hold with the ledger and
  -- the groups' keys, then id ttl CHARGE|RETURN and the groups' `KIND p1 p2 units`.
  function C.rl_hold(keys, args, now)
    if #keys + #args < 9 or #args < 3 then E.arity() end
    local id = hold_id(args[1])
    local ttl_ms = hold_ttl_ms(args[2])
    local abandon = word_of(args[3], { "CHARGE", "RETURN" }) == 1 and "C" or "R"
    local ledger, group_keys = keys[1], {}
    for i = 2, #keys do group_keys[i - 1] = keys[i] end
    local limits = parse_groups(group_keys, args, 4)
    check_keys(ledger, id, group_keys)
    local old = S.read(ledger)
    local l, ended = end_holds(ledger, ledger_parse(old), now)
    local key = hold_key(ledger, id)
    local existing = read_hold(key, now)
    if ended then
      S.apply(ledger, old, ledger_write(l), now)
      old = S.read(ledger)
    end
    if existing then return existing.hold_reply end
    if abandon == "R" and l.count >= HOLD.max_holds then E.invalid("ledger", CONTRACT.errors.ledger_full) end
    local olds, outcomes, verdicts = {}, {}, {}
    for i, k in ipairs(group_keys) do
      local l = limits[i]
      olds[i] = S.read(k)
      outcomes[i] = l.kind.decide(l.limiter, olds[i], now, l.request)
      verdicts[i] = outcomes[i].verdict
    end
    local limiting = V.most_restrictive(verdicts)
    local verdict = verdicts[limiting]
    local reply = V.reply(verdict, limiting)
    local held, period_ms = {}, 0
    for i, k in ipairs(group_keys) do
      local o, l = outcomes[i], limits[i]
      if o.write and (verdict.allowed or o.repair) then S.apply(k, olds[i], o.write, now) end
      -- A group of 0 units is a peek, as in RL.ALL: decided, not held.
      if verdict.allowed and l.kind.form == "cost" and l.kind.adjust and B.pos(l.request) then
        local state = state_after(olds[i], o.write)
        local period = l.kind.period(l.limiter)
        period_ms = math.max(period_ms, ceil_ms(period))
        held[#held + 1] = {
          key = k, group = l.kind.group, p1 = l.p1, p2 = l.p2,
          held = l.request, used = ZERO, mark = l.kind.hold_mark(state),
        }
      end
    end
    if verdict.allowed then
      local ends_ms = ms_now(now) + ttl_ms
      local keep_ms = ends_ms + period_ms * 2
      local h = {
        id = id, ends_ms = ends_ms, ttl_ms = ttl_ms, keep_ms = keep_ms, abandon = abandon, settled = false,
        hold_reply = reply, settle_reply = nil, groups = held,
      }
      S.apply(key, S.read(key), hold_write(h), now)
      if abandon == "R" then
        ledger_push(l, { id = id, ends_ms = ends_ms, keep_ms = keep_ms })
        S.apply(ledger, old, ledger_write(l), now)
      end
    end
    return reply
  end

  -- RL.SETTLE ledger id FINAL|PARTIAL key units ..., called as rl_settle with the ledger and the keys
  -- settled, then id FINAL|PARTIAL and each key's units.
  function C.rl_settle(keys, args, now)
    if #keys + #args < 5 or (#keys + #args - 3) % 2 ~= 0 or #args ~= #keys + 1 then E.arity() end
    local id = hold_id(args[1])
    local final = word_of(args[2], { "FINAL", "PARTIAL" }) == 1
    local named, named_keys = {}, {}
    for i = 2, #keys do
      named[i - 1] = { key = keys[i], units = P.cost(args[i + 1]) }
      named_keys[i - 1] = keys[i]
    end
    local ledger = keys[1]
    check_keys(ledger, id, named_keys)
    local old = S.read(ledger)
    local l, changed = end_holds(ledger, ledger_parse(old), now)
    local key = hold_key(ledger, id)
    local h = read_hold(key, now)
    if not h or (h.settled and h.settle_reply) then
      if changed then S.apply(ledger, old, ledger_write(l), now) end
      return h and h.settle_reply or false
    end
    local places = {}
    for i, n in ipairs(named) do
      for j, g in ipairs(h.groups) do
        if g.key == n.key then places[i] = j break end
      end
      if not places[i] then E.invalid("key", CONTRACT.errors.not_held) end
    end
    local verdicts = {}
    for i, n in ipairs(named) do
      local g = h.groups[places[i]]
      local was = held_charge(g, false)
      local used, delta
      if final then
        used = n.units
        delta = B.sub(n.units, was)
      else
        used = B.max(g.used, n.units)
        delta = B.sub(B.max(g.held, used), was)
      end
      local k, lim, state = adjust(g, now, delta, false)
      local peek = k.peek(lim, state, now)
      local exceeded = B.lt(g.held, used) and not peek.one.allowed
      verdicts[i] = V.new(not exceeded, peek.now.limit, peek.now.remaining, peek.one.retry, peek.now.reset)
      g.used = used
    end
    local limiting = V.most_restrictive(verdicts)
    local reply = V.reply(verdicts[limiting], limiting)
    if final then
      if returns(h) then
        local kept = {}
        for _, e in ipairs(ledger_entries(l)) do
          if e.id ~= id then kept[#kept + 1] = e end
        end
        l, changed = ledger_of(kept), true
      end
      h.settled, h.settle_reply, h.ends_ms = true, reply, ms_now(now) + h.ttl_ms
    end
    S.apply(key, S.read(key), hold_write(h), now)
    if changed then S.apply(ledger, old, ledger_write(l), now) end
    return reply
  end

  ------------------------------------------------------------------------------------------------------------
  -- The functions the library registers: every command of C.
  ------------------------------------------------------------------------------------------------------------
  -- Every function: the clock read once, errors replied as the module's (a bug as an internal error).
  local FUNCTIONS = {}
  local function run(body, keys, args, sec, usec, ns) return body(keys, args, now_of(sec, usec, ns)) end
  for name, body in pairs(C) do
    FUNCTIONS[name] = function(keys, args, sec, usec, ns)
      E.raised = nil
      E.command = CONTRACT.command_of[name]
      local ok, reply = pcall(run, body, keys, args, sec, usec, ns)
      if ok then return reply end
      if E.raised then return E.raised end
      return { err = "ERR internal error: " .. tostring(reply) }
    end
  end
  return FUNCTIONS
end

local built = nil

-- The functions decided before the library is built where their fast path applies: each group's paths
-- built on the first call of one of them (in an EVALSHA script, on each call of its own function).
local FAST_PATHS = {
  rl_token = token_paths, rl_fixed = window_paths, rl_slidecount = window_paths, rl_slide = window_paths,
}
local fast_built = {}

local function call(name, keys, args)
  if not floor then floor, char, byte = math.floor, string.char, string.byte end
  local sec, usec, ns = clock(args)
  local paths = FAST_PATHS[name]
  if paths then
    local n1, n2, n3 = now_limbs(sec, usec, ns)
    if n1 then
      local fast = fast_built[paths] or paths()
      fast_built[paths] = fast
      local reply = fast[name](keys, args, n1, n2, n3)
      if reply then return reply end
    end
  end
  built = built or build()
  return built[name](keys, args, sec, usec, ns)
end

-- REGISTER: FUNCTION LOAD registers every function. scripts/lua-scripts.sh replaces this line and the
-- rest with `return call("<name>", KEYS, ARGV)`, one EVALSHA script per function.
local NAMES = contract().functions
local READ_ONLY = contract().read_only
for i = 1, #NAMES do
  local name = NAMES[i]
  redis.register_function({
    function_name = name,
    callback = function(keys, args) return call(name, keys, args) end,
    flags = READ_ONLY[name] and { "no-writes" } or {},
  })
end

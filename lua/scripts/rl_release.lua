-- GENERATED from lua/ratelimit.lua and lua/src/evalsha.lua by `cargo run -p contract-gen`: do not edit
if redis.replicate_commands then redis.replicate_commands() end
local function clock(args)
  local t = redis.call("TIME")
  return t[1], t[2], nil
end
local floor, char, byte
floor, char, byte = math.floor, string.char, string.byte
local sec, usec, ns = clock(ARGV)
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
local LIMB, MS = 10000000, 1000000
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
local function ms_of_limbs(l1, l2, l3) return l3 * 100000000 + floor((l2 * LIMB + l1) / MS) end
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
local function build()
  local CONTRACT = contract()
  local floor, char, byte, concat = math.floor, string.char, string.byte, table.concat
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
  local function const(value_text, l) return l end
  local TWO53_LIMBS = const("9007199254740992", { 4740992, 719925, 90, neg = false })
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
  local function approx(a)
    local x = 0
    for i = #a, 1, -1 do x = x * BASE + a[i] end
    return x
  end
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
  function B.int(x) return x end
  function B.digits(s)
    if s == "" then return 0 end
    if #s <= 15 then return tonumber(s) end
    return out(tdigits(s))
  end
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
  function B.min(a, b) return B.cmp(a, b) <= 0 and a or b end
  function B.max(a, b) return B.cmp(a, b) >= 0 and a or b end
  function B.zero(a) return a == 0 end
  function B.add(a, b)
    local ta, tb = type(a), type(b)
    if ta == "number" then
      if tb == "number" then
        local s = a + b
        if s < SMALL and s > -SMALL then return s end
      end
    elseif tb == "number" and not a.neg and #a == 3 and b >= 0 and b < SMALL then
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
  function B.mul(a, b)
    if type(a) == "number" and type(b) == "number" then
      local p = a * b
      if p < SMALL and p > -SMALL then return p end
    end
    return out(tmul(tab(a), tab(b)))
  end
  function B.divmod(a, b)
    if type(a) == "number" and type(b) == "number" and a < SMALL / 2 then
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
  function B.num(a)
    if type(a) == "number" then return a end
    return approx(a) * (a.neg and -1 or 1)
  end
  local ZERO, ONE, THOUSAND, MILLION = 0, 1, 1000, 1000000
  local NS_PER_SEC = 1000000000
  local U64MAX = const("18446744073709551615", { 9551615, 4407370, 184467, neg = false })
  local U128MAX =
    const("340282366920938463463374607431768211455",
      { 8211455, 743176, 4633746, 938463, 8236692, 3402, neg = false })
  local HORIZON_NS = CONTRACT.max_horizon_ns
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
  local E = {}
  function E.fail(text)
    E.raised = { err = text }
    error(text, 0)
  end
  function E.invalid(field, expected) E.fail(string.format(CONTRACT.invalid_reply, field, expected)) end
  function E.arity() E.fail(string.format(CONTRACT.arity_reply, E.command)) end
  function E.syntax() E.fail(CONTRACT.syntax_reply) end
  function E.bad_state() E.fail(CONTRACT.state_reply) end
  local D = {}
  local function pow10(e)
    if e > 38 then return nil end
    return B.digits("1" .. string.rep("0", e))
  end
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
  local P = {}
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
  function P.seconds_ns(s, field, expected)
    local seconds = P.positive_decimal(s, field, expected)
    local ms = D.mul_exact(seconds, THOUSAND)
    local ns = ms and cmul(ms, MILLION)
    if not ns or B.cmp(ns, HORIZON_NS) > 0 then E.invalid(field, expected) end
    return ns
  end
  local WINDOW = CONTRACT.errors.window
  function P.window_ns(s) return P.seconds_ns(s, "window", WINDOW) end
  local F = {}
  local function by_tag(tag_of)
    local by = {}
    for layout, tag in pairs(tag_of) do by[tag] = layout end
    return by
  end
  F.TAGS = by_tag(TAG_OF)
  local V = {}
  function V.new(allowed, limit, remaining, retry, reset)
    return { allowed = allowed, limit = limit, remaining = remaining, retry = retry, reset = reset }
  end
  local function us_ns(us) return B.mul(B.int(us), THOUSAND) end
  local function declared(name, extra)
    local k = {}
    for field, value in pairs(CONTRACT.kinds[name]) do k[field] = value end
    for field, value in pairs(extra) do k[field] = value end
    return k
  end
  local function hex_byte(h) return char(tonumber(h, 16)) end
  local function sha1_bytes(id, n)
    local hex = redis.sha1hex(id)
    return (hex:sub(1, n * 2):gsub("..", hex_byte))
  end
  local EMPTY_ID = CONTRACT.errors.empty_id
  local function us_at(s, at)
    local hi = u32at(s, at + 4)
    if hi >= 2097152 then
      E.fail("ERR the key holds a time beyond 2^53 us, which the Lua library cannot compare exactly")
    end
    return hi * W32 + u32at(s, at)
  end
  local function now_us_of(now)
    if type(now) == "table" and #now == 3 and not now.neg then
      local n1 = now[1]
      return now[3] * 100000000000 + now[2] * 10000 + (n1 - n1 % 1000) / 1000
    end
    return B.num(B.div(B.max(now, ZERO), THOUSAND))
  end
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
    local left = 0
    for _, l in ipairs(kept) do left = math.max(left, l.expires - now_us) end
    if #kept < #held then return true, lease_write(kept, left) end
    return false, nil
  end
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
  local S = {}
  function S.read(key)
    local v = redis.pcall("GET", key)
    if type(v) == "table" and v.err then E.fail(v.err) end
    if v == false then return nil end
    return v
  end
  local function now_ms_of(now)
    if type(now) == "table" and #now == 3 and not now.neg then return ms_of_limbs(now[1], now[2], now[3]) end
    return B.num(B.div(B.max(now, ZERO), MILLION))
  end
  function S.expiry(key, now) return expiry_of(key, now_ms_of(now)) end
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
    local at = expiry_change(key, write.within, old ~= nil, now)
    if at then
      redis.call("SET", key, write.set, "PXAT", at)
    else
      redis.call("SET", key, write.set, "KEEPTTL")
    end
  end
  function S.set_derived(key, old, set, at, at_least, previous, certain, now)
    derived_set(key, old, set, at, at_least, previous, certain, now_ms_of(now))
  end
  local function now_of(sec, usec, ns)
    local now = B.time_ns(B.digits(sec), B.digits(usec))
    if ns then now = B.add(now, B.digits(ns)) end
    return now
  end
  local C = {}
  function C.rl_release(keys, args, now)
    if #keys ~= 1 or #args ~= 1 then E.arity() end
    local id = holder(args[1])
    local old = S.read(keys[1])
    local released, write = leases.release(old, now, id)
    if write then S.apply(keys[1], old, write, now) end
    return released and 1 or 0
  end
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
return build().rl_release(KEYS, ARGV, sec, usec, ns)

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
local function le64_limbs(l1, l2, l3)
  local q3 = floor(l3 / 65536)
  local cur = (l3 - q3 * 65536) * LIMB + l2
  local q2 = floor(cur / 65536)
  cur = (cur - q2 * 65536) * LIMB + l1
  local q1 = floor(cur / 65536)
  return le64_of(cur - q1 * 65536, (q3 * LIMB + q2) * LIMB + q1)
end
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
local function on_grid(ms, step)
  if ms % step ~= 0 then ms = (floor(ms / step) + 1) * step end
  return ms
end
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
  function B.sub(a, b)
    local ta, tb = type(a), type(b)
    if ta == "number" then
      if tb == "number" then
        local s = a - b
        if s < SMALL and s > -SMALL then return s end
      end
    elseif tb == "table" and #a == 3 and #b == 3 and not a.neg and not b.neg then
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
  function B.divceil(a, b)
    local q, r = B.divmod(a, b)
    if r ~= 0 then q = B.add(q, 1) end
    return q
  end
  function B.num(a)
    if type(a) == "number" then return a end
    return approx(a) * (a.neg and -1 or 1)
  end
  local ZERO, ONE, THOUSAND, MILLION = 0, 1, 1000, 1000000
  local NS_PER_SEC = 1000000000
  local TWO53 = TWO53_LIMBS
  local TWO64 = const("18446744073709551616", { 9551616, 4407370, 184467, neg = false })
  local I64MAX = const("9223372036854775807", { 4775807, 7203685, 92233, neg = false })
  local I64MIN = const("-9223372036854775808", { 4775808, 7203685, 92233, neg = true })
  local U64MAX = const("18446744073709551615", { 9551615, 4407370, 184467, neg = false })
  local U128MAX =
    const("340282366920938463463374607431768211455",
      { 8211455, 743176, 4633746, 938463, 8236692, 3402, neg = false })
  local HORIZON_NS = CONTRACT.max_horizon_ns
  local MAX_RATE = CONTRACT.max_rate_per_sec
  function B.sat_i64(a)
    if type(a) == "number" then return a end
    return B.max(I64MIN, B.min(a, I64MAX))
  end
  function B.sat_u64(a) return B.max(ZERO, B.min(a, U64MAX)) end
  B.le64_limbs = le64_limbs
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
  local function ceil_ms(ns)
    if type(ns) == "table" and not ns.neg and #ns == 3 then
      local a1 = ns[1]
      local r = a1 % MILLION
      return ns[3] * 100000000 + ns[2] * 10 + (a1 - r) / MILLION + (r ~= 0 and 1 or 0)
    end
    if not B.pos(ns) then return 0 end
    return B.num(B.divceil(ns, MILLION))
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
  function E.duplicate() E.fail(CONTRACT.duplicate_key_reply) end
  local LUA_MAX = "9007199254740991"
  local function reply_bound(value, field)
    if B.cmp(value, TWO53) >= 0 then
      E.invalid(field, "must be at most " .. LUA_MAX .. " with the Lua library (the module takes more)")
    end
    return B.num(value)
  end
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
  function D.mul_ceil(d, factor)
    local scaled = cmul(d.m, factor)
    if not scaled then return nil end
    if d.e >= 0 then return cmul(scaled, pow10(d.e)) end
    local den = pow10(-d.e)
    if not den then return B.pos(scaled) and ONE or ZERO end
    return B.divceil(scaled, den)
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
  P.cost = remembered(function(s) return P.whole(s, "cost", 0, CONTRACT.errors.cost) end)
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
  local F = {}
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
  function F.layout(s)
    local tagged = #s >= 4 and F.TAGS[s:sub(1, 4)]
    if tagged and tagged_len_fits(tagged, #s) then return tagged end
    return F.UNTAGGED[#s] or (decimal_tat(s) and "cell") or nil
  end
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
  local function more_restrictive(a, b)
    if a.allowed ~= b.allowed then return not a.allowed end
    local c = B.cmp(a.retry or I64MAX, b.retry or I64MAX)
    if c ~= 0 then return c > 0 end
    return a.remaining < b.remaining
  end
  function V.most_restrictive(verdicts)
    local best = 1
    for i = 2, #verdicts do
      if more_restrictive(verdicts[i], verdicts[best]) then best = i end
    end
    return best
  end
  local function us_ns(us) return B.mul(B.int(us), THOUSAND) end
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
  local function field_value(value)
    if value == nil then return false end
    local clamped = B.min(value, I64MAX)
    if B.cmp(clamped, TWO53) >= 0 then
      E.fail("ERR the key holds a value beyond 2^53, which the Lua library cannot reply exactly")
    end
    return B.num(clamped)
  end
  local function windowed(k)
    function k.parse(limit_s, window_s)
      local limit = P.whole(limit_s, "limit", 1, CONTRACT.errors.limit)
      local window = P.window_ns(window_s)
      return { limit = reply_bound(limit, "limit"), limit_b = limit, window = window }
    end
    k.parse = remembered(k.parse, true)
    function k.period(w) return w.window end
    return small_state(k)
  end
  local function hex_byte(h) return char(tonumber(h, 16)) end
  local function sha1_bytes(id, n)
    local hex = redis.sha1hex(id)
    return (hex:sub(1, n * 2):gsub("..", hex_byte))
  end
  local EMPTY_ID = CONTRACT.errors.empty_id
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
    local period = B.sub(tau, slack)
    return {
      limit = reply_bound(capacity, "capacity"),
      capacity = capacity,
      interval = interval,
      tau = tau,
      slack = slack,
      depth = B.add(tau, slack),
      period = period,
      expiry_step_ms = math.max(B.num(B.div(B.div(period, 16), NS_PER_SEC)) * 1000, 1000),
    }
  end
  token.parse = remembered(token.parse, true)
  function token.decode(stored) return F.words("token", stored, { true })[1] end
  local function token_backlog(b, tat, now)
    local stored = tat and B.max(B.sat_i64(B.sub(tat, now)), ZERO) or ZERO
    if B.lt(B.mul(b.depth, 2), stored) then return b.depth, true end
    return stored, false
  end
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
  function token.period(b) return b.period end
  function token.mark() return 0 end
  function token.adjust(b, tat, now, _, delta)
    if B.negative(delta) then return token.give_back(b, tat, now, B.min(B.sub(ZERO, delta), U64MAX)) end
    local backlog = token_backlog(b, tat, now)
    local charged = B.min(B.add(backlog, B.mul(delta, b.interval)), B.mul(b.depth, 2))
    if B.pos(delta) and B.lt(backlog, charged) then return B.sat_i64(B.add(now, charged)) end
    return nil
  end
  function token.reserve(b, stored, now, cost, upto, max_wait)
    local tat = stored and token.decode(stored)
    local available = B.int(token.step(b, tat, now, ZERO).verdict.remaining)
    local taken = B.max(B.min(available, upto), cost)
    local step = token.reserve_step(b, tat, now, taken, max_wait)
    local write = step.next and token.write(b, step.next, tat)
    local outcome = { verdict = step.verdict, write = write, repair = step.repair }
    return outcome, step.verdict.allowed and B.num(taken) or 0
  end
  function token.take(b, stored, now, max) return token.reserve(b, stored, now, ONE, max, ZERO) end
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
  function fixed.mark(s) return ceil_ms(s.ends_at) end
  function fixed.adjust(_, s, now, mark, delta)
    if not s or not B.lt(now, s.ends_at) or ceil_ms(s.ends_at) ~= mark then return nil end
    local count = B.sat_u64(B.add(s.count, delta))
    if B.eq(count, s.count) then return nil end
    return { count = count, ends_at = s.ends_at }
  end
  local counter = windowed(declared("sliding_counter", { layout = "counter" }))
  function counter.decode(stored)
    local w = F.words("counter", stored)
    return { window = w[1], current = w[2], previous = w[3] }
  end
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
  function counter.mark(s) return B.num(B.min(s.window, I64MAX)) end
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
  local reserve = declared("reservation", {
    layout = "token", parse = token.parse, peek = token.peek, describe = token.describe, refund = token.refund,
  })
  function reserve.request(_, r)
    return { cost = P.cost(r.cost), max_wait = P.wait_ns(r.max_wait) }
  end
  function reserve.decide(b, stored, now, r)
    return (token.reserve(b, stored, now, r.cost, r.cost, r.max_wait))
  end
  local KINDS = { token, fixed, counter, slide, leases, reserve }
  local function layout_owners(kinds)
    local by = {}
    for _, k in ipairs(kinds) do by[k.layout] = by[k.layout] or k end
    return by
  end
  local BY_LAYOUT = layout_owners(KINDS)
  local FORM_OPTION = CONTRACT.form_option
  local FORM_LEN = CONTRACT.form_len
  local function kind_of_group(name)
    local upper = name:upper()
    for _, k in ipairs(KINDS) do
      if k.group == upper then return k end
    end
    return nil
  end
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
  local function decide_one(key, k, lim, request, now)
    local old = S.read(key)
    local outcome = k.decide(lim, old, now, request)
    if outcome.write then S.apply(key, old, outcome.write, now) end
    return V.reply(outcome.verdict)
  end
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
  local function count_command(k)
    return function(keys, args, now)
      if #keys ~= 1 or #args < 2 or #args > 3 then E.arity() end
      local cost = args[3] and P.cost(args[3]) or ONE
      return decide_one(keys[1], k, k.parse(args[1], args[2]), cost, now)
    end
  end
  C.rl_fixed = count_command(fixed)
  C.rl_slidecount = count_command(counter)
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
  function C.rl_all(keys, args, now)
    return decide_all(keys, parse_groups(keys, args, 1), now)
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
return build().rl_all(KEYS, ARGV, sec, usec, ns)

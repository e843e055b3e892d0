-- GENERATED from lua/ratelimit.lua and lua/src/evalsha.lua by `cargo run -p contract-gen`: do not edit
if redis.replicate_commands then redis.replicate_commands() end
local function clock(args)
  local t = redis.call("TIME")
  return t[1], t[2], nil
end
local floor, char, byte
floor, char, byte = math.floor, string.char, string.byte
local sec, usec, ns = clock(ARGV)
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
  function B.digits(s)
    if s == "" then return 0 end
    if #s <= 15 then return tonumber(s) end
    return out(tdigits(s))
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
  function B.mul(a, b)
    if type(a) == "number" and type(b) == "number" then
      local p = a * b
      if p < SMALL and p > -SMALL then return p end
    end
    return out(tmul(tab(a), tab(b)))
  end
  local ZERO, ONE, THOUSAND, MILLION = 0, 1, 1000, 1000000
  local NS_PER_SEC = 1000000000
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
  local function now_of(sec, usec, ns)
    local now = B.time_ns(B.digits(sec), B.digits(usec))
    if ns then now = B.add(now, B.digits(ns)) end
    return now
  end
  local C = {}
  function C.rl_version() return { CONTRACT.version, CONTRACT.source_hash } end
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
return build().rl_version(KEYS, ARGV, sec, usec, ns)

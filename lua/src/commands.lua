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

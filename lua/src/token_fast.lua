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

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

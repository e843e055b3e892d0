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

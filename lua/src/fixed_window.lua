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

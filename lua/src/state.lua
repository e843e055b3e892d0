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

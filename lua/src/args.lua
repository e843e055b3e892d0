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

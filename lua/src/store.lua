------------------------------------------------------------------------------------------------------------
-- The store (the module's src/server/store.rs): what a limiter asks to write, with its expiry, in
-- place where the module writes in place. Scripts replicate their writes by effect.
------------------------------------------------------------------------------------------------------------
local S = {}

function S.read(key)
  local v = redis.pcall("GET", key)
  if type(v) == "table" and v.err then E.fail(v.err) end
  if v == false then return nil end
  return v
end

-- The milliseconds (rounded down) of a time in B.
local function now_ms_of(now)
  if type(now) == "table" and #now == 3 and not now.neg then return ms_of_limbs(now[1], now[2], now[3]) end
  return B.num(B.div(B.max(now, ZERO), MILLION))
end

-- The key's absolute expiry (Unix ms), or nil (expiry_of, on this call's clock).
function S.expiry(key, now) return expiry_of(key, now_ms_of(now)) end

-- An expiry within [at_least, at_least + slack] stays; else the latest.
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
  -- An expiry that still fits is kept, whatever the new value's length (the module's store puts
  -- it back after replacing a value of another length).
  local at = expiry_change(key, write.within, old ~= nil, now)
  if at then
    redis.call("SET", key, write.set, "PXAT", at)
  else
    redis.call("SET", key, write.set, "KEEPTTL")
  end
end

-- `set` at `key` with core's Expiry::change of a derived expiry (its point `at`, the state's end
-- `at_least`, the point the replaced state implied, `previous`, and the whole second it is at least,
-- `certain`): set when new, replaced or moved; kept without reading when the replaced state's whole
-- second covers the new one; else kept only when the expiry in place is a whole second within
-- [at_least, at].
function S.set_derived(key, old, set, at, at_least, previous, certain, now)
  derived_set(key, old, set, at, at_least, previous, certain, now_ms_of(now))
end

------------------------------------------------------------------------------------------------------------
-- The clock's reading (`clock`, before the library: its seconds, microseconds and nanoseconds below
-- them, as text) as ns in B.
------------------------------------------------------------------------------------------------------------
local function now_of(sec, usec, ns)
  local now = B.time_ns(B.digits(sec), B.digits(usec))
  if ns then now = B.add(now, B.digits(ns)) end
  return now
end

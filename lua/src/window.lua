------------------------------------------------------------------------------------------------------------
-- The window limiters' parameters (core's window.rs): `limit window`.
------------------------------------------------------------------------------------------------------------
local function windowed(k)
  function k.parse(limit_s, window_s)
    local limit = P.whole(limit_s, "limit", 1, CONTRACT.errors.limit)
    local window = P.window_ns(window_s)
    return { limit = reply_bound(limit, "limit"), limit_b = limit, window = window }
  end
  k.parse = remembered(k.parse, true)
  -- The time its limit is measured over (core's Declare::period_ns).
  function k.period(w) return w.window end
  return small_state(k)
end

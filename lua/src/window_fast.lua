-- RL.FIXED, RL.SLIDECOUNT and RL.SLIDE on one key (core's FixedWindow, SlidingCounter and SlidingLog, the
-- store's write, the reply) in plain numbers, before the library is built, where every quantity lies below 2^52: windows of
-- whole milliseconds up to 999,999 s, limits whose capacity (limit * window in ns) stays below 2^50, a cost
-- of 1 to the limit, states of the tagged layouts near now. Anything else (other text, an error to reply,
-- a peek, a state of another layout or from a clock that ran ahead, huge counts) is nil: the general path
-- decides. tests/lua_equal.rs holds both paths to core and reaches both. Built on
-- first use: an EVALSHA script of another function does not build it.
local function window_paths()
  local FIXED_TAG, COUNTER_TAG = TAG_OF.fixed, TAG_OF.counter
  local CAPACITY_MAX = 1125899906842624 -- 2^50

  -- `limit window` from their text where both are plain and small (a limit of digits; a window of digits
  -- with at most 3 decimals, not zero): the limit, the window in ms and in ns; false otherwise.
  local function window_params(limit_s, window_s)
    if #limit_s > 15 or not limit_s:find("^[1-9]%d*$") then return false end
    local whole, fraction = window_s:match("^(%d+)%.?(%d*)$")
    if not whole or #whole > 6 or #fraction > 3 then return false end
    local ms = tonumber(whole) * 1000 + (fraction ~= "" and tonumber((fraction .. "00"):sub(1, 3)) or 0)
    local limit = tonumber(limit_s)
    if ms == 0 or limit * ms * MS >= CAPACITY_MAX then return false end
    return { limit = limit, window_ms = ms, window = ms * MS }
  end

  local window_params_of = remembered_pairs(window_params)

  -- The window's parameters and the cost of a call `key limit window [cost]`, or nothing.
  local function window_call(keys, args)
    if #keys ~= 1 or #args < 2 or #args > 3 then return nil end
    local p, cost_s = window_params_of(args[1], args[2]), args[3] or "1"
    if not p or #cost_s > 15 or not cost_s:find("^%d+$") then return nil end
    local cost = tonumber(cost_s)
    if cost == 0 or cost > p.limit then return nil end
    return p, cost
  end

  -- The store's write of a state whose expiry is one point (`at`, ms): core keeps an expiry in place only
  -- when it is that point, so the key ends with it either way.
  local function set_at(key, bytes, at) redis.call("SET", key, bytes, "PXAT", at) end

  -- RL.FIXED: the count (u64) and the window's end (i64 ns) behind `RLF\x01`.
  local function fixed_fast(keys, args, n1, n2, n3)
    local p, cost = window_call(keys, args)
    if not p then return nil end
    local key = keys[1]
    local old = redis.pcall("GET", key)
    if type(old) == "table" then return nil end
    local count, open_for, ends, at = 0, p.window, nil, nil
    if old then
      if #old ~= 20 or old:sub(1, 4) ~= FIXED_TAG then return nil end
      local t1, t2, t3 = time_at(old, 13)
      local dh = t3 and t3 - n3
      count = small_at(old, 5)
      if not count or not dh or dh > 80 or dh < -80 then return nil end
      local left = dh * 100000000000000 + (t2 - n2) * LIMB + (t1 - n1)
      -- A window ending beyond now + window (a clock that ran ahead) is repaired by the general path.
      if left > p.window then return nil end
      if left > 0 then
        open_for, ends = left, old:sub(13, 20)
        local r = t1 % MS
        at = t3 * 100000000 + t2 * 10 + (t1 - r) / MS + (r ~= 0 and 1 or 0)
      else
        count = 0
      end
    end
    local total = count + cost
    if total > p.limit then
      -- Denied: nothing written.
      local wait = ms_up(open_for)
      return { 0, p.limit, count < p.limit and p.limit - count or 0, wait, wait }
    end
    if not ends then
      -- A new window: it ends at now + window.
      local x = n2 * LIMB + n1 + p.window
      local x1 = x % LIMB
      local rest = (x - x1) / LIMB
      local x2 = rest % LIMB
      ends, at = le64_limbs(x1, x2, n3 + (rest - x2) / LIMB), n3 * 100000000 + ms_up(x)
    end
    set_at(key, FIXED_TAG .. u64le(total) .. ends, at)
    return { 1, p.limit, p.limit - total, 0, ms_up(open_for) }
  end

  -- RL.SLIDECOUNT: the window's index, the current and the previous window's counts behind `RLC\x01`.
  local function counter_fast(keys, args, n1, n2, n3)
    local p, cost = window_call(keys, args)
    if not p then return nil end
    local key = keys[1]
    local old = redis.pcall("GET", key)
    if type(old) == "table" then return nil end
    local w, limit = p.window, p.limit
    local now_ms = ms_of_limbs(n1, n2, n3)
    local index = idiv(now_ms, p.window_ms)
    local elapsed = (now_ms - index * p.window_ms) * MS + (n2 * LIMB + n1) % MS
    local current, previous = 0, 0
    if old then
      if #old ~= 28 or old:sub(1, 4) ~= COUNTER_TAG then return nil end
      local sw, sc, sp = small_at(old, 5), small_at(old, 13), small_at(old, 21)
      -- A window ahead of now (a clock that ran ahead) is repaired by the general path.
      if not (sw and sc and sp) or sw > index then return nil end
      if sw == index then
        current, previous = sc, sp
      elseif sw + 1 == index then
        previous = sc
      end
    end
    local after = current + cost
    if after * w >= CAPACITY_MAX or previous * w >= CAPACITY_MAX then return nil end
    local capacity, to_end = limit * w, w - elapsed
    local weighted = previous * to_end
    if weighted + after * w <= capacity then
      set_at(key, COUNTER_TAG .. u64le(index) .. u64le(after) .. u64le(previous), (index + 2) * p.window_ms)
      return { 1, limit, idiv(capacity - weighted - after * w, w), 0, ms_up(to_end + w) }
    end
    -- Denied: nothing written; the wait until the cost fits (core's fits_at), then the reply.
    local function fits_at(count, room)
      if count == 0 then return 0 end
      local at = w - idiv(room * w, count)
      return at > 0 and at or 0
    end
    local room, wait = limit - current - cost, nil
    if room >= 0 then
      wait = fits_at(previous, room) - elapsed
      if wait < 0 then wait = 0 end
    else
      wait = to_end + fits_at(current, limit - cost)
    end
    local used = weighted + current * w
    local reset = current > 0 and to_end + w or (previous > 0 and to_end or 0)
    return { 0, limit, used < capacity and idiv(capacity - used, w) or 0, ms_up(wait), ms_up(reset) }
  end
  -- RL.SLIDE without DEDUP on a log of 8-byte slots (times in us, oldest at the pivot of a ring): a new
  -- log, a request recorded in the oldest slot when it is dead or in a log grown by a quarter when every
  -- slot is live, or a denial. A log to shrink or widen, one from a clock that ran ahead, DEDUP: the
  -- general path.
  local LOG_HEADER, FILLER_CEILING, FUTURE_TOLERANCE_US = TAG_OF.log .. "\8\0\0\0", 4294967296, 1000
  local function slot(s, p) return small_at(s, 9 + p * 8) end
  local function slide_fast(keys, args, n1, n2, n3)
    if #keys ~= 1 or #args ~= 3 or args[3] == "" then return nil end
    local p = window_params_of(args[1], args[2])
    if not p or p.limit > MAX_LOG_LIMIT then return nil end
    local key, limit, window_us = keys[1], p.limit, p.window_ms * 1000
    local now_us = n3 * 100000000000 + n2 * 10000 + (n1 - n1 % 1000) / 1000
    local old = redis.pcall("GET", key)
    local function reset_ms(ts)
      local us = ts + window_us - now_us
      if us > window_us then us = window_us end
      return us > 0 and math.ceil(us / 1000) or 0
    end
    if not old then
      -- A new log of one slot; its expiry the latest the store allows, as for any new key.
      set_at(key, LOG_HEADER .. u64le(now_us), math.ceil((now_us + window_us) / 1000) + 999)
      return { 1, limit, limit - 1, 0, reset_ms(now_us) }
    end
    if type(old) == "table" or #old < 16 or (#old - 8) % 8 ~= 0 or old:sub(1, 8) ~= LOG_HEADER then
      return nil
    end
    local n = (#old - 8) / 8
    -- The pivot (the oldest slot): the first of the ring's ascending run.
    local lo, hi = 0, n - 1
    while lo < hi do
      local mid = lo + floor((hi - lo) / 2)
      local a, b = slot(old, mid), slot(old, hi)
      if not a or not b then return nil end
      if a > b then lo = mid + 1 else hi = mid end
    end
    local pivot = lo
    local newest = slot(old, (pivot + n - 1) % n)
    if not newest or newest > now_us + FUTURE_TOLERANCE_US then return nil end
    -- The first live entry (above the window's start and the fillers' ceiling).
    local threshold = now_us - window_us
    if threshold < FILLER_CEILING then threshold = FILLER_CEILING end
    lo, hi = 0, n
    while lo < hi do
      local mid = lo + floor((hi - lo) / 2)
      local t = slot(old, (pivot + mid) % n)
      if not t then return nil end
      if t > threshold then hi = mid else lo = mid + 1 end
    end
    local live = n - lo
    if live >= limit then
      -- Denied: nothing written; the retry is when the oldest of the last `limit` leaves.
      local leaving = slot(old, (pivot + n - limit) % n)
      if not leaving then return nil end
      local wait = leaving + window_us - now_us
      wait = wait > 0 and math.ceil(wait / 1000) or 0
      return { 0, limit, 0, wait > 0 and wait or 1, live > 0 and reset_ms(newest) or 0 }
    end
    if n >= 16 and (live + 1) * 4 <= n then return nil end
    local stamp = newest + 1
    if now_us > stamp then stamp = now_us end
    -- The store keeps an expiry within [at_least, at_least + 999 ms] of the log's end; else the latest.
    local at_least = math.ceil((stamp + window_us) / 1000)
    local current = expiry_of(key, ms_of_limbs(n1, n2, n3))
    local keep = current and current >= at_least and current <= at_least + 999
    if live < n then
      redis.call("SETRANGE", key, 8 + pivot * 8, u64le(stamp))
      if not keep then redis.call("PEXPIREAT", key, at_least + 999) end
    else
      -- Every slot live: the log grows by a quarter (to the limit at most), fillers first, oldest first.
      local slots = n + floor(n / 4)
      if slots < n + 1 then slots = n + 1 end
      local most = limit > n + 1 and limit or n + 1
      if slots > most then slots = most end
      local out = { LOG_HEADER }
      for f = 1, slots - n - 1 do out[f + 1] = u64le(f) end
      out[#out + 1] = old:sub(9 + pivot * 8)
      out[#out + 1] = old:sub(9, 8 + pivot * 8)
      out[#out + 1] = u64le(stamp)
      if keep then
        redis.call("SET", key, table.concat(out), "KEEPTTL")
      else
        set_at(key, table.concat(out), at_least + 999)
      end
    end
    return { 1, limit, limit - live - 1, 0, reset_ms(stamp) }
  end

  return { rl_fixed = fixed_fast, rl_slidecount = counter_fast, rl_slide = slide_fast }
end

------------------------------------------------------------------------------------------------------------
-- The sliding log (core's sliding_log.rs): an 8-byte header and slots of a time in us (and an id hash).
------------------------------------------------------------------------------------------------------------
local slide = declared("sliding_log", { layout = "log" })
local HEADER_LEN, FILLER_CEILING, FUTURE_TOLERANCE_US, MIN_SHRINK_SLOTS = 8, W32, 1000, 16
local NO_HASH = string.rep("\0", 8)
local SLIDE_LIMIT = CONTRACT.errors.slide_limit

local function us_at(s, at)
  local hi = u32at(s, at + 4)
  if hi >= 2097152 then
    E.fail("ERR the key holds a time beyond 2^53 us, which the Lua library cannot compare exactly")
  end
  return hi * W32 + u32at(s, at)
end

function slide.parse(limit_s, window_s)
  local limit = P.whole(limit_s, "limit", 1, SLIDE_LIMIT)
  if B.cmp(limit, CONTRACT.max_log_limit) > 0 then E.invalid("limit", SLIDE_LIMIT) end
  local window_us = B.num(B.div(P.window_ns(window_s), THOUSAND))
  return { limit = B.num(limit), window_us = window_us }
end
slide.parse = remembered(slide.parse, true)

function slide.request(_, r)
  if r.id == nil then E.syntax() end
  if r.id == "" then E.invalid("id", EMPTY_ID) end
  return { hash = sha1_bytes(r.id, 8), dedup = r.dedup }
end

-- A parsed view of a stored log (one table; its methods are the class's, not closures per call).
local Log = {}
Log.__index = Log
function Log:ts(p) return us_at(self.s, HEADER_LEN + p * self.width + 1) end
function Log:hash(p)
  if self.width == 8 then return NO_HASH end
  local at = HEADER_LEN + p * 16 + 9
  return self.s:sub(at, at + 7)
end
function Log:physical(l) return (self.pivot + l) % self.n end
function Log:first_above(threshold)
  local l, h = 0, self.n
  while l < h do
    local mid = l + floor((h - l) / 2)
    if self:ts(self:physical(mid)) > threshold then h = mid else l = mid + 1 end
  end
  return l
end
function Log:newest() return self:ts(self:physical(self.n - 1)) end
function Log:entries_from(first)
  local out = {}
  for l = first, self.n - 1 do
    local p = self:physical(l)
    out[#out + 1] = { self:ts(p), self:hash(p) }
  end
  return out
end

-- The parsed view of `s`, or nil when the bytes are not a log.
local function log_parse(s)
  if #s < HEADER_LEN or s:sub(1, 4) ~= TAG_OF.log or s:sub(6, 8) ~= "\0\0\0" then return nil end
  local width = byte(s, 5)
  if width ~= 8 and width ~= 16 then return nil end
  local slots = #s - HEADER_LEN
  if slots == 0 or slots % width ~= 0 then return nil end
  local log = setmetatable({ s = s, width = width, n = slots / width, pivot = 0 }, Log)
  local lo, hi = 0, log.n - 1
  while lo < hi do
    local mid = lo + floor((hi - lo) / 2)
    if log:ts(mid) > log:ts(hi) then lo = mid + 1 else hi = mid end
  end
  log.pivot = lo
  return log
end

-- A log laid out oldest first: fillers, then the entries.
local function log_build(width, slots, entries)
  local out = { TAG_OF.log, char(width), "\0\0\0" }
  local function push(ts, hash)
    out[#out + 1] = u64le(ts)
    if width == 16 then out[#out + 1] = hash end
  end
  for f = 1, slots - #entries do push(f, NO_HASH) end
  for _, e in ipairs(entries) do push(e[1], e[2]) end
  return concat(out)
end

local function splice(s, offset, bytes) return s:sub(1, offset) .. bytes .. s:sub(offset + #bytes + 1) end

local function decide_on(l, log, now_us, id)
  local window_us = l.window_us
  local threshold = math.max(math.max(now_us - window_us, 0), FILLER_CEILING)
  local function wait(ts) return us_ns(math.max(ts + window_us - now_us, 0)) end
  -- Stamps of requests that share a microsecond run ahead of it: the reset is at most one window.
  local function reset(ts) return us_ns(math.max(math.min(ts + window_us - now_us, window_us), 0)) end
  local function verdict(allowed, live, retry, newest)
    return V.new(allowed, l.limit, math.max(l.limit - live, 0), retry, newest and reset(newest) or ZERO)
  end
  local width_for = id.dedup and 16 or 8
  if not log then
    return {
      verdict = verdict(true, 1, ZERO, now_us),
      change = { set = log_build(width_for, 1, { { now_us, id.hash } }) },
      empty_at = now_us + window_us,
      repair = false,
    }
  end
  local first_live = log:first_above(threshold)
  local live = log.n - first_live
  local newest = live > 0 and log:newest() or nil
  local empty_at = newest and newest + window_us
  if id.dedup then
    for _, e in ipairs(log:entries_from(first_live)) do
      if e[2] == id.hash then
        return { verdict = verdict(true, live, ZERO, newest), empty_at = empty_at, repair = false }
      end
    end
  end
  if live >= l.limit then
    local leaving = log:ts(log:physical(log.n - l.limit))
    local retry = B.max(wait(leaving), ONE)
    return { verdict = verdict(false, live, retry, newest), empty_at = empty_at, repair = false }
  end
  local stamp = math.max(now_us, log:newest() + 1)
  local entry_width = math.max(width_for, log.width)
  local live_after = live + 1
  local shrink = log.n >= MIN_SHRINK_SLOTS and live_after * 4 <= log.n
  local change
  if entry_width ~= log.width or live == log.n or shrink then
    local entries = log:entries_from(first_live)
    entries[#entries + 1] = { stamp, id.hash }
    local slots = log.n
    if live_after > log.n then
      slots = math.min(math.max(log.n + floor(log.n / 4), live_after), math.max(l.limit, live_after))
    elseif shrink then
      slots = math.max(live_after * 2, live_after + 1)
    end
    change = { set = log_build(entry_width, slots, entries) }
  else
    local slot = u64le(stamp)
    if log.width == 16 then slot = slot .. id.hash end
    change = { range = { HEADER_LEN + log.pivot * log.width, slot } }
  end
  local allowed = verdict(true, live + 1, ZERO, stamp)
  return { verdict = allowed, change = change, empty_at = stamp + window_us, repair = false }
end

-- A log with entries from the future (a clock that ran ahead) is repaired first: they move to now.
local function decide_repaired(l, log, now_us, id)
  local previous = 0
  local entries = log:entries_from(0)
  for _, e in ipairs(entries) do
    e[1] = math.max(math.min(e[1], now_us), previous + 1)
    previous = e[1]
  end
  local repaired = log_build(log.width, log.n, entries)
  local parsed = log_parse(repaired)
  if not parsed then return decide_on(l, log, now_us, id) end
  local d = decide_on(l, parsed, now_us, id)
  d.repair = d.change == nil
  if d.change and d.change.range then
    d.change = { set = splice(repaired, d.change.range[1], d.change.range[2]) }
  elseif not d.change then
    d.change = { set = repaired }
  end
  return d
end

local function decide_log(l, log, now_us, id)
  if log and log:newest() > now_us + FUTURE_TOLERANCE_US then return decide_repaired(l, log, now_us, id) end
  return decide_on(l, log, now_us, id)
end

local function now_us_of(now)
  if type(now) == "table" and #now == 3 and not now.neg then
    -- A clock's time as its three limbs: n3 * 10^11 + n2 * 10^4 + floor(n1 / 1000), below 2^53.
    local n1 = now[1]
    return now[3] * 100000000000 + now[2] * 10000 + (n1 - n1 % 1000) / 1000
  end
  return B.num(B.div(B.max(now, ZERO), THOUSAND))
end

local function log_read(stored)
  if stored == nil then return nil end
  return log_parse(stored) or E.bad_state()
end

function slide.decide(l, stored, now, id)
  local d = decide_log(l, log_read(stored), now_us_of(now), id)
  local write
  if d.change and d.empty_at then
    d.change.within = { math.ceil(d.empty_at / 1000), 999 }
    write = d.change
  end
  return { verdict = d.verdict, write = write, repair = d.repair }
end

function slide.peek(l, stored, now)
  local log, now_us = log_read(stored), now_us_of(now)
  local one = decide_log(l, log, now_us, { hash = NO_HASH, dedup = false }).verdict
  local newest = 0
  if log then
    for _, e in ipairs(log:entries_from(0)) do
      if e[1] > FILLER_CEILING then newest = e[1] end
    end
  end
  local remaining = one.allowed and one.remaining + 1 or one.remaining
  local before = V.new(one.allowed, one.limit, remaining, one.retry,
    us_ns(math.max(math.min(newest + l.window_us - now_us, l.window_us), 0)))
  return { now = before, one = one }
end

function slide.describe(stored)
  local log = log_parse(stored) or E.bad_state()
  local recorded, oldest, newest = 0, nil, nil
  for _, e in ipairs(log:entries_from(0)) do
    if e[1] > FILLER_CEILING then
      recorded = recorded + 1
      oldest = oldest or e[1]
      newest = e[1]
    end
  end
  local function ms(us) return us and math.ceil(us / 1000) or false end
  return {
    { "recorded", recorded },
    { "slots", log.n },
    { "dedup", log.width == 16 and 1 or 0 },
    { "oldest_ms", ms(oldest) },
    { "newest_ms", ms(newest) },
  }
end

------------------------------------------------------------------------------------------------------------
-- Leases (core's leases.rs): `RLA\x01`, then 28 bytes per lease: the id's digest (16), its end in us
-- (u64), its weight (u32).
------------------------------------------------------------------------------------------------------------
local leases = declared("concurrency", { layout = "leases" })
local LEASE_LIMIT = CONTRACT.errors.lease_limit
local LEASE = CONTRACT.errors.lease
local ENTRY = 28

local function lease_us(s)
  local ok, ns = pcall(P.window_ns, s)
  E.raised = nil
  if not ok then E.invalid("lease", LEASE) end
  return B.num(B.div(ns, THOUSAND))
end

local function parse_weight(s)
  local w = P.whole(s, "weight", 1, CONTRACT.errors.weight)
  if B.cmp(w, CONTRACT.max_lease_limit) > 0 then E.invalid("weight", CONTRACT.errors.weight) end
  return B.num(w)
end

local function holder(id)
  if id == "" then E.invalid("id", EMPTY_ID) end
  return sha1_bytes(id, 16)
end

function leases.parse(limit_s, lease_s)
  local limit = P.whole(limit_s, "limit", 1, LEASE_LIMIT)
  local lease = lease_us(lease_s)
  if B.cmp(limit, CONTRACT.max_lease_limit) > 0 then E.invalid("limit", LEASE_LIMIT) end
  return { limit = B.num(limit), lease_us = lease }
end
leases.parse = remembered(leases.parse, true)

function leases.precheck(r)
  if r.weight then parse_weight(r.weight) end
end

function leases.request(_, r)
  if r.holder == nil then E.syntax() end
  local weight = r.weight and parse_weight(r.weight) or 1
  return { id = holder(r.holder), weight = weight }
end

local function lease_decode(stored)
  if stored:sub(1, 4) ~= TAG_OF.leases or (#stored - 4) % ENTRY ~= 0 then E.bad_state() end
  local out = {}
  for at = 5, #stored, ENTRY do
    local id, expires, weight = stored:sub(at, at + 15), us_at(stored, at + 16), u32at(stored, at + 24)
    out[#out + 1] = { id = id, expires = expires, weight = weight }
  end
  return out
end

local function lease_live(stored, now_us)
  local out = {}
  if stored == nil then return out end
  for _, l in ipairs(lease_decode(stored)) do
    if l.expires > now_us then out[#out + 1] = l end
  end
  return out
end

-- The live leases, none ending later than one lease from now (a lease further ahead is cut).
local function live_within(stored, now_us, lease)
  local held, cut = lease_live(stored, now_us), false
  local latest = now_us + lease
  for _, l in ipairs(held) do
    if l.expires > latest then
      l.expires = latest
      cut = true
    end
  end
  return held, cut
end

-- Held leases, expiring within max(1 s, 1/16 of a lease of `lease_us`) after the last one's end.
local function lease_write(held, lease_us)
  if #held == 0 then return { delete = true } end
  local out, last = { TAG_OF.leases }, 0
  for _, l in ipairs(held) do
    out[#out + 1] = l.id .. u64le(l.expires) .. u32le(l.weight)
    if l.expires > last then last = l.expires end
  end
  local slack = math.max(floor(floor(lease_us / 16) / 1000), 1000)
  return { set = concat(out), within = { math.ceil(last / 1000), slack } }
end

local function lease_verdict(ls, allowed, held, now_us, retry)
  local weight, last = 0, now_us
  for _, l in ipairs(held) do
    weight = weight + l.weight
    if l.expires > last then last = l.expires end
  end
  return V.new(allowed, ls.limit, math.max(ls.limit - weight, 0), retry, us_ns(last - now_us))
end

local function lease_retry(ls, held, now_us, weight)
  if weight > ls.limit then return nil end
  local ends, load = {}, 0
  for i, l in ipairs(held) do
    ends[i] = { l.expires, l.weight }
    load = load + l.weight
  end
  table.sort(ends, function(a, b) return a[1] < b[1] or (a[1] == b[1] and a[2] < b[2]) end)
  for _, e in ipairs(ends) do
    load = load - e[2]
    if load + weight <= ls.limit then return B.max(us_ns(math.max(e[1] - now_us, 0)), ONE) end
  end
  return ONE
end

function leases.decide(ls, stored, now, request)
  local now_us = now_us_of(now)
  local held, cut = live_within(stored, now_us, ls.lease_us)
  local expires = now_us + ls.lease_us
  local found = nil
  for _, l in ipairs(held) do
    if l.id == request.id then
      found = l
      break
    end
  end
  if found then
    found.expires = expires
  else
    local load = 0
    for _, l in ipairs(held) do load = load + l.weight end
    if load + request.weight > ls.limit then
      local retry = lease_retry(ls, held, now_us, request.weight)
      local verdict = lease_verdict(ls, false, held, now_us, retry)
      return { verdict = verdict, write = cut and lease_write(held, ls.lease_us) or nil, repair = cut }
    end
    held[#held + 1] = { id = request.id, expires = expires, weight = request.weight }
  end
  local verdict = lease_verdict(ls, true, held, now_us, ZERO)
  return { verdict = verdict, write = lease_write(held, ls.lease_us), repair = false }
end

function leases.peek(ls, stored, now)
  local now_us = now_us_of(now)
  local held = live_within(stored, now_us, ls.lease_us)
  local load = 0
  for _, l in ipairs(held) do load = load + l.weight end
  local fits = load < ls.limit
  local retry = fits and ZERO or lease_retry(ls, held, now_us, 1)
  local now_verdict = lease_verdict(ls, true, held, now_us, ZERO)
  return { now = now_verdict, one = lease_verdict(ls, fits, held, now_us, retry) }
end

function leases.describe(stored, now)
  local now_us = now_us_of(now)
  local count, weight, next_end, last_end = 0, 0, nil, nil
  for _, l in ipairs(lease_decode(stored)) do
    if l.expires > now_us then
      count = count + 1
      weight = weight + l.weight
      next_end = next_end and math.min(next_end, l.expires) or l.expires
      last_end = last_end and math.max(last_end, l.expires) or l.expires
    end
  end
  local function ms(us) return us and math.ceil(us / 1000) or false end
  return {
    { "held", count },
    { "weight_held", weight },
    { "next_expiry_ms", ms(next_end) },
    { "last_expiry_ms", ms(last_end) },
  }
end

-- RL.RELEASE: true when `id` held a live lease; the write removes it (the last one deletes the key).
function leases.release(stored, now, id)
  local now_us = now_us_of(now)
  local held = lease_live(stored, now_us)
  if #held <= 1 then
    if held[1] and held[1].id == id then return true, { delete = true } end
    return false, nil
  end
  local kept = {}
  for _, l in ipairs(held) do
    if l.id ~= id then kept[#kept + 1] = l end
  end
  -- The lease length is not known here: the slack is that of the longest time left.
  local left = 0
  for _, l in ipairs(kept) do left = math.max(left, l.expires - now_us) end
  if #kept < #held then return true, lease_write(kept, left) end
  return false, nil
end

-- RL.RENEW: the lease `id` holds ends one lease from now; false when it is gone (never re-acquired).
function leases.renew(stored, now, id, lease)
  local now_us = now_us_of(now)
  local held, cut = live_within(stored, now_us, lease)
  for _, l in ipairs(held) do
    if l.id == id then
      l.expires = now_us + lease
      return true, lease_write(held, lease)
    end
  end
  return false, cut and lease_write(held, lease) or nil
end

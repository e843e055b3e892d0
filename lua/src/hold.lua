------------------------------------------------------------------------------------------------------------
-- Holds (core's hold.rs): RL.HOLD and RL.SETTLE, and the ledger that records holds (tag `RLH\x01`, then
-- each hold's netstrings: id, end ms, ttl ms, flags, the hold's reply, the settle's, the number of held
-- groups, and each group's key, kind group, two parameters, held and used units and window).
------------------------------------------------------------------------------------------------------------
local HOLD = CONTRACT.hold

-- Decimal text of a whole number (B): what core's to_string writes.
local function decimal_text(a)
  if type(a) == "number" then return string.format("%.0f", a) end
  local parts = { string.format("%.0f", a[#a]) }
  for i = #a - 1, 1, -1 do parts[#parts + 1] = string.format("%07d", a[i]) end
  return (a.neg and "-" or "") .. concat(parts)
end

local function netstring(out, field) out[#out + 1] = #field .. ":" .. field end

-- The next netstring of s at `at`, and where the one after it starts.
local function next_field(s, at)
  local colon = s:find(":", at, true)
  if not colon then E.bad_state() end
  local digits = s:sub(at, colon - 1)
  if digits == "" or #digits > 9 or not digits:match("^%d+$") then E.bad_state() end
  local stop = colon + tonumber(digits)
  if stop > #s then E.bad_state() end
  return s:sub(colon + 1, stop), stop + 1
end

local function whole_field(f)
  if not f:match("^%d+$") or #f > 20 then E.bad_state() end
  local n = B.digits((f:gsub("^0+(%d)", "%1")))
  if B.cmp(n, U64MAX) > 0 then E.bad_state() end
  return n
end

local function int_field(f)
  if not f:match("^%-?%d+$") or #f > 19 then E.bad_state() end
  return tonumber(f)
end

local function reply_field(f)
  if f == "" then return nil end
  local r = {}
  for n in f:gmatch("[^,]+") do r[#r + 1] = int_field(n) end
  if #r ~= 6 then E.bad_state() end
  return r
end

local FLAGS = { CO = { "C", false }, CS = { "C", true }, RO = { "R", false }, RS = { "R", true } }

-- A hold's record (core's Hold::parse): a state error when it is not one.
local function hold_parse(stored)
  if stored:sub(1, 4) ~= HOLD.tag then E.bad_state() end
  local at, f = 5, nil
  local function take() f, at = next_field(stored, at) return f end
  local h = { id = take(), ends_ms = int_field(take()), ttl_ms = int_field(take()), keep_ms = int_field(take()) }
  local flags = FLAGS[take()]
  if not flags then E.bad_state() end
  h.abandon, h.settled = flags[1], flags[2]
  h.hold_reply = reply_field(take())
  if not h.hold_reply then E.bad_state() end
  h.settle_reply = reply_field(take())
  h.groups = {}
  for i = 1, int_field(take()) do
    h.groups[i] = {
      key = take(), group = take(), p1 = take(), p2 = take(),
      held = whole_field(take()), used = whole_field(take()), mark = int_field(take()),
    }
  end
  if at <= #stored then E.bad_state() end
  return h
end

local function ints(r) return concat({ decimal_text(r[1]), decimal_text(r[2]), decimal_text(r[3]), decimal_text(r[4]), decimal_text(r[5]), decimal_text(r[6]) }, ",") end

local function returns(h) return not h.settled and h.abandon == "R" end

-- What to store for a hold (core's Hold::write).
local function hold_write(h)
  local out = { HOLD.tag }
  netstring(out, h.id)
  netstring(out, decimal_text(h.ends_ms))
  netstring(out, decimal_text(h.ttl_ms))
  netstring(out, decimal_text(h.keep_ms))
  netstring(out, h.abandon .. (h.settled and "S" or "O"))
  netstring(out, ints(h.hold_reply))
  netstring(out, h.settle_reply and ints(h.settle_reply) or "")
  netstring(out, decimal_text(#h.groups))
  for _, g in ipairs(h.groups) do
    netstring(out, g.key)
    netstring(out, g.group)
    netstring(out, g.p1)
    netstring(out, g.p2)
    netstring(out, decimal_text(g.held))
    netstring(out, decimal_text(g.used))
    netstring(out, decimal_text(g.mark))
  end
  return { set = concat(out), within = { returns(h) and h.keep_ms or h.ends_ms, 0 } }
end

-- The ledger: the RETURN holds still open (core's Ledger), behind a header (how many, the earliest
-- end, the latest time a return matters); the holds' netstrings read only when needed.
local function ledger_parse(stored)
  if stored == nil then return { count = 0, earliest = 0, latest = 0, body = "" } end
  if stored:sub(1, 4) ~= HOLD.ledger_tag then E.bad_state() end
  local at, f = 5, nil
  local function take() f, at = next_field(stored, at) return f end
  local l = { count = int_field(take()), earliest = int_field(take()), latest = int_field(take()) }
  l.body = stored:sub(at)
  return l
end

local function ledger_entries(l)
  local entries, at, f = {}, 1, nil
  local function take() f, at = next_field(l.body, at) return f end
  while at <= #l.body do
    entries[#entries + 1] = { id = take(), ends_ms = int_field(take()), keep_ms = int_field(take()) }
  end
  if #entries ~= l.count then E.bad_state() end
  return entries
end

local function ledger_push(l, e)
  local first = l.count == 0
  l.earliest = first and e.ends_ms or math.min(l.earliest, e.ends_ms)
  l.latest = first and e.keep_ms or math.max(l.latest, e.keep_ms)
  l.count = l.count + 1
  local out = { l.body }
  netstring(out, e.id)
  netstring(out, decimal_text(e.ends_ms))
  netstring(out, decimal_text(e.keep_ms))
  l.body = concat(out)
end

local function ledger_of(entries)
  local l = { count = 0, earliest = 0, latest = 0, body = "" }
  for _, e in ipairs(entries) do ledger_push(l, e) end
  return l
end

local function ledger_write(l)
  if l.count == 0 then return { delete = true } end
  local out = { HOLD.ledger_tag }
  netstring(out, decimal_text(l.count))
  netstring(out, decimal_text(l.earliest))
  netstring(out, decimal_text(l.latest))
  out[#out + 1] = l.body
  return { set = concat(out), within = { l.latest, 0 } }
end

-- A ledger's name carries a hash tag; a hold's key is `<ledger>:<id>` (core's ledger, hold_key).
local function ledger_name(name)
  local open = name:find("{", 1, true)
  local close = open and name:find("}", open + 1, true)
  if not close or close == open + 1 then E.invalid("ledger", CONTRACT.errors.ledger_untagged) end
end

local function hold_key(ledger, id) return ledger .. ":" .. id end

local function check_keys(ledger, id, keys)
  ledger_name(ledger)
  local own = hold_key(ledger, id)
  for i, key in ipairs(keys) do
    if key == ledger or key == own then E.duplicate() end
    for j = 1, i - 1 do
      if keys[j] == key then E.duplicate() end
    end
  end
end

local function held_charge(g, settled)
  if settled then return g.used end
  return B.max(g.held, g.used)
end

-- The bytes a write leaves (a small state's writes are whole values).
local function state_after(stored, write)
  if not write then return stored end
  if write.delete then return nil end
  return write.set or stored
end

-- A settle's delta units on a held group: its limiter and the state after it. A sweep skips a key
-- that no longer holds its kind; a settle refuses it.
local function adjust(g, now, delta, sweeping)
  local k = kind_of_group(g.group)
  if not k or not k.adjust then E.bad_state() end
  local lim = k.parse(g.p1, g.p2)
  local stored = S.read(g.key)
  if stored ~= nil and F.layout(stored) ~= k.layout then
    if sweeping then return k, lim, stored end
    E.bad_state()
  end
  if B.zero(delta) then return k, lim, stored end
  local write = k.settle(lim, stored, now, g.mark, delta)
  if not write then return k, lim, stored end
  S.apply(g.key, stored, write, now)
  return k, lim, state_after(stored, write)
end

local function ms_now(now) return B.num(B.div(B.max(now, ZERO), MILLION)) end

-- The hold of `key` that has not ended at `now`, or nil.
local function read_hold(key, now)
  local stored = S.read(key)
  if stored == nil then return nil end
  local h = hold_parse(stored)
  if h.ends_ms <= ms_now(now) then return nil end
  return h
end

-- Ends the ledger's RETURN holds whose time is over (core's end_holds): each gives back what it held
-- beyond its usage, and its key goes. The ledger kept, and whether any ended.
local function end_holds(ledger, l, now)
  local ms = ms_now(now)
  if l.count == 0 or l.earliest > ms then return l, false end
  local kept, ended = {}, {}
  for _, e in ipairs(ledger_entries(l)) do
    if e.ends_ms <= ms then ended[#ended + 1] = e else kept[#kept + 1] = e end
  end
  for _, e in ipairs(ended) do
    local key = hold_key(ledger, e.id)
    local stored = S.read(key)
    local ok, h = true, nil
    if stored ~= nil then ok, h = pcall(hold_parse, stored) end
    if stored ~= nil and ok and returns(h) then
      for _, g in ipairs(h.groups) do adjust(g, now, B.sub(g.used, held_charge(g, false)), true) end
      S.apply(key, stored, { delete = true }, now)
    end
  end
  E.raised = nil
  return ledger_of(kept), #ended > 0
end

local function hold_id(s)
  if #s < 1 or #s > HOLD.max_id_bytes then E.invalid("id", CONTRACT.errors.hold_id) end
  return s
end

local function hold_ttl_ms(s)
  local expected = CONTRACT.errors.hold_ttl
  local ok, ns = pcall(P.seconds_ns, s, "ttl", expected)
  if not ok then E.invalid("ttl", expected) end
  local ms = B.num(B.div(ns, MILLION))
  if ms > HOLD.max_ttl_ms then E.invalid("ttl", expected) end
  return ms
end

local function word_of(s, words)
  local upper = s:upper()
  for i, w in ipairs(words) do
    if upper == w then return i end
  end
  E.syntax()
end

-- RL.HOLD ledger id ttl CHARGE|RETURN key KIND p1 p2 units ..., called as rl_hold with the ledger and
-- the groups' keys, then id ttl CHARGE|RETURN and the groups' `KIND p1 p2 units`.
function C.rl_hold(keys, args, now)
  if #keys + #args < 9 or #args < 3 then E.arity() end
  local id = hold_id(args[1])
  local ttl_ms = hold_ttl_ms(args[2])
  local abandon = word_of(args[3], { "CHARGE", "RETURN" }) == 1 and "C" or "R"
  local ledger, group_keys = keys[1], {}
  for i = 2, #keys do group_keys[i - 1] = keys[i] end
  local limits = parse_groups(group_keys, args, 4)
  check_keys(ledger, id, group_keys)
  local old = S.read(ledger)
  local l, ended = end_holds(ledger, ledger_parse(old), now)
  local key = hold_key(ledger, id)
  local existing = read_hold(key, now)
  if ended then
    S.apply(ledger, old, ledger_write(l), now)
    old = S.read(ledger)
  end
  if existing then return existing.hold_reply end
  if abandon == "R" and l.count >= HOLD.max_holds then E.invalid("ledger", CONTRACT.errors.ledger_full) end
  local olds, outcomes, verdicts = {}, {}, {}
  for i, k in ipairs(group_keys) do
    local l = limits[i]
    olds[i] = S.read(k)
    outcomes[i] = l.kind.decide(l.limiter, olds[i], now, l.request)
    verdicts[i] = outcomes[i].verdict
  end
  local limiting = V.most_restrictive(verdicts)
  local verdict = verdicts[limiting]
  local reply = V.reply(verdict, limiting)
  local held, period_ms = {}, 0
  for i, k in ipairs(group_keys) do
    local o, l = outcomes[i], limits[i]
    if o.write and (verdict.allowed or o.repair) then S.apply(k, olds[i], o.write, now) end
    -- A group of 0 units is a peek, as in RL.ALL: decided, not held.
    if verdict.allowed and l.kind.form == "cost" and l.kind.adjust and B.pos(l.request) then
      local state = state_after(olds[i], o.write)
      local period = l.kind.period(l.limiter)
      period_ms = math.max(period_ms, ceil_ms(period))
      held[#held + 1] = {
        key = k, group = l.kind.group, p1 = l.p1, p2 = l.p2,
        held = l.request, used = ZERO, mark = l.kind.hold_mark(state),
      }
    end
  end
  if verdict.allowed then
    local ends_ms = ms_now(now) + ttl_ms
    local keep_ms = ends_ms + period_ms * 2
    local h = {
      id = id, ends_ms = ends_ms, ttl_ms = ttl_ms, keep_ms = keep_ms, abandon = abandon, settled = false,
      hold_reply = reply, settle_reply = nil, groups = held,
    }
    S.apply(key, S.read(key), hold_write(h), now)
    if abandon == "R" then
      ledger_push(l, { id = id, ends_ms = ends_ms, keep_ms = keep_ms })
      S.apply(ledger, old, ledger_write(l), now)
    end
  end
  return reply
end

-- RL.SETTLE ledger id FINAL|PARTIAL key units ..., called as rl_settle with the ledger and the keys
-- settled, then id FINAL|PARTIAL and each key's units.
function C.rl_settle(keys, args, now)
  if #keys + #args < 5 or (#keys + #args - 3) % 2 ~= 0 or #args ~= #keys + 1 then E.arity() end
  local id = hold_id(args[1])
  local final = word_of(args[2], { "FINAL", "PARTIAL" }) == 1
  local named, named_keys = {}, {}
  for i = 2, #keys do
    named[i - 1] = { key = keys[i], units = P.cost(args[i + 1]) }
    named_keys[i - 1] = keys[i]
  end
  local ledger = keys[1]
  check_keys(ledger, id, named_keys)
  local old = S.read(ledger)
  local l, changed = end_holds(ledger, ledger_parse(old), now)
  local key = hold_key(ledger, id)
  local h = read_hold(key, now)
  if not h or (h.settled and h.settle_reply) then
    if changed then S.apply(ledger, old, ledger_write(l), now) end
    return h and h.settle_reply or false
  end
  local places = {}
  for i, n in ipairs(named) do
    for j, g in ipairs(h.groups) do
      if g.key == n.key then places[i] = j break end
    end
    if not places[i] then E.invalid("key", CONTRACT.errors.not_held) end
  end
  local verdicts = {}
  for i, n in ipairs(named) do
    local g = h.groups[places[i]]
    local was = held_charge(g, false)
    local used, delta
    if final then
      used = n.units
      delta = B.sub(n.units, was)
    else
      used = B.max(g.used, n.units)
      delta = B.sub(B.max(g.held, used), was)
    end
    local k, lim, state = adjust(g, now, delta, false)
    local peek = k.peek(lim, state, now)
    local exceeded = B.lt(g.held, used) and not peek.one.allowed
    verdicts[i] = V.new(not exceeded, peek.now.limit, peek.now.remaining, peek.one.retry, peek.now.reset)
    g.used = used
  end
  local limiting = V.most_restrictive(verdicts)
  local reply = V.reply(verdicts[limiting], limiting)
  if final then
    if returns(h) then
      local kept = {}
      for _, e in ipairs(ledger_entries(l)) do
        if e.id ~= id then kept[#kept + 1] = e end
      end
      l, changed = ledger_of(kept), true
    end
    h.settled, h.settle_reply, h.ends_ms = true, reply, ms_now(now) + h.ttl_ms
  end
  S.apply(key, S.read(key), hold_write(h), now)
  if changed then S.apply(ledger, old, ledger_write(l), now) end
  return reply
end

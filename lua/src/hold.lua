------------------------------------------------------------------------------------------------------------
-- Holds (core's hold.rs): RL.HOLD and RL.SETTLE, and the ledger that records holds (tag `RLH\x01`, then
-- each hold's netstrings: id, end ms, ttl ms, flags, the hold's reply, the settle's, the number of held
-- groups, and each group's key, kind group, two parameters, held and used units and window).
------------------------------------------------------------------------------------------------------------
local HOLD = CONTRACT.hold

-- Decimal text of a whole number (B): what core's to_string writes.
local function text(a)
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

local function ledger_parse(stored)
  local holds = {}
  if stored == nil then return holds end
  if stored:sub(1, 4) ~= HOLD.tag then E.bad_state() end
  local at, f = 5, nil
  local function take() f, at = next_field(stored, at) return f end
  while at <= #stored do
    local h = { id = take(), ends_ms = int_field(take()), ttl_ms = int_field(take()), groups = {} }
    local flags = FLAGS[take()]
    if not flags then E.bad_state() end
    h.abandon, h.settled = flags[1], flags[2]
    h.hold_reply = reply_field(take())
    if not h.hold_reply then E.bad_state() end
    h.settle_reply = reply_field(take())
    local n = int_field(take())
    for i = 1, n do
      h.groups[i] = {
        key = take(), group = take(), p1 = take(), p2 = take(),
        held = whole_field(take()), used = whole_field(take()), mark = int_field(take()),
      }
    end
    holds[#holds + 1] = h
  end
  return holds
end

local function ints(r) return concat({ text(r[1]), text(r[2]), text(r[3]), text(r[4]), text(r[5]), text(r[6]) }, ",") end

-- What to store: the ledger until its last hold ends, or nothing (core's Ledger::write).
local function ledger_write(holds)
  if #holds == 0 then return { delete = true } end
  local out, latest = { HOLD.tag }, nil
  for _, h in ipairs(holds) do
    latest = (latest == nil or h.ends_ms > latest) and h.ends_ms or latest
    netstring(out, h.id)
    netstring(out, text(h.ends_ms))
    netstring(out, text(h.ttl_ms))
    netstring(out, h.abandon .. (h.settled and "S" or "O"))
    netstring(out, ints(h.hold_reply))
    netstring(out, h.settle_reply and ints(h.settle_reply) or "")
    netstring(out, text(#h.groups))
    for _, g in ipairs(h.groups) do
      netstring(out, g.key)
      netstring(out, g.group)
      netstring(out, g.p1)
      netstring(out, g.p2)
      netstring(out, text(g.held))
      netstring(out, text(g.used))
      netstring(out, text(g.mark))
    end
  end
  return { set = concat(out), within = { latest, 0 } }
end

local function position(holds, id)
  for i, h in ipairs(holds) do
    if h.id == id then return i end
  end
  return nil
end

local function charged(g, settled)
  if settled then return g.used end
  return B.max(g.held, g.used)
end

-- The bytes a write leaves (a small state's writes are whole values).
local function after(stored, write)
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
  return k, lim, after(stored, write)
end

local function now_ms(now) return B.num(B.div(B.max(now, ZERO), MILLION)) end

-- Ends the holds whose time is over; an open RETURN hold gives back what it held beyond its usage.
local function end_holds(holds, now)
  local kept, ended = {}, false
  local ms = now_ms(now)
  for _, h in ipairs(holds) do
    if h.ends_ms <= ms then
      ended = true
      if not h.settled and h.abandon == "R" then
        for _, g in ipairs(h.groups) do adjust(g, now, B.sub(g.used, charged(g, false)), true) end
      end
    else
      kept[#kept + 1] = h
    end
  end
  return kept, ended
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
  local ledger_key, group_keys = keys[1], {}
  for i = 2, #keys do group_keys[i - 1] = keys[i] end
  local limits = groups(group_keys, args, 4)
  for _, key in ipairs(group_keys) do
    if key == ledger_key then E.duplicate() end
  end
  local old = S.read(ledger_key)
  local holds, ended = end_holds(ledger_parse(old), now)
  local at = position(holds, id)
  if at then
    if ended then S.apply(ledger_key, old, ledger_write(holds), now) end
    return holds[at].hold_reply
  end
  if #holds >= HOLD.max_holds then E.invalid("ledger", CONTRACT.errors.ledger_full) end
  local olds, outcomes, verdicts = {}, {}, {}
  for i, key in ipairs(group_keys) do
    local l = limits[i]
    olds[i] = S.read(key)
    outcomes[i] = l.kind.decide(l.limiter, olds[i], now, l.request)
    verdicts[i] = outcomes[i].verdict
  end
  local limiting = V.most_restrictive(verdicts)
  local verdict = verdicts[limiting]
  local reply = V.reply(verdict, limiting)
  local held = {}
  for i, key in ipairs(group_keys) do
    local o, l = outcomes[i], limits[i]
    if o.write and (verdict.allowed or o.repair) then S.apply(key, olds[i], o.write, now) end
    if verdict.allowed and l.kind.form == "cost" and l.kind.adjust then
      local state = after(olds[i], o.write)
      held[#held + 1] = {
        key = key, group = l.kind.group, p1 = l.p1, p2 = l.p2,
        held = l.request, used = ZERO, mark = l.kind.hold_mark(state),
      }
    end
  end
  if verdict.allowed then
    holds[#holds + 1] = {
      id = id, ends_ms = now_ms(now) + ttl_ms, ttl_ms = ttl_ms, abandon = abandon, settled = false,
      hold_reply = reply, settle_reply = nil, groups = held,
    }
  end
  if verdict.allowed or ended then S.apply(ledger_key, old, ledger_write(holds), now) end
  return reply
end

-- RL.SETTLE ledger id FINAL|PARTIAL key units ..., called as rl_settle with the ledger and the keys
-- settled, then id FINAL|PARTIAL and each key's units.
function C.rl_settle(keys, args, now)
  if #keys + #args < 5 or (#keys + #args - 3) % 2 ~= 0 or #args ~= #keys + 1 then E.arity() end
  local id = hold_id(args[1])
  local final = word_of(args[2], { "FINAL", "PARTIAL" }) == 1
  local named = {}
  for i = 2, #keys do named[i - 1] = { key = keys[i], units = P.cost(args[i + 1]) } end
  for i, n in ipairs(named) do
    if n.key == keys[1] then E.duplicate() end
    for j = 1, i - 1 do
      if named[j].key == n.key then E.duplicate() end
    end
  end
  local ledger_key = keys[1]
  local old = S.read(ledger_key)
  local holds, ended = end_holds(ledger_parse(old), now)
  local at = position(holds, id)
  if not at or (holds[at].settled and holds[at].settle_reply) then
    if ended then S.apply(ledger_key, old, ledger_write(holds), now) end
    return at and holds[at].settle_reply or false
  end
  local h = holds[at]
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
    local was = charged(g, false)
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
    h.settled, h.settle_reply, h.ends_ms = true, reply, now_ms(now) + h.ttl_ms
  end
  S.apply(ledger_key, old, ledger_write(holds), now)
  return reply
end

------------------------------------------------------------------------------------------------------------
-- The registry of kinds (core's kind.rs) and the request forms (core's declare.rs).
------------------------------------------------------------------------------------------------------------
-- KINDS, every kind in the registry's order, is written after their parts (`--@ kinds`). A kind listed
-- after another of its layout decides on that one's state (a reservation, on a bucket's): the first
-- owns the layout.
local function layout_owners(kinds)
  local by = {}
  for _, k in ipairs(kinds) do by[k.layout] = by[k.layout] or k end
  return by
end
local BY_LAYOUT = layout_owners(KINDS)
local FORM_OPTION = CONTRACT.form_option
-- How many arguments a form takes without its option (1 unless listed).
local FORM_LEN = CONTRACT.form_len

local function kind_of_group(name)
  local upper = name:upper()
  for _, k in ipairs(KINDS) do
    if k.group == upper then return k end
  end
  return nil
end

-- The request at args[at..]: its fields and how many arguments it took (core's RequestForm::parse).
local function request_parse(form, args, at)
  local option = FORM_OPTION[form]
  local len = FORM_LEN[form] or 1
  if option and P.is_option(args[at + 1], option[1]) then len = 2 + option[2] end
  if at + len - 1 > #args then E.arity() end
  local first = args[at]
  if form == "cost" then return { cost = first }, len end
  if form == "reserve" then return { cost = first, max_wait = args[at + 1] }, len end
  if form == "id" then return { id = first, dedup = len == 2 }, len end
  return { holder = first, weight = len == 3 and args[at + 2] or nil }, len
end

-- A request that ends its command: one unknown option is a syntax error, more the wrong number.
local function request_whole(form, args, at)
  local request, len = request_parse(form, args, at)
  local left = #args - (at - 1) - len
  if left == 0 then return request end
  local option = FORM_OPTION[form]
  if option and len == 1 and left == 1 + option[2] then E.syntax() end
  E.arity()
end

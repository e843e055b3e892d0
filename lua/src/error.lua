------------------------------------------------------------------------------------------------------------
-- Errors: every reply starts with its code, as the module's (src/server/error.rs).
------------------------------------------------------------------------------------------------------------
local E = {}

-- The error a command replies: kept here while it unwinds (Redis may turn a raised table into a string).
function E.fail(text)
  E.raised = { err = text }
  error(text, 0)
end
function E.invalid(field, expected) E.fail(string.format(CONTRACT.invalid_reply, field, expected)) end
-- The wrong number of arguments for the command running (`E.command`, set as each function starts).
function E.arity() E.fail(string.format(CONTRACT.arity_reply, E.command)) end
function E.syntax() E.fail(CONTRACT.syntax_reply) end
function E.bad_state() E.fail(CONTRACT.state_reply) end
function E.duplicate() E.fail(CONTRACT.duplicate_key_reply) end

-- A parameter beyond what a Lua number replies exactly (2^53): refused rather than answered inexactly.
local LUA_MAX = "9007199254740991"
local function reply_bound(value, field)
  if B.cmp(value, TWO53) >= 0 then
    E.invalid(field, "must be at most " .. LUA_MAX .. " with the Lua library (the module takes more)")
  end
  return B.num(value)
end

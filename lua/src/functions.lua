------------------------------------------------------------------------------------------------------------
-- The functions the library registers: every command of C.
------------------------------------------------------------------------------------------------------------
-- Every function: the clock read once, errors replied as the module's (a bug as an internal error).
local FUNCTIONS = {}
local function run(body, keys, args, sec, usec, ns) return body(keys, args, now_of(sec, usec, ns)) end
for name, body in pairs(C) do
  FUNCTIONS[name] = function(keys, args, sec, usec, ns)
    E.raised = nil
    E.command = CONTRACT.command_of[name]
    local ok, reply = pcall(run, body, keys, args, sec, usec, ns)
    if ok then return reply end
    if E.raised then return E.raised end
    return { err = "ERR internal error: " .. tostring(reply) }
  end
end
return FUNCTIONS

-- The checks' harness (tests/lua_unit.rs puts it and one *_test.lua inside the library's build(), where
-- every module's locals are in scope, and runs it with EVAL under the server's own Lua 5.1).
-- check.eq(what, got, want) compares numbers, strings, booleans, nil and B's limb tables by value;
-- check.raises(what, fn, reply) expects fn to fail with that error reply; check.report() is the reply:
-- { checks run, failure, failure, ... }.
local check = { count = 0, failures = {} }

-- A value as text: B's limbs as their decimal digits, numbers without exponents.
function check.text(v)
  if type(v) == "table" and v.neg ~= nil then
    local parts = {}
    for i = #v, 1, -1 do
      parts[#parts + 1] = i == #v and string.format("%d", v[i]) or string.format("%07d", v[i])
    end
    local s = #parts > 0 and table.concat(parts) or "0"
    return (v.neg and "-" or "") .. s
  end
  if type(v) == "number" and v == math.floor(v) and math.abs(v) < 2 ^ 63 then return string.format("%.0f", v) end
  return tostring(v)
end

function check.eq(what, got, want)
  check.count = check.count + 1
  local g, w = check.text(got), check.text(want)
  if g ~= w or type(got) ~= type(want) and not (type(got) == "table" or type(want) == "table") then
    check.failures[#check.failures + 1] = what .. ": got " .. g .. " (" .. type(got) .. "), want " .. w
  end
end

function check.raises(what, fn, reply)
  check.count = check.count + 1
  E.raised = nil
  local ok = pcall(fn)
  local got = E.raised and E.raised.err
  if ok or got ~= reply then
    check.failures[#check.failures + 1] = what .. ": got " .. (ok and "no error" or tostring(got)) .. ", want " .. reply
  end
end

function check.report()
  local out = { check.count }
  for _, f in ipairs(check.failures) do out[#out + 1] = f end
  return out
end

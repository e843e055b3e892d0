-- D, exact decimals (lua/src/decimal.lua), and the argument grammar (lua/src/args.lua).
local function dec(s)
  local d, why = D.parse(s)
  if not d then return why end
  return check.text(d.m) .. "e" .. d.e
end

check.eq("parse whole", dec("10"), "10e0")
check.eq("parse fraction", dec("1.50"), "15e-1")
check.eq("parse leading dot", dec(".5"), "5e-1")
check.eq("parse trailing dot", dec("5."), "5e0")
check.eq("parse exponent", dec("2.5e3"), "25e2")
check.eq("parse zero", dec("0.000"), "0e0")
check.eq("parse plus", dec("+7"), "7e0")
check.eq("parse negative", dec("-1"), "negative")
check.eq("parse letters", dec("1x"), "nan")
check.eq("parse empty", dec(""), "nan")
check.eq("parse 36 digits", dec(string.rep("9", 36)), string.rep("9", 36) .. "e0")
check.eq("parse 37 digits", dec(string.rep("9", 37)), "range")

check.eq("mul_exact 1.5 * 1000", D.mul_exact(D.parse("1.5"), 1000), 1500)
check.eq("mul_exact 0.0005 * 1000 is not whole", D.mul_exact(D.parse("0.0005"), 1000), nil)
check.eq("div_ceil_into 1e9 / 3", D.div_ceil_into(D.parse("3"), 1000000000), 333333334)

-- The grammar: values and the errors the module replies.
check.eq("whole", P.whole("42", "limit", 1, "x"), 42)
check.eq("whole with plus and zeros", P.whole("+0042", "limit", 1, "x"), 42)
check.eq("whole u64 max", P.whole("18446744073709551615", "limit", 1, "x"), B.digits("18446744073709551615"))
check.raises("whole below its minimum", function() P.whole("0", "limit", 1, "must be >= 1") end,
  "ERR invalid limit: must be >= 1")
check.raises("whole of letters", function() P.whole("ten", "limit", 1, "must be >= 1") end,
  "ERR invalid limit: must be >= 1")
check.raises("whole of 21 digits", function() P.whole("100000000000000000000", "limit", 1, "x") end,
  "ERR invalid limit: too large")
check.eq("window in ns", P.window_ns("1.5"), 1500000000)
check.eq("window of a whole millisecond", P.window_ns("0.001"), 1000000)
check.raises("window of a part of a millisecond", function() P.window_ns("0.0005") end,
  "ERR invalid window: " .. CONTRACT.errors.window)
check.raises("window beyond the horizon", function() P.window_ns("3000000001") end,
  "ERR invalid window: " .. CONTRACT.errors.window)
check.eq("cost 0", P.cost("0"), 0)
check.raises("cost negative", function() P.cost("-1") end, "ERR invalid cost: " .. CONTRACT.errors.cost)
check.eq("option words ignore case", P.is_option("upto", "UPTO"), true)

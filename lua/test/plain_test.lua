-- The plain numbers before the library (lua/src/plain.lua) against B's exact arithmetic.
local TWO52 = 4503599627370496

-- idiv: exact floor division below 2^52, where a double quotient rounds the wrong way.
check.eq("idiv small", idiv(7, 2), 3)
check.eq("idiv exact", idiv(10, 5), 2)
check.eq("idiv near 2^52", idiv(TWO52 - 1, 3), B.num(B.div(B.int(TWO52 - 1), B.int(3))))
check.eq("idiv rounding up in doubles", idiv(TWO52 - 1, TWO52 - 2), 1)
check.eq("idiv by a large divisor", idiv(4503599627370495, 4503599627370493), 1)

-- ms_up: milliseconds rounded up, 0 for nothing.
check.eq("ms_up 0", ms_up(0), 0)
check.eq("ms_up 1 ns", ms_up(1), 1)
check.eq("ms_up 1 ms", ms_up(1000000), 1)
check.eq("ms_up 1 ms + 1", ms_up(1000001), 2)
check.eq("ms_up negative", ms_up(-5), 0)

-- le64_limbs and time_at against B.le64 and B.fromle for times of real clocks.
for _, digits in ipairs({ "9007199254740992", "1764790000123456789", "1764790000999999999", "9223372036854775807" }) do
  local b = B.digits(digits)
  local bytes = B.le64(b)
  check.eq("le64_limbs " .. digits, le64_limbs(b[1], b[2], b[3]), bytes)
  local t1, t2, t3 = time_at("x" .. bytes, 2)
  check.eq("time_at " .. digits, { t1, t2, t3, neg = false }, b)
end
check.eq("time_at below 2^53 is nothing", time_at(B.le64(B.int(12345)), 1), nil)
check.eq("time_at of a negative i64 is nothing", time_at(B.le64(B.int(-1)), 1), nil)

-- small_at: u64s below 2^52, nothing above.
check.eq("small_at 0", small_at(u64le(0), 1), 0)
check.eq("small_at 2^52 - 1", small_at(u64le(TWO52 - 1), 1), TWO52 - 1)
check.eq("small_at 2^52", small_at(B.le64(B.int(TWO52)), 1), nil)
check.eq("u32at", u32at(u32le(4294967295), 1), 4294967295)

-- now_limbs: the clock's text as ns in limbs, as B.time_ns has it.
local n1, n2, n3 = now_limbs("1764790000", "123456", nil)
check.eq("now_limbs", { n1, n2, n3, neg = false }, B.time_ns(1764790000, 123456))
n1, n2, n3 = now_limbs("1764790000", "999999", "999")
check.eq("now_limbs with ns", { n1, n2, n3, neg = false }, B.add(B.time_ns(1764790000, 999999), B.int(999)))
check.eq("now_limbs of a clock before 1970-04", now_limbs("1234567", "0", nil), nil)
check.eq("now_limbs of text that is not digits", now_limbs("17647900x0", "0", nil), nil)

-- B, exact integers (lua/src/bigint.lua): plain numbers below 2^53, limbs from there on.
local TWO53 = "9007199254740992"
local U64MAX_TEXT = "18446744073709551615"

check.eq("digits below 2^53 are a number", type(B.digits("9007199254740991")), "number")
check.eq("digits at 2^53 are limbs", type(B.digits(TWO53)), "table")
check.eq("add across 2^53", B.add(9007199254740991, 1), B.digits(TWO53))
check.eq("sub back below 2^53 is a number", B.sub(B.digits(TWO53), 1), 9007199254740991)
check.eq("sub to a negative", B.sub(1, B.digits(TWO53)), -9007199254740991)
check.eq("sub to a negative table", B.sub(0, B.digits(U64MAX_TEXT)).neg, true)
check.eq("mul of two large", B.mul(B.digits("4294967296"), B.digits("4294967295")), B.digits("18446744069414584320"))
check.eq("mul by zero", B.mul(B.digits(U64MAX_TEXT), 0), 0)
check.eq("mul of negatives", B.mul(B.int(-3), B.sub(0, B.digits(TWO53))), B.digits("27021597764222976"))

local q, r = B.divmod(B.digits(U64MAX_TEXT), B.digits("1000000007"))
check.eq("divmod quotient", q, B.digits("18446743944"))
check.eq("divmod remainder", r, 582344007)
check.eq("div by one", B.div(B.digits(U64MAX_TEXT), 1), B.digits(U64MAX_TEXT))
check.eq("divceil rounds up", B.divceil(B.digits("10000000000000000001"), 10), B.digits("1000000000000000001"))
check.eq("divceil exact", B.divceil(B.digits("10000000000000000000"), 10), B.digits("1000000000000000000"))

check.eq("cmp limbs", B.cmp(B.digits(U64MAX_TEXT), B.digits(TWO53)), 1)
check.eq("cmp number with limbs", B.cmp(5, B.digits(TWO53)), -1)
check.eq("lt negative", B.lt(B.sub(0, B.digits(TWO53)), 0), true)
check.eq("min", B.min(B.digits(U64MAX_TEXT), 3), 3)
check.eq("zero", B.zero(B.sub(B.digits(TWO53), B.digits(TWO53))), true)

check.eq("sat_i64 above", B.sat_i64(B.digits(U64MAX_TEXT)), B.digits("9223372036854775807"))
check.eq("sat_u64 above", B.sat_u64(B.mul(B.digits(U64MAX_TEXT), 2)), B.digits(U64MAX_TEXT))
check.eq("num of a small table", B.num(B.sub(B.digits(TWO53), 1)), 9007199254740991)

-- Little-endian bytes, both ways, signed and not.
for _, text in ipairs({ "0", "1", "255", "65536", TWO53, "1764790000123456789", "9223372036854775807" }) do
  check.eq("fromle(le64) " .. text, B.fromle(B.le64(B.digits(text)), 1, false), B.digits(text))
end
check.eq("le64 of 1", B.le64(1), "\1\0\0\0\0\0\0\0")
check.eq("le64 of -1", B.le64(-1), "\255\255\255\255\255\255\255\255")
check.eq("fromle signed -1", B.fromle("\255\255\255\255\255\255\255\255", 1, true), -1)
check.eq("fromle unsigned u64 max", B.fromle("\255\255\255\255\255\255\255\255", 1, false), B.digits(U64MAX_TEXT))

-- The clock's ns, and milliseconds rounded up.
check.eq("time_ns", B.time_ns(1764790000, 123456), B.digits("1764790000123456000"))
check.eq("ceil_ms of limbs", ceil_ms(B.digits("1764790000123456001")), 1764790000124)
check.eq("ceil_ms of a whole ms", ceil_ms(B.digits("1764790000123000000")), 1764790000123)
check.eq("ceil_ms of nothing", ceil_ms(0), 0)

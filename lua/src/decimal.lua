------------------------------------------------------------------------------------------------------------
-- D: exact decimals (mantissa * 10^exponent), as core's decimal.rs, within u128 as there.
------------------------------------------------------------------------------------------------------------
local D = {}

local function pow10(e)
  if e > 38 then return nil end
  return B.digits("1" .. string.rep("0", e))
end

-- a * b when it fits an u128, else nil.
local function cmul(a, b)
  if not a or not b then return nil end
  local r = B.mul(a, b)
  if B.cmp(r, U128MAX) > 0 then return nil end
  return r
end

local function parse_exponent(s)
  local c, digits = s:sub(1, 1), s
  local negative = c == "-"
  if c == "-" or c == "+" then digits = s:sub(2) end
  if digits == "" or not digits:match("^%d+$") then return nil, "nan" end
  local value = 0
  for i = 1, #digits do
    value = value * 10 + byte(digits, i) - 48
    if value > 10000 then return nil, "range" end
  end
  return negative and -value or value
end

-- `[+]digits[.digits][e[+-]digits]`: the decimal, or nil and why ("nan", "negative", "range").
function D.parse(s)
  local c, rest = s:sub(1, 1), s
  local negative = c == "-"
  if c == "-" or c == "+" then rest = s:sub(2) end
  local number, exp_part = rest, nil
  local e = rest:find("[eE]")
  if e then number, exp_part = rest:sub(1, e - 1), rest:sub(e + 1) end
  local int_part, frac_part = number, ""
  local dot = number:find(".", 1, true)
  if dot then int_part, frac_part = number:sub(1, dot - 1), number:sub(dot + 1) end
  if int_part == "" and frac_part == "" then return nil, "nan" end
  if not (int_part .. frac_part):match("^%d*$") then return nil, "nan" end
  local exponent = 0
  if exp_part then
    local why
    exponent, why = parse_exponent(exp_part)
    if not exponent then return nil, why end
  end
  local frac_trimmed = frac_part:gsub("0+$", "")
  local significant = (int_part .. frac_trimmed):gsub("^0+", "")
  if #significant > 36 then return nil, "range" end
  exponent = exponent - #frac_trimmed
  if significant == "" then return { m = ZERO, e = 0 } end
  if negative then return nil, "negative" end
  if math.abs(exponent) > 96 then return nil, "range" end
  return { m = B.digits(significant), e = exponent }
end

-- ceil(numerator / d), or nil when it does not fit an u128; a divisor too precise to scale loses its
-- last digits (rounded down), as in core.
function D.div_ceil_into(d, numerator)
  local m, e = d.m, d.e
  while true do
    if B.zero(m) then return nil end
    if e >= 0 then
      local den = cmul(m, pow10(e))
      if not den then return nil end
      return B.divceil(numerator, den)
    end
    local scaled = cmul(numerator, pow10(-e))
    if scaled then return B.divceil(scaled, m) end
    m = B.div(m, B.int(10))
    e = e + 1
  end
end

-- ceil(d * factor), or nil on overflow.
function D.mul_ceil(d, factor)
  local scaled = cmul(d.m, factor)
  if not scaled then return nil end
  if d.e >= 0 then return cmul(scaled, pow10(d.e)) end
  local den = pow10(-d.e)
  if not den then return B.pos(scaled) and ONE or ZERO end
  return B.divceil(scaled, den)
end

-- d * factor when whole, else nil.
function D.mul_exact(d, factor)
  local scaled = cmul(d.m, factor)
  if not scaled then return nil end
  if d.e >= 0 then return cmul(scaled, pow10(d.e)) end
  local den = pow10(-d.e)
  if not den then return nil end
  local q, r = B.divmod(scaled, den)
  if r ~= 0 then return nil end
  return q
end

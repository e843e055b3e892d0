------------------------------------------------------------------------------------------------------------
-- Verdicts: the five reply fields (core's verdict.rs); retry and reset in ns (B), retry nil = never.
------------------------------------------------------------------------------------------------------------
local V = {}

function V.new(allowed, limit, remaining, retry, reset)
  return { allowed = allowed, limit = limit, remaining = remaining, retry = retry, reset = reset }
end

function V.reply(v, sixth)
  local retry = v.retry and ceil_ms(v.retry) or -1
  local r = { v.allowed and 1 or 0, v.limit, v.remaining, retry, ceil_ms(v.reset) }
  if sixth then r[6] = sixth end
  return r
end

-- Whether a is more restrictive than b: a denial; then the longer wait (a denial's retry, "never"
-- longest; an allowed reservation's wait before its units may be used); then fewer left.
local function more_restrictive(a, b)
  if a.allowed ~= b.allowed then return not a.allowed end
  local c = B.cmp(a.retry or I64MAX, b.retry or I64MAX)
  if c ~= 0 then return c > 0 end
  return a.remaining < b.remaining
end

-- The position of the limiting verdict (ties go to the first).
function V.most_restrictive(verdicts)
  local best = 1
  for i = 2, #verdicts do
    if more_restrictive(verdicts[i], verdicts[best]) then best = i end
  end
  return best
end

local function us_ns(us) return B.mul(B.int(us), THOUSAND) end

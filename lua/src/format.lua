------------------------------------------------------------------------------------------------------------
-- Stored layouts (core's format.rs): tags, 0.1's untagged lengths, redis-cell's decimal TAT.
------------------------------------------------------------------------------------------------------------
local F = {}
-- TAG_OF (each layout's tag, from core's) is in the generated block; TAGS reads it backwards.
local function by_tag(tag_of)
  local by = {}
  for layout, tag in pairs(tag_of) do by[tag] = layout end
  return by
end
F.TAG_OF = TAG_OF
F.TAGS = by_tag(TAG_OF)
F.UNTAGGED = { [8] = "token", [16] = "fixed", [24] = "counter" }
local WORDS = { token = 1, fixed = 2, counter = 3 }

local function tagged_len_fits(layout, len)
  local words = WORDS[layout]
  if words then return len == 4 + words * 8 end
  if layout == "log" then return len >= 16 and len % 8 == 0 end
  return len > 4 and (len - 4) % 28 == 0
end

local function decimal_tat(s)
  local digits = s
  if s:sub(1, 1) == "+" then digits = s:sub(2) end
  if digits == "" or #digits > 20 or not digits:match("^%d+$") then return false end
  return B.cmp(B.digits((digits:gsub("^0+", ""))), I64MAX) <= 0
end

-- The layout of a stored value: by its tag, else 0.1's length, else redis-cell's digits ("cell").
function F.layout(s)
  local tagged = #s >= 4 and F.TAGS[s:sub(1, 4)]
  if tagged and tagged_len_fits(tagged, #s) then return tagged end
  return F.UNTAGGED[#s] or (decimal_tat(s) and "cell") or nil
end

-- The u64 words of a small state (tagged, or 0.1's untagged form); a state error otherwise.
function F.words(layout, s, signed)
  local n, at = WORDS[layout], nil
  if #s == 4 + n * 8 and s:sub(1, 4) == F.TAG_OF[layout] then
    at = 5
  elseif #s == n * 8 and F.layout(s) == layout then
    at = 1
  else
    E.bad_state()
  end
  local out = {}
  for i = 1, n do out[i] = B.fromle(s, at + (i - 1) * 8, signed and signed[i]) end
  return out
end

function F.tagged(layout, words)
  local out = { F.TAG_OF[layout] }
  for i, w in ipairs(words) do out[i + 1] = B.le64(w) end
  return concat(out)
end

------------------------------------------------------------------------------------------------------------
-- Request and lease ids: the first bytes of the id's SHA-1, the same in the module (core's ids).
------------------------------------------------------------------------------------------------------------
local function hex_byte(h) return char(tonumber(h, 16)) end
local function sha1_bytes(id, n)
  local hex = redis.sha1hex(id)
  return (hex:sub(1, n * 2):gsub("..", hex_byte))
end

local EMPTY_ID = CONTRACT.errors.empty_id

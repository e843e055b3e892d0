#!lua name=ratelimit
--[[
redis-ratelimit's limiters as one Lua library, for servers that cannot load the module (managed Redis).

The same commands as the module (RL.TOKEN, RL.SLIDE, RL.SLIDECOUNT, RL.FIXED, RL.TAKE, RL.RESERVE,
RL.REFUND, RL.ALL, RL.ACQUIRE, RL.RELEASE, RL.RENEW, RL.INSPECT) as functions named rl_token, rl_slide, ...:
the keys first, then each key's parameters in the command's order (FCALL rl_token 2 k1 k2 10 5 1 20 1 1).
The same validation, error texts, replies, stored bytes and expiry as the module's (ratelimit-core); the
tests hold every reply and every stored byte equal to core's (tests/lua_equal.rs).

Exact arithmetic: Lua numbers are doubles, exact only below 2^53, and a Unix time in nanoseconds is about
1.8e18. Times in nanoseconds and everything computed from them are exact integers here (`B`, base 10^7
limbs above 2^53, plain numbers below), as are the decimal parameters (`D`). Microsecond times (logs,
leases: about 1.8e15) are plain numbers. What cannot be replied exactly is refused with an error
(docs/lua.md lists it).

Loaded as it is with `FUNCTION LOAD` (Redis 7.0+, Valkey 7.2+); the EVALSHA scripts (Redis 6.2, ACLs
without FUNCTION) are made from it by contract/contract.json's rule: nothing here is written twice.

The source is lua/src/, one file per module of core's (lua/src/sliding_log.lua beside
core/src/sliding_log.rs); this file (lua/src/library.lua) names them in order, each `--@ part` line
standing for lua/src/<part>.lua (`--@ kinds`: every limiter kind's part, named as its module in core,
in the registry's order), and the contract's generator assembles lua/ratelimit.lua from them.
]]

--@ contract

--@ clock

--@ plain

--@ token_fast

--@ window_fast

-- Redis 7.0 loads a library without the standard globals (math, string, table, ...): the library is
-- built on its first call, and kept.
local function build()
  local CONTRACT = contract()
  local floor, char, byte, concat = math.floor, string.char, string.byte, table.concat

  --@ bigint


  --@ error

  --@ decimal

  --@ args

  --@ format

  --@ verdict

  --@ state

  --@ window

  --@ ids

  --@ kinds

  --@ kind

  --@ store

  --@ commands

  --@ hold

  --@ functions
end

local built = nil

-- The functions decided before the library is built where their fast path applies: each group's paths
-- built on the first call of one of them (in an EVALSHA script, on each call of its own function).
local FAST_PATHS = {
  rl_token = token_paths, rl_fixed = window_paths, rl_slidecount = window_paths, rl_slide = window_paths,
}
local fast_built = {}

local function call(name, keys, args)
  if not floor then floor, char, byte = math.floor, string.char, string.byte end
  local sec, usec, ns = clock(args)
  local paths = FAST_PATHS[name]
  if paths then
    local n1, n2, n3 = now_limbs(sec, usec, ns)
    if n1 then
      local fast = fast_built[paths] or paths()
      fast_built[paths] = fast
      local reply = fast[name](keys, args, n1, n2, n3)
      if reply then return reply end
    end
  end
  built = built or build()
  return built[name](keys, args, sec, usec, ns)
end

-- REGISTER: FUNCTION LOAD registers every function. scripts/lua-scripts.sh replaces this line and the
-- rest with `return call("<name>", KEYS, ARGV)`, one EVALSHA script per function.
local NAMES = contract().functions
local READ_ONLY = contract().read_only
for i = 1, #NAMES do
  local name = NAMES[i]
  redis.register_function({
    function_name = name,
    callback = function(keys, args) return call(name, keys, args) end,
    flags = READ_ONLY[name] and { "no-writes" } or {},
  })
end

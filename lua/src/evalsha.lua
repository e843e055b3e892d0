-- The end of each function's EVALSHA script (lua/scripts/<function>.lua), which the contract writer
-- (client/src/evalsha.rs) writes from the library's parts above its registration and these lines, with
-- FUNCTION the function's name; lua/ratelimit.lua does not hold them. At `--@ parts`: the library's parts
-- the lines up to `--@ build` reach, in the library's order, and no other. The lines from `--@ fast` to
-- `--@ end` only for a function the library's FAST_PATHS names, PATHS its group's builder: the call its
-- fast path decides returns before anything else is built. At `--@ build`: the parts only the library's
-- build reaches, and build itself. Of the builders these lines call (build, PATHS) a script holds the
-- statements of the body that FUNCTION reaches, their `return { ... }` with FUNCTION's entry only;
-- `--@ only C.FUNCTION`: of C (the commands, whose every field build's result wraps), the script
-- reaches C.FUNCTION only, since it calls nothing else.
-- Redis 6.2 replicates a script by effect only when asked (Redis 7 always does).
if redis.replicate_commands then redis.replicate_commands() end
--@ parts
floor, char, byte = math.floor, string.char, string.byte
local sec, usec, ns = clock(ARGV)
--@ fast
local n1, n2, n3 = now_limbs(sec, usec, ns)
if n1 then
  local reply = PATHS().FUNCTION(KEYS, ARGV, n1, n2, n3)
  if reply then return reply end
end
--@ end
--@ only C.FUNCTION
--@ build
return build().FUNCTION(KEYS, ARGV, sec, usec, ns)

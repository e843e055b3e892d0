// The files of rate-limiter-flexible's suite run against RateLimiterModule (FILES), and their tests
// not run (EXCLUDED), each with why. `name`: a part of the test's full title (describe blocks and
// test, as mocha joins them); it excludes the test in both files.
export const FILES = ["RateLimiterRedis.ioredis.test.js", "RateLimiterRedis.redis.test.js"];
const GET = "reads the key with GET and expects its count as a string (RateLimiterRedis' storage): RL.FIXED keeps its window in its own format";
const POLICY = "expects Redis' error (an Error) when the client is disconnected: the Limiter's failure policy answers instead (closed here: a rejection with a RateLimiterRes)";
export const EXCLUDED = [
  { name: "fixed window consume 1 point", why: GET },
  { name: "when resetting maximum points consume 2 points", why: GET },
  { name: "without decimal values does not throw an error", why: GET },
  { name: "fixed window makes penalty", why: GET },
  { name: "fixed window reward points", why: GET },
  { name: "multiple times does not fail", why: GET },
  { name: "thows error", why: "expects rate-limiter-flexible's own message for decimal points: RateLimiterModule rejects them too, with a UsageError in its own words" },
  { name: "string with decimal values throws error", why: "as above" },
  { name: "if points is zero", why: "points: 0 (every consume rejected): RateLimiterModule refuses points below 1" },
  { name: "when customIncrTtlLuaScript is provided", why: "its own Lua script in place of RateLimiterRedis': not offered (the module's command decides)" },
  { name: "execute evenly over duration", why: "execEvenly (delaying resolutions): not offered (README, Adapters)" },
  { name: "in memory", why: "inMemoryBlockOnConsumed / inMemoryBlockDuration: not offered (README, Adapters); blocks live in Redis" },
  { name: "inMemory", why: "as above" },
  { name: "throws error on RedisClient error", why: POLICY },
  { name: "attempt to invoke redis if rejectIfRedisNotReady is not set", why: POLICY },
  { name: "get throws error with disconnected", why: "rejectIfRedisNotReady, on a stand-in object for a client ({ status: 'closed' }): not offered; a Limiter needs a real client" },
  { name: "insuranceLimiter", why: "insuranceLimiter: not offered (the failure policy stands for it: README, Adapters)" },
  { name: "options.customDuration", why: "consume's third argument ({ customDuration }): not offered (one window per limiter)" },
  { name: "reject with error, if internal block by blockDuration failed", why: "stubs RateLimiterRedis' internal _block method with sinon" },
  { name: "does not expire key if duration set to 0", why: "duration: 0 (keys that never expire): refused by RateLimiterModule (RL.FIXED needs a window)" },
];

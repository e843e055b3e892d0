// The tests of @fastify/rate-limit's suite (test/) not run against fastifyRateLimitStore, each with
// why: `file` (its path's end) and `name` (the test's name, exactly). Each is registered skipped with
// its reason (skip-preload.cjs); a name in both describe blocks of a file is excluded in both.
const TICK = "moves node:test's fake clock (mock.timers) past the window and expects a new one: Redis' clock does not move with it";
const STILL = "expects a ttl of exactly the window (1000) with the fake clock standing still: Redis' clock moves between the requests (995-999), then it moves the fake clock past the window, as above";
const BAN = "`ban` counts requests past the limit (current - max > ban): a denied request takes nothing in RL.FIXED, so the count stays at max + 1 and a ban above 0 never comes";
const CONT = "`continueExceeding: true` (the window restarts on each request past the limit): fastifyRateLimitStore refuses it, RL.FIXED's window does not move";
const EXP = "`exponentialBackoff: true` (the window doubles on each request past the limit): fastifyRateLimitStore refuses it, as above";
const ERRS = "expects Redis' error to reach the plugin (skipOnError: remaining = max; else a 500): the Limiter's failure policy decides instead (closed: a 429; open: the request counted as the first), so the store never returns an error from incr";
export const EXCLUDED = [
  { file: "create-rate-limit.test.js", name: "With global rate limit options", why: STILL },
  { file: "create-rate-limit.test.js", name: "With custom rate limit options", why: STILL },
  { file: "create-rate-limit.test.js", name: "With { increment: false } it reads the state without consuming it", why: STILL },
  { file: "create-rate-limit.test.js", name: "With { increment: false } and continueExceeding the peek mirrors the active window", why: CONT },
  { file: "create-rate-limit.test.js", name: "With { increment: false } and exponentialBackoff the peek reports the base window without escalating it", why: EXP },
  { file: "exponential-backoff.test.js", name: "Exponential Backoff", why: EXP },
  { file: "exponential-backoff.test.js", name: "Global Exponential Backoff", why: EXP },
  { file: "exponential-backoff.test.js", name: "MAx safe Exponential Backoff", why: EXP },
  { file: "issue-207.test.js", name: "issue #207 - when continueExceeding is true and the store is local then it should reset the rate-limit", why: CONT },
  { file: "issue-215.test.js", name: "issue #215 - when using local store, 2nd user should not be rate limited when the time window is passed for the 1st user", why: TICK },
  { file: "issue-284.test.js", name: "issue #284 - don't set the reply code automatically", why: CONT },
  { file: "global-rate-limit.test.js", name: "Basic", why: TICK },
  { file: "global-rate-limit.test.js", name: "With text timeWindow", why: TICK },
  { file: "global-rate-limit.test.js", name: "With function timeWindow", why: TICK },
  { file: "global-rate-limit.test.js", name: "With keyGenerator", why: TICK },
  { file: "global-rate-limit.test.js", name: "hide rate limit headers", why: TICK },
  { file: "global-rate-limit.test.js", name: "hide rate limit headers on exceeding", why: TICK },
  { file: "global-rate-limit.test.js", name: "hide rate limit headers at all times", why: TICK },
  { file: "global-rate-limit.test.js", name: "With ban", why: BAN },
  { file: "global-rate-limit.test.js", name: "When continue exceeding is on (Local)", why: CONT },
  { file: "route-rate-limit.test.js", name: "Basic", why: TICK },
  { file: "route-rate-limit.test.js", name: "With text timeWindow", why: TICK },
  { file: "route-rate-limit.test.js", name: "With function timeWindow", why: TICK },
  { file: "route-rate-limit.test.js", name: "With keyGenerator", why: TICK },
  { file: "route-rate-limit.test.js", name: "hide rate limit headers", why: TICK },
  { file: "route-rate-limit.test.js", name: "hide rate limit headers on exceeding", why: TICK },
  { file: "route-rate-limit.test.js", name: "hide rate limit headers at all times", why: TICK },
  { file: "route-rate-limit.test.js", name: "With ban", why: BAN },
  { file: "route-rate-limit.test.js", name: "When continue exceeding is on (Local)", why: CONT },
  { file: "global-rate-limit.test.js", name: "When passing NaN to the timeWindow property then the timeWindow should be the default value - 60 seconds", why: TICK },
  { file: "global-rate-limit.test.js", name: "With onBanReach option", why: BAN },
  { file: "global-rate-limit.test.js", name: "With enabled IETF Draft Spec", why: TICK },
  { file: "global-rate-limit.test.js", name: "hide IETF draft spec headers", why: TICK },
  { file: "global-rate-limit.test.js", name: "afterReset and Rate Limit remain the same when enableDraftSpec is enabled", why: TICK },
  { file: "global-rate-limit.test.js", name: "ban directly", why: `${BAN}; it also moves the fake clock past the window` },
  { file: "route-rate-limit.test.js", name: "With NaN in subroute config", why: TICK },
  { file: "redis-rate-limit.test.js", name: "With redis store (ban)", why: BAN },
  { file: "redis-rate-limit.test.js", name: "Skip on redis error", why: ERRS },
  { file: "redis-rate-limit.test.js", name: "Throw on redis error", why: ERRS },
  { file: "redis-rate-limit.test.js", name: "When continue exceeding is on (Redis)", why: CONT },
  { file: "redis-rate-limit.test.js", name: "Redis with continueExceeding should not always return the timeWindow as ttl", why: CONT },
  { file: "redis-rate-limit.test.js", name: "With redis store and exponential backoff", why: EXP },
  { file: "redis-rate-limit.test.js", name: "When continue exceeding is off under route (Redis)", why: `${CONT} (the plugin's options set it; the route turns it off)` },
  { file: "redis-rate-limit.test.js", name: "Route-specific exponential backoff with redis store", why: EXP },
];

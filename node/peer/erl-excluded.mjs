// The tests of express-rate-limit's suite (test/library) not run against ExpressRateLimitStore, each
// with why. `name`: a part of the test's full name, as jest prints it. Whole files left out: see
// EXCLUDED_FILES in erl-suite.mjs.
export const EXCLUDED = [
  { name: "clears the timer when `shutdown` is called", why: "MemoryStore's own interval timer (it spies on clearInterval); the store in Redis has no timer" },
  { name: "can run in electron where setInterval does not return a Timeout object", why: "MemoryStore's own interval timer" },
  { name: "should automatically clear previously set intervals", why: "MemoryStore's own interval timer" },
  { name: "should move clients from previous to current", why: "MemoryStore's internals (its previous and current maps)" },
  { name: "does not allow a Client object to be assigned to two keys", why: "MemoryStore's internals (its Client objects)" },
  { name: "resetKey should remove the key from storage", why: "uses the store without calling init(): MemoryStore counts without a window, this store needs the window and limit init() gives (the middleware always calls it)" },
  { name: "should allow max to be a function", why: "a limit computed per request: ExpressRateLimitStore refuses it (one RL.FIXED window keeps one limit; README, Adapters)" },
  { name: "should calculate the remaining hits", why: "its limit is a function (async () => 2): refused, as above" },
  { name: "should (eventually) accept new connections from a blocked IP", why: "advances jest's fake clock past the window: Redis' clock does not move with it" },
  { name: "should work repeatedly", why: "advances jest's fake clock past the window, as above" },
  { name: "resets the count for all the keys in the store when the timeout is reached", why: "advances jest's fake clock past the window: Redis' clock does not move with it" },
  { name: "should not decrement hits when request finishes after `resetTime` with `skipSuccessfulRequests`", why: "runs on its own MockStore, with jest's fake setTimeout, which this run keeps real (ioredis' I/O needs it)" },
];
export const EXCLUDED_FILES = [
  { name: "types-test", why: "checks express-rate-limit's published .d.ts files, built by its own build: no store" },
  { name: "logger-test", why: "its console logger: no store" },
  { name: "ip-key-generator-test", why: "its key generator: no store" },
];

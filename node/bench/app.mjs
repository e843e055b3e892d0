// One Express app of the Node.js bench (node/bench/run.mjs starts it): `node app.mjs <variant> <redis port>`.
// Every variant limits each caller (here one, 127.0.0.1) by a fixed window far above the load, so every
// request is allowed and pays one call to Redis; the handler answers "ok".
//   module     this package's rateLimit middleware on RL.FIXED (the module)
//   library    the same on the Lua library (FCALL rl_fixed)
//   erl-redis  express-rate-limit 7 + rate-limit-redis 4 (its Lua script through EVALSHA)
//   flexible   rate-limiter-flexible's RateLimiterRedis (its Lua script), in the middleware its README shows
//   none       no limiter: the ceiling of this app on this machine
import express from "express";
import { Redis } from "ioredis";

const [variant, port] = [process.argv[2], Number(process.argv[3])];
const redis = new Redis(port, "127.0.0.1");
const app = express();
app.disable("x-powered-by");
const LIMIT = 1_000_000_000;
const WINDOW_MS = 60_000;

if (variant === "module" || variant === "library") {
  const { Limiter, FixedWindow, rateLimit } = await import("../dist/esm/index.js");
  // describe() names the engine as the contract's state: `fcall` for the library through FCALL.
  const engine = variant === "module" ? "module" : "fcall";
  const limiter = new Limiter(redis, { failure: "open", engine });
  const v = await limiter.verify();
  if (v.engine !== engine) throw new Error(`engine ${v.engine}: ${v.why}`);
  app.use(rateLimit({ limiter, routes: [{ name: "api", prefix: "/", policy: new FixedWindow({ limit: LIMIT, windowMs: WINDOW_MS }) }] }));
} else if (variant === "erl-redis") {
  const { rateLimit } = await import("express-rate-limit");
  const { RedisStore } = await import("rate-limit-redis");
  app.use(rateLimit({
    windowMs: WINDOW_MS, limit: LIMIT, standardHeaders: "draft-7", legacyHeaders: false,
    store: new RedisStore({ sendCommand: (command, ...args) => redis.call(command, ...args) }),
  }));
} else if (variant === "flexible") {
  const { RateLimiterRedis } = await import("rate-limiter-flexible");
  const rl = new RateLimiterRedis({ storeClient: redis, points: LIMIT, duration: WINDOW_MS / 1000, keyPrefix: "rlflx" });
  app.use((req, res, next) => {
    rl.consume(req.ip).then(() => next(), () => res.status(429).send("Too Many Requests"));
  });
} else if (variant !== "none") {
  throw new Error(`unknown variant ${variant}`);
}
app.get("/", (_req, res) => res.send("ok"));
const server = app.listen(0, "127.0.0.1", () => {
  process.send?.({ port: server.address().port });
});
process.on("message", (m) => {
  if (m === "stop") server.close(() => (redis.disconnect(), process.exit(0)));
});

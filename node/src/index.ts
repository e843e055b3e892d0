export { Limiter, Permit, type LimiterOptions, type FailurePolicy, type OutageEvent, type Logger } from "./limiter.js";
export { Hold, SETTLE_ATTEMPTS, type HoldLimit, type HoldOptions, type Usage } from "./hold.js";
export { Policy, TokenBucket, FixedWindow, SlidingCounter, SlidingLog, Concurrency, type Whole, type BatchOptions, type Batching } from "./policy.js";
export { LocalLimiter, MAX_KEYS } from "./fallback.js";
export { Decision, type Taken, type Inspection } from "./decision.js";
export { Breaker, type BreakerOptions } from "./breaker.js";
export { Engine, EngineGaveUp, Call, RedisErrorReply, script, scriptSource, moduleCommand, type EngineName, type Send } from "./engine.js";
export { adapt, ioredisAdapter, nodeRedisAdapter, type Adapter } from "./adapters.js";
export { slotOf } from "./slot.js";
export * as commands from "./command.js";
export type { Limit } from "./command.js";
export { CONTRACT, LIBRARY } from "./contract.js";
export {
  PolicyError, UsageError, CallError, DeadlineError, UnreachableError, BreakerOpenError, ServerError,
  ConfigurationError, ConflictError, ReplyError,
} from "./errors.js";
export { classOfReply, classOfTransport, type ReplyClass, type ClassName, type Transport } from "./replyClass.js";
export { rateLimit } from "./express.js";
export { rateLimitPlugin } from "./fastify.js";
export { RateLimitCore, type RateLimitOptions, type Route, type ConcurrencyRoute, type PolicySource } from "./http/middleware.js";
export { Caller, TrustedProxies } from "./http/index.js";
export * as http from "./http/index.js";
export { ExpressRateLimitStore, fastifyRateLimitStore } from "./stores.js";
export { RateLimiterModule, RateLimiterRes, type RateLimiterModuleOptions } from "./flexible.js";

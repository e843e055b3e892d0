//! ratelimit-core: the pure rate-limit algorithms of redis-ratelimit. No Redis, no clock, no I/O:
//! each takes its parameters, the previous state and the current time, and returns a verdict and the
//! next state. The Redis module is one user; a client-side fallback limiter can be another.

pub mod decimal;
pub mod fixed_window;
pub mod sliding_counter;
pub mod sliding_log;
pub mod time;
pub mod token_bucket;
pub mod verdict;

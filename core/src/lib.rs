//! ratelimit-core: the pure rate-limit algorithms of redis-ratelimit. No Redis, no clock, no I/O:
//! each takes its parameters, the previous state and the current time, and returns a verdict and the
//! next state. The Redis module is one user; the client's local fallback is another.
//!
//! Each limiter (`token_bucket`, `fixed_window`, `sliding_counter`, `sliding_log`) implements
//! [`limiter::Limiter`] over the bytes it stores (`format` tags them); `combine` decides several limits
//! of any kinds as one request; `limits` holds the bounds that the module and the client share.

pub mod args;
pub mod combine;
pub mod decimal;
pub mod declare;
pub mod dialect;
pub mod error;
pub mod fixed_window;
pub mod format;
pub mod kind;
pub mod leases;
pub mod limiter;
pub mod limits;
pub mod sliding_counter;
pub mod sliding_log;
pub mod state;
pub mod time;
pub mod token_bucket;
pub mod verdict;
pub mod window;

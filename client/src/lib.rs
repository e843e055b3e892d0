//! # redis-ratelimit-client
//!
//! The application side of redis-ratelimit (the `ratelimit` Redis module): a limiter whose
//! decisions are made atomically inside Redis by the `ratelimit` module (`RL.*` commands), with a
//! deadline on every call, an explicit failure policy for the day Redis is unavailable, a circuit
//! breaker, and HTTP middleware (a tower `Layer`, usable from axum and hyper) that tells callers where
//! they stand.
//!
//! ```no_run
//! use redis_ratelimit_client::{FailurePolicy, Limiter, Policy};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let limiter = Limiter::builder(FailurePolicy::Open).connect("redis://127.0.0.1:6379/")?;
//! // Bursts of 10, 5 per second on average.
//! let api = Policy::token_bucket(10, 5.0)?;
//! let decision = limiter.check("rl:api:user:ada", &api, 1).await;
//! if !decision.allowed {
//!     println!("retry in {:?}", decision.retry_after);
//! }
//! # Ok(())
//! # }
//! ```
//!
//! Invalid policies are refused when they are built, naming the field:
//!
//! ```
//! use redis_ratelimit_client::Policy;
//! let err = Policy::token_bucket(0, 5.0).unwrap_err();
//! assert_eq!(err.to_string(), "invalid capacity: must be a whole number >= 1");
//! ```

// The `#[doc(hidden)] pub` modules are what the contract's generator (`contract-gen`) reads of this
// client: its rules, not its API (which is what this file re-exports below).
mod admin;
#[doc(hidden)]
pub mod batch;
#[doc(hidden)]
pub mod batching;
mod breaker;
#[doc(hidden)]
pub mod command;
mod connection;
mod counters;
#[doc(hidden)]
pub mod decision;
#[doc(hidden)]
pub mod engine;
#[doc(hidden)]
pub mod engine_machine;
#[doc(hidden)]
pub mod error;
#[doc(hidden)]
pub mod evalsha;
mod failure;
#[doc(hidden)]
pub mod fallback;
mod hold;
pub mod http;
#[doc(hidden)]
pub mod limiter;
mod log_throttle;
mod outage;
mod permit;
#[doc(hidden)]
pub mod policy;
#[doc(hidden)]
pub mod precheck;
mod probe;
#[doc(hidden)]
pub mod reply_class;
mod take;
mod verify;
mod wait;

pub use admin::{DeniedKey, Inspection};
pub use batching::{Batch, DEFAULT_LEASE};
pub use command::Limit;
pub use counters::Counts;
pub use decision::Decision;
pub use engine::Backend;
/// The Lua library the client loads where the module is absent: its source and its EVALSHA scripts.
pub mod lua {
    pub use crate::engine::{script_source, LIBRARY};
    /// The library's version: this crate's, which ships it.
    pub const VERSION: &str = env!("CARGO_PKG_VERSION");
    /// The EVALSHA script of a function in a library source given (the generator
    /// `lua/scripts/<function>.lua` are written by; tests apply it to a library whose clock is theirs).
    pub use crate::evalsha::script_of;
}
pub use decision::Taken;
pub use error::{CallError, PolicyError};
pub use hold::{Abandon, Hold, HoldLimit, HoldOptions, Settlement, SETTLE_ATTEMPTS};
pub use limiter::{FailurePolicy, Limiter, LimiterBuilder, WaitTimeout};
pub use permit::{Acquired, Permit};
pub use policy::{Policy, Window};
pub use reply_class::ReplyClass;
pub use verify::{LibraryInfo, ModuleInfo, ModuleVersion, VerifyError};

//! ratelimit-core: the pure rate-limit algorithms of redis-ratelimit. No Redis, no clock, no I/O:
//! each takes its parameters, the previous state and the current time, and returns a verdict and the
//! next state. The Redis module is one user; the client's local fallback is another.
//!
//! Each limiter (`token_bucket`, `fixed_window`, `sliding_counter`, `sliding_log`, `leases`, and
//! `reservation`, a token bucket whose requests may wait)
//! implements [`limiter::Limiter`] over the bytes it stores (`format` lays them out) and declares its
//! names and argument grammar ([`declare::Declare`], with `args`); [`kind`] is the registry of kinds
//! every adapter dispatches through; `combine` decides several limits of any kinds as one request;
//! `limits` holds the bounds that the module and the client share; `dialect` holds other products'
//! commands on these algorithms.

/// The limiter kinds, one line each: its module and its type (which `impl Declare`s it). `kind.rs`
/// makes [`kind::LimiterKind`] and everything that dispatches on a kind from this one list.
macro_rules! limiter_kinds {
    ($($module:ident :: $kind:ident),* $(,)?) => {
        $(pub mod $module;)*

        /// The list above, as `kind.rs`' `kinds!` takes it.
        macro_rules! every_kind {
            () => {
                kinds! { $($kind => crate::$module::$kind, stringify!($module));* }
            };
        }
    };
}

limiter_kinds! {
    token_bucket::TokenBucket,
    fixed_window::FixedWindow,
    sliding_counter::SlidingCounter,
    sliding_log::SlidingLog,
    leases::Leases,
    reservation::Reservation,
}

pub mod args;
pub mod combine;
pub mod command_info;
pub mod commands;
pub mod decimal;
pub mod declare;
pub mod dialect;
pub mod error;
pub mod format;
pub mod hold;
pub mod kind;
pub mod limiter;
pub mod limits;
pub mod state;
pub mod time;
pub mod verdict;
pub mod window;

// The README's example is compiled and run with the doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

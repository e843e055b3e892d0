//! redis-ratelimit: native rate limiting commands for Redis and Valkey.
//!
//! Three concerns, three folders: `command` (one file per RL.* command: its declaration and its body,
//! adapting a `ratelimit_core` limiter to keys), `server` (everything that touches the module API, and
//! the only `unsafe`), `stats` (INFO counters, key classes, RL.TOP). The algorithms live in their own
//! crate (`core/`, `ratelimit_core`). This file only lists the commands. See docs/architecture.md.
#![deny(unsafe_code)]

// Under cfg(test) nothing registers the handlers (see below), so they look unused there.
#[cfg_attr(test, allow(dead_code))]
mod command;
#[cfg_attr(test, allow(dead_code))]
mod server;
#[cfg_attr(test, allow(dead_code))]
mod stats;

// The unit tests run with the system allocator; the module itself (and the allocator that only works
// inside a server) exists outside cfg(test).
#[cfg(not(test))]
server::module::module! {
    command::token::Token,
    command::fixed::Fixed,
    command::slide::Slide,
    command::slide_count::SlideCount,
    command::refund::Refund,
    command::all::All,
    command::take::Take,
    command::reserve::ReserveTokens,
    command::acquire::AcquireLease,
    command::release::Release,
    command::renew::Renew,
    command::inspect::Inspect,
    command::top::Top,
    command::reset_stats::ResetStats,
    command::cl_throttle::ClThrottle,
    command::rl_throttle::RlThrottle,
    command::gcra::Gcra,
}

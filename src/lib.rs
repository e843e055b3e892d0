//! redis-ratelimit: native rate limiting commands for Redis and Valkey.
//!
//! Three concerns, three folders: `command` (one file per RL.* command: its declaration and its body,
//! adapting a `ratelimit_core` limiter to keys), `server` (everything that touches the module API, and
//! the only `unsafe`), `stats` (INFO counters, key classes, RL.TOP). The algorithms live in their own
//! crate (`core/`, `ratelimit_core`). The commands are listed once, in `command/mod.rs`. See
//! docs/architecture.md.
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
command::register_all!();

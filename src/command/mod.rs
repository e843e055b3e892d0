//! The commands: one file per RL.* command, each declaring its name, flags, ACL categories and keys
//! beside its body (see `server::Command`). A limiter command parses its arguments into a
//! `ratelimit_core` limiter and hands it to `limit`, which connects any limiter to a key.
#![deny(unsafe_code)]

pub mod acquire;
pub mod all;
pub mod cl_throttle;
pub mod fixed;
pub mod gcra;
pub mod inspect;
mod limit;
mod memo;
mod parse;
pub mod refund;
pub mod release;
pub mod renew;
pub mod reserve;
pub mod reset_stats;
pub mod rl_throttle;
pub mod slide;
pub mod slide_count;
pub mod take;
pub mod token;
pub mod top;

//! Who is limited: per-command counters (`counters`), outcomes per key class (`classes`), the most
//! denied keys (`heavy`), and their configuration (`config`). Recorded after each call from the one
//! outcome that dispatch computes; shown by INFO (see `server::info`), RL.TOP and RL.INSPECT. Per
//! server process: a restart or RL.RESETSTATS clears them. No module API here.
#![deny(unsafe_code)]

pub mod classes;
pub mod config;
pub mod counters;
pub mod heavy;
mod record;

pub use counters::CommandStats;
pub use record::{observe, Observed};

/// What one call came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Allowed,
    /// Denied by the limit at `limiting` (0-based: the key that denied).
    Denied {
        limiting: usize,
    },
    /// An error reply.
    Error,
    /// A reporting reply (RL.INSPECT, RL.TOP): not a decision.
    Report,
}

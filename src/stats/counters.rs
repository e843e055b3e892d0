//! Per command, the requests allowed and denied and the error replies: relaxed atomics, one increment
//! per call, so an operator can graph denials and alert on a client stuck in a retry loop.

use super::Outcome;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

pub struct CommandStats {
    /// The field prefix in INFO: `token` gives `token_allowed`, `token_denied`, `token_errors`.
    name: &'static str,
    allowed: AtomicU64,
    denied: AtomicU64,
    errors: AtomicU64,
}

impl CommandStats {
    const fn new(name: &'static str) -> CommandStats {
        CommandStats {
            name,
            allowed: AtomicU64::new(0),
            denied: AtomicU64::new(0),
            errors: AtomicU64::new(0),
        }
    }

    pub fn record(&self, outcome: Outcome) {
        let counter = match outcome {
            Outcome::Allowed => &self.allowed,
            Outcome::Denied { .. } => &self.denied,
            Outcome::Error => &self.errors,
            Outcome::Report => return,
        };
        counter.fetch_add(1, Relaxed);
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The counters as INFO fields (after the name prefix).
    pub fn fields(&self) -> [(&'static str, u64); 3] {
        [
            ("allowed", self.allowed.load(Relaxed)),
            ("denied", self.denied.load(Relaxed)),
            ("errors", self.errors.load(Relaxed)),
        ]
    }

    pub(super) fn reset(&self) {
        for counter in [&self.allowed, &self.denied, &self.errors] {
            counter.store(0, Relaxed);
        }
    }
}

pub static TOKEN: CommandStats = CommandStats::new("token");
pub static FIXED: CommandStats = CommandStats::new("fixed");
pub static SLIDE: CommandStats = CommandStats::new("slide");
pub static SLIDECOUNT: CommandStats = CommandStats::new("slidecount");
pub static REFUND: CommandStats = CommandStats::new("refund");
/// RL.ALL.
pub static ALL_KINDS: CommandStats = CommandStats::new("all");
pub static TAKE: CommandStats = CommandStats::new("take");
pub static ACQUIRE: CommandStats = CommandStats::new("acquire");
/// In the order INFO shows them.
pub static ALL: [&CommandStats; 8] =
    [&TOKEN, &FIXED, &SLIDE, &SLIDECOUNT, &REFUND, &ALL_KINDS, &TAKE, &ACQUIRE];

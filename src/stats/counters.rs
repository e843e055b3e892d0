//! Per command, the requests allowed and denied and the error replies: relaxed atomics, one increment
//! per call, so an operator can graph denials and alert on a client stuck in a retry loop. Each
//! command declares its own counters beside its `Spec`; INFO shows those of the registered commands.

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
    pub const fn new(name: &'static str) -> CommandStats {
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

    pub fn reset(&self) {
        for counter in [&self.allowed, &self.denied, &self.errors] {
            counter.store(0, Relaxed);
        }
    }
}

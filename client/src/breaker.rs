//! A circuit breaker: after `threshold` failures in a row, Redis is not called for a cool-down, so an
//! outage costs no request a timeout; then one request (and only one) probes it, and its outcome closes
//! the breaker or opens it for another cool-down.

use std::sync::Mutex;
use std::time::{Duration, Instant};

pub(crate) struct Breaker {
    state: Mutex<State>,
    threshold: u32,
    cooldown: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Closed {
        failures: u32,
    },
    Open {
        until: Instant,
    },
    /// One probe is under way; everyone else is turned away until it reports.
    Probing,
}

/// What the breaker lets a call do.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Admission {
    Call,
    /// The one call that tests whether Redis is back.
    Probe,
    /// Do not call Redis; the cool-down ends in the given time (zero while a probe is under way).
    Reject(Duration),
}

impl Breaker {
    pub(crate) fn new(threshold: u32, cooldown: Duration) -> Breaker {
        Breaker { state: Mutex::new(State::Closed { failures: 0 }), threshold: threshold.max(1), cooldown }
    }

    pub(crate) fn admit(&self, now: Instant) -> Admission {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match *state {
            State::Closed { .. } => Admission::Call,
            State::Open { until } if now >= until => {
                *state = State::Probing;
                Admission::Probe
            }
            State::Open { until } => Admission::Reject(until - now),
            State::Probing => Admission::Reject(Duration::ZERO),
        }
    }

    /// Reports a call's outcome (a probe's, or an ordinary call's).
    pub(crate) fn record(&self, ok: bool, now: Instant) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        *state = match (*state, ok) {
            (_, true) => State::Closed { failures: 0 },
            (State::Closed { failures }, false) if failures + 1 < self.threshold => {
                State::Closed { failures: failures + 1 }
            }
            (_, false) => State::Open { until: now + self.cooldown },
        };
    }

    pub(crate) fn is_open(&self) -> bool {
        !matches!(*self.state.lock().unwrap_or_else(|e| e.into_inner()), State::Closed { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_the_threshold_then_lets_one_probe_through() {
        let b = Breaker::new(3, Duration::from_secs(5));
        let t = Instant::now();
        for _ in 0..2 {
            assert_eq!(b.admit(t), Admission::Call);
            b.record(false, t);
        }
        assert!(!b.is_open());
        b.record(false, t);
        assert!(b.is_open());
        assert_eq!(b.admit(t + Duration::from_secs(1)), Admission::Reject(Duration::from_secs(4)));
        let later = t + Duration::from_secs(5);
        assert_eq!(b.admit(later), Admission::Probe);
        assert_eq!(b.admit(later), Admission::Reject(Duration::ZERO), "only one probe at a time");
        b.record(false, later);
        assert_eq!(b.admit(later + Duration::from_secs(1)), Admission::Reject(Duration::from_secs(4)));
        assert_eq!(b.admit(later + Duration::from_secs(5)), Admission::Probe);
        b.record(true, later + Duration::from_secs(5));
        assert_eq!(b.admit(later + Duration::from_secs(5)), Admission::Call);
        // A success resets the count of failures in a row.
        b.record(false, t);
        b.record(true, t);
        b.record(false, t);
        b.record(false, t);
        assert!(!b.is_open());
    }
}

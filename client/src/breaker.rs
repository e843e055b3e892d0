//! A circuit breaker: after `threshold` failures in a row, Redis is not called for a cool-down, so an
//! outage costs no request a timeout; then one request (and only one) tries it, and its outcome closes
//! the breaker or opens it for another cool-down. While it is open for an outage, the limiter's
//! background probe (`probe.rs`) ends the cool-down as soon as Redis answers again
//! ([`Breaker::redis_answered`]). Only an outage counts: an answer of any other class (a configuration
//! fault, a conflicting key, the caller's mistake; docs/errors.md) is Redis answering.

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
    /// One call is trying Redis; everyone else is turned away until it reports.
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

/// How a call that went to Redis ended, for the breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Redis answered (a decision, or an error reply of a class other than outage).
    Answered,
    /// No answer, or an outage's: the deadline, a broken connection, a demoted primary.
    Failed,
}

impl Breaker {
    pub(crate) fn new(threshold: u32, cooldown: Duration) -> Breaker {
        Breaker { state: Mutex::new(State::Closed { failures: 0 }), threshold: threshold.max(1), cooldown }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn admit(&self, now: Instant) -> Admission {
        let mut state = self.lock();
        match *state {
            State::Closed { .. } => Admission::Call,
            State::Open { until, .. } if now >= until => {
                *state = State::Probing;
                Admission::Probe
            }
            State::Open { until, .. } => Admission::Reject(until - now),
            State::Probing => Admission::Reject(Duration::ZERO),
        }
    }

    /// Reports a call's outcome (a probe's, or an ordinary call's). True when it opened the breaker
    /// for an outage (from closed, or after a failed probe): the background probe has work.
    pub(crate) fn record(&self, outcome: Outcome, now: Instant) -> bool {
        let mut state = self.lock();
        let next = match (*state, outcome) {
            (_, Outcome::Answered) => State::Closed { failures: 0 },
            (State::Closed { failures }, Outcome::Failed) if failures + 1 < self.threshold => {
                State::Closed { failures: failures + 1 }
            }
            (_, Outcome::Failed) => State::Open { until: now + self.cooldown },
        };
        let opened = matches!(next, State::Open { .. }) && !matches!(*state, State::Open { .. });
        *state = next;
        opened
    }

    /// The background probe heard Redis answer: an outage's cool-down ends now, so the next call
    /// tries Redis (one call, as after a cool-down).
    pub(crate) fn redis_answered(&self, now: Instant) {
        let mut state = self.lock();
        if let State::Open { until } = *state {
            *state = State::Open { until: until.min(now) };
        }
    }

    /// True while the breaker is open for an outage and its cool-down runs: what the probe is for.
    pub(crate) fn awaits_redis(&self, now: Instant) -> bool {
        matches!(*self.lock(), State::Open { until } if now < until)
    }

    pub(crate) fn is_open(&self) -> bool {
        !matches!(*self.lock(), State::Closed { .. })
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
            assert!(!b.record(Outcome::Failed, t));
        }
        assert!(!b.is_open());
        assert!(b.record(Outcome::Failed, t), "the third failure opens it");
        assert!(b.is_open());
        assert_eq!(b.admit(t + Duration::from_secs(1)), Admission::Reject(Duration::from_secs(4)));
        let later = t + Duration::from_secs(5);
        assert_eq!(b.admit(later), Admission::Probe);
        assert_eq!(b.admit(later), Admission::Reject(Duration::ZERO), "only one probe at a time");
        assert!(b.record(Outcome::Failed, later), "a failed probe opens it again");
        assert_eq!(b.admit(later + Duration::from_secs(1)), Admission::Reject(Duration::from_secs(4)));
        assert_eq!(b.admit(later + Duration::from_secs(5)), Admission::Probe);
        b.record(Outcome::Answered, later + Duration::from_secs(5));
        assert_eq!(b.admit(later + Duration::from_secs(5)), Admission::Call);
        // A success resets the count of failures in a row.
        b.record(Outcome::Failed, t);
        b.record(Outcome::Answered, t);
        b.record(Outcome::Failed, t);
        b.record(Outcome::Failed, t);
        assert!(!b.is_open());
    }

    #[test]
    fn redis_answering_ends_an_outage_s_cool_down() {
        let b = Breaker::new(1, Duration::from_secs(30));
        let t = Instant::now();
        assert!(b.record(Outcome::Failed, t));
        assert!(b.awaits_redis(t + Duration::from_secs(1)));
        b.redis_answered(t + Duration::from_secs(1));
        assert!(!b.awaits_redis(t + Duration::from_secs(1)));
        assert_eq!(b.admit(t + Duration::from_secs(1)), Admission::Probe, "the next call tries Redis");
        b.record(Outcome::Answered, t + Duration::from_secs(1));
        assert!(!b.is_open());
    }
}

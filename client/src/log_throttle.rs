//! A log line that is itself rate-limited, so an outage does not log once per request.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A log line that is itself rate-limited: at most one per `every`, saying how many were held back.
pub(crate) struct LogThrottle {
    every: Duration,
    state: Mutex<(Option<Instant>, u64)>,
}

impl LogThrottle {
    pub(crate) fn new(every: Duration) -> LogThrottle {
        LogThrottle { every, state: Mutex::new((None, 0)) }
    }

    /// Calls `log` with the number of suppressed lines since the last one, when a line is due.
    pub(crate) fn maybe(&self, now: Instant, log: impl FnOnce(u64)) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match state.0 {
            Some(last) if now.duration_since(last) < self.every => state.1 += 1,
            _ => {
                let suppressed = std::mem::take(&mut state.1);
                state.0 = Some(now);
                drop(state);
                log(suppressed);
            }
        }
    }

    /// A line of its own was just logged (an outage's first): the next is due `every` from now,
    /// and it counts only what is held back from now on, not what an earlier episode held back.
    pub(crate) fn restart(&self, now: Instant) {
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = (Some(now), 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_line_is_itself_rate_limited_and_counts_what_it_held_back() {
        let throttle = LogThrottle::new(Duration::from_secs(10));
        let t = Instant::now();
        let mut lines = vec![];
        for s in [0, 1, 2, 9, 10, 11, 25] {
            throttle.maybe(t + Duration::from_secs(s), |held_back| lines.push((s, held_back)));
        }
        assert_eq!(lines, [(0, 0), (10, 3), (25, 1)]);
    }

    #[test]
    fn a_restart_forgets_what_the_previous_episode_held_back() {
        let throttle = LogThrottle::new(Duration::from_secs(10));
        let t = Instant::now();
        let mut lines = vec![];
        for s in [0, 1, 2, 3] {
            throttle.maybe(t + Duration::from_secs(s), |held_back| lines.push((s, held_back)));
        }
        throttle.restart(t + Duration::from_secs(100));
        for s in [101, 111] {
            throttle.maybe(t + Duration::from_secs(s), |held_back| lines.push((s, held_back)));
        }
        assert_eq!(lines, [(0, 0), (111, 1)], "the new episode's line counts its own one held back");
    }
}

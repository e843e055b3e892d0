//! The outcome every limiter reports, whatever its algorithm, and how several combine.

use crate::time::Nanos;

/// What a limiter says about one request: the five fields of every RL.* reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    pub allowed: bool,
    /// The limit: a bucket's capacity, a window's request count.
    pub limit: u64,
    /// Units left after this request.
    pub remaining: u64,
    /// 0 when allowed (a reservation allowed after a wait: that wait, before which its units may not
    /// be used); when denied, the wait after which the same request would be allowed; None when it
    /// can never be (it costs more than the limit).
    pub retry_after_ns: Option<Nanos>,
    /// Time until the limiter is back to its initial state (full bucket, empty window).
    pub reset_after_ns: Nanos,
}

/// The index of the verdict that limits a combined request: when any denies, the denial that lasts
/// longest ("never" first); when all allow, the one that makes the request wait longest (a
/// reservation), then the one with the fewest units left. Ties go to the first.
/// None when there are no verdicts.
pub fn most_restrictive(verdicts: impl IntoIterator<Item = Verdict>) -> Option<usize> {
    let key = |v: &Verdict| {
        // Larger is more restrictive: a denial, then the longer wait (an allowed reservation's
        // wait before its tokens may be used, a denial's retry_after), then fewer remaining.
        let wait = v.retry_after_ns.unwrap_or(Nanos::MAX);
        (!v.allowed, wait, std::cmp::Reverse(v.remaining))
    };
    let mut best: Option<(usize, Verdict)> = None;
    for (i, v) in verdicts.into_iter().enumerate() {
        if best.is_none_or(|(_, b)| key(&v) > key(&b)) {
            best = Some((i, v));
        }
    }
    best.map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(allowed: bool, remaining: u64, retry: Option<Nanos>) -> Verdict {
        Verdict { allowed, limit: 10, remaining, retry_after_ns: retry, reset_after_ns: 0 }
    }

    #[test]
    fn picks_the_longest_denial_then_the_fewest_remaining() {
        assert_eq!(most_restrictive([]), None);
        assert_eq!(
            most_restrictive([v(true, 5, Some(0)), v(true, 2, Some(0)), v(true, 2, Some(0))]),
            Some(1)
        );
        assert_eq!(
            most_restrictive([v(true, 0, Some(0)), v(false, 3, Some(10)), v(false, 1, Some(20))]),
            Some(2)
        );
        assert_eq!(most_restrictive([v(false, 0, Some(5)), v(false, 9, None)]), Some(1));
    }
}

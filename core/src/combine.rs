//! Several limits decided as one request, whatever their kinds: allowed only when every limit allows,
//! and then every one is taken; otherwise none is (only repairs of impossible states are written).
//! The reply describes the most restrictive limit.

use crate::limiter::Outcome;
use crate::verdict::{most_restrictive, Verdict};

/// The combined decision over `outcomes` (in request order): the verdict to reply, the position of
/// the limit it describes, and the outcomes with the writes to store (a denial drops every write but
/// repairs). None when there are no outcomes.
pub fn all_or_nothing(mut outcomes: Vec<Outcome>) -> Option<Combined> {
    let limiting = most_restrictive(outcomes.iter().map(|o| o.verdict))?;
    let verdict = outcomes[limiting].verdict;
    // The most restrictive verdict allows only when all do.
    if !verdict.allowed {
        for o in outcomes.iter_mut().filter(|o| !o.repair) {
            o.write = None;
        }
    }
    Some(Combined { verdict, limiting, outcomes })
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Combined {
    pub verdict: Verdict,
    /// 0-based position of the limit `verdict` describes.
    pub limiting: usize,
    pub outcomes: Vec<Outcome>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixed_window::FixedWindow;
    use crate::limiter::Limiter;
    use crate::sliding_log::{RequestId, SlidingLog};
    use crate::time::NANOS_PER_SEC as SEC;
    use crate::token_bucket::TokenBucket;

    const T0: i64 = 1_700_000_000 * SEC;

    #[test]
    fn limits_of_different_kinds_are_taken_together_or_not_at_all() {
        let bucket = TokenBucket::new(2, crate::decimal::Decimal { mantissa: 1, exponent: 0 }).unwrap();
        let window = FixedWindow::new(1, SEC).unwrap();
        let log = SlidingLog::new(5, 1_000_000).unwrap();
        let id = RequestId { hash: 1, dedup: false };
        let both = |fixed: Option<&[u8]>| {
            all_or_nothing(vec![
                bucket.decide(None, T0, 1).unwrap(),
                window.decide(fixed, T0, 1).unwrap(),
                log.decide(None, T0, id).unwrap(),
            ])
            .unwrap()
        };
        let first = both(None);
        assert!(first.verdict.allowed);
        assert!(first.outcomes.iter().all(|o| o.write.is_some()));
        assert_eq!(first.limiting, 1, "the window has nothing left");
        let crate::limiter::Change::Set(counted) = &first.outcomes[1].write.as_ref().unwrap().change else {
            panic!("a window is written whole")
        };
        let second = both(Some(counted.as_ref()));
        assert!(!second.verdict.allowed);
        assert_eq!(second.limiting, 1);
        assert!(second.outcomes.iter().all(|o| o.write.is_none()), "a denial takes nothing");
        assert!(all_or_nothing(vec![]).is_none());
    }

    /// A limit whose state needs a clock-fault repair, allowed inside a denied combined request:
    /// nothing of this request is recorded (only a repair alone is stored when denied).
    #[test]
    fn a_denied_combination_records_nothing_even_where_a_state_needed_repair() {
        let log = SlidingLog::new(5, 1_000_000).unwrap();
        let bucket = TokenBucket::new(1, crate::decimal::Decimal { mantissa: 1, exponent: 0 }).unwrap();
        let id = |hash| RequestId { hash, dedup: false };
        // A log written an hour ahead (a clock that ran ahead), and an empty bucket.
        let ahead = log.decide(None, T0 + 3600 * SEC, id(1)).unwrap().write.unwrap();
        let crate::limiter::Change::Set(ahead) = ahead.change else { panic!("a new log is written whole") };
        let crate::limiter::Change::Set(empty) = bucket.decide(None, T0, 1).unwrap().write.unwrap().change
        else {
            panic!("a bucket is written whole")
        };
        let (repaired, taken) = (
            log.decide(Some(ahead.as_ref()), T0, id(2)).unwrap(),
            bucket.decide(Some(empty.as_ref()), T0, 1).unwrap(),
        );
        assert!(repaired.verdict.allowed && !repaired.repair, "allowed: the write records the request too");
        let combined = all_or_nothing(vec![repaired, taken]).unwrap();
        assert!(!combined.verdict.allowed);
        assert!(combined.outcomes.iter().all(|o| o.write.is_none()), "the denied request is not recorded");
        // Denied by the log itself, the repair alone is stored.
        let full = SlidingLog::new(1, 1_000_000).unwrap();
        let denied = full.decide(Some(ahead.as_ref()), T0, id(3)).unwrap();
        assert!(!denied.verdict.allowed && denied.repair && denied.write.is_some());
    }
}

//! Holds over an in-memory store: the properties docs/commands.md states, at explicit times.

use super::*;
use crate::kind::AnyLimiter;
use crate::limiter::apply;
use crate::time::NANOS_PER_SEC as SEC;
use std::collections::HashMap;

const T0: Nanos = 1_700_000_000 * SEC; // a multiple of 60 s

#[derive(Default)]
struct Memory(HashMap<Vec<u8>, Vec<u8>>);

impl Store for Memory {
    type Error = HoldError;
    fn read(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, HoldError> {
        Ok(self.0.get(key).cloned())
    }
    fn apply(&mut self, key: &[u8], write: &Write) -> Result<(), HoldError> {
        if write.change == Change::Delete {
            self.0.remove(key);
            return Ok(());
        }
        let value = self.0.entry(key.to_vec()).or_default();
        apply(value, &write.change);
        Ok(())
    }
}

const LEDGER: &[u8] = b"rl:holds:{t}";

fn group<'a>(key: &'a str, kind: &str, p1: &'a str, p2: &'a str, units: u64) -> Group<'a> {
    let kind = LimiterKind::from_group(kind.as_bytes()).unwrap();
    let limiter = AnyLimiter::parse(kind, [p1.as_bytes(), p2.as_bytes()]).unwrap();
    Group {
        key: key.as_bytes(),
        limit: limiter.request_of(units, None).unwrap(),
        params: [p1.as_bytes(), p2.as_bytes()],
    }
}

fn take(m: &mut Memory, id: &str, abandon: Abandon, groups: &[Group<'_>], now: Nanos) -> [i64; 6] {
    hold(m, LEDGER, id.as_bytes(), 60_000, abandon, groups, now).unwrap()
}

fn remaining(m: &mut Memory, g: &Group<'_>, now: Nanos) -> u64 {
    let stored = m.read(g.key).unwrap();
    g.limit.limiter().peek(stored.as_deref(), now).unwrap().now.remaining
}

#[test]
fn a_settle_returns_the_unused_part_once() {
    let mut m = Memory::default();
    let tpm = group("tpm", "FIXED", "1000", "60", 600);
    assert_eq!(take(&mut m, "a", Abandon::Charge, std::slice::from_ref(&tpm), T0)[0], 1);
    assert_eq!(remaining(&mut m, &tpm, T0), 400);
    let first = settle(&mut m, LEDGER, b"a", Mode::Final, &[(b"tpm", 250)], T0 + SEC).unwrap().unwrap();
    assert_eq!(remaining(&mut m, &tpm, T0 + SEC), 750);
    for _ in 0..3 {
        let again = settle(&mut m, LEDGER, b"a", Mode::Final, &[(b"tpm", 250)], T0 + 2 * SEC).unwrap();
        assert_eq!(again, Some(first), "a retried settle replies as the first did");
        let partial = settle(&mut m, LEDGER, b"a", Mode::Partial, &[(b"tpm", 999)], T0 + 2 * SEC).unwrap();
        assert_eq!(partial, Some(first));
    }
    assert_eq!(remaining(&mut m, &tpm, T0 + 2 * SEC), 750, "counted once");
    // A retried hold of the same id takes nothing more.
    let again = take(&mut m, "a", Abandon::Charge, std::slice::from_ref(&tpm), T0 + 3 * SEC);
    assert_eq!(again[0], 1);
    assert_eq!(remaining(&mut m, &tpm, T0 + 3 * SEC), 750);
}

#[test]
fn a_denied_hold_writes_nothing() {
    let mut m = Memory::default();
    let rpm = group("rpm", "FIXED", "1", "60", 1);
    let tpm = group("tpm", "TOKEN", "100", "1", 90);
    take(&mut m, "a", Abandon::Charge, &[group("rpm", "FIXED", "1", "60", 1)], T0);
    let before = m.0.clone();
    let denied = take(&mut m, "b", Abandon::Charge, &[rpm, tpm], T0);
    assert_eq!(denied[0], 0);
    assert_eq!(denied[5], 1, "the request limit denied");
    assert_eq!(m.0, before, "nothing taken, nothing recorded");
    assert_eq!(settle(&mut m, LEDGER, b"b", Mode::Final, &[(b"tpm", 0)], T0).unwrap(), None);
}

#[test]
fn an_excess_is_charged_in_the_hold_s_window_never_a_later_one() {
    let mut m = Memory::default();
    let tpm = group("tpm", "FIXED", "1000", "60", 100);
    take(&mut m, "a", Abandon::Charge, std::slice::from_ref(&tpm), T0);
    take(&mut m, "b", Abandon::Charge, std::slice::from_ref(&tpm), T0);
    settle(&mut m, LEDGER, b"a", Mode::Final, &[(b"tpm", 300)], T0 + SEC).unwrap();
    assert_eq!(remaining(&mut m, &tpm, T0 + SEC), 1000 - 300 - 100);
    // The window ends; b settles late: nothing lands in the new window.
    let later = T0 + 61 * SEC;
    take(&mut m, "c", Abandon::Charge, &[group("tpm", "FIXED", "1000", "60", 10)], later);
    settle(&mut m, LEDGER, b"b", Mode::Final, &[(b"tpm", 900)], later).unwrap();
    assert_eq!(remaining(&mut m, &tpm, later), 990);
    settle(&mut m, LEDGER, b"c", Mode::Final, &[(b"tpm", 0)], later).unwrap();
    assert_eq!(remaining(&mut m, &tpm, later), 1000);
}

#[test]
fn a_partial_charges_usage_beyond_the_hold_and_says_when_the_budget_is_gone() {
    let mut m = Memory::default();
    let tpm = group("tpm", "SLIDECOUNT", "100", "60", 50);
    take(&mut m, "s", Abandon::Charge, std::slice::from_ref(&tpm), T0);
    let r = settle(&mut m, LEDGER, b"s", Mode::Partial, &[(b"tpm", 40)], T0).unwrap().unwrap();
    assert_eq!((r[0], r[2]), (1, 50), "within the hold: nothing moves");
    let r = settle(&mut m, LEDGER, b"s", Mode::Partial, &[(b"tpm", 90)], T0).unwrap().unwrap();
    assert_eq!((r[0], r[2]), (1, 10));
    let r = settle(&mut m, LEDGER, b"s", Mode::Partial, &[(b"tpm", 120)], T0).unwrap().unwrap();
    assert_eq!((r[0], r[2]), (0, 0), "past the hold and past the limit: stop");
    let r = settle(&mut m, LEDGER, b"s", Mode::Partial, &[(b"tpm", 110)], T0).unwrap().unwrap();
    assert_eq!(r[0], 0, "a lower running total takes nothing back");
    let r = settle(&mut m, LEDGER, b"s", Mode::Final, &[(b"tpm", 120)], T0).unwrap().unwrap();
    assert_eq!(r[0], 0);
    // In the next window the counter's previous count still weighs: a return lands there.
    let next = T0 + 60 * SEC;
    let other = group("tpm2", "SLIDECOUNT", "100", "60", 50);
    assert_eq!(take(&mut m, "t", Abandon::Charge, std::slice::from_ref(&other), next - SEC)[0], 1);
    let before = remaining(&mut m, &other, next);
    settle(&mut m, LEDGER, b"t", Mode::Final, &[(b"tpm2", 0)], next).unwrap().unwrap();
    assert_eq!((before, remaining(&mut m, &other, next)), (50, 100));
}

#[test]
fn abandoned_holds_follow_their_policy() {
    for (abandon, back) in [(Abandon::Charge, false), (Abandon::Return, true)] {
        let mut m = Memory::default();
        let tpm = group("tpm", "TOKEN", "1000", "1", 500);
        take(&mut m, "gone", abandon, std::slice::from_ref(&tpm), T0);
        settle(&mut m, LEDGER, b"gone", Mode::Partial, &[(b"tpm", 100)], T0).unwrap();
        // The hold ends 60 s later; the next call on the ledger ends it.
        let end = T0 + 60 * SEC;
        let probe = group("other", "FIXED", "5", "60", 1);
        let before = m.0.get(b"tpm".as_slice()).cloned();
        take(&mut m, "next", Abandon::Charge, &[probe], end);
        let after = m.0.get(b"tpm".as_slice()).cloned();
        assert_eq!(after != before, back, "{abandon:?}");
        assert_eq!(settle(&mut m, LEDGER, b"gone", Mode::Final, &[(b"tpm", 1)], end).unwrap(), None);
    }
    // Returned while the bucket still lacks them: 400 of the 500 come back, the reported 100 stay.
    let mut m = Memory::default();
    let tpm = group("tpm", "TOKEN", "1000", "0.001", 500);
    take(&mut m, "gone", Abandon::Return, std::slice::from_ref(&tpm), T0);
    settle(&mut m, LEDGER, b"gone", Mode::Partial, &[(b"tpm", 100)], T0).unwrap();
    take(&mut m, "next", Abandon::Charge, &[group("x", "FIXED", "5", "60", 1)], T0 + 60 * SEC);
    assert_eq!(remaining(&mut m, &tpm, T0 + 60 * SEC), 900);
}

#[test]
fn input_and_output_tokens_in_one_hold() {
    let mut m = Memory::default();
    let input = group("in", "TOKEN", "10000", "100", 420);
    let output = group("out", "TOKEN", "5000", "50", 1024);
    take(&mut m, "r", Abandon::Charge, &[input, output], T0);
    settle(&mut m, LEDGER, b"r", Mode::Final, &[(b"out", 312)], T0).unwrap().unwrap();
    let (input, output) = (group("in", "TOKEN", "10000", "100", 0), group("out", "TOKEN", "5000", "50", 0));
    assert_eq!(remaining(&mut m, &input, T0), 10000 - 420, "the prompt stays charged exactly");
    assert_eq!(remaining(&mut m, &output, T0), 5000 - 312);
    assert_eq!(settle(&mut m, LEDGER, b"r", Mode::Final, &[(b"x", 1)], T0).unwrap().map(|r| r[0]), Some(1));
}

#[test]
fn a_group_of_0_units_is_a_peek_not_held() {
    let mut m = Memory::default();
    let tpm = group("tpm", "FIXED", "1000", "60", 0);
    assert_eq!(take(&mut m, "z", Abandon::Charge, std::slice::from_ref(&tpm), T0)[0], 1);
    assert!(!m.0.contains_key(b"tpm".as_slice()), "nothing written");
    let e = settle(&mut m, LEDGER, b"z", Mode::Final, &[(b"tpm", 500)], T0).unwrap_err();
    assert_eq!(e, HoldError::Param(NOT_HELD), "its actual cannot be lost in no window");
}

#[test]
fn a_ledger_holds_at_most_max_holds_to_return() {
    let mut m = Memory::default();
    let entries: Vec<Entry> = (0..MAX_HOLDS)
        .map(|i| Entry {
            id: format!("r{i}").into_bytes(),
            ends_ms: T0 / 1_000_000 + 60_000,
            keep_ms: T0 / 1_000_000 + 60_000,
        })
        .collect();
    m.apply(LEDGER, &Ledger::of(&entries).write()).unwrap();
    let tpm = [group("tpm", "FIXED", "1000", "60", 1)];
    let full = hold(&mut m, LEDGER, b"one-more", 60_000, Abandon::Return, &tpm, T0).unwrap_err();
    assert_eq!(full, HoldError::Param(FULL));
    assert!(!m.0.contains_key(b"tpm".as_slice()), "refused before deciding: nothing taken");
    assert_eq!(
        hold(&mut m, LEDGER, b"charged", 60_000, Abandon::Charge, &tpm, T0).unwrap()[0],
        1,
        "CHARGE holds are not listed"
    );
}

#[test]
fn usage_errors() {
    let mut m = Memory::default();
    let tpm = group("tpm", "FIXED", "10", "60", 1);
    take(&mut m, "a", Abandon::Charge, std::slice::from_ref(&tpm), T0);
    let e = settle(&mut m, LEDGER, b"a", Mode::Partial, &[(b"nope", 1)], T0).unwrap_err();
    assert_eq!(e, HoldError::Param(NOT_HELD));
    let dup = settle(&mut m, LEDGER, b"a", Mode::Final, &[(b"tpm", 1), (b"tpm", 2)], T0).unwrap_err();
    assert_eq!(dup, HoldError::DuplicateKey);
    take(&mut m, "w", Abandon::Charge, &[group("{t}:f", "FIXED", "5", "60", 1)], T0);
    let q = || [group("q", "FIXED", "1", "1", 1)];
    let on_ledger = hold(&mut m, b"{t}:f", b"z", 1000, Abandon::Charge, &q(), T0);
    assert_eq!(on_ledger.unwrap_err(), HoldError::State, "a limit's key is no ledger");
    let untagged = hold(&mut m, b"holds", b"z", 1000, Abandon::Charge, &q(), T0);
    assert_eq!(untagged.unwrap_err(), HoldError::Param(UNTAGGED));
    assert_eq!(ledger(b"a{}b{c}"), Err(UNTAGGED), "the first braces decide, as Redis hashes");
    assert_eq!(ledger(b"rl:holds:{t}"), Ok(&b"rl:holds:{t}"[..]));
    let own = [group("rl:holds:{t}:x", "FIXED", "1", "1", 1)];
    let own = hold(&mut m, LEDGER, b"x", 1000, Abandon::Charge, &own, T0);
    assert_eq!(own.unwrap_err(), HoldError::DuplicateKey, "the hold's own key is no limit");
    assert_eq!(ttl_ms(b"0"), Err(TTL));
    assert_eq!(ttl_ms(b"86400.001"), Err(TTL));
    assert_eq!(ttl_ms(b"1.5"), Ok(1500));
    assert_eq!(id(b""), Err(ID));
    assert_eq!(Abandon::parse(b"return"), Ok(Abandon::Return));
    assert_eq!(Mode::parse(b"later"), Err(ArgError::Syntax));
}

#[test]
fn a_hold_and_its_ledger_read_back_what_they_wrote() {
    let mut m = Memory::default();
    let groups = [group("k\u{0}:1", "SLIDECOUNT", "7", "0.5", 3), group("t", "TOKEN", "9", "2.5", 2)];
    take(&mut m, "a:1", Abandon::Return, &groups, T0);
    take(&mut m, "b", Abandon::Charge, &[group("f", "FIXED", "9", "60", 2)], T0);
    let bytes = m.0[b"rl:holds:{t}:a:1".as_slice()].clone();
    let h = Hold::parse(&bytes).unwrap();
    assert_eq!(h.encode(), bytes);
    assert_eq!(h.groups[0].key, b"k\x00:1");
    assert_eq!(h.keep_ms - h.ends_ms, 2 * 3600, "two of its longest period: the bucket's refill, 3.6 s");
    let ledger = Ledger::parse(Some(&m.0[LEDGER])).unwrap();
    assert_eq!(
        (ledger.count, ledger.entries().unwrap().len()),
        (1, 1),
        "only the hold that returns is listed"
    );
    assert_eq!(ledger.encode(), m.0[LEDGER]);
    assert!(m.0.contains_key(b"rl:holds:{t}:b".as_slice()));
    assert!(Hold::parse(b"RLH\x0112:short").is_err());
    // Settled, the returning hold leaves the ledger, which goes.
    settle(&mut m, LEDGER, b"a:1", Mode::Final, &[(b"t", 1)], T0).unwrap();
    assert!(!m.0.contains_key(LEDGER));
}

mod bounds {
    use super::*;
    use crate::limiter::Limiter;
    use proptest::prelude::*;

    /// A fixed window's count at `now` (0 once it has ended), above its limit too.
    fn count(m: &mut Memory, now: Nanos) -> u64 {
        let Some(stored) = m.read(b"tpm").unwrap() else { return 0 };
        let fields = crate::fixed_window::FixedWindow::describe(&stored, now).unwrap();
        let ends_ms = fields[1].1.unwrap();
        if ends_ms * 1_000_000 <= now {
            return 0;
        }
        fields[0].1.unwrap() as u64
    }

    const LIMIT: u64 = 1000;

    proptest! {
        /// What the holds admitted in a window charge there (their estimate while open or settled
        /// after the window, their actual once settled in it) never exceeds the limit by more than
        /// the excess (actual - estimate) of the holds settled in it: with estimates that cover
        /// their actuals, never above the limit. A return from an earlier window landing in this one
        /// would let it admit more than that.
        #[test]
        fn a_window_exceeds_its_limit_by_at_most_the_excess_settled_in_it(
            steps in proptest::collection::vec((0u64..400, 0u64..500, 0i64..20_000, 0usize..4), 1..80),
        ) {
            let mut m = Memory::default();
            // Open holds: id, estimate, actual, its window's end.
            let mut open: Vec<(String, u64, u64, i64)> = Vec::new();
            // The current window's holds: estimate, actual, settled in it.
            let mut window: Vec<(u64, u64, bool)> = Vec::new();
            let (mut now, mut window_end) = (T0, 0i64);
            for (i, (estimate, actual, step_ms, settle_at)) in steps.into_iter().enumerate() {
                now += step_ms * 1_000_000;
                let ms = now / 1_000_000;
                if settle_at < open.len() {
                    let (id, held, actual, its_window) = open.remove(settle_at);
                    settle(&mut m, LEDGER, id.as_bytes(), Mode::Final, &[(b"tpm", actual)], now).unwrap();
                    if its_window == window_end && ms < window_end {
                        let h = window.iter_mut().find(|h| h.0 == held && h.1 == actual && !h.2).unwrap();
                        h.2 = true;
                    }
                }
                let id = format!("h{i}");
                let r = take(&mut m, &id, Abandon::Charge, &[group("tpm", "FIXED", "1000", "60", estimate)], now);
                // A hold of 0 is a peek: decided, not held.
                if r[0] == 1 && estimate > 0 {
                    if window_end <= ms {
                        window_end = ms + 60_000;
                        window.clear();
                    }
                    window.push((estimate, actual, false));
                    open.push((id, estimate, actual, window_end));
                }
                let charged: u64 = window.iter().map(|&(e, a, settled)| if settled { a } else { e }).sum();
                let excess: u64 = window.iter().filter(|h| h.2).map(|&(e, a, _)| a.saturating_sub(e)).sum();
                prop_assert!(charged <= LIMIT + excess, "charged {charged} > {LIMIT} + {excess}");
                prop_assert_eq!(count(&mut m, now), if ms < window_end { charged } else { 0 });
            }
        }
    }
}

//! RL.* commands as redis-rs values: one place that turns limits into arguments.

use crate::error::CallError;
use crate::policy::Policy;
use ratelimit_core::args::seconds;
use ratelimit_core::hold::{Abandon, Mode};
use ratelimit_core::kind::{LimiterKind, RequestForm, Word};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// One limit to check: a key, its policy and what this request costs (1 for most requests, 0 to peek).
#[derive(Debug, Clone, Copy)]
pub struct Limit<'a> {
    pub key: &'a str,
    pub policy: &'a Policy,
    pub cost: u64,
}

impl<'a> Limit<'a> {
    pub fn new(key: &'a str, policy: &'a Policy, cost: u64) -> Limit<'a> {
        Limit { key, policy, cost }
    }
}

/// A key that is empty: refused before sending (docs/errors.md), in every client with this text.
pub const EMPTY_KEY: &str = "ERR invalid key: must be a non-empty string";
/// A key given twice in one call: the module's own reply, which every client also refuses before sending.
pub const DUPLICATE_KEY: &str = ratelimit_core::error::DUPLICATE_KEY;
/// Keys of one call in different hash slots: Redis' own reply, which cluster clients refuse before sending.
pub const CROSS_SLOT: &str = "CROSSSLOT Keys in request don't hash to the same slot";

/// On a cluster, keys of one call in different hash slots: refused before sending, as Redis Cluster
/// would answer them.
pub fn check_slots(limits: &[Limit<'_>]) -> Result<(), CallError> {
    use redis::cluster_routing::Slot;
    if limits.len() < 2 {
        return Ok(()); // one key: one slot, no hash to compute on the request path
    }
    let mut slots = limits.iter().map(|l| Slot::for_key(l.key));
    match slots.next() {
        Some(first) if slots.any(|s| s != first) => Err(CallError::Usage(CROSS_SLOT)),
        _ => Ok(()),
    }
}

/// The caller's mistakes in `limits`' keys that a client refuses before sending: an empty key, a key twice.
pub fn check_keys(limits: &[Limit<'_>]) -> Result<(), CallError> {
    for (i, limit) in limits.iter().enumerate() {
        if limit.key.is_empty() {
            return Err(CallError::Usage(EMPTY_KEY));
        }
        if limits[..i].iter().any(|l| l.key == limit.key) {
            return Err(CallError::Usage(DUPLICATE_KEY));
        }
    }
    Ok(())
}

/// The one RL.* call that decides `limits` atomically: one limit goes to its own command, several
/// token buckets into one RL.TOKEN, several limits of other or mixed kinds into one RL.ALL.
pub fn decide(limits: &[Limit<'_>]) -> Result<redis::Cmd, CallError> {
    build(limits, None, None)
}

/// Like [`decide`], taking the concurrency limits among `limits` as leases held by `id`
/// (RL.ACQUIRE, or ACQUIRE groups of RL.ALL).
pub fn acquire(limits: &[Limit<'_>], id: &str) -> Result<redis::Cmd, CallError> {
    build(limits, Some(id), None)
}

/// Like [`decide`], the token buckets among `limits` reserving what does not fit now within
/// `max_wait` (RL.RESERVE, or RESERVE groups of RL.ALL); the other limits decide now.
pub fn reserve(limits: &[Limit<'_>], max_wait: Duration) -> Result<redis::Cmd, CallError> {
    build(limits, None, Some(&seconds(whole_ms(max_wait))))
}

/// A wait in whole milliseconds (the grammar's unit), rounded down, as nanoseconds.
pub fn whole_ms(wait: Duration) -> u128 {
    wait.as_millis() * 1_000_000
}

/// The kind a limit is sent as: a token bucket reserving when `reserving`, its own kind otherwise.
fn sent_as(limit: &Limit<'_>, reserving: bool) -> LimiterKind {
    match limit.policy.kind() {
        LimiterKind::TokenBucket if reserving => LimiterKind::Reservation,
        kind => kind,
    }
}

fn build(
    limits: &[Limit<'_>],
    lease_id: Option<&str>,
    max_wait: Option<&str>,
) -> Result<redis::Cmd, CallError> {
    check_keys(limits)?;
    let reserving = max_wait.is_some();
    let args = |cmd: &mut redis::Cmd, limit: &Limit<'_>| {
        arguments(cmd, limit, sent_as(limit, reserving), lease_id, max_wait.unwrap_or_default())
    };
    match limits {
        [] => Err(CallError::Usage("no limits to check")),
        [one] => {
            let mut cmd = redis::cmd(sent_as(one, reserving).command());
            cmd.arg(one.key);
            args(&mut cmd, one)?;
            Ok(cmd)
        }
        // RL.TOKEN takes several buckets itself.
        many if !reserving && many.iter().all(|l| l.policy.kind() == LimiterKind::TokenBucket) => {
            let mut cmd = redis::cmd(LimiterKind::TokenBucket.command());
            for limit in many {
                cmd.arg(limit.key);
                args(&mut cmd, limit)?;
            }
            Ok(cmd)
        }
        many => {
            let mut cmd = redis::cmd("RL.ALL");
            for limit in many {
                cmd.arg(limit.key).arg(sent_as(limit, reserving).group());
                args(&mut cmd, limit)?;
            }
            Ok(cmd)
        }
    }
}

/// `RL.HOLD ledger id ttl CHARGE|RETURN` then RL.ALL's groups: `limits` decided as one, the units of
/// the kinds that hold ([`holds`]) held under `id` in `ledger`.
pub fn hold(
    ledger: &str,
    id: &str,
    ttl: Duration,
    abandon: Abandon,
    limits: &[Limit<'_>],
) -> Result<redis::Cmd, CallError> {
    check_keys(limits)?;
    if limits.is_empty() {
        return Err(CallError::Usage("no limits to check"));
    }
    let mut cmd = redis::cmd("RL.HOLD");
    // The words' order is the enum's (core's parse reads them so).
    cmd.arg(ledger).arg(id).arg(seconds(whole_ms(ttl))).arg(Abandon::WORDS[abandon as usize]);
    for limit in limits {
        let kind = limit.policy.kind();
        cmd.arg(limit.key).arg(kind.group());
        arguments(&mut cmd, limit, kind, None, "")?;
    }
    Ok(cmd)
}

/// `RL.SETTLE ledger id FINAL|PARTIAL key units ...`: each held key's usage so far (PARTIAL) or its
/// actual (FINAL).
pub fn settle(ledger: &str, id: &str, mode: Mode, usage: &[(&str, u64)]) -> Result<redis::Cmd, CallError> {
    if usage.is_empty() {
        return Err(CallError::Usage("no held limits to settle"));
    }
    let mut cmd = redis::cmd("RL.SETTLE");
    cmd.arg(ledger).arg(id).arg(Mode::WORDS[mode as usize]);
    for (key, units) in usage {
        cmd.arg(*key).arg(*units);
    }
    Ok(cmd)
}

/// Whether RL.HOLD holds a limit of `kind` (settled later), rather than deciding it as RL.ALL does:
/// the kinds that take refunds of a cost (the contract's `holds.held_kinds`).
pub fn holds(kind: LimiterKind) -> bool {
    kind.refunds() && kind.request_form() == RequestForm::Cost
}

/// The ledger a hold names by default (the contract's `holds.ledger`): the first key's hash tag (the
/// text between its first `{` and the next `}`, when not empty), else the whole first key, in braces,
/// so the ledger shares the limits' slot.
pub fn ledger_of(first_key: &str) -> String {
    let tag = first_key
        .split_once('{')
        .and_then(|(_, rest)| rest.split_once('}'))
        .map(|(tag, _)| tag)
        .filter(|tag| !tag.is_empty())
        .unwrap_or(first_key);
    format!("rl:holds:{{{tag}}}")
}

/// A limit's arguments after its key, in the grammar of the kind it is sent as
/// (`ratelimit_core::kind`): its two parameters, then its request.
fn arguments(
    cmd: &mut redis::Cmd,
    limit: &Limit<'_>,
    kind: LimiterKind,
    lease_id: Option<&str>,
    max_wait: &str,
) -> Result<(), CallError> {
    let [p1, p2] = limit.policy.params();
    cmd.arg(p1).arg(p2);
    kind.request_form()
        .render(limit.cost, lease_id, request_id, max_wait, |word| match word {
            Word::Text(text) => {
                cmd.arg(text);
            }
            Word::Number(n) => {
                cmd.arg(n);
            }
        })
        .map_err(CallError::Usage)
}

/// `RL.RESERVE key capacity rate min max_wait UPTO max`: at least `min` tokens, up to `max`, within
/// `max_wait`.
pub fn reserve_batch(
    key: &str,
    policy: &Policy,
    min: u64,
    max: u64,
    max_wait: Duration,
) -> Result<redis::Cmd, CallError> {
    if policy.kind() != LimiterKind::TokenBucket {
        return Err(CallError::Usage("batches are taken from token buckets"));
    }
    let mut cmd = with_params(LimiterKind::Reservation.command(), key, policy);
    cmd.arg(min).arg(seconds(whole_ms(max_wait))).arg("UPTO").arg(max);
    Ok(cmd)
}

/// `RL.REFUND KIND key p1 p2 units`: gives units back to a limit whose kind takes refunds.
pub fn refund(key: &str, policy: &Policy, units: u64) -> Result<redis::Cmd, CallError> {
    if !policy.kind().refunds() {
        return Err(CallError::Usage("this kind of limit takes no refunds"));
    }
    let mut cmd = redis::cmd("RL.REFUND");
    cmd.arg(policy.kind().group()).arg(key).arg(policy.params()).arg(units);
    Ok(cmd)
}

/// `RL.REFUND TOKEN key capacity rate tokens`: gives tokens back to a bucket.
pub fn refund_tokens(key: &str, policy: &Policy, tokens: u64) -> Result<redis::Cmd, CallError> {
    if policy.kind() != LimiterKind::TokenBucket {
        return Err(CallError::Usage("only token buckets take refunds of reserved tokens"));
    }
    refund(key, policy, tokens)
}

/// A command on `key` with `policy`'s parameters after it (`RL.TAKE`, `RL.INSPECT`).
pub fn with_params(name: &str, key: &str, policy: &Policy) -> redis::Cmd {
    let mut cmd = redis::cmd(name);
    cmd.arg(key).arg(policy.params());
    cmd
}

/// `RL.TAKE key capacity rate max`: as many tokens as the bucket holds now, up to `max`.
pub fn take(key: &str, policy: &Policy, max: u64) -> redis::Cmd {
    let mut cmd = with_params("RL.TAKE", key, policy);
    cmd.arg(max);
    cmd
}

/// `RL.INSPECT key [p1 p2]`: what `key` holds; with `policy`'s parameters, what a request would
/// meet now.
pub fn inspect(key: &str, policy: Option<&Policy>) -> redis::Cmd {
    match policy {
        Some(policy) => with_params("RL.INSPECT", key, policy),
        None => redis::cmd("RL.INSPECT").arg(key).clone(),
    }
}

/// `RL.RELEASE key id`.
pub fn release(key: &str, id: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("RL.RELEASE");
    cmd.arg(key).arg(id);
    cmd
}

/// `RL.RENEW key lease id`.
pub fn renew(key: &str, lease: Duration, id: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("RL.RENEW");
    cmd.arg(key).arg(seconds(lease.as_nanos())).arg(id);
    cmd
}

/// A request id unique to this process run and call, for RL.SLIDE.
fn request_id() -> String {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    static RUN: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let run = RUN.get_or_init(|| {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        h.finish()
    });
    format!("{run:x}-{:x}", SEQ.fetch_add(1, Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(cmd: &redis::Cmd) -> Vec<String> {
        cmd.args_iter()
            .map(|a| match a {
                redis::Arg::Simple(b) => String::from_utf8_lossy(b).into_owned(),
                _ => "<other>".into(),
            })
            .collect()
    }

    #[test]
    fn builds_one_call_per_check() {
        let route = Policy::token_bucket(10, 5.0).unwrap();
        let global = Policy::token_bucket(100, 0.5).unwrap();
        let both = [Limit::new("rl:{c}:r", &route, 1), Limit::new("rl:{c}:all", &global, 1)];
        assert_eq!(
            args(&decide(&both).unwrap()),
            ["RL.TOKEN", "rl:{c}:r", "10", "5", "1", "rl:{c}:all", "100", "0.5", "1"]
        );
        let fixed = Policy::fixed_window(5, Duration::from_millis(1500)).unwrap();
        assert_eq!(
            args(&decide(&[Limit::new("k", &fixed, 2)]).unwrap()),
            ["RL.FIXED", "k", "5", "1.500", "2"]
        );
        let log = Policy::sliding_log(5, Duration::from_secs(60)).unwrap();
        let slide = args(&decide(&[Limit::new("k", &log, 1)]).unwrap());
        assert_eq!(slide[..4], ["RL.SLIDE", "k", "5", "60.000"]);
        assert!(decide(&[Limit::new("k", &log, 2)]).is_err());
        let mixed = args(&decide(&[Limit::new("a", &fixed, 1), Limit::new("b", &log, 1)]).unwrap());
        assert_eq!(mixed[..10], ["RL.ALL", "a", "FIXED", "5", "1.500", "1", "b", "SLIDE", "5", "60.000"]);
        assert!(decide(&[Limit::new("a", &fixed, 1), Limit::new("b", &log, 2)]).is_err());
        assert!(decide(&[]).is_err());
        let slots = Policy::concurrency(5, Duration::from_millis(30_000)).unwrap();
        assert!(matches!(decide(&[Limit::new("c", &slots, 1)]), Err(CallError::Usage(_))));
        assert_eq!(
            args(&acquire(&[Limit::new("c", &slots, 2)], "id1").unwrap()),
            ["RL.ACQUIRE", "c", "5", "30.000", "id1", "WEIGHT", "2"]
        );
        assert_eq!(
            args(&acquire(&[Limit::new("a", &fixed, 1), Limit::new("c", &slots, 1)], "id1").unwrap()),
            ["RL.ALL", "a", "FIXED", "5", "1.500", "1", "c", "ACQUIRE", "5", "30.000", "id1", "WEIGHT", "1"]
        );
        assert!(acquire(&[Limit::new("c", &slots, 0)], "id1").is_err());
        assert_eq!(args(&release("c", "id1")), ["RL.RELEASE", "c", "id1"]);
        assert_eq!(args(&renew("c", Duration::from_secs(30), "id1")), ["RL.RENEW", "c", "30.000", "id1"]);
        assert_eq!(args(&take("t", &route, 3)), ["RL.TAKE", "t", "10", "5", "3"]);
        assert_eq!(args(&inspect("t", None)), ["RL.INSPECT", "t"]);
        assert_eq!(args(&inspect("t", Some(&fixed))), ["RL.INSPECT", "t", "5", "1.500"]);
    }

    #[test]
    fn holds_and_settles_name_their_ledger_and_groups() {
        let tpm = Policy::fixed_window(100_000, Duration::from_secs(60)).unwrap();
        let rpm = Policy::token_bucket(60, 1.0).unwrap();
        let limits = [Limit::new("rl:{key:42}:rpm", &rpm, 1), Limit::new("rl:{key:42}:tpm", &tpm, 1500)];
        let ledger = ledger_of(limits[0].key);
        assert_eq!(ledger, "rl:holds:{key:42}");
        assert_eq!(ledger_of("plain"), "rl:holds:{plain}");
        assert_eq!(ledger_of("a{}b"), "rl:holds:{a{}b}");
        let held = hold(&ledger, "req-1", Duration::from_millis(120_500), Abandon::Return, &limits).unwrap();
        assert_eq!(
            args(&held),
            [
                "RL.HOLD",
                "rl:holds:{key:42}",
                "req-1",
                "120.500",
                "RETURN",
                "rl:{key:42}:rpm",
                "TOKEN",
                "60",
                "1",
                "1",
                "rl:{key:42}:tpm",
                "FIXED",
                "100000",
                "60.000",
                "1500"
            ]
        );
        let partial = settle(&ledger, "req-1", Mode::Partial, &[("rl:{key:42}:tpm", 900)]).unwrap();
        assert_eq!(
            args(&partial),
            ["RL.SETTLE", "rl:holds:{key:42}", "req-1", "PARTIAL", "rl:{key:42}:tpm", "900"]
        );
        assert!(settle(&ledger, "req-1", Mode::Final, &[]).is_err());
        assert!(hold(&ledger, "req-1", Duration::from_secs(1), Abandon::Charge, &[]).is_err());
        assert!(holds(LimiterKind::TokenBucket) && !holds(LimiterKind::SlidingLog));
    }

    #[test]
    fn reservations_are_sent_as_the_reserving_kind_of_token_buckets() {
        let bucket = Policy::token_bucket(10, 5.0).unwrap();
        let fixed = Policy::fixed_window(5, Duration::from_millis(1500)).unwrap();
        let wait = Duration::from_micros(2_500_900);
        assert_eq!(
            args(&reserve(&[Limit::new("k", &bucket, 2)], wait).unwrap()),
            ["RL.RESERVE", "k", "10", "5", "2", "2.500"]
        );
        assert_eq!(
            args(&reserve(&[Limit::new("a", &bucket, 1), Limit::new("b", &fixed, 1)], wait).unwrap()),
            ["RL.ALL", "a", "RESERVE", "10", "5", "1", "2.500", "b", "FIXED", "5", "1.500", "1"]
        );
        assert_eq!(
            args(&reserve_batch("k", &bucket, 2, 8, Duration::from_secs(1)).unwrap()),
            ["RL.RESERVE", "k", "10", "5", "2", "1.000", "UPTO", "8"]
        );
        assert!(reserve_batch("k", &fixed, 1, 2, wait).is_err());
        assert_eq!(args(&refund("b", &fixed, 1).unwrap()), ["RL.REFUND", "FIXED", "b", "5", "1.500", "1"]);
    }
}

//! RL.* commands as redis-rs values: one place that turns limits into arguments.

use crate::error::CallError;
use crate::policy::Policy;
use ratelimit_core::args::seconds;
use ratelimit_core::kind::{LimiterKind, Word};
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

/// The one RL.* call that decides `limits` atomically: one limit goes to its own command, several
/// token buckets into one RL.TOKEN, several limits of other or mixed kinds into one RL.ALL.
pub(crate) fn decide(limits: &[Limit<'_>]) -> Result<redis::Cmd, CallError> {
    build(limits, None)
}

/// Like [`decide`], taking the concurrency limits among `limits` as leases held by `id`
/// (RL.ACQUIRE, or ACQUIRE groups of RL.ALL).
pub(crate) fn acquire(limits: &[Limit<'_>], id: &str) -> Result<redis::Cmd, CallError> {
    build(limits, Some(id))
}

fn build(limits: &[Limit<'_>], lease_id: Option<&str>) -> Result<redis::Cmd, CallError> {
    match limits {
        [] => Err(CallError::Usage("no limits to check")),
        [one] => {
            let mut cmd = redis::cmd(one.policy.kind().command());
            cmd.arg(one.key);
            arguments(&mut cmd, one, lease_id)?;
            Ok(cmd)
        }
        // RL.TOKEN takes several buckets itself.
        many if many.iter().all(|l| l.policy.kind() == LimiterKind::TokenBucket) => {
            let mut cmd = redis::cmd(LimiterKind::TokenBucket.command());
            for limit in many {
                cmd.arg(limit.key);
                arguments(&mut cmd, limit, lease_id)?;
            }
            Ok(cmd)
        }
        many => {
            let mut cmd = redis::cmd("RL.ALL");
            for limit in many {
                cmd.arg(limit.key).arg(limit.policy.kind().group());
                arguments(&mut cmd, limit, lease_id)?;
            }
            Ok(cmd)
        }
    }
}

/// A limit's arguments after its key, in its kind's grammar (`ratelimit_core::kind`): its two
/// parameters, then its request.
fn arguments(cmd: &mut redis::Cmd, limit: &Limit<'_>, lease_id: Option<&str>) -> Result<(), CallError> {
    let [p1, p2] = limit.policy.params();
    cmd.arg(p1).arg(p2);
    let form = limit.policy.kind().request_form();
    form.render(limit.cost, lease_id, request_id, |word| match word {
        Word::Text(text) => {
            cmd.arg(text);
        }
        Word::Number(n) => {
            cmd.arg(n);
        }
    })
    .map_err(CallError::Usage)
}

/// `RL.REFUND TOKEN key capacity rate tokens`: gives tokens back to a bucket.
pub(crate) fn refund_tokens(key: &str, policy: &Policy, tokens: u64) -> Result<redis::Cmd, CallError> {
    if policy.kind() != LimiterKind::TokenBucket {
        return Err(CallError::Usage("only token buckets take refunds of reserved tokens"));
    }
    let mut cmd = redis::cmd("RL.REFUND");
    cmd.arg(policy.kind().group()).arg(key).arg(policy.params()).arg(tokens);
    Ok(cmd)
}

/// A command on `key` with `policy`'s parameters after it (`RL.TAKE`, `RL.INSPECT`).
pub(crate) fn with_params(name: &str, key: &str, policy: &Policy) -> redis::Cmd {
    let mut cmd = redis::cmd(name);
    cmd.arg(key).arg(policy.params());
    cmd
}

/// `RL.RELEASE key id`.
pub(crate) fn release(key: &str, id: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("RL.RELEASE");
    cmd.arg(key).arg(id);
    cmd
}

/// `RL.RENEW key lease id`.
pub(crate) fn renew(key: &str, lease: Duration, id: &str) -> redis::Cmd {
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
    }
}

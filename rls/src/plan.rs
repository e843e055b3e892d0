//! What a request asks: each descriptor's rule (the configuration's, or the limit Envoy sent with it),
//! its cost and its Redis key, after `unlimited` and `replaces` are applied as envoyproxy/ratelimit
//! applies them.

use crate::config::{Config, Rule};
use crate::limits::{self, Algorithm, Unit};
use crate::proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use redis_ratelimit_client::Policy;
use std::collections::HashSet;
use std::sync::Arc;

/// How descriptor keys are hashed on Redis Cluster (`RLS_HASH_TAG`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HashTag {
    /// `rl:{rls.<domain>}:<algorithm>:<entries>`: a domain's keys share one slot, so every request is
    /// one RL.ALL; a domain's load is on one primary.
    #[default]
    Domain,
    /// `rl:{rls.<domain>:<entries>}:<algorithm>`: each descriptor in a slot of its own, a domain spread
    /// over the cluster; a request whose keys fall in different slots cannot be one RL.ALL, and is
    /// decided descriptor by descriptor (envoyproxy/ratelimit's way, counted in
    /// `ratelimit_service_cross_slot_requests_total`).
    Descriptor,
}

/// What one descriptor of a request gets.
#[derive(Debug)]
pub enum Slot {
    /// No rule matched (or its rule was replaced): OK, with no limit.
    Free,
    /// `unlimited: true`: OK, with the whole `u32` remaining, as envoyproxy/ratelimit says.
    Unlimited,
    /// `requests_per_unit: 0`, or a sliding log's cost other than 1: over the limit; nothing to ask Redis.
    Blocked(Limit),
    /// A limit to decide in Redis.
    Limited(Limit),
    /// The extension: a concurrency limit's lease to give back (`rls_release` entry): RL.RELEASE,
    /// answered OK.
    Release(Limit, String),
    /// A descriptor that cannot be decided as sent (INVALID_ARGUMENT), with the reason.
    Refused(String),
}

/// The entry naming a concurrency lease to take (`rls_lease`) or to give back (`rls_release`): the
/// descriptor's last, left out of its matching and of its key.
pub const LEASE_ENTRY: &str = "rls_lease";
pub const RELEASE_ENTRY: &str = "rls_release";

/// A limit as the reply describes it, and how Redis decides it.
#[derive(Debug)]
pub struct Limit {
    pub rule: RuleRef,
    pub cost: u64,
    /// The key of its state in Redis.
    pub key: String,
    /// A concurrency limit's lease id (the `rls_lease` entry's value).
    pub lease: Option<String>,
    /// The request id a limit with an `estimate` is held under (the hold entry's value).
    pub hold: Option<String>,
    /// The key of its counters (crate::metrics): the rule's full key, or with `detailed_metric` (and
    /// for Envoy's own limits) the request's entries.
    pub stat_key: String,
}

/// A configured rule, or one built from Envoy's per-descriptor override.
#[derive(Debug, Clone)]
pub enum RuleRef {
    Configured(Arc<Rule>),
    Override { requests_per_unit: u32, unit: Unit, policy: Option<Policy> },
}

impl RuleRef {
    /// The units a hold takes (a configured `estimate`).
    pub fn estimate(&self) -> Option<u64> {
        match self {
            RuleRef::Configured(r) => r.estimate,
            RuleRef::Override { .. } => None,
        }
    }

    pub fn requests_per_unit(&self) -> u32 {
        match self {
            RuleRef::Configured(r) => r.requests_per_unit,
            RuleRef::Override { requests_per_unit, .. } => *requests_per_unit,
        }
    }

    pub fn unit(&self) -> Unit {
        match self {
            RuleRef::Configured(r) => r.unit,
            RuleRef::Override { unit, .. } => *unit,
        }
    }

    pub fn name(&self) -> &str {
        match self {
            RuleRef::Configured(r) => &r.name,
            RuleRef::Override { .. } => "",
        }
    }

    /// Counted and decided, but never denies (envoyproxy/ratelimit's `shadow_mode`; an override never is).
    pub fn shadow(&self) -> bool {
        matches!(self, RuleRef::Configured(r) if r.shadow_mode)
    }

    /// envoyproxy/ratelimit's `quota_mode` (and not shadow: a shadow limit never denies).
    pub fn quota(&self) -> bool {
        matches!(self, RuleRef::Configured(r) if r.quota_mode && !r.shadow_mode)
    }

    pub fn policy(&self) -> Option<&Policy> {
        match self {
            RuleRef::Configured(r) => r.policy.as_ref(),
            RuleRef::Override { policy, .. } => policy.as_ref(),
        }
    }

    pub fn algorithm(&self) -> Algorithm {
        match self {
            RuleRef::Configured(r) => r.algorithm,
            RuleRef::Override { .. } => Algorithm::FixedWindow,
        }
    }
}

/// Each descriptor's slot, in the request's order.
pub fn plan(
    config: &Config,
    domain: &str,
    descriptors: &[RateLimitDescriptor],
    hits_addend: u32,
    hash: HashTag,
    hold_entry: &str,
) -> Vec<Slot> {
    // envoyproxy/ratelimit: a request's hits_addend of 0 means 1; a descriptor's own, when sent, wins.
    let request_cost = u64::from(hits_addend.max(1));
    // The lease entries split off: what is matched and keyed is the rest.
    let split: Vec<(RateLimitDescriptor, Option<Lease>, Option<String>)> = descriptors
        .iter()
        .map(|d| {
            let (rest, hold) = hold_of(d, hold_entry);
            let (rest, lease) = lease_of(&rest);
            (rest, lease, hold)
        })
        .collect();
    let found: Vec<Option<RuleRef>> = split.iter().map(|(d, ..)| rule_of(config, domain, d)).collect();
    let replaced: HashSet<&str> = found
        .iter()
        .flatten()
        .filter_map(|r| match r {
            RuleRef::Configured(rule) => Some(rule.replaces.iter().map(String::as_str)),
            RuleRef::Override { .. } => None,
        })
        .flatten()
        .collect();
    split
        .iter()
        .zip(found.iter())
        .map(|((descriptor, lease, hold), rule)| {
            let Some(rule) = rule else { return Slot::Free };
            let concurrency = rule.algorithm() == Algorithm::Concurrency;
            if !rule.name().is_empty() && replaced.contains(rule.name()) {
                return Slot::Free;
            }
            if matches!(rule, RuleRef::Configured(r) if r.unlimited) {
                return Slot::Unlimited;
            }
            let cost = descriptor.hits_addend.unwrap_or(request_cost);
            let stat_key = match rule {
                RuleRef::Configured(r) if !r.detailed_metric => r.full_key.clone(),
                _ => detailed_key(domain, descriptor),
            };
            let key = key(domain, rule.algorithm(), descriptor, hash);
            let (lease, release) = match lease.clone() {
                Some((true, id)) => (None, Some(id)),
                // A lease of a limit that is not a concurrency limit: nothing to hold, decided as usual.
                Some((false, id)) => (Some(id).filter(|_| concurrency), None),
                None => (None, None),
            };
            let hold = hold.clone().filter(|_| matches!(rule, RuleRef::Configured(r) if r.estimate.is_some()));
            let limit = Limit { rule: rule.clone(), cost, key, lease, hold, stat_key };
            if let Some(id) = release {
                // A release of a limit that is not a concurrency limit gives nothing back: OK, uncharged.
                return if concurrency { Slot::Release(limit, id) } else { Slot::Free };
            }
            if concurrency && limit.lease.as_deref().is_none_or(str::is_empty) {
                return Slot::Refused(format!(
                    "descriptor {}: a concurrency limit needs its lease id as a last entry {LEASE_ENTRY} (and {RELEASE_ENTRY} to give it back)",
                    limit.stat_key
                ));
            }
            // A sliding log counts requests: a cost other than 1 can never fit.
            let never_fits = rule.algorithm() == Algorithm::SlidingLog && cost != 1;
            match rule.policy() {
                Some(_) if !never_fits => Slot::Limited(limit),
                _ => Slot::Blocked(limit),
            }
        })
        .collect()
}

/// A lease entry: (true, id) to release, (false, id) to take.
type Lease = (bool, String);

/// The descriptor without its request id entry (`hold_entry`, wherever it is), and that id.
fn hold_of(descriptor: &RateLimitDescriptor, hold_entry: &str) -> (RateLimitDescriptor, Option<String>) {
    let mut rest = descriptor.clone();
    match rest.entries.iter().position(|e| e.key == hold_entry) {
        Some(i) => {
            let id = rest.entries.remove(i).value;
            (rest, Some(id).filter(|id| !id.is_empty()))
        }
        None => (rest, None),
    }
}

/// The descriptor without its last entry when that names a lease: (true, id) to release, (false, id) to take.
fn lease_of(descriptor: &RateLimitDescriptor) -> (RateLimitDescriptor, Option<Lease>) {
    match descriptor.entries.last() {
        Some(e) if e.key == LEASE_ENTRY || e.key == RELEASE_ENTRY => {
            let mut rest = descriptor.clone();
            rest.entries.pop();
            (rest, Some((e.key == RELEASE_ENTRY, e.value.clone())))
        }
        _ => (descriptor.clone(), None),
    }
}

fn rule_of(config: &Config, domain: &str, descriptor: &RateLimitDescriptor) -> Option<RuleRef> {
    if let Some(limit) = &descriptor.limit {
        // Envoy's own limit for this descriptor: a fixed window, as envoyproxy/ratelimit applies it.
        let unit = Unit::from_proto(limit.unit)?;
        let policy = limits::policy(Algorithm::FixedWindow, limit.requests_per_unit, unit, None).ok()?;
        return Some(RuleRef::Override { requests_per_unit: limit.requests_per_unit, unit, policy });
    }
    let entries = descriptor.entries.iter().map(|e| (e.key.as_str(), e.value.as_str()));
    config.rule(domain, entries).cloned().map(RuleRef::Configured)
}

/// envoyproxy/ratelimit's detailed metric key: `domain.key_value.key2_value2`.
fn detailed_key(domain: &str, descriptor: &RateLimitDescriptor) -> String {
    let mut out = domain.to_string();
    for entry in &descriptor.entries {
        out.push('.');
        out.push_str(&entry.key);
        out.push('_');
        out.push_str(&entry.value);
    }
    out
}

/// `rl:{rls.<domain>}:<algorithm>:<key>=<value>:...` (HashTag::Domain): the domain is the hash tag, so
/// a request's keys share a Redis Cluster slot and one RL.ALL decides them;
/// `rl:{rls.<domain>:<key>=<value>:...}:<algorithm>` (HashTag::Descriptor): the descriptor is. The
/// algorithm is in the key, so changing a descriptor's algorithm starts a new state instead of meeting
/// another limiter's. `%`, `{`, `}`, `:` and `=` inside names are written `%25`, `%7B`, `%7D`, `%3A`,
/// `%3D`, so distinct descriptors never share a key and no name ends the hash tag.
pub fn key(domain: &str, algorithm: Algorithm, descriptor: &RateLimitDescriptor, hash: HashTag) -> String {
    let mut key = String::with_capacity(24 + domain.len() + descriptor.entries.len() * 16);
    key.push_str("rl:{rls.");
    escape(&mut key, domain);
    let entries = |key: &mut String| {
        for entry in &descriptor.entries {
            key.push(':');
            escape(key, &entry.key);
            key.push('=');
            escape(key, &entry.value);
        }
    };
    match hash {
        HashTag::Domain => {
            key.push_str("}:");
            key.push_str(algorithm.name());
            entries(&mut key);
        }
        HashTag::Descriptor => {
            entries(&mut key);
            key.push_str("}:");
            key.push_str(algorithm.name());
        }
    }
    key
}

/// The Redis Cluster slot of `key`: CRC16 (XMODEM) of its hash tag (the text between the first `{` and
/// the next `}` when not empty), modulo 16384, as Redis computes it.
pub fn keyslot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let tagged = bytes.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &bytes[open + 1..];
        rest.iter().position(|&b| b == b'}').filter(|&close| close > 0).map(|close| &rest[..close])
    });
    let mut crc: u16 = 0;
    for &b in tagged.unwrap_or(bytes) {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
        }
    }
    crc % 16384
}

fn escape(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '%' => out.push_str("%25"),
            '{' => out.push_str("%7B"),
            '}' => out.push_str("%7D"),
            ':' => out.push_str("%3A"),
            '=' => out.push_str("%3D"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;

    fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
        RateLimitDescriptor {
            entries: entries
                .iter()
                .map(|(k, v)| Entry { key: k.to_string(), value: v.to_string() })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn keys_cannot_collide_or_take_over_the_hash_tag() {
        let d = HashTag::Domain;
        let a = key("d}x", Algorithm::FixedWindow, &descriptor(&[("a:b", "c"), ("d", "e=f")]), d);
        assert_eq!(a, "rl:{rls.d%7Dx}:fixed_window:a%3Ab=c:d=e%3Df");
        let b = key("d}x", Algorithm::FixedWindow, &descriptor(&[("a", "b:c"), ("d", "e=f")]), d);
        assert_ne!(a, b);
        assert_eq!(
            key("d", Algorithm::TokenBucket, &descriptor(&[("k", "")]), d),
            "rl:{rls.d}:token_bucket:k="
        );
        let per = key("d", Algorithm::TokenBucket, &descriptor(&[("k", "}v")]), HashTag::Descriptor);
        assert_eq!(per, "rl:{rls.d:k=%7Dv}:token_bucket");
    }

    #[test]
    fn keyslot_is_redis_s() {
        // Redis' own examples (cluster spec): "123456789" is CRC16 0x31C3; tags hash alone.
        assert_eq!(keyslot("123456789"), 0x31C3);
        assert_eq!(keyslot("{user1000}.following"), keyslot("user1000"));
        assert_ne!(keyslot("foo{}{bar}"), keyslot("bar"), "an empty tag: the whole key is hashed");
    }
}

//! The configuration: domains, each a tree of descriptors as envoyproxy/ratelimit reads them, and the
//! lookup that finds a request descriptor's rule (the most specific match).

mod load;
mod source;

pub use load::{load, ConfigError, Source};
pub use source::{read_dir, watched, Watched};

use crate::limits::{Algorithm, Unit};
use redis_ratelimit_client::Policy;
use std::collections::HashMap;
use std::sync::Arc;

/// Between the levels of a descriptor's full key: `domain.key_value.key2` (envoyproxy/ratelimit's).
const ENTRY_SEPARATOR: char = '.';

/// Every domain's descriptor tree.
#[derive(Debug, Default)]
pub struct Config {
    domains: HashMap<String, Domain>,
}

#[derive(Debug)]
struct Domain {
    root: Level,
}

/// One level of a descriptor tree: entries by `key_value` (or `key` alone, the default for any value),
/// and the wildcard entries (a value ending in `*`) by the prefix before the `*`, in file order.
#[derive(Debug, Default)]
struct Level {
    exact: HashMap<String, Entry>,
    wildcards: Vec<(String, Entry)>,
}

#[derive(Debug)]
struct Entry {
    rule: Option<Arc<Rule>>,
    children: Level,
}

/// A descriptor's `rate_limit`, with the extension's algorithm, validated into a client policy.
#[derive(Debug)]
pub struct Rule {
    /// `domain.key_value.key2`: the name envoyproxy/ratelimit gives its stats.
    pub full_key: String,
    /// `rate_limit.name`, what other rules' `replaces` refer to (empty: none).
    pub name: String,
    pub replaces: Vec<String>,
    pub unit: Unit,
    pub requests_per_unit: u32,
    pub unlimited: bool,
    pub shadow_mode: bool,
    pub detailed_metric: bool,
    /// envoyproxy/ratelimit's `quota_mode`: over its limit, the descriptor's status says so but the
    /// request is over the limit only when every quota descriptor of it is.
    pub quota_mode: bool,
    pub algorithm: Algorithm,
    /// None when unlimited, or when `requests_per_unit` is 0 (every request is over the limit).
    pub policy: Option<Policy>,
    /// The extension's `estimate`: the units a request's hold takes before its usage is known (a
    /// descriptor with the request id entry, `RLS_HOLD_ENTRY`), settled by its second call.
    pub estimate: Option<u64>,
}

impl Config {
    /// The domains configured.
    pub fn domains(&self) -> impl Iterator<Item = &str> {
        self.domains.keys().map(String::as_str)
    }

    /// The rule for one request descriptor (its entries as `(key, value)`), as envoyproxy/ratelimit
    /// finds it: level by level, `key_value` first, then the first wildcard whose prefix `key_value`
    /// starts with, then `key` alone; the rule applies only when the descriptor ends at the entry that
    /// holds it (a longer or shorter descriptor than the configuration gets no limit).
    pub fn rule<'e>(
        &self,
        domain: &str,
        entries: impl ExactSizeIterator<Item = (&'e str, &'e str)>,
    ) -> Option<&Arc<Rule>> {
        let mut level = &self.domains.get(domain)?.root;
        let last = entries.len().checked_sub(1)?;
        let mut scratch = String::new();
        for (i, (key, value)) in entries.enumerate() {
            scratch.clear();
            scratch.push_str(key);
            scratch.push('_');
            scratch.push_str(value);
            let entry = level
                .exact
                .get(&scratch)
                .or_else(|| {
                    level
                        .wildcards
                        .iter()
                        .find(|(prefix, _)| scratch.starts_with(prefix.as_str()))
                        .map(|(_, e)| e)
                })
                .or_else(|| level.exact.get(key))?;
            if i == last {
                return entry.rule.as_ref();
            }
            level = &entry.children;
        }
        None
    }
}

#[cfg(test)]
mod tests;

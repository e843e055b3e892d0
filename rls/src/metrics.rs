//! The service's counters, rendered in Prometheus' text format with envoyproxy/ratelimit's stat names
//! as its Prometheus mapping (src/stats/prom/default_mapper.yaml) writes them:
//! `ratelimit.service.rate_limit.<domain>.<key>.total_hits` is
//! `ratelimit_service_rate_limit_total_hits{domain="<domain>",key1="<key>"}` (and `key2` for the next
//! level), the same for `over_limit`, `near_limit`, `within_limit` and `shadow_mode`; then
//! `ratelimit_service_config_load_success` / `_error`, `ratelimit_service_should_rate_limit_error
//! {err_type="redis_error"}`, and this service's own: the Redis outages and the breaker.
//!
//! Counts are in hits (a request's cost), as envoyproxy/ratelimit counts them. A descriptor's key is its
//! rule's full key (`domain.key_value.key2`), or with `detailed_metric` the request's own entries
//! (`domain.key_value.key2_value2`).

use redis_ratelimit_client::Limiter;
use std::collections::HashMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, RwLock};

/// One descriptor key's counters.
#[derive(Debug, Default)]
pub struct RuleStats {
    pub total_hits: AtomicU64,
    pub over_limit: AtomicU64,
    pub near_limit: AtomicU64,
    pub within_limit: AtomicU64,
    pub shadow_mode: AtomicU64,
}

/// What one descriptor of a request met, for its counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hit {
    /// Over its limit (a shadow rule: counted as over and in `shadow_mode`, answered OK).
    Over,
    /// Allowed; `used` is how much of `limit` is taken after it, when this descriptor's own decision
    /// says (for `near_limit`).
    Within { used: Option<(u64, u64)> },
    /// Not decided: another descriptor of the request denied it first (total only).
    Undecided,
}

/// The counters of one service.
#[derive(Debug)]
pub struct Metrics {
    rules: RwLock<HashMap<String, Arc<RuleStats>>>,
    near_limit_ratio: f64,
    pub config_load_success: AtomicU64,
    pub config_load_error: AtomicU64,
    pub redis_error: AtomicU64,
    pub service_error: AtomicU64,
    pub outages: AtomicU64,
    /// Requests decided descriptor by descriptor because their keys are in different cluster slots.
    pub cross_slot: AtomicU64,
    down: AtomicBool,
}

impl Metrics {
    /// `near_limit_ratio`: envoyproxy/ratelimit's `NEAR_LIMIT_RATIO` (0.8 by default): a hit past that
    /// share of the limit is near it.
    pub fn new(near_limit_ratio: f64) -> Metrics {
        Metrics {
            rules: RwLock::default(),
            near_limit_ratio,
            config_load_success: AtomicU64::new(0),
            config_load_error: AtomicU64::new(0),
            redis_error: AtomicU64::new(0),
            service_error: AtomicU64::new(0),
            outages: AtomicU64::new(0),
            cross_slot: AtomicU64::new(0),
            down: AtomicBool::new(false),
        }
    }

    fn stats(&self, key: &str) -> Arc<RuleStats> {
        if let Some(s) = self.rules.read().unwrap_or_else(|p| p.into_inner()).get(key) {
            return s.clone();
        }
        let mut rules = self.rules.write().unwrap_or_else(|p| p.into_inner());
        rules.entry(key.to_string()).or_default().clone()
    }

    /// Counts `cost` hits of the descriptor key `key`.
    pub fn hit(&self, key: &str, cost: u64, shadow: bool, hit: Hit) {
        let s = self.stats(key);
        s.total_hits.fetch_add(cost, Relaxed);
        match hit {
            Hit::Over => {
                s.over_limit.fetch_add(cost, Relaxed);
                if shadow {
                    s.shadow_mode.fetch_add(cost, Relaxed);
                }
            }
            Hit::Within { used } => {
                s.within_limit.fetch_add(cost, Relaxed);
                if let Some((used, limit)) = used {
                    // envoyproxy/ratelimit's: the hits past floor(limit * ratio) are near the limit.
                    let threshold = (limit as f64 * self.near_limit_ratio).floor() as u64;
                    if used > threshold {
                        s.near_limit.fetch_add(cost.min(used - threshold), Relaxed);
                    }
                }
            }
            Hit::Undecided => {}
        }
    }

    /// Redis answered a call.
    pub fn redis_answered(&self) {
        if self.down.load(Relaxed) {
            self.down.store(false, Relaxed);
        }
    }

    /// Redis did not answer a call: a Redis error, and an outage when the call before had answered.
    pub fn redis_failed(&self) {
        self.redis_error.fetch_add(1, Relaxed);
        if !self.down.swap(true, Relaxed) {
            self.outages.fetch_add(1, Relaxed);
        }
    }

    /// A descriptor key's counters as (total_hits, over_limit, near_limit, within_limit, shadow_mode).
    pub fn snapshot(&self, key: &str) -> Option<[u64; 5]> {
        let rules = self.rules.read().unwrap_or_else(|p| p.into_inner());
        rules.get(key).map(|s| {
            [&s.total_hits, &s.over_limit, &s.near_limit, &s.within_limit, &s.shadow_mode]
                .map(|c| c.load(Relaxed))
        })
    }

    /// Every counter in Prometheus' text format (version 0.0.4), with the limiter's breaker and decisions.
    pub fn render(&self, limiter: &Limiter, domains: usize) -> String {
        let mut out = String::with_capacity(4096);
        let rules = self.rules.read().unwrap_or_else(|p| p.into_inner());
        let mut keys: Vec<&String> = rules.keys().collect();
        keys.sort();
        type Field = fn(&RuleStats) -> &AtomicU64;
        let fields: [(&str, Field); 5] = [
            ("total_hits", |s| &s.total_hits),
            ("over_limit", |s| &s.over_limit),
            ("near_limit", |s| &s.near_limit),
            ("within_limit", |s| &s.within_limit),
            ("shadow_mode", |s| &s.shadow_mode),
        ];
        for (stat, field) in fields {
            let name = format!("ratelimit_service_rate_limit_{stat}");
            let _ = writeln!(out, "# HELP {name} envoyproxy/ratelimit's ratelimit.service.rate_limit.<domain>.<key>.{stat}, in hits");
            let _ = writeln!(out, "# TYPE {name} counter");
            for key in &keys {
                let _ = writeln!(out, "{name}{{{}}} {}", labels(key), field(&rules[*key]).load(Relaxed));
            }
        }
        let counter = |out: &mut String, name: &str, help: &str, value: u64| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}");
        };
        counter(
            &mut out,
            "ratelimit_service_config_load_success",
            "configurations loaded (the first and each reload)",
            self.config_load_success.load(Relaxed),
        );
        counter(
            &mut out,
            "ratelimit_service_config_load_error",
            "configurations refused (the previous one kept serving)",
            self.config_load_error.load(Relaxed),
        );
        let _ = writeln!(out, "# HELP ratelimit_service_should_rate_limit_error calls that Redis did not decide (redis_error) or that were refused (service_error)");
        let _ = writeln!(out, "# TYPE ratelimit_service_should_rate_limit_error counter");
        let _ = writeln!(
            out,
            "ratelimit_service_should_rate_limit_error{{err_type=\"redis_error\"}} {}",
            self.redis_error.load(Relaxed)
        );
        let _ = writeln!(
            out,
            "ratelimit_service_should_rate_limit_error{{err_type=\"service_error\"}} {}",
            self.service_error.load(Relaxed)
        );
        counter(
            &mut out,
            "ratelimit_redis_outages_total",
            "times Redis stopped answering after it had answered",
            self.outages.load(Relaxed),
        );
        counter(&mut out, "ratelimit_service_cross_slot_requests_total", "requests whose keys are in different cluster slots (RLS_HASH_TAG=descriptor), decided descriptor by descriptor", self.cross_slot.load(Relaxed));
        let counts = limiter.counts();
        counter(
            &mut out,
            "ratelimit_redis_degraded_decisions_total",
            "decisions the failure policy made because Redis could not",
            counts.degraded,
        );
        counter(
            &mut out,
            "ratelimit_redis_short_circuited_total",
            "calls the open breaker kept away from Redis",
            counts.short_circuited,
        );
        let gauge = |out: &mut String, name: &str, help: &str, value: u64| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}");
        };
        gauge(
            &mut out,
            "ratelimit_redis_breaker_open",
            "1 while the breaker keeps calls away from Redis",
            u64::from(limiter.breaker_open()),
        );
        gauge(
            &mut out,
            "ratelimit_service_config_domains",
            "domains in the configuration in force",
            domains as u64,
        );
        out
    }
}

/// `domain.key1.key2...` as envoyproxy/ratelimit's mapping labels it: `domain`, `key1`, and `key2` when
/// there is a second level.
fn labels(key: &str) -> String {
    let mut parts = key.splitn(4, '.');
    let mut out = String::new();
    for (name, part) in ["domain", "key1", "key2"].iter().zip(parts.by_ref()) {
        if !out.is_empty() {
            out.push(',');
        }
        out.push_str(name);
        out.push_str("=\"");
        for c in part.chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '"' => out.push_str("\\\""),
                '\n' => out.push_str("\\n"),
                c => out.push(c),
            }
        }
        out.push('"');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_as_envoyproxy_s_mapping() {
        assert_eq!(labels("edge.remote_address"), r#"domain="edge",key1="remote_address""#);
        assert_eq!(
            labels("edge.remote_address.path_/login"),
            r#"domain="edge",key1="remote_address",key2="path_/login""#
        );
        assert_eq!(labels("d.k_\"q\"\\"), r#"domain="d",key1="k_\"q\"\\""#);
    }

    #[test]
    fn near_limit_counts_the_hits_past_the_ratio() {
        let m = Metrics::new(0.8);
        // Limit 10: threshold 8. Used 8: not near; used 10 with cost 2: both past 8.
        m.hit("d.k", 1, false, Hit::Within { used: Some((8, 10)) });
        m.hit("d.k", 2, false, Hit::Within { used: Some((10, 10)) });
        m.hit("d.k", 3, true, Hit::Over);
        m.hit("d.k", 1, false, Hit::Undecided);
        assert_eq!(m.snapshot("d.k"), Some([7, 3, 2, 3, 3]));
    }
}

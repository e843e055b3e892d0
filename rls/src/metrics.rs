//! The service's counters, under envoyproxy/ratelimit's stat names as its Prometheus mapping
//! (src/stats/prom/default_mapper.yaml) writes them:
//! `ratelimit.service.rate_limit.<domain>.<key>.total_hits` is
//! `ratelimit_service_rate_limit_total_hits{domain="<domain>",key1="<key>"}` (and `key2` for the next
//! level), the same for `over_limit`, `near_limit`, `within_limit` and `shadow_mode`; then
//! `ratelimit_service_config_load_success` / `_error`, `ratelimit_service_should_rate_limit_error
//! {err_type="redis_error"}`, and this service's own: the Redis outages, the breaker and the overflow.
//!
//! Counts are in hits (a request's cost), as envoyproxy/ratelimit counts them. A descriptor's key is its
//! rule's full key (`domain.key_value.key2`), or with `detailed_metric` the request's own entries
//! (`domain.key_value.key2_value2`).
//!
//! **At most `max_keys` descriptor keys have series of their own** (`RLS_MAX_METRIC_KEYS`,
//! [`DEFAULT_MAX_KEYS`]), the first ones counted: with `detailed_metric` a key comes from the request's
//! values, and a caller sending distinct values would otherwise grow the memory and every scrape without
//! bound. A key past the cap is counted in the one series [`OVERFLOW_LABELS`]
//! (`{domain="",key1="overflow"}`: no configuration has an empty domain, so it is no rule's) of each
//! stat, and each descriptor counted there in `ratelimit_service_metric_overflow_total`; the totals over
//! a family's series stay the hits counted. Each stat family has at most `max_keys + 1` series.
//!
//! Rendered by the `prometheus` crate (tikv's rust-prometheus: its counters, registry and text
//! encoder), in Prometheus' text format 0.0.4. Not `prometheus-client`: its encoder writes OpenMetrics
//! and appends `_total` to every counter's name, which would rename envoyproxy/ratelimit's
//! `..._total_hits` and `config_load_success`. The descriptor families are a collector of their own
//! ([`Rules`]): a family holds series with `key1` alone and with `key2` too, as the mapping writes them,
//! which one registered vector (one set of label names) cannot.

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts, Registry, TextEncoder};
use redis_ratelimit_client::Limiter;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, OnceLock, RwLock};

/// How many descriptor keys have series of their own when `RLS_MAX_METRIC_KEYS` is not set.
pub const DEFAULT_MAX_KEYS: usize = 1000;

/// The labels of the series a key past the cap is counted in: no domain is empty.
pub const OVERFLOW_LABELS: [&str; 2] = ["", "overflow"];

/// The descriptor stats, in the order a [`RuleStats`] holds them.
const STATS: [&str; 5] = ["total_hits", "over_limit", "near_limit", "within_limit", "shadow_mode"];

/// One descriptor key's counters (or the overflow's).
#[derive(Debug, Clone)]
pub struct RuleStats {
    pub total_hits: IntCounter,
    pub over_limit: IntCounter,
    pub near_limit: IntCounter,
    pub within_limit: IntCounter,
    pub shadow_mode: IntCounter,
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

/// The five descriptor families, each in a vector per shape: `{domain}` (a key of no entry),
/// `{domain,key1}` and `{domain,key1,key2}`.
#[derive(Debug)]
pub struct Rules {
    /// `shapes[n - 1][stat]`: the vector of `stat` with `n` labels.
    shapes: Vec<Vec<IntCounterVec>>,
    keys: RwLock<HashMap<String, Arc<RuleStats>>>,
    max_keys: usize,
    overflow: OnceLock<Arc<RuleStats>>,
}

impl Rules {
    fn new(max_keys: usize) -> Rules {
        let vectors = |labels: &[&str]| -> Vec<IntCounterVec> {
            STATS
                .iter()
                .map(|stat| {
                    let help = format!(
                        "envoyproxy/ratelimit's ratelimit.service.rate_limit.<domain>.<key>.{stat}, in hits"
                    );
                    IntCounterVec::new(
                        Opts::new(format!("ratelimit_service_rate_limit_{stat}"), help),
                        labels,
                    )
                    .expect("a valid name and labels")
                })
                .collect()
        };
        Rules {
            shapes: [&["domain"][..], &["domain", "key1"], &["domain", "key1", "key2"]].map(vectors).into(),
            keys: RwLock::default(),
            max_keys,
            overflow: OnceLock::new(),
        }
    }

    /// The series of `labels` (1 to 3 values) in each family.
    fn series(&self, labels: &[&str]) -> RuleStats {
        let vectors = &self.shapes[labels.len() - 1];
        let [total_hits, over_limit, near_limit, within_limit, shadow_mode] =
            [0, 1, 2, 3, 4].map(|i| vectors[i].with_label_values(labels));
        RuleStats { total_hits, over_limit, near_limit, within_limit, shadow_mode }
    }

    /// `key`'s counters, and whether they are the overflow's (the cap reached before `key` came).
    fn stats(&self, key: &str) -> (Arc<RuleStats>, bool) {
        let overflow =
            || (self.overflow.get_or_init(|| Arc::new(self.series(&OVERFLOW_LABELS))).clone(), true);
        {
            let keys = self.keys.read().unwrap_or_else(|p| p.into_inner());
            if let Some(s) = keys.get(key) {
                return (s.clone(), false);
            }
            // Full for good (no key leaves): no write lock for the keys past the cap.
            if keys.len() >= self.max_keys {
                return overflow();
            }
        }
        let mut keys = self.keys.write().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = keys.get(key) {
            return (s.clone(), false);
        }
        if keys.len() >= self.max_keys {
            return overflow();
        }
        let s = Arc::new(self.series(&labels(key)));
        keys.insert(key.to_string(), s.clone());
        (s, false)
    }
}

impl Collector for Rules {
    /// One shape's: the registry checks a name's label names against them.
    fn desc(&self) -> Vec<&Desc> {
        self.shapes[1].iter().flat_map(Collector::desc).collect()
    }

    /// Each family with every shape's series.
    fn collect(&self) -> Vec<MetricFamily> {
        (0..STATS.len())
            .filter_map(|stat| {
                let mut shapes = self.shapes.iter().filter_map(|vectors| vectors[stat].collect().pop());
                let mut family = shapes.next()?;
                for mut other in shapes {
                    family.mut_metric().extend(other.take_metric());
                }
                Some(family)
            })
            .collect()
    }
}

/// `domain.key1.key2...` as envoyproxy/ratelimit's mapping labels it: `domain`, `key1`, and `key2` when
/// there is a second level.
fn labels(key: &str) -> Vec<&str> {
    key.splitn(4, '.').take(3).collect()
}

/// The counters of one service.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    rules: Arc<Rules>,
    near_limit_ratio: f64,
    pub config_load_success: IntCounter,
    pub config_load_error: IntCounter,
    pub redis_error: IntCounter,
    pub service_error: IntCounter,
    pub outages: IntCounter,
    /// Requests decided descriptor by descriptor because their keys are in different cluster slots.
    pub cross_slot: IntCounter,
    /// Descriptors counted in the overflow series.
    pub overflow: IntCounter,
    down: AtomicBool,
}

/// Lets the registry hold the rules' collector that [`Metrics`] counts in too.
struct Shared(Arc<Rules>);

impl Collector for Shared {
    fn desc(&self) -> Vec<&Desc> {
        self.0.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        self.0.collect()
    }
}

impl Metrics {
    /// `near_limit_ratio`: envoyproxy/ratelimit's `NEAR_LIMIT_RATIO` (0.8 by default): a hit past that
    /// share of the limit is near it. `max_keys`: how many descriptor keys have series of their own.
    pub fn new(near_limit_ratio: f64, max_keys: usize) -> Metrics {
        let registry = Registry::new();
        let counter = |name: &str, help: &str| {
            let c = IntCounter::new(name, help).expect("a valid name");
            registry.register(Box::new(c.clone())).expect("registered once");
            c
        };
        let config_load_success = counter(
            "ratelimit_service_config_load_success",
            "configurations loaded (the first and each reload)",
        );
        let config_load_error = counter(
            "ratelimit_service_config_load_error",
            "configurations refused (the previous one kept serving)",
        );
        let outages =
            counter("ratelimit_redis_outages_total", "times Redis stopped answering after it had answered");
        let cross_slot = counter("ratelimit_service_cross_slot_requests_total", "requests whose keys are in different cluster slots (RLS_HASH_TAG=descriptor), decided descriptor by descriptor");
        let overflow = counter("ratelimit_service_metric_overflow_total", "descriptors counted in the overflow series (domain=\"\",key1=\"overflow\"): their key came after RLS_MAX_METRIC_KEYS others had series");
        let errors = IntCounterVec::new(
            Opts::new(
                "ratelimit_service_should_rate_limit_error",
                "calls that Redis did not decide (redis_error) or that were refused (service_error)",
            ),
            &["err_type"],
        )
        .expect("a valid name");
        registry.register(Box::new(errors.clone())).expect("registered once");
        let rules = Arc::new(Rules::new(max_keys));
        registry.register(Box::new(Shared(rules.clone()))).expect("registered once");
        Metrics {
            registry,
            rules,
            near_limit_ratio,
            config_load_success,
            config_load_error,
            redis_error: errors.with_label_values(&["redis_error"]),
            service_error: errors.with_label_values(&["service_error"]),
            outages,
            cross_slot,
            overflow,
            down: AtomicBool::new(false),
        }
    }

    /// Counts `cost` hits of the descriptor key `key`.
    pub fn hit(&self, key: &str, cost: u64, shadow: bool, hit: Hit) {
        let (s, overflow) = self.rules.stats(key);
        if overflow {
            self.overflow.inc();
        }
        s.total_hits.inc_by(cost);
        match hit {
            Hit::Over => {
                s.over_limit.inc_by(cost);
                if shadow {
                    s.shadow_mode.inc_by(cost);
                }
            }
            Hit::Within { used } => {
                s.within_limit.inc_by(cost);
                if let Some((used, limit)) = used {
                    // envoyproxy/ratelimit's: the hits past floor(limit * ratio) are near the limit.
                    let threshold = (limit as f64 * self.near_limit_ratio).floor() as u64;
                    if used > threshold {
                        s.near_limit.inc_by(cost.min(used - threshold));
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
        self.redis_error.inc();
        if !self.down.swap(true, Relaxed) {
            self.outages.inc();
        }
    }

    /// A descriptor key's counters as (total_hits, over_limit, near_limit, within_limit, shadow_mode).
    pub fn snapshot(&self, key: &str) -> Option<[u64; 5]> {
        let keys = self.rules.keys.read().unwrap_or_else(|p| p.into_inner());
        keys.get(key).map(|s| {
            [&s.total_hits, &s.over_limit, &s.near_limit, &s.within_limit, &s.shadow_mode].map(|c| c.get())
        })
    }

    /// Every counter in Prometheus' text format (version 0.0.4), with the limiter's breaker and decisions.
    pub fn render(&self, limiter: &Limiter, domains: usize) -> String {
        let counts = limiter.counts();
        let counter = |name: &str, help: &str, value: u64| {
            let c = IntCounter::new(name, help).expect("a valid name");
            c.inc_by(value);
            c.collect()
        };
        let gauge = |name: &str, help: &str, value: i64| {
            let g = IntGauge::new(name, help).expect("a valid name");
            g.set(value);
            g.collect()
        };
        let mut families = self.registry.gather();
        families.extend(counter(
            "ratelimit_redis_degraded_decisions_total",
            "decisions the failure policy made because Redis could not",
            counts.degraded,
        ));
        families.extend(counter(
            "ratelimit_redis_short_circuited_total",
            "calls the open breaker kept away from Redis",
            counts.short_circuited,
        ));
        families.extend(gauge(
            "ratelimit_redis_breaker_open",
            "1 while the breaker keeps calls away from Redis",
            i64::from(limiter.breaker_open()),
        ));
        families.extend(gauge(
            "ratelimit_service_config_domains",
            "domains in the configuration in force",
            i64::try_from(domains).unwrap_or(i64::MAX),
        ));
        let mut out = String::with_capacity(4096);
        if let Err(e) = TextEncoder::new().encode_utf8(&families, &mut out) {
            tracing::error!(error = %e, "the metrics could not be rendered");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_as_envoyproxy_s_mapping() {
        assert_eq!(labels("edge.remote_address"), ["edge", "remote_address"]);
        assert_eq!(labels("edge.remote_address.path_/login"), ["edge", "remote_address", "path_/login"]);
        // Escaped by the encoder as the text format says.
        let rules = Rules::new(10);
        rules.stats("d.k_\"q\"\\").0.total_hits.inc();
        let mut out = String::new();
        TextEncoder::new().encode_utf8(&rules.collect(), &mut out).unwrap();
        assert!(
            out.contains(r#"ratelimit_service_rate_limit_total_hits{domain="d",key1="k_\"q\"\\"} 1"#),
            "{out}"
        );
    }

    #[test]
    fn near_limit_counts_the_hits_past_the_ratio() {
        let m = Metrics::new(0.8, DEFAULT_MAX_KEYS);
        // Limit 10: threshold 8. Used 8: not near; used 10 with cost 2: both past 8.
        m.hit("d.k", 1, false, Hit::Within { used: Some((8, 10)) });
        m.hit("d.k", 2, false, Hit::Within { used: Some((10, 10)) });
        m.hit("d.k", 3, true, Hit::Over);
        m.hit("d.k", 1, false, Hit::Undecided);
        assert_eq!(m.snapshot("d.k"), Some([7, 3, 2, 3, 3]));
    }

    #[test]
    fn keys_past_the_cap_share_the_overflow() {
        let m = Metrics::new(0.8, 2);
        for key in ["d.a", "d.b.c", "d.x", "d.y", "d.a"] {
            m.hit(key, 2, false, Hit::Over);
        }
        assert_eq!((m.snapshot("d.a").map(|s| s[0]), m.snapshot("d.x")), (Some(4), None));
        let overflow = m.rules.overflow.get().unwrap();
        assert_eq!((overflow.total_hits.get(), overflow.over_limit.get(), m.overflow.get()), (4, 4, 2));
        assert_eq!(m.rules.keys.read().unwrap().len(), 2);
    }
}

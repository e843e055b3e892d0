use super::*;
use std::path::Path;

fn one(text: &str) -> Result<Config, ConfigError> {
    load(&[Source { path: Path::new("config.yaml"), text }], false)
}

fn rule<'c>(config: &'c Config, domain: &str, entries: &[(&'static str, &'static str)]) -> Option<&'c Rule> {
    config.rule(domain, entries.iter().copied()).map(|r| &**r)
}

const EXAMPLE: &str = r#"
---
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500

  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500
  - key: remote_address
    rate_limit:
      unit: MINUTE
      requests_per_unit: 10
    descriptors:
      - key: path
        value: /login
        rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    value: /api/*
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: path
    value: /api/special
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 7, name: special, replaces: [{name: other}]}
  - key: key1
    descriptors:
      - key: key2
        rate_limit: {unlimited: true}
  - key: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: tenant
    detailed_metric: true
    rate_limit: {unit: second, requests_per_unit: 5, algorithm: token_bucket, burst: 20}
"#;

#[test]
fn envoyproxy_s_matching_most_specific_wins() {
    let c = one(EXAMPLE).unwrap();
    let users = rule(&c, "mongo_cps", &[("database", "users")]).unwrap();
    assert_eq!(
        (users.requests_per_unit, users.unit, users.full_key.as_str()),
        (500, Unit::Second, "mongo_cps.database_users")
    );
    assert!(rule(&c, "mongo_cps", &[("database", "other")]).is_none(), "no default for database");
    // key alone: any value; the nested entry is more specific.
    let ip = rule(&c, "mongo_cps", &[("remote_address", "10.0.0.1")]).unwrap();
    assert_eq!((ip.requests_per_unit, ip.unit), (10, Unit::Minute));
    let login = rule(&c, "mongo_cps", &[("remote_address", "10.0.0.1"), ("path", "/login")]).unwrap();
    assert_eq!(login.requests_per_unit, 2);
    assert_eq!(login.full_key, "mongo_cps.remote_address.path_/login");
    // A descriptor longer than the configuration gets no limit.
    assert!(rule(&c, "mongo_cps", &[("remote_address", "1"), ("path", "/other")]).is_none());
    assert!(rule(&c, "mongo_cps", &[("database", "users"), ("x", "y")]).is_none());
    // Wildcards: an exact entry first, then the prefix.
    assert_eq!(rule(&c, "mongo_cps", &[("path", "/api/items")]).unwrap().requests_per_unit, 100);
    let special = rule(&c, "mongo_cps", &[("path", "/api/special")]).unwrap();
    assert_eq!((special.requests_per_unit, special.shadow_mode, special.name.as_str()), (7, true, "special"));
    assert_eq!(special.replaces, ["other"]);
    assert!(rule(&c, "mongo_cps", &[("path", "/apx")]).is_none());
    // A level without a rule: only the nested one applies.
    assert!(rule(&c, "mongo_cps", &[("key1", "a")]).is_none());
    let unlimited = rule(&c, "mongo_cps", &[("key1", "a"), ("key2", "b")]).unwrap();
    assert!(unlimited.unlimited && unlimited.policy.is_none());
    let blocked = rule(&c, "mongo_cps", &[("blocked", "x")]).unwrap();
    assert!(!blocked.unlimited && blocked.policy.is_none());
    let tenant = rule(&c, "mongo_cps", &[("tenant", "7")]).unwrap();
    assert_eq!(tenant.algorithm, Algorithm::TokenBucket);
    assert_eq!(tenant.policy.as_ref().unwrap().limit(), 20);
    assert!(tenant.detailed_metric);
    assert!(rule(&c, "other_domain", &[("database", "users")]).is_none());
    assert!(rule(&c, "mongo_cps", &[]).is_none());
}

fn refused(text: &str) -> (usize, String) {
    let e = one(text).unwrap_err();
    assert_eq!(e.file, Path::new("config.yaml"));
    (e.line, e.reason)
}

#[test]
fn refusals_name_the_line_and_the_reason() {
    let cases: &[(&str, usize, &str)] = &[
        ("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n", 5, "invalid rate limit unit 'fortnight'"),
        ("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      requests_per_unit: 1\n", 5, "invalid rate limit unit ''"),
        ("domain: d\ndescriptors:\n  - key: a\n    rate_limt: {unit: second}\n", 4, "config error, unknown key 'rate_limt'"),
        ("domain: d\ndescriptors:\n  - value: a\n", 3, "descriptor has empty key"),
        ("domain: d\ndescriptors:\n  - key: a\n  - key: b\n  - key: a\n", 5, "duplicate descriptor composite key 'd.a'"),
        ("descriptors: []\n", 1, "config file cannot have empty domain"),
        ("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, unit: second}\n", 4, "should not specify rate limit unit when unlimited"),
        ("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, name: n, replaces: [{name: n}]}\n", 4, "replaces should not contain name of same descriptor"),
        ("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: x}\n", 4, "requests_per_unit must be a whole number >= 0"),
        ("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: gcra}\n", 4, "invalid algorithm 'gcra': expected token_bucket, sliding_window, sliding_log, fixed_window or concurrency"),
        ("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, burst: 5}\n", 4, "burst is a token bucket's: set algorithm: token_bucket"),
        ("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: token_bucket, burst: 0}\n", 4, "invalid capacity: must be a whole number >= 1"),
        ("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: sliding_log, estimate: 5}\n", 4, "estimate is held by fixed_window, sliding_window and token_bucket limits only"),
        ("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, estimate: 0}\n", 4, "estimate must be a whole number >= 1"),
        ("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second\n", 5, "error loading config file"),
        ("domain: d\ndomain: e\n", 2, "duplicate key 'domain' in a mapping"),
    ];
    for (text, line, reason) in cases {
        let (l, r) = refused(text);
        assert!(r.starts_with(reason), "{text}: {r}");
        assert_eq!(l, *line, "{text}: {r}");
    }
    let e = one("domain: d\ndescriptors:\n  - key: a\n    bogus: 1\n").unwrap_err();
    assert_eq!(e.to_string(), "config.yaml:4: config error, unknown key 'bogus'");
}

#[test]
fn a_domain_in_two_files_is_refused_unless_merged() {
    let a = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
    let b = "domain: d\ndescriptors:\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 2}\n";
    let sources =
        [Source { path: Path::new("a.yaml"), text: a }, Source { path: Path::new("b.yaml"), text: b }];
    let e = load(&sources, false).unwrap_err();
    assert_eq!(e.to_string(), "b.yaml:1: duplicate domain 'd' in config file");
    let merged = load(&sources, true).unwrap();
    assert_eq!(rule(&merged, "d", &[("b", "x")]).unwrap().requests_per_unit, 2);
    assert_eq!(rule(&merged, "d", &[("a", "x")]).unwrap().requests_per_unit, 1);
}

#[test]
fn every_algorithm_builds_its_policy() {
    for (name, limit) in
        [("fixed_window", 10), ("sliding_window", 10), ("sliding_log", 10), ("token_bucket", 10)]
    {
        let text = format!("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {{unit: minute, requests_per_unit: 10, algorithm: {name}}}\n");
        let c = one(&text).unwrap();
        let r = rule(&c, "d", &[("a", "")]).unwrap();
        assert_eq!((r.algorithm.name(), r.policy.as_ref().unwrap().limit()), (name, limit));
    }
}

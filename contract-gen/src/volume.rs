//! `contract/vectors/volume.json`: the pre-check and batched units (docs/high-volume.md) as timed
//! steps. Each step's Redis replies come from core's algorithms (the in-process limiter with the whole
//! limit), and its outputs from the reference's rules (`batch.rs`, `precheck.rs`) driven as the
//! limiter drives them: the commands sent, the decision, and the units held after it.

use super::vectors::{decided, policy_of};
use super::words::words;
use client::batch::{Action, Batches};
use client::command::{self, Limit};
use client::decision::Decision;
use client::fallback::LocalLimiter;
use client::limiter::cache_key;
use client::policy::Policy;
use client::precheck::DenialCache;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::time::{Duration, Instant};

const T0: i64 = 1_700_000_000_000_000_000;

fn bucket(limit: u64, rate: f64, batch: u64, lease_ms: u64) -> Value {
    json!({ "kind": "token_bucket", "limit": limit, "rate": rate, "batch": batch, "lease_ms": lease_ms })
}

fn windowed(kind: &str, limit: u64, window_ms: u64, batch: u64, lease_ms: u64) -> Value {
    json!({ "kind": kind, "limit": limit, "period_us": window_ms * 1000, "batch": batch, "lease_ms": lease_ms })
}

/// A policy of the vectors with its batch, if it names one.
fn batched_policy(input: &Value) -> Result<Policy, client::PolicyError> {
    let policy = policy_of(input)?;
    match input["batch"].as_u64() {
        Some(max) => policy.batched(max, Duration::from_millis(input["lease_ms"].as_u64().unwrap_or(1000))),
        None => Ok(policy),
    }
}

/// A step: at `at_ms`, a check of `limits` (policy, key, cost).
fn step(at_ms: u64, limits: &[(&Value, &str, u64)]) -> Value {
    let limits: Vec<Value> =
        limits.iter().map(|(p, key, cost)| json!({ "key": key, "cost": cost, "policy": p })).collect();
    json!({ "at_ms": at_ms, "limits": limits })
}

/// Redis' reply to a decision, as the module gives it (the sixth field for several limits).
fn reply(d: &Decision, several: bool) -> Value {
    let retry = d.retry_after.map_or(-1, |r| r.as_millis() as i64);
    let mut fields = vec![
        json!(u8::from(d.allowed)),
        json!(d.limit),
        json!(d.remaining),
        json!(retry),
        json!(d.reset_after.as_millis() as u64),
    ];
    if several {
        // The module's sixth field is the limiting limit's 1-based position.
        fields.push(json!(d.limiting + 1));
    }
    Value::Array(fields)
}

/// A step of instance `instance` (another limiter on the same server).
fn on(instance: u64, at_ms: u64, policy: &Value, key: &str) -> Value {
    let mut s = step(at_ms, &[(policy, key, 1)]);
    s["instance"] = json!(instance);
    s
}

fn scenarios() -> Vec<(&'static str, bool, Vec<Value>)> {
    let hot = bucket(100, 1.0, 8, 1000);
    let short = bucket(100, 1.0, 8, 100);
    let small = bucket(5, 0.001, 4, 60_000);
    let shared = bucket(10, 0.001, 8, 60_000);
    let plain = json!({ "kind": "token_bucket", "limit": 2, "rate": 1.0 });
    let fixed = windowed("fixed_window", 10, 1000, 4, 5000);
    let fixed_short = windowed("fixed_window", 10, 1000, 4, 100);
    let counter = windowed("sliding_counter", 10, 1000, 4, 5000);
    let global = bucket(50, 1.0, 8, 1000);
    let unbatched = json!({ "kind": "fixed_window", "limit": 100, "period_us": 60_000_000 });
    let windowed_batch = windowed("fixed_window", 100, 60_000, 8, 1000);
    let one = |policy: &Value, times: &[u64]| -> Vec<Value> {
        times.iter().map(|t| step(*t, &[(policy, "k", 1)])).collect()
    };
    vec![
        (
            "a hot key's batch doubles up to its max; local decisions between calls",
            false,
            one(&hot, &(0..24).collect::<Vec<_>>()),
        ),
        (
            "units whose lease ended go back before the next call, which starts a smaller batch",
            false,
            one(&short, &[0, 1, 2, 3, 4, 5, 400, 401]),
        ),
        (
            "near empty: at most half of what is left, then size 1",
            false,
            one(&small, &(0..8).collect::<Vec<_>>()),
        ),
        (
            "two instances on one bucket: a denied batch is asked again alone",
            false,
            vec![
                on(0, 0, &shared, "k"),
                on(0, 1, &shared, "k"),
                on(1, 2, &shared, "k"),
                on(1, 3, &shared, "k"),
                on(1, 4, &shared, "k"),
                on(1, 5, &shared, "k"),
                on(0, 6, &shared, "k"),
                on(0, 7, &shared, "k"),
                on(1, 8, &shared, "k"),
                on(0, 9, &shared, "k"),
            ],
        ),
        (
            "a request of cost 3 spends held units only when they cover it",
            false,
            [(0, 1), (1, 1), (2, 1), (3, 3), (4, 1), (5, 3)]
                .iter()
                .map(|(t, c)| step(*t, &[(&hot, "k", *c)]))
                .collect(),
        ),
        (
            "a fixed window's units held past their lease go back while the window lasts",
            false,
            one(&fixed_short, &[0, 1, 2, 3, 300, 301, 1001]),
        ),
        (
            "a fixed window's units end before their window does: dropped, not refunded",
            false,
            one(&fixed, &[0, 1, 3, 4, 950, 1001, 1002]),
        ),
        (
            "a sliding counter's units end with the current window",
            false,
            one(&counter, &[0, 1, 2, 3, 4, 5, 6, 900, 1001, 1002, 1003]),
        ),
        (
            "several limits: buckets batch, a window asks its cost alone, local only when all hold",
            false,
            (0..10)
                .map(|t| step(t, &[(&hot, "{c}:a", 1), (&global, "{c}:g", 1)]))
                .chain((10..13).map(|t| {
                    step(t, &[(&hot, "{c}:a", 1), (&windowed_batch, "{c}:w", 1), (&unbatched, "{c}:u", 1)])
                }))
                .collect(),
        ),
        (
            "every second a check gives back the expired units of other keys",
            false,
            vec![
                step(0, &[(&short, "a", 1)]),
                step(1, &[(&short, "a", 1)]),
                step(3, &[(&short, "b", 1)]),
                step(4, &[(&short, "b", 1)]),
                step(1100, &[(&short, "b", 1)]),
                step(1101, &[(&short, "a", 1)]),
            ],
        ),
        (
            "the pre-check: a denial holds until its retry_after for the same or a larger cost",
            true,
            [(0, 1), (1, 1), (2, 2), (3, 2), (4, 1), (5, 2), (500, 1), (1001, 1), (1002, 1)]
                .iter()
                .map(|(t, c)| step(*t, &[(&plain, "p", *c)]))
                .collect(),
        ),
        ("the pre-check and a batch together", true, one(&small, &(0..9).collect::<Vec<_>>())),
    ]
}

fn run(precheck: bool, steps: &[Value]) -> Vec<Value> {
    let server = LocalLimiter::in_process();
    let mut instances: HashMap<u64, (Batches, DenialCache)> = HashMap::new();
    let base = Instant::now();
    let mut out = vec![];
    for s in steps {
        let at_ms = s["at_ms"].as_u64().unwrap();
        let (batches, denials) = instances
            .entry(s["instance"].as_u64().unwrap_or(0))
            .or_insert_with(|| (Batches::default(), DenialCache::new()));
        let (now, now_ns) = (base + Duration::from_millis(at_ms), T0 + at_ms as i64 * 1_000_000);
        let owned: Vec<(String, Policy, u64)> = s["limits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| {
                (
                    l["key"].as_str().unwrap().into(),
                    batched_policy(&l["policy"]).unwrap(),
                    l["cost"].as_u64().unwrap(),
                )
            })
            .collect();
        let limits: Vec<Limit<'_>> = owned.iter().map(|(k, p, c)| Limit::new(k, p, *c)).collect();
        let (mut sent, mut replies) = (vec![], vec![]);
        let send = |limits: &[Limit<'_>], sent: &mut Vec<Value>, replies: &mut Vec<Value>| {
            sent.push(json!(words(&command::decide(limits).unwrap(), false)));
            let d = server.decide(limits, now_ns, false);
            replies.push(reply(&d, limits.len() > 1));
            d
        };
        let cost = limits.iter().map(|l| l.cost).max().unwrap();
        let pre = precheck.then(|| denials.check(&cache_key(&limits), cost, now)).flatten();
        let decision = if let Some(held) = pre {
            held
        } else {
            let plan = batches.plan(&limits, now);
            let mut refunds = vec![];
            for r in &plan.refunds {
                refunds.push(json!(words(&command::refund(&r.key, &r.policy, r.units).unwrap(), false)));
                server.refund(&r.key, &r.policy, r.units, now_ns);
                let peeked = server.decide(&[Limit::new(&r.key, &r.policy, 0)], now_ns, false);
                replies.push(reply(&peeked, false));
            }
            sent.extend(refunds);
            let decision = match plan.action {
                Action::Local(d) => d,
                Action::Wait(_) => unreachable!("one check at a time: no call is in flight"),
                Action::Call(mut asked) => {
                    let mut d = send(&asked.with_extras(&limits), &mut sent, &mut replies);
                    if asked.any_extra() && !d.allowed {
                        asked = asked.without_extras();
                        d = send(&limits, &mut sent, &mut replies);
                    }
                    batches.answer(&limits, &asked, d, now)
                }
            };
            // Batches taken ahead: answered before the next step (in a client, off the caller's path).
            for a in plan.ahead {
                let limit = [Limit::new(&a.key, &a.policy, 0)];
                let d = send(&a.asked.with_extras(&limit), &mut sent, &mut replies);
                batches.answer(&limit, &a.asked, d, now);
            }
            decision
        };
        if precheck && !decision.local {
            denials.remember(&cache_key(&limits), cost, &decision, now);
        }
        let local = decision.local;
        let mut decision = decided(&decision);
        decision["local"] = json!(local);
        let held: serde_json::Map<String, Value> = limits
            .iter()
            .filter(|l| l.policy.batch().is_some())
            .map(|l| (l.key.to_string(), json!(batches.held(l))))
            .collect();
        let mut input = s.clone();
        input["replies"] = Value::Array(replies);
        out.push((input, json!({ "sent": sent, "decision": decision, "held": held })));
    }
    out.into_iter().map(|(i, o)| json!({ "in": i, "out": o })).collect()
}

/// The cases: scenarios, then the policies that refuse a batch.
pub(super) fn volume() -> Vec<(Value, Value)> {
    let mut cases = vec![];
    for (name, precheck, steps) in scenarios() {
        let ran = run(precheck, &steps);
        let inputs: Vec<Value> = ran.iter().map(|r| r["in"].clone()).collect();
        let outputs: Vec<Value> = ran.iter().map(|r| r["out"].clone()).collect();
        cases.push((
            json!({ "name": name, "precheck": precheck, "steps": inputs }),
            json!({ "steps": outputs }),
        ));
    }
    let refused = [
        json!({ "kind": "sliding_log", "limit": 10, "period_us": 1_000_000, "batch": 2 }),
        json!({ "kind": "concurrency", "limit": 10, "period_us": 1_000_000, "batch": 2 }),
        json!({ "kind": "token_bucket", "limit": 10, "rate": 1.0, "batch": 0 }),
        json!({ "kind": "token_bucket", "limit": 10, "rate": 1.0, "batch": 11 }),
        json!({ "kind": "fixed_window", "limit": 10, "period_us": 1_000_000, "batch": 10 }),
        json!({ "kind": "sliding_counter", "limit": 10, "period_us": 1_000_000, "batch": 3, "lease_ms": 0 }),
    ];
    for p in refused {
        let output = match batched_policy(&p) {
            Ok(_) => json!({ "ok": true }),
            Err(e) => json!({ "error": { "field": e.field, "expected": e.reason } }),
        };
        cases.push((json!({ "policy": p }), output));
    }
    cases
}

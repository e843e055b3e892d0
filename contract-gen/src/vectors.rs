//! `contract/vectors/*.json`: inputs with the reference's outputs, which every client's suite runs.
//! Each file is `{"cases": [{"input": ..., "output": ...}]}` (see contract/README.md for each one's
//! fields).

use super::words::words;
use client::command::{self, Limit};
use client::decision::Decision;
use client::engine::{script_of, Call};
use client::error::CallError;
use client::fallback::LocalLimiter;
use client::http::caller::{caller_tag, group_ip, Caller};
use client::http::forwarded::TrustedProxies;
use client::http::response::{add_headers, concurrency_limited, denied, unavailable, Described};
use client::policy::Policy;
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};
use serde_json::{json, Value};
use std::net::IpAddr;
use std::time::Duration;

/// The vectors (but volume.json, `volume.rs`'s), with the EVALSHA scripts' hashes of `library` (the source as it is about to be written).
pub(super) fn all(library: &str) -> Vec<(&'static str, Value)> {
    vec![
        ("policies", cases(policies())),
        ("commands", cases(commands(library))),
        ("replies", cases(replies())),
        ("callers", cases(callers())),
        ("forwarded", cases(forwarded())),
        ("http", cases(http())),
        ("llm_headers", cases(llm_headers())),
        ("fallback", cases(fallback())),
        ("errors", cases(errors())),
        ("engines", cases(engines())),
    ]
}

pub(super) fn cases(cases: Vec<(Value, Value)>) -> Value {
    let cases: Vec<Value> =
        cases.into_iter().map(|(input, output)| json!({ "input": input, "output": output })).collect();
    json!({ "cases": cases })
}

/// A policy as the vectors write it: a kind's name, its limit (a bucket's capacity), and its rate
/// (tokens per second) or its window or lease in microseconds.
pub(super) fn policy_of(input: &Value) -> Result<Policy, client::PolicyError> {
    let limit = input["limit"].as_u64().unwrap();
    let micros = || Duration::from_micros(input["period_us"].as_u64().unwrap());
    match input["kind"].as_str().unwrap() {
        "token_bucket" => Policy::token_bucket(limit, input["rate"].as_f64().unwrap()),
        "fixed_window" => Policy::fixed_window(limit, micros()),
        "sliding_counter" => Policy::sliding_counter(limit, micros()),
        "sliding_log" => Policy::sliding_log(limit, micros()),
        "concurrency" => Policy::concurrency(limit, micros()),
        other => panic!("no policy kind {other}"),
    }
}

fn bucket(limit: u64, rate: f64) -> Value {
    json!({ "kind": "token_bucket", "limit": limit, "rate": rate })
}

fn timed(kind: &str, limit: u64, period_us: u64) -> Value {
    json!({ "kind": kind, "limit": limit, "period_us": period_us })
}

fn policies() -> Vec<(Value, Value)> {
    let mut inputs = vec![];
    let rates =
        [5.0, 0.5, 0.1, 1.0 / 3.0, 1e9, 1_000_000_001.0, 0.0, -1.0, 1e-7, 1e-20, 123_456.789, 2.5e-10, 1e21];
    for capacity in [1, 10, 0, 3_000_000_000, 3_000_000_001, u64::MAX] {
        for rate in rates {
            inputs.push(bucket(capacity, rate));
        }
    }
    let lengths = [1_000, 1_500_000, 1_500_400, 0, 60_000_000, 3_000_000_000_000_000, 3_000_000_000_001_000];
    for kind in ["fixed_window", "sliding_counter", "sliding_log", "concurrency"] {
        for limit in [1, 10, 0, 100_000, 100_001, 1_000_000, 1_000_001, u64::MAX] {
            for length in lengths {
                inputs.push(timed(kind, limit, length));
            }
        }
    }
    inputs
        .into_iter()
        .map(|input| {
            let output = match policy_of(&input) {
                Ok(p) => json!({
                    "params": p.params(),
                    "limit": p.limit(),
                    "period_ns": p.limiter().period_ns(),
                }),
                Err(e) => json!({ "error": { "field": e.field, "expected": e.reason } }),
            };
            (input, output)
        })
        .collect()
}

fn rendered(cmd: Result<redis::Cmd, CallError>, ids: bool, library: &str) -> Value {
    match cmd {
        Ok(cmd) => {
            let call = Call::of(&cmd);
            json!({
                "module": words(&cmd, ids),
                "fcall": call.as_ref().map(|c| words(&c.fcall(), ids)),
                "evalsha": call.as_ref().map(|c| {
                    let mut words = words(&c.evalsha(), ids);
                    words[1] = redis::Script::new(&script_of(library, c.function())).get_hash().to_string();
                    words
                }),
            })
        }
        Err(CallError::Usage(why)) if is_reply(why) => json!({ "usage": usage(why) }),
        Err(CallError::Usage(why)) => json!({ "error": why }),
        Err(other) => panic!("{other}"),
    }
}

/// Whether a usage error's text is written as a reply, starting with its code (docs/errors.md).
fn is_reply(text: &str) -> bool {
    text.split(' ')
        .next()
        .is_some_and(|code| !code.is_empty() && code.bytes().all(|b| b.is_ascii_uppercase()))
}

/// A usage error as every client raises it: its code and its whole text.
fn usage(text: &str) -> Value {
    json!({ "code": text.split(' ').next().unwrap_or_default(), "message": text })
}

fn commands(library: &str) -> Vec<(Value, Value)> {
    let policies = [
        bucket(10, 5.0),
        bucket(100, 0.5),
        timed("fixed_window", 5, 1_500_000),
        timed("sliding_counter", 1000, 3_600_000_000),
        timed("sliding_log", 5, 60_000_000),
        timed("concurrency", 3, 30_000_000),
    ];
    let limit = |i: usize, key: &str, cost: u64| json!({ "key": key, "policy": policies[i], "cost": cost });
    let mut inputs = vec![];
    for call in ["decide", "acquire", "reserve"] {
        let mut sets: Vec<Vec<Value>> =
            (0..policies.len()).map(|i| vec![limit(i, "rl:{user:ada}:api", 1)]).collect();
        sets.push(vec![limit(0, "a", 1), limit(1, "b", 2)]);
        sets.push(vec![limit(0, "a", 1), limit(4, "b", 1), limit(5, "c", 2), limit(2, "d", 3)]);
        sets.push(vec![limit(4, "a", 2)]);
        sets.push(vec![limit(5, "a", 0)]);
        sets.push(vec![limit(2, "a", 0), limit(3, "b", 7)]);
        sets.push(vec![]);
        sets.push(vec![limit(0, "", 1)]);
        sets.push(vec![limit(0, "a", 1), limit(1, "a", 1)]);
        sets.push(vec![limit(0, "a", 1), limit(2, "b", 1), limit(3, "a", 1)]);
        for limits in sets {
            inputs.push(json!({ "call": call, "limits": limits, "holder": "h-1", "max_wait_ms": 2500 }));
        }
    }
    for (i, units) in [(0, 2), (2, 1), (3, 0), (4, 1), (5, 1)] {
        inputs.push(json!({ "call": "refund", "limits": [limit(i, "k", units)] }));
    }
    inputs.push(
        json!({ "call": "reserve_batch", "limits": [limit(0, "k", 2)], "max": 8, "max_wait_ms": 1000 }),
    );
    inputs.push(json!({ "call": "inspect", "limits": [limit(2, "k", 0)] }));
    inputs.push(json!({ "call": "release", "limits": [limit(5, "k", 0)], "holder": "h-1" }));
    inputs.push(json!({ "call": "renew", "limits": [limit(5, "k", 0)], "holder": "h-1" }));
    let mut cases: Vec<(Value, Value)> = inputs
        .into_iter()
        .map(|input| {
            let built: Vec<(String, Policy, u64)> = input["limits"]
                .as_array()
                .unwrap()
                .iter()
                .map(|l| {
                    let policy = policy_of(&l["policy"]).unwrap();
                    (l["key"].as_str().unwrap().to_string(), policy, l["cost"].as_u64().unwrap())
                })
                .collect();
            let limits: Vec<Limit<'_>> = built.iter().map(|(k, p, c)| Limit::new(k, p, *c)).collect();
            let holder = input["holder"].as_str().unwrap_or_default();
            let wait = Duration::from_millis(input["max_wait_ms"].as_u64().unwrap_or(0));
            let cmd = match input["call"].as_str().unwrap() {
                "decide" => command::decide(&limits),
                "acquire" => command::acquire(&limits, holder),
                "reserve" => command::reserve(&limits, wait),
                "refund" => command::refund(limits[0].key, limits[0].policy, limits[0].cost),
                "reserve_batch" => command::reserve_batch(
                    limits[0].key,
                    limits[0].policy,
                    limits[0].cost,
                    input["max"].as_u64().unwrap(),
                    wait,
                ),
                "inspect" => Ok(command::inspect(limits[0].key, Some(limits[0].policy))),
                "release" => Ok(command::release(limits[0].key, holder)),
                "renew" => Ok(command::renew(limits[0].key, limits[0].policy.window_length(), holder)),
                other => panic!("{other}"),
            };
            let output = rendered(cmd, true, library);
            (input, output)
        })
        .collect();
    // A cost as a caller may write it (a float from a web `cost=` function, a negative number, 2^64):
    // refused before sending with the module's own reply to it.
    for text in ["1", "0", "18446744073709551615", "1.5", "-1", "18446744073709551616", "1e3", ""] {
        let output = match ratelimit_core::args::cost(text.as_bytes()) {
            Ok(cost) => json!({ "cost": cost }),
            Err(e) => json!({ "usage": usage(&format!("ERR invalid {}: {}", e.field, e.expected)) }),
        };
        cases.push((json!({ "call": "cost", "cost": text }), output));
    }
    cases
}

/// Error replies and failed calls, each with its class and what a limiter does with it under each
/// failure policy (docs/errors.md).
fn errors() -> Vec<(Value, Value)> {
    use client::reply_class::{ReplyClass, TRANSPORT};
    let replies = [
        "LOADING Redis is loading the dataset in memory",
        "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
        "READONLY You can't write against a read only replica.",
        "TRYAGAIN Multiple keys request during rehashing of slot",
        "CLUSTERDOWN The cluster is down",
        "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSCRIPT.",
        "OOM command not allowed when used memory > 'maxmemory'.",
        "ERR max number of clients reached",
        "NOREPLICAS Not enough good replicas to write.",
        "MOVED 3999 127.0.0.1:6381",
        "ASK 3999 127.0.0.1:6381",
        "NOPERM User app has no permissions to run the 'rl.token' command",
        "NOPERM No permissions to access a key",
        "WRONGPASS invalid username-password pair or user is disabled.",
        "ERR unknown command 'RL.TOKEN', with args beginning with: 'k' '10' '5' '1' ",
        "NOAUTH Authentication required.",
        "ERR Function not found",
        "NOSCRIPT No matching script. Please use EVAL.",
        "ERR the key holds a value that is not this limiter's state",
        "WRONGTYPE Operation against a key holding the wrong kind of value",
        "CROSSSLOT Keys in request don't hash to the same slot",
        client::command::DUPLICATE_KEY,
        "ERR invalid cost: too large",
        "ERR invalid capacity: must be a whole number >= 1",
        "ERR syntax error",
        "ERR wrong number of arguments for 'rl.token' command",
        "ERR Error running script (call to f_0123): @user_script:1: something failed",
        "SOMENEWCODE a reply no rule knows",
    ];
    use client::reply_class::BEHAVIOURS;
    let outcome = |class: ReplyClass, text: Option<&str>, failure: &str| {
        let b = BEHAVIOURS.iter().find(|b| b.class == class).expect("every class has a behaviour");
        let mut out = match (class, text) {
            (ReplyClass::Usage, Some(text)) => json!({ "class": class.name(), "raise": usage(text) }),
            _ => json!({
                "class": class.name(),
                "decision": { "allowed": failure == "open", "degraded": true },
            }),
        };
        out["breaker"] = b.breaker.into();
        out["log"] = b.log.into();
        out["counter"] = b.counter.into();
        out
    };
    // The call that got each answer: one limit's check (a bucket of 10, 5 a second, cost 1 on key `k`),
    // which every client sends as RL.TOKEN or its library function.
    let call = json!({ "method": "check", "key": "k", "policy": bucket(10, 5.0), "cost": 1 });
    let mut cases = vec![];
    for failure in ["open", "closed"] {
        for text in replies {
            let class = ReplyClass::of_reply(text);
            // A long reply goes as a blob error to RESP3 clients; the same text either way.
            let resp3 = if text.len() > 60 {
                format!("!{}\r\n{text}\r\n", text.len())
            } else {
                format!("-{text}\r\n")
            };
            let input = json!({
                "call": call,
                "reply": text,
                "resp2": format!("-{text}\r\n"),
                "resp3": resp3,
                "failure": failure,
            });
            cases.push((input, outcome(class, Some(text), failure)));
        }
        for transport in TRANSPORT {
            cases.push((
                json!({ "call": call, "transport": transport, "failure": failure }),
                outcome(ReplyClass::Outage, None, failure),
            ));
        }
    }
    cases
}

/// Sequences of answers and what the engine machine sends and reports through them.
fn engines() -> Vec<(Value, Value)> {
    use client::engine_machine::{self as m, Answer as A, Then};
    let scenarios: &[(m::Wanted, &[&[A]])] = &[
        (m::Wanted::Auto, &[&[A::Ok], &[A::Ok]]),
        (
            m::Wanted::Auto,
            &[
                &[A::UnknownCommand, A::FunctionMissing, A::Ok, A::Ok],
                &[A::Ok],
                &[A::FunctionMissing, A::Ok, A::Ok],
            ],
        ),
        (m::Wanted::Auto, &[&[A::UnknownCommand, A::Ok]]),
        (m::Wanted::Auto, &[&[A::Noperm, A::Noperm, A::Noscript, A::Ok], &[A::Ok]]),
        (m::Wanted::Auto, &[&[A::UnknownCommand, A::FunctionMissing, A::Noperm, A::Ok]]),
        (m::Wanted::Auto, &[&[A::UnknownCommand, A::UnknownCommand, A::Noscript, A::Ok]]),
        (m::Wanted::Auto, &[&[A::UnknownCommand, A::UnknownCommand, A::UnknownCommand]]),
        (m::Wanted::Auto, &[&[A::UnknownCommand, A::FunctionMissing, A::Ok, A::FunctionMissing, A::Ok]]),
        (m::Wanted::Auto, &[&[A::UnknownCommand, A::Ok], &[A::Outage], &[A::Ok]]),
        (m::Wanted::Auto, &[&[A::UnknownCommand, A::Error], &[A::Ok]]),
        (m::Wanted::Auto, &[&[A::Error], &[A::Ok]]),
        (m::Wanted::Module, &[&[A::UnknownCommand], &[A::Ok]]),
        (m::Wanted::Fcall, &[&[A::FunctionMissing, A::Ok, A::Ok], &[A::Noperm]]),
        (m::Wanted::Fcall, &[&[A::FunctionMissing, A::Noperm]]),
        (m::Wanted::Evalsha, &[&[A::Noscript, A::Ok], &[A::Ok], &[A::Outage]]),
    ];
    scenarios
        .iter()
        .map(|(wanted, calls)| {
            let mut state = m::start(*wanted);
            let mut outputs = vec![];
            for answers in calls.iter() {
                let mut sent = m::STATES.iter().find(|s| s.0 == state).map(|s| s.2).unwrap();
                let mut sends = vec![];
                let mut outcome = "";
                for (i, answer) in answers.iter().enumerate() {
                    sends.push(m::sent_name(sent));
                    let (next, then) = m::step(*wanted, state, sent, *answer, i + 1);
                    state = next;
                    match then {
                        Then::Send(s) => sent = s,
                        Then::Decided => outcome = "decided",
                        Then::Outage => outcome = "outage",
                        Then::Misconfigured => outcome = "misconfigured",
                        Then::Error => outcome = "error",
                    }
                }
                assert!(!outcome.is_empty(), "a scenario's call ends with its last answer");
                let reports = m::STATES.iter().find(|s| s.0 == state).unwrap().3;
                outputs.push(json!({ "sent": sends, "outcome": outcome, "state": m::state_name(state), "reports": reports }));
            }
            let answers: Vec<Vec<&str>> =
                calls.iter().map(|c| c.iter().map(|a| m::answer_name(*a)).collect()).collect();
            (json!({ "wanted": m::wanted_name(*wanted), "calls": answers }), json!({ "calls": outputs }))
        })
        .collect()
}

fn replies() -> Vec<(Value, Value)> {
    let replies: &[&[i64]] = &[
        &[1, 10, 9, 0, 200],
        &[0, 10, 0, 199, 2000],
        &[0, 10, 0, -1, 0],
        &[1, 5, 4, 0, 12000, 1],
        &[0, 5, 0, 1001, 60000, 3],
        &[1, 10, 0, 1500, 2000],
        &[1, 10, 9, 0],
        &[],
    ];
    replies
        .iter()
        .map(|reply| {
            let output = match Decision::from_reply(reply) {
                Some(d) => {
                    let mut fields = decided(&d);
                    fields["retry_after_secs"] = d.retry_after_secs().into();
                    fields["reset_after_secs"] = d.reset_after_secs().into();
                    fields["never_fits"] = d.never_fits().into();
                    fields
                }
                None => json!({ "error": "not a decision" }),
            };
            (json!({ "reply": reply }), output)
        })
        .collect()
}

fn callers() -> Vec<(Value, Value)> {
    let long = "x".repeat(123);
    let longer = "x".repeat(124);
    let braces = format!("{}{{", "y".repeat(100));
    let ids: Vec<String> = [
        "ada",
        "a}b",
        "{x}",
        "50%{off}",
        "with space",
        "ünïcødé ✓",
        "",
        long.as_str(),
        longer.as_str(),
        braces.as_str(),
        "%7D",
        ":",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([String::from("p").repeat(600)])
    .collect();
    let mut out = vec![];
    for id in &ids {
        for (kind, caller) in
            [("principal", Caller::Principal(id.clone())), ("tenant", Caller::Tenant(id.clone()))]
        {
            out.push((
                json!({ "caller": kind, "id": id, "prefix": "rl" }),
                json!({ "key_part": caller.key_part(), "tag": caller_tag("rl", &caller), "display": caller.to_string() }),
            ));
        }
    }
    for ip in ["203.0.113.7", "::ffff:203.0.113.9", "2001:db8:1:2:3:4:5:6", "fe80::1", "::1"] {
        for prefix in [64u8, 48, 128, 0] {
            let grouped = group_ip(ip.parse().unwrap(), prefix);
            let caller = Caller::Ip(grouped);
            out.push((
                json!({ "caller": "ip", "ip": ip, "ipv6_prefix": prefix, "prefix": "rl" }),
                json!({ "key_part": caller.key_part(), "tag": caller_tag("rl", &caller), "display": caller.to_string() }),
            ));
        }
    }
    out.push((json!({ "caller": "unknown", "prefix": "rl" }), {
        let c = Caller::Unknown;
        json!({ "key_part": c.key_part(), "tag": caller_tag("rl", &c), "display": c.to_string() })
    }));
    // A limit's whole key (`http.limit_key`): the same name and kind give the same key in every
    // language; another kind, another key; other numbers, the same key.
    let policies = [
        bucket(10, 5.0),
        bucket(100, 0.5),
        timed("fixed_window", 10, 60_000_000),
        timed("fixed_window", 100, 1_000_000),
        timed("sliding_counter", 10, 60_000_000),
        timed("sliding_log", 10, 60_000_000),
        timed("concurrency", 3, 30_000_000),
    ];
    for policy in policies {
        let caller = Caller::Principal("ada".into());
        let tag = caller_tag("rl", &caller);
        let limit_key = client::http::plan::limit_key(&tag, "api", &policy_of(&policy).unwrap());
        out.push((
            json!({ "caller": "principal", "id": "ada", "prefix": "rl", "name": "api", "policy": policy }),
            json!({ "key_part": caller.key_part(), "tag": tag, "display": caller.to_string(), "limit_key": limit_key }),
        ));
    }
    out
}

fn forwarded() -> Vec<(Value, Value)> {
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let header = |name: &str, value: &[u8]| json!({ "name": name, "value_hex": hex(value) });
    let xff = |v: &[u8]| vec![header("x-forwarded-for", v)];
    let spoofed_left: String = (0..40).map(|i| format!("198.51.0.{i}, ")).collect::<String>() + "203.0.113.7";
    let trusted_40: String = (0..40).map(|i| format!("10.0.0.{i}")).collect::<Vec<_>>().join(",");
    let mut beyond: Vec<String> = (0..40).map(|i| format!("10.0.1.{i}")).collect();
    beyond[40 - 32 - 1] = "203.0.113.8".into();
    let beyond = beyond.join(",");
    let cases: Vec<(Option<&str>, Vec<Value>)> = vec![
        (Some("198.51.100.9"), xff(b"1.2.3.4")),
        (Some("10.0.0.1"), xff(b"1.2.3.4, 203.0.113.7, 10.0.0.2")),
        (Some("10.0.0.1"), vec![header("forwarded", br#"for=1.2.3.4, for="[2001:db8::7]:443";proto=https"#)]),
        (Some("10.0.0.1"), xff(b"1.2.3.4, nonsense")),
        (None, xff(b"1.2.3.4, 203.0.113.7, 10.0.0.2")),
        (Some("::ffff:10.0.0.1"), xff(b"1.2.3.4, 203.0.113.7, 10.0.0.2")),
        (Some("10.0.0.1"), xff(b"203.0.113.7:8080")),
        (Some("10.0.0.1"), xff(b"[2001:db8::1]:443")),
        (Some("10.0.0.1"), xff(b"fe80::1%eth0")),
        (Some("10.0.0.1"), xff(b"::ffff:203.0.113.9")),
        (Some("10.0.0.1"), xff(b"203.0.113.9, ::ffff:10.0.0.5")),
        (Some("10.0.0.1"), xff(b"203.0.113.9, [fd00::1%2]:80")),
        (Some("10.0.0.1"), xff(b"\xff\xfe")),
        (Some("10.0.0.1"), xff(b"\xff, 203.0.113.11")),
        (Some("10.0.0.1"), xff(b"203.0.113.12, \xff")),
        (Some("10.0.0.1"), xff(b"")),
        (Some("10.0.0.1"), xff(b"203.0.113.13,")),
        (Some("10.0.0.1"), xff(b"unknown")),
        (
            Some("10.0.0.1"),
            vec![header("forwarded", b"for=198.51.100.1, FOR=\"[fe80::2%25eth0]:80\";proto=https")],
        ),
        (
            Some("10.0.0.1"),
            vec![header("forwarded", b"for=_hidden"), header("x-forwarded-for", b"203.0.113.1")],
        ),
        (Some("10.0.0.1"), vec![header("forwarded", b"for=\xff"), header("x-forwarded-for", b"192.0.2.9")]),
        (
            Some("10.0.0.1"),
            vec![header("x-forwarded-for", b"192.0.2.1, 192.0.2.2"), header("x-forwarded-for", b"10.0.0.3")],
        ),
        (Some("10.0.0.1"), xff(b"\xc3\xa9t\xc3\xa9, 10.0.0.4")),
        (Some("10.0.0.1"), xff(spoofed_left.as_bytes())),
        (Some("10.0.0.1"), xff(trusted_40.as_bytes())),
        (Some("10.0.0.1"), xff(beyond.as_bytes())),
        (Some("fd00::5"), xff(b"2001:db8::9")),
        (Some("2001:db8::5"), xff(b"203.0.113.7")),
    ];
    // Each way a node may be written (RFC 7239's node grammar, quotes, zones, ports, and what is not
    // an address), as the one hop a trusted proxy forwarded: its address, or the proxy's.
    let long_node =
        format!("192.0.2.1{}", " ".repeat(10) + &"0".repeat(client::http::forwarded::MAX_NODE_BYTES));
    let nodes: &[&[u8]] = &[
        b"192.0.2.1",
        b" 192.0.2.1:8080 ",
        b"2001:db8::1",
        b"[2001:db8::1]",
        b"\"[2001:db8::1]:443\"",
        b"2001:db8::1:443",
        b"[fe80::1%25eth0]:80",
        b"[::ffff:192.0.2.1]:80",
        b"_hidden",
        b"[",
        b"[2001:db8::1",
        b"[2001:db8::1]x",
        b"[2001:db8::1]:99999",
        b"192.0.2.1:",
        b"192.0.2.1:http",
        b"192.0.2.1%eth0",
        b"fe80::1%",
        b"::1]:80",
        b"\xff\xfe192.0.2.1",
        b"300.0.0.1",
        long_node.as_bytes(),
    ];
    let mut cases = cases;
    cases.extend(nodes.iter().map(|node| (Some("10.0.0.1"), xff(node))));
    let nets = ["10.0.0.0/8", "fd00::/8"];
    let trusted = TrustedProxies::new(nets.iter().map(|n| n.parse().unwrap()));
    cases
        .into_iter()
        .map(|(peer, headers)| {
            let mut map = HeaderMap::new();
            for h in &headers {
                let name = HeaderName::from_bytes(h["name"].as_str().unwrap().as_bytes()).unwrap();
                let bytes: Vec<u8> = (0..h["value_hex"].as_str().unwrap().len() / 2)
                    .map(|i| {
                        u8::from_str_radix(&h["value_hex"].as_str().unwrap()[2 * i..2 * i + 2], 16).unwrap()
                    })
                    .collect();
                map.append(name, HeaderValue::from_bytes(&bytes).unwrap());
            }
            let client = trusted.client_ip(peer.map(|p| p.parse::<IpAddr>().unwrap()), &map);
            (
                json!({ "trusted_proxies": nets, "peer": peer, "headers": headers }),
                json!({ "client_ip": client.map(|c| c.to_string()) }),
            )
        })
        .collect()
}

fn answer(response: Response<String>) -> Value {
    let mut headers: Vec<(String, String)> = response
        .headers()
        .iter()
        .map(|(n, v)| (n.as_str().to_string(), v.to_str().unwrap().to_string()))
        .collect();
    headers.sort();
    json!({ "status": response.status().as_u16(), "headers": headers, "body": response.body() })
}

fn http() -> Vec<(Value, Value)> {
    let decision = |allowed: bool, remaining: i64, retry_ms: Option<i64>, reset_ms: i64, degraded: bool| {
        let reply = [i64::from(allowed), 10, remaining, retry_ms.unwrap_or(-1), reset_ms];
        let mut decision = Decision::from_reply(&reply).expect("five fields");
        decision.degraded = degraded;
        decision
    };
    let decisions = [
        decision(true, 9, Some(0), 200, false),
        decision(false, 0, Some(200), 2000, false),
        decision(false, 0, Some(1001), 60_001, false),
        decision(false, 3, None, 0, false),
        decision(true, 10, Some(0), 0, true),
        decision(false, 0, Some(1000), 0, true),
    ];
    let mut out = vec![];
    for d in &decisions {
        for (name, rate) in [("api", true), ("we\"ird\\name", true), ("export", false)] {
            for structured in [false, true] {
                let described = Described { name, window_secs: 60, cost: 12, rate };
                let input = |answer: &str, status: u16, misconfigured: bool| {
                    json!({
                        "answer": answer,
                        "decision": {
                            "allowed": d.allowed, "limit": d.limit, "remaining": d.remaining,
                            "retry_after_ms": d.retry_after.map(|r| r.as_millis() as u64),
                            "reset_after_ms": d.reset_after.as_millis() as u64,
                            "limiting": d.limiting, "degraded": d.degraded,
                        },
                        "limit": { "name": name, "window_secs": 60, "cost": 12, "rate": rate },
                        "structured": structured,
                        "status": status,
                        "misconfigured": misconfigured,
                    })
                };
                let mut served = HeaderMap::new();
                add_headers(&mut served, d, &described, structured);
                let mut response = Response::new(String::new());
                *response.headers_mut() = served;
                out.push((input("served", 200, false), answer(response)));
                if !d.allowed {
                    out.push((input("denied", 429, false), answer(denied(d, &described, structured))));
                    out.push((
                        input("concurrency_limited", 429, false),
                        answer(concurrency_limited(d, &described)),
                    ));
                    for (status, misconfigured) in [(429, false), (503, true)] {
                        let status_code = StatusCode::from_u16(status).unwrap();
                        out.push((
                            input("unavailable", status, misconfigured),
                            answer(unavailable(d, &described, structured, status_code, misconfigured)),
                        ));
                    }
                }
            }
        }
    }
    out
}

/// Decision fields as every vector writes them.
/// The LLM headers (client::http::llm) for requests and tokens budgets, each given or not.
fn llm_headers() -> Vec<(Value, Value)> {
    use client::http::llm::{headers, Budget};
    let budget = |limit, remaining, reset_ms, window_secs| Budget { limit, remaining, reset_ms, window_secs };
    let cases = [
        (Some(budget(60, 59, 1000, 60)), Some(budget(150_000, 149_000, 400, 60))),
        (Some(budget(10, 0, 59_999, 60)), None),
        (None, Some(budget(1_000_000, 0, 86_399_001, 86_400))),
        (Some(budget(1, 1, 0, 1)), Some(budget(5, 5, 1_500, 10))),
        (Some(budget(100, 3, 361_000, 3600)), Some(budget(9, 0, 3_723_400, 7200))),
        (None, None),
    ];
    let input = |b: Option<Budget>| {
        b.map(|b| json!({ "limit": b.limit, "remaining": b.remaining, "reset_ms": b.reset_ms, "window_secs": b.window_secs }))
    };
    cases
        .into_iter()
        .map(|(r, t)| {
            let out: Vec<Value> = headers(r, t).into_iter().map(|(n, v)| json!([n, v])).collect();
            (json!({ "requests": input(r), "tokens": input(t) }), json!(out))
        })
        .collect()
}

pub(super) fn decided(d: &Decision) -> Value {
    json!({
        "allowed": d.allowed,
        "limit": d.limit,
        "remaining": d.remaining,
        "retry_after_ms": d.retry_after.map(|r| r.as_millis() as u64),
        "reset_after_ms": d.reset_after.as_millis() as u64,
        "limiting": d.limiting,
    })
}

/// The in-process limiter a client falls back to: a scenario (policies, a number of instances, timed
/// steps) and the decision of each step, at this instance's share, through core's algorithms.
fn fallback() -> Vec<(Value, Value)> {
    let policies = [
        bucket(10, 5.0),
        timed("fixed_window", 10, 1_000_000),
        timed("sliding_counter", 10, 1_000_000),
        timed("sliding_log", 4, 2_000_000),
        timed("concurrency", 3, 5_000_000),
        bucket(3, 1.0),
    ];
    let step = |op: &str, at_ms: u64, limits: &[(usize, &str, u64)]| {
        let limits: Vec<Value> =
            limits.iter().map(|(i, key, cost)| json!({ "policy": i, "key": key, "cost": cost })).collect();
        json!({ "op": op, "at_ms": at_ms, "limits": limits, "id": "h-1" })
    };
    let mut scenarios = vec![];
    for instances in [1u32, 3] {
        for i in 0..4 {
            let mut steps: Vec<Value> = (0..12).map(|n| step("decide", n, &[(i, "k", 1)])).collect();
            steps.push(step("decide", 500, &[(i, "k", 2)]));
            steps.push(step("decide", 1_000, &[(i, "k", 1)]));
            steps.push(step("decide", 1_999, &[(i, "k", 0)]));
            steps.push(step("refund", 2_000, &[(i, "k", 3)]));
            steps.push(step("decide", 2_000, &[(i, "k", 4)]));
            steps.push(step("decide", 2_001, &[(i, "k", 40)]));
            scenarios.push(json!({ "instances": instances, "policies": policies, "steps": steps }));
        }
        let steps = vec![
            step("acquire", 0, &[(4, "c", 1)]),
            step("acquire", 1, &[(4, "c", 2)]),
            step("acquire", 2, &[(4, "c", 1)]),
            step("release", 3, &[(4, "c", 0)]),
            step("renew", 4, &[(4, "c", 0)]),
            step("acquire", 5_000, &[(4, "c", 1)]),
            step("take", 0, &[(5, "t", 5)]),
            step("take", 1, &[(5, "t", 5)]),
            step("take", 2_500, &[(5, "t", 5)]),
            step("decide", 3_000, &[(0, "a", 1), (1, "b", 1), (5, "t", 1)]),
            step("decide", 3_001, &[(0, "a", 1), (5, "t", 3)]),
            step("acquire", 3_002, &[(0, "a", 1), (4, "d", 1)]),
        ];
        scenarios.push(json!({ "instances": instances, "policies": policies, "steps": steps }));
    }
    // Near the horizon, on one of 3 instances: 2 per 3e9 s keeps its whole bucket (its share would
    // refill past the horizon, as a token bucket's share does); 7 per 3e9 s cannot be a bucket at all
    // (7 ns-intervals overrun the horizon): denied, never fitting.
    let horizon =
        [timed("fixed_window", 2, 3_000_000_000_000_000), timed("sliding_log", 7, 3_000_000_000_000_000)];
    let steps = vec![
        step("decide", 0, &[(0, "h", 1)]),
        step("decide", 1, &[(0, "h", 1)]),
        step("decide", 2, &[(0, "h", 1)]),
        step("take", 3, &[(0, "h2", 5)]),
        step("decide", 4, &[(1, "n", 1)]),
        step("take", 5, &[(1, "n", 1)]),
    ];
    scenarios.push(json!({ "instances": 3, "policies": horizon, "steps": steps }));
    const T0: i64 = 1_700_000_000_000_000_000;
    scenarios
        .into_iter()
        .map(|scenario| {
            let local = LocalLimiter::fallback(scenario["instances"].as_u64().unwrap() as u32);
            let policies: Vec<Policy> =
                scenario["policies"].as_array().unwrap().iter().map(|p| policy_of(p).unwrap()).collect();
            let mut out = vec![];
            for step in scenario["steps"].as_array().unwrap() {
                let now = T0 + step["at_ms"].as_i64().unwrap() * 1_000_000;
                let owned: Vec<(String, usize, u64)> = step["limits"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|l| {
                        (
                            l["key"].as_str().unwrap().to_string(),
                            l["policy"].as_u64().unwrap() as usize,
                            l["cost"].as_u64().unwrap(),
                        )
                    })
                    .collect();
                let limits: Vec<Limit<'_>> =
                    owned.iter().map(|(k, p, c)| Limit::new(k, &policies[*p], *c)).collect();
                let id = step["id"].as_str().unwrap();
                let first = &limits[0];
                out.push(match step["op"].as_str().unwrap() {
                    "decide" => json!({ "decision": decided(&local.decide(&limits, now, true)) }),
                    "acquire" => json!({ "decision": decided(&local.acquire(&limits, id, now, true)) }),
                    "release" => json!({ "done": local.release(first.key, id, now) }),
                    "renew" => {
                        json!({ "done": local.renew(first.key, first.policy.window_length(), id, now) })
                    }
                    "take" => {
                        let taken = local.take(first, now, true);
                        json!({ "decision": decided(&taken.decision), "taken": taken.taken })
                    }
                    "refund" => {
                        local.refund(first.key, first.policy, first.cost, now);
                        json!({})
                    }
                    other => panic!("{other}"),
                });
            }
            (json!({ "t0_ns": T0, "scenario": scenario }), json!({ "steps": out }))
        })
        .collect()
}

#[test]
fn every_kind_is_in_the_policy_and_command_vectors() {
    use super::spec::form_name;
    use ratelimit_core::kind::LimiterKind;
    let vectors = all(client::engine::LIBRARY);
    let text = |name: &str| vectors.iter().find(|(n, _)| *n == name).unwrap().1.to_string();
    for kind in LimiterKind::ALL {
        assert!(text("policies").contains(kind.owner().name()), "{kind:?}");
        assert!(text("commands").contains(kind.command()), "{kind:?}");
        let _ = form_name(kind.request_form());
    }
}

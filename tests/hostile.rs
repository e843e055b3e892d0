//! Hostile input over a real connection: thousands of random argument vectors to every RL.* command.
//! Every reply is an error or a well-formed result, the server never dies, and no key is ever left
//! without a TTL. Bounded by HOSTILE_CASES (default 3000).

mod common;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use testkit::redis::{self, Value};
use testkit::Server;

const COMMANDS: &[&str] = &[
    "RL.TOKEN",
    "RL.SLIDE",
    "RL.FIXED",
    "RL.SLIDECOUNT",
    "RL.REFUND",
    "RL.ALL",
    "RL.TAKE",
    "RL.ACQUIRE",
    "RL.RELEASE",
    "RL.RENEW",
];

fn arg() -> impl Strategy<Value = Vec<u8>> {
    let fixed: Vec<&'static [u8]> = vec![
        b"0",
        b"1",
        b"-1",
        b"10",
        b"0.5",
        b"1e308",
        b"1e400",
        b"-1e400",
        b"1e-400",
        b"4.9e-324",
        b"2.2250738585072014e-308",
        b"nan",
        b"NaN",
        b"inf",
        b"-inf",
        b"+inf",
        b"18446744073709551615",
        b"18446744073709551616",
        b"9223372036854775807",
        b"-9223372036854775808",
        b"0x10",
        b"1,5",
        b" 1",
        b"",
        b"DEDUP",
        b"dedup",
        b"TOKEN",
        b"FIXED",
        b"SLIDECOUNT",
        b"SLIDE",
        b"\xff\xfe\x00",
        b"\x00",
    ];
    prop_oneof![
        4 => proptest::sample::select(fixed).prop_map(|b| b.to_vec()),
        2 => prop_oneof![Just("h:k1"), Just("h:k2"), Just("h:{t}a"), Just("h:{t}b"), Just("other:hash")].prop_map(|s| s.as_bytes().to_vec()),
        2 => any::<i64>().prop_map(|n| n.to_string().into_bytes()),
        1 => any::<f64>().prop_map(|f| f.to_string().into_bytes()),
        1 => proptest::collection::vec(any::<u8>(), 0..24),
        1 => Just(vec![b'7'; 100_000]),
    ]
}

/// A value that fits the position, or (one time in four) a hostile one.
fn slot(valid: Vec<&'static str>) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![3 => proptest::sample::select(valid).prop_map(|v| v.as_bytes().to_vec()), 1 => arg()]
}

fn key() -> impl Strategy<Value = Vec<u8>> {
    slot(vec!["h:k1", "h:k2", "h:k3", "h:{t}a", "h:{t}b", "other:hash"])
}

fn limit() -> impl Strategy<Value = Vec<u8>> {
    slot(vec!["1", "3", "10", "100"])
}

fn window() -> impl Strategy<Value = Vec<u8>> {
    slot(vec!["0.05", "1", "60", "0.001"])
}

fn cost() -> impl Strategy<Value = Vec<u8>> {
    slot(vec!["0", "1", "2", "5"])
}

/// Argument vectors shaped like each command's, with hostile values mixed in, and now and then a
/// vector of any length made of anything.
fn argv() -> impl Strategy<Value = (usize, Vec<Vec<u8>>)> {
    let token_group = (key(), limit(), slot(vec!["0.5", "5", "100", "0.001"]), cost())
        .prop_map(|(a, b, c, d)| vec![a, b, c, d]);
    let token = proptest::collection::vec(token_group, 1..4).prop_map(|groups| (0, groups.concat()));
    let slide =
        (key(), limit(), window(), slot(vec!["a", "b", "c"]), proptest::option::of(slot(vec!["DEDUP"])))
            .prop_map(|(k, l, w, id, dedup)| (1, [vec![k, l, w, id], dedup.into_iter().collect()].concat()));
    let counting = (2usize..4, key(), limit(), window(), proptest::option::of(cost()))
        .prop_map(|(c, k, l, w, n)| (c, [vec![k, l, w], n.into_iter().collect()].concat()));
    let refund =
        (slot(vec!["TOKEN", "FIXED", "SLIDECOUNT"]), key(), limit(), slot(vec!["0.5", "1", "60"]), cost())
            .prop_map(|(kind, k, l, x, n)| (4, vec![kind, k, l, x, n]));
    // RL.ALL: groups of any kind, the optional DEDUP or WEIGHT w anywhere a SLIDE or ACQUIRE group
    // may end (and where it may not).
    let all_group = (
        key(),
        slot(vec!["TOKEN", "FIXED", "SLIDECOUNT", "SLIDE", "ACQUIRE"]),
        limit(),
        slot(vec!["0.5", "1", "60"]),
        slot(vec!["0", "1", "a"]),
        proptest::option::of(
            proptest::sample::select(vec![
                vec!["DEDUP"],
                vec!["WEIGHT", "2"],
                vec!["WEIGHT", "0"],
                vec!["WEIGHT"],
            ])
            .prop_map(|words| words.iter().map(|w| w.as_bytes().to_vec()).collect::<Vec<Vec<u8>>>()),
        ),
    )
        .prop_map(|(k, kind, a, b, c, option)| {
            let option: Vec<Vec<u8>> = option.into_iter().flatten().collect();
            [vec![k, kind, a, b, c], option].concat()
        });
    let all = proptest::collection::vec(all_group, 1..4).prop_map(|groups| (5, groups.concat()));
    let take = (key(), limit(), slot(vec!["0.5", "5", "100"]), slot(vec!["1", "3", "100"]))
        .prop_map(|(k, c, r, m)| (6, vec![k, c, r, m]));
    let acquire = (
        key(),
        limit(),
        window(),
        slot(vec!["a", "b", "c"]),
        proptest::option::of(slot(vec!["1", "2", "0"])),
    )
        .prop_map(|(k, l, w, id, weight)| {
            let weight: Vec<Vec<u8>> = weight.map(|w| vec![b"WEIGHT".to_vec(), w]).unwrap_or_default();
            (7, [vec![k, l, w, id], weight].concat())
        });
    let release = (8usize..10, key(), window(), slot(vec!["a", "b", "c"])).prop_map(|(c, k, w, id)| {
        if c == 8 {
            (c, vec![k, id])
        } else {
            (c, vec![k, w, id])
        }
    });
    let anything = (0..COMMANDS.len(), proptest::collection::vec(arg(), 0..11));
    prop_oneof![3 => token, 3 => slide, 3 => counting, 2 => refund, 3 => all, 1 => take, 2 => acquire, 2 => release, 1 => anything]
}

fn well_formed(reply: &Value) -> bool {
    match reply {
        Value::Array(items) if items.len() == 5 || items.len() == 6 => {
            let ints: Vec<i64> =
                items.iter().filter_map(|v| if let Value::Int(n) = v { Some(*n) } else { None }).collect();
            ints.len() == items.len()
                && (ints[0] == 0 || ints[0] == 1)
                && ints[1] >= 1
                && (0..=ints[1]).contains(&ints[2])
                && ints[3] >= -1
                && ints[4] >= 0
        }
        _ => false,
    }
}

#[test]
fn random_argument_vectors_never_hurt_the_server() {
    let Some(server) = Server::builder().own() else { return };
    let mut con = server.conn();
    let _: () = redis::cmd("HSET").arg("other:hash").arg("f").arg("v").query(&mut con).unwrap();
    // The runner takes a Fn: the connection and the counters go through cells.
    let shared = std::cell::RefCell::new(con);
    let cases = std::env::var("HOSTILE_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(3000);
    let mut runner = TestRunner::new(Config { cases, failure_persistence: None, ..Config::default() });
    let (errors, results) = (std::cell::Cell::new(0u32), std::cell::Cell::new(0u32));
    runner
        .run(&argv(), |(command, args)| {
            let mut cmd = redis::cmd(COMMANDS[command]);
            for a in &args {
                cmd.arg(a.as_slice());
            }
            match cmd.query::<Value>(&mut *shared.borrow_mut()) {
                Ok(Value::Int(n)) if command >= 8 => {
                    prop_assert!(n == 0 || n == 1, "{} {:?} -> {}", COMMANDS[command], args, n);
                    results.set(results.get() + 1);
                }
                Ok(reply) => {
                    prop_assert!(well_formed(&reply), "{} {:?} -> {:?}", COMMANDS[command], args, reply);
                    results.set(results.get() + 1);
                }
                Err(e) => {
                    prop_assert!(e.code().is_some(), "an error reply without a code: {e}");
                    prop_assert!(!e.to_string().contains("internal error"), "{e}");
                    errors.set(errors.get() + 1);
                }
            }
            Ok(())
        })
        .unwrap();
    let (results, errors) = (results.get(), errors.get());
    assert!(results > 50 && errors > 50, "the mix exercised both paths: {results} results, {errors} errors");
    eprintln!("{results} well-formed results, {errors} error replies");
    let mut con = shared.into_inner();
    let pong: String = redis::cmd("PING").query(&mut con).expect("the server died");
    assert_eq!(pong, "PONG");
    let keys: Vec<String> = redis::cmd("KEYS").arg("h:*").query(&mut con).unwrap();
    for key in keys {
        let ttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut con).unwrap();
        assert!(ttl > 0 || ttl == -2, "{key} has no TTL ({ttl})");
    }
}

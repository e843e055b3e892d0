//! The Lua library beside the module on one real server: keys written by either engine are carried on
//! by the other for every kind (switching engines loses no bucket, window, log or lease), and the
//! library refuses every argument the module refuses, with the module's error text (through FCALL and
//! through each function's EVALSHA script).

mod common;

use common::lua::{self, Reply};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use std::cell::RefCell;
use testkit::redis::{self, Connection};
use testkit::{unique_key, Server};

/// A server with the module and the library (its clock the server's, as shipped).
fn server() -> Option<(Server, Connection)> {
    let server = Server::builder().own()?;
    let mut con = server.conn();
    lua::load(&mut con, &lua::source());
    Some((server, con))
}

/// One command's reply, an error as a reply.
fn reply(con: &mut Connection, cmd: &redis::Cmd) -> Reply {
    let mut pipe = redis::pipe();
    pipe.ignore_errors().add_command(cmd.clone());
    lua::run(con, &pipe).remove(0)
}

/// A module command. On Redis 7.0 the module's clock is in whole milliseconds and the library's in
/// microseconds: the module is called a little over a millisecond after the library, so that it never
/// reads an earlier time than the library wrote (a bucket read 1 ms in its past holds one token less).
fn module(con: &mut Connection, command: &str, args: &[&str]) -> Reply {
    std::thread::sleep(std::time::Duration::from_micros(1500));
    let mut cmd = redis::cmd(command);
    args.iter().for_each(|a| {
        cmd.arg(*a);
    });
    reply(con, &cmd)
}

fn library(con: &mut Connection, function: &str, keys: &[&str], args: &[&str]) -> Reply {
    let mut cmd = redis::cmd("FCALL");
    cmd.arg(function).arg(keys.len()).arg(keys).arg(args);
    reply(con, &cmd)
}

/// allowed and remaining of a limiter's reply.
fn head(r: &Reply) -> (i64, i64) {
    let v = r.ints();
    (v[0], v[2])
}

/// RL.INSPECT's fields that do not move with the clock, by name.
fn still_fields(r: &Reply) -> Vec<(String, Reply)> {
    let Reply::Array(items) = r else { panic!("RL.INSPECT replies a map: {r:?}") };
    items
        .chunks(2)
        .filter_map(|pair| match &pair[0] {
            Reply::Status(name) if !["ttl_ms", "backlog_ms"].contains(&name.as_str()) => {
                Some((name.clone(), pair[1].clone()))
            }
            _ => None,
        })
        .collect()
}

/// Both engines describe `key` alike.
fn same_inspection(con: &mut Connection, key: &str) {
    let by_module = module(con, "RL.INSPECT", &[key]);
    let by_library = library(con, "rl_inspect", &[key], &[]);
    assert_eq!(still_fields(&by_module), still_fields(&by_library), "{key}");
}

#[test]
fn token_buckets_carry_on_from_either_engine() {
    let Some((_server, mut con)) = server() else { return };
    // 1 token per 1,000 s: nothing refills during the test.
    let key = unique_key("lua-token");
    assert_eq!(head(&library(&mut con, "rl_token", &[&key], &["10", "0.001", "3"])), (1, 7));
    assert_eq!(head(&module(&mut con, "RL.TOKEN", &[&key, "10", "0.001", "1"])), (1, 6));
    assert_eq!(head(&library(&mut con, "rl_token", &[&key], &["10", "0.001", "1"])), (1, 5));
    assert_eq!(module(&mut con, "RL.TAKE", &[&key, "10", "0.001", "2"]).ints()[5], 2);
    assert_eq!(library(&mut con, "rl_take", &[&key], &["10", "0.001", "100"]).ints()[5], 3);
    assert_eq!(head(&module(&mut con, "RL.TOKEN", &[&key, "10", "0.001", "1"])), (0, 0));
    assert_eq!(head(&module(&mut con, "RL.REFUND", &["TOKEN", &key, "10", "0.001", "2"])), (1, 2));
    assert_eq!(head(&library(&mut con, "rl_refund", &[&key], &["TOKEN", "10", "0.001", "1"])), (1, 3));
    same_inspection(&mut con, &key);
}

/// The retry field of a limiter's reply (an allowed reservation's wait).
fn retry(r: &Reply) -> i64 {
    r.ints()[3]
}

#[test]
fn reservations_carry_on_from_either_engine() {
    let Some((_server, mut con)) = server() else { return };
    // 2 tokens, 1 per 1,000 s: a full refill is 2,000 s, and nothing refills during the test.
    let key = unique_key("lua-reserve");
    let (k, b) = (key.as_str(), ["2", "0.001"]);
    let reserve = |cost: &'static str, wait: &'static str| [b[0], b[1], cost, wait];
    let first = library(&mut con, "rl_reserve", &[k], &reserve("1", "0"));
    assert_eq!((head(&first), retry(&first)), ((1, 1), 0));
    assert_eq!(head(&module(&mut con, "RL.RESERVE", &[k, b[0], b[1], "1", "0"])), (1, 0));
    // Empty: no wait allowed is a denial; a wait of one token's refill is a reservation.
    assert_eq!(head(&library(&mut con, "rl_reserve", &[k], &reserve("1", "0"))), (0, 0));
    let queued = module(&mut con, "RL.RESERVE", &[k, b[0], b[1], "1", "1000"]);
    assert_eq!(head(&queued), (1, 0));
    assert!(retry(&queued) > 0, "the reservation waits: {queued:?}");
    // The library sees the module's queue: the next waits two tokens' refill, beyond 1,000 s.
    assert_eq!(head(&library(&mut con, "rl_reserve", &[k], &reserve("1", "1000"))), (0, 0));
    let second = library(&mut con, "rl_reserve", &[k], &reserve("1", "3600"));
    assert_eq!(head(&second), (1, 0));
    assert!(retry(&second) > retry(&queued), "served after the module's reservation");
    // A wait counts at most one full refill (2,000 s): the queue is full for both engines.
    assert_eq!(head(&module(&mut con, "RL.RESERVE", &[k, b[0], b[1], "1", "3600"])), (0, 0));
    assert_eq!(head(&module(&mut con, "RL.TOKEN", &[k, b[0], b[1], "1"])), (0, 0));
    // Refunds of reservations, by either engine: three tokens owed, then one.
    assert_eq!(head(&library(&mut con, "rl_refund", &[k], &["RESERVE", b[0], b[1], "1"])), (1, 0));
    assert_eq!(head(&module(&mut con, "RL.REFUND", &["RESERVE", k, b[0], b[1], "2"])), (1, 1));
    same_inspection(&mut con, k);
    // Batches: the module takes what is left; the library's minimum of one no longer fits now.
    let batch = module(&mut con, "RL.RESERVE", &[k, b[0], b[1], "0", "0", "UPTO", "5"]);
    assert_eq!((head(&batch), batch.ints()[5]), ((1, 0), 1));
    let none = library(&mut con, "rl_reserve", &[k], &[b[0], b[1], "1", "0", "UPTO", "2"]);
    assert_eq!((head(&none), none.ints()[5]), ((0, 0), 0));
    same_inspection(&mut con, k);
}

#[test]
fn rl_all_with_reservations_carries_on_and_names_the_longest_wait() {
    let Some((_server, mut con)) = server() else { return };
    let base = unique_key("lua-all-reserve");
    let (token, queue) = (format!("{base}:{{r}}:token"), format!("{base}:{{r}}:queue"));
    let module_args = [&token, "TOKEN", "2", "0.001", "1", &queue, "RESERVE", "1", "0.001", "1", "1000"];
    let library_args = ["TOKEN", "2", "0.001", "1", "RESERVE", "1", "0.001", "1", "1000"];
    let keys = [token.as_str(), queue.as_str()];
    // Both allowed now: the queue's bucket has fewer left.
    let now = library(&mut con, "rl_all", &keys, &library_args);
    assert_eq!((head(&now), now.ints()[5]), ((1, 0), 2));
    // Both allowed, both with nothing left: the reservation, which waits, is the limiting group.
    let waits = module(&mut con, "RL.ALL", &module_args);
    assert_eq!((head(&waits), waits.ints()[5]), ((1, 0), 2));
    assert!(retry(&waits) > 0, "{waits:?}");
    // Both denied: the queue's wait (two tokens) is longer than the bucket's (one).
    let denied = library(&mut con, "rl_all", &keys, &library_args);
    assert_eq!((head(&denied), denied.ints()[5]), ((0, 0), 2));
    assert!(retry(&denied) > retry(&waits));
    for key in keys {
        same_inspection(&mut con, key);
    }
}

#[test]
fn windows_carry_on_from_either_engine() {
    let Some((_server, mut con)) = server() else { return };
    for (command, function) in [("RL.FIXED", "rl_fixed"), ("RL.SLIDECOUNT", "rl_slidecount")] {
        let key = unique_key("lua-window");
        assert_eq!(head(&library(&mut con, function, &[&key], &["5", "600", "2"])), (1, 3));
        assert_eq!(head(&module(&mut con, command, &[&key, "5", "600"])), (1, 2));
        assert_eq!(head(&library(&mut con, function, &[&key], &["5", "600", "2"])), (1, 0));
        assert_eq!(head(&module(&mut con, command, &[&key, "5", "600"])).0, 0);
        let group = &command[3..];
        assert_eq!(head(&library(&mut con, "rl_refund", &[&key], &[group, "5", "600", "1"])), (1, 1));
        assert_eq!(head(&module(&mut con, "RL.REFUND", &[group, &key, "5", "600", "1"])), (1, 2));
        same_inspection(&mut con, &key);
    }
}

#[test]
fn sliding_logs_and_their_dedup_ids_carry_on_from_either_engine() {
    let Some((_server, mut con)) = server() else { return };
    let key = unique_key("lua-slide");
    assert_eq!(head(&library(&mut con, "rl_slide", &[&key], &["4", "600", "r1", "DEDUP"])), (1, 3));
    // The module recognises the library's id: the same hash.
    assert_eq!(head(&module(&mut con, "RL.SLIDE", &[&key, "4", "600", "r1", "DEDUP"])), (1, 3));
    assert_eq!(head(&module(&mut con, "RL.SLIDE", &[&key, "4", "600", "r2", "DEDUP"])), (1, 2));
    assert_eq!(head(&library(&mut con, "rl_slide", &[&key], &["4", "600", "r2", "DEDUP"])), (1, 2));
    assert_eq!(head(&library(&mut con, "rl_slide", &[&key], &["4", "600", "r3"])), (1, 1));
    assert_eq!(head(&module(&mut con, "RL.SLIDE", &[&key, "4", "600", "r4"])), (1, 0));
    assert_eq!(head(&library(&mut con, "rl_slide", &[&key], &["4", "600", "r5"])).0, 0);
    same_inspection(&mut con, &key);
}

#[test]
fn leases_carry_on_from_either_engine() {
    let Some((_server, mut con)) = server() else { return };
    let key = unique_key("lua-lease");
    assert_eq!(head(&library(&mut con, "rl_acquire", &[&key], &["3", "600", "h1", "WEIGHT", "2"])), (1, 1));
    assert_eq!(head(&module(&mut con, "RL.ACQUIRE", &[&key, "3", "600", "h2"])), (1, 0));
    assert_eq!(head(&module(&mut con, "RL.ACQUIRE", &[&key, "3", "600", "h1"])), (1, 0), "h1's own lease");
    same_inspection(&mut con, &key);
    // Each engine releases and renews what the other leased: the same digest.
    assert_eq!(module(&mut con, "RL.RELEASE", &[&key, "h1"]), Reply::Int(1));
    assert_eq!(library(&mut con, "rl_renew", &[&key], &["600", "h2"]), Reply::Int(1));
    assert_eq!(library(&mut con, "rl_release", &[&key], &["h2"]), Reply::Int(1));
    let exists: i64 = redis::cmd("EXISTS").arg(&key).query(&mut con).unwrap();
    assert_eq!(exists, 0, "the last release deletes the key");
}

#[test]
fn rl_all_carries_on_keys_of_every_kind_from_either_engine() {
    let Some((_server, mut con)) = server() else { return };
    let keys: Vec<String> = (0..6).map(|i| format!("{}:{{all}}:{i}", unique_key("lua-all"))).collect();
    let k: Vec<&str> = keys.iter().map(String::as_str).collect();
    let groups = [
        vec!["TOKEN", "3", "0.001", "1"],
        vec!["FIXED", "3", "600", "1"],
        vec!["SLIDECOUNT", "3", "600", "1"],
        vec!["SLIDE", "3", "600", "id", "DEDUP"],
        vec!["ACQUIRE", "3", "600", "h"],
        vec!["RESERVE", "3", "0.001", "1", "0"],
    ];
    let module_args = |round: usize| -> Vec<String> {
        let mut args = Vec::new();
        for (key, group) in k.iter().zip(&groups) {
            args.push(key.to_string());
            args.extend(
                group
                    .iter()
                    .map(|a| a.replace("id", &format!("id{round}")).replace('h', &format!("h{round}"))),
            );
        }
        args
    };
    let library_args = |round: usize| -> Vec<String> {
        module_args(round).into_iter().filter(|a| !keys.contains(a)).collect()
    };
    // Rounds alternate the engines on the same keys: each takes 1 of 3 from every limit.
    for round in 0..3 {
        let reply = if round % 2 == 0 {
            let args: Vec<String> = library_args(round);
            library(&mut con, "rl_all", &k, &args.iter().map(String::as_str).collect::<Vec<_>>())
        } else {
            let args: Vec<String> = module_args(round);
            module(&mut con, "RL.ALL", &args.iter().map(String::as_str).collect::<Vec<_>>())
        };
        assert_eq!(head(&reply), (1, 2 - round as i64), "round {round}");
    }
    let denied =
        library(&mut con, "rl_all", &k, &library_args(3).iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(denied.ints()[0], 0, "every limit is used up by both engines together");
    for key in &keys {
        same_inspection(&mut con, key);
    }
}

/// Argument lists for each command, from words that every grammar rule meets (numbers in and out of
/// range, options, kinds, empty ids), in FCALL's form: the function, its keys and its arguments.
fn argument_lists() -> impl Strategy<Value = (&'static str, usize, Vec<String>)> {
    let word = prop_oneof![
        Just("0"),
        Just("1"),
        Just("3"),
        Just("10"),
        Just("+3"),
        Just("007"),
        Just("-1"),
        Just("1.5"),
        Just("0.5"),
        Just("1e3"),
        Just("1e400"),
        Just("1e-9"),
        Just("nan"),
        Just("abc"),
        Just(""),
        Just("18446744073709551615"),
        Just("18446744073709551616"),
        Just("99999999999999999999"),
        Just("3000000000"),
        Just("3000000001"),
        Just("0.001"),
        Just("0.0005"),
        Just("100000"),
        Just("100001"),
        Just("1000000"),
        Just("1000001"),
        Just("1000000001"),
        Just("DEDUP"),
        Just("dedup"),
        Just("WEIGHT"),
        Just("weight"),
        Just("NODEDUP"),
        Just("TOKEN"),
        Just("fixed"),
        Just("SLIDECOUNT"),
        Just("SLIDE"),
        Just("ACQUIRE"),
        Just("BOGUS"),
        Just("id"),
        Just("RESERVE"),
        Just("reserve"),
        Just("UPTO"),
        Just("upto"),
    ]
    .prop_map(String::from);
    let function = prop_oneof![
        Just(("rl_token", 1)),
        Just(("rl_token", 2)),
        Just(("rl_fixed", 1)),
        Just(("rl_slidecount", 1)),
        Just(("rl_slide", 1)),
        Just(("rl_take", 1)),
        Just(("rl_refund", 1)),
        Just(("rl_acquire", 1)),
        Just(("rl_release", 1)),
        Just(("rl_renew", 1)),
        Just(("rl_inspect", 1)),
        Just(("rl_all", 1)),
        Just(("rl_all", 2)),
        Just(("rl_reserve", 1)),
    ];
    let any_list = (function, proptest::collection::vec(word.clone(), 0..9))
        .prop_map(|((f, keys), args)| (f, keys, args));
    // RL.RESERVE's shapes, which few random lists meet: four words, an option and its value, and
    // RESERVE groups in RL.ALL.
    let option =
        prop_oneof![Just("UPTO"), Just("upto"), Just("BOGUS"), Just("WEIGHT")].prop_map(String::from);
    let reserve = (proptest::collection::vec(word.clone(), 4), proptest::option::of((option, word.clone())))
        .prop_map(|(mut args, option)| {
            if let Some((name, value)) = option {
                args.extend([name, value]);
            }
            ("rl_reserve", 1, args)
        });
    let group = (proptest::collection::vec(word.clone(), 4), proptest::collection::vec(word, 0..3)).prop_map(
        |(params, tail)| {
            let mut args = vec!["RESERVE".to_string()];
            args.extend(params);
            args.extend(tail);
            ("rl_all", 1, args)
        },
    );
    prop_oneof![4 => any_list, 2 => reserve, 1 => group]
}

/// The module's form of a call: its command and arguments, keys in their places (RL.TOKEN and
/// RL.ALL: before each group; RL.REFUND: after the kind). None where the call has no one form there
/// (RL.TOKEN with other than three arguments per key, RL.ALL with groups that do not take every
/// argument): the library then refuses the call.
fn module_form(function: &str, keys: &[String], args: &[String]) -> Option<(String, Vec<String>)> {
    let command = format!("RL.{}", function[3..].to_uppercase());
    let mut out = Vec::new();
    match function {
        "rl_token" if args.len() != 3 * keys.len() => return None,
        "rl_token" => {
            for (key, group) in keys.iter().zip(args.chunks(3)) {
                out.push(key.clone());
                out.extend(group.iter().cloned());
            }
        }
        // Without its kind, the key would be read as the kind.
        "rl_refund" if args.is_empty() => return None,
        "rl_refund" => {
            out.extend(args.first().cloned());
            out.push(keys[0].clone());
            out.extend(args.iter().skip(1).cloned());
        }
        "rl_all" => {
            // A group is its kind, two parameters and a request of one word or its option's.
            let mut at = 0;
            for key in keys {
                out.push(key.clone());
                let option = args.get(at + 4).map(|a| a.to_uppercase());
                let reserve = args.get(at).is_some_and(|kind| kind.eq_ignore_ascii_case("RESERVE"));
                let len = match option.as_deref() {
                    // `cost max_wait`: no option.
                    _ if reserve => 5,
                    Some("DEDUP") => 5,
                    Some("WEIGHT") => 6,
                    _ => 4,
                };
                if at + len > args.len() {
                    return None;
                }
                out.extend(args[at..at + len].iter().cloned());
                at += len;
            }
            if at != args.len() {
                return None;
            }
        }
        _ => {
            out.push(keys[0].clone());
            out.extend(args.iter().cloned());
        }
    }
    Some((command, out))
}

/// Whether the library refuses what the module takes only because a number passes 2^53 (documented).
fn refused_beyond_2_53(r: &Reply) -> bool {
    matches!(r, Reply::Error(e) if e.contains("with the Lua library"))
}

/// The same call through the function's EVALSHA script (loaded under `sha`), on other keys: its outcome
/// is the function's (an error the same text; a verdict the same allowed, limit and remaining, since a
/// fixed window's reset moves with the clock between the two).
fn same_through_script(
    con: &mut Connection,
    sha: &str,
    keys: &[String],
    args: &[String],
    by_library: &Reply,
) -> bool {
    let keys: Vec<String> = keys.iter().map(|k| format!("{k}:script")).collect();
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(sha).arg(keys.len()).arg(&keys).arg(args);
    match (reply(con, &cmd), by_library) {
        (Reply::Array(s), Reply::Array(l)) => {
            s.len() == l.len() && s.iter().zip(l).take(3).all(|(a, b)| a == b)
        }
        (s, l) => &s == l,
    }
}

#[test]
fn the_library_refuses_what_the_module_refuses_with_its_words() {
    let Some((_server, mut con)) = server() else { return };
    let shas: std::collections::BTreeMap<String, String> = lua::scripts()
        .into_iter()
        .map(|(name, code)| (name, redis::cmd("SCRIPT").arg("LOAD").arg(code).query(&mut con).unwrap()))
        .collect();
    let con = RefCell::new(con);
    let mut runner = TestRunner::new(Config { cases: 3000, failure_persistence: None, ..Config::default() });
    let result = runner.run(&argument_lists(), |(function, n, args)| {
        let con = &mut *con.borrow_mut();
        let keys: Vec<String> = (0..n).map(|i| format!("{}:{{v}}:{i}", unique_key("lua-args"))).collect();
        let lua_keys: Vec<String> = keys.iter().map(|k| format!("{k}:lua")).collect();
        let by_library = library(
            con,
            function,
            &lua_keys.iter().map(String::as_str).collect::<Vec<_>>(),
            &args.iter().map(String::as_str).collect::<Vec<_>>(),
        );
        prop_assert!(
            same_through_script(con, &shas[function], &lua_keys, &args, &by_library),
            "{} {:?}: EVALSHA answers otherwise than FCALL ({:?})",
            function,
            args,
            by_library
        );
        let Some((command, module_args)) = module_form(function, &keys, &args) else {
            // No module call has these keys and arguments: the library refuses them (RL.TOKEN as a
            // wrong number of arguments; RL.ALL as the first group that does not parse says).
            if function == "rl_token" {
                let arity = "ERR wrong number of arguments for 'rl.token' command".to_string();
                prop_assert_eq!(by_library, Reply::Error(arity));
            } else {
                prop_assert!(by_library.is_error(), "{:?} {:?}: {:?}", function, args, by_library);
            }
            return Ok(());
        };
        let by_module = module(con, &command, &module_args.iter().map(String::as_str).collect::<Vec<_>>());
        let same = match (&by_module, &by_library) {
            // A capacity or limit past 2^53 is refused once the library has read the limiter's own
            // parameters, before the cost and what follows: where the module refuses one of those (a
            // fractional cost), both refuse.
            (_, l) if refused_beyond_2_53(l) => true,
            (Reply::Error(m), Reply::Error(l)) => m == l,
            (Reply::Error(_), _) => false,
            (Reply::Array(m), Reply::Array(l)) => m.len() == l.len(),
            (m, l) => std::mem::discriminant(m) == std::mem::discriminant(l),
        };
        if !same {
            return Err(TestCaseError::fail(format!(
                "{command} {module_args:?}: module {by_module:?}, library {by_library:?}"
            )));
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// A key of another type, or a string another limiter (or nobody) wrote: the same refusal from both.
#[test]
fn keys_of_another_type_or_limiter_are_refused_alike() {
    let Some((_server, mut con)) = server() else { return };
    let _: () = redis::cmd("HSET").arg("a-hash").arg("f").arg("v").query(&mut con).unwrap();
    let _: () = redis::cmd("SET").arg("a-string").arg("hello").query(&mut con).unwrap();
    let _: Vec<i64> = redis::cmd("RL.FIXED").arg("a-window").arg(5).arg(60).query(&mut con).unwrap();
    let calls: [(&str, &str, Vec<&str>); 10] = [
        ("RL.TOKEN", "rl_token", vec!["10", "5", "1"]),
        ("RL.FIXED", "rl_fixed", vec!["10", "60"]),
        ("RL.SLIDECOUNT", "rl_slidecount", vec!["10", "60"]),
        ("RL.SLIDE", "rl_slide", vec!["10", "60", "id"]),
        ("RL.TAKE", "rl_take", vec!["10", "5", "3"]),
        ("RL.RESERVE", "rl_reserve", vec!["10", "5", "1", "1", "UPTO", "3"]),
        ("RL.ACQUIRE", "rl_acquire", vec!["10", "60", "id"]),
        ("RL.RELEASE", "rl_release", vec!["id"]),
        ("RL.RENEW", "rl_renew", vec!["60", "id"]),
        ("RL.INSPECT", "rl_inspect", vec![]),
    ];
    for key in ["a-hash", "a-string", "a-window"] {
        for (command, function, args) in &calls {
            if *command == "RL.FIXED" && key == "a-window" {
                continue;
            }
            let mut module_args = vec![key];
            module_args.extend(args);
            let by_module = module(&mut con, command, &module_args);
            let by_library = library(&mut con, function, &[key], args);
            assert!(by_module.is_error() || *command == "RL.INSPECT", "{command} {key}: {by_module:?}");
            if *command == "RL.INSPECT" && key == "a-window" {
                assert_eq!(still_fields(&by_module), still_fields(&by_library));
            } else {
                assert_eq!(by_module, by_library, "{command} {key}");
            }
        }
    }
}

//! contract/vectors/errors.json over real sockets: a TCP server on loopback answers every limiter
//! command with a vector's RESP2 bytes (RESP3's to a connection that said HELLO 3), or fails the way its
//! transport says (no answer, a reset, a closed connection, a refused port); redis-rs reads it with its
//! own parser and the limiter does what the contract says with it: the decision or the usage error, the
//! breaker, the counter and the log line of the answer's class. (node/test/replies-wire.test.ts is the
//! Node.js twin.)

mod support;

use redis_ratelimit_client::{Backend, CallError, FailurePolicy, Limit, Limiter, Policy, ReplyClass};
use serde_json::Value;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::web::logs;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn cases() -> Vec<Value> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../contract/vectors/errors.json");
    let file: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    file["cases"].as_array().unwrap().clone()
}

/// The line at `*at` in `buf` (without its CRLF), moving `at` past it; None when it is not all there.
fn line(buf: &[u8], at: &mut usize) -> Option<String> {
    let end = buf[*at..].windows(2).position(|w| w == b"\r\n")? + *at;
    let text = String::from_utf8_lossy(&buf[*at..end]).into_owned();
    *at = end + 2;
    Some(text)
}

/// The commands (RESP arrays of bulk strings) at the start of `buf`, and how many bytes they took.
fn commands_in(buf: &[u8]) -> (Vec<Vec<String>>, usize) {
    let (mut out, mut at) = (vec![], 0);
    loop {
        let start = at;
        let Some(head) = line(buf, &mut at).filter(|h| h.starts_with('*')) else { return (out, start) };
        let mut args = vec![];
        for _ in 0..head[1..].parse::<usize>().unwrap() {
            let Some(len) = line(buf, &mut at) else { return (out, start) };
            let len: usize = len[1..].parse().unwrap();
            if at + len + 2 > buf.len() {
                return (out, start);
            }
            args.push(String::from_utf8_lossy(&buf[at..at + len]).into_owned());
            at += len + 2;
        }
        out.push(args);
    }
}

/// An outage's answer: what a primed server gives every limiter command but its second.
const LOADING: &str = "-LOADING Redis is loading the dataset in memory\r\n";

/// Serves one connection: setup commands get +OK (HELLO 3 its map), every limiter command `input`'s
/// answer; on a primed server (`sent` counts its limiter commands) only the second gets it, the
/// others an outage's answer.
async fn serve(mut socket: TcpStream, input: Value, primed: bool, sent: Arc<AtomicU32>) {
    let (mut buf, mut resp3) = (vec![], false);
    let mut chunk = [0u8; 4096];
    loop {
        let Ok(n) = socket.read(&mut chunk).await else { return };
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
        let (cmds, used) = commands_in(&buf);
        buf.drain(..used);
        for cmd in cmds {
            let name = cmd[0].to_ascii_uppercase();
            let answer = if name == "HELLO" && cmd.get(1).map(String::as_str) == Some("3") {
                resp3 = true;
                "%1\r\n+proto\r\n:3\r\n".to_string()
            } else if !name.starts_with("RL.") {
                "+OK\r\n".to_string()
            } else if primed && sent.fetch_add(1, Ordering::SeqCst) != 1 {
                LOADING.to_string()
            } else if let Some(reply) = input[if resp3 { "resp3" } else { "resp2" }].as_str() {
                reply.to_string()
            } else {
                match input["transport"].as_str().unwrap() {
                    "reset" => {
                        // A linger of zero: closing sends RST at once (so dropping it blocks nothing).
                        #[allow(deprecated)]
                        let _ = socket.set_linger(Some(Duration::ZERO));
                        return;
                    }
                    "closed" => return,
                    // timeout: no answer, ever
                    _ => std::future::pending().await,
                }
            };
            if socket.write_all(answer.as_bytes()).await.is_err() {
                return;
            }
        }
    }
}

/// A loopback port answering as `input` says (a refused one: nothing listens), primed or not.
async fn answering(input: &Value, primed: bool) -> (u16, tokio::task::JoinHandle<()>) {
    if input["transport"] == "refused" {
        return (support::closed_port(), tokio::spawn(async {}));
    }
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (input, sent) = (input.clone(), Arc::new(AtomicU32::new(0)));
    let task = tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            tokio::spawn(serve(socket, input.clone(), primed, sent.clone()));
        }
    });
    (port, task)
}

/// A limiter of `failure` on `port`, its breaker opened by `failures` in a row.
fn limiter_on(port: u16, query: &str, failure: FailurePolicy, name: &str, failures: u32) -> Limiter {
    Limiter::builder(failure)
        .name(name)
        .backend(Backend::Module)
        .deadline(Duration::from_millis(300))
        .breaker(failures, Duration::from_secs(60))
        .connect(&format!("redis://127.0.0.1:{port}/{query}"))
        .unwrap()
}

/// The case's call on `limiter`: the strict call for a usage case (its error as Redis wrote it), then
/// (`then_check`) the check (refused: denied, never degraded); the check's decision otherwise.
async fn call(limiter: &Limiter, input: &Value, output: &Value, then_check: bool, what: &str) {
    let call = &input["call"];
    let policy = &call["policy"];
    assert_eq!(policy["kind"], "token_bucket", "{what}");
    let bucket =
        Policy::token_bucket(policy["limit"].as_u64().unwrap(), policy["rate"].as_f64().unwrap()).unwrap();
    let (key, cost) = (call["key"].as_str().unwrap(), call["cost"].as_u64().unwrap());
    let d = if let Some(raise) = output.get("raise") {
        match limiter.check_strict(&[Limit::new(key, &bucket, cost)]).await {
            Err(CallError::Redis(e)) => {
                assert_eq!(e.code(), raise["code"].as_str(), "{what}");
                let text = format!("{} {}", e.code().unwrap(), e.detail().unwrap_or_default());
                assert_eq!(text, raise["message"].as_str().unwrap(), "{what}");
            }
            other => panic!("{what}: {other:?}"),
        }
        if then_check {
            let d = limiter.check(key, &bucket, cost).await;
            assert!(!d.allowed && !d.degraded && d.retry_after.is_none(), "{what}: refused {d:?}");
        }
        return;
    } else {
        limiter.check(key, &bucket, cost).await
    };
    let expected = &output["decision"];
    assert_eq!(
        (d.allowed, d.degraded),
        (expected["allowed"] == true, expected["degraded"] == true),
        "{what}"
    );
}

/// The counter each of the contract's counter names is in a limiter's counts.
fn counter(limiter: &Limiter, name: &str) -> u64 {
    let c = limiter.counts();
    match name {
        "outage" => c.outages,
        "misconfigured" => c.misconfigured,
        "conflicts" => c.conflicts,
        "usage_errors" => c.usage_errors,
        other => panic!("a counter the client lacks: {other}"),
    }
}

/// The log line each of the contract's log kinds is seen by (none: no line of the limiter).
fn log_line(kind: &str) -> Option<&'static str> {
    match kind {
        "outage" => Some("Redis outage:"),
        "once_per_cause" => Some("rate limiter misconfigured"),
        "once_per_key" => Some("rate limit key conflict"),
        "none" => None,
        other => panic!("a log kind the client lacks: {other}"),
    }
}

async fn run(protocol: &str) {
    let query = format!("?protocol={protocol}");
    let _ = logs();
    let all = cases();
    for (i, case) in all.iter().enumerate() {
        let (input, output) = (&case["input"], &case["output"]);
        let what = format!("{protocol} case {i}: {input}");
        if let Some(reply) = input["reply"].as_str() {
            assert_eq!(ReplyClass::of_reply(reply).name(), output["class"], "{what}");
        }
        let (port, server) = answering(input, false).await;
        let failure = if input["failure"] == "open" { FailurePolicy::Open } else { FailurePolicy::Closed };
        let name = format!("wire-{protocol}-{i}");
        let limiter = limiter_on(port, &query, failure, &name, 1_000);
        call(&limiter, input, output, true, &what).await;
        // A usage case calls twice (strict, then check): each refusal counted.
        let times = if output.get("raise").is_some() { 2 } else { 1 };
        assert_eq!(
            counter(&limiter, output["counter"].as_str().unwrap()),
            times,
            "{what}: {:?}",
            limiter.counts()
        );
        for other in ["outage", "misconfigured", "conflicts", "usage_errors"] {
            if other != output["counter"] {
                assert_eq!(counter(&limiter, other), 0, "{what}: {other} {:?}", limiter.counts());
            }
        }
        // The breaker, opened by 2 failures in a row, after one: a failure opens it; Redis answering
        // ends the row, so one more failure leaves it closed.
        let (primed_port, primed_server) = answering(input, true).await;
        let primed = limiter_on(primed_port, &query, failure, &format!("{name}-primed"), 2);
        assert!(
            primed.check("k", &Policy::token_bucket(10, 5.0).unwrap(), 1).await.degraded,
            "{what}: primed"
        );
        call(&primed, input, output, false, &what).await;
        if output["breaker"] == "failure" {
            assert!(primed.breaker_open(), "{what}: the second failure in a row opens it");
        } else {
            assert!(!primed.breaker_open(), "{what}: an answer is no failure");
            primed.check("k", &Policy::token_bucket(10, 5.0).unwrap(), 1).await;
            assert!(!primed.breaker_open(), "{what}: the answer ended the failures in a row");
        }
        primed_server.abort();
        let lines = logs().lines_with(&format!("limiter={name} "));
        let seen: Vec<&str> = ["outage", "once_per_cause", "once_per_key"]
            .into_iter()
            .filter(|k| lines.iter().any(|l| l.contains(log_line(k).unwrap())))
            .collect();
        let expected: Vec<&str> = log_line(output["log"].as_str().unwrap())
            .map(|_| output["log"].as_str().unwrap())
            .into_iter()
            .collect();
        assert_eq!(seen, expected, "{what}: {lines:?}");
        server.abort();
    }
}

#[tokio::test]
async fn errors_json_on_the_wire_resp2() {
    run("resp2").await;
}

#[tokio::test]
async fn errors_json_on_the_wire_resp3() {
    run("resp3").await;
}

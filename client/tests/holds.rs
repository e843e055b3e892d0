//! Holds against real servers with the module (RL.HOLD / RL.SETTLE): a denial writes nothing, a
//! settle gives unused units back once however often it is sent, usage past the hold stops a stream,
//! a hold left unsettled gets its abandon policy at once (CHARGE: nothing goes back; RETURN: the
//! unused part does) while an explicit cancel gives everything back, an unanswered hold is not
//! cancelled (a retry with its id settles it), exact limits stay charged, an outage during a settle is
//! retried and given up, and the failure policy decides when Redis cannot. On the module and on the
//! Lua library (`RL_TEST_ENGINE=lua`) alike.

mod support;

use redis_ratelimit_client::{
    Abandon, CallError, FailurePolicy, Hold, HoldLimit, HoldOptions, Limiter, Policy, Settlement,
};
use std::time::Duration;
use support::{closed_port, limiter, wait_until, Killable};
use testkit::{redis, unique_key, Server};

fn exists(server: &Server, key: &str) -> bool {
    redis::cmd("EXISTS").arg(key).query::<i64>(&mut server.conn()).unwrap() == 1
}

fn tpm() -> Policy {
    Policy::fixed_window(1000, Duration::from_secs(600)).unwrap()
}

/// What is left of `policy` at `key` (a peek).
async fn remaining(limiter: &Limiter, key: &str, policy: &Policy) -> u64 {
    let d = limiter.check(key, policy, 0).await;
    assert!(!d.degraded);
    d.remaining
}

async fn hold(limiter: &Limiter, limits: &[HoldLimit<'_>], id: &str) -> Hold {
    limiter.hold(limits, HoldOptions::default().id(id)).await.unwrap()
}

fn settled(s: Settlement) -> redis_ratelimit_client::Decision {
    match s {
        Settlement::Settled(d) => d,
        other => panic!("not settled: {other:?}"),
    }
}

#[tokio::test]
async fn a_denied_hold_writes_nothing_and_an_allowed_one_records_its_id() {
    let server = Server::builder().single();
    let limiter = limiter(&server, FailurePolicy::Closed);
    let (policy, key) = (tpm(), format!("rl:{{{}}}:tpm", unique_key("hold")));
    let ledger = redis_ratelimit_client::command::ledger_of(&key);
    let mut too_big = hold(&limiter, &[HoldLimit::estimate(&key, &policy, 1001)], "r0").await;
    assert!(!too_big.allowed() && too_big.id().is_none());
    // Where a hold is recorded: the ledger, or its own key beside it (`<ledger>:<id>`).
    let recorded = |id: &str| exists(&server, &ledger) || exists(&server, &format!("{ledger}:{id}"));
    assert!(!exists(&server, &key) && !recorded("r0"), "a denial writes nothing");
    assert!(matches!(too_big.settle(5).await.unwrap(), Settlement::Nothing));

    let first = hold(&limiter, &[HoldLimit::estimate(&key, &policy, 600)], "r1").await;
    assert!(first.allowed() && !first.decision().degraded);
    assert_eq!((first.decision().remaining, first.id()), (400, Some("r1")));
    assert!(recorded("r1"));
    // A retried hold with the same id takes nothing and replies as the first.
    let again = hold(&limiter, &[HoldLimit::estimate(&key, &policy, 600)], "r1").await;
    assert_eq!(again.decision().remaining, 400);
    assert_eq!(remaining(&limiter, &key, &policy).await, 400);
    let denied = hold(&limiter, &[HoldLimit::estimate(&key, &policy, 600)], "r2").await;
    assert!(!denied.allowed() && denied.decision().retry_after.is_some());
    assert_eq!(remaining(&limiter, &key, &policy).await, 400);
    // Both closed: "r2" holds nothing; "r1", unsettled, gets its abandon policy (CHARGE: it stays).
    assert!(matches!(denied.close().await.unwrap(), Settlement::Nothing));
    settled(first.close().await.unwrap());
    assert_eq!(remaining(&limiter, &key, &policy).await, 400);
    // The same hold again: its FINAL meets a settled hold, which replies as the first FINAL.
    let mut again = again;
    settled(again.cancel().await.unwrap());
    assert_eq!(remaining(&limiter, &key, &policy).await, 400);
}

#[tokio::test]
async fn a_settle_gives_unused_units_back_once_however_often_it_is_sent() {
    let server = Server::builder().single();
    let limiter = limiter(&server, FailurePolicy::Closed);
    let (policy, key) = (tpm(), format!("rl:{{{}}}:tpm", unique_key("hold")));
    let mut h = hold(&limiter, &[HoldLimit::estimate(&key, &policy, 600)], "s1").await;
    assert_eq!(remaining(&limiter, &key, &policy).await, 400);
    let first = settled(h.settle(100).await.unwrap());
    assert!(first.allowed);
    assert_eq!(remaining(&limiter, &key, &policy).await, 900);
    let again = settled(h.settle(100).await.unwrap());
    assert_eq!((again.allowed, again.remaining, again.limit), (first.allowed, first.remaining, first.limit));
    settled(h.cancel().await.unwrap()); // a cancel after the settle: the first FINAL stands
    assert_eq!(remaining(&limiter, &key, &policy).await, 900);
    assert!(matches!(h.close().await.unwrap(), Settlement::Nothing), "settled: nothing left to do");
}

#[tokio::test]
async fn usage_past_the_hold_is_charged_as_it_comes_and_stops_the_stream_when_nothing_is_left() {
    let server = Server::builder().single();
    let limiter = limiter(&server, FailurePolicy::Closed);
    let (policy, key) = (tpm(), format!("rl:{{{}}}:tpm", unique_key("hold")));
    let mut h = hold(&limiter, &[HoldLimit::estimate(&key, &policy, 500)], "p1").await;
    assert!(!h.add(300).await.unwrap(), "within the hold");
    assert_eq!(remaining(&limiter, &key, &policy).await, 500);
    assert!(!h.add(900).await.unwrap(), "past the hold, the limit has 100 left");
    assert_eq!(remaining(&limiter, &key, &policy).await, 100);
    assert!(h.add(1500).await.unwrap(), "past the hold and the limit: stop");
    assert_eq!(remaining(&limiter, &key, &policy).await, 0);
}

#[tokio::test]
async fn a_charge_hold_left_unsettled_stays_charged() {
    let server = Server::builder().single();
    let limiter = limiter(&server, FailurePolicy::Closed);
    let (policy, key) = (tpm(), format!("rl:{{{}}}:tpm", unique_key("hold")));
    let h = hold(&limiter, &[HoldLimit::estimate(&key, &policy, 700)], "c1").await;
    assert!(h.allowed());
    let d = settled(h.close().await.unwrap());
    assert!(d.allowed);
    assert_eq!(remaining(&limiter, &key, &policy).await, 300, "the estimate stays charged");
    let h = hold(&limiter, &[HoldLimit::estimate(&key, &policy, 200)], "c2").await;
    assert!(h.allowed());
    let before = support::calls(&server, "rl.settle");
    drop(h); // its abandon policy in the background: a FINAL at the estimate
    wait_until("the dropped hold's FINAL", async || support::calls(&server, "rl.settle") > before).await;
    assert_eq!(remaining(&limiter, &key, &policy).await, 100);
}

#[tokio::test]
async fn a_charge_hold_left_unsettled_after_usage_past_its_estimate_is_charged_the_usage() {
    let server = Server::builder().single();
    let limiter = limiter(&server, FailurePolicy::Closed);
    let (policy, key) = (tpm(), format!("rl:{{{}}}:tpm", unique_key("hold")));
    let mut h = hold(&limiter, &[HoldLimit::estimate(&key, &policy, 300)], "u1").await;
    assert!(!h.add(450).await.unwrap());
    settled(h.close().await.unwrap());
    assert_eq!(remaining(&limiter, &key, &policy).await, 550, "charged the usage, 450");
    // Usage within the estimate: the estimate stays charged.
    let mut h = hold(&limiter, &[HoldLimit::estimate(&key, &policy, 300)], "u2").await;
    h.add(100).await.unwrap();
    settled(h.close().await.unwrap());
    assert_eq!(remaining(&limiter, &key, &policy).await, 250);
}

#[tokio::test]
async fn a_return_hold_left_unsettled_gives_back_what_it_did_not_use() {
    let server = Server::builder().single();
    let limiter = limiter(&server, FailurePolicy::Closed);
    let tag = unique_key("hold");
    let (policy, key) = (tpm(), format!("rl:{{{tag}}}:tpm"));
    // An exact limit beside it stays charged: never named.
    let (rpm, requests) = (tpm(), format!("rl:{{{tag}}}:rpm"));
    let limits = [HoldLimit::exact(&requests, &rpm, 1), HoldLimit::estimate(&key, &policy, 100)];
    let options = HoldOptions::default().id("ret1").abandon(Abandon::Return);
    let mut h = limiter.hold(&limits, options).await.unwrap();
    assert!(h.allowed());
    assert_eq!(remaining(&limiter, &key, &policy).await, 900);
    h.add(30).await.unwrap();
    settled(h.close().await.unwrap());
    assert_eq!(remaining(&limiter, &key, &policy).await, 970, "70 came back");
    assert_eq!(remaining(&limiter, &requests, &rpm).await, 999);
    // Dropped without any usage: all of it comes back.
    let options = HoldOptions::default().id("ret2").abandon(Abandon::Return);
    drop(limiter.hold(&[HoldLimit::estimate(&key, &policy, 100)], options).await.unwrap());
    wait_until("the dropped hold's FINAL", async || remaining(&limiter, &key, &policy).await == 970).await;
}

#[tokio::test]
async fn an_explicit_cancel_gives_everything_back_and_closing_then_sends_nothing() {
    let server = Server::builder().single();
    let limiter = limiter(&server, FailurePolicy::Closed);
    let (policy, key) = (tpm(), format!("rl:{{{}}}:tpm", unique_key("hold")));
    let mut h = hold(&limiter, &[HoldLimit::estimate(&key, &policy, 700)], "x1").await;
    h.add(250).await.unwrap();
    settled(h.cancel().await.unwrap());
    assert_eq!(remaining(&limiter, &key, &policy).await, 1000);
    assert!(matches!(h.close().await.unwrap(), Settlement::Nothing));
    assert_eq!(remaining(&limiter, &key, &policy).await, 1000);
}

#[tokio::test]
async fn an_unanswered_hold_is_not_cancelled_and_a_retry_with_its_id_settles_it() {
    let Some(server) = Server::builder().own() else { return };
    let limiter = support::builder(FailurePolicy::Closed)
        .deadline(Duration::from_millis(300))
        .breaker(100, Duration::from_secs(1))
        .connect(server.url())
        .unwrap();
    let (policy, key) = (tpm(), format!("rl:{{{}}}:tpm", unique_key("hold")));
    assert_eq!(remaining(&limiter, &key, &policy).await, 1000); // connected (and the library loaded)
    let limits = [HoldLimit::estimate(&key, &policy, 600)];
    // Longer than the test: the pause ends with UNPAUSE.
    let _: () = redis::cmd("CLIENT").arg("PAUSE").arg(60_000).arg("WRITE").query(&mut server.conn()).unwrap();
    let h = hold(&limiter, &limits, "n1").await;
    assert!(!h.allowed() && h.decision().degraded && h.id().is_none(), "unanswered: the failure policy");
    drop(h);
    let _: () = redis::cmd("CLIENT").arg("UNPAUSE").query(&mut server.conn()).unwrap();
    // The hold reached Redis and runs now.
    wait_until("the unanswered hold to run", async || remaining(&limiter, &key, &policy).await == 400).await;
    // The caller's retry with the same id meets it: allowed, taking nothing; its settle counts.
    let mut h = hold(&limiter, &limits, "n1").await;
    assert!(h.allowed() && !h.decision().degraded);
    assert_eq!(remaining(&limiter, &key, &policy).await, 400);
    settled(h.settle(100).await.unwrap());
    assert_eq!(remaining(&limiter, &key, &policy).await, 900);
}

#[tokio::test]
async fn an_exact_prompt_limit_stays_charged_while_the_held_completion_limit_is_settled() {
    let server = Server::builder().single();
    let limiter = limiter(&server, FailurePolicy::Closed);
    let tag = unique_key("split");
    let (input, output) = (format!("rl:{{{tag}}}:in"), format!("rl:{{{tag}}}:out"));
    let rpm = Policy::token_bucket(10, 1.0).unwrap();
    let requests = format!("rl:{{{tag}}}:rpm");
    let policy = tpm();
    let limits = [
        HoldLimit::exact(&requests, &rpm, 1),
        HoldLimit::exact(&input, &policy, 300),
        HoldLimit::estimate(&output, &policy, 800),
    ];
    let mut h = limiter.hold(&limits, HoldOptions::default().abandon(Abandon::Return)).await.unwrap();
    assert!(h.allowed() && h.id().is_some_and(|id| id.len() == 32), "a random id");
    settled(h.settle(120).await.unwrap());
    assert_eq!(remaining(&limiter, &input, &policy).await, 700);
    assert_eq!(remaining(&limiter, &output, &policy).await, 880);
    // A per-key settle names only what it names; the others stay as held.
    let mut h = hold(&limiter, &limits, "split-2").await;
    settled(h.settle_each(&[(&output, 800)]).await.unwrap());
    assert_eq!(remaining(&limiter, &output, &policy).await, 80);
    // A key the hold does not hold is the caller's mistake: raised.
    let small = [limits[1], HoldLimit::estimate(&output, &policy, 10)];
    let mut h = hold(&limiter, &small, "split-3").await;
    assert!(h.allowed());
    let err = h.settle_each(&[(&format!("rl:{{{tag}}}:other"), 1)]).await.unwrap_err();
    assert!(err.to_string().contains("invalid key"), "{err}");
    h.cancel().await.unwrap();
}

#[tokio::test]
async fn invalid_holds_are_raised_whatever_the_failure_policy() {
    let server = Server::builder().single();
    let limiter = limiter(&server, FailurePolicy::Open);
    let (policy, key) = (tpm(), format!("rl:{{{}}}:tpm", unique_key("hold")));
    let limits = [HoldLimit::estimate(&key, &policy, 1)];
    let err = limiter.hold(&limits, HoldOptions::default().ttl(Duration::ZERO)).await.unwrap_err();
    assert!(err.to_string().contains("invalid ttl"), "{err}");
    let err = limiter.hold(&limits, HoldOptions::default().id("x".repeat(257))).await.unwrap_err();
    assert!(err.to_string().contains("invalid id"), "{err}");
    assert!(matches!(limiter.hold(&[], HoldOptions::default()).await, Err(CallError::Usage(_))));
}

#[tokio::test]
async fn a_settle_that_meets_an_outage_is_retried_then_given_up_without_raising() {
    let Some(mut server) = Killable::start() else { return };
    let limiter = support::builder(FailurePolicy::Closed)
        .breaker(100, Duration::from_secs(1))
        .connect(&server.url())
        .unwrap();
    let (policy, key) = (tpm(), format!("rl:{{{}}}:tpm", unique_key("hold")));
    let mut h = hold(&limiter, &[HoldLimit::estimate(&key, &policy, 600)], "o1").await;
    assert!(h.allowed());
    server.kill();
    match h.settle(10).await.unwrap() {
        Settlement::GaveUp(e) => assert!(!e.to_string().is_empty()),
        other => panic!("expected to give up: {other:?}"),
    }
    // A restarted server never saw the hold: the settle replies nil.
    server.start_again();
    wait_until("the server back", async || !limiter.check(&key, &policy, 0).await.degraded).await;
    assert!(matches!(h.settle(10).await.unwrap(), Settlement::NoHold));
}

#[tokio::test]
async fn when_redis_cannot_decide_the_failure_policy_does_and_the_hold_is_local() {
    let url = format!("redis://127.0.0.1:{}/", closed_port());
    let policy = tpm();
    let limits = [HoldLimit::estimate("rl:{t}:tpm", &policy, 10)];
    let open = support::builder(FailurePolicy::Open).connect(&url).unwrap();
    let mut h = open.hold(&limits, HoldOptions::default()).await.unwrap();
    assert!(h.allowed() && h.decision().degraded && h.id().is_none());
    assert!(!h.add(20).await.unwrap());
    assert!(matches!(h.settle(20).await.unwrap(), Settlement::Nothing));
    let closed = support::builder(FailurePolicy::Closed).connect(&url).unwrap();
    let h = closed.hold(&limits, HoldOptions::default()).await.unwrap();
    assert!(!h.allowed() && h.decision().degraded);
}

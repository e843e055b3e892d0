//! Concurrency limits against real servers: permits held at once never above the limit across two
//! limiter instances, every slot back at the end, a dropped permit released in the background, a
//! killed holder's slot back at lease end, renewals, and the failure policies.

mod support;

use redis_ratelimit_client::{Acquired, CallError, FailurePolicy, Limit, Policy};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::{closed_port, limiter, wait_until};
use testkit::{redis, unique_key, Server};

fn exists(server: &Server, key: &str) -> bool {
    redis::cmd("EXISTS").arg(key).query::<i64>(&mut server.conn()).unwrap() == 1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_acquirers_on_two_instances_never_hold_more_than_the_limit() {
    let server = Server::builder().single();
    let key = unique_key("lease");
    let policy = Policy::concurrency(5, Duration::from_secs(30)).unwrap();
    // A deadline that a loaded machine does not reach: every decision here must be Redis'.
    let patient = || {
        support::builder(FailurePolicy::Closed)
            .deadline(Duration::from_secs(2))
            .connect(server.url())
            .unwrap()
    };
    let instances = [patient(), patient()];
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for n in 0..200 {
        let (limiter, key, policy) = (instances[n % 2].clone(), key.clone(), policy.clone());
        let (inside, most) = (inside.clone(), most.clone());
        tasks.push(tokio::spawn(async move {
            let mut denials = 0u32;
            loop {
                match limiter.acquire(&key, &policy, 1).await {
                    Acquired::Granted(permit) => {
                        assert!(!permit.decision().degraded);
                        let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        inside.fetch_sub(1, Ordering::SeqCst);
                        assert!(permit.release().await.unwrap(), "the lease was still held");
                        return denials;
                    }
                    Acquired::Denied(d) => {
                        assert!(!d.degraded && d.retry_after.is_some());
                        denials += 1;
                        tokio::time::sleep(Duration::from_millis(1 + fastrand::u64(..3))).await;
                    }
                }
            }
        }));
    }
    let mut denials = 0;
    for t in tasks {
        denials += t.await.unwrap();
    }
    let most = most.load(Ordering::SeqCst);
    assert!(most <= 5, "{most} held at once, limit 5");
    assert!(most >= 2, "the holders overlapped ({most})");
    assert!(denials > 0, "200 acquirers on 5 slots met denials");
    assert!(!exists(&server, &key), "every slot free: the last release deleted the key");
}

#[tokio::test]
async fn a_dropped_permit_is_released_in_the_background() {
    let server = Server::builder().single();
    let key = unique_key("lease");
    // A lease far longer than the wait: only the release can free the slot in time.
    let policy = Policy::concurrency(1, Duration::from_secs(60)).unwrap();
    let limiter = limiter(&server, FailurePolicy::Closed);
    let permit = limiter.acquire(&key, &policy, 1).await.permit().expect("granted");
    assert!(matches!(limiter.acquire(&key, &policy, 1).await, Acquired::Denied(_)), "the one slot is held");
    // A cancelled request: its future (holding the permit) is dropped before it finishes.
    let cancelled = tokio::spawn(async move {
        let _held = permit;
        std::future::pending::<()>().await;
    });
    cancelled.abort();
    assert!(cancelled.await.unwrap_err().is_cancelled());
    wait_until("the dropped permit to release its lease", async || !exists(&server, &key)).await;
    let again = limiter.acquire(&key, &policy, 1).await;
    assert!(matches!(again, Acquired::Granted(_)), "the slot is free again");
}

#[tokio::test]
async fn a_killed_holder_frees_its_slot_when_its_lease_ends() {
    let server = Server::builder().single();
    let key = unique_key("lease");
    let policy = Policy::concurrency(1, Duration::from_secs(2)).unwrap();
    // The holder's whole runtime goes away with its permit leaked: nothing releases or renews it.
    let (url, k, p) = (server.url().to_string(), key.clone(), policy.clone());
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async {
            let limiter = support::builder(FailurePolicy::Closed).connect(&url).unwrap();
            std::mem::forget(limiter.acquire(&k, &p, 1).await.permit().expect("granted"));
        });
    })
    .join()
    .unwrap();
    let limiter = limiter(&server, FailurePolicy::Closed);
    match limiter.acquire(&key, &policy, 1).await {
        Acquired::Denied(d) => assert!(d.retry_after.unwrap() <= Duration::from_secs(2)),
        Acquired::Granted(_) => panic!("the leaked lease still holds the slot"),
    }
    wait_until("the lease to end by itself", async || !exists(&server, &key)).await;
    assert!(matches!(limiter.acquire(&key, &policy, 1).await, Acquired::Granted(_)));
}

#[tokio::test]
async fn a_permit_renews_its_lease_and_says_when_it_was_lost() {
    let server = Server::builder().single();
    let key = unique_key("lease");
    let policy = Policy::concurrency(1, Duration::from_secs(2)).unwrap();
    let limiter = limiter(&server, FailurePolicy::Closed);
    let permit = limiter.acquire(&key, &policy, 1).await.permit().expect("granted");
    // Renewed while held (every half lease): the key's expiry moves on by itself. Watched, not timed,
    // so a slow machine delays the check instead of failing it.
    let expiry =
        |server: &Server| -> i64 { redis::cmd("PEXPIRETIME").arg(&key).query(&mut server.conn()).unwrap() };
    let first = expiry(&server);
    assert!(first > 0, "the lease key expires");
    wait_until("the permit to renew its lease", async || expiry(&server) >= first + 500).await;
    assert!(!permit.lost());
    assert!(matches!(limiter.acquire(&key, &policy, 1).await, Acquired::Denied(_)), "still held");
    // Someone takes the slot from under it (here: the key is deleted): the next renew finds it gone.
    let _: i64 = redis::cmd("DEL").arg(&key).query(&mut server.conn()).unwrap();
    wait_until("a renew to find the lease gone", async || permit.lost()).await;
    assert!(!permit.release().await.unwrap(), "nothing was held any more");
}

#[tokio::test]
async fn check_refuses_a_concurrency_limit_and_acquire_all_takes_all_or_nothing() {
    let server = Server::builder().single();
    let (slots_key, rate_key) = (unique_key("{t}lease"), unique_key("{t}rate"));
    let slots = Policy::concurrency(1, Duration::from_secs(30)).unwrap();
    let rate = Policy::token_bucket(10, 0.001).unwrap();
    let limiter = limiter(&server, FailurePolicy::Closed);
    let strict = limiter.check_strict(&[Limit::new(&slots_key, &slots, 1)]).await;
    assert!(matches!(strict, Err(CallError::Usage(_))), "check has no release");
    assert!(!exists(&server, &slots_key));
    let both = [Limit::new(&rate_key, &rate, 1), Limit::new(&slots_key, &slots, 1)];
    let permit = limiter.acquire_all(&both).await.permit().expect("granted");
    let denied = limiter.acquire_all(&both).await;
    assert_eq!(denied.decision().limiting, 1, "the lease denied");
    assert!(!denied.decision().allowed);
    let peek = limiter.check(&rate_key, &rate, 0).await;
    assert_eq!(peek.remaining, 9, "the denied call took no token");
    assert!(permit.release().await.unwrap());
    assert!(!exists(&server, &slots_key));
}

#[tokio::test]
async fn the_failure_policy_decides_acquires_redis_cannot() {
    let down = format!("redis://127.0.0.1:{}/", closed_port());
    let policy = Policy::concurrency(4, Duration::from_secs(30)).unwrap();
    let open = support::builder(FailurePolicy::Open).connect(&down).unwrap();
    let permit = open.acquire("k", &policy, 1).await.permit().expect("open grants");
    assert!(permit.decision().degraded && permit.id().is_none(), "a degraded permit holds nothing");
    let closed = support::builder(FailurePolicy::Closed).connect(&down).unwrap();
    let denied = closed.acquire("k", &policy, 1).await;
    assert!(!denied.decision().allowed && denied.decision().degraded);
    // Two instances share the limit: this one holds 4 / 2.
    let local = support::builder(FailurePolicy::LocalFallback { instances: 2 }).connect(&down).unwrap();
    let first = local.acquire("k", &policy, 1).await.permit().expect("1 of 2");
    let _second = local.acquire("k", &policy, 1).await.permit().expect("2 of 2");
    let third = local.acquire("k", &policy, 1).await;
    assert!(!third.decision().allowed && third.decision().degraded);
    assert!(first.decision().degraded && first.release().await.unwrap());
    assert!(matches!(local.acquire("k", &policy, 1).await, Acquired::Granted(_)), "released locally");
}

#[tokio::test]
async fn an_in_process_limiter_holds_leases_itself() {
    let limiter = support::builder(FailurePolicy::Closed).in_process();
    let policy = Policy::concurrency(1, Duration::from_secs(30)).unwrap();
    let permit = limiter.acquire("k", &policy, 1).await.permit().expect("granted");
    assert!(!permit.decision().degraded);
    assert!(matches!(limiter.acquire("k", &policy, 1).await, Acquired::Denied(_)));
    drop(permit);
    wait_until("the dropped permit to be released", async || {
        matches!(limiter.acquire("k", &policy, 1).await, Acquired::Granted(_))
    })
    .await;
}

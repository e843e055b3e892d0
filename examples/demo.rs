//! The seed lab's scenarios 1-4 against a throwaway module-enabled redis-server: two connections
//! stand for two application instances sharing one Redis. Run with `make demo`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;
use testkit::redis::{self, Connection};
use testkit::{info_field, Server};

/// One application instance's view of the limiter: capacity 10, refill 5 tokens a second.
struct Instance {
    con: Connection,
}

struct Decision {
    allowed: bool,
    remaining: i64,
    retry_after_ms: i64,
}

impl Instance {
    fn allow(&mut self, key: &str) -> Decision {
        let r: Vec<i64> = redis::cmd("RL.TOKEN")
            .arg(format!("rl:{key}"))
            .arg(10)
            .arg(5)
            .arg(1)
            .query(&mut self.con)
            .expect("RL.TOKEN failed");
        Decision { allowed: r[0] == 1, remaining: r[2], retry_after_ms: r[3] }
    }
}

fn main() {
    let server = Server::start(&[]);
    let mut admin = server.conn();
    let version = info_field(&mut admin, "server", "redis_version").unwrap_or_default();
    println!("redis-server {version} on 127.0.0.1:{} with the ratelimit module\n", server.port);
    let mut inst_a = Instance { con: server.conn() };
    let mut inst_b = Instance { con: server.conn() };

    // 1. A burst of 12 requests for one key, alternating between the instances.
    let (mut allowed, mut denied) = (0, 0);
    for i in 0..12 {
        let inst = if i % 2 == 0 { &mut inst_a } else { &mut inst_b };
        let d = inst.allow("user:ada");
        if d.allowed {
            allowed += 1;
        } else {
            denied += 1;
            if denied == 1 {
                // Rounded to 100 ms as in the seed's output.
                let rounded = (d.retry_after_ms + 50) / 100 * 100;
                println!("first denial: remaining={} retry_after={rounded}ms", d.remaining);
            }
        }
    }
    println!("burst of 12 across two instances: {allowed} allowed, {denied} denied");

    // 2. Tokens come back at the refill rate.
    std::thread::sleep(Duration::from_secs(1));
    let allowed = (0..8).filter(|_| inst_a.allow("user:ada").allowed).count();
    println!("after one second at 5 tokens/s: {allowed} of 8 allowed");

    // 3. Keys are independent.
    let d = inst_a.allow("user:bob");
    println!("another key is untouched: allowed={} remaining={}", d.allowed, d.remaining);

    // 4. 200 threads race for one fresh key, half on each instance's connections.
    let ok = Arc::new(AtomicUsize::new(0));
    let barrier = Arc::new(Barrier::new(200));
    let server = Arc::new(server);
    let racers: Vec<_> = (0..200)
        .map(|_| {
            let (server, ok, barrier) = (server.clone(), ok.clone(), barrier.clone());
            std::thread::spawn(move || {
                let mut inst = Instance { con: server.conn() };
                barrier.wait();
                if inst.allow("user:race").allowed {
                    ok.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for r in racers {
        r.join().expect("a racer panicked");
    }
    println!("200 concurrent requests, capacity 10: {} allowed", ok.load(Ordering::Relaxed));
}

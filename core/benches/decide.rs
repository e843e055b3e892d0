//! Nanoseconds per decision of each pure algorithm (`make bench` runs these).

use criterion::{criterion_group, criterion_main, Criterion};
use ratelimit_core::decimal::Decimal;
use ratelimit_core::fixed_window::{FixedWindow, WindowState};
use ratelimit_core::limiter::apply;
use ratelimit_core::sliding_counter::{CounterState, SlidingCounter};
use ratelimit_core::sliding_log::{Log, RequestId, SlidingLog};
use ratelimit_core::time::NANOS_PER_SEC;
use ratelimit_core::token_bucket::TokenBucket;
use std::hint::black_box;
use std::time::Duration;

const NOW: i64 = 1_800_000_000 * NANOS_PER_SEC;

fn algorithms(c: &mut Criterion) {
    let rate = Decimal::parse(b"5").unwrap();
    let bucket = TokenBucket::new(10, rate).unwrap();
    c.bench_function("token bucket: decide", |b| {
        b.iter(|| bucket.decide_tat(black_box(Some(NOW + 500_000_000)), black_box(NOW), black_box(1)))
    });
    c.bench_function("token bucket: parse rate + build", |b| {
        b.iter(|| TokenBucket::new(black_box(10), Decimal::parse(black_box(b"2.5")).unwrap()))
    });

    let fixed = FixedWindow::new(100, 60 * NANOS_PER_SEC).unwrap();
    let state = Some(WindowState { count: 10, ends_at: NOW + NANOS_PER_SEC });
    c.bench_function("fixed window: decide", |b| {
        b.iter(|| fixed.decide_window(black_box(state), black_box(NOW), 1))
    });

    let counter = SlidingCounter::new(100, 60 * NANOS_PER_SEC).unwrap();
    let cs = Some(CounterState { window: (NOW / (60 * NANOS_PER_SEC)) as u64, current: 10, previous: 50 });
    c.bench_function("sliding counter: decide", |b| {
        b.iter(|| counter.decide_counts(black_box(cs), black_box(NOW), 1))
    });

    // Sliding logs holding 5,000 requests at limit 10,000, without and with ids.
    let log = SlidingLog::new(10_000, 3_600_000_000).unwrap();
    let now_us = (NOW / 1000) as u64;
    let filled = |dedup: bool| {
        let mut value = Vec::new();
        for i in 0..5_000u64 {
            let parsed = (!value.is_empty()).then(|| Log::parse(&value).unwrap());
            let d = log.decide_log(parsed, now_us + i, RequestId { hash: i + 1, dedup });
            apply(&mut value, d.write.as_ref().unwrap());
        }
        value
    };
    let (plain, with_ids) = (filled(false), filled(true));
    let later = now_us + 10_000;
    c.bench_function("sliding log (5,000 entries): parse + decide", |b| {
        let id = RequestId { hash: 0, dedup: false };
        b.iter(|| log.decide_log(Some(Log::parse(black_box(&plain)).unwrap()), black_box(later), id))
    });
    c.bench_function("sliding log (5,000 entries): parse + decide with DEDUP", |b| {
        let id = RequestId { hash: 1 << 40, dedup: true };
        b.iter(|| log.decide_log(Some(Log::parse(black_box(&with_ids)).unwrap()), black_box(later), id))
    });
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30)
}

criterion_group! { name = benches; config = config(); targets = algorithms }
criterion_main!(benches);

//! RL.TAKE: partial grants from a token bucket, against a real server.

mod common;

use common::calls::*;
use testkit::{unique_key, Server};

#[test]
fn takes_what_the_bucket_holds_up_to_max_from_the_same_state_as_rl_token() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let key = unique_key("take");
    let (first, taken) = take(&mut con, &key, 10, "5", 4);
    assert_eq!((first.head(), taken), ((true, 10, 6), 4));
    // RL.TOKEN sees the same bucket.
    assert_eq!(token(&mut con, &key, 10, "5", 1).remaining, 5);
    let (rest, taken) = take(&mut con, &key, 10, "5", 100);
    assert_eq!((rest.head(), taken), ((true, 10, 0), 5));
    let (none, taken) = take(&mut con, &key, 10, "5", 3);
    assert_eq!((none.allowed, taken), (false, 0));
    assert!((1..=200).contains(&none.retry_after_ms), "the wait for one token at 5/s: {none:?}");
    assert!(pttl(&mut con, &key) > 0, "the key expires when the bucket is full again");
}

#[test]
fn bad_arguments_get_a_clear_error() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let key = unique_key("take-bad");
    let k = key.as_bytes();
    assert_eq!(
        rl_error(&mut con, "RL.TAKE", &[k, b"10", b"5", b"0"]),
        "ERR invalid max: must be a whole number >= 1"
    );
    assert_eq!(
        rl_error(&mut con, "RL.TAKE", &[k, b"0", b"5", b"1"]),
        "ERR invalid capacity: must be a whole number >= 1"
    );
    assert!(rl_error(&mut con, "RL.TAKE", &[k, b"10", b"5"]).starts_with("ERR wrong number of arguments"));
    assert!(!exists(&mut con, &key));
}

//! Each bound of `limits.rs` is written once: no string literal in core's sources spells a bound's
//! digits (error texts take them from `limits.rs`'s macros with `concat!`), and the texts say the
//! constants' values. Pure: reads the sources.

use ratelimit_core::limits::{MAX_HORIZON_SECS, MAX_LEASE_LIMIT, MAX_LOG_LIMIT, MAX_RATE_PER_SEC};
use std::path::Path;

const BOUNDS: [u64; 4] = [MAX_HORIZON_SECS, MAX_RATE_PER_SEC, MAX_LOG_LIMIT, MAX_LEASE_LIMIT];

/// The string literals of `source` outside its test modules (a `#[cfg(test)]` and all after it).
fn literals(source: &str) -> Vec<&str> {
    let code = source.split("#[cfg(test)]").next().unwrap();
    let mut out = vec![];
    for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
        let mut parts = line.split('"');
        parts.next();
        while let (Some(inside), _) = (parts.next(), parts.next()) {
            out.push(inside);
        }
    }
    out
}

/// Whether `text` holds `number`'s digits as a number of its own (not inside a longer one).
fn spells(text: &str, number: u64) -> bool {
    let digits = number.to_string();
    text.match_indices(&digits).any(|(i, _)| {
        let before = text[..i].chars().next_back().is_none_or(|c| !c.is_ascii_digit());
        let after = text[i + digits.len()..].chars().next().is_none_or(|c| !c.is_ascii_digit());
        before && after
    })
}

#[test]
fn no_string_literal_in_core_spells_a_bound() {
    let mut found = vec![];
    let mut dirs = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let source = std::fs::read_to_string(&path).unwrap();
                for text in literals(&source) {
                    if BOUNDS.iter().any(|&b| spells(text, b)) {
                        found.push(format!("{}: \"{text}\"", path.display()));
                    }
                }
            }
        }
    }
    assert!(found.is_empty(), "bounds typed as digits (take them from limits.rs):\n{}", found.join("\n"));
}

#[test]
fn the_texts_say_the_bounds() {
    use ratelimit_core::{leases, limits, sliding_log, token_bucket, window};
    assert!(spells(limits::SECONDS_EXPECTED, MAX_HORIZON_SECS));
    assert_eq!(window::WINDOW.expected, limits::SECONDS_EXPECTED);
    assert_eq!(leases::LEASE.expected, limits::SECONDS_EXPECTED);
    assert!(
        spells(leases::LIMIT.expected, MAX_LEASE_LIMIT) && spells(leases::WEIGHT.expected, MAX_LEASE_LIMIT)
    );
    assert!(spells(sliding_log::LIMIT.expected, MAX_LOG_LIMIT));
    assert!(spells(token_bucket::RATE_TOO_LARGE.expected, MAX_RATE_PER_SEC));
    assert!(spells(token_bucket::REFILL_TOO_LONG.expected, MAX_HORIZON_SECS));
    assert!(!spells("1 to 1000000", MAX_LEASE_LIMIT) && spells("1 to 100000.", MAX_LEASE_LIMIT));
}

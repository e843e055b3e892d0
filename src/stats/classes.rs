//! Outcomes per key class, for `INFO ratelimit` (section `ratelimit_classes`): a key's class is the key
//! up to its last separator (`rl:login:ip:203.0.113.7` -> `rl:login:ip`). The number of classes is
//! bounded by `ratelimit.class-limit`, so attacker-chosen keys cannot grow memory: classes beyond it
//! are summed under `other`. Counters are per server process: a restart or RL.RESETSTATS zeroes them.

use std::collections::HashMap;

/// What the class of a key without the separator is called.
pub const NO_CLASS: &[u8] = b"(none)";
/// What classes beyond the bound are summed under.
pub const OTHER: &[u8] = b"other";

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Outcomes {
    pub allowed: u64,
    pub denied: u64,
    pub errors: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Allowed,
    Denied,
    Error,
}

#[derive(Default)]
pub struct Classes {
    counters: Vec<Outcomes>,
    index: HashMap<Box<[u8]>, usize, ahash::RandomState>,
    other: Outcomes,
    /// The last class counted (with its separator) and its index: runs of calls in one class (the
    /// commonest case: one limiter's keys) skip the hash lookup. The key itself is never copied.
    last_separator: u8,
    last: Vec<u8>,
    last_index: Option<usize>,
}

/// The class of `key`: the part before the last `separator`.
pub fn class_of(key: &[u8], separator: u8) -> &[u8] {
    // memrchr: the last separator found a word at a time (a byte loop costs more than the rest of
    // recording an outcome).
    match memchr::memrchr(separator, key) {
        Some(end) => &key[..end],
        None => NO_CLASS,
    }
}

impl Classes {
    /// Counts `outcome` for `key`'s class; a new class beyond `limit` is counted as `other`.
    pub fn record(&mut self, key: &[u8], separator: u8, limit: usize, outcome: Outcome) {
        let class = class_of(key, separator);
        let index = match self.last_index {
            Some(i) if self.last_separator == separator && self.last.as_slice() == class => Some(i),
            _ => {
                self.last_separator = separator;
                self.lookup(class, limit)
            }
        };
        let counters = match index {
            Some(i) => &mut self.counters[i],
            None => &mut self.other,
        };
        match outcome {
            Outcome::Allowed => counters.allowed += 1,
            Outcome::Denied => counters.denied += 1,
            Outcome::Error => counters.errors += 1,
        }
    }

    /// The class's index, adding it while there is room; remembered as the last class.
    fn lookup(&mut self, class: &[u8], limit: usize) -> Option<usize> {
        let index = match self.index.get(class) {
            Some(&i) => Some(i),
            None if self.counters.len() < limit => {
                self.counters.push(Outcomes::default());
                self.index.insert(class.into(), self.counters.len() - 1);
                Some(self.counters.len() - 1)
            }
            None => None,
        };
        self.last.clear();
        self.last.extend_from_slice(class);
        self.last_index = index;
        index
    }

    /// Every counted class, sorted by name, then `other` when it counted anything.
    pub fn snapshot(&self) -> Vec<(Vec<u8>, Outcomes)> {
        let mut all: Vec<(Vec<u8>, Outcomes)> =
            self.index.iter().map(|(k, &i)| (k.to_vec(), self.counters[i])).collect();
        all.sort();
        if self.other != Outcomes::default() {
            all.push((OTHER.to_vec(), self.other));
        }
        all
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.counters.len()
    }
}

impl PartialOrd for Outcomes {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Outcomes {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.allowed, self.denied, self.errors).cmp(&(other.allowed, other.denied, other.errors))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_are_keys_up_to_the_last_separator_and_bounded() {
        assert_eq!(class_of(b"rl:login:ip:203.0.113.7", b':'), b"rl:login:ip");
        assert_eq!(class_of(b"rl/login/ip", b'/'), b"rl/login");
        assert_eq!(class_of(b"plain", b':'), NO_CLASS);
        let mut c = Classes::default();
        c.record(b"rl:login:ip:1", b':', 2, Outcome::Allowed);
        c.record(b"rl:login:ip:2", b':', 2, Outcome::Denied);
        c.record(b"rl:api:user:1", b':', 2, Outcome::Error);
        c.record(b"rl:search:user:1", b':', 2, Outcome::Allowed);
        c.record(b"rl:other:x:1", b':', 2, Outcome::Denied);
        assert_eq!(c.len(), 2);
        let snap = c.snapshot();
        assert_eq!(snap[0], (b"rl:api:user".to_vec(), Outcomes { allowed: 0, denied: 0, errors: 1 }));
        assert_eq!(snap[1], (b"rl:login:ip".to_vec(), Outcomes { allowed: 1, denied: 1, errors: 0 }));
        assert_eq!(snap[2], (OTHER.to_vec(), Outcomes { allowed: 1, denied: 1, errors: 0 }));
    }
}

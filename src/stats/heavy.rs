//! Who is denied most, right now: a Space-Saving summary (Metwally et al.) of denied keys in bounded
//! memory. It tracks at most `capacity` keys; a denial of an untracked key when full replaces the key
//! with the smallest count and inherits that count (+1), recorded as the entry's possible
//! overestimate (`error`). Any key denied more than `total / capacity` times is guaranteed to be in
//! the table, and `count - error` is a lower bound of its true count. Each entry also keeps when its
//! tracking began and its last denial, so "denied for a long time" is visible.

use std::collections::HashMap;

/// Keys longer than this are tracked by their first bytes (and marked), to bound memory.
pub const MAX_KEY_LEN: usize = 256;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub key: Box<[u8]>,
    pub count: u64,
    /// How much of `count` may belong to keys this entry replaced.
    pub error: u64,
    pub first_ms: i64,
    pub last_ms: i64,
}

#[derive(Default)]
pub struct HeavyHitters {
    entries: Vec<Entry>,
    index: HashMap<Box<[u8]>, usize, ahash::RandomState>,
    /// The entry of the last key recorded: a key denied again and again skips the hash lookup.
    last: Option<usize>,
}

fn bounded(key: &[u8]) -> &[u8] {
    &key[..key.len().min(MAX_KEY_LEN)]
}

impl HeavyHitters {
    /// Counts one denial of `key` at `now_ms`, tracking at most `capacity` keys.
    pub fn record(&mut self, key: &[u8], now_ms: i64, capacity: usize) {
        let key = bounded(key);
        // A smaller capacity (ratelimit.top-size lowered) drops the smallest entries first.
        while self.entries.len() > capacity.max(1) {
            self.evict_min();
        }
        let cached = self.last.filter(|&i| self.entries.get(i).is_some_and(|e| *e.key == *key));
        if let Some(i) = cached.or_else(|| self.index.get(key).copied()) {
            let e = &mut self.entries[i];
            e.count += 1;
            e.last_ms = now_ms;
            self.last = Some(i);
            return;
        }
        if self.entries.len() < capacity.max(1) {
            self.index.insert(key.into(), self.entries.len());
            let entry = Entry { key: key.into(), count: 1, error: 0, first_ms: now_ms, last_ms: now_ms };
            self.entries.push(entry);
            self.last = Some(self.entries.len() - 1);
            return;
        }
        let Some(i) = self.min_index() else { return };
        let e = &mut self.entries[i];
        self.index.remove(&e.key);
        let min = e.count;
        *e = Entry { key: key.into(), count: min + 1, error: min, first_ms: now_ms, last_ms: now_ms };
        self.index.insert(key.into(), i);
        self.last = Some(i);
    }

    fn min_index(&self) -> Option<usize> {
        self.entries.iter().enumerate().min_by_key(|(_, e)| e.count).map(|(i, _)| i)
    }

    fn evict_min(&mut self) {
        let Some(i) = self.min_index() else { return };
        let removed = self.entries.swap_remove(i);
        self.index.remove(&removed.key);
        if let Some(moved) = self.entries.get(i) {
            self.index.insert(moved.key.clone(), i);
        }
    }

    /// The `n` most denied keys, most first.
    pub fn top(&self, n: usize) -> Vec<Entry> {
        let mut all = self.entries.clone();
        all.sort_by(|a, b| b.count.cmp(&a.count).then(b.last_ms.cmp(&a.last_ms)));
        all.truncate(n);
        all
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_heavy_hitter_among_many_light_keys() {
        let mut h = HeavyHitters::default();
        for i in 0..10_000u64 {
            h.record(format!("light:{i}").as_bytes(), i as i64, 16);
            if i % 10 == 0 {
                h.record(b"heavy", i as i64, 16);
            }
        }
        assert_eq!(h.len(), 16);
        let top = h.top(3);
        assert_eq!(&*top[0].key, b"heavy");
        assert!(top[0].count - top[0].error <= 1000 && top[0].count >= 1000, "{:?}", top[0]);
        assert_eq!(top[0].last_ms, 9_990);
        // Shrinking the capacity drops the smallest entries.
        h.record(b"heavy", 20_000, 4);
        assert_eq!(h.len(), 4);
        assert_eq!(&*h.top(1)[0].key, b"heavy");
        let long = vec![b'x'; 1000];
        h.record(&long, 1, 4);
        assert!(h.top(10).iter().all(|e| e.key.len() <= MAX_KEY_LEN));
    }
}

//! Who is denied most, right now: a Space-Saving summary (Metwally et al.) of denied keys in bounded
//! memory. It tracks at most `capacity` keys; a denial of an untracked key when full replaces the key
//! with the smallest count and inherits that count (+1), recorded as the entry's possible
//! overestimate (`error`). Any key denied more than `total / capacity` times is guaranteed to be in
//! the table, and `count - error` is a lower bound of its true count. Each entry also keeps when its
//! tracking began and its last denial, so "denied for a long time" is visible.

use std::collections::HashMap;
use std::hash::BuildHasher;

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

/// A tracked key: its bytes in a buffer of its own that a replacement reuses, so a denial of a new
/// key when the table is full allocates nothing.
struct Slot {
    key: Vec<u8>,
    hash: u64,
    count: u64,
    error: u64,
    first_ms: i64,
    last_ms: i64,
}

#[derive(Default)]
pub struct HeavyHitters {
    slots: Vec<Slot>,
    /// Slot by the key's 64-bit hash: the key is stored once, in its slot, and compared there.
    index: HashMap<u64, usize, NoHash>,
    hasher: ahash::RandomState,
    /// The slot of the last key recorded: a key denied again and again skips the hash.
    last: Option<usize>,
    /// No slot counts less than this (counts only grow; a replaced slot gets the minimum + 1), and
    /// where the search for a slot at it goes on: finding the smallest slot is a step or two when many
    /// share the minimum (a stream of distinct keys), instead of a scan of the whole table.
    floor: u64,
    cursor: usize,
}

/// The index's keys are hashes already.
#[derive(Default, Clone, Copy)]
struct NoHash;

impl BuildHasher for NoHash {
    type Hasher = PassThrough;
    fn build_hasher(&self) -> PassThrough {
        PassThrough(0)
    }
}

struct PassThrough(u64);

impl std::hash::Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only u64 keys are hashed here (write_u64); any other input is folded in, never lost.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

fn bounded(key: &[u8]) -> &[u8] {
    &key[..key.len().min(MAX_KEY_LEN)]
}

impl HeavyHitters {
    /// Counts one denial of `key` at `now_ms`, tracking at most `capacity` keys.
    pub fn record(&mut self, key: &[u8], now_ms: i64, capacity: usize) {
        let key = bounded(key);
        // A smaller capacity (ratelimit.top-size lowered) drops the smallest entries first.
        while self.slots.len() > capacity.max(1) {
            self.evict_min();
        }
        if let Some(i) = self.last.filter(|&i| self.slots.get(i).is_some_and(|s| *s.key == *key)) {
            let s = &mut self.slots[i];
            s.count += 1;
            s.last_ms = now_ms;
            return;
        }
        let hash = self.hasher.hash_one(key);
        if let Some(&i) = self.index.get(&hash) {
            // A different key with the same 64-bit hash is counted as this one: a chance of 2^-64.
            let s = &mut self.slots[i];
            s.count += 1;
            s.last_ms = now_ms;
            self.last = Some(i);
            return;
        }
        if self.slots.len() < capacity.max(1) {
            self.index.insert(hash, self.slots.len());
            let slot =
                Slot { key: key.to_vec(), hash, count: 1, error: 0, first_ms: now_ms, last_ms: now_ms };
            self.slots.push(slot);
            self.last = Some(self.slots.len() - 1);
            self.floor = self.floor.min(1);
            return;
        }
        let Some(i) = self.next_min() else { return };
        let s = &mut self.slots[i];
        self.index.remove(&s.hash);
        let min = s.count;
        s.key.clear();
        s.key.extend_from_slice(key);
        (s.hash, s.count, s.error, s.first_ms, s.last_ms) = (hash, min + 1, min, now_ms, now_ms);
        self.index.insert(hash, i);
        self.last = Some(i);
    }

    fn min_index(&self) -> Option<usize> {
        self.slots.iter().enumerate().min_by_key(|(_, s)| s.count).map(|(i, _)| i)
    }

    /// A slot with the smallest count: the next one at the floor from the cursor on, else (none is
    /// left there) the smallest, found in the same pass, whose count becomes the floor.
    fn next_min(&mut self) -> Option<usize> {
        let n = self.slots.len();
        let start = if self.cursor < n { self.cursor } else { 0 };
        let mut smallest: Option<usize> = None;
        for i in (start..n).chain(0..start) {
            let count = self.slots[i].count;
            if count <= self.floor {
                self.cursor = i + 1;
                return Some(i);
            }
            if smallest.is_none_or(|m| count < self.slots[m].count) {
                smallest = Some(i);
            }
        }
        let i = smallest?;
        self.floor = self.slots[i].count;
        self.cursor = i + 1;
        Some(i)
    }

    fn evict_min(&mut self) {
        let Some(i) = self.min_index() else { return };
        let removed = self.slots.swap_remove(i);
        self.index.remove(&removed.hash);
        if let Some(moved) = self.slots.get(i) {
            self.index.insert(moved.hash, i);
        }
        self.last = None;
    }

    /// The `n` most denied keys, most first.
    pub fn top(&self, n: usize) -> Vec<Entry> {
        let mut all: Vec<Entry> = self
            .slots
            .iter()
            .map(|s| Entry {
                key: s.key.as_slice().into(),
                count: s.count,
                error: s.error,
                first_ms: s.first_ms,
                last_ms: s.last_ms,
            })
            .collect();
        all.sort_by(|a, b| b.count.cmp(&a.count).then(b.last_ms.cmp(&a.last_ms)));
        all.truncate(n);
        all
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.slots.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn space_saving_bounds_hold_with_the_cursor_over_mixed_streams() {
        // A stream of many distinct keys with a few heavy ones, from a fixed LCG: the summary's counts
        // add up to the denials, each tracked count bounds the true one from above and count - error
        // from below, and every key denied more than total / capacity times is tracked.
        let mut h = HeavyHitters::default();
        let mut truth = std::collections::HashMap::<Vec<u8>, u64>::new();
        let mut x: u64 = 12345;
        let total = 50_000u64;
        for _ in 0..total {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let key = match (x >> 33) % 10 {
                0..=1 => b"heavy:a".to_vec(),
                2 => format!("heavy:{}", (x >> 40) % 3).into_bytes(),
                _ => format!("light:{}", (x >> 20) % 5000).into_bytes(),
            };
            h.record(&key, 0, 16);
            *truth.entry(key).or_default() += 1;
        }
        let top = h.top(16);
        assert_eq!(top.iter().map(|e| e.count).sum::<u64>(), total);
        for e in &top {
            let t = truth.get(&*e.key).copied().unwrap_or(0);
            assert!(e.count >= t && e.count - e.error <= t, "{e:?}: true count {t}");
        }
        for (k, &t) in &truth {
            if t > total / 16 {
                assert!(
                    top.iter().any(|e| *e.key == **k),
                    "{} ({t}) is not tracked",
                    String::from_utf8_lossy(k)
                );
            }
        }
    }

    #[test]
    fn a_new_key_always_replaces_a_slot_with_the_smallest_count() {
        let mut h = HeavyHitters::default();
        let mut x: u64 = 7;
        for step in 0..20_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            // Lowered and raised capacities on the way, as ratelimit.top-size may be.
            let capacity = if step % 5000 < 2500 { 16 } else { 8 };
            let key = format!("k:{}", (x >> 33) % if step % 3 == 0 { 4 } else { 400 });
            let tracked = h.slots.iter().any(|s| s.key == key.as_bytes());
            // (A step that lowers the capacity evicts first: its smallest count is not this one.)
            let full = h.slots.len() == capacity;
            let min = h.slots.iter().map(|s| s.count).min();
            h.record(key.as_bytes(), 0, capacity);
            if !tracked && full {
                let slot = h.slots.iter().find(|s| s.key == key.as_bytes()).expect("the new key is tracked");
                assert_eq!(Some(slot.error), min, "step {step}: replaced a slot above the smallest count");
            }
        }
    }

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

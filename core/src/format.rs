//! How a stored value says which limiter wrote it.
//!
//! Every value this release writes begins with a 4-byte tag: `R`, `L`, a letter for the limiter and a
//! format version (`RLT\x01` token bucket, `RLF\x01` fixed window, `RLC\x01` sliding counter; the
//! sliding log's header has always begun `RLS\x01`; leases `RLA\x01`). `R` is never the first byte of an ASCII decimal
//! number, so a tagged value cannot be mistaken for a TAT written as digits (redis-cell's format).
//!
//! Release 0.1 wrote the token bucket, the fixed window and the sliding counter untagged: 8, 16 and
//! 24 bytes of little-endian integers. Those are still read (by their length, which no tagged format
//! has except some sliding logs, of 16 or 24 bytes, recognised by their tag first: an old value that
//! happens to begin with a log's 8-byte header would be misread, a chance of about 2^-64), so keys
//! written before an upgrade
//! go on working; the first write after the upgrade stores the tagged form. Release 0.1 cannot read
//! tagged values: upgrade replicas before their primary (see docs/deployment.md, Upgrading).
//!
//! One format is not ours and has no tag: redis-cell's, the TAT in Unix nanoseconds as decimal digits,
//! which `CL.THROTTLE` reads and keeps writing (see `dialect::cell`).

/// Which limiter a stored value belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    TokenBucket,
    FixedWindow,
    SlidingCounter,
    SlidingLog,
    Leases,
    /// redis-cell's decimal TAT (`CL.THROTTLE`): untagged.
    Throttle,
}

/// The tag's length: every tagged value starts with this many bytes of tag.
pub const TAG_LEN: usize = 4;

impl Kind {
    /// The kinds whose values are tagged.
    pub const ALL: [Kind; 5] =
        [Kind::TokenBucket, Kind::FixedWindow, Kind::SlidingCounter, Kind::SlidingLog, Kind::Leases];

    /// The first bytes of every value of this kind (None: redis-cell's format has no tag).
    #[inline]
    pub const fn tag(self) -> Option<[u8; TAG_LEN]> {
        Some(match self {
            Kind::TokenBucket => *b"RLT\x01",
            Kind::FixedWindow => *b"RLF\x01",
            Kind::SlidingCounter => *b"RLC\x01",
            Kind::SlidingLog => *b"RLS\x01",
            Kind::Leases => *b"RLA\x01",
            Kind::Throttle => return None,
        })
    }

    /// Whether `bytes` are this kind's tag.
    #[inline]
    pub fn has_tag(self, bytes: &[u8]) -> bool {
        self.tag().is_some_and(|tag| tag[..] == *bytes)
    }

    /// The command that writes this kind of value.
    pub const fn command(self) -> &'static str {
        match self {
            Kind::TokenBucket => "RL.TOKEN",
            Kind::FixedWindow => "RL.FIXED",
            Kind::SlidingCounter => "RL.SLIDECOUNT",
            Kind::SlidingLog => "RL.SLIDE",
            Kind::Leases => "RL.ACQUIRE",
            Kind::Throttle => "CL.THROTTLE",
        }
    }

    /// The payload length of a fixed-size state (after the tag); None for the sliding log's
    /// variable-length slots.
    const fn payload_len(self) -> Option<usize> {
        match self {
            Kind::TokenBucket => Some(8),
            Kind::FixedWindow => Some(16),
            Kind::SlidingCounter => Some(24),
            Kind::SlidingLog | Kind::Leases | Kind::Throttle => None,
        }
    }

    #[inline]
    fn tagged_len_fits(self, len: usize) -> bool {
        match self.payload_len() {
            None if self == Kind::Throttle => false,
            Some(payload) => len == TAG_LEN + payload,
            // The log's header is 8 bytes (tag, slot width, padding), then at least one 8-byte slot.
            None if self == Kind::SlidingLog => len >= 16 && len.is_multiple_of(8),
            // Leases: the tag, then 28 bytes per lease.
            None => len > TAG_LEN && (len - TAG_LEN).is_multiple_of(28),
        }
    }

    /// Which limiter wrote `bytes`: by its tag, or else by the length of release 0.1's untagged
    /// formats, or else as redis-cell's decimal TAT. None for anything else.
    pub fn of(bytes: &[u8]) -> Option<Kind> {
        if let Some(tag) = bytes.get(..TAG_LEN) {
            let tagged = Kind::ALL.into_iter().find(|k| k.has_tag(tag) && k.tagged_len_fits(bytes.len()));
            if tagged.is_some() {
                return tagged;
            }
        }
        let untagged = Kind::ALL.into_iter().find(|k| k.payload_len() == Some(bytes.len()));
        untagged.or_else(|| crate::dialect::cell::decimal_tat(bytes).is_some().then_some(Kind::Throttle))
    }

    /// The state's payload in `bytes` when this kind wrote them (tagged, or untagged from 0.1).
    #[inline]
    pub fn payload(self, bytes: &[u8]) -> Option<&[u8]> {
        // The common case first: this kind's tag and length.
        if let (true, Some(tag)) = (self.tagged_len_fits(bytes.len()), bytes.get(..TAG_LEN)) {
            if self.has_tag(tag) {
                return bytes.get(TAG_LEN..);
            }
        }
        match Kind::of(bytes) {
            Some(kind) if kind == self && bytes.len() == self.payload_len()? => Some(bytes),
            Some(kind) if kind == self => bytes.get(TAG_LEN..),
            _ => None,
        }
    }
}

/// The longest value written without a heap allocation.
pub const INLINE: usize = 32;

/// Bytes to store: small ones inline (every fixed-size state, a log slot), whole logs on the heap.
#[derive(Clone, PartialEq, Eq)]
pub enum Bytes {
    Inline { buf: [u8; INLINE], len: u8 },
    Heap(Vec<u8>),
}

impl Bytes {
    /// `kind`'s tag followed by `payload` (at most `INLINE - TAG_LEN` bytes).
    #[inline]
    pub fn tagged(kind: Kind, payload: &[u8]) -> Bytes {
        let mut buf = [0u8; INLINE];
        buf[..TAG_LEN].copy_from_slice(&kind.tag().unwrap_or_default());
        let len = TAG_LEN + payload.len();
        buf[TAG_LEN..len].copy_from_slice(payload);
        Bytes::Inline { buf, len: len as u8 }
    }

    /// A copy of `bytes`, inline when it fits.
    pub fn copy(bytes: &[u8]) -> Bytes {
        if bytes.len() > INLINE {
            return Bytes::Heap(bytes.to_vec());
        }
        let mut buf = [0u8; INLINE];
        buf[..bytes.len()].copy_from_slice(bytes);
        Bytes::Inline { buf, len: bytes.len() as u8 }
    }
}

impl AsRef<[u8]> for Bytes {
    #[inline]
    fn as_ref(&self) -> &[u8] {
        match self {
            Bytes::Inline { buf, len } => &buf[..*len as usize],
            Bytes::Heap(v) => v,
        }
    }
}

impl std::fmt::Debug for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:02x?}", self.as_ref())
    }
}

/// Reads the little-endian u64 at word `i` of `payload`.
#[inline]
pub(crate) fn word(payload: &[u8], i: usize) -> Option<u64> {
    payload.get(i * 8..i * 8 + 8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes)
}

/// Little-endian words as a tagged value.
#[inline]
pub(crate) fn words(kind: Kind, words: &[u64]) -> Bytes {
    let mut payload = [0u8; INLINE - TAG_LEN];
    for (i, w) in words.iter().enumerate() {
        payload[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
    }
    Bytes::tagged(kind, &payload[..words.len() * 8])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_never_start_a_decimal_number_and_differ() {
        for k in Kind::ALL {
            let tag = k.tag().unwrap();
            assert!(!tag[0].is_ascii_digit() && !b"+-. ".contains(&tag[0]));
            assert_eq!(Kind::ALL.iter().filter(|o| o.tag() == k.tag()).count(), 1);
        }
    }

    #[test]
    fn tagged_and_untagged_values_are_told_apart() {
        let token = words(Kind::TokenBucket, &[42]);
        assert_eq!(Kind::of(token.as_ref()), Some(Kind::TokenBucket));
        assert_eq!(Kind::TokenBucket.payload(token.as_ref()), Some(&42u64.to_le_bytes()[..]));
        assert_eq!(Kind::of(&[7; 8]), Some(Kind::TokenBucket), "0.1's 8-byte TAT");
        assert_eq!(Kind::of(&[7; 16]), Some(Kind::FixedWindow), "0.1's fixed window");
        assert_eq!(Kind::of(&[7; 24]), Some(Kind::SlidingCounter), "0.1's sliding counter");
        let mut log = b"RLS\x01\x08\0\0\0".to_vec();
        log.extend_from_slice(&5u64.to_le_bytes());
        assert_eq!(Kind::of(&log), Some(Kind::SlidingLog), "a one-slot log is 16 bytes, tag first");
        assert_eq!(Kind::FixedWindow.payload(&log), None);
        assert_eq!(Kind::of(b"1700000000000000000"), Some(Kind::Throttle), "redis-cell's decimal TAT");
        assert_eq!(Kind::of(b"17000x0000000000000"), None);
        assert_eq!(Kind::of(b"RLT\x01\0\0"), None, "a tag with the wrong length");
        assert_eq!(Kind::FixedWindow.payload(token.as_ref()), None);
    }
}

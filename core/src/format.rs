//! How a stored value says which limiter wrote it.
//!
//! Every value this release writes begins with a 4-byte tag: `R`, `L`, a letter for the limiter and a
//! format version (`RLT\x01` token bucket, `RLF\x01` fixed window, `RLC\x01` sliding counter; the
//! sliding log's header begins `RLS\x01`; leases `RLA\x01`). `R` is never the first byte of an ASCII decimal
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
//! which `CL.THROTTLE` reads and keeps writing (see `dialect::cell`): `Layout::DecimalTat`.

use crate::time::Nanos;

/// A stored value's layout: which limiter wrote it, and how its bytes are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    TokenBucket,
    FixedWindow,
    SlidingCounter,
    SlidingLog,
    Leases,
    /// redis-cell's TAT as decimal digits of Unix nanoseconds (`CL.THROTTLE`): untagged.
    DecimalTat,
}

/// The tag's length: every tagged value starts with this many bytes of tag.
pub const TAG_LEN: usize = 4;

/// How long a value of a layout is after its tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Length {
    /// This many little-endian u64 words (release 0.1 wrote them without the tag).
    Words(usize),
    /// The sliding log: the rest of its 8-byte header, then at least one 8-byte slot.
    LogSlots,
    /// Leases: records of `LEASE_RECORD` bytes, at least one.
    LeaseRecords,
    /// Decimal digits, untagged.
    Digits,
}

/// The bytes of one lease record (see `leases`).
pub const LEASE_RECORD: usize = 28;

impl Layout {
    /// The layouts whose values are tagged.
    pub const TAGGED: [Layout; 5] = [
        Layout::TokenBucket,
        Layout::FixedWindow,
        Layout::SlidingCounter,
        Layout::SlidingLog,
        Layout::Leases,
    ];

    /// The first bytes of every value of this layout, and the length rule of the rest.
    const fn spec(self) -> (Option<[u8; TAG_LEN]>, Length) {
        match self {
            Layout::TokenBucket => (Some(*b"RLT\x01"), Length::Words(1)),
            Layout::FixedWindow => (Some(*b"RLF\x01"), Length::Words(2)),
            Layout::SlidingCounter => (Some(*b"RLC\x01"), Length::Words(3)),
            Layout::SlidingLog => (Some(*b"RLS\x01"), Length::LogSlots),
            Layout::Leases => (Some(*b"RLA\x01"), Length::LeaseRecords),
            Layout::DecimalTat => (None, Length::Digits),
        }
    }

    /// The first bytes of every value of this layout (None: redis-cell's format has no tag).
    #[inline]
    pub const fn tag(self) -> Option<[u8; TAG_LEN]> {
        self.spec().0
    }

    /// Whether `bytes` are this layout's tag.
    #[inline]
    pub fn has_tag(self, bytes: &[u8]) -> bool {
        self.tag().is_some_and(|tag| tag[..] == *bytes)
    }

    /// The length of release 0.1's untagged value of this layout, if it wrote one.
    const fn untagged_len(self) -> Option<usize> {
        match self.spec().1 {
            Length::Words(n) => Some(n * 8),
            _ => None,
        }
    }

    #[inline]
    fn tagged_len_fits(self, len: usize) -> bool {
        match self.spec().1 {
            Length::Words(n) => len == TAG_LEN + n * 8,
            // The log's header is 8 bytes (tag, slot width, padding), then at least one 8-byte slot.
            Length::LogSlots => len >= 16 && len.is_multiple_of(8),
            Length::LeaseRecords => len > TAG_LEN && (len - TAG_LEN).is_multiple_of(LEASE_RECORD),
            Length::Digits => false,
        }
    }

    /// Which layout `bytes` have: by their tag, or else by the length of release 0.1's untagged
    /// formats, or else as redis-cell's decimal TAT. None for anything else.
    pub fn of(bytes: &[u8]) -> Option<Layout> {
        if let Some(tag) = bytes.get(..TAG_LEN) {
            let tagged =
                Layout::TAGGED.into_iter().find(|l| l.has_tag(tag) && l.tagged_len_fits(bytes.len()));
            if tagged.is_some() {
                return tagged;
            }
        }
        let untagged = Layout::TAGGED.into_iter().find(|l| l.untagged_len() == Some(bytes.len()));
        untagged.or_else(|| decimal_tat(bytes).is_some().then_some(Layout::DecimalTat))
    }

    /// The state's payload in `bytes` when they have this layout (tagged, or untagged from 0.1).
    #[inline]
    pub fn payload(self, bytes: &[u8]) -> Option<&[u8]> {
        // The common case first: this layout's tag and length.
        if let (true, Some(tag)) = (self.tagged_len_fits(bytes.len()), bytes.get(..TAG_LEN)) {
            if self.has_tag(tag) {
                return bytes.get(TAG_LEN..);
            }
        }
        match Layout::of(bytes) {
            Some(layout) if layout == self && Some(bytes.len()) == self.untagged_len() => Some(bytes),
            Some(layout) if layout == self && self.tag().is_some() => bytes.get(TAG_LEN..),
            Some(layout) if layout == self => Some(bytes),
            _ => None,
        }
    }
}

/// redis-cell's stored TAT: decimal digits of Unix nanoseconds (as Rust parses a `u64`: an optional
/// `+`, then digits). None for anything else, or a TAT beyond the clock's range.
pub fn decimal_tat(bytes: &[u8]) -> Option<Nanos> {
    let digits = bytes.strip_prefix(b"+").unwrap_or(bytes);
    if digits.is_empty() || digits.len() > 20 {
        return None;
    }
    // By hand: every call reads one, and a u64 of 20 digits fits in a u128 without overflow checks.
    let mut value: u128 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        value = value * 10 + u128::from(d - b'0');
    }
    u64::try_from(value).ok().and_then(|n| Nanos::try_from(n).ok())
}

/// The decimal digits of a (non-negative) TAT, as redis-cell stores it.
pub fn decimal_tat_bytes(tat: Nanos) -> Bytes {
    let mut buf = [0u8; 20];
    let mut n = tat.max(0) as u64;
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    Bytes::copy(&buf[i..])
}

/// The longest value written without a heap allocation.
pub const INLINE: usize = 32;

/// Bytes to store: small ones inline (every fixed-size state, a log slot), whole logs on the heap.
/// Opaque: built only by the constructors below, so its length always fits its buffer.
#[derive(Clone, PartialEq, Eq)]
pub struct Bytes(Repr);

#[derive(Clone, PartialEq, Eq)]
enum Repr {
    Inline { buf: [u8; INLINE], len: u8 },
    Heap(Vec<u8>),
}

impl Bytes {
    /// `layout`'s tag followed by `payload` (at most `INLINE - TAG_LEN` bytes; a longer payload is
    /// stored on the heap).
    #[inline]
    pub fn tagged(layout: Layout, payload: &[u8]) -> Bytes {
        let tag = layout.tag().unwrap_or_default();
        let len = TAG_LEN + payload.len();
        if len > INLINE {
            let mut v = Vec::with_capacity(len);
            v.extend_from_slice(&tag);
            v.extend_from_slice(payload);
            return Bytes(Repr::Heap(v));
        }
        let mut buf = [0u8; INLINE];
        buf[..TAG_LEN].copy_from_slice(&tag);
        buf[TAG_LEN..len].copy_from_slice(payload);
        Bytes(Repr::Inline { buf, len: len as u8 })
    }

    /// A copy of `bytes`, inline when it fits.
    pub fn copy(bytes: &[u8]) -> Bytes {
        if bytes.len() > INLINE {
            return Bytes(Repr::Heap(bytes.to_vec()));
        }
        let mut buf = [0u8; INLINE];
        buf[..bytes.len()].copy_from_slice(bytes);
        Bytes(Repr::Inline { buf, len: bytes.len() as u8 })
    }
}

impl From<Vec<u8>> for Bytes {
    /// A whole value built elsewhere (a log, a list of leases), kept where it is.
    fn from(v: Vec<u8>) -> Bytes {
        Bytes(Repr::Heap(v))
    }
}

impl AsRef<[u8]> for Bytes {
    #[inline]
    fn as_ref(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { buf, len } => &buf[..*len as usize],
            Repr::Heap(v) => v,
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
pub(crate) fn words(layout: Layout, words: &[u64]) -> Bytes {
    let mut payload = [0u8; INLINE - TAG_LEN];
    for (i, w) in words.iter().enumerate() {
        payload[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
    }
    Bytes::tagged(layout, &payload[..words.len() * 8])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_never_start_a_decimal_number_and_differ() {
        for k in Layout::TAGGED {
            let tag = k.tag().unwrap();
            assert!(!tag[0].is_ascii_digit() && !b"+-. ".contains(&tag[0]));
            assert_eq!(Layout::TAGGED.iter().filter(|o| o.tag() == k.tag()).count(), 1);
        }
    }

    #[test]
    fn tagged_and_untagged_values_are_told_apart() {
        let token = words(Layout::TokenBucket, &[42]);
        assert_eq!(Layout::of(token.as_ref()), Some(Layout::TokenBucket));
        assert_eq!(Layout::TokenBucket.payload(token.as_ref()), Some(&42u64.to_le_bytes()[..]));
        assert_eq!(Layout::of(&[7; 8]), Some(Layout::TokenBucket), "0.1's 8-byte TAT");
        assert_eq!(Layout::of(&[7; 16]), Some(Layout::FixedWindow), "0.1's fixed window");
        assert_eq!(Layout::of(&[7; 24]), Some(Layout::SlidingCounter), "0.1's sliding counter");
        let mut log = b"RLS\x01\x08\0\0\0".to_vec();
        log.extend_from_slice(&5u64.to_le_bytes());
        assert_eq!(Layout::of(&log), Some(Layout::SlidingLog), "a one-slot log is 16 bytes, tag first");
        assert_eq!(Layout::FixedWindow.payload(&log), None);
        assert_eq!(Layout::of(b"1700000000000000000"), Some(Layout::DecimalTat), "redis-cell's decimal TAT");
        assert_eq!(Layout::of(b"17000x0000000000000"), None);
        assert_eq!(Layout::of(b"RLT\x01\0\0"), None, "a tag with the wrong length");
        assert_eq!(Layout::FixedWindow.payload(token.as_ref()), None);
        assert_eq!(Layout::DecimalTat.payload(b"17"), Some(&b"17"[..]));
    }

    #[test]
    fn decimal_tats() {
        assert_eq!(decimal_tat(b"1732456789123456789"), Some(1_732_456_789_123_456_789));
        assert_eq!(decimal_tat(b"+7"), Some(7));
        assert_eq!(decimal_tat(b"-5"), None);
        assert_eq!(decimal_tat(b"99999999999999999999"), None);
        assert_eq!(decimal_tat_bytes(1_732_456_789).as_ref(), b"1732456789");
    }

    #[test]
    fn bytes_hold_what_they_were_given() {
        let long = [7u8; 40];
        assert_eq!(Bytes::tagged(Layout::Leases, &long).as_ref().len(), 44);
        assert_eq!(Bytes::copy(&long).as_ref(), &long[..]);
        assert_eq!(Bytes::from(vec![1, 2]).as_ref(), &[1, 2]);
    }
}

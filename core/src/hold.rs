//! Holds (RL.HOLD, RL.SETTLE): units taken now on an estimate and settled later with the actual,
//! exactly once, in the window they were taken from (LLM tokens, whose count is known only after the
//! response).
//!
//! A hold is RL.ALL's decision over its groups, recorded under a caller's id in its own key,
//! `<ledger>:<id>` (the ledger's name carries a hash tag, so the hold's key shares its slot): tag
//! `RLH\x01`, then netstrings (`<len>:<bytes>`): its id, its end (Unix ms), its time to live (ms),
//! how long a return may still matter (ms, see below), its flags (`C`harge or `R`eturn when
//! abandoned, then `O`pen or `S`ettled), the hold's reply and the settle's (six integers joined by
//! commas; empty until settled), the number of held groups, and for each its key, kind group, two
//! parameters as given, the units held, the units used (a PARTIAL's running total, a FINAL's actual)
//! and the window the units were taken from (the kind's `hold_mark`). While open a group has
//! charged `max(held, used)`; once settled, `used`. The key expires when the hold ends (a `Charge`
//! hold: abandoned, it stays charged), or once settled `ttl` after the settle: one hold, one key, O(1).
//!
//! The ledger itself (`RLL\x01`) lists only the `Return` holds still open (id, end, and until when
//! returning them matters: two of their longest period after their end), behind a header (how many,
//! the earliest end, the latest of those times): every RL.HOLD and RL.SETTLE on it first ends those
//! whose time is over (reading them only when the earliest end has passed), giving back what they
//! held beyond the usage reported.
//!
//! Each adapter (the module, the Lua library) gives the keys' storage (`Store`) and calls `hold` or
//! `settle`: everything else is here, once.

use crate::args::{seconds_ns, ArgError};
use crate::error::{ParamError, StateError};
use crate::format::Layout;
use crate::kind::{AnyLimit, AnyLimiter, LimiterKind};
use crate::limiter::{Change, Expiry, Write};
use crate::time::{ceil_ms, Nanos, NANOS_PER_MS, NANOS_PER_SEC};
use crate::verdict::{most_restrictive, Verdict};

/// A hold's tag.
pub const TAG: [u8; 4] = *b"RLH\x01";
/// The ledger's tag.
pub const LEDGER_TAG: [u8; 4] = *b"RLL\x01";
/// The most `Return` holds one ledger keeps open.
pub const MAX_HOLDS: usize = 10_000;
/// The longest id.
pub const MAX_ID_BYTES: usize = 256;
/// The time to live a client gives a hold unless told otherwise, in seconds: longer than most LLM
/// responses, streams included.
pub const DEFAULT_TTL_SECS: u64 = 300;
/// The longest time to live, in seconds.
pub const MAX_TTL_SECS: i64 = 86_400;

pub const TTL: ParamError =
    ParamError::new("ttl", "must be a number of seconds > 0, in whole milliseconds, at most 86400");
pub const ID: ParamError = ParamError::new("id", "must be 1 to 256 bytes");
pub const NOT_HELD: ParamError = ParamError::new("key", "must be a key this hold holds");
pub const FULL: ParamError = ParamError::new("ledger", "holds at most 10000 holds to return");
pub const UNTAGGED: ParamError =
    ParamError::new("ledger", "must carry a hash tag ({...}), which the keys of its holds share");

/// A ledger's name: one with a hash tag (a `{`, then a `}` after it with something between).
pub fn ledger(name: &[u8]) -> Result<&[u8], ParamError> {
    let open = name.iter().position(|&b| b == b'{').ok_or(UNTAGGED)?;
    let close = name[open + 1..].iter().position(|&b| b == b'}').ok_or(UNTAGGED)?;
    (close > 0).then_some(name).ok_or(UNTAGGED)
}

/// The key of the hold `id` in `ledger`: `<ledger>:<id>`, in the ledger's slot.
pub fn hold_key(ledger: &[u8], id: &[u8]) -> Vec<u8> {
    [ledger, b":", id].concat()
}

/// What becomes of a hold never settled, when its time ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Abandon {
    /// It stays charged (the default: billing-safe).
    Charge,
    /// What it held beyond the usage reported goes back.
    Return,
}

/// The one of `values` whose word (case-insensitive) `word` is; a syntax error otherwise.
fn word_of<T: Copy>(word: &[u8], words: [&str; 2], values: [T; 2]) -> Result<T, ArgError> {
    let at = words.iter().position(|w| word.eq_ignore_ascii_case(w.as_bytes())).ok_or(ArgError::Syntax)?;
    Ok(values[at])
}

impl Abandon {
    pub const WORDS: [&'static str; 2] = ["CHARGE", "RETURN"];

    pub fn parse(word: &[u8]) -> Result<Abandon, ArgError> {
        word_of(word, Self::WORDS, [Abandon::Charge, Abandon::Return])
    }
}

/// A settle's kind: the usage so far, or the actual.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Final,
    Partial,
}

impl Mode {
    pub const WORDS: [&'static str; 2] = ["FINAL", "PARTIAL"];

    pub fn parse(word: &[u8]) -> Result<Mode, ArgError> {
        word_of(word, Self::WORDS, [Mode::Final, Mode::Partial])
    }
}

/// A hold's id: 1 to 256 bytes.
pub fn id(bytes: &[u8]) -> Result<&[u8], ParamError> {
    (1..=MAX_ID_BYTES).contains(&bytes.len()).then_some(bytes).ok_or(ID)
}

/// A time to live in ms: seconds, decimal, whole milliseconds, at most a day.
pub fn ttl_ms(bytes: &[u8]) -> Result<i64, ParamError> {
    let ns = seconds_ns(bytes, TTL).map_err(|_| TTL)?;
    if ns > MAX_TTL_SECS * NANOS_PER_SEC {
        return Err(TTL);
    }
    Ok(ns / NANOS_PER_MS)
}

/// One held group of a hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    pub key: Vec<u8>,
    pub group: Vec<u8>,
    pub params: [Vec<u8>; 2],
    pub held: u64,
    pub used: u64,
    pub mark: i64,
}

/// One hold, as its key records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    pub id: Vec<u8>,
    pub ends_ms: i64,
    pub ttl_ms: i64,
    /// Until when giving a `Return` hold back may still matter: two of its longest period after
    /// its end (a window that has ended, a bucket refilled, take nothing back).
    pub keep_ms: i64,
    pub abandon: Abandon,
    pub settled: bool,
    pub hold_reply: [i64; 6],
    pub settle_reply: Option<[i64; 6]>,
    pub groups: Vec<Held>,
}

impl Held {
    /// What the group has charged: while open the larger of its hold and its usage, once settled its
    /// actual.
    fn charged(&self, settled: bool) -> u64 {
        if settled {
            self.used
        } else {
            self.held.max(self.used)
        }
    }

    fn limiter(&self) -> Result<AnyLimiter, StateError> {
        let kind = LimiterKind::from_group(&self.group).ok_or(StateError)?;
        AnyLimiter::parse(kind, [&self.params[0], &self.params[1]]).map_err(|_| StateError)
    }
}

fn put(out: &mut Vec<u8>, field: &[u8]) {
    out.extend_from_slice(field.len().to_string().as_bytes());
    out.push(b':');
    out.extend_from_slice(field);
}

fn ints(reply: &[i64; 6]) -> String {
    reply.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
}

/// Reads netstrings one after another.
struct Fields<'a>(&'a [u8]);

impl<'a> Fields<'a> {
    fn next(&mut self) -> Result<&'a [u8], StateError> {
        let colon = self.0.iter().position(|&b| b == b':').ok_or(StateError)?;
        let digits = &self.0[..colon];
        if digits.is_empty() || digits.len() > 9 || !digits.iter().all(u8::is_ascii_digit) {
            return Err(StateError);
        }
        let len: usize =
            std::str::from_utf8(digits).map_err(|_| StateError)?.parse().map_err(|_| StateError)?;
        let field = self.0.get(colon + 1..colon + 1 + len).ok_or(StateError)?;
        self.0 = &self.0[colon + 1 + len..];
        Ok(field)
    }

    fn number<T: std::str::FromStr>(&mut self) -> Result<T, StateError> {
        let text = std::str::from_utf8(self.next()?).map_err(|_| StateError)?;
        if text.is_empty() || text.starts_with('+') {
            return Err(StateError);
        }
        text.parse().map_err(|_| StateError)
    }

    fn reply(&mut self) -> Result<Option<[i64; 6]>, StateError> {
        let text = std::str::from_utf8(self.next()?).map_err(|_| StateError)?;
        if text.is_empty() {
            return Ok(None);
        }
        let numbers: Vec<i64> = text
            .split(',')
            .map(|n| {
                if n.is_empty() || n.starts_with('+') {
                    Err(StateError)
                } else {
                    n.parse().map_err(|_| StateError)
                }
            })
            .collect::<Result<_, _>>()?;
        numbers.try_into().map(Some).map_err(|_| StateError)
    }
}

impl Hold {
    /// The hold in `stored` (a value this module wrote under a hold's key).
    pub fn parse(stored: &[u8]) -> Result<Hold, StateError> {
        let mut fields = Fields(stored.strip_prefix(&TAG).ok_or(StateError)?);
        let id = fields.next()?.to_vec();
        let (ends_ms, ttl_ms, keep_ms) = (fields.number()?, fields.number()?, fields.number()?);
        let (abandon, settled) = match fields.next()? {
            b"CO" => (Abandon::Charge, false),
            b"CS" => (Abandon::Charge, true),
            b"RO" => (Abandon::Return, false),
            b"RS" => (Abandon::Return, true),
            _ => return Err(StateError),
        };
        let hold_reply = fields.reply()?.ok_or(StateError)?;
        let settle_reply = fields.reply()?;
        let n: usize = fields.number()?;
        let mut groups = Vec::with_capacity(n.min(64));
        for _ in 0..n {
            groups.push(Held {
                key: fields.next()?.to_vec(),
                group: fields.next()?.to_vec(),
                params: [fields.next()?.to_vec(), fields.next()?.to_vec()],
                held: fields.number()?,
                used: fields.number()?,
                mark: fields.number()?,
            });
        }
        if !fields.0.is_empty() {
            return Err(StateError);
        }
        Ok(Hold { id, ends_ms, ttl_ms, keep_ms, abandon, settled, hold_reply, settle_reply, groups })
    }

    /// The stored bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = TAG.to_vec();
        put(&mut out, &self.id);
        for n in [self.ends_ms, self.ttl_ms, self.keep_ms] {
            put(&mut out, n.to_string().as_bytes());
        }
        let flags = [
            if self.abandon == Abandon::Charge { b'C' } else { b'R' },
            if self.settled { b'S' } else { b'O' },
        ];
        put(&mut out, &flags);
        put(&mut out, ints(&self.hold_reply).as_bytes());
        put(&mut out, self.settle_reply.as_ref().map(ints).unwrap_or_default().as_bytes());
        put(&mut out, self.groups.len().to_string().as_bytes());
        for g in &self.groups {
            for field in [&g.key, &g.group, &g.params[0], &g.params[1]] {
                put(&mut out, field);
            }
            for n in [g.held.to_string(), g.used.to_string(), g.mark.to_string()] {
                put(&mut out, n.as_bytes());
            }
        }
        out
    }

    /// Whether it is open and gives back what it held when abandoned.
    fn returns(&self) -> bool {
        !self.settled && self.abandon == Abandon::Return
    }

    /// What to store: the hold until it ends (an open `Return` hold: until returning it matters no
    /// more, so that its ledger finds it).
    pub fn write(&self) -> Write {
        let at = if self.returns() { self.keep_ms } else { self.ends_ms };
        Write {
            change: Change::Set(self.encode().into()),
            expiry: Expiry::Within { at_least_ms: at, slack_ms: 0 },
        }
    }
}

/// A `Return` hold still open, as its ledger lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub id: Vec<u8>,
    pub ends_ms: i64,
    pub keep_ms: i64,
}

/// A ledger: its `Return` holds still open, in the order they were taken, behind a header (how
/// many, the earliest end, the latest time a return matters) so that a call with nothing to end
/// reads three numbers, not every hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ledger {
    pub count: usize,
    pub earliest_ms: i64,
    pub latest_ms: i64,
    /// The holds' netstrings, each `id ends_ms keep_ms`.
    body: Vec<u8>,
}

impl Entry {
    fn put(&self, out: &mut Vec<u8>) {
        put(out, &self.id);
        put(out, self.ends_ms.to_string().as_bytes());
        put(out, self.keep_ms.to_string().as_bytes());
    }
}

impl Ledger {
    /// The ledger in `stored` (None: no key, an empty ledger): its header, the holds unread.
    pub fn parse(stored: Option<&[u8]>) -> Result<Ledger, StateError> {
        let Some(stored) = stored else { return Ok(Ledger::default()) };
        let mut fields = Fields(stored.strip_prefix(&LEDGER_TAG).ok_or(StateError)?);
        let (count, earliest_ms, latest_ms) = (fields.number()?, fields.number()?, fields.number()?);
        Ok(Ledger { count, earliest_ms, latest_ms, body: fields.0.to_vec() })
    }

    /// Its holds.
    pub fn entries(&self) -> Result<Vec<Entry>, StateError> {
        let mut fields = Fields(&self.body);
        let mut entries = Vec::with_capacity(self.count.min(MAX_HOLDS));
        while !fields.0.is_empty() {
            entries.push(Entry {
                id: fields.next()?.to_vec(),
                ends_ms: fields.number()?,
                keep_ms: fields.number()?,
            });
        }
        if entries.len() != self.count {
            return Err(StateError);
        }
        Ok(entries)
    }

    /// A ledger of `entries`.
    pub fn of(entries: &[Entry]) -> Ledger {
        let mut ledger = Ledger::default();
        entries.iter().for_each(|e| ledger.push(e));
        ledger
    }

    /// Lists one more hold.
    pub fn push(&mut self, e: &Entry) {
        let first = self.count == 0;
        self.earliest_ms = if first { e.ends_ms } else { self.earliest_ms.min(e.ends_ms) };
        self.latest_ms = if first { e.keep_ms } else { self.latest_ms.max(e.keep_ms) };
        self.count += 1;
        e.put(&mut self.body);
    }

    /// The stored bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = LEDGER_TAG.to_vec();
        for n in [self.count as i64, self.earliest_ms, self.latest_ms] {
            put(&mut out, n.to_string().as_bytes());
        }
        out.extend_from_slice(&self.body);
        out
    }

    /// What to store: the ledger until returning its last hold matters no more, or nothing.
    pub fn write(&self) -> Write {
        match self.count {
            0 => Write { change: Change::Delete, expiry: Expiry::Within { at_least_ms: 0, slack_ms: 0 } },
            _ => Write {
                change: Change::Set(self.encode().into()),
                expiry: Expiry::Within { at_least_ms: self.latest_ms, slack_ms: 0 },
            },
        }
    }
}

/// Why a hold or a settle cannot be done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldError {
    Param(ParamError),
    State,
    DuplicateKey,
}

impl From<StateError> for HoldError {
    fn from(_: StateError) -> Self {
        HoldError::State
    }
}

impl From<ParamError> for HoldError {
    fn from(e: ParamError) -> Self {
        HoldError::Param(e)
    }
}

/// The keys as an adapter stores them.
pub trait Store {
    type Error: From<HoldError>;
    fn read(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, Self::Error>;
    fn apply(&mut self, key: &[u8], write: &Write) -> Result<(), Self::Error>;
}

/// One group of a hold: its key, its limit and request, and its two parameters as given.
pub struct Group<'a> {
    pub key: &'a [u8],
    pub limit: AnyLimit,
    pub params: [&'a [u8]; 2],
}

/// A verdict's six integers as the commands reply them.
pub fn reply_of(v: &Verdict, position: usize) -> [i64; 6] {
    let clamp = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    [
        i64::from(v.allowed),
        clamp(v.limit),
        clamp(v.remaining),
        v.retry_after_ns.map_or(-1, ceil_ms),
        ceil_ms(v.reset_after_ns),
        position as i64 + 1,
    ]
}

/// `stored` is a value of `limiter`'s layout (or nothing): a group a sweep may write.
fn holds_its_kind(limiter: &AnyLimiter, stored: Option<&[u8]>) -> bool {
    stored.is_none_or(|s| Layout::of(s) == Some(limiter.kind().layout()))
}

/// The bytes a write leaves (a small state's writes are whole values).
fn after<'a>(stored: Option<&'a [u8]>, write: Option<&'a Write>) -> Option<&'a [u8]> {
    match write.map(|w| &w.change) {
        Some(Change::Set(bytes)) => Some(bytes.as_ref()),
        Some(Change::Delete) => None,
        _ => stored,
    }
}

fn ms_of(now: Nanos) -> i64 {
    now.max(0) / NANOS_PER_MS
}

/// Applies `delta` units to a held group's window; the state after it.
fn adjust<S: Store>(
    store: &mut S,
    g: &Held,
    now: Nanos,
    delta: i128,
    sweeping: bool,
) -> Result<(AnyLimiter, Option<Vec<u8>>), S::Error> {
    let limiter = g.limiter().map_err(HoldError::from)?;
    let stored = store.read(&g.key)?;
    if !holds_its_kind(&limiter, stored.as_deref()) {
        if sweeping {
            return Ok((limiter, stored));
        }
        return Err(HoldError::State.into());
    }
    if delta == 0 {
        return Ok((limiter, stored));
    }
    let write = limiter
        .settle(stored.as_deref(), now, g.mark, delta)
        .ok_or(HoldError::State)?
        .map_err(HoldError::from)?;
    let Some(write) = write else { return Ok((limiter, stored)) };
    store.apply(&g.key, &write)?;
    Ok((limiter, after(stored.as_deref(), Some(&write)).map(<[u8]>::to_vec)))
}

/// The hold of `key`, when there is one that has not ended at `now` (its key's expiry, read on
/// this call's clock).
fn read_hold<S: Store>(store: &mut S, key: &[u8], now: Nanos) -> Result<Option<Hold>, S::Error> {
    match store.read(key)? {
        Some(bytes) => {
            Ok(Some(Hold::parse(&bytes).map_err(HoldError::from)?).filter(|h| h.ends_ms > ms_of(now)))
        }
        None => Ok(None),
    }
}

/// Ends the ledger's `Return` holds whose time is over: each gives back what it held beyond its
/// reported usage, and its key goes. Whether the ledger changed.
fn end_holds<S: Store>(
    store: &mut S,
    ledger_key: &[u8],
    ledger: &mut Ledger,
    now: Nanos,
) -> Result<bool, S::Error> {
    let now_ms = ms_of(now);
    if ledger.count == 0 || ledger.earliest_ms > now_ms {
        return Ok(false);
    }
    let (ended, kept): (Vec<Entry>, Vec<Entry>) =
        ledger.entries().map_err(HoldError::from)?.into_iter().partition(|e| e.ends_ms <= now_ms);
    *ledger = Ledger::of(&kept);
    for e in &ended {
        let key = hold_key(ledger_key, &e.id);
        let Some(bytes) = store.read(&key)? else { continue };
        let Ok(h) = Hold::parse(&bytes) else { continue };
        if !h.returns() {
            continue;
        }
        for g in &h.groups {
            adjust(store, g, now, i128::from(g.used) - i128::from(g.charged(false)), true)?;
        }
        store.apply(&key, &Write { change: Change::Delete, ..Ledger::default().write() })?;
    }
    Ok(!ended.is_empty())
}

/// Checks a call's keys: the ledger's name, and each key once (the hold's own key among them).
fn check_keys<'k>(
    ledger_key: &[u8],
    id: &[u8],
    keys: impl Iterator<Item = &'k [u8]>,
) -> Result<(), HoldError> {
    ledger(ledger_key)?;
    let own = hold_key(ledger_key, id);
    let mut seen: Vec<&[u8]> = Vec::new();
    for key in keys {
        if key == ledger_key || key == own.as_slice() || seen.contains(&key) {
            return Err(HoldError::DuplicateKey);
        }
        seen.push(key);
    }
    Ok(())
}

/// RL.HOLD: decides `groups` as RL.ALL does and, when allowed, records the hold of the kinds that
/// hold units under `id`. Replies RL.ALL's six fields; a retried id replies as the first did.
pub fn hold<S: Store>(
    store: &mut S,
    ledger_key: &[u8],
    id: &[u8],
    ttl_ms: i64,
    abandon: Abandon,
    groups: &[Group<'_>],
    now: Nanos,
) -> Result<[i64; 6], S::Error> {
    check_keys(ledger_key, id, groups.iter().map(|g| g.key))?;
    let mut ledger = Ledger::parse(store.read(ledger_key)?.as_deref()).map_err(HoldError::from)?;
    let ended = end_holds(store, ledger_key, &mut ledger, now)?;
    let key = hold_key(ledger_key, id);
    let existing = read_hold(store, &key, now)?;
    if ended {
        store.apply(ledger_key, &ledger.write())?;
    }
    if let Some(h) = existing {
        return Ok(h.hold_reply);
    }
    if abandon == Abandon::Return && ledger.count >= MAX_HOLDS {
        return Err(HoldError::Param(FULL).into());
    }
    let mut stored = Vec::with_capacity(groups.len());
    let mut outcomes = Vec::with_capacity(groups.len());
    for g in groups {
        let value = store.read(g.key)?;
        outcomes.push(g.limit.decide(value.as_deref(), now).map_err(HoldError::from)?);
        stored.push(value);
    }
    let combined = crate::combine::all_or_nothing(outcomes).ok_or(HoldError::State)?;
    let reply = reply_of(&combined.verdict, combined.limiting);
    let (mut held, mut period_ms) = (Vec::new(), 0);
    for ((g, value), outcome) in groups.iter().zip(&stored).zip(&combined.outcomes) {
        if let Some(write) = &outcome.write {
            store.apply(g.key, write)?;
        }
        // A group of 0 units is a peek, as in RL.ALL: decided, not held.
        let (Some(units @ 1..), true) = (g.limit.held_units(), combined.verdict.allowed) else { continue };
        let limiter = g.limit.limiter();
        let state = after(value.as_deref(), outcome.write.as_ref());
        let mark = limiter.hold_mark(state).ok_or(HoldError::State)?.map_err(HoldError::from)?;
        period_ms = period_ms.max(ceil_ms(limiter.period_ns()));
        held.push(Held {
            key: g.key.to_vec(),
            group: limiter.kind().group().as_bytes().to_vec(),
            params: [g.params[0].to_vec(), g.params[1].to_vec()],
            held: units,
            used: 0,
            mark,
        });
    }
    if combined.verdict.allowed {
        let ends_ms = ms_of(now).saturating_add(ttl_ms);
        let keep_ms = ends_ms.saturating_add(period_ms.saturating_mul(2));
        let h = Hold {
            id: id.to_vec(),
            ends_ms,
            ttl_ms,
            keep_ms,
            abandon,
            settled: false,
            hold_reply: reply,
            settle_reply: None,
            groups: held,
        };
        store.apply(&key, &h.write())?;
        if abandon == Abandon::Return {
            ledger.push(&Entry { id: id.to_vec(), ends_ms, keep_ms });
            store.apply(ledger_key, &ledger.write())?;
        }
    }
    Ok(reply)
}

/// RL.SETTLE: each `(key, units)` of the hold `id` settled (`Final`: the actual; `Partial`: the
/// usage so far). None when there is no hold of `id`.
pub fn settle<S: Store>(
    store: &mut S,
    ledger_key: &[u8],
    id: &[u8],
    mode: Mode,
    named: &[(&[u8], u64)],
    now: Nanos,
) -> Result<Option<[i64; 6]>, S::Error> {
    check_keys(ledger_key, id, named.iter().map(|(k, _)| *k))?;
    let mut ledger = Ledger::parse(store.read(ledger_key)?.as_deref()).map_err(HoldError::from)?;
    let mut changed = end_holds(store, ledger_key, &mut ledger, now)?;
    let key = hold_key(ledger_key, id);
    let Some(mut hold) = read_hold(store, &key, now)? else {
        if changed {
            store.apply(ledger_key, &ledger.write())?;
        }
        return Ok(None);
    };
    if let Some(reply) = hold.settle_reply.filter(|_| hold.settled) {
        if changed {
            store.apply(ledger_key, &ledger.write())?;
        }
        return Ok(Some(reply));
    }
    let mut positions = Vec::with_capacity(named.len());
    for (key, _) in named {
        positions.push(hold.groups.iter().position(|g| g.key == *key).ok_or(HoldError::Param(NOT_HELD))?);
    }
    let mut verdicts = Vec::with_capacity(named.len());
    for (&i, &(_, units)) in positions.iter().zip(named) {
        let g = &hold.groups[i];
        let charged = i128::from(g.charged(false));
        let (used, delta) = match mode {
            Mode::Partial => {
                let used = g.used.max(units);
                (used, i128::from(g.held.max(used)) - charged)
            }
            Mode::Final => (units, i128::from(units) - charged),
        };
        let (limiter, state) = adjust(store, g, now, delta, false)?;
        let peek = limiter.peek(state.as_deref(), now).map_err(HoldError::from)?;
        // The state as it is, and when one more unit fits; stop when past the hold with none left.
        let exceeded = used > g.held && !peek.one.allowed;
        verdicts.push(Verdict { allowed: !exceeded, retry_after_ns: peek.one.retry_after_ns, ..peek.now });
        hold.groups[i].used = used;
    }
    let limiting = most_restrictive(verdicts.iter().copied()).ok_or(HoldError::State)?;
    let reply = reply_of(&verdicts[limiting], limiting);
    if mode == Mode::Final {
        if hold.returns() {
            let kept: Vec<Entry> =
                ledger.entries().map_err(HoldError::from)?.into_iter().filter(|e| e.id != id).collect();
            ledger = Ledger::of(&kept);
            changed = true;
        }
        hold.settled = true;
        hold.settle_reply = Some(reply);
        hold.ends_ms = ms_of(now).saturating_add(hold.ttl_ms);
    }
    store.apply(&key, &hold.write())?;
    if changed {
        store.apply(ledger_key, &ledger.write())?;
    }
    Ok(Some(reply))
}

#[cfg(test)]
mod tests;

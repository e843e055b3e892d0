//! What a client does with an answer that is not a decision: four classes, each with one behaviour,
//! and the rules that sort error replies into them. Declared once here; the contract carries them
//! (`replies` in contract.json, docs/errors.md) and every client interprets the same rules.

use crate::error::CallError;

/// The class of an answer that is not a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReplyClass {
    /// Redis did not answer in time or cannot serve now: the failure policy decides, the breaker counts it.
    Outage,
    /// Redis answers, but the limiter cannot work with it as configured (no module and no library this
    /// user may load, a refused command): the failure policy decides; logged with what to fix.
    Misconfigured,
    /// The key holds another limiter's state or another type: the failure policy decides; logged once
    /// per key with how to recover.
    Conflict,
    /// The caller's own mistake (a key in another slot, a key twice, an argument out of bounds): raised
    /// to the caller, never a degraded decision.
    Usage,
}

/// How a class is handled, as the contract states it (the code that does it: `limiter.rs`, `outage.rs`).
/// `breaker`: "failure" counts against Redis (failures in a row open it); "answered" is Redis answering,
/// as a decision is (it resets the count and ends a probe).
pub struct Behaviour {
    pub class: ReplyClass,
    pub decision: &'static str,
    pub breaker: &'static str,
    pub log: &'static str,
    pub counter: &'static str,
}

pub const BEHAVIOURS: [Behaviour; 4] = [
    Behaviour {
        class: ReplyClass::Outage,
        decision: "failure_policy",
        breaker: "failure",
        log: "outage",
        counter: "outage",
    },
    Behaviour {
        class: ReplyClass::Misconfigured,
        decision: "failure_policy",
        breaker: "answered",
        log: "once_per_cause",
        counter: "misconfigured",
    },
    Behaviour {
        class: ReplyClass::Conflict,
        decision: "failure_policy",
        breaker: "answered",
        log: "once_per_key",
        counter: "conflicts",
    },
    Behaviour {
        class: ReplyClass::Usage,
        decision: "raise",
        breaker: "answered",
        log: "none",
        counter: "usage_errors",
    },
];

/// One rule: an error reply whose code is `code` and whose text after the code starts with `starts`
/// (any text when None; compared without regard to case) is of `class`.
pub struct Rule {
    pub code: &'static str,
    pub starts: Option<&'static str>,
    pub class: ReplyClass,
}

const fn rule(code: &'static str, starts: Option<&'static str>, class: ReplyClass) -> Rule {
    Rule { code, starts, class }
}

use ReplyClass::*;

/// The start of Redis' answer to a command it does not know (after `ERR `).
pub const UNKNOWN_COMMAND: &str = "unknown command";

/// Tried in order; the first that matches decides.
pub const RULES: &[Rule] = &[
    // The server cannot serve now; waiting helps.
    rule("LOADING", None, Outage),
    rule("MASTERDOWN", None, Outage),
    rule("READONLY", None, Outage),
    rule("TRYAGAIN", None, Outage),
    rule("CLUSTERDOWN", None, Outage),
    rule("BUSY", None, Outage),
    rule("NOREPLICAS", None, Outage),
    rule("OOM", None, Outage),
    rule("MOVED", None, Outage),
    rule("ASK", None, Outage),
    rule("ERR", Some("max number of clients reached"), Outage),
    // The key holds something else.
    rule("WRONGTYPE", None, Conflict),
    rule("ERR", Some("the key holds a value that is not"), Conflict),
    // The caller's mistake.
    rule("CROSSSLOT", None, Usage),
    rule("ERR", Some("the same key appears more than once"), Usage),
    rule("ERR", Some("invalid "), Usage),
    rule("ERR", Some("syntax error"), Usage),
    rule("ERR", Some("wrong number of arguments"), Usage),
    // The server as configured cannot run the limiter.
    rule("NOPERM", None, Misconfigured),
    rule("NOAUTH", None, Misconfigured),
    rule("WRONGPASS", None, Misconfigured),
    rule("NOSCRIPT", None, Misconfigured),
    rule("ERR", Some(UNKNOWN_COMMAND), Misconfigured),
    rule("ERR", Some("function not found"), Misconfigured),
];

/// The class of an error reply no rule matches: loud, never taken for an outage nor allowed silently.
pub const OTHERWISE: ReplyClass = Misconfigured;

/// Transport failures (no reply at all), by name: all outages.
pub const TRANSPORT: [&str; 4] = ["timeout", "refused", "reset", "closed"];

impl ReplyClass {
    /// Its name in the contract.
    pub fn name(self) -> &'static str {
        match self {
            Outage => "outage",
            Misconfigured => "misconfigured",
            Conflict => "conflict",
            Usage => "usage",
        }
    }

    /// The class of the error reply `text` (`CODE rest of the message`).
    pub fn of_reply(text: &str) -> ReplyClass {
        let (code, rest) = text.split_once(' ').unwrap_or((text, ""));
        RULES
            .iter()
            .find(|r| r.code == code && r.starts.is_none_or(|s| starts_with_ignoring_case(rest, s)))
            .map_or(OTHERWISE, |r| r.class)
    }

    /// The class of a failed call.
    pub fn of(error: &CallError) -> ReplyClass {
        match error {
            CallError::Deadline(_) | CallError::BreakerOpen => Outage,
            CallError::Redis(e) if is_transport_failure(e) => Outage,
            CallError::Redis(e) => ReplyClass::of_reply(&reply_text(e)),
            CallError::Usage(_) => Usage,
            CallError::Reply(_) | CallError::InvalidUrl { .. } => Misconfigured,
        }
    }
}

/// What a fault is logged under: the rule its reply matched (`NOPERM`, `ERR unknown command`), not its
/// whole text (which names keys and arguments).
pub fn cause(error: &CallError) -> String {
    let CallError::Redis(e) = error else { return error.to_string() };
    let text = reply_text(e);
    let (code, rest) = text.split_once(' ').unwrap_or((&text, ""));
    match RULES.iter().find(|r| r.code == code && r.starts.is_none_or(|s| starts_with_ignoring_case(rest, s)))
    {
        Some(rule) => format!("{} {}", rule.code, rule.starts.unwrap_or_default()),
        None => code.to_string(),
    }
}

/// An error that is no reply: the connection failed, was refused, reset or timed out.
fn is_transport_failure(e: &redis::RedisError) -> bool {
    e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_connection_refusal()
}

/// An error reply as the server wrote it: `CODE detail`.
pub fn reply_text(e: &redis::RedisError) -> String {
    if is_unreadable_error_line(e) {
        return format!("ERR {UNKNOWN_COMMAND} (a reply that is not UTF-8, unread: {e})");
    }
    match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_string(),
        _ => e.to_string(),
    }
}

/// redis-rs cannot read a reply line that is not UTF-8 (a parse error, the reply lost). The one such
/// line Redis writes to a limiter's call is its "unknown command" answer, which echoes the call's first
/// 128 bytes of arguments: a key with a character across that cut (or a command on Redis 6.2, which has
/// no FCALL) makes one. Read as what it is: the command is unknown there.
fn is_unreadable_error_line(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Parse && e.to_string().to_ascii_lowercase().contains("utf-8")
}

fn starts_with_ignoring_case(text: &str, start: &str) -> bool {
    text.get(..start.len()).is_some_and(|head| head.eq_ignore_ascii_case(start))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_sorted_by_code_then_by_the_start_of_their_text() {
        assert_eq!(ReplyClass::of_reply("LOADING Redis is loading the dataset in memory"), Outage);
        assert_eq!(
            ReplyClass::of_reply("ERR the key holds a value that is not this limiter's state"),
            Conflict
        );
        assert_eq!(
            ReplyClass::of_reply("WRONGTYPE Operation against a key holding the wrong kind of value"),
            Conflict
        );
        assert_eq!(ReplyClass::of_reply("CROSSSLOT Keys in request don't hash to the same slot"), Usage);
        assert_eq!(ReplyClass::of_reply("ERR Invalid cost: too large"), Usage, "case-insensitive");
        assert_eq!(
            ReplyClass::of_reply("ERR unknown command 'RL.TOKEN', with args beginning with: "),
            Misconfigured
        );
        assert_eq!(ReplyClass::of_reply("ERR something new"), OTHERWISE);
        assert_eq!(ReplyClass::of_reply("NEWCODE"), OTHERWISE);
    }

    #[test]
    fn every_class_has_one_behaviour() {
        for class in [Outage, Misconfigured, Conflict, Usage] {
            assert_eq!(BEHAVIOURS.iter().filter(|b| b.class == class).count(), 1, "{class:?}");
        }
    }
}

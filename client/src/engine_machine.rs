//! How a call finds the engine that answers: a table of transitions, declared once here. The contract
//! carries it (`engines` in contract.json, docs/errors.md) and every client interprets the same table;
//! `engine.rs` sends what it says.
//!
//! Under `auto` the first call asks the module; an unknown or refused command moves to the library
//! through FCALL, loading it where it is missing (never back to the module on "Function not found":
//! the module was already asked), then to EVALSHA where FCALL or FUNCTION LOAD is unknown or refused.
//! An outage goes back to the start: after a failover the server may be another kind of server.

use crate::reply_class::{self, ReplyClass};

/// Where a limiter's engine is: what its next call sends first, and what it reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Unknown,
    Module,
    Fcall,
    Evalsha,
}

/// What a call sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    Module,
    Fcall,
    FunctionLoad,
    Evalsha,
    Eval,
}

/// An answer, as the machine reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Ok,
    UnknownCommand,
    Noperm,
    FunctionMissing,
    Noscript,
    Outage,
    Error,
}

/// The engine a limiter was built to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wanted {
    Auto,
    Module,
    Fcall,
    Evalsha,
}

/// Where a state goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    To(State),
    Same,
    Start,
}

/// What the call does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Then {
    Send(Sent),
    Decided,
    Outage,
    Misconfigured,
    /// An error reply the engine does not steer by: classified (`reply_class`).
    Error,
}

pub struct Transition {
    pub sent: &'static [Sent],
    pub answers: &'static [Answer],
    pub wanted: &'static [Wanted],
    pub next: Next,
    pub then: Then,
}

/// At most this many commands in one call (module, FCALL, FUNCTION LOAD, EVALSHA, EVAL).
pub const MAX_SENDS: usize = 5;

/// The engine each `wanted` starts in.
pub const fn start(wanted: Wanted) -> State {
    match wanted {
        Wanted::Auto => State::Unknown,
        Wanted::Module => State::Module,
        Wanted::Fcall => State::Fcall,
        Wanted::Evalsha => State::Evalsha,
    }
}

/// What a state sends first, and what it reports (the contract's `states`).
pub const STATES: [(State, &str, Sent, &str); 4] = [
    (State::Unknown, "unknown", Sent::Module, "not yet known"),
    (State::Module, "module", Sent::Module, "the ratelimit module"),
    (State::Fcall, "fcall", Sent::Fcall, "the Lua library through FCALL"),
    (State::Evalsha, "evalsha", Sent::Evalsha, "the Lua library through EVALSHA scripts"),
];

/// The answers read from an error reply: code and the start of the text after it (as in `reply_class`),
/// the first that matches. A key outside the user's ACL key patterns is refused with NOPERM too, but the
/// command exists: that answer does not steer (Redis 7+ and 6.2 word it so).
pub const ANSWERS: [(Answer, &str, Option<&str>); 6] = [
    (Answer::Error, "NOPERM", Some("no permissions to access")),
    (Answer::Error, "NOPERM", Some("this user has no permissions to access")),
    (Answer::Noperm, "NOPERM", None),
    (Answer::UnknownCommand, "ERR", Some(reply_class::UNKNOWN_COMMAND)),
    (Answer::FunctionMissing, "ERR", Some("function not found")),
    (Answer::Noscript, "NOSCRIPT", None),
];

use Answer as A;
use Sent as S;
use Wanted as W;

const ALL: &[Wanted] = &[W::Auto, W::Module, W::Fcall, W::Evalsha];
const REFUSED: &[Answer] = &[A::UnknownCommand, A::Noperm];

/// Tried in order; the first whose `sent`, answer and wanted match decides.
pub const TRANSITIONS: &[Transition] = &[
    Transition {
        sent: &[S::Module, S::Fcall, S::FunctionLoad, S::Evalsha, S::Eval],
        answers: &[A::Outage],
        wanted: ALL,
        next: Next::Start,
        then: Then::Outage,
    },
    Transition {
        sent: &[S::Module],
        answers: &[A::Ok],
        wanted: ALL,
        next: Next::To(State::Module),
        then: Then::Decided,
    },
    Transition {
        sent: &[S::Module],
        answers: REFUSED,
        wanted: &[W::Auto],
        next: Next::To(State::Fcall),
        then: Then::Send(S::Fcall),
    },
    Transition {
        sent: &[S::Fcall],
        answers: &[A::Ok],
        wanted: ALL,
        next: Next::To(State::Fcall),
        then: Then::Decided,
    },
    Transition {
        sent: &[S::Fcall],
        answers: &[A::FunctionMissing],
        wanted: &[W::Auto, W::Fcall],
        next: Next::Same,
        then: Then::Send(S::FunctionLoad),
    },
    Transition {
        sent: &[S::Fcall],
        answers: REFUSED,
        wanted: &[W::Auto],
        next: Next::To(State::Evalsha),
        then: Then::Send(S::Evalsha),
    },
    Transition {
        sent: &[S::FunctionLoad],
        answers: &[A::Ok],
        wanted: ALL,
        next: Next::Same,
        then: Then::Send(S::Fcall),
    },
    Transition {
        sent: &[S::FunctionLoad],
        answers: &[A::UnknownCommand, A::Noperm, A::Error],
        wanted: &[W::Auto],
        next: Next::To(State::Evalsha),
        then: Then::Send(S::Evalsha),
    },
    Transition {
        sent: &[S::Evalsha],
        answers: &[A::Ok],
        wanted: ALL,
        next: Next::To(State::Evalsha),
        then: Then::Decided,
    },
    Transition {
        sent: &[S::Evalsha],
        answers: &[A::Noscript],
        wanted: ALL,
        next: Next::Same,
        then: Then::Send(S::Eval),
    },
    Transition {
        sent: &[S::Eval],
        answers: &[A::Ok],
        wanted: ALL,
        next: Next::To(State::Evalsha),
        then: Then::Decided,
    },
    // Another error reply: classified (`reply_class`); the engine stays where it was (NOAUTH answers
    // any command, so it proves no engine).
    Transition {
        sent: &[S::Module, S::Fcall, S::Evalsha, S::Eval],
        answers: &[A::Error],
        wanted: ALL,
        next: Next::Same,
        then: Then::Error,
    },
    // Anything else (refused where there is no next engine, a library missing again after its load):
    // the server as configured cannot run the limiter.
    Transition {
        sent: &[S::Module, S::Fcall, S::FunctionLoad, S::Evalsha, S::Eval],
        answers: &[A::Ok, A::UnknownCommand, A::Noperm, A::FunctionMissing, A::Noscript, A::Error],
        wanted: ALL,
        next: Next::Same,
        then: Then::Misconfigured,
    },
];

/// Every `Wanted`, in the contract's order.
pub const WANTED: [Wanted; 4] = [Wanted::Auto, Wanted::Module, Wanted::Fcall, Wanted::Evalsha];

/// Names, as the contract writes them.
pub fn state_name(state: State) -> &'static str {
    STATES.iter().find(|s| s.0 == state).map_or("unknown", |s| s.1)
}

pub fn sent_name(sent: Sent) -> &'static str {
    match sent {
        Sent::Module => "module",
        Sent::Fcall => "fcall",
        Sent::FunctionLoad => "function_load",
        Sent::Evalsha => "evalsha",
        Sent::Eval => "eval",
    }
}

pub fn answer_name(answer: Answer) -> &'static str {
    match answer {
        Answer::Ok => "ok",
        Answer::UnknownCommand => "unknown_command",
        Answer::Noperm => "noperm",
        Answer::FunctionMissing => "function_missing",
        Answer::Noscript => "noscript",
        Answer::Outage => "outage",
        Answer::Error => "error",
    }
}

pub fn wanted_name(wanted: Wanted) -> &'static str {
    match wanted {
        Wanted::Auto => "auto",
        Wanted::Module => "module",
        Wanted::Fcall => "fcall",
        Wanted::Evalsha => "evalsha",
    }
}

/// The answer an error reply `text` (`CODE detail`) gives the machine.
pub fn answer_of_reply(text: &str) -> Answer {
    let (code, rest) = text.split_once(' ').unwrap_or((text, ""));
    let steering = ANSWERS.iter().find(|(_, c, starts)| {
        *c == code && starts.is_none_or(|s| rest.get(..s.len()).is_some_and(|h| h.eq_ignore_ascii_case(s)))
    });
    match steering {
        Some((answer, _, _)) => *answer,
        None if ReplyClass::of_reply(text) == ReplyClass::Outage => Answer::Outage,
        None => Answer::Error,
    }
}

/// One step: after `sent` got `answer` in `state`, the state and what the call does next.
pub fn step(wanted: Wanted, state: State, sent: Sent, answer: Answer, sends: usize) -> (State, Then) {
    let t = TRANSITIONS
        .iter()
        .find(|t| t.sent.contains(&sent) && t.answers.contains(&answer) && t.wanted.contains(&wanted))
        .expect("the last transition matches every sent and answer");
    let state = match t.next {
        Next::To(s) => s,
        Next::Same => state,
        Next::Start => start(wanted),
    };
    match t.then {
        Then::Send(_) if sends >= MAX_SENDS => (state, Then::Misconfigured),
        then => (state, then),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(wanted: Wanted, answers: &[Answer]) -> (Vec<Sent>, Then, State) {
        let mut state = start(wanted);
        let mut sent = STATES.iter().find(|s| s.0 == state).unwrap().2;
        let mut sends = vec![];
        for answer in answers {
            sends.push(sent);
            let (next, then) = step(wanted, state, sent, *answer, sends.len());
            state = next;
            match then {
                Then::Send(s) => sent = s,
                done => return (sends, done, state),
            }
        }
        panic!("the answers ran out")
    }

    #[test]
    fn a_stock_server_loads_the_library_once_and_stays_on_fcall() {
        let (sent, then, state) = run(Wanted::Auto, &[A::UnknownCommand, A::FunctionMissing, A::Ok, A::Ok]);
        assert_eq!(sent, [S::Module, S::Fcall, S::FunctionLoad, S::Fcall]);
        assert_eq!((then, state), (Then::Decided, State::Fcall));
        // The next call finds the library missing (a flush): it loads again, never asks the module.
        let (next, then) = step(Wanted::Auto, State::Fcall, S::Fcall, A::FunctionMissing, 1);
        assert_eq!((next, then), (State::Fcall, Then::Send(S::FunctionLoad)));
    }

    #[test]
    fn a_key_outside_the_users_patterns_does_not_move_the_engine() {
        assert_eq!(answer_of_reply("NOPERM No permissions to access a key"), A::Error);
        assert_eq!(
            answer_of_reply(
                "NOPERM this user has no permissions to access one of the keys used as arguments"
            ),
            A::Error
        );
        assert_eq!(
            answer_of_reply("NOPERM User app has no permissions to run the 'rl.token' command"),
            A::Noperm
        );
        assert_eq!(
            answer_of_reply(
                "NOPERM this user has no permissions to run the 'rl.token' command or its subcommand"
            ),
            A::Noperm
        );
        assert_eq!(step(W::Auto, State::Unknown, S::Module, A::Error, 1), (State::Unknown, Then::Error));
    }

    #[test]
    fn a_call_sends_at_most_max_sends_commands() {
        // The library vanishes again right after its load: the call gives up instead of looping.
        let answers = [A::UnknownCommand, A::FunctionMissing, A::Ok, A::FunctionMissing, A::Ok];
        let (sent, then, _) = run(Wanted::Auto, &answers);
        assert_eq!(sent, [S::Module, S::Fcall, S::FunctionLoad, S::Fcall, S::FunctionLoad]);
        assert_eq!(then, Then::Misconfigured);
    }
}

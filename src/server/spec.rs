//! What a command declares (name, flags, ACL, keys, counters, origin): pure declarations, read by
//! registration and dispatch (`command`), the dialect plan (`dialects`) and the statistics
//! (`observed`). A leaf: it uses none of them.

use super::arg::Arg;
use super::error::RlError;
use super::reply::Reply;
use crate::stats::CommandStats;
use redis_module::Context;
use std::ffi::CStr;
use std::os::raw::c_int;

/// A command: its declaration (`SPEC`) beside its body, which gets the arguments after the command
/// name.
pub trait Command {
    const SPEC: Spec;

    fn run(ctx: &Context, args: &[Arg]) -> Result<Reply, RlError>;
}

/// What a command declares: everything its registration, dispatch and statistics need.
pub struct Spec {
    /// The name it is registered under, lower case (`rl.token`).
    pub name: &'static CStr,
    /// The server's command flags; `getkeys-api` is added when `keys` is a function.
    pub flags: &'static CStr,
    /// Which ACL categories it joins besides `@ratelimit`.
    pub acl: Acl,
    /// Where its keys are, for the server (COMMAND GETKEYS, cluster routing) and for the key classes.
    pub keys: Keys,
    /// Where `INFO ratelimit` counts its outcomes (limiters and refunds).
    pub stats: Option<&'static CommandStats>,
    /// Whether its outcomes count in the key classes and RL.TOP (the limiters).
    pub counted: bool,
    /// Whose name it is: ours, or another product's for a limiter (see `dialects`).
    pub origin: Origin,
}

/// Whose name a command is: ours, or a dialect (another product's name for a limiter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// An RL.* command: the load fails when it cannot register.
    Own,
    /// A dialect: registered when `ratelimit.dialects` lists it and its name is free; otherwise
    /// skipped with a log line, never fatal.
    Dialect,
    /// A dialect of a command some servers have built in: as `Dialect`, and also skipped on a server
    /// with a built-in command in `@ratelimit` (core's GCRA, whatever it was renamed to).
    DialectUnlessBuiltIn,
}

/// What became of a command at load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registration {
    Registered,
    /// A dialect this load does not register (not listed, or its name is taken).
    Skipped,
    Failed,
}

/// The flags of a limiter that does constant work per call.
pub const FAST_WRITE: &CStr = c"write deny-oom fast";

impl Spec {
    /// A limiter: writes, counted in its counters, the key classes and RL.TOP.
    pub const fn limiter(
        name: &'static CStr,
        flags: &'static CStr,
        keys: Keys,
        stats: &'static CommandStats,
    ) -> Spec {
        Spec { name, flags, acl: Acl::Write, keys, stats: Some(stats), counted: true, origin: Origin::Own }
    }

    /// Any other command: `acl` says what it does; no keys, no statistics unless added.
    pub const fn other(name: &'static CStr, flags: &'static CStr, acl: Acl) -> Spec {
        Spec { name, flags, acl, keys: Keys::None, stats: None, counted: false, origin: Origin::Own }
    }

    /// Another product's name for a limiter (see `Origin`).
    pub const fn with_origin(self, origin: Origin) -> Spec {
        Spec { origin, ..self }
    }

    pub const fn with_keys(self, keys: Keys) -> Spec {
        Spec { keys, ..self }
    }

    pub const fn with_stats(self, stats: &'static CommandStats) -> Spec {
        Spec { stats: Some(stats), ..self }
    }
}

/// The server ACL category a command is in besides `@ratelimit`, by what it does: `+@read` grants the
/// reporting commands, `-@write` takes the limiters away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acl {
    Write,
    Read,
    Admin,
}

impl Acl {
    pub(super) fn categories(self) -> &'static CStr {
        match self {
            Acl::Write => c"ratelimit write",
            Acl::Read => c"ratelimit read",
            Acl::Admin => c"ratelimit admin dangerous",
        }
    }
}

/// Where a command's keys are.
pub enum Keys {
    None,
    /// Counting the command name as argument 0: the first key, the last (-1: the last argument) and
    /// the step between them.
    Range {
        first: c_int,
        last: c_int,
        step: c_int,
    },
    /// A function of the arguments (after the name): the index of the `position`-th key, None past the
    /// last. Registered with `getkeys-api`, so the server asks the command where its keys are. For
    /// commands whose keys follow keywords or groups of different lengths (RL.ALL).
    Function(fn(args: &[Arg], position: usize) -> Option<usize>),
}

impl Keys {
    /// One key, the first argument.
    pub const FIRST: Keys = Keys::Range { first: 1, last: 1, step: 1 };
    /// One key, after a subcommand.
    pub const SECOND: Keys = Keys::Range { first: 2, last: 2, step: 1 };

    /// The index among `args` (the arguments after the command name) of the `position`-th key.
    #[inline]
    pub fn index(&self, args: &[Arg], position: usize) -> Option<usize> {
        let (first, last, step) = match *self {
            Keys::None => return None,
            Keys::Function(f) => return f(args, position).filter(|&i| i < args.len()),
            Keys::Range { first, last, step } => (first, last, step),
        };
        let (first, step) = (usize::try_from(first).ok()?.checked_sub(1)?, usize::try_from(step).ok()?);
        let index = first.checked_add(position.checked_mul(step)?)?;
        let within = match usize::try_from(last) {
            Ok(last) => index < last,
            Err(_) => true, // -1: up to the last argument
        };
        if step == 0 && position > 0 || !within || index >= args.len() {
            return None;
        }
        Some(index)
    }

    /// The `position`-th key's bytes.
    #[inline]
    pub fn key<'a>(&self, args: &'a [Arg], position: usize) -> Option<&'a [u8]> {
        self.index(args, position).map(|i| args[i].bytes())
    }

    /// first, last, step for RedisModule_CreateCommand (a function's hint: the first argument).
    pub(super) fn positions(&self) -> (c_int, c_int, c_int) {
        match *self {
            Keys::None => (0, 0, 0),
            Keys::Range { first, last, step } => (first, last, step),
            Keys::Function(_) => (1, 1, 1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(n: usize) -> Vec<Arg> {
        (0..n).map(|_| Arg::null()).collect()
    }

    #[test]
    fn key_positions_from_a_range_or_a_function() {
        let groups = Keys::Range { first: 1, last: -1, step: 4 };
        let eight = args(8);
        assert_eq!((0..3).map(|p| groups.index(&eight, p)).collect::<Vec<_>>(), [Some(0), Some(4), None]);
        assert_eq!(Keys::SECOND.index(&eight, 0), Some(1));
        assert_eq!(Keys::SECOND.index(&eight, 1), None);
        assert_eq!(Keys::None.index(&eight, 0), None);
        // Keys after a keyword at variable distances: here every other argument from the third.
        let odd = Keys::Function(|args, p| Some(2 + 2 * p).filter(|&i| i < args.len()));
        assert_eq!(
            (0..4).map(|p| odd.index(&eight, p)).collect::<Vec<_>>(),
            [Some(2), Some(4), Some(6), None]
        );
        assert_eq!(odd.positions(), (1, 1, 1), "first key 1 as the hint");
    }
}

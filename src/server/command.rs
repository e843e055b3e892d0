//! What a command declares (name, flags, ACL, keys), registering it, and dispatching the server's
//! calls to it without per-call copies of the arguments: each call sees the server's argv directly,
//! and replies go straight to the server.

use super::arg::Arg;
use super::clock;
use super::error::RlError;
use super::reply::Reply;
use crate::stats::{CommandStats, Outcome};
use redis_module::{raw, Context, Status};
use std::ffi::{CStr, CString};
use std::os::raw::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};

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
    /// Whether it is another product's name for a limiter (see `dialects`).
    pub dialect: Dialect,
}

/// Whether a command is one of ours or a dialect: another product's name for a limiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// An RL.* command: the load fails when it cannot register.
    No,
    /// Registered when `ratelimit.dialects` lists it and its name is free; otherwise skipped with a
    /// log line, never fatal.
    Yes,
    /// As `Yes`, and also skipped on a server with a built-in command in `@ratelimit` (core's GCRA,
    /// whatever it was renamed to).
    BuiltIn,
}

/// The commands this module registered, in order (set once at load): INFO and RL.RESETSTATS go
/// through their counters.
static REGISTERED: std::sync::OnceLock<Vec<&'static Spec>> = std::sync::OnceLock::new();

pub fn set_registered(specs: Vec<&'static Spec>) {
    let _ = REGISTERED.set(specs);
}

/// The per-command counters of the registered commands, in order.
pub fn registered_stats() -> impl Iterator<Item = &'static CommandStats> {
    REGISTERED.get().map_or(&[][..], Vec::as_slice).iter().filter_map(|spec| spec.stats)
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
        Spec { name, flags, acl: Acl::Write, keys, stats: Some(stats), counted: true, dialect: Dialect::No }
    }

    /// Any other command: `acl` says what it does; no keys, no statistics unless added.
    pub const fn other(name: &'static CStr, flags: &'static CStr, acl: Acl) -> Spec {
        Spec { name, flags, acl, keys: Keys::None, stats: None, counted: false, dialect: Dialect::No }
    }

    /// Another product's name for a limiter (see `Dialect`).
    pub const fn with_dialect(self, dialect: Dialect) -> Spec {
        Spec { dialect, ..self }
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
    fn categories(self) -> &'static CStr {
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
    fn positions(&self) -> (c_int, c_int, c_int) {
        match *self {
            Keys::None => (0, 0, 0),
            Keys::Range { first, last, step } => (first, last, step),
            Keys::Function(_) => (1, 1, 1),
        }
    }
}

/// What a call came to, for statistics: computed once, recorded by the counters and the classes.
fn outcome(result: &Result<Reply, RlError>) -> Outcome {
    match result {
        Ok(Reply::Limit { verdict, .. } | Reply::Taken { verdict, .. } | Reply::Dialect { verdict, .. })
            if verdict.allowed =>
        {
            Outcome::Allowed
        }
        Ok(Reply::Limit { limiting, .. }) => Outcome::Denied { limiting: limiting.unwrap_or(0) },
        Ok(Reply::Taken { .. } | Reply::Dialect { .. }) => Outcome::Denied { limiting: 0 },
        Ok(Reply::Value(_)) => Outcome::Report,
        Err(_) => Outcome::Error,
    }
}

/// Answers the server's question "where are this call's keys" (getkeys-api): true when it was asked.
fn keys_position_request<C: Command>(ctx: *mut raw::RedisModuleCtx, args: &[Arg]) -> bool {
    let Keys::Function(_) = C::SPEC.keys else { return false };
    // SAFETY: API pointers set by RedisModule_Init; called with the command's own context.
    unsafe {
        let (Some(is_request), Some(key_at)) =
            (raw::RedisModule_IsKeysPositionRequest, raw::RedisModule_KeyAtPos)
        else {
            return false;
        };
        if is_request(ctx) == 0 {
            return false;
        }
        let mut position = 0;
        while let Some(index) = C::SPEC.keys.index(args, position) {
            // +1: the server counts the command name as argument 0.
            key_at(ctx, (index + 1) as c_int);
            position += 1;
        }
    }
    true
}

/// The function the server calls. Errors become error replies; a panic is caught here, because one
/// that crossed the FFI boundary would abort the server.
extern "C" fn dispatch<C: Command>(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    let context = Context::new(ctx);
    // SAFETY: the server passes argc live strings that outlive this call.
    let args = unsafe { Arg::slice(argv, usize::try_from(argc).unwrap_or(0)) };
    let args = args.get(1..).unwrap_or(&[]);
    if matches!(C::SPEC.keys, Keys::Function(_))
        && catch_unwind(AssertUnwindSafe(|| keys_position_request::<C>(ctx, args))).unwrap_or(true)
    {
        return raw::REDISMODULE_OK as c_int;
    }
    let result = catch_unwind(AssertUnwindSafe(|| C::run(&context, args)))
        .unwrap_or(Err(RlError::Internal("the command panicked; please report it")));
    let outcome = outcome(&result);
    if let Some(counters) = C::SPEC.stats {
        counters.record(outcome);
    }
    if C::SPEC.counted {
        let record = || {
            super::observed::record(
                outcome,
                |position| C::SPEC.keys.key(args, position),
                || clock::last_ns() / 1_000_000,
            )
        };
        // Statistics never fail a command.
        let _ = catch_unwind(AssertUnwindSafe(record));
    }
    match result {
        Ok(reply) => reply.send(&context),
        Err(err) => err.send(&context),
    }
    raw::REDISMODULE_OK as c_int
}

/// Registers `C` with its declaration, in its ACL categories when the server has module categories
/// (`categories`); a command that cannot join them is registered without, with a log line. A dialect
/// that `plan` skips, or whose name is taken, is skipped with a log line.
pub fn register<C: Command>(ctx: &Context, categories: bool, plan: &super::dialects::Plan) -> Registration {
    let spec = &C::SPEC;
    if let Some(reason) = plan.skip_reason(spec) {
        ctx.log_notice(&format!("dialect skipped: {reason}"));
        return Registration::Skipped;
    }
    match create::<C>(ctx, categories) {
        Status::Ok => Registration::Registered,
        Status::Err if spec.dialect != Dialect::No => {
            ctx.log_warning(&format!(
                "dialect skipped: the name {} is taken (a built-in command, or another module such as \
                 redis-cell loaded first); the other commands load",
                spec.name.to_string_lossy()
            ));
            Registration::Skipped
        }
        Status::Err => {
            ctx.log_warning(&format!("cannot register command {}", spec.name.to_string_lossy()));
            Registration::Failed
        }
    }
}

fn create<C: Command>(ctx: &Context, categories: bool) -> Status {
    let spec = &C::SPEC;
    let (first, last, step) = spec.keys.positions();
    let flags = match spec.keys {
        Keys::Function(_) => CString::new(format!("{} getkeys-api", spec.flags.to_string_lossy())),
        _ => Ok(spec.flags.to_owned()),
    };
    let Ok(flags) = flags else { return Status::Err };
    let name = spec.name;
    // SAFETY: API pointers set by RedisModule_Init, called from OnLoad with the server's context.
    unsafe {
        let Some(create) = raw::RedisModule_CreateCommand else {
            return Status::Err;
        };
        let status = create(ctx.ctx, name.as_ptr(), Some(dispatch::<C>), flags.as_ptr(), first, last, step);
        if status != raw::REDISMODULE_OK as c_int {
            return Status::Err;
        }
        let acl = spec.acl.categories();
        let (true, Some(get), Some(set_acl)) =
            (categories, raw::RedisModule_GetCommand, raw::RedisModule_SetCommandACLCategories)
        else {
            return Status::Ok;
        };
        let command = get(ctx.ctx, name.as_ptr());
        if command.is_null() || set_acl(command, acl.as_ptr()) != raw::REDISMODULE_OK as c_int {
            ctx.log_warning(&format!(
                "cannot put {} in ACL category {}: registered without a category",
                name.to_string_lossy(),
                acl.to_string_lossy()
            ));
        }
    }
    Status::Ok
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

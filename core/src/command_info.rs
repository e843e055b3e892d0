//! One command as a client knows it ([`CommandInfo`]): the types of `commands`' table, apart from the
//! table, so that a kind's declaration (`declare`) can say its own command's keys and reply.

/// Where a command's keys are among its arguments (after its name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyRule {
    /// No keys.
    None,
    /// One key, at this index.
    At(usize),
    /// A key every `n` arguments from the first (RL.TOKEN's buckets: `key capacity rate cost`).
    Every(usize),
    /// RL.ALL's groups: a key, a kind's group name, then that kind's arguments
    /// (`LimiterKind::group_len`); the first argument that is not a group's key ends them.
    Groups,
    /// RL.HOLD's: a ledger key first, then RL.ALL's groups after three more arguments.
    LedgerGroups,
    /// RL.SETTLE's: a ledger key first, then after two more arguments `key units` pairs.
    LedgerPairs,
}

/// What a command replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyForm {
    /// The five fields of [`crate::verdict::Verdict`] (`allowed limit remaining retry_after_ms
    /// reset_after_ms`), and a sixth when `sixth` is named and the call asks for it.
    Verdict { sixth: Option<&'static str> },
    /// `1` or `0`.
    Flag,
    /// RL.INSPECT's fields: a flat list of names and values (a map to RESP3 clients of the module).
    Fields,
    /// RL.TOP's list of keys and counts.
    Top,
    /// `OK`.
    Ok,
    /// Another product's reply (a dialect's, see `dialect`).
    Dialect,
    /// RL.SETTLE's: a verdict's six fields as the settle left the hold's limits (`allowed` 0: a named
    /// limit went past its held units and has nothing left), or nil: no hold of this id.
    Settled,
}

impl ReplyForm {
    /// The fields of a verdict reply, in order.
    pub const VERDICT: [&'static str; 5] =
        ["allowed", "limit", "remaining", "retry_after_ms", "reset_after_ms"];
}

/// One command, as a client needs to know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommandInfo {
    pub name: &'static str,
    pub syntax: &'static str,
    /// The fewest arguments after the name.
    pub min_args: usize,
    pub keys: KeyRule,
    pub writes: bool,
    /// The Lua library's function for it (`rl_token`); None for a command only the module has.
    pub function: Option<&'static str>,
    pub reply: ReplyForm,
}

pub(crate) const fn verdict(sixth: Option<&'static str>) -> ReplyForm {
    ReplyForm::Verdict { sixth }
}

pub(crate) const fn command(
    name: &'static str,
    syntax: &'static str,
    min_args: usize,
    keys: KeyRule,
    function: Option<&'static str>,
    reply: ReplyForm,
) -> CommandInfo {
    CommandInfo { name, syntax, min_args, keys, writes: true, function, reply }
}

/// The sixth field of a verdict that several limits decided: the 1-based position of the one that
/// limited.
pub const DECIDING: Option<&str> = Some("the 1-based position of the limit that decided");
/// The sixth field of a partial grant: the units taken.
pub const TAKEN: Option<&str> = Some("the units taken");

impl CommandInfo {
    /// A limiter kind's own command, from its declaration (`Declare::SYNTAX`, ...): it writes, its
    /// fewest arguments are its syntax's words before the first `[`, and it replies a verdict.
    pub(crate) const fn of_kind(
        name: &'static str,
        syntax: &'static str,
        keys: KeyRule,
        function: &'static str,
        sixth: Option<&'static str>,
    ) -> CommandInfo {
        command(name, syntax, required_args(syntax), keys, Some(function), verdict(sixth))
    }
}

/// The arguments a syntax requires after the command's name: its words before the first `[`.
const fn required_args(syntax: &str) -> usize {
    let bytes = syntax.as_bytes();
    let (mut words, mut i) = (0, 0);
    while i < bytes.len() && bytes[i] != b'[' {
        if bytes[i] != b' ' && (i == 0 || bytes[i - 1] == b' ') {
            words += 1;
        }
        i += 1;
    }
    words - 1
}

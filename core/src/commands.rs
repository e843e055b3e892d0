//! The commands as a client sees them: each one's name, syntax, where its keys are, whether it writes,
//! whether the Lua library implements it (and as which function), and what it replies. The one table
//! a client reads (the Rust client directly, the other languages through `contract/contract.json`,
//! which is written from it); the module registers the same names, and a test against a real server
//! holds its key positions (`COMMAND GETKEYS`) to this table.

use crate::command_info::{command, verdict};
pub use crate::command_info::{CommandInfo, KeyRule, ReplyForm, DECIDING, TAKEN};
use crate::kind::LimiterKind;

impl KeyRule {
    /// The indexes of the keys among `args` (the arguments after the command name).
    pub fn positions<A: AsRef<[u8]>>(self, args: &[A]) -> Vec<usize> {
        match self {
            KeyRule::None => vec![],
            KeyRule::At(i) => (i < args.len()).then_some(i).into_iter().collect(),
            KeyRule::Every(n) => (0..args.len()).step_by(n).collect(),
            KeyRule::Groups => {
                let (mut at, mut keys) = (0, vec![]);
                while at + 1 < args.len() {
                    keys.push(at);
                    let Some(kind) = LimiterKind::from_group(args[at + 1].as_ref()) else { break };
                    let rest: Vec<&[u8]> = args[at + 2..].iter().map(AsRef::as_ref).collect();
                    at += 2 + kind.group_len(&rest);
                }
                keys
            }
            KeyRule::LedgerGroups => {
                let groups = KeyRule::Groups.positions(args.get(4..).unwrap_or_default());
                let ledger = (!args.is_empty()).then_some(0);
                ledger.into_iter().chain(groups.into_iter().map(|i| i + 4)).collect()
            }
            KeyRule::LedgerPairs => {
                let ledger = (!args.is_empty()).then_some(0);
                ledger.into_iter().chain((3..args.len()).step_by(2)).collect()
            }
        }
    }
}

impl CommandInfo {
    /// The command named `name` (case-insensitive).
    pub fn named(name: &str) -> Option<&'static CommandInfo> {
        COMMANDS.iter().find(|c| c.name.eq_ignore_ascii_case(name))
    }

    /// The commands the Lua library implements.
    pub fn in_library() -> impl Iterator<Item = &'static CommandInfo> {
        COMMANDS.iter().filter(|c| c.function.is_some())
    }
}

/// The Lua library's own read-only function (no module command): its version and the hash of its source.
pub const VERSION_FUNCTION: &str = "rl_version";

/// The commands that are no limiter kind's own.
const OTHERS: [CommandInfo; 13] = [
    command("RL.TAKE", "RL.TAKE key capacity rate max", 4, KeyRule::At(0), Some("rl_take"), verdict(TAKEN)),
    command(
        "RL.REFUND",
        "RL.REFUND TOKEN|RESERVE|FIXED|SLIDECOUNT key p1 p2 units",
        5,
        KeyRule::At(1),
        Some("rl_refund"),
        verdict(None),
    ),
    command(
        "RL.ALL",
        "RL.ALL key KIND p1 p2 request [key KIND p1 p2 request ...]",
        5,
        KeyRule::Groups,
        Some("rl_all"),
        verdict(DECIDING),
    ),
    command(
        "RL.HOLD",
        "RL.HOLD ledger id ttl CHARGE|RETURN key KIND p1 p2 units [key KIND p1 p2 units ...]",
        9,
        KeyRule::LedgerGroups,
        Some("rl_hold"),
        verdict(DECIDING),
    ),
    command(
        "RL.SETTLE",
        "RL.SETTLE ledger id FINAL|PARTIAL key units [key units ...]",
        5,
        KeyRule::LedgerPairs,
        Some("rl_settle"),
        ReplyForm::Settled,
    ),
    command("RL.RELEASE", "RL.RELEASE key id", 2, KeyRule::At(0), Some("rl_release"), ReplyForm::Flag),
    command("RL.RENEW", "RL.RENEW key lease id", 3, KeyRule::At(0), Some("rl_renew"), ReplyForm::Flag),
    CommandInfo {
        writes: false,
        ..command(
            "RL.INSPECT",
            "RL.INSPECT key [p1 p2 [p3]]",
            1,
            KeyRule::At(0),
            Some("rl_inspect"),
            ReplyForm::Fields,
        )
    },
    CommandInfo {
        writes: false,
        ..command("RL.TOP", "RL.TOP [count]", 0, KeyRule::None, None, ReplyForm::Top)
    },
    command("RL.RESETSTATS", "RL.RESETSTATS", 0, KeyRule::None, None, ReplyForm::Ok),
    command(
        "CL.THROTTLE",
        "CL.THROTTLE key max_burst count_per_period period [quantity]",
        4,
        KeyRule::At(0),
        None,
        ReplyForm::Dialect,
    ),
    command(
        "RL.THROTTLE",
        "RL.THROTTLE key max_burst count_per_period period [quantity]",
        4,
        KeyRule::At(0),
        None,
        ReplyForm::Dialect,
    ),
    command(
        "GCRA",
        "GCRA key max_burst tokens_per_period period [TOKENS n]",
        4,
        KeyRule::At(0),
        None,
        ReplyForm::Dialect,
    ),
];

const KINDS: usize = LimiterKind::ALL.len();

/// Each kind's command (from its declaration, in the registry's order), then the others.
const fn every_command() -> [CommandInfo; KINDS + OTHERS.len()] {
    let mut all = [OTHERS[0]; KINDS + OTHERS.len()];
    let mut i = 0;
    while i < KINDS {
        all[i] = LimiterKind::ALL[i].command_info();
        i += 1;
    }
    while i < all.len() {
        all[i] = OTHERS[i - KINDS];
        i += 1;
    }
    all
}

/// Every command the module registers (the dialects only where `ratelimit.dialects` lists them).
pub const COMMANDS: &[CommandInfo] = &every_command();

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<&[u8]> {
        s.split(' ').map(str::as_bytes).collect()
    }

    #[test]
    fn every_kind_s_command_is_listed_once_with_a_library_function() {
        for kind in LimiterKind::ALL {
            let listed: Vec<_> = COMMANDS.iter().filter(|c| c.name == kind.command()).collect();
            assert_eq!(listed.len(), 1, "{kind:?}");
            let function = listed[0].function.expect("every kind is in the library");
            assert_eq!(function, kind.command().to_ascii_lowercase().replace('.', "_"));
        }
        for c in COMMANDS {
            assert!(c.syntax.starts_with(c.name), "{}", c.name);
            assert_eq!(CommandInfo::named(&c.name.to_lowercase()), Some(c));
        }
    }

    #[test]
    fn keys_by_rule() {
        assert_eq!(KeyRule::Every(4).positions(&args("a 1 1 1 b 1 1 1")), [0, 4]);
        assert_eq!(KeyRule::At(1).positions(&args("TOKEN k 1 1 1")), [1]);
        assert_eq!(KeyRule::At(0).positions::<&[u8]>(&[]), Vec::<usize>::new());
        assert_eq!(KeyRule::None.positions(&args("5")), Vec::<usize>::new());
        let all = args("a TOKEN 10 1 1 b SLIDE 5 60 id DEDUP c ACQUIRE 3 10 h WEIGHT 2 d FIXED 1 1 1");
        assert_eq!(KeyRule::Groups.positions(&all), [0, 5, 11, 18]);
        let hold = args("l id 60 CHARGE a TOKEN 10 1 1 b FIXED 5 60 3");
        assert_eq!(KeyRule::LedgerGroups.positions(&hold), [0, 4, 9]);
        assert_eq!(KeyRule::LedgerPairs.positions(&args("l id FINAL a 3 b 4")), [0, 3, 5]);
    }
}

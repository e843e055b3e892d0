//! Each library function's EVALSHA script (Redis 6.2, users allowed `EVALSHA` but not `FUNCTION`),
//! written from the one library (`lua/ratelimit.lua`) and the scripts' end (`lua/src/evalsha.lua`).
//!
//! A script runs its whole top level on every call (each function it defines there is a new closure
//! each time), so it holds only what its function reaches (`parts.rs` says how that is found): of the
//! library's statements above its registration, and of those of `build` (the function that builds the
//! library's modules), the ones the script's end needs, and what those need in turn, in the library's
//! order. The parts only the general path (`build`) reaches come after the fast path's early return, so
//! that a call the fast path decides creates none of their closures. Comment lines and blank lines are
//! left out; every other line is the library's or the end's. The scripts are shipped as files
//! (`lua/scripts/<function>.lua`); a test fails when one is stale.

mod parts;
mod tokens;

use parts::{Entry, Library, Name};
use std::collections::BTreeSet;

/// The scripts' end, `lua/src/evalsha.lua` (`client/lua/evalsha.lua` links to it).
const END: &str = include_str!("../lua/evalsha.lua");

/// What each script's first line says.
const GENERATED: &str =
    "-- GENERATED from lua/ratelimit.lua and lua/src/evalsha.lua by `cargo run -p contract-gen`: do \
     not edit";

/// Where the library's registration begins: what the scripts hold nothing of.
const REGISTER: &str = "-- REGISTER:";

/// The library's builder of its modules, which the script's end calls; its body is split into parts,
/// as is the fast paths' builder's (PATHS).
const BUILD: &str = "build";

/// The library's fast-path groups: `FAST_PATHS`'s `function = builder` pairs.
fn fast_paths(library: &str) -> Vec<(&str, &str)> {
    let Some(at) = library.find("local FAST_PATHS = {") else { return vec![] };
    let table = &library[at..];
    let table = &table[table.find('{').unwrap() + 1..table.find('}').unwrap()];
    table
        .split(',')
        .filter_map(|pair| pair.split_once('='))
        .map(|(f, b)| (f.trim(), b.trim()))
        .filter(|(f, _)| !f.is_empty())
        .collect()
}

/// The end's line naming the table of which the script reaches one field, `--@ only C.FUNCTION`.
const ONLY: &str = "--@ only ";

/// The table and field of the end's `--@ only` line, for `function`.
fn only(function: &str) -> Option<(&'static str, &str)> {
    let line = END.lines().find_map(|l| l.strip_prefix(ONLY))?;
    line.split_once('.').map(|(table, field)| (table, if field == "FUNCTION" { function } else { field }))
}

/// The EVALSHA script of `function` in `library` (a source as `FUNCTION LOAD` takes it).
pub fn script_of(library: &str, function: &str) -> String {
    let paths = fast_paths(library).into_iter().find(|(f, _)| *f == function).map(|(_, b)| b);
    // The end's lines, the leading comments left out, the fast block kept or dropped.
    let mut lines: Vec<String> = Vec::new();
    let mut in_fast = false;
    for line in END.lines().skip_while(|l| l.starts_with("--")) {
        match line {
            "--@ fast" => in_fast = true,
            "--@ end" => in_fast = false,
            _ if line.starts_with(ONLY) => {}
            _ if in_fast && paths.is_none() => {}
            _ => lines.push(line.replace("FUNCTION", function).replace("PATHS", paths.unwrap_or("PATHS"))),
        }
    }
    let entry = Entry { function, only: only(function) };
    let at = |marker: &str| lines.iter().position(|l| l == marker).expect("lua/src/evalsha.lua's markers");
    let (parts_at, build_at) = (at("--@ parts"), at("--@ build"));
    let builders: Vec<&str> = [BUILD].into_iter().chain(paths).collect();
    let parts = Library::parse(library, REGISTER, &builders).expect("the library's parts");
    let head_code = lines[parts_at + 1..build_at].join("\n");
    let mut roots = parts::uses(&head_code).expect("lua/src/evalsha.lua's lines");
    let head = parts.reach(&roots, &entry);
    roots.push(Name::Plain(BUILD));
    let build: BTreeSet<usize> = parts.reach(&roots, &entry).difference(&head).copied().collect();
    let mut out = format!("{GENERATED}\n");
    for (i, line) in lines.iter().enumerate() {
        if i == parts_at {
            parts.write(&head, &entry, &mut out);
        } else if i == build_at {
            parts.write(&build, &entry, &mut out);
        } else {
            out += line;
            out += "\n";
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratelimit_core::commands::{CommandInfo, VERSION_FUNCTION};

    /// Every library function's script, from the library as shipped.
    fn scripts() -> Vec<(&'static str, String)> {
        let functions = CommandInfo::in_library().filter_map(|c| c.function).chain([VERSION_FUNCTION]);
        functions.map(|f| (f, script_of(crate::engine::LIBRARY, f))).collect()
    }

    #[test]
    fn a_script_holds_what_its_function_reaches_and_builds_the_rest_after_its_fast_path() {
        let library = crate::engine::LIBRARY;
        let token = script_of(library, "rl_token");
        assert!(token.starts_with("-- GENERATED"));
        assert!(!token.contains("register_function") && !token.contains("#!lua"));
        let fast = token.find("token_paths().rl_token(KEYS, ARGV").expect("rl_token's fast path");
        let build = token.find("local function build()").expect("the general path");
        assert!(fast < build, "the fast path returns before the library is built");
        assert!(token[..fast].contains("local function token_core("));
        assert!(!token.contains("local function window_paths("), "another group's builder");
        assert!(token.ends_with("return build().rl_token(KEYS, ARGV, sec, usec, ns)\n"));
        // A function without a fast path builds the library at once.
        let take = script_of(library, "rl_take");
        assert!(!take.contains("now_limbs(sec") && !take.contains("token_paths()"));
        assert!(take.contains("local function build()"));
        // The builders are called by the end only (what their split bodies assume), and of the fast
        // paths' group, a script holds its own function's path.
        for (function, script) in scripts() {
            let builders = fast_paths(library).into_iter().filter(|(f, _)| *f == function).map(|(_, b)| b);
            for builder in [BUILD].into_iter().chain(builders) {
                assert_eq!(script.matches(&format!("{builder}()")).count(), 2, "{function}: {builder}");
            }
        }
        let fixed = script_of(library, "rl_fixed");
        assert!(fixed.contains("local function fixed_fast("));
        assert!(
            !fixed.contains("counter_fast") && !fixed.contains("slide_fast") && !fixed.contains("LOG_HEADER")
        );
        assert!(fixed.contains("\n  return { rl_fixed = fixed_fast }\n"));
    }

    /// No script keeps a definition it does not reach: read again as a text of its own, from its own
    /// lines (the end's), every part of it is reached.
    #[test]
    fn a_script_holds_nothing_it_does_not_reach() {
        let unreached = |function: &str, script: &str| -> Vec<String> {
            let paths = fast_paths(crate::engine::LIBRARY).into_iter().filter(|(f, _)| *f == function);
            let builders: Vec<&str> = [BUILD].into_iter().chain(paths.map(|(_, b)| b)).collect();
            let parts = Library::parse(script, REGISTER, &builders).expect("a script's parts");
            let entry = Entry { function, only: only(function) };
            parts.unreached(&entry).into_iter().map(str::to_string).collect()
        };
        for (function, script) in scripts() {
            let left = unreached(function, &script);
            assert!(left.is_empty(), "{function}'s script holds what it does not reach: {left:#?}");
        }
        // What it finds: a function no line calls, a command of another function's.
        let version = script_of(crate::engine::LIBRARY, VERSION_FUNCTION).replacen(
            "  local C = {}\n",
            "  local C = {}\n  local function spare() return 1 end\n  function C.rl_token() return spare() end\n",
            1,
        );
        let left = unreached(VERSION_FUNCTION, &version);
        assert_eq!(
            left,
            ["  local function spare() return 1 end", "  function C.rl_token() return spare() end"]
        );
    }

    /// Each script holds the limiter kinds its function decides with, and no other: rl_version's
    /// none, rl_token's the token bucket's only (no sliding log, no leases), the dispatchers' every one.
    #[test]
    fn a_script_holds_only_the_kinds_its_function_uses() {
        let library = crate::engine::LIBRARY;
        let registry =
            library.lines().find(|l| l.trim_start().starts_with("local KINDS = {")).expect("KINDS");
        let kinds: Vec<&str> = registry[registry.find('{').unwrap() + 1..registry.find('}').unwrap()]
            .split(',')
            .map(str::trim)
            .collect();
        assert!(kinds.len() >= 6, "{kinds:?}");
        for (function, script) in scripts() {
            let held: Vec<&str> =
                kinds.iter().copied().filter(|k| script.contains(&format!("\n  local {k} = "))).collect();
            let want: &[&str] = match function {
                "rl_version" => &[],
                "rl_token" | "rl_take" | "rl_reserve" => &["token"],
                "rl_fixed" => &["fixed"],
                "rl_slidecount" => &["counter"],
                "rl_slide" => &["slide"],
                "rl_acquire" | "rl_release" | "rl_renew" => &["leases"],
                // Each takes a kind (or reads a key) of any kind: the registry.
                "rl_all" | "rl_refund" | "rl_inspect" | "rl_hold" | "rl_settle" => &kinds,
                other => panic!("{other}: which kinds does its script hold?"),
            };
            assert_eq!(held, want, "{function}'s script");
        }
        let version = script_of(library, VERSION_FUNCTION);
        for absent in [
            "token_core",
            "token_paths",
            "local KINDS",
            "local D =",
            "local S =",
            "local function decide_one",
        ] {
            assert!(!version.contains(absent), "rl_version's script holds {absent}");
        }
        let token = script_of(library, "rl_token");
        for absent in ["local Log", "log_parse", "lease_us", "window_paths", "counter_roll", "C.rl_fixed"] {
            assert!(!token.contains(absent), "rl_token's script holds {absent}");
        }
    }
}

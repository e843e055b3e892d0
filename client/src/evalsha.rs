//! Each library function's EVALSHA script (Redis 6.2, users allowed `EVALSHA` but not `FUNCTION`),
//! written from the one library (`lua/ratelimit.lua`) and the scripts' end (`lua/src/evalsha.lua`).
//!
//! A script runs its whole top level on every call, so it holds only what its function reaches: the
//! library's top-level parts (each `local` statement at the first column, with the comments above it)
//! that the script's end names, and what those name in turn, in the library's order; the parts only the
//! general path (`build`) reaches come after the fast path's early return, so that a call the fast path
//! decides creates none of their closures. Comment lines and blank lines are left out. The scripts are
//! shipped as files (`lua/scripts/<function>.lua`, copied into each package); a test fails when one is
//! stale.

use std::collections::BTreeSet;

/// The scripts' end, `lua/src/evalsha.lua` (`client/lua/evalsha.lua` links to it).
const END: &str = include_str!("../lua/evalsha.lua");

/// What each script's first line says.
const GENERATED: &str =
    "-- GENERATED from lua/ratelimit.lua and lua/src/evalsha.lua by `cargo run -p contract-gen`: do \
     not edit";

/// Where the library's registration begins: what the scripts hold nothing of.
const REGISTER: &str = "-- REGISTER:";

/// One top-level statement of the library: its lines, the names it declares, the names it uses.
struct Part<'a> {
    lines: Vec<&'a str>,
    declares: Vec<&'a str>,
    uses: BTreeSet<&'a str>,
}

/// The names `code` uses: its identifiers outside comments, but for fields (`a.b`, `a:b`).
fn names_in(code: &str) -> BTreeSet<&str> {
    let mut out = BTreeSet::new();
    for line in code.lines() {
        let line = line.split("--").next().unwrap_or("");
        let bytes = line.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            let c = bytes[i];
            if c.is_ascii_alphabetic() || c == b'_' {
                let start = i;
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                    i += 1;
                }
                let field = start > 0
                    && matches!(bytes[start - 1], b'.' | b':')
                    && !(start > 1 && bytes[start - 2] == b'.');
                if !field {
                    out.insert(&line[start..i]);
                }
            } else if c.is_ascii_digit() {
                // A number's digits and exponent (1e9, 0x1F) are not names.
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'.') {
                    i += 1;
                }
            } else {
                i += 1;
            }
        }
    }
    out
}

/// The names a first line declares: `local function f(`, `local a, b = ...`, `local a, b`.
fn declared(first: &str) -> Vec<&str> {
    let rest = first.strip_prefix("local ").expect("a part begins with `local`");
    if let Some(f) = rest.strip_prefix("function ") {
        return vec![f.split('(').next().unwrap_or("").trim()];
    }
    rest.split('=').next().unwrap_or("").split(',').map(str::trim).collect()
}

/// The library's top level, above its registration, as parts (its first line and header comment left
/// out).
fn parts(library: &str) -> Vec<Part<'_>> {
    let mut parts: Vec<Part> = Vec::new();
    let mut in_block_comment = false;
    for line in library.lines().skip(1).take_while(|l| !l.starts_with(REGISTER)) {
        if in_block_comment || line.starts_with("--[[") {
            in_block_comment = !line.contains("]]");
            continue;
        }
        if line.starts_with("local ") {
            parts.push(Part { lines: vec![], declares: declared(line), uses: BTreeSet::new() });
        }
        if let Some(part) = parts.last_mut() {
            part.lines.push(line);
        }
    }
    for part in &mut parts {
        part.uses = part.lines.iter().flat_map(|line| names_in(line)).collect();
    }
    parts
}

/// The parts `code` reaches (what it names, and what those name), as a set of indexes.
fn reached(parts: &[Part], code: &str) -> BTreeSet<usize> {
    let mut out = BTreeSet::new();
    let mut names: Vec<&str> = names_in(code).into_iter().collect();
    while let Some(name) = names.pop() {
        for (i, part) in parts.iter().enumerate() {
            if part.declares.contains(&name) && out.insert(i) {
                names.extend(part.uses.iter().copied());
            }
        }
    }
    out
}

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

/// The EVALSHA script of `function` in `library` (a source as `FUNCTION LOAD` takes it).
pub fn script_of(library: &str, function: &str) -> String {
    let paths = fast_paths(library).into_iter().find(|(f, _)| *f == function).map(|(_, b)| b);
    let parts = parts(library);
    // The end's lines, the leading comments left out, the fast block kept or dropped.
    let mut lines: Vec<String> = Vec::new();
    let mut in_fast = false;
    for line in END.lines().skip_while(|l| l.starts_with("--")) {
        match line {
            "--@ fast" => in_fast = true,
            "--@ end" => in_fast = false,
            _ if in_fast && paths.is_none() => {}
            _ => lines.push(line.replace("FUNCTION", function).replace("PATHS", paths.unwrap_or("PATHS"))),
        }
    }
    let at = |marker: &str| lines.iter().position(|l| l == marker).expect("lua/src/evalsha.lua's markers");
    let (parts_at, build_at) = (at("--@ parts"), at("--@ build"));
    let head = reached(&parts, &lines[parts_at + 1..build_at].join("\n"));
    let build = reached(&parts, "build");
    let write = |out: &mut String, which: &mut dyn Iterator<Item = &usize>| {
        for &i in which {
            for line in &parts[i].lines {
                if !line.trim().is_empty() && !line.trim_start().starts_with("--") {
                    *out += line;
                    *out += "\n";
                }
            }
        }
    };
    let mut out = format!("{GENERATED}\n");
    for (i, line) in lines.iter().enumerate() {
        if i == parts_at {
            write(&mut out, &mut head.iter());
        } else if i == build_at {
            write(&mut out, &mut build.difference(&head));
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

    #[test]
    fn names_are_identifiers_outside_comments_and_fields() {
        let names: Vec<&str> =
            names_in("local x = a.b + c:d(e) .. f -- g\nreturn h..i, 1e9, 0x1F").into_iter().collect();
        assert_eq!(names, ["a", "c", "e", "f", "h", "i", "local", "return", "x"]);
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
    }
}

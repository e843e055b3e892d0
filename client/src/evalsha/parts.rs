//! The library's parts and what reaches what: the analysis that keeps in each EVALSHA script only what
//! its function reaches (`evalsha.rs` writes the scripts from it).
//!
//! A part is one statement of the library's top level (above its registration), or of the body of a
//! builder the script calls (`build`, whose body defines the library's modules, and the fast paths'
//! builder): a statement starts at its level's column where every bracket and block of the one before is
//! closed. Each part
//! - declares names: `local a, b`, `local function f`, `a = ...` (a plain name), or `function T.f`,
//!   `T.f = ...` (a field of a table);
//! - uses names: every name its tokens mention (comments and strings hold none), but a field after
//!   `.` or `:` and a table constructor's key: `T.f` or `T:f` uses the field `T.f` (and `T`), any
//!   other mention of `T` (`T[k]`, `pairs(T)`, `x = T`) uses the whole of `T`;
//! - may pass a name, as a value, to a call it makes while it defines (outside any function body:
//!   `count_command(fixed, ...)`, `setmetatable(T, ...)`, `T:m()`), which may change what the name holds.
//!
//! Reached, from the script's own lines: a part that declares a reached name (a field is reached by its
//! own use or its table's whole use), that passes a reached name, or that declares nothing (a loop, a
//! call, a `return`: kept wherever its function is), or that calls the server while it defines. What a
//! reached part uses is reached in turn. A table is reached field by field only where that is safe:
//! declared once as `local T = {}` and without `:` methods (`self` would alias it); any other table
//! (a kind built by a call, which may call its own fields through a parameter) is reached whole.
//!
//! The script's entry (`Entry`) calls one function of what each builder returns, `X().FUNCTION`: of a
//! builder's `return { name = value, ... }`, only FUNCTION's value is used; where a builder returns a
//! table made from another's every field (build: each of C's commands wrapped), the end's `--@ only
//! C.FUNCTION` says which field of that table is reached. The builders are called by the end only.
//!
//! Assumed of the library, and held by the tests that run every script beside the library: the top
//! level and the builders' bodies only define (a statement's effect is the value it declares), and
//! nothing reaches a definition but by its name (no `_G`, no `loadstring`). A name is matched by its
//! spelling, whatever local it resolves to: a local of the same name elsewhere keeps more, never less.

use super::tokens::{tokens, Kind, Token};
use std::collections::{BTreeSet, HashSet};
use std::ops::Range;

/// A name as a part declares or uses it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Name<'a> {
    Plain(&'a str),
    /// A field of a table: `B.add`, `C.rl_token`.
    Field(&'a str, &'a str),
}

/// What a script calls: `function` of what each builder returns, and of the table `only` names, the
/// one field (`--@ only C.FUNCTION`).
pub struct Entry<'a> {
    pub function: &'a str,
    pub only: Option<(&'a str, &'a str)>,
}

struct Part<'a> {
    /// Its first and last lines (0-based).
    lines: Range<usize>,
    /// The builder whose body it is a statement of.
    parent: Option<usize>,
    /// For a builder: the last line of its head and the line of its closing `end`.
    split: Option<(usize, usize)>,
    /// A builder's `return { name = value, ... }`: its names and values (its uses: the entry's only).
    returns: Vec<(&'a str, &'a str)>,
    declares: Vec<Name<'a>>,
    uses: Vec<Name<'a>>,
    passes: Vec<&'a str>,
    /// Kept wherever its function is: it declares nothing, or it calls the server while it defines.
    root: bool,
}

/// The library's parts, in its order.
pub struct Library<'a> {
    text: &'a str,
    parts: Vec<Part<'a>>,
    /// The lines holding code (not only comments or blanks).
    code: HashSet<usize>,
    /// The tables reached field by field.
    granular: HashSet<&'a str>,
}

/// A token's change to the nesting of blocks and brackets.
fn depth(t: &Token) -> i32 {
    match (t.kind, t.text) {
        (Kind::Keyword, "function" | "do" | "if" | "repeat") | (Kind::Punct, "(" | "{" | "[") => 1,
        (Kind::Keyword, "end" | "until") | (Kind::Punct, ")" | "}" | "]") => -1,
        _ => 0,
    }
}

/// Whether a line whose first token is `t`, after `prev`, starts a statement (rather than carrying on
/// an expression).
fn starts_statement(prev: Option<&Token>, t: &Token) -> bool {
    use Kind::Keyword;
    let carries_on = prev.is_some_and(|p| {
        (p.kind == Kind::Punct && !matches!(p.text, ")" | "}" | "]"))
            || (p.kind == Keyword && matches!(p.text, "and" | "or" | "not" | "local" | "return" | "in"))
    });
    !carries_on
        && (t.kind == Kind::Name
            || (t.kind == Keyword
                && matches!(
                    t.text,
                    "local" | "function" | "return" | "for" | "if" | "while" | "do" | "repeat" | "break"
                )))
}

/// The statements of a block (its tokens), each starting at column `col`.
fn statements(toks: &[Token], col: usize) -> Result<Vec<Range<usize>>, String> {
    let mut out = Vec::new();
    let (mut level, mut start) = (0, None);
    for (i, t) in toks.iter().enumerate() {
        let prev = i.checked_sub(1).map(|j| &toks[j]);
        let first_on_line = prev.is_none_or(|p| p.end_line != t.line);
        if level == 0 && first_on_line && t.col == col && starts_statement(prev, t) {
            out.extend(start.map(|s| s..i));
            start = Some(i);
        } else if start.is_none() {
            return Err(format!("line {}: `{}` starts no statement", t.line + 1, t.text));
        }
        level += depth(t);
        if level < 0 {
            return Err(format!("line {}: `{}` closes what is not open", t.line + 1, t.text));
        }
    }
    if level != 0 {
        return Err("a block or bracket is left open".into());
    }
    out.extend(start.map(|s| s..toks.len()));
    Ok(out)
}

/// What a statement declares, and how many of its first tokens declare (and so are no use).
fn declarations<'a>(t: &[Token<'a>]) -> (Vec<Name<'a>>, usize) {
    let name = |i: usize| t.get(i).filter(|t| t.kind == Kind::Name).map(|t| t.text);
    let punct = |i: usize, p: &str| t.get(i).is_some_and(|t| t.kind == Kind::Punct && t.text == p);
    if t[0].is("local") {
        if t.get(1).is_some_and(|t| t.is("function")) {
            return (name(2).map(Name::Plain).into_iter().collect(), 3);
        }
        let mut names = Vec::new();
        let mut i = 1;
        while let Some(n) = name(i) {
            names.push(Name::Plain(n));
            if !punct(i + 1, ",") {
                break;
            }
            i += 2;
        }
        return (names, i + 1);
    }
    if t[0].is("function") {
        return match (name(1), name(3)) {
            (Some(n), _) if punct(2, "(") => (vec![Name::Plain(n)], 2),
            (Some(n), Some(f)) if punct(2, ".") || punct(2, ":") => (vec![Name::Field(n, f)], 0),
            _ => (vec![], 0),
        };
    }
    // `a, T.f, U.g.h = ...`: each target a plain name or a table's field; anything else declares nothing.
    let mut targets = Vec::new();
    let mut i = 0;
    while let Some(n) = name(i) {
        let field = if punct(i + 1, ".") { name(i + 2) } else { None };
        targets.push(field.map_or(Name::Plain(n), |f| Name::Field(n, f)));
        i += 1;
        while punct(i, ".") && name(i + 1).is_some() {
            i += 2;
        }
        if punct(i, "=") {
            return (targets, 0);
        }
        if !punct(i, ",") {
            break;
        }
        i += 1;
    }
    (vec![], 0)
}

/// A bracket or block open in a statement.
#[derive(Clone, Copy, PartialEq)]
enum Open {
    Function,
    Block,
    Call,
    Paren,
    Brace,
    Bracket,
}

/// What tokens use, what they pass to a call while defining, and whether they call the server then
/// (the first `skip` tokens declare, and are no use).
struct Scan<'a> {
    uses: Vec<Name<'a>>,
    passes: Vec<&'a str>,
    calls_server: bool,
}

fn scan<'a>(t: &[Token<'a>], skip: usize) -> Scan<'a> {
    let mut out = Scan { uses: Vec::new(), passes: Vec::new(), calls_server: false };
    let mut open: Vec<Open> = Vec::new();
    let mut params = false;
    let punct = |i: Option<usize>, p: &str| {
        i.and_then(|i| t.get(i)).is_some_and(|t| t.kind == Kind::Punct && t.text == p)
    };
    for (i, tok) in t.iter().enumerate() {
        let prev = i.checked_sub(1);
        match (tok.kind, tok.text) {
            (Kind::Keyword, "function") => {
                open.push(Open::Function);
                params = true;
            }
            (Kind::Keyword, "do" | "if" | "repeat") => open.push(Open::Block),
            (Kind::Keyword, "end" | "until") | (Kind::Punct, ")" | "}" | "]") => {
                open.pop();
            }
            (Kind::Punct, "(") => {
                let callee = prev.map(|p| &t[p]).is_some_and(|p| {
                    p.kind == Kind::Name
                        || p.is(")")
                        || p.is("]")
                        || p.kind == Kind::Literal && !p.text.starts_with(|c: char| c.is_ascii_digit())
                });
                open.push(if callee && !params { Open::Call } else { Open::Paren });
                params = false;
            }
            (Kind::Punct, "{") => open.push(Open::Brace),
            (Kind::Punct, "[") => open.push(Open::Bracket),
            (Kind::Name, name) if i >= skip => {
                if punct(prev, ".") || punct(prev, ":") {
                    continue; // a field's name
                }
                let key = open.last() == Some(&Open::Brace)
                    && (punct(prev, "{") || punct(prev, ",") || punct(prev, ";"))
                    && punct(Some(i + 1), "=");
                if key {
                    continue;
                }
                let field = (punct(Some(i + 1), ".") || punct(Some(i + 1), ":"))
                    .then(|| t.get(i + 2).filter(|f| f.kind == Kind::Name))
                    .flatten();
                out.uses.push(field.map_or(Name::Plain(name), |f| Name::Field(name, f.text)));
                if !open.contains(&Open::Function) {
                    out.calls_server |= name == "redis";
                    let next = t.get(i + 1);
                    let called = next.is_some_and(|n| n.is("(") || n.is("{") || n.kind == Kind::Literal);
                    let passed = field.is_none() && !called && open.contains(&Open::Call);
                    if passed || punct(Some(i + 1), ":") {
                        out.passes.push(name);
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// A `return { name = value, ... }` statement's names and values (each value a name); none for any
/// other.
fn returned<'a>(t: &[Token<'a>]) -> Vec<(&'a str, &'a str)> {
    let inner = match t {
        [ret, open, inner @ .., close] if ret.is("return") && open.is("{") && close.is("}") => inner,
        _ => return vec![],
    };
    let mut out = Vec::new();
    for entry in inner.split(|t| t.is(",")).filter(|e| !e.is_empty()) {
        match entry {
            [name, eq, value] if name.kind == Kind::Name && eq.is("=") && value.kind == Kind::Name => {
                out.push((name.text, value.text))
            }
            _ => return vec![],
        }
    }
    out
}

/// The names some code uses (a script's own lines).
pub fn uses(code: &str) -> Result<Vec<Name<'_>>, String> {
    Ok(scan(&tokens(code)?, 0).uses)
}

impl<'a> Library<'a> {
    /// The parts of `text` above the line starting `end` (the registration), the bodies of the
    /// top-level builders `local function <split>()` split in parts too.
    pub fn parse(text: &'a str, end: &str, split: &[&str]) -> Result<Library<'a>, String> {
        let above = text.find(&format!("\n{end}")).map_or(text, |at| &text[..at + 1]);
        let toks = tokens(above)?;
        let code = toks.iter().flat_map(|t| t.line..=t.end_line).collect();
        let mut parts = Vec::new();
        for range in statements(&toks, 0)? {
            let t = &toks[range];
            let is_split = t.len() > 5
                && t[0].is("local")
                && t[1].is("function")
                && split.iter().any(|s| t[2].is(s))
                && t[3].is("(")
                && t[4].is(")");
            if !is_split {
                parts.push(Library::part(t, None));
                continue;
            }
            let (body, close) = (&t[5..t.len() - 1], &t[t.len() - 1]);
            if !close.is("end") {
                return Err(format!("line {}: {} does not end with `end`", close.line + 1, t[2].text));
            }
            let at = parts.len();
            let mut whole = Library::part(&t[..5], None);
            whole.lines.end = close.line + 1;
            whole.split = Some((t[4].line, close.line));
            parts.push(whole);
            let col = body.first().map_or(0, |t| t.col);
            for inner in statements(body, col)? {
                let mut part = Library::part(&body[inner.clone()], Some(at));
                part.returns = returned(&body[inner]);
                if !part.returns.is_empty() {
                    part.uses.clear();
                }
                parts.push(part);
            }
        }
        let declared_once = |name: &str| {
            parts.iter().flat_map(|p: &Part| &p.declares).filter(|d| **d == Name::Plain(name)).count() == 1
        };
        let methods: HashSet<&str> =
            toks.windows(3).filter(|w| w[0].is("function") && w[2].is(":")).map(|w| w[1].text).collect();
        let granular = toks
            .windows(5)
            .filter(|w| w[0].is("local") && w[2].is("=") && w[3].is("{") && w[4].is("}"))
            .map(|w| w[1].text)
            .filter(|t| !methods.contains(t) && declared_once(t))
            .collect();
        Ok(Library { text, parts, code, granular })
    }

    fn part(t: &[Token<'a>], parent: Option<usize>) -> Part<'a> {
        let (declares, skip) = declarations(t);
        let scan = scan(t, skip);
        let last = t.last().map_or(t[0].line, |l| l.end_line);
        Part {
            lines: t[0].line..last + 1,
            parent,
            split: None,
            returns: Vec::new(),
            root: declares.is_empty() || scan.calls_server,
            declares,
            uses: scan.uses,
            passes: scan.passes,
        }
    }

    /// The parts that `roots` reach, for the script's `entry`.
    pub fn reach(&self, roots: &[Name<'a>], entry: &Entry<'a>) -> BTreeSet<usize> {
        let only = entry.only;
        let mut r = Reached { plain: HashSet::new(), whole: HashSet::new(), fields: HashSet::new() };
        let add = |r: &mut Reached<'a>, name: Name<'a>| match name {
            Name::Plain(n) => {
                r.plain.insert(n);
                if only.is_none_or(|(t, _)| t != n) {
                    r.whole.insert(n);
                }
            }
            Name::Field(t, f) => {
                r.plain.insert(t);
                if self.granular.contains(t) || only.is_some_and(|(o, _)| o == t) {
                    r.fields.insert((t, f));
                } else {
                    r.whole.insert(t);
                }
            }
        };
        for &name in roots.iter().chain(only.map(|(t, f)| Name::Field(t, f)).as_ref()) {
            add(&mut r, name);
        }
        let mut kept = BTreeSet::new();
        loop {
            let before = kept.len();
            for (i, p) in self.parts.iter().enumerate() {
                if kept.contains(&i) || p.parent.is_some_and(|q| !kept.contains(&q)) {
                    continue;
                }
                let declared = p.declares.iter().any(|d| match *d {
                    Name::Plain(n) => r.plain.contains(n),
                    Name::Field(t, f) => r.whole.contains(t) || r.fields.contains(&(t, f)),
                });
                if p.root || declared || p.passes.iter().any(|n| r.plain.contains(n)) {
                    kept.insert(i);
                    for &u in &p.uses {
                        add(&mut r, u);
                    }
                    // A builder's returned table: the entry's value (every value, if none is its).
                    let named =
                        |all: bool| p.returns.iter().filter(move |(n, _)| all || *n == entry.function);
                    let all = named(false).next().is_none();
                    for &(_, value) in named(all) {
                        add(&mut r, Name::Plain(value));
                    }
                }
            }
            if kept.len() == before {
                return kept;
            }
        }
    }

    /// The first line of each part that what is kept wherever its function is (the text's own
    /// statements that declare nothing) does not reach: what a script holds and never runs.
    #[cfg(test)]
    pub fn unreached(&self, entry: &Entry<'a>) -> Vec<&'a str> {
        let kept = self.reach(&[], entry);
        let lines: Vec<&str> = self.text.lines().collect();
        (0..self.parts.len())
            .filter(|i| !kept.contains(i))
            .map(|i| lines[self.parts[i].lines.start])
            .collect()
    }

    /// The code lines of the parts in `which` (a builder's: its head, its parts in `which` and its
    /// `end`), in the library's order; comments above them and blank lines left out. A builder's
    /// `return { name = value, ... }` is written with the entry's name and value only (another's value
    /// may not be there).
    pub fn write(&self, which: &BTreeSet<usize>, entry: &Entry, out: &mut String) {
        let lines: Vec<&str> = self.text.lines().collect();
        let write_line = |out: &mut String, line: &str| {
            *out += line;
            *out += "\n";
        };
        let write = |out: &mut String, range: Range<usize>| {
            for i in range.filter(|i| self.code.contains(i)) {
                write_line(out, lines[i]);
            }
        };
        for (i, p) in self.parts.iter().enumerate() {
            if !which.contains(&i) || p.parent.is_some() {
                continue;
            }
            let Some((head, close)) = p.split else {
                write(out, p.lines.clone());
                continue;
            };
            write(out, p.lines.start..head + 1);
            for (j, inner) in self.parts.iter().enumerate().skip(i + 1) {
                if inner.parent != Some(i) || !which.contains(&j) {
                    continue;
                }
                match inner.returns.iter().find(|(name, _)| *name == entry.function) {
                    Some((name, value)) => {
                        let line = lines[inner.lines.start];
                        let indent = &line[..line.len() - line.trim_start().len()];
                        write_line(out, &format!("{indent}return {{ {name} = {value} }}"));
                    }
                    None => write(out, inner.lines.clone()),
                }
            }
            write(out, close..close + 1);
        }
    }
}

struct Reached<'a> {
    /// Names whose plain declarations are reached.
    plain: HashSet<&'a str>,
    /// Tables every field of which is reached.
    whole: HashSet<&'a str>,
    fields: HashSet<(&'a str, &'a str)>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use Name::*;

    #[test]
    fn uses_are_names_outside_comments_strings_fields_and_keys() {
        let code = "local x = a.b + c:d(e) .. f -- g\nreturn { h = i, [j] = k }, 'l', m[n].o, 1e9";
        let want = [Plain("x"), Field("a", "b"), Field("c", "d"), Plain("e"), Plain("f"), Plain("i")];
        let want = want.into_iter().chain([Plain("j"), Plain("k"), Plain("m"), Plain("n")]);
        assert_eq!(uses(code).unwrap(), want.collect::<Vec<_>>());
    }

    const LIBRARY: &str = "#!lua name=t
-- local function in_a_comment() end
local floor
local function helper() return 1 end
local function unused() return helper() end
local function build()
  local T = {}
  function T.a() return helper() end
  function T.b() return T.a() end
  -- T.c names T.b only in a string
  function T.c() return \"T.b\" end
  local K = make({ T = 1 })
  function K.x() return floor end
  local KINDS = { K }
  local C = {}
  function C.one() return T.b() end
  function C.two() return K.x() + #KINDS end
  C.three = wrap(K)
  local F = {}
  for n, f in pairs(C) do F[n] = f end
  return F
end
local function paths()
  local function one_fast() return helper() end
  local function two_fast() return floor end
  return { one = one_fast, two = two_fast }
end
-- REGISTER: not a part
print(1)
";

    fn script(only: &'static str) -> String {
        let library = Library::parse(LIBRARY, "-- REGISTER:", &["build", "paths"]).unwrap();
        let mut out = String::new();
        let entry = Entry { function: only, only: Some(("C", only)) };
        library.write(&library.reach(&[Plain("build"), Plain("paths")], &entry), &entry, &mut out);
        out
    }

    #[test]
    fn a_part_is_kept_when_it_declares_passes_or_does_what_is_reached() {
        assert_eq!(
            script("one"),
            "local function helper() return 1 end\nlocal function build()\n  local T = {}\n  \
             function T.a() return helper() end\n  function T.b() return T.a() end\n  local C = {}\n  \
             function C.one() return T.b() end\n  local F = {}\n  \
             for n, f in pairs(C) do F[n] = f end\n  return F\nend\nlocal function paths()\n  \
             local function one_fast() return helper() end\n  return { one = one_fast }\nend\n"
        );
        // K is built by a call (make may keep it and call its fields): reached whole, and so is the
        // statement that hands it to wrap.
        let two = script("two");
        assert!(two.contains("local floor\n") && two.contains("  local K = make({ T = 1 })\n"));
        assert!(two.contains("  local KINDS = { K }\n") && two.contains("  C.three = wrap(K)\n"));
        assert!(!two.contains("T.") && !two.contains("helper") && !two.contains("C.one"));
        assert!(two.contains("  local function two_fast() return floor end\n"));
    }

    #[test]
    fn a_statement_starts_where_the_one_before_is_closed() {
        let t = tokens("local a = f(\n1)\nlocal b = {\n}\nlocal c =\n  2\nx = a\n  .. b").unwrap();
        let starts: Vec<usize> = statements(&t, 0).unwrap().iter().map(|r| t[r.start].line).collect();
        assert_eq!(starts, [0, 2, 4, 6]);
        assert!(statements(&tokens("local a = (\nb").unwrap(), 0).is_err());
        assert!(statements(&tokens("end").unwrap(), 0).is_err());
    }
}

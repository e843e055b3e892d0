//! The arrows between the files of core, the module, the client and the service point one way: no file reaches itself
//! through `crate::` and `super::` paths (re-exports of a `mod.rs` are followed to the file that
//! defines the item). A cycle fails with the files on it. Pure: reads the sources, needs no server.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A crate's module files: module path (`server::command`) to its source.
fn modules(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel: PathBuf = path.strip_prefix(root).unwrap().with_extension("");
            let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
            if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
                parts.pop();
            }
            out.insert(parts.join("::"), std::fs::read_to_string(&path).unwrap());
        }
    }
    out
}

/// The source without comments and string literals (paths in them are not uses).
fn code(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    for line in source.lines() {
        let line = match line.find("//") {
            Some(at) if !line[..at].contains('"') => &line[..at],
            _ => line,
        };
        let mut in_string = false;
        for c in line.chars() {
            if c == '"' {
                in_string = !in_string;
            } else if !in_string {
                out.push(c);
            }
        }
        out.push('\n');
    }
    // `#[cfg(test)] mod tests` may use anything of its file's siblings: test code is not an arrow.
    match out.find("#[cfg(test)]\nmod tests") {
        Some(at) => out[..at].to_string(),
        None => out,
    }
}

/// Every path starting `crate::`, `super::` or `self::`, with `use` groups (`a::{b, c::d}`) expanded.
fn paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut i = 0;
    while i < bytes.len() {
        let starts = ["crate::", "super::", "self::"].iter().find(|p| code[i..].starts_with(**p));
        let boundary = i == 0 || !ident(bytes[i - 1]) && bytes[i - 1] != b':';
        let Some(prefix) = starts.filter(|_| boundary) else {
            i += 1;
            continue;
        };
        let start = i;
        i += prefix.len();
        // One path, possibly ending in a `{...}` group.
        while i < bytes.len() && (ident(bytes[i]) || code[i..].starts_with("::")) {
            i += if bytes[i] == b':' { 2 } else { 1 };
        }
        let base = code[start..i].trim_end_matches("::").to_string();
        if code[i..].starts_with('{') {
            let mut depth = 0;
            let mut end = i;
            for (j, c) in code[i..].char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = i + j;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            let inner = &code[i + 1..end];
            for item in split_top(inner) {
                let item = item.trim();
                let name = item.split([' ', '{']).next().unwrap_or("").trim_end_matches("::");
                if !name.is_empty() && name != "self" {
                    out.push(split(&format!("{base}::{name}")));
                } else {
                    out.push(split(&base));
                }
            }
            i = end + 1;
        } else {
            out.push(split(&base));
        }
    }
    out
}

fn split_top(inner: &str) -> Vec<&str> {
    let (mut depth, mut from, mut out) = (0, 0, Vec::new());
    for (j, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&inner[from..j]);
                from = j + 1;
            }
            _ => {}
        }
    }
    out.push(&inner[from..]);
    out
}

fn split(path: &str) -> Vec<String> {
    path.split("::").map(str::to_string).collect()
}

/// The names a `mod.rs` re-exports (`pub use sub::{A, B}`), to the module that defines them.
fn reexports(module: &str, source: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for statement in code(source).split(';') {
        let Some(rest) = statement.trim().strip_prefix("pub use ") else { continue };
        if rest.starts_with("crate::") || rest.starts_with("super::") {
            continue;
        }
        let (sub, names) = match rest.split_once("::{") {
            Some((sub, names)) => (sub, names.trim_end_matches('}').to_string()),
            None => match rest.rsplit_once("::") {
                Some((sub, name)) => (sub, name.to_string()),
                None => continue,
            },
        };
        for name in names.split(',') {
            let name = name.split(" as ").last().unwrap_or("").trim();
            if !name.is_empty() {
                let target = if module.is_empty() { sub.to_string() } else { format!("{module}::{sub}") };
                out.insert(name.to_string(), target);
            }
        }
    }
    out
}

/// The module a path in `from` reaches: the longest module prefix, through re-exports.
fn resolve(
    from: &str,
    path: &[String],
    modules: &BTreeMap<String, String>,
    exports: &BTreeMap<String, BTreeMap<String, String>>,
) -> Option<String> {
    let mut at: Vec<String> = match path.first()?.as_str() {
        "crate" => Vec::new(),
        "self" => split(from).into_iter().filter(|s| !s.is_empty()).collect(),
        "super" => {
            let mut m: Vec<String> = split(from).into_iter().filter(|s| !s.is_empty()).collect();
            let mut rest = path;
            while rest.first().is_some_and(|s| s == "super") {
                m.pop();
                rest = &rest[1..];
            }
            return resolve_from(m, rest, modules, exports);
        }
        _ => return None,
    };
    at.retain(|s| !s.is_empty());
    resolve_from(at, &path[1..], modules, exports)
}

fn resolve_from(
    mut at: Vec<String>,
    rest: &[String],
    modules: &BTreeMap<String, String>,
    exports: &BTreeMap<String, BTreeMap<String, String>>,
) -> Option<String> {
    for segment in rest {
        let mut next = at.clone();
        next.push(segment.clone());
        if modules.contains_key(&next.join("::")) {
            at = next;
            continue;
        }
        if let Some(target) = exports.get(&at.join("::")).and_then(|e| e.get(segment)) {
            return Some(target.clone());
        }
        break;
    }
    Some(at.join("::"))
}

/// The arrows between a crate's files, and the first cycle among them.
fn cycle(root: &Path) -> Option<Vec<String>> {
    let modules = modules(root);
    let exports: BTreeMap<String, BTreeMap<String, String>> =
        modules.iter().map(|(m, s)| (m.clone(), reexports(m, s))).collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, source) in &modules {
        let code = code(source);
        // A module re-exporting its own files (`pub use child::X`) is their facade, not an arrow; a
        // re-export of another module (`pub use crate::other::X`) is an arrow like any `use`.
        let facade = |s: &str| {
            let s = s.trim();
            s.starts_with("pub use ")
                && !s.starts_with("pub use crate::")
                && !s.starts_with("pub use super::")
        };
        let code: String = code.split(';').filter(|s| !facade(s)).collect::<Vec<_>>().join(";");
        for path in paths(&code) {
            if let Some(target) = resolve(module, &path, &modules, &exports) {
                // The crate root and a file's own ancestors (their `mod` lines) are not arrows.
                let ancestor = module.starts_with(&format!("{target}::")) || target.is_empty();
                if target != *module && !ancestor {
                    edges.entry(module.clone()).or_default().insert(target);
                }
            }
        }
    }
    find_cycle(&edges)
}

fn find_cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = stack.iter().position(|n| n == node) {
            let mut cycle = stack[at..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        stack.push(node.to_string());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, edges, stack, done) {
                return Some(cycle);
            }
        }
        stack.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    edges.keys().find_map(|node| visit(node, edges, &mut Vec::new(), &mut done))
}

#[test]
fn core_the_module_the_client_the_service_and_the_generator_have_no_import_cycles() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for dir in ["core/src", "src", "client/src", "rls/src", "contract-gen/src"] {
        if let Some(cycle) = cycle(&root.join(dir)) {
            panic!("an import cycle in {dir}/: {}", cycle.join(" -> "));
        }
    }
}

#[test]
fn a_cycle_is_found_through_groups_supers_and_reexports() {
    let dir = std::env::temp_dir().join(format!("rl-imports-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("server")).unwrap();
    std::fs::write(dir.join("lib.rs"), "mod server;\nmod stats;\n").unwrap();
    std::fs::write(dir.join("server/mod.rs"), "pub mod a;\npub mod b;\npub use a::{Alpha, Other};\n")
        .unwrap();
    std::fs::write(dir.join("server/a.rs"), "use super::b::Beta; // crate::stats in a comment\n").unwrap();
    std::fs::write(dir.join("server/b.rs"), "use crate::{stats::S, server::Alpha};\n").unwrap();
    std::fs::write(dir.join("stats.rs"), "fn f() { let s = \"crate::server::a\"; }\n").unwrap();
    let found = cycle(&dir);
    assert_eq!(found, Some(vec!["server::a".into(), "server::b".into(), "server::a".into()]));
    std::fs::write(dir.join("server/b.rs"), "use crate::stats::S;\n").unwrap();
    assert_eq!(cycle(&dir), None);
    // A re-export of another module is an arrow.
    std::fs::write(dir.join("server/b.rs"), "pub use crate::server::a::Alpha;\n").unwrap();
    assert_eq!(cycle(&dir), Some(vec!["server::a".into(), "server::b".into(), "server::a".into()]));
    std::fs::remove_dir_all(&dir).unwrap();
}

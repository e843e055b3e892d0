//! The pages link to each other without dead ends: every relative link of README.md, docs/*.md and the
//! repository's other Markdown pages names a file that exists, and a `#anchor` names a heading of the
//! page it points to (GitHub's slug of it). Reads files only: no server.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// Every Markdown page of the repository, outside build output and hidden folders.
fn pages(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if !name.starts_with('.') && name != "target" && name != "node_modules" {
                pages(&path, out);
            }
        } else if name.ends_with(".md") {
            out.push(path);
        }
    }
}

/// The page's lines outside fenced code blocks.
fn prose(text: &str) -> Vec<&str> {
    let mut fenced = false;
    let mut lines = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            lines.push(line);
        }
    }
    lines
}

/// The line without its inline code spans (a span of n backticks ends at the next run of exactly n).
fn without_code(line: &str) -> String {
    let (bytes, mut out, mut i) = (line.as_bytes(), String::new(), 0);
    while i < bytes.len() {
        if bytes[i] != b'`' {
            let next = line[i..].find('`').map_or(line.len(), |n| i + n);
            out.push_str(&line[i..next]);
            i = next;
            continue;
        }
        let run = bytes[i..].iter().take_while(|&&b| b == b'`').count();
        let mut j = i + run;
        let mut end = None;
        while j < bytes.len() {
            if bytes[j] == b'`' {
                let other = bytes[j..].iter().take_while(|&&b| b == b'`').count();
                if other == run {
                    end = Some(j + other);
                    break;
                }
                j += other;
            } else {
                j += 1;
            }
        }
        match end {
            Some(e) => i = e,
            None => {
                out.push_str(&line[i..i + run]); // an unmatched run is literal text
                i += run;
            }
        }
    }
    out
}

/// The targets of the line's inline links and images, `[text](target)` and `![alt](target)`.
fn link_targets(line: &str) -> Vec<String> {
    let text = without_code(line);
    let mut targets = Vec::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let Some(close) = after.find(')') else { break };
        // A title after the target (`(page.md "title")`) is not part of it.
        let target = after[..close].split_whitespace().next().unwrap_or("").to_string();
        targets.push(target);
        rest = &after[close..];
    }
    targets
}

/// GitHub's anchor for a heading: lowercase; letters, digits, `_`, `-` and spaces kept, spaces as
/// hyphens, everything else dropped; a link's text stands for the link.
fn slug(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading;
    while let Some(open) = rest.find('[') {
        match rest[open..].find("](").and_then(|m| rest[open + m..].find(')').map(|c| (m, open + m + c))) {
            Some((m, close)) => {
                text.push_str(&rest[..open]);
                text.push_str(&rest[open + 1..open + m]);
                rest = &rest[close + 1..];
            }
            None => break,
        }
    }
    text.push_str(rest);
    text.to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a page's headings, with GitHub's `-1`, `-2` suffixes for repeated ones.
fn anchors(text: &str) -> HashSet<String> {
    let mut seen = HashSet::new();
    for line in prose(text) {
        let hashes = line.bytes().take_while(|&b| b == b'#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(line[hashes..].trim().trim_end_matches('#').trim());
        let mut anchor = base.clone();
        let mut n = 0;
        while seen.contains(&anchor) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        seen.insert(anchor);
    }
    seen
}

/// What is wrong with each relative link of the page, as "page: target: why".
fn dead_links(root: &Path, page: &Path) -> (usize, Vec<String>) {
    let text = std::fs::read_to_string(page).unwrap();
    let name = page.strip_prefix(root).unwrap().display().to_string();
    let (mut checked, mut dead) = (0, Vec::new());
    for line in prose(&text) {
        for target in link_targets(line) {
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (file, anchor) = match target.split_once('#') {
                Some((file, anchor)) => (file, Some(anchor)),
                None => (target.as_str(), None),
            };
            let linked = if file.is_empty() { page.to_path_buf() } else { page.parent().unwrap().join(file) };
            if !linked.exists() {
                dead.push(format!("{name}: {target}: no file {}", linked.display()));
                continue;
            }
            let Some(anchor) = anchor else { continue };
            if linked.extension().is_none_or(|e| e != "md") {
                dead.push(format!("{name}: {target}: an anchor into a file that is not Markdown"));
                continue;
            }
            let headings = anchors(&std::fs::read_to_string(&linked).unwrap());
            if !headings.contains(anchor) {
                let mut known: Vec<_> = headings.into_iter().collect();
                known.sort();
                dead.push(format!(
                    "{name}: {target}: no heading with that anchor (there are: {})",
                    known.join(", ")
                ));
            }
        }
    }
    (checked, dead)
}

#[test]
fn every_relative_link_between_the_pages_resolves() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut all = Vec::new();
    pages(root, &mut all);
    assert!(all.contains(&root.join("README.md")) && all.contains(&root.join("docs/commands.md")));
    let (mut checked, mut dead) = (0, Vec::new());
    for page in &all {
        let (n, d) = dead_links(root, page);
        checked += n;
        dead.extend(d);
    }
    assert!(checked >= 30, "only {checked} relative links found: is the link reader broken?");
    assert!(dead.is_empty(), "{} dead links:\n{}", dead.len(), dead.join("\n"));
}

#[test]
fn the_slug_is_githubs() {
    assert_eq!(
        slug("Migrating from redis-cell, Dragonfly or core GCRA"),
        "migrating-from-redis-cell-dragonfly-or-core-gcra"
    );
    assert_eq!(
        slug("RL.TOKEN key capacity rate cost [key capacity rate cost ...]"),
        "rltoken-key-capacity-rate-cost-key-capacity-rate-cost-"
    );
    assert_eq!(slug("Upgrading: stored formats"), "upgrading-stored-formats");
    assert_eq!(
        slug("The Rust client and HTTP middleware (`client/`, crate `redis-ratelimit-client`)"),
        "the-rust-client-and-http-middleware-client-crate-redis-ratelimit-client"
    );
    assert_eq!(slug("See [the guide](docs/x.md) now"), "see-the-guide-now");
    let repeated = anchors("# A\n## Notes\n```\n# not a heading\n```\n## Notes\n");
    assert!(
        repeated.contains("notes") && repeated.contains("notes-1") && !repeated.contains("not-a-heading")
    );
    assert_eq!(link_targets("see [a](b.md#c), `[x](nope.md)` and ![i](p.png \"t\")"), ["b.md#c", "p.png"]);
}

/// Every limiter kind of core's registry has its row in the README's command table and its section
/// in the commands guide: a kind added to core without its documentation fails here.
#[test]
fn every_limiter_kind_is_documented() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let commands = std::fs::read_to_string(root.join("docs/commands.md")).unwrap();
    for kind in ratelimit_core::kind::LimiterKind::ALL {
        let name = kind.command();
        assert!(
            readme.lines().any(|l| l.starts_with(&format!("| [`{name} "))),
            "README.md's command table has no {name}"
        );
        assert!(
            commands.lines().any(|l| l.starts_with('#') && l.contains(&format!("{name} "))),
            "docs/commands.md has no section for {name}"
        );
    }
}

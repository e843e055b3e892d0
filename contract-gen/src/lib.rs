//! The contract's generator: `contract/contract.json` and the test vectors every client runs
//! (`contract/vectors/*.json`), the Lua library's contract block and its EVALSHA scripts, and the copies
//! a package needs inside itself (the Rust client's and Go's), all written from the reference: core's
//! registry, command table, bounds and error texts, and the Rust client (`redis-ratelimit-client`) for
//! its engines, its fallback and what happens over HTTP. `cargo run -p contract-gen` writes them;
//! `--check` (and this crate's test) fails when a file differs from what the reference writes now (see
//! contract/README.md).

mod lua;
mod spec;
mod vectors;
mod volume;
mod words;

use ratelimit_core::commands::{CommandInfo, VERSION_FUNCTION};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The library's version: the client's, which ships it.
const VERSION: &str = client::lua::VERSION;

/// What every generated file's first line says.
const GENERATED: &str = "GENERATED from the Rust reference by `cargo run -p contract-gen`: do not edit";

/// `value` as the checked-in text: pretty JSON whose first line says it is generated.
fn render(value: &Value) -> String {
    let mut object = serde_json::Map::new();
    object.insert("_generated".into(), GENERATED.into());
    let Value::Object(fields) = value else { panic!("a contract file is an object") };
    object.extend(fields.clone());
    let text = serde_json::to_string_pretty(&Value::Object(object)).expect("JSON");
    // `{ "_generated": ...,` on the first line.
    format!("{{ {}\n", text.strip_prefix("{\n  ").expect("an object"))
}

/// The repository's root, which every generated file's path is relative to.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("contract-gen/ is in the repository").to_path_buf()
}

/// Every generated file and its text now: the library, the contract, the copies the Rust client and
/// the Go package ship, the EVALSHA scripts and the vectors. (The Python and Node.js packages copy
/// theirs from lua/ and contract/ when they are built or packed.)
pub fn files() -> Vec<(PathBuf, String)> {
    // The library with its contract block as core writes it now (what the checks below compare the
    // shipped source with, and what the EVALSHA scripts' hashes are of).
    let library = lua::with_block(&lua::assembled(&root().join("lua/src")));
    let contract = render(&spec::contract(&library));
    let mut files = vec![
        (root().join("lua/ratelimit.lua"), library.clone()),
        // The Rust crate's copy: a packaged crate cannot reach outside its folder.
        (root().join("client/lua/ratelimit.lua"), library.clone()),
        (root().join("contract/contract.json"), contract.clone()),
        // Go's copies: go:embed cannot reach outside the module (go/copies_test.go compares them too).
        (root().join("go/contract.json"), contract),
        (root().join("go/ratelimit.lua"), library.clone()),
    ];
    // Each function's EVALSHA script, and the packages' copies of them.
    for function in CommandInfo::in_library().filter_map(|c| c.function).chain([VERSION_FUNCTION]) {
        let script = client::evalsha::script_of(&library, function);
        let name = spec::SCRIPTS.replace("{function}", function);
        let name = name.strip_prefix("lua/scripts/").expect("the scripts are in lua/scripts/");
        for dir in ["lua/scripts", "go/scripts"] {
            files.push((root().join(dir).join(name), script.clone()));
        }
    }
    for (name, value) in
        vectors::all(&library).into_iter().chain([("volume", vectors::cases(volume::volume()))])
    {
        files.push((root().join(format!("contract/vectors/{name}.json")), render(&value)));
    }
    files
}

/// The generated files whose checked-in text differs from what the reference writes now.
pub fn stale() -> Vec<PathBuf> {
    files()
        .into_iter()
        .filter(|(path, text)| std::fs::read_to_string(path).ok().as_deref() != Some(text.as_str()))
        .map(|(path, _)| path)
        .collect()
}

/// Writes every generated file whose text changed; returns the paths written.
pub fn write() -> std::io::Result<Vec<PathBuf>> {
    let mut written = vec![];
    for (path, text) in files() {
        if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
            std::fs::create_dir_all(path.parent().expect("a file in a folder"))?;
            std::fs::write(&path, &text)?;
            written.push(path);
        }
    }
    Ok(written)
}

#[test]
fn the_checked_in_contract_and_vectors_are_what_the_reference_writes() {
    let stale = stale();
    assert!(stale.is_empty(), "stale (write them again with `cargo run -p contract-gen`): {stale:?}");
}

#[test]
fn generated_files_say_so_on_their_first_line() {
    for (path, text) in files() {
        // The library's first line is the `#!lua` line Redis requires: it says so on its second.
        let first = if text.starts_with("#!lua") {
            text.lines().nth(1).unwrap()
        } else {
            text.lines().next().unwrap()
        };
        assert!(first.contains("GENERATED"), "{}", path.display());
    }
}

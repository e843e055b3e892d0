//! The contract as data (`contract/contract.json`) and the test vectors every client runs
//! (`contract/vectors/*.json`), written from the reference: core's registry and command table, and
//! this client for what happens over HTTP. The test here fails when a checked-in file differs from
//! what the reference writes now; `RL_BLESS=1 cargo test -p redis-ratelimit-client contract` writes
//! them again (see contract/README.md).

mod lua;
mod spec;
mod vectors;
mod volume;

use ratelimit_core::commands::{CommandInfo, VERSION_FUNCTION};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The library's version: the client's, which ships it.
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// What every generated file's first line says.
const GENERATED: &str =
    "GENERATED from the Rust reference by `RL_BLESS=1 cargo test -p redis-ratelimit-client contract`: do not edit";

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

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every generated file and its text now: the contract, its copy shipped in the Python package, and
/// the vectors.
fn files() -> Vec<(PathBuf, String)> {
    // The library with its contract block as core writes it now (what the checks below compare the
    // shipped source with, and what the EVALSHA scripts' hashes are of).
    let library = lua::with_block(&lua::assembled(&root().join("lua/src")));
    let contract = render(&spec::contract(&library));
    let mut files = vec![
        (root().join("lua/ratelimit.lua"), library.clone()),
        (root().join("client/lua/ratelimit.lua"), library.clone()),
        (root().join("python/src/redis_ratelimit/lua/ratelimit.lua"), library.clone()),
        (root().join("contract/contract.json"), contract.clone()),
        (root().join("python/src/redis_ratelimit/contract.json"), contract.clone()),
    ];
    // The Go and Node.js packages hold copies inside themselves too (go:embed and npm cannot reach
    // outside their folders); each package's own test also compares them with these.
    for (package, contract_at, library_at) in [
        ("go", "go/contract.json", "go/ratelimit.lua"),
        ("node", "node/contract.json", "node/lua/ratelimit.lua"),
    ] {
        if root().join(package).is_dir() {
            files.push((root().join(contract_at), contract.clone()));
            files.push((root().join(library_at), library.clone()));
        }
    }
    // Each function's EVALSHA script, and the packages' copies of them.
    for function in CommandInfo::in_library().filter_map(|c| c.function).chain([VERSION_FUNCTION]) {
        let script = crate::evalsha::script_of(&library, function);
        let name = spec::SCRIPTS.replace("{function}", function);
        let name = name.strip_prefix("lua/scripts/").expect("the scripts are in lua/scripts/");
        for (package, dir) in [
            ("lua", "lua/scripts"),
            ("python", "python/src/redis_ratelimit/lua/scripts"),
            ("go", "go/scripts"),
            ("node", "node/lua/scripts"),
        ] {
            if root().join(package).is_dir() {
                files.push((root().join(dir).join(name), script.clone()));
            }
        }
    }
    for (name, value) in
        vectors::all(&library).into_iter().chain([("volume", vectors::cases(volume::volume()))])
    {
        files.push((root().join(format!("contract/vectors/{name}.json")), render(&value)));
    }
    files
}

#[test]
fn the_checked_in_contract_and_vectors_are_what_the_reference_writes() {
    // Outside the repository (a packaged crate) there is nothing to compare with.
    if !root().join("contract").is_dir() && std::env::var_os("RL_BLESS").is_none() {
        return;
    }
    let bless = std::env::var_os("RL_BLESS").is_some();
    let mut stale = vec![];
    for (path, text) in files() {
        if bless {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &text).unwrap();
        } else if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
            stale.push(path.display().to_string());
        }
    }
    assert!(
        stale.is_empty(),
        "stale (write them again with `RL_BLESS=1 cargo test -p redis-ratelimit-client contract`): {stale:?}"
    );
}

#[test]
fn generated_files_say_so_on_their_first_line() {
    if !root().join("contract").is_dir() {
        return;
    }
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

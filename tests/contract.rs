//! The module and the Lua library against the contract (`contract/`), on real servers: the library
//! registers exactly the functions the contract lists (read-only where it says), the module registers
//! every command it lists, and the keys of every command the vectors render are the keys the module
//! tells the server (`COMMAND GETKEYS`, what cluster routing reads) and the keys the library's FCALL
//! is given.

mod common;

use common::lua;
use ratelimit_core::commands::{CommandInfo, COMMANDS, VERSION_FUNCTION};
use serde_json::Value;
use std::collections::BTreeMap;
use testkit::redis::{self, Value as Reply};
use testkit::Server;

fn vectors(name: &str) -> Vec<Value> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("contract/vectors/{name}.json"));
    let text = std::fs::read_to_string(path).expect("contract/vectors");
    serde_json::from_str::<Value>(&text).unwrap()["cases"].as_array().unwrap().clone()
}

fn text(v: &Reply) -> String {
    match v {
        Reply::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Reply::SimpleString(s) => s.clone(),
        other => format!("{other:?}"),
    }
}

#[test]
fn the_library_registers_the_contract_s_functions_and_flags() {
    if testkit::skip_when_external() {
        return;
    }
    let server = Server::builder().stock().start();
    let mut con = server.conn();
    lua::load(&mut con, &lua::source());
    let list: Vec<Reply> = redis::cmd("FUNCTION").arg("LIST").query(&mut con).unwrap();
    // [library_name, .., functions, [[name, n, description, d, flags, [..]], ...], ...]
    let library = match &list[0] {
        Reply::Array(fields) => fields.clone(),
        Reply::Map(pairs) => pairs.iter().flat_map(|(k, v)| [k.clone(), v.clone()]).collect(),
        other => panic!("{other:?}"),
    };
    let at = library.iter().position(|f| text(f) == "functions").unwrap();
    let Reply::Array(functions) = &library[at + 1] else { panic!() };
    let mut registered = BTreeMap::new();
    for function in functions {
        let fields: Vec<Reply> = match function {
            Reply::Array(f) => f.clone(),
            Reply::Map(pairs) => pairs.iter().flat_map(|(k, v)| [k.clone(), v.clone()]).collect(),
            other => panic!("{other:?}"),
        };
        let field = |name: &str| fields[fields.iter().position(|f| text(f) == name).unwrap() + 1].clone();
        let flags: Vec<String> = match field("flags") {
            Reply::Array(f) | Reply::Set(f) => f.iter().map(text).collect(),
            other => panic!("{other:?}"),
        };
        registered.insert(text(&field("name")), flags.contains(&"no-writes".to_string()));
    }
    let mut listed: BTreeMap<String, bool> =
        CommandInfo::in_library().map(|c| (c.function.unwrap().to_string(), !c.writes)).collect();
    listed.insert(VERSION_FUNCTION.to_string(), true);
    assert_eq!(registered, listed, "the library's functions (name -> read-only) are the contract's");
    // rl_version answers the contract's version and hash.
    let version: Vec<String> = redis::cmd("FCALL_RO").arg(VERSION_FUNCTION).arg(0).query(&mut con).unwrap();
    let contract: Value = serde_json::from_str(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("contract/contract.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let library = &contract["library"];
    assert_eq!(version, [library["version"].as_str().unwrap(), library["source_hash"].as_str().unwrap()]);
}

#[test]
fn the_module_registers_every_command_and_its_keys_are_the_contract_s() {
    let Some(server) = Server::builder().args(&["dialects", "cl.throttle rl.throttle gcra"]).own() else {
        return;
    };
    if testkit::lua_engine() {
        return testkit::skip("the module's commands and key positions need the module");
    }
    let mut con = server.conn();
    for command in COMMANDS {
        let info: Vec<Reply> = redis::cmd("COMMAND").arg("INFO").arg(command.name).query(&mut con).unwrap();
        assert!(!matches!(info[0], Reply::Nil), "{} is not registered", command.name);
    }
    let mut checked = 0;
    for case in vectors("commands") {
        let output = &case["output"];
        let Some(module) = output["module"].as_array() else { continue };
        let argv: Vec<&str> = module.iter().map(|w| w.as_str().unwrap()).collect();
        let info = CommandInfo::named(argv[0]).unwrap();
        let keys: Vec<String> = redis::cmd("COMMAND").arg("GETKEYS").arg(&argv).query(&mut con).unwrap();
        let expected: Vec<String> =
            info.keys.positions(&argv[1..]).into_iter().map(|i| argv[1 + i].to_string()).collect();
        assert_eq!(keys, expected, "{argv:?}: the module's keys are the contract's");
        if let Some(fcall) = output["fcall"].as_array() {
            let n: usize = fcall[2].as_str().unwrap().parse().unwrap();
            let given: Vec<&str> = fcall[3..3 + n].iter().map(|w| w.as_str().unwrap()).collect();
            assert_eq!(
                given,
                expected.iter().map(String::as_str).collect::<Vec<_>>(),
                "{argv:?}: FCALL's keys"
            );
        }
        checked += 1;
    }
    assert!(checked > 20, "the vectors render commands ({checked})");
}

//! The Lua library as shipped (`lua/ratelimit.lua`, the one string `FUNCTION LOAD` takes), assembled
//! from its source in modules (`lua/src/`: `library.lua` names the parts in order, each `--@ part`
//! line standing for `lua/src/<part>.lua`), and its contract block (between `-- CONTRACT` and
//! `-- END CONTRACT`): the function names, the read-only ones, the bounds and the error texts the
//! library replies, written from core so that the library never types them again.

use super::spec::form_name;
use ratelimit_core::args::{COST, MAX};
use ratelimit_core::commands::{CommandInfo, VERSION_FUNCTION};
use ratelimit_core::declare::EMPTY_ID;
use ratelimit_core::error::ParamError;
use ratelimit_core::kind::{LimiterKind, RequestForm};
use ratelimit_core::{hold, leases, limits, reservation, sliding_log, token_bucket, window};

const BEGIN: &str = "-- CONTRACT:";
const END: &str = "-- END CONTRACT";

/// Each error text the library replies, by the name the library reads it under.
const ERRORS: &[(&str, ParamError)] = &[
    ("capacity", token_bucket::CAPACITY),
    ("refill_too_long", token_bucket::REFILL_TOO_LONG),
    ("rate", token_bucket::RATE),
    ("rate_too_large", token_bucket::RATE_TOO_LARGE),
    ("limit", window::LIMIT),
    ("window", window::WINDOW),
    ("slide_limit", sliding_log::LIMIT),
    ("lease_limit", leases::LIMIT),
    ("lease", leases::LEASE),
    ("weight", leases::WEIGHT),
    ("cost", COST),
    ("max", MAX),
    ("max_wait", reservation::MAX_WAIT),
    ("empty_id", EMPTY_ID),
    ("hold_ttl", hold::TTL),
    ("hold_id", hold::ID),
    ("not_held", hold::NOT_HELD),
    ("ledger_full", hold::FULL),
    ("ledger_untagged", hold::UNTAGGED),
];

fn quoted(s: &str) -> String {
    format!("{s:?}")
}

/// The block, from its first line to its last, naming `source_hash` as the library's.
fn block(source_hash: &str, tag_of: &str) -> String {
    let functions: Vec<String> =
        CommandInfo::in_library().filter_map(|c| c.function).chain([VERSION_FUNCTION]).map(quoted).collect();
    let read_only: Vec<String> = CommandInfo::in_library()
        .filter(|c| !c.writes)
        .filter_map(|c| c.function)
        .chain([VERSION_FUNCTION])
        .map(|f| format!("{f} = true"))
        .collect();
    let mut out =
        format!("{BEGIN} {} (contract/contract.json's library, bounds and errors)\n", super::GENERATED);
    // What the fast path before the library reads, as plain locals; the tables below are built on
    // their first use, so an EVALSHA script builds them only when it builds the library.
    out += &format!("local MAX_RATE_PER_SEC = {}\n", limits::MAX_RATE_PER_SEC);
    out += &format!("local MAX_LOG_LIMIT = {}\n", limits::MAX_LOG_LIMIT);
    // Each stored layout's tag (core's format.rs), by the name the library's parts give the layout.
    out += &format!("local TAG_OF = {{ {tag_of} }}\n");
    out += "local CONTRACT_DATA = nil\n";
    out += "local function contract()\n";
    out += "  CONTRACT_DATA = CONTRACT_DATA or {\n";
    out += &format!("  version = {},\n", quoted(super::VERSION));
    // The SHA-1 of the library with this value empty: what `rl_version` replies, so that a client can
    // tell the library on a server from its own.
    out += &format!("  source_hash = {},\n", quoted(source_hash));
    out += &format!("  functions = {{ {} }},\n", functions.join(", "));
    out += &format!("  read_only = {{ {} }},\n", read_only.join(", "));
    let command_of: Vec<String> = CommandInfo::in_library()
        .filter_map(|c| c.function.map(|f| format!("{f} = {}", quoted(&c.name.to_lowercase()))))
        .collect();
    out += &format!("  command_of = {{ {} }},\n", command_of.join(", "));
    // The horizon in ns as the library's exact integers hold it above 2^53: limbs of base 10^7.
    let ns = limits::MAX_HORIZON_NS as u64;
    let base = 10_000_000;
    out += &format!(
        "  max_horizon_ns = {{ {}, {}, {}, neg = false }}, -- {ns}\n",
        ns % base,
        ns / base % base,
        ns / base / base
    );
    out += &format!("  max_rate_per_sec = {},\n", limits::MAX_RATE_PER_SEC);
    out += &format!("  max_log_limit = {},\n", limits::MAX_LOG_LIMIT);
    out += &format!("  max_lease_limit = {},\n", limits::MAX_LEASE_LIMIT);
    // RL.HOLD's ledger: its tag (as a Lua string: its last byte escaped) and bounds.
    let lua_tag = |t: &[u8; 4]| format!("\"{}\\{}\"", String::from_utf8_lossy(&t[..3]), t[3]);
    out += &format!(
        "  hold = {{ tag = {}, ledger_tag = {}, max_holds = {}, max_id_bytes = {}, max_ttl_ms = {} }},\n",
        lua_tag(&hold::TAG),
        lua_tag(&hold::LEDGER_TAG),
        hold::MAX_HOLDS,
        hold::MAX_ID_BYTES,
        hold::MAX_TTL_SECS * 1000
    );
    out += "  kinds = {\n";
    for k in LimiterKind::ALL {
        out += &format!(
            "    {} = {{ group = {}, command = {}, form = {}, refunds = {} }},\n",
            k.name(),
            quoted(k.group()),
            quoted(k.command()),
            quoted(form_name(k.request_form())),
            k.refunds()
        );
    }
    out += "  },\n";
    // Each request form's option word and how many values follow it; and its length without one.
    let forms = [RequestForm::Cost, RequestForm::Id, RequestForm::Lease, RequestForm::Reserve];
    let options: Vec<String> = forms
        .iter()
        .filter_map(|f| f.option().map(|(word, values)| (f, word, values)))
        .map(|(f, word, values)| {
            format!("{} = {{ {}, {values} }}", form_name(*f), quoted(&String::from_utf8_lossy(word)))
        })
        .collect();
    out += &format!("  form_option = {{ {} }},\n", options.join(", "));
    let lens: Vec<String> = forms
        .iter()
        .filter(|f| f.len(&[]) != 1)
        .map(|f| format!("{} = {}", form_name(*f), f.len(&[])))
        .collect();
    out += &format!("  form_len = {{ {} }},\n", lens.join(", "));
    out += "  errors = {\n";
    for (name, e) in ERRORS {
        out += &format!("    {name} = {},\n", quoted(e.expected));
    }
    out += "  },\n";
    // The whole replies a client may see besides a parameter's (`ERR invalid <field>: <expected>`).
    for (name, reply) in [
        ("invalid", format!("ERR {}", ParamError { field: "%s", expected: "%s" })),
        // Redis' own form of it, which the module replies (its command's name as registered).
        ("arity", format!("{} for '%s' command", ratelimit_core::error::WRONG_ARITY)),
        ("syntax", super::spec::SYNTAX_REPLY.to_string()),
        ("state", format!("ERR {}", ratelimit_core::error::StateError)),
        ("duplicate_key", client::command::DUPLICATE_KEY.to_string()),
    ] {
        out += &format!("  {name}_reply = {},\n", quoted(&reply));
    }
    out += "  }\n  return CONTRACT_DATA\nend\n";
    out += END;
    out += "\n";
    out
}

/// What the library's second line says (its first is the `#!lua` line Redis requires).
const ASSEMBLED: &str = "-- GENERATED from lua/src/ (library.lua and its parts) by \
     `cargo run -p contract-gen`: do not edit; change lua/src/";

/// The library assembled from `lua/src/`: each `--@ part` line of `library.lua` replaced by
/// `lua/src/<part>.lua`, indented as the line is; `--@ contract` by an empty contract block (which
/// [`with_block`] then writes).
pub(super) fn assembled(src: &std::path::Path) -> String {
    let read = |name: &str| {
        std::fs::read_to_string(src.join(format!("{name}.lua")))
            .unwrap_or_else(|e| panic!("lua/src/{name}.lua: {e}"))
    };
    let skeleton = read("library");
    let mut out = String::new();
    for (i, line) in skeleton.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some(part) = trimmed.strip_prefix("--@ ") {
            if part == "contract" {
                out += &format!("{BEGIN}\n{END}\n");
                continue;
            }
            let indent = &line[..line.len() - trimmed.len()];
            // `--@ kinds`: each kind's part, in the registry's order (a kind that decides on another's
            // state comes after it there).
            let parts: Vec<&str> = if part == "kinds" {
                LimiterKind::ALL.iter().map(|k| k.module()).collect()
            } else {
                vec![part]
            };
            for (n, part) in parts.iter().enumerate() {
                if n > 0 {
                    out += "\n";
                }
                for l in read(part).lines() {
                    if !l.is_empty() {
                        out += indent;
                    }
                    out += l;
                    out += "\n";
                }
            }
            if part == "kinds" {
                let locals: Vec<String> =
                    LimiterKind::ALL.iter().map(|k| declared_local(&read(k.module()), k.name())).collect();
                out += &format!("{indent}-- GENERATED: every kind, in the registry's order\n");
                out += &format!("{indent}local KINDS = {{ {} }}\n", locals.join(", "));
            }
        } else {
            out += line;
            out += "\n";
        }
        if i == 0 {
            out += ASSEMBLED;
            out += "\n";
        }
    }
    out
}

/// The local a kind's part declares the kind as (`local token = small_state(declared("token_bucket",
/// ...))`): every kind's part has one, naming the kind as core does.
fn declared_local(part: &str, kind: &str) -> String {
    let call = format!("declared(\"{kind}\"");
    part.lines()
        .find_map(|l| {
            let rest = l.strip_prefix("local ")?;
            let (name, value) = rest.split_once(" = ")?;
            value.contains(&call).then(|| name.to_string())
        })
        .unwrap_or_else(|| panic!("the Lua part of {kind} has no `local <name> = ... {call}, ...)` line"))
}

/// `TAG_OF`'s fields: every layout a kind owns, named as its part names it (`declared("token_bucket",
/// { layout = "token" ...`), with core's tag as a Lua string.
fn tags(library: &str) -> String {
    LimiterKind::ALL
        .iter()
        .filter(|k| k.owner() == **k)
        .map(|k| {
            let call = format!("declared(\"{}\", {{ layout = \"", k.name());
            let name = library
                .lines()
                .find_map(|l| l.split_once(&call).and_then(|(_, rest)| rest.split_once('"')).map(|(n, _)| n))
                .unwrap_or_else(|| panic!("the Lua part of {} names no layout in its {call}...", k.name()));
            let tag = k.layout().tag().unwrap_or_else(|| panic!("{}'s layout has no tag", k.name()));
            let bytes: String =
                tag.iter()
                    .map(|&b| {
                        if b.is_ascii_alphanumeric() {
                            (b as char).to_string()
                        } else {
                            format!("\\{b:03}")
                        }
                    })
                    .collect();
            format!("{name} = \"{bytes}\"")
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `library` with its contract block written anew.
pub(super) fn with_block(library: &str) -> String {
    let start = library.find(BEGIN).expect("lua/ratelimit.lua has a -- CONTRACT: block");
    let end = library[start..].find(END).map(|i| start + i + END.len() + 1).expect("-- END CONTRACT");
    let tag_of = tags(library);
    let with = |hash: &str| format!("{}{}{}", &library[..start], block(hash, &tag_of), &library[end..]);
    let hash = redis::Script::new(&with("")).get_hash().to_string();
    with(&hash)
}

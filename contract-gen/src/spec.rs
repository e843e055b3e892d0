//! `contract/contract.json`: what a client must know, from core's registry, its command table and
//! its bounds, and from this client's HTTP layer and engines.

use client::command;
use client::engine::script_of;
use client::engine_machine as machine;
use client::http::caller::{ESCAPED, ESCAPES, HASHED, MAX_CALLER_KEY_BYTES, PLAIN};
use client::http::config::DEFAULT_IPV6_PREFIX;
use client::http::forwarded::{MAX_HOPS, MAX_NODE_BYTES};
use client::http::response::*;
use client::reply_class::{ReplyClass, BEHAVIOURS, OTHERWISE, RULES, TRANSPORT};
use ratelimit_core::args::{COST, MAX, OUT_OF_RANGE, TOO_LARGE};
use ratelimit_core::commands::{CommandInfo, KeyRule, ReplyForm, COMMANDS, VERSION_FUNCTION};
use ratelimit_core::declare::{EMPTY_ID, LEASE_WEIGHT, LOG_COST};
use ratelimit_core::error::{ParamError, StateError};
use ratelimit_core::kind::{LimiterKind, ParamType, RequestForm};
use ratelimit_core::{decimal, leases, limits, reservation};
use serde_json::{json, Value};

pub(super) fn contract(library_source: &str) -> Value {
    json!({
        "version": 1,
        "kinds": LimiterKind::ALL.iter().map(|k| kind(*k)).collect::<Vec<_>>(),
        "request_forms": request_forms(),
        "commands": COMMANDS.iter().map(command).collect::<Vec<_>>(),
        "bounds": {
            "max_horizon_secs": limits::MAX_HORIZON_SECS,
            "max_rate_per_sec": limits::MAX_RATE_PER_SEC,
            "max_log_limit": limits::MAX_LOG_LIMIT,
            "max_lease_limit": limits::MAX_LEASE_LIMIT,
            "max_lease_weight": limits::MAX_LEASE_LIMIT,
            "max_whole": u64::MAX,
            "max_decimal_digits": decimal::MAX_DIGITS,
            "max_decimal_exponent": decimal::MAX_EXPONENT,
        },
        "errors": errors(),
        "calls": calls(),
        "replies": replies(),
        "engines": engines(),
        "library": library(library_source),
        "http": http(),
        "batching": batching(),
        "holds": holds(),
        "fallback": {
            "max_keys": client::fallback::MAX_KEYS,
            "max_keys_means": "the most keys the in-process limiter keeps: past it, expired state goes first, then everything",
            "algorithms": {
                "token_bucket": "core's token bucket (GCRA) of the policy's limit refilled over its period (a token bucket: itself), shared by the instances: limit / instances tokens (at least 1), refilled instances times slower; take, reserve and refund act on it",
                "leases": "core's leases (RL.ACQUIRE, RL.RELEASE, RL.RENEW) at limit / instances (at least 1)",
            },
            "algorithms_mean": "how the in-process fallback decides each kind (its `fallback`): a new kind needs no fallback of its own",
        },
    })
}

/// The calls a client makes beside the decisions (which the kinds and request forms describe), each
/// as the client's own builder writes it, with placeholders for the values: built here with values no
/// two placeholders share, each then named by the placeholder it stands for.
fn calls() -> Value {
    use client::Policy;
    use std::time::Duration;
    let policy = Policy::token_bucket(11, 13.0).expect("a policy");
    let (units, min, max) = (17, 19, 23);
    let (max_wait, lease) = (Duration::from_millis(29), Duration::from_millis(31));
    let [p1, p2] = policy.params();
    let named = [
        (p1.clone(), "p1"),
        (p2.clone(), "p2"),
        (LimiterKind::TokenBucket.group().to_string(), "group"),
        (units.to_string(), "units"),
        (min.to_string(), "min"),
        (max.to_string(), "max"),
        (ratelimit_core::args::seconds(max_wait.as_nanos()), "max_wait"),
        (ratelimit_core::args::seconds(lease.as_nanos()), "lease"),
    ];
    let template = |cmd: Result<redis::Cmd, client::CallError>| -> Vec<String> {
        let words = super::words::words(&cmd.expect("the builder takes these values"), false);
        words
            .into_iter()
            .map(|w| named.iter().find(|(value, _)| *value == w).map_or(w, |(_, name)| format!("{{{name}}}")))
            .collect()
    };
    json!({
        "take": template(Ok(command::take("{key}", &policy, max))),
        "reserve_upto": template(command::reserve_batch("{key}", &policy, min, max, max_wait)),
        "refund": template(command::refund("{key}", &policy, units)),
        "inspect": template(Ok(command::inspect("{key}", None))),
        "inspect_peek": template(Ok(command::inspect("{key}", Some(&policy)))),
        "release": template(Ok(command::release("{key}", "{id}"))),
        "renew": template(Ok(command::renew("{key}", lease, "{id}"))),
    })
}

/// Batched units and the pre-check (`batch.rs`, `precheck.rs`; docs/high-volume.md).
fn batching() -> Value {
    use client::batching::{self, WindowEnd};
    let kinds: serde_json::Map<String, Value> = LimiterKind::ALL
        .iter()
        .filter_map(|k| {
            let end = match batching::window_end(*k)? {
                WindowEnd::None => "none",
                WindowEnd::Reset => "reset",
                WindowEnd::ResetMinusWindow => "reset_minus_window",
            };
            Some((k.name().to_string(), end.into()))
        })
        .collect();
    json!({
        "start": batching::START,
        "grow": batching::GROW,
        "share": batching::SHARE,
        "ahead": batching::AHEAD,
        "refund_margin_ms": batching::REFUND_MARGIN.as_millis() as u64,
        "sweep_ms": batching::SWEEP.as_millis() as u64,
        "max_keys": batching::MAX_KEYS,
        "lease_ms": batching::DEFAULT_LEASE.as_millis() as u64,
        "kinds": kinds,
        "kinds_mean": "the kinds that batch and where their held units end: `none` (a bucket: the lease alone), `reset` (a fixed window: reset_after after the answer), `reset_minus_window` (a sliding counter: reset_after minus the window); the others refuse a batch",
        "precheck_max_keys": client::precheck::MAX_KEYS,
        "errors": {
            "batch": batching::BATCH_SIZE,
            "lease": batching::BATCH_LEASE,
            "kind": batching::BATCH_KIND,
        },
    })
}

/// What a client does with each answer that is not a decision (`reply_class`, docs/errors.md).
fn replies() -> Value {
    let classes: Vec<Value> = BEHAVIOURS
        .iter()
        .map(|b| {
            json!({
                "name": b.class.name(),
                "decision": b.decision,
                "degraded": b.decision == "failure_policy",
                "breaker": b.breaker,
                "log": b.log,
                "counter": b.counter,
            })
        })
        .collect();
    let rules: Vec<Value> = RULES
        .iter()
        .map(|r| json!({ "code": r.code, "starts": r.starts, "class": r.class.name() }))
        .collect();
    let transport: serde_json::Map<String, Value> =
        TRANSPORT.iter().map(|t| (t.to_string(), ReplyClass::Outage.name().into())).collect();
    json!({
        "classes": classes,
        "rules": rules,
        "match": "an error reply's code is its first word; `starts` (null: any text) is compared, ignoring case, with the start of the text after the code and one space; the first rule that matches decides",
        "otherwise": OTHERWISE.name(),
        "transport": transport,
    })
}

/// The engine machine (`engine_machine`, docs/errors.md).
fn engines() -> Value {
    use client::engine_machine::{Next, Then, ANSWERS, MAX_SENDS, STATES, TRANSITIONS};
    let states: Vec<Value> = STATES
        .iter()
        .map(|(_, name, sends, reports)| json!({ "name": name, "sends": machine::sent_name(*sends), "reports": reports }))
        .collect();
    let answers: Vec<Value> = ANSWERS
        .iter()
        .map(
            |(a, code, starts)| json!({ "answer": machine::answer_name(*a), "code": code, "starts": starts }),
        )
        .collect();
    let transitions: Vec<Value> = TRANSITIONS
        .iter()
        .map(|t| {
            let next = match t.next {
                Next::To(state) => machine::state_name(state),
                Next::Same => "same",
                Next::Start => "start",
            };
            let then = match t.then {
                Then::Send(sent) => format!("send:{}", machine::sent_name(sent)),
                Then::Decided => "done:decided".into(),
                Then::Outage => "done:outage".into(),
                Then::Misconfigured => "done:misconfigured".into(),
                Then::Error => "done:error".into(),
            };
            json!({
                "sent": t.sent.iter().map(|s| machine::sent_name(*s)).collect::<Vec<_>>(),
                "answers": t.answers.iter().map(|a| machine::answer_name(*a)).collect::<Vec<_>>(),
                "wanted": t.wanted.iter().map(|w| machine::wanted_name(*w)).collect::<Vec<_>>(),
                "next": next,
                "then": then,
            })
        })
        .collect();
    let start: serde_json::Map<String, Value> = machine::WANTED
        .iter()
        .map(|w| (machine::wanted_name(*w).to_string(), machine::state_name(machine::start(*w)).into()))
        .collect();
    json!({
        "states": states,
        "start": start,
        "answers": answers,
        "other_answers": {
            "ok": "a reply that is not an error",
            "outage": "no reply, or an error reply the `replies` rules class as outage",
            "error": "any other error reply (classified by `replies`)",
        },
        "max_sends": MAX_SENDS,
        "transitions": transitions,
        "match": "the first transition whose `sent`, `answers` and `wanted` hold the command sent, its answer and the engine asked for decides; `next`: a state, `same` (stay) or `start` (the wanted engine's start state); a call that would send more than `max_sends` commands ends as done:misconfigured; at most one FUNCTION LOAD per node at a time: a call that waited for another's load sends its FCALL again without loading",
    })
}

pub(super) fn form_name(form: RequestForm) -> &'static str {
    match form {
        RequestForm::Cost => "cost",
        RequestForm::Id => "id",
        RequestForm::Lease => "lease",
        RequestForm::Reserve => "reserve",
    }
}

fn kind(k: LimiterKind) -> Value {
    let tag = k.layout().tag().map(|t| t.iter().map(|b| format!("{b:02x}")).collect::<String>());
    let function = CommandInfo::named(k.command()).and_then(|c| c.function);
    let params: Vec<Value> = k
        .params()
        .iter()
        .map(|p| {
            json!({
                "name": p.name,
                "type": match p.form {
                    ParamType::Whole => "whole",
                    ParamType::Decimal => "decimal",
                    ParamType::Seconds => "seconds",
                },
                "min": p.min,
                "max": p.max,
                "unit": p.unit,
                "errors": p.errors.iter().map(error).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "name": k.name(),
        "group": k.group(),
        "command": k.command(),
        "function": function,
        "layout_tag_hex": tag,
        "owner": k.owner().name(),
        "request": form_name(k.request_form()),
        "params": params,
        "refunds": k.refunds(),
        "peeks": k.request_form() == RequestForm::Cost,
        "fallback": client::fallback::Algorithm::of(k).name(),
    })
}

fn request_forms() -> Value {
    let forms = [RequestForm::Cost, RequestForm::Id, RequestForm::Lease, RequestForm::Reserve];
    let mut out = serde_json::Map::new();
    for form in forms {
        let args: &[&str] = match form {
            RequestForm::Cost => &["cost"],
            RequestForm::Id | RequestForm::Lease => &["id"],
            RequestForm::Reserve => &["cost", "max_wait"],
        };
        let option = form
            .option()
            .map(|(word, values)| json!({ "word": String::from_utf8_lossy(word), "values": values }));
        out.insert(form_name(form).into(), json!({ "args": args, "option": option }));
    }
    Value::Object(out)
}

fn command(c: &CommandInfo) -> Value {
    let keys = match c.keys {
        KeyRule::None => json!({ "rule": "none" }),
        KeyRule::At(i) => json!({ "rule": "at", "index": i }),
        KeyRule::Every(n) => json!({ "rule": "every", "step": n }),
        KeyRule::Groups => json!({ "rule": "groups" }),
        KeyRule::LedgerGroups => json!({ "rule": "ledger_groups", "groups_from": 4 }),
        KeyRule::LedgerPairs => json!({ "rule": "ledger_pairs", "pairs_from": 3 }),
    };
    let reply = match c.reply {
        ReplyForm::Verdict { sixth } => {
            json!({ "form": "verdict", "fields": ReplyForm::VERDICT, "sixth": sixth })
        }
        ReplyForm::Flag => json!({ "form": "flag" }),
        ReplyForm::Fields => json!({
            "form": "fields",
            "resp3": "the module replies a map to RESP3 clients and a flat list of names and values to RESP2 ones; the library replies the flat list to both: read both",
        }),
        ReplyForm::Top => json!({ "form": "top" }),
        ReplyForm::Ok => json!({ "form": "ok" }),
        ReplyForm::Dialect => json!({ "form": "dialect" }),
        ReplyForm::Settled => {
            json!({ "form": "settled", "fields": ReplyForm::VERDICT, "sixth": "the 1-based position of the named key it describes", "nil": "no hold of this id (never held, denied, or ended): nothing changed" })
        }
    };
    json!({
        "name": c.name,
        "syntax": c.syntax,
        "min_args": c.min_args,
        "keys": keys,
        "writes": c.writes,
        "function": c.function,
        "reply": reply,
    })
}

/// RL.HOLD and RL.SETTLE as a client calls them (docs/commands.md): the words, bounds, errors and
/// the ledger's default name; each call's argv is its prefix, then RL.ALL's groups (a hold) or
/// `key units` pairs (a settle).
fn holds() -> Value {
    use ratelimit_core::hold::{self, Abandon, Mode};
    json!({
        "calls": {
            "hold": ["RL.HOLD", "{ledger}", "{id}", "{ttl}", "{abandon}"],
            "hold_then": "RL.ALL's groups: key KIND p1 p2 units (the kinds' request forms)",
            "settle": ["RL.SETTLE", "{ledger}", "{id}", "{mode}"],
            "settle_then": "key units, for each group settled",
        },
        "abandon": Abandon::WORDS,
        "abandon_default": Abandon::WORDS[0],
        "abandon_means": {
            "CHARGE": "a hold never settled stays charged when its time ends (billing-safe)",
            "RETURN": "a hold never settled gives back what it held beyond the usage a PARTIAL reported when its time ends",
        },
        "modes": Mode::WORDS,
        "modes_mean": {
            "FINAL": "units is the actual: the difference goes back or is charged in the hold's own window, once",
            "PARTIAL": "units is the usage so far (a running total): usage beyond the hold is charged as it comes",
        },
        "held_kinds": LimiterKind::ALL.iter().filter(|k| k.refunds() && k.request_form() == RequestForm::Cost).map(|k| k.name()).collect::<Vec<_>>(),
        "ttl_default_secs": hold::DEFAULT_TTL_SECS,
        "max_ttl_secs": hold::MAX_TTL_SECS,
        "max_id_bytes": hold::MAX_ID_BYTES,
        "max_holds": hold::MAX_HOLDS,
        "ledger": "rl:holds:{{{tag}}}",
        "ledger_means": "the ledger a client names by default: {tag} is the first key's hash tag (the text between its first '{' and the next '}', when not empty), else the whole first key, so the ledger shares the limits' slot",
        "reply": "a hold replies RL.ALL's six fields; a settle six like a verdict (allowed 0: a named group went past its held units and its limit has nothing left: stop a stream) or nil (no hold of this id: nothing changed)",
        "errors": [error(&hold::TTL), error(&hold::ID), error(&hold::NOT_HELD), error(&hold::FULL), error(&hold::UNTAGGED)],
        "hold_key": "{ledger}:{id}: each hold's own key, in the ledger's slot (the ledger's name carries a hash tag)",
    })
}

fn error(e: &ParamError) -> Value {
    json!({ "field": e.field, "expected": e.expected, "reply": format!("ERR {e}") })
}

fn errors() -> Value {
    json!({
        "format": "ERR invalid {field}: {expected}",
        "requests": [error(&COST), error(&EMPTY_ID), error(&leases::WEIGHT), error(&reservation::MAX_WAIT), error(&MAX)],
        "render": {
            "log_cost": LOG_COST,
            "lease_weight": LEASE_WEIGHT,
            "empty_key": command::EMPTY_KEY,
            "cross_slot": command::CROSS_SLOT,
        },
        "too_large": TOO_LARGE,
        "out_of_range": OUT_OF_RANGE,
        "syntax": SYNTAX_REPLY,
        "state": format!("ERR {StateError}"),
        "duplicate_key": command::DUPLICATE_KEY,
        "wrong_type": ratelimit_core::error::WRONG_TYPE,
    })
}

/// Where each function's EVALSHA script is, `{function}` its name.
pub(super) const SCRIPTS: &str = "lua/scripts/{function}.lua";

/// The module's reply for an unknown option or kind (core's, which src/server/error.rs sends;
/// `tests/lua_module.rs` holds the library's to the module's). A key given twice: `command::DUPLICATE_KEY`.
pub(super) const SYNTAX_REPLY: &str = ratelimit_core::error::SYNTAX;

fn library(source: &str) -> Value {
    let functions: Vec<Value> = CommandInfo::in_library()
        .map(|c| {
            let function = c.function.expect("in the library");
            let sha = redis::Script::new(&script_of(source, function)).get_hash().to_string();
            json!({ "name": function, "command": c.name, "read_only": !c.writes, "evalsha_sha1": sha })
        })
        .collect();
    let mut functions = functions;
    functions.push(json!({
        "name": VERSION_FUNCTION,
        "command": null,
        "read_only": true,
        "evalsha_sha1": redis::Script::new(&script_of(source, VERSION_FUNCTION)).get_hash().to_string(),
    }));
    json!({
        "name": "ratelimit",
        "version": super::VERSION,
        "source_hash": client::engine::library_hash(source), // its `rl_version`'s
        "source": "lua/ratelimit.lua",
        "source_sha1": redis::Script::new(source).get_hash(),
        "functions": functions,
        // Each function's EVALSHA script is a generated file (client/src/evalsha.rs writes them): a
        // client ships the files and sends them as they are.
        "evalsha": {
            "scripts": SCRIPTS,
            "how": "each function's script holds what it reaches of the library, its fast path first; \
                    sent as it is (EVALSHA evalsha_sha1, EVAL of the file where the server answers NOSCRIPT)",
        },
    })
}

fn http() -> Value {
    use client::http::llm;
    json!({
        "llm": {
            "name": llm::NAME,
            "fields": llm::FIELDS,
            "units": llm::UNITS,
            "duration": "the reset as OpenAI writes it (Go's form): 0s, 850ms, 1s, 1.5s (up to three decimals, trailing zeros dropped), 6m0s, 1h2m3.4s",
            "then": "the three of each unit given (requests, then tokens), then RateLimit-Policy and RateLimit listing each unit's policy as http.structured does, named by its unit, joined by \", \"",
        },
        "headers": {
            "limit": RATELIMIT_LIMIT.as_str(),
            "remaining": RATELIMIT_REMAINING.as_str(),
            "reset": RATELIMIT_RESET.as_str(),
            "policy": RATELIMIT_POLICY.as_str(),
            "state": RATELIMIT.as_str(),
            "degraded": DEGRADED.as_str(),
            "retry_after": http::header::RETRY_AFTER.as_str(),
            "content_type": "application/problem+json",
        },
        "rounding": {
            "retry_after": "whole seconds, rounded up, at least 1; none when the request never fits",
            "reset": "whole seconds, rounded up",
        },
        "structured": {
            "policy": "\"{name}\";q={limit};w={window_secs}",
            "state": "\"{name}\";r={remaining};t={reset_secs}",
            "name_drops": ["\"", "\\"],
        },
        "problem_types": PROBLEMS.iter().map(|p| (p.name.to_string(), Value::from(p.type_uri))).collect::<serde_json::Map<_, _>>(),
        "problems": PROBLEMS
            .iter()
            .map(|p| (p.name.to_string(), json!({ "title": p.title, "detail": p.detail })))
            .collect::<serde_json::Map<_, _>>(),
        "problem_what": { "rate": RATE_LIMIT_WHAT, "concurrency": CONCURRENCY_LIMIT_WHAT },
        "degraded_value": "true",
        "limit_key": "{tag}:{name}:{owner}",
        "limit_key_means": "a limit's key in the HTTP layers and adapters: the caller's tag (`caller.key`), the limit's name and its kind's `owner`, so that a limit whose kind changes starts afresh and one whose numbers change carries on",
        "caller": {
            "key": "{prefix}:{{{part}}}",
            "max_part_bytes": MAX_CALLER_KEY_BYTES,
            "forms": [
                format!("{{kind}}{PLAIN}{{id}}"),
                format!("{{kind}}{ESCAPED}{{escaped id}}"),
                format!("{{kind}}{HASHED}{{hex of the id's SHA-256}}"),
            ],
            "markers": { "plain": PLAIN, "escaped": ESCAPED, "hashed": HASHED },
            "escapes": ESCAPES.iter().map(|(c, to)| (c.to_string(), Value::from(*to))).collect::<serde_json::Map<_, _>>(),
            "ipv6_prefix_default": DEFAULT_IPV6_PREFIX,
        },
        "forwarded": { "max_hops": MAX_HOPS, "max_node_bytes": MAX_NODE_BYTES },
    })
}

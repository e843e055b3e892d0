//! The client on every engine, against real servers: a stock server (no module) gets the Lua library
//! through FCALL, loaded by the client, or through EVALSHA; a call answered "Function not found" or
//! NOSCRIPT (after FUNCTION FLUSH, SCRIPT FLUSH) loads it again and is sent again; users allowed only
//! FCALL or only EVALSHA work; `verify` says which engine and why; keys carry on between the module and
//! the library; what needs the module says so.

mod support;

use redis_ratelimit_client::{Backend, FailurePolicy, Limiter, Policy};
use std::time::Duration;
use support::calls;
use testkit::redis;
use testkit::{unique_key, Server};

fn bucket() -> Policy {
    Policy::token_bucket(3, 0.01).unwrap()
}

fn limiter(url: &str, engine: Backend) -> Limiter {
    support::builder(FailurePolicy::Closed).backend(engine).connect(url).unwrap()
}

/// Three allowed, then denied: the bucket is Redis', not the failure policy's.
async fn assert_limits(limiter: &Limiter, key: &str) {
    for i in 0..3 {
        let d = limiter.check(key, &bucket(), 1).await;
        assert!(d.allowed && !d.degraded, "call {i}: {d:?}");
        assert_eq!(d.remaining, 2 - i);
    }
    let d = limiter.check(key, &bucket(), 1).await;
    assert!(!d.allowed && !d.degraded, "{d:?}");
}

#[tokio::test]
async fn on_a_stock_server_auto_loads_the_library_and_uses_fcall() {
    let Some(server) = Server::builder().stock().own() else { return };
    let limiter = limiter(server.url(), Backend::Auto);
    let info = limiter.verify().await.expect("the library answers");
    assert_eq!(info.engine, Backend::Functions, "{info:?}");
    assert!(info.why.contains("module not loaded") && info.why.contains("FCALL"), "{}", info.why);
    assert_eq!(info.version, None);
    assert_limits(&limiter, &unique_key("rl:auto")).await;
    assert!(calls(&server, "fcall") >= 4);
    // A flush (or a failover to a server without the library): the call is answered "Function not
    // found", never ran, and is sent again after the library is loaded.
    let () = redis::cmd("FUNCTION").arg("FLUSH").query(&mut server.conn()).unwrap();
    assert_limits(&limiter, &unique_key("rl:auto")).await;
    assert_eq!(limiter.counts().degraded, 0);
    let top = limiter.top_denied(10).await.unwrap_err();
    assert!(top.to_string().contains("module"), "RL.TOP names what it needs: {top}");
}

/// A stock server's "unknown command" echoes the call's first 128 bytes of arguments: a key with a
/// character across that cut makes a line that is not UTF-8, which redis-rs cannot read. It is still the
/// answer that the module is not there (found by the hostile keys' property on the library engine: the
/// first call was decided by the failure policy as "misconfigured").
#[tokio::test]
async fn a_key_cut_mid_character_by_the_unknown_command_echo_still_finds_the_library() {
    let Some(server) = Server::builder().stock().own() else { return };
    let prefix = unique_key("cut");
    let key = format!("{prefix}{}\u{e9}", "a".repeat(127 - prefix.len()));
    assert_eq!(key.len(), 129, "the cut at byte 128 falls inside the last character");
    assert_limits(&limiter(server.url(), Backend::Auto), &key).await;
}

#[tokio::test]
async fn verify_replaces_an_older_library_and_says_which_it_found() {
    let Some(server) = Server::builder().stock().own() else { return };
    let ours = redis_ratelimit_client::lua::LIBRARY;
    let hash_at = ours.find("  source_hash = \"").unwrap() + "  source_hash = \"".len();
    let our_hash = &ours[hash_at..hash_at + 40];
    // An older library on the server: another version and source.
    let older = ours
        .replacen(&format!("version = \"{}\"", env!("CARGO_PKG_VERSION")), "version = \"0.1.9\"", 1)
        .replacen(our_hash, "0000000000000000000000000000000000000000", 1);
    let _: String = redis::cmd("FUNCTION").arg("LOAD").arg(&older).query(&mut server.conn()).unwrap();
    let limiter = limiter(server.url(), Backend::Functions);
    let info = limiter.verify().await.unwrap();
    let library = info.library.expect("the library's version is read through FCALL");
    assert_eq!(library.found, Some(("0.1.9".into(), "0".repeat(40))));
    assert!(library.replaced && library.current, "{library:?}");
    let now: Vec<String> = redis::cmd("FCALL_RO").arg("rl_version").arg(0).query(&mut server.conn()).unwrap();
    assert_eq!(now, [env!("CARGO_PKG_VERSION"), our_hash]);
    // The second check finds it current and replaces nothing.
    let again = limiter.verify().await.unwrap().library.unwrap();
    assert!(again.current && !again.replaced, "{again:?}");
}

#[tokio::test]
async fn scripts_are_cached_again_after_a_script_flush() {
    let Some(server) = Server::builder().stock().own() else { return };
    let limiter = limiter(server.url(), Backend::Scripts);
    let info = limiter.verify().await.unwrap();
    assert_eq!((info.engine, info.why.as_str()), (Backend::Scripts, "asked for"));
    assert_limits(&limiter, &unique_key("rl:scripts")).await;
    let () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut server.conn()).unwrap();
    assert_limits(&limiter, &unique_key("rl:scripts")).await;
    assert_eq!(calls(&server, "fcall"), 0, "EVALSHA only");
    assert!(calls(&server, "eval") >= 2, "EVAL after each NOSCRIPT");
}

#[tokio::test]
async fn users_allowed_only_fcall_or_only_evalsha_get_the_library() {
    let Some(server) = Server::builder().stock().own() else { return };
    let mut admin = server.conn();
    // docs/lua.md's two ACL lines: the calls, and the commands the library runs on `rl:*` keys (a
    // script runs as its caller).
    let library = ["+get", "+set", "+setrange", "+del", "+pexpireat", "+pexpiretime", "+pttl", "+time"];
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/lua.md")).unwrap();
    for (user, grant) in [("fcall", &["+fcall", "+fcall_ro"][..]), ("evalsha", &["+evalsha"][..])] {
        let line = format!("ACL SETUSER app on >secret ~rl:* {} {}", grant.join(" "), library.join(" "));
        assert!(readme.contains(&line), "docs/lua.md gives the ACL line these users have: {line}");
        let mut acl = redis::cmd("ACL");
        acl.arg(&["SETUSER", user, "on", ">pw", "~rl:*"][..]).arg(grant).arg(&library[..]);
        let () = acl.query(&mut admin).unwrap();
    }
    // What an operator runs once: the library, and the scripts (here through an admin's limiter).
    let admin_url = server.url().to_string();
    limiter(&admin_url, Backend::Functions).verify().await.unwrap();
    let scripts = limiter(&admin_url, Backend::Scripts);
    scripts.verify().await.unwrap();
    let _ = scripts.check(&unique_key("rl:warm"), &bucket(), 1).await;
    for (user, engine) in [("fcall", Backend::Functions), ("evalsha", Backend::Scripts)] {
        let url = format!("redis://{user}:pw@127.0.0.1:{}/", server.port);
        let limiter = limiter(&url, Backend::Auto);
        let info = limiter.verify().await.unwrap_or_else(|e| panic!("{user}: {e}"));
        assert_eq!(info.engine, engine, "{user}: {}", info.why);
        assert!(
            info.why.contains("module not loaded"),
            "{user}: the module's absence is named: {}",
            info.why
        );
        if engine == Backend::Scripts {
            assert!(info.why.contains("NOPERM"), "{user}: the refusal of FCALL is named: {}", info.why);
        }
        assert_limits(&limiter, &unique_key(&format!("rl:{user}"))).await;
    }
}

#[tokio::test]
async fn keys_carry_on_between_the_module_and_the_library() {
    if testkit::skip_module_only("the module's engine beside the library's on one server") {
        return;
    }
    let server = Server::builder().single();
    let key = unique_key("rl:carry");
    let module = limiter(server.url(), Backend::Module);
    let library = limiter(server.url(), Backend::Functions);
    assert_eq!(module.verify().await.unwrap().engine, Backend::Module);
    assert_eq!(module.check(&key, &bucket(), 1).await.remaining, 2);
    assert_eq!(library.check(&key, &bucket(), 1).await.remaining, 1, "the library takes the module's bucket");
    assert_eq!(module.check(&key, &bucket(), 1).await.remaining, 0, "and the module the library's");
    assert!(!library.check(&key, &bucket(), 1).await.allowed);
    let waited = support::builder(FailurePolicy::Closed)
        .backend(Backend::Scripts)
        .connect(server.url())
        .unwrap()
        .take(&unique_key("rl:carry-take"), &bucket(), 5)
        .await;
    assert_eq!(waited.taken, 3, "RL.TAKE through EVALSHA: {waited:?}");
}

#[tokio::test]
async fn the_module_engine_alone_treats_a_stock_server_as_misconfigured() {
    let Some(server) = Server::builder().stock().own() else { return };
    let limiter = limiter(server.url(), Backend::Module);
    let error = limiter.verify().await.unwrap_err();
    assert!(error.to_string().contains("--loadmodule"), "{error}");
    assert_eq!(calls(&server, "fcall"), 0, "asked for the module only");
}

#[tokio::test]
async fn on_redis_6_2_auto_takes_the_evalsha_scripts() {
    let Some(binary) = std::env::var("RL_REDIS62_SERVER").ok().filter(|b| !b.is_empty()) else {
        testkit::skip("no Redis 6.2 here (scripts/servers.sh redis-6.2 builds one; set RL_REDIS62_SERVER)");
        return;
    };
    let Some(server) = Server::builder().stock().binary(&binary).own() else { return };
    let limiter = limiter(server.url(), Backend::Auto);
    let info = limiter.verify().await.expect("the scripts answer");
    assert_eq!(info.engine, Backend::Scripts, "{}", info.why);
    assert!(info.why.contains("module not loaded") && info.why.contains("FCALL unknown"), "{}", info.why);
    assert_limits(&limiter, &unique_key("rl:62")).await;
    let () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut server.conn()).unwrap();
    assert_limits(&limiter, &unique_key("rl:62")).await;
    let wait = limiter.take_within(&unique_key("rl:62-batch"), &bucket(), 1, 2, Duration::ZERO).await;
    assert_eq!(wait.taken, 2, "{wait:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_loads_the_library_again_and_a_failover_chooses_the_engine_again() {
    let Some(mut server) = support::Killable::start_plain() else { return };
    let limiter = support::builder(FailurePolicy::Closed).connect(&server.url()).unwrap();
    assert_eq!(limiter.verify().await.unwrap().engine, Backend::Functions);
    assert!(limiter.check(&unique_key("rl:restart"), &bucket(), 1).await.allowed);
    // Restarted empty: no library. The first call after it is answered "Function not found", never
    // ran, and is sent again once the library is loaded.
    server.start_again();
    let key = unique_key("rl:restart");
    support::wait_until("Redis to decide again", async || !limiter.check(&key, &bucket(), 1).await.degraded)
        .await;
    assert_limits_after(&limiter, &key, 1).await;
    // The server comes back with the module, its clients having seen it gone (a failover to another
    // kind of server): the outage sends the engine back to the start, and the module is asked again.
    server.with_module(true);
    server.kill();
    assert!(limiter.check(&unique_key("rl:gone"), &bucket(), 1).await.degraded);
    server.start_again();
    let key = unique_key("rl:failover");
    support::wait_until("Redis to decide again", async || !limiter.check(&key, &bucket(), 1).await.degraded)
        .await;
    let info = limiter.verify().await.unwrap();
    assert_eq!((info.engine, info.why.as_str()), (Backend::Module, "the module answered"), "{info:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_library_is_loaded_again_without_asking_the_module_again() {
    let Some(mut server) = support::Killable::start_plain() else { return };
    let limiter = support::builder(FailurePolicy::Closed).connect(&server.url()).unwrap();
    assert!(limiter.check(&unique_key("rl:flap"), &bucket(), 1).await.allowed);
    let mut con = redis::Client::open(server.url()).unwrap().get_connection().unwrap();
    // FCALLs answered with an error so far ("Function not found"), and loads, as the server counts them.
    let mut stats = || {
        let fcall = testkit::info_field(&mut con, "commandstats", "cmdstat_fcall").unwrap_or_default();
        let failed =
            fcall.split(',').find_map(|f| f.strip_prefix("failed_calls=")).unwrap().parse::<u64>().unwrap();
        (failed, server.calls("function|load"))
    };
    let before = stats();
    let () = redis::cmd("FUNCTION")
        .arg("FLUSH")
        .query(&mut redis::Client::open(server.url()).unwrap().get_connection().unwrap())
        .unwrap();
    assert_limits_after(&limiter, &unique_key("rl:flap"), 0).await;
    // One "Function not found", one load, and the FCALL again. Asking the module again in between (as
    // before) found the library missing a second time.
    let after = stats();
    assert_eq!((after.0 - before.0, after.1 - before.1), (1, 1));
    assert_eq!(limiter.counts().degraded, 0);
    server.kill();
}

/// After `taken` of the bucket's 3 were taken: the rest allowed, then a denial, all Redis'.
async fn assert_limits_after(limiter: &Limiter, key: &str, taken: u64) {
    for i in taken..3 {
        let d = limiter.check(key, &bucket(), 1).await;
        assert!(d.allowed && !d.degraded && d.remaining == 2 - i, "call {i}: {d:?}");
    }
    assert!(!limiter.check(key, &bucket(), 1).await.allowed);
}

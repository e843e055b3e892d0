//! Mistakes are loud at start-up: `Limiter::verify` against real servers (module loaded or not, the
//! least-privileged ACL user of docs/deployment.md, a user without the limiter commands, nothing
//! listening), a URL without a scheme, and the layer's `build` refusing configurations that cannot work.

mod support;

use redis_ratelimit_client::http::{LayerError, RateLimitLayer};
use redis_ratelimit_client::{
    Backend, CallError, FailurePolicy, Limiter, ModuleVersion, Policy, VerifyError,
};
use support::closed_port;
use testkit::redis;
use testkit::Server;

fn limiter(url: &str) -> Limiter {
    support::builder(FailurePolicy::Closed).connect(url).unwrap()
}

/// `ACL SETUSER name on >secret ~rl:* <category>`, or with the module's commands named one by one
/// where the server has no module ACL categories (Redis 7.0: `ACL CAT ratelimit` is an error there).
fn add_user(server: &Server, name: &str, category: &str, commands: &[&str]) -> String {
    let mut con = server.conn();
    let categories: redis::RedisResult<Vec<String>> =
        redis::cmd("ACL").arg("CAT").arg("ratelimit").query(&mut con);
    let mut cmd = redis::cmd("ACL");
    cmd.arg("SETUSER").arg(name).arg("on").arg(">secret").arg("~rl:*");
    match categories {
        Ok(_) => cmd.arg(category),
        Err(_) => cmd.arg(commands.iter().map(|c| format!("+{c}")).collect::<Vec<_>>()),
    };
    let () = cmd.query(&mut con).unwrap();
    format!("redis://{name}:secret@127.0.0.1:{}/", server.port)
}

fn module_list_version(server: &Server) -> u32 {
    let modules: Vec<Vec<redis::Value>> = redis::cmd("MODULE").arg("LIST").query(&mut server.conn()).unwrap();
    let entry =
        modules.iter().find(|m| m.contains(&redis::Value::BulkString(b"ratelimit".to_vec()))).unwrap();
    let at = entry.iter().position(|v| *v == redis::Value::BulkString(b"ver".to_vec())).unwrap();
    redis::from_redis_value(entry[at + 1].clone()).unwrap()
}

#[tokio::test]
async fn verify_reports_the_module_and_its_version_and_writes_nothing() {
    if testkit::skip_module_only("the module's version in MODULE LIST") {
        return;
    }
    let Some(server) = Server::builder().own() else { return };
    let info = limiter(server.url()).verify().await.unwrap();
    assert_eq!(info.version, Some(ModuleVersion::from_number(module_list_version(&server))));
    assert_eq!(info.commands, ["RL.INSPECT", "RL.TOKEN"]);
    let keys: u64 = redis::cmd("DBSIZE").query(&mut server.conn()).unwrap();
    assert_eq!(keys, 0, "the check reads and peeks, it writes nothing");
}

#[tokio::test]
async fn verify_works_for_the_least_privileged_user_the_readme_recommends() {
    if testkit::skip_module_only("the module's ACL category (+@ratelimit) and its commands") {
        return;
    }
    let Some(server) = Server::builder().own() else { return };
    let all = ["rl.token", "rl.slide", "rl.slidecount", "rl.fixed", "rl.refund", "rl.inspect", "rl.top"];
    let url = add_user(&server, "app", "+@ratelimit", &all);
    // The user really cannot read MODULE LIST.
    let mut app = redis::Client::open(url.as_str()).unwrap().get_connection().unwrap();
    let list: redis::RedisResult<redis::Value> = redis::cmd("MODULE").arg("LIST").query(&mut app);
    assert_eq!(list.unwrap_err().code(), Some("NOPERM"));
    let info = limiter(&url).verify().await.unwrap();
    assert_eq!(info.version, None, "not readable for this user, and not guessed");
    assert_eq!(info.commands, ["RL.INSPECT", "RL.TOKEN"]);
}

#[tokio::test]
async fn verify_names_what_is_missing() {
    // A user that may read (RL.INSPECT) but not limit.
    if testkit::skip_module_only("the module's commands in ACL rules, and a server without it as a fault") {
        return;
    }
    let Some(server) = Server::builder().own() else { return };
    let url = add_user(&server, "support", "+@read", &["rl.inspect", "rl.top"]);
    let err = limiter(&url).verify().await.unwrap_err();
    assert!(matches!(&err, VerifyError::NoPermission { command: "RL.TOKEN", .. }), "{err:?}");
    assert!(err.to_string().contains("+@ratelimit"), "{err}");

    // A server without the module, to a limiter that asks for the module (`Auto` takes the Lua
    // library there: tests/engines.rs).
    let Some(plain) = support::Killable::start_plain() else { return };
    let module_only =
        support::builder(FailurePolicy::Open).backend(Backend::Module).connect(&plain.url()).unwrap();
    let err = module_only.verify().await.unwrap_err();
    assert!(matches!(err, VerifyError::ModuleNotLoaded { command: "RL.INSPECT" }), "{err:?}");
    assert!(err.to_string().contains("--loadmodule"), "{err}");

    // Nothing listening.
    let err = limiter(&format!("redis://127.0.0.1:{}/", closed_port())).verify().await.unwrap_err();
    assert!(matches!(err, VerifyError::Unreachable(CallError::Redis(_))), "{err:?}");
}

#[tokio::test]
async fn a_url_without_a_scheme_says_so() {
    let err = Limiter::builder(FailurePolicy::Open).connect("127.0.0.1:6379").err().unwrap();
    assert!(matches!(&err, CallError::InvalidUrl { url, .. } if url == "127.0.0.1:6379"), "{err:?}");
    assert_eq!(
        err.to_string(),
        "invalid Redis URL \"127.0.0.1:6379\": the scheme is missing: write redis://127.0.0.1:6379/ \
         (rediss://127.0.0.1:6379/ for TLS, or unix:///path/to/redis.sock)"
    );
    assert!(Limiter::builder(FailurePolicy::Open).connect("redis://127.0.0.1:6379/").is_ok());
}

#[tokio::test]
async fn the_layer_refuses_configurations_that_cannot_work() {
    let url = format!("redis://127.0.0.1:{}/", closed_port());
    let layer = || RateLimitLayer::new(limiter(&url));
    let bucket = || Policy::token_bucket(10, 1.0).unwrap();
    let err = |l: RateLimitLayer| l.build().err().unwrap();

    let before = err(layer().cost("export", |_| 5).route("export", "/export", bucket()));
    assert_eq!(before, LayerError::CostBeforeRoute { route: "export".into() });
    assert_eq!(
        before.to_string(),
        "cost for route 'export' was given before the route: call .route(\"export\", ..) first"
    );
    let misspelt = err(layer().route("export", "/export", bucket()).cost("exprot", |_| 5));
    assert_eq!(
        misspelt.to_string(),
        "cost for route 'exprot': there is no route of that name (routes: 'export')"
    );
    let twice = err(layer().route("api", "/api", bucket()).route("api", "/v2", bucket()));
    assert_eq!(twice, LayerError::DuplicateRoute { route: "api".into() });
    let same_prefix = err(layer().route("a", "/api", bucket()).route("b", "/api", bucket()));
    assert!(matches!(same_prefix, LayerError::DuplicatePrefix { .. }), "{same_prefix}");
    assert!(matches!(err(layer().route("a", "api", bucket())), LayerError::InvalidPrefix { .. }));
    assert!(matches!(err(layer().route("all", "/all", bucket())), LayerError::ReservedRouteName { .. }));
    assert_eq!(err(layer().global(bucket()).ipv6_prefix(129)), LayerError::InvalidIpv6Prefix(129));
    // A concurrency policy as a rate limit (it would have no release), or the reverse.
    let leases = || Policy::concurrency(5, std::time::Duration::from_secs(10)).unwrap();
    let as_rate = err(layer().route("export", "/export", leases()));
    assert_eq!(as_rate.to_string(), "limit 'export': expected a rate policy");
    assert!(matches!(err(layer().global(leases())), LayerError::WrongPolicyKind { .. }));
    let as_lease = err(layer().concurrency("export", "/export", bucket()));
    assert_eq!(as_lease.to_string(), "limit 'export': expected a concurrency policy (Policy::concurrency)");
    assert!(matches!(err(layer().global_concurrency(bucket())), LayerError::WrongPolicyKind { .. }));
    assert!(matches!(
        err(layer().concurrency("x", "/x", leases()).concurrency("x", "/y", leases())),
        LayerError::DuplicateRoute { .. }
    ));
    assert_eq!(err(layer()), LayerError::NothingToLimit);

    let good = layer().route("export", "/export", bucket()).cost("export", |_| 5).global(bucket());
    assert!(good.build().is_ok());
}

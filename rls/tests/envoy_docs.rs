//! docs/envoy.md's YAML: the service's configuration loads, and the Envoy bootstrap and the Istio
//! EnvoyFilter parse and refer to each other as they must (the filter's cluster exists and speaks
//! HTTP/2, the filter's domain is the configuration's, every concurrency take has its release). No
//! Envoy here: what Envoy itself would say of them is not tested.

use marked_yaml::{parse_yaml, Node};
use redis_ratelimit_rls::config::{load, Source};
use std::path::Path;

fn blocks() -> Vec<(String, String)> {
    let page =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/envoy.md")).unwrap();
    page.split("```yaml\n")
        .skip(1)
        .filter_map(|b| b.split("```").next())
        .map(|b| (b.lines().next().unwrap_or("").trim_start_matches("# ").to_string(), b.to_string()))
        .collect()
}

/// The node at `path` (mapping keys, or sequence indexes written as numbers).
fn at<'a>(node: &'a Node, path: &[&str]) -> &'a Node {
    let mut n = node;
    for p in path {
        n = match p.parse::<usize>() {
            Ok(i) => n.as_sequence().and_then(|s| s.get_node(i)),
            Err(_) => n.as_mapping().and_then(|m| m.get_node(p)),
        }
        .unwrap_or_else(|| panic!("no {p} in {path:?}"));
    }
    n
}

fn text<'a>(node: &'a Node, path: &[&str]) -> &'a str {
    at(node, path).as_scalar().unwrap_or_else(|| panic!("{path:?} is not a scalar")).as_str()
}

fn seq<'a>(node: &'a Node, path: &[&str]) -> Vec<&'a Node> {
    at(node, path).as_sequence().unwrap_or_else(|| panic!("{path:?} is not a list")).iter().collect()
}

/// The descriptor keys of each `rate_limits` entry, with whether it is applied on stream done.
fn descriptor_keys(rate_limits: &[&Node]) -> Vec<(bool, Vec<String>)> {
    rate_limits
        .iter()
        .map(|entry| {
            let done = entry
                .as_mapping()
                .and_then(|m| m.get_scalar("apply_on_stream_done"))
                .is_some_and(|s| s.as_str() == "true");
            let keys = seq(entry, &["actions"])
                .iter()
                .map(|a| match a.as_mapping().and_then(|m| m.get_node("request_headers")) {
                    Some(h) => text(h, &["descriptor_key"]).to_string(),
                    None => a.as_mapping().unwrap().keys().next().unwrap().as_str().to_string(),
                })
                .collect();
            (done, keys)
        })
        .collect()
}

#[test]
fn the_envoy_and_istio_examples_hold_together() {
    let blocks = blocks();
    let find = |title: &str| {
        let (_, text) =
            blocks.iter().find(|(t, _)| t.starts_with(title)).unwrap_or_else(|| panic!("no '{title}' block"));
        text.clone()
    };
    // The service's configuration.
    let config_text = find("rls config");
    let config = load(&[Source { path: Path::new("docs/envoy.md"), text: &config_text }], false).unwrap();
    let domain: Vec<&str> = config.domains().collect();
    assert_eq!(domain, ["edge"]);

    // The bootstrap.
    let bootstrap = parse_yaml(0, find("envoy bootstrap")).unwrap();
    let hcm = at(
        &bootstrap,
        &["static_resources", "listeners", "0", "filter_chains", "0", "filters", "0", "typed_config"],
    );
    let filters = seq(hcm, &["http_filters"]);
    assert_eq!(text(filters.last().unwrap(), &["name"]), "envoy.filters.http.router", "the router last");
    let rl = filters
        .iter()
        .find(|f| text(f, &["name"]) == "envoy.filters.http.ratelimit")
        .expect("the ratelimit filter");
    assert_eq!(text(rl, &["typed_config", "domain"]), "edge");
    assert_eq!(text(rl, &["typed_config", "rate_limit_service", "transport_api_version"]), "V3");
    let cluster_name =
        text(rl, &["typed_config", "rate_limit_service", "grpc_service", "envoy_grpc", "cluster_name"]);
    let clusters = seq(&bootstrap, &["static_resources", "clusters"]);
    let cluster = clusters.iter().find(|c| text(c, &["name"]) == cluster_name).expect("the filter's cluster");
    let options = at(
        cluster,
        &["typed_extension_protocol_options", "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"],
    );
    at(options, &["explicit_http_config", "http2_protocol_options"]);
    assert_eq!(
        text(
            cluster,
            &[
                "load_assignment",
                "endpoints",
                "0",
                "lb_endpoints",
                "0",
                "endpoint",
                "address",
                "socket_address",
                "port_value"
            ]
        ),
        "8081"
    );
    let route = at(hcm, &["route_config", "virtual_hosts", "0", "routes", "0", "route"]);
    let route_cluster = text(route, &["cluster"]);
    assert!(clusters.iter().any(|c| text(c, &["name"]) == route_cluster));
    let entries = descriptor_keys(&seq(route, &["rate_limits"]));
    // Every descriptor key the route sends is one the configuration limits (or a lease entry).
    for (_, keys) in &entries {
        let limited = keys
            .iter()
            .filter(|k| !k.starts_with("rls_"))
            .all(|k| config_text.contains(&format!("key: {k}")) || k == "remote_address");
        assert!(limited, "{keys:?}");
    }
    // The concurrency pair: the take with rls_lease, the release on stream done with the same keys.
    let take = entries
        .iter()
        .find(|(done, k)| !done && k.last().map(String::as_str) == Some("rls_lease"))
        .expect("a take");
    let give = entries.iter().find(|(done, _)| *done).expect("a release on stream done");
    assert_eq!(give.1.last().map(String::as_str), Some("rls_release"));
    assert_eq!(take.1[..take.1.len() - 1], give.1[..give.1.len() - 1]);

    // The Istio EnvoyFilter.
    let istio = parse_yaml(0, find("istio envoyfilter")).unwrap();
    assert_eq!(
        (text(&istio, &["apiVersion"]), text(&istio, &["kind"])),
        ("networking.istio.io/v1alpha3", "EnvoyFilter")
    );
    let patches = seq(&istio, &["spec", "configPatches"]);
    let filter = patches.iter().find(|p| text(p, &["applyTo"]) == "HTTP_FILTER").expect("the filter patch");
    assert_eq!(text(filter, &["patch", "operation"]), "INSERT_BEFORE");
    assert_eq!(
        text(filter, &["match", "listener", "filterChain", "filter", "subFilter", "name"]),
        "envoy.filters.http.router"
    );
    assert_eq!(text(filter, &["patch", "value", "typed_config", "domain"]), "edge");
    let istio_cluster = text(
        filter,
        &[
            "patch",
            "value",
            "typed_config",
            "rate_limit_service",
            "grpc_service",
            "envoy_grpc",
            "cluster_name",
        ],
    );
    let parts: Vec<&str> = istio_cluster.split('|').collect();
    assert_eq!(
        (parts.len(), parts[0], parts[1], parts[2]),
        (4, "outbound", "8081", ""),
        "Istio's outbound|port||host: {istio_cluster}"
    );
    let vhost = patches.iter().find(|p| text(p, &["applyTo"]) == "VIRTUAL_HOST").expect("the route patch");
    assert!(!descriptor_keys(&seq(vhost, &["patch", "value", "rate_limits"])).is_empty());
}

//! The service's settings from its environment: envoyproxy/ratelimit's variable names where it has
//! them (a drop-in keeps its deployment), `RLS_*` for what this service adds.

use crate::service::{Combine, HeaderNames, Holds, OnFailure, Options};
use redis_ratelimit_client::{Abandon, Backend, FailurePolicy, Limiter, LimiterBuilder};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisTarget {
    /// `REDIS_TYPE=single` (default): `REDIS_URL`.
    Single(String),
    /// `REDIS_TYPE=sentinel`: `REDIS_URL` is `service,host:port,host:port` (envoyproxy/ratelimit's form).
    Sentinel { service: String, sentinels: Vec<String> },
    /// `REDIS_TYPE=cluster`: `REDIS_URL` is `host:port,host:port`.
    Cluster(Vec<String>),
}

/// What the environment asks for; refused with the variable's name when it cannot work.
#[derive(Debug, Clone)]
pub struct Settings {
    pub listen: SocketAddr,
    /// `HOST`, `PORT`: envoyproxy/ratelimit's HTTP port (`/json`, `/healthcheck`, the metrics).
    pub http_listen: SocketAddr,
    /// `PROMETHEUS_ADDR`: the metrics on a listener of their own too (envoyproxy/ratelimit's `:9090`).
    pub prometheus_listen: Option<SocketAddr>,
    /// `PROMETHEUS_PATH` (`/metrics`).
    pub metrics_path: String,
    /// `NEAR_LIMIT_RATIO` (0.8).
    pub near_limit_ratio: f64,
    /// `RLS_MAX_METRIC_KEYS` (1,000): descriptor keys with series of their own; the rest share one
    /// overflow series (crate::metrics).
    pub max_metric_keys: usize,
    /// `LOG_FORMAT=json`: one JSON object a line (envoyproxy/ratelimit's `LOG_FORMAT`), else text.
    pub log_json: bool,
    pub redis: RedisTarget,
    pub config_dir: PathBuf,
    pub merge_domains: bool,
    pub reload_every: Duration,
    pub failure: FailurePolicy,
    pub on_failure: OnFailure,
    pub deadline: Duration,
    pub breaker: (u32, Duration),
    pub backend: Backend,
    pub options: Options,
}

fn url(address: &str) -> String {
    let address = address.trim();
    if address.contains("://") {
        address.to_string()
    } else {
        format!("redis://{address}/")
    }
}

impl Settings {
    pub fn from_env() -> Result<Settings, String> {
        Settings::from_vars(&std::env::vars().collect())
    }

    pub fn from_vars(vars: &HashMap<String, String>) -> Result<Settings, String> {
        let get = |name: &str| vars.get(name).map(|v| v.trim()).filter(|v| !v.is_empty());
        let flag = |name: &str| -> Result<bool, String> {
            match get(name).map(str::to_ascii_lowercase).as_deref() {
                None | Some("false" | "0" | "no") => Ok(false),
                Some("true" | "1" | "yes") => Ok(true),
                Some(other) => Err(format!("{name}={other}: expected true or false")),
            }
        };
        let number = |name: &str, default: u64| -> Result<u64, String> {
            get(name).map_or(Ok(default), |v| {
                v.parse().map_err(|_| format!("{name}={v}: expected a whole number"))
            })
        };
        let host = get("GRPC_HOST").unwrap_or("0.0.0.0");
        let port = number("GRPC_PORT", 8081)?;
        let listen: SocketAddr = format!("{host}:{port}")
            .parse()
            .or_else(|_| format!("[{host}]:{port}").parse())
            .map_err(|_| format!("GRPC_HOST={host} GRPC_PORT={port}: not an address to listen on"))?;
        let address_of = |name: &str, host: &str, port: u64| -> Result<SocketAddr, String> {
            format!("{host}:{port}")
                .parse()
                .or_else(|_| format!("[{host}]:{port}").parse())
                .map_err(|_| format!("{name}={host}:{port}: not an address to listen on"))
        };
        let http_listen = address_of("HOST/PORT", get("HOST").unwrap_or("0.0.0.0"), number("PORT", 8080)?)?;
        let prometheus_listen = match get("PROMETHEUS_ADDR") {
            None => None,
            Some(addr) => {
                let (host, port) = addr.rsplit_once(':').unwrap_or(("", addr));
                let host = if host.is_empty() {
                    "0.0.0.0"
                } else {
                    host.trim_start_matches('[').trim_end_matches(']')
                };
                let port: u64 =
                    port.parse().map_err(|_| format!("PROMETHEUS_ADDR={addr}: expected [host]:port"))?;
                Some(address_of("PROMETHEUS_ADDR", host, port)?)
            }
        };
        let metrics_path = get("PROMETHEUS_PATH").unwrap_or("/metrics").to_string();
        if !metrics_path.starts_with('/') || metrics_path == "/json" || metrics_path == "/healthcheck" {
            return Err(format!(
                "PROMETHEUS_PATH={metrics_path}: expected a path of its own, starting with /"
            ));
        }
        let near_limit_ratio = match get("NEAR_LIMIT_RATIO") {
            None => 0.8,
            Some(v) => v
                .parse::<f64>()
                .ok()
                .filter(|r| (0.0..=1.0).contains(r))
                .ok_or_else(|| format!("NEAR_LIMIT_RATIO={v}: expected a number from 0 to 1"))?,
        };
        let max_metric_keys =
            usize::try_from(number("RLS_MAX_METRIC_KEYS", crate::metrics::DEFAULT_MAX_KEYS as u64)?)
                .unwrap_or(usize::MAX);
        let log_json = match get("LOG_FORMAT").map(str::to_ascii_lowercase).as_deref() {
            None | Some("text") => false,
            Some("json") => true,
            Some(other) => return Err(format!("LOG_FORMAT={other}: expected text or json")),
        };
        let address = get("REDIS_URL").unwrap_or("localhost:6379");
        let redis = match get("REDIS_TYPE").map(str::to_ascii_lowercase).as_deref() {
            None | Some("single") => RedisTarget::Single(url(address)),
            Some("sentinel") => {
                let mut parts = address.split(',');
                let service = parts.next().unwrap_or_default().trim().to_string();
                let sentinels: Vec<String> = parts.map(url).collect();
                if service.is_empty() || sentinels.is_empty() {
                    return Err(format!(
                        "REDIS_URL={address}: with REDIS_TYPE=sentinel, write service,host:port[,host:port]"
                    ));
                }
                RedisTarget::Sentinel { service, sentinels }
            }
            Some("cluster") => RedisTarget::Cluster(address.split(',').map(url).collect()),
            Some(other) => return Err(format!("REDIS_TYPE={other}: expected single, sentinel or cluster")),
        };
        let config_dir = match get("RLS_CONFIG_DIR") {
            Some(dir) => PathBuf::from(dir),
            None => PathBuf::from(get("RUNTIME_ROOT").unwrap_or("/srv/runtime_data/current"))
                .join(get("RUNTIME_SUBDIRECTORY").unwrap_or(""))
                .join("config"),
        };
        let (failure, on_failure) = match get("RLS_FAILURE_MODE").map(str::to_ascii_lowercase).as_deref() {
            // envoyproxy/ratelimit's behaviour: a Redis error is a gRPC error, Envoy's failure_mode_deny decides.
            None | Some("error") => (FailurePolicy::Open, OnFailure::Error),
            Some("ok") => (FailurePolicy::Open, OnFailure::Policy),
            Some("over_limit") => (FailurePolicy::Closed, OnFailure::Policy),
            Some("local") => {
                let instances = u32::try_from(number("RLS_INSTANCES", 1)?).unwrap_or(u32::MAX).max(1);
                (FailurePolicy::LocalFallback { instances }, OnFailure::Policy)
            }
            Some(other) => {
                return Err(format!("RLS_FAILURE_MODE={other}: expected error, ok, over_limit or local"))
            }
        };
        let combine = match get("RLS_COMBINE").map(str::to_ascii_lowercase).as_deref() {
            None | Some("atomic") => Combine::Atomic,
            Some("per_descriptor") => Combine::PerDescriptor,
            Some(other) => return Err(format!("RLS_COMBINE={other}: expected atomic or per_descriptor")),
        };
        let backend = match get("RLS_BACKEND").map(str::to_ascii_lowercase).as_deref() {
            None | Some("auto") => Backend::Auto,
            Some("module") => Backend::Module,
            Some("functions") => Backend::Functions,
            Some("scripts") => Backend::Scripts,
            Some(other) => {
                return Err(format!("RLS_BACKEND={other}: expected auto, module, functions or scripts"))
            }
        };
        let hash = match get("RLS_HASH_TAG").map(str::to_ascii_lowercase).as_deref() {
            None | Some("domain") => crate::plan::HashTag::Domain,
            Some("descriptor") => crate::plan::HashTag::Descriptor,
            Some(other) => return Err(format!("RLS_HASH_TAG={other}: expected domain or descriptor")),
        };
        let headers = if flag("LIMIT_RESPONSE_HEADERS_ENABLED")? {
            let default = HeaderNames::default();
            Some(HeaderNames {
                limit: get("LIMIT_LIMIT_HEADER").map_or(default.limit, str::to_string),
                remaining: get("LIMIT_REMAINING_HEADER").map_or(default.remaining, str::to_string),
                reset: get("LIMIT_RESET_HEADER").map_or(default.reset, str::to_string),
            })
        } else {
            None
        };
        let deadline = Duration::from_millis(number("RLS_DEADLINE_MS", 15)?.max(1));
        let breaker = (
            u32::try_from(number("RLS_BREAKER_FAILURES", 3)?).unwrap_or(u32::MAX),
            Duration::from_millis(number("RLS_BREAKER_COOLDOWN_MS", 5000)?),
        );
        let cluster = matches!(redis, RedisTarget::Cluster(_));
        let holds = Holds {
            entry: get("RLS_HOLD_ENTRY").unwrap_or(Holds::DEFAULT_ENTRY).to_string(),
            ttl: Duration::from_millis(
                number("RLS_HOLD_TTL_MS", Holds::DEFAULT_TTL.as_millis() as u64)?.max(1),
            ),
            abandon: match get("RLS_HOLD_ABANDON").map(str::to_ascii_uppercase).as_deref() {
                None => Abandon::Charge,
                Some(word) => match Abandon::WORDS.iter().position(|w| *w == word) {
                    Some(0) => Abandon::Charge,
                    Some(_) => Abandon::Return,
                    None => {
                        return Err(format!(
                            "RLS_HOLD_ABANDON={word}: expected {}",
                            Abandon::WORDS.join(" or ")
                        ))
                    }
                },
            },
        };
        Ok(Settings {
            listen,
            http_listen,
            prometheus_listen,
            metrics_path,
            near_limit_ratio,
            max_metric_keys,
            log_json,
            redis,
            config_dir,
            merge_domains: flag("MERGE_DOMAIN_CONFIG")?,
            reload_every: Duration::from_millis(number("RLS_RELOAD_MS", 1000)?.max(10)),
            failure,
            on_failure,
            deadline,
            breaker,
            backend,
            options: Options {
                combine,
                on_failure,
                headers,
                global_shadow: flag("SHADOW_MODE")?,
                hash,
                cluster,
                holds,
            },
        })
    }

    fn builder(&self) -> LimiterBuilder {
        Limiter::builder(self.failure)
            .deadline(self.deadline)
            .breaker(self.breaker.0, self.breaker.1)
            .backend(self.backend)
            .name("rls")
    }

    /// The limiter on the Redis this names (connects on first use, except Redis Cluster).
    pub async fn limiter(&self) -> Result<Limiter, String> {
        let builder = self.builder();
        match &self.redis {
            RedisTarget::Single(url) => builder.connect(url),
            RedisTarget::Sentinel { service, sentinels } => {
                let sentinels: Vec<&str> = sentinels.iter().map(String::as_str).collect();
                builder.connect_sentinel(&sentinels, service)
            }
            RedisTarget::Cluster(nodes) => {
                let nodes: Vec<&str> = nodes.iter().map(String::as_str).collect();
                builder.connect_cluster(&nodes).await
            }
        }
        .map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn envoyproxy_s_variables_and_ours() {
        let s = Settings::from_vars(&vars(&[])).unwrap();
        assert_eq!(s.listen, "0.0.0.0:8081".parse().unwrap());
        assert_eq!((s.http_listen, s.prometheus_listen), ("0.0.0.0:8080".parse().unwrap(), None));
        assert_eq!((s.metrics_path.as_str(), s.near_limit_ratio, s.log_json), ("/metrics", 0.8, false));
        assert_eq!(s.max_metric_keys, 1000);
        let s = Settings::from_vars(&vars(&[
            ("PROMETHEUS_ADDR", ":9090"),
            ("PORT", "7000"),
            ("RLS_MAX_METRIC_KEYS", "50"),
            ("LOG_FORMAT", "JSON"),
        ]))
        .unwrap();
        assert_eq!(
            (s.prometheus_listen, s.http_listen.port(), s.log_json),
            (Some("0.0.0.0:9090".parse().unwrap()), 7000, true)
        );
        assert_eq!(s.max_metric_keys, 50);
        assert_eq!(s.redis, RedisTarget::Single("redis://localhost:6379/".into()));
        assert_eq!(s.config_dir, PathBuf::from("/srv/runtime_data/current/config"));
        assert_eq!(
            (s.on_failure, s.options.combine, s.options.headers.is_none()),
            (OnFailure::Error, Combine::Atomic, true)
        );
        let s = Settings::from_vars(&vars(&[
            ("RUNTIME_ROOT", "/data"),
            ("RUNTIME_SUBDIRECTORY", "ratelimit"),
            ("REDIS_TYPE", "SENTINEL"),
            ("REDIS_URL", "mymaster,10.0.0.1:26379,10.0.0.2:26379"),
            ("LIMIT_RESPONSE_HEADERS_ENABLED", "true"),
            ("LIMIT_LIMIT_HEADER", "X-RateLimit-Limit"),
            ("RLS_FAILURE_MODE", "local"),
            ("RLS_INSTANCES", "3"),
            ("RLS_COMBINE", "per_descriptor"),
        ]))
        .unwrap();
        assert_eq!(s.config_dir, PathBuf::from("/data/ratelimit/config"));
        assert_eq!(
            s.redis,
            RedisTarget::Sentinel {
                service: "mymaster".into(),
                sentinels: vec!["redis://10.0.0.1:26379/".into(), "redis://10.0.0.2:26379/".into()]
            }
        );
        let headers = s.options.headers.unwrap();
        assert_eq!(
            (headers.limit.as_str(), headers.remaining.as_str()),
            ("X-RateLimit-Limit", "RateLimit-Remaining")
        );
        assert_eq!(s.failure, FailurePolicy::LocalFallback { instances: 3 });
        assert_eq!(s.options.combine, Combine::PerDescriptor);
        let holds =
            Settings::from_vars(&vars(&[("RLS_HOLD_ABANDON", "return"), ("RLS_HOLD_ENTRY", "x-request-id")]))
                .unwrap()
                .options
                .holds;
        assert_eq!(
            (holds.entry.as_str(), holds.abandon),
            ("x-request-id", redis_ratelimit_client::Abandon::Return)
        );
        for (name, value) in [
            ("RLS_FAILURE_MODE", "maybe"),
            ("REDIS_TYPE", "x"),
            ("SHADOW_MODE", "2"),
            ("GRPC_PORT", "p"),
            ("NEAR_LIMIT_RATIO", "2"),
            ("LOG_FORMAT", "xml"),
            ("PROMETHEUS_PATH", "/json"),
            ("PROMETHEUS_ADDR", "x:y"),
            ("RLS_MAX_METRIC_KEYS", "-1"),
            ("RLS_HOLD_ABANDON", "KEEP"),
            ("RLS_HOLD_TTL_MS", "soon"),
        ] {
            let e = Settings::from_vars(&vars(&[(name, value)])).unwrap_err();
            assert!(e.starts_with(&format!("{name}={value}")), "{e}");
        }
    }
}

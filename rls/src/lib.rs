//! A rate limit service speaking Envoy's gRPC rate limit API (`ShouldRateLimit`) on the redis-ratelimit
//! module or its Lua library, reading envoyproxy/ratelimit's YAML configuration.

pub mod config;
pub mod http;
pub mod json;
pub mod limits;
pub mod metrics;
pub mod plan;
pub mod reload;
pub mod server;
pub mod service;
pub mod settings;
pub mod proto {
    pub mod envoy {
        pub mod service {
            pub mod ratelimit {
                pub mod v3 {
                    tonic::include_proto!("envoy.service.ratelimit.v3");
                }
            }
        }
        pub mod extensions {
            pub mod common {
                pub mod ratelimit {
                    pub mod v3 {
                        tonic::include_proto!("envoy.extensions.common.ratelimit.v3");
                    }
                }
            }
        }
        pub mod config {
            pub mod core {
                pub mod v3 {
                    tonic::include_proto!("envoy.config.core.v3");
                }
            }
        }
        pub mod r#type {
            pub mod v3 {
                tonic::include_proto!("envoy.r#type.v3");
            }
        }
    }
}

//! The JSON form of `RateLimitRequest` and `RateLimitResponse` that envoyproxy/ratelimit's `/json`
//! endpoint reads and writes (Go's protojson): field names in lowerCamelCase (the proto's own names are
//! read too), enums by name (or number), 64-bit integers as strings (numbers read too), durations as
//! `"1.5s"`, fields at their zero value left out, an unknown field refused.

use crate::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use crate::proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use crate::proto::envoy::service::ratelimit::v3::rate_limit_response::{rate_limit::Unit, Code};
use crate::proto::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use serde_json::{Map, Value};

const UNITS: [&str; 8] = ["UNKNOWN", "SECOND", "MINUTE", "HOUR", "DAY", "MONTH", "YEAR", "WEEK"];

/// A request from its JSON; the reason when it is not one.
pub fn request(body: &[u8]) -> Result<RateLimitRequest, String> {
    let value: Value = serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
    let map = object(&value, "RateLimitRequest")?;
    let mut request = RateLimitRequest::default();
    for (name, v) in map {
        match name.as_str() {
            "domain" => request.domain = string(v, name)?,
            "descriptors" => {
                request.descriptors = array(v, name)?.iter().map(descriptor).collect::<Result<_, _>>()?
            }
            "hitsAddend" | "hits_addend" => request.hits_addend = u32_of(number(v, name)?, name)?,
            other => return Err(format!("unknown field {other:?} in RateLimitRequest")),
        }
    }
    Ok(request)
}

fn descriptor(value: &Value) -> Result<RateLimitDescriptor, String> {
    let mut d = RateLimitDescriptor::default();
    for (name, v) in object(value, "RateLimitDescriptor")? {
        match name.as_str() {
            "entries" => {
                for entry in array(v, name)? {
                    let mut e = Entry::default();
                    for (name, v) in object(entry, "Entry")? {
                        match name.as_str() {
                            "key" => e.key = string(v, name)?,
                            "value" => e.value = string(v, name)?,
                            other => return Err(format!("unknown field {other:?} in Entry")),
                        }
                    }
                    d.entries.push(e);
                }
            }
            "limit" => {
                let mut limit = RateLimitOverride::default();
                for (name, v) in object(v, "RateLimitOverride")? {
                    match name.as_str() {
                        "requestsPerUnit" | "requests_per_unit" => {
                            limit.requests_per_unit = u32_of(number(v, name)?, name)?
                        }
                        "unit" => limit.unit = unit(v)?,
                        other => return Err(format!("unknown field {other:?} in RateLimitOverride")),
                    }
                }
                d.limit = Some(limit);
            }
            // google.protobuf.UInt64Value: the number itself.
            "hitsAddend" | "hits_addend" => d.hits_addend = Some(number(v, name)?),
            other => return Err(format!("unknown field {other:?} in RateLimitDescriptor")),
        }
    }
    Ok(d)
}

fn object<'a>(v: &'a Value, what: &str) -> Result<&'a Map<String, Value>, String> {
    v.as_object().ok_or_else(|| format!("{what}: expected an object"))
}

fn array<'a>(v: &'a Value, name: &str) -> Result<&'a Vec<Value>, String> {
    v.as_array().ok_or_else(|| format!("{name}: expected an array"))
}

fn string(v: &Value, name: &str) -> Result<String, String> {
    v.as_str().map(str::to_string).ok_or_else(|| format!("{name}: expected a string"))
}

/// An unsigned integer written as a number or a string, as protojson reads them.
fn number(v: &Value, name: &str) -> Result<u64, String> {
    match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
    .ok_or_else(|| format!("{name}: expected an unsigned integer"))
}

fn u32_of(n: u64, name: &str) -> Result<u32, String> {
    u32::try_from(n).map_err(|_| format!("{name}: {n} is out of range"))
}

fn unit(v: &Value) -> Result<i32, String> {
    match v {
        Value::String(s) => UNITS.iter().position(|u| u == s).map(|i| i as i32),
        Value::Number(n) => n.as_u64().filter(|n| *n < UNITS.len() as u64).map(|n| n as i32),
        _ => None,
    }
    .ok_or_else(|| format!("unit: {v} is not a RateLimitUnit"))
}

fn code_name(code: i32) -> &'static str {
    match Code::try_from(code) {
        Ok(Code::Ok) => "OK",
        Ok(Code::OverLimit) => "OVER_LIMIT",
        _ => "UNKNOWN",
    }
}

/// A protobuf Duration as protojson writes it: seconds, and 3, 6 or 9 digits of fraction when there is one.
fn duration(d: &prost_types::Duration) -> String {
    if d.nanos == 0 {
        return format!("{}s", d.seconds);
    }
    let nanos = d.nanos.unsigned_abs();
    let fraction = if nanos.is_multiple_of(1_000_000) {
        format!("{:03}", nanos / 1_000_000)
    } else if nanos.is_multiple_of(1_000) {
        format!("{:06}", nanos / 1_000)
    } else {
        format!("{nanos:09}")
    };
    format!("{}.{}s", d.seconds, fraction)
}

/// A response's JSON.
pub fn response(r: &RateLimitResponse) -> Value {
    let mut out = Map::new();
    if r.overall_code != 0 {
        out.insert("overallCode".into(), code_name(r.overall_code).into());
    }
    let statuses: Vec<Value> = r
        .statuses
        .iter()
        .map(|s| {
            let mut status = Map::new();
            if s.code != 0 {
                status.insert("code".into(), code_name(s.code).into());
            }
            if let Some(limit) = &s.current_limit {
                let mut l = Map::new();
                if !limit.name.is_empty() {
                    l.insert("name".into(), limit.name.clone().into());
                }
                if limit.requests_per_unit != 0 {
                    l.insert("requestsPerUnit".into(), limit.requests_per_unit.into());
                }
                if limit.unit != Unit::Unknown as i32 {
                    let name = UNITS.get(limit.unit as usize).copied().unwrap_or("UNKNOWN");
                    l.insert("unit".into(), name.into());
                }
                status.insert("currentLimit".into(), Value::Object(l));
            }
            if s.limit_remaining != 0 {
                status.insert("limitRemaining".into(), s.limit_remaining.into());
            }
            if let Some(d) = &s.duration_until_reset {
                status.insert("durationUntilReset".into(), duration(d).into());
            }
            Value::Object(status)
        })
        .collect();
    if !statuses.is_empty() {
        out.insert("statuses".into(), statuses.into());
    }
    let headers: Vec<Value> = r
        .response_headers_to_add
        .iter()
        .map(|h| serde_json::json!({"key": h.key, "value": h.value}))
        .collect();
    if !headers.is_empty() {
        out.insert("responseHeadersToAdd".into(), headers.into());
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protojson_s_forms() {
        let r = request(
            br#"{"domain":"d","hits_addend":"2","descriptors":[{"entries":[{"key":"k","value":"v"}],
                 "limit":{"requestsPerUnit":3,"unit":"MINUTE"},"hitsAddend":"5"}]}"#,
        )
        .unwrap();
        assert_eq!((r.domain.as_str(), r.hits_addend), ("d", 2));
        let d = &r.descriptors[0];
        assert_eq!((d.entries[0].key.as_str(), d.hits_addend), ("k", Some(5)));
        assert_eq!(d.limit, Some(RateLimitOverride { requests_per_unit: 3, unit: 2 }));
        for bad in [
            r#"{"domain":1}"#,
            r#"{"nope":1}"#,
            r#"{"hitsAddend":-1}"#,
            "[",
            r#"{"descriptors":[{"limit":{"unit":"FORTNIGHT"}}]}"#,
        ] {
            assert!(request(bad.as_bytes()).is_err(), "{bad}");
        }
        let d = |seconds, nanos| duration(&prost_types::Duration { seconds, nanos });
        assert_eq!(
            (d(60, 0), d(1, 500_000_000), d(0, 1_500), d(0, 7)),
            ("60s".into(), "1.500s".into(), "0.000001500s".into(), "0.000000007s".into())
        );
    }
}

//! What the layer tells the caller: `RateLimit-*` headers on every response, and for a denial a 429
//! with `Retry-After` and an RFC 9457 problem body.

use crate::decision::Decision;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, Response, StatusCode};

pub const RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("ratelimit-limit");
pub const RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("ratelimit-remaining");
pub const RATELIMIT_RESET: HeaderName = HeaderName::from_static("ratelimit-reset");
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
pub const DEGRADED: HeaderName = HeaderName::from_static("x-ratelimit-degraded");

/// The problem type of an ordinary denial.
pub const RATE_LIMITED: &str = "urn:redis-ratelimit:rate-limited";
/// The problem type of a request that costs more than the limit: it can never be allowed.
pub const COST_EXCEEDS_LIMIT: &str = "urn:redis-ratelimit:cost-exceeds-limit";

/// The limit a decision describes, for headers and problem bodies.
pub(crate) struct Described<'a> {
    pub name: &'a str,
    pub window_secs: u64,
    pub cost: u64,
}

fn number(n: u64) -> HeaderValue {
    HeaderValue::from(n)
}

/// Adds the rate limit headers of `d` to `headers`.
pub(crate) fn add_headers(headers: &mut HeaderMap, d: &Decision, limit: &Described<'_>, structured: bool) {
    headers.insert(RATELIMIT_LIMIT, number(d.limit));
    headers.insert(RATELIMIT_REMAINING, number(d.remaining));
    headers.insert(RATELIMIT_RESET, number(d.reset_after_secs()));
    if structured {
        // draft-ietf-httpapi-ratelimit-headers: quota and window of the policy; remaining and reset.
        let name = limit.name.replace(['"', '\\'], "");
        let policy = format!("\"{name}\";q={};w={}", d.limit, limit.window_secs);
        let state = format!("\"{name}\";r={};t={}", d.remaining, d.reset_after_secs());
        if let (Ok(p), Ok(s)) = (HeaderValue::from_str(&policy), HeaderValue::from_str(&state)) {
            headers.insert(RATELIMIT_POLICY, p);
            headers.insert(RATELIMIT, s);
        }
    }
    if d.degraded {
        headers.insert(DEGRADED, HeaderValue::from_static("true"));
    }
}

/// The 429 answer. An ordinary denial says when to retry (`Retry-After`, whole seconds >= 1); a request
/// that costs more than the limit gets no `Retry-After` (waiting would not help) and its own problem type.
pub(crate) fn denied<B: From<String>>(d: &Decision, limit: &Described<'_>, structured: bool) -> Response<B> {
    let mut body = serde_json::json!({
        "status": 429,
        "limit": limit.name,
        "quota": d.limit,
        "remaining": d.remaining,
    });
    let mut response = Response::new(B::from(String::new()));
    match d.retry_after_secs() {
        Some(secs) => {
            body["type"] = RATE_LIMITED.into();
            body["title"] = "Too Many Requests".into();
            body["detail"] = format!("rate limit '{}' exceeded: retry in {secs} s", limit.name).into();
            body["retry_after_seconds"] = secs.into();
            response.headers_mut().insert(RETRY_AFTER, number(secs));
        }
        None => {
            body["type"] = COST_EXCEEDS_LIMIT.into();
            body["title"] = "Request costs more than the limit".into();
            body["detail"] = format!(
                "this request costs {} and limit '{}' allows {}: it can never be allowed, do not retry it",
                limit.cost, limit.name, d.limit
            )
            .into();
            body["cost"] = limit.cost.into();
        }
    }
    *response.body_mut() = B::from(body.to_string());
    *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
    add_headers(headers, d, limit, structured);
    response
}

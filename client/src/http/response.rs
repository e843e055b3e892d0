//! What the layer tells the caller: `RateLimit-*` headers on every response, and for a denial a 429
//! with `Retry-After` and an RFC 9457 problem body (a 403 for a caller on the deny list).

use crate::decision::Decision;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, Response, StatusCode};
use std::sync::Arc;

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
/// The problem type of a denial by [`FailurePolicy::Closed`](crate::FailurePolicy::Closed): Redis
/// could not decide, so the request was not checked at all. Not the caller's overuse.
pub const UNAVAILABLE: &str = "urn:redis-ratelimit:unavailable";
/// The problem type of a denial by [`FailurePolicy::Closed`](crate::FailurePolicy::Closed) while Redis
/// answers that the limiter cannot work with it as configured (the module not loaded, a renamed
/// command, an ACL that refuses it): not an outage, and not the caller's overuse. The operator has
/// something to fix; the limiter's log says what.
pub const MISCONFIGURED: &str = "urn:redis-ratelimit:misconfigured";
/// The problem type of a denial by a concurrency limit: too many of the caller's requests in flight.
pub const CONCURRENCY_LIMITED: &str = "urn:redis-ratelimit:concurrency-limited";
/// The problem type of a request from a caller on the deny list ([`AccessLists`](super::AccessLists)):
/// `403 Forbidden`, not a rate limit, so no `Retry-After` and no `RateLimit-*` fields.
pub const DENIED: &str = "urn:redis-ratelimit:denied";

/// The limit a decision describes, for headers and problem bodies.
pub struct Described<'a> {
    pub name: &'a str,
    pub window_secs: u64,
    pub cost: u64,
    /// A rate policy: the `RateLimit-*` fields describe it. A concurrency limit has none of them.
    pub rate: bool,
}

/// The `RateLimit-*` fields of a served request: the decision of the rate limit it was held to,
/// written onto the response once the service has answered.
pub struct RateHeaders {
    pub decision: Decision,
    pub limit: Arc<str>,
    pub window_secs: u64,
    pub cost: u64,
    pub structured: bool,
}

impl RateHeaders {
    pub fn add_to(&self, headers: &mut HeaderMap) {
        let described =
            Described { name: &self.limit, window_secs: self.window_secs, cost: self.cost, rate: true };
        add_headers(headers, &self.decision, &described, self.structured);
    }
}

fn number(n: u64) -> HeaderValue {
    HeaderValue::from(n)
}

/// Adds the rate limit headers of `d` to `headers`. A degraded decision was made without Redis: the
/// policy is known, what is left of it and when it resets are not, so those headers are left out.
pub fn add_headers(headers: &mut HeaderMap, d: &Decision, limit: &Described<'_>, structured: bool) {
    if !limit.rate {
        if d.degraded {
            headers.insert(DEGRADED, HeaderValue::from_static("true"));
        }
        return;
    }
    headers.insert(RATELIMIT_LIMIT, number(d.limit));
    if !d.degraded {
        headers.insert(RATELIMIT_REMAINING, number(d.remaining));
        headers.insert(RATELIMIT_RESET, number(d.reset_after_secs()));
    }
    if structured {
        // draft-ietf-httpapi-ratelimit-headers: quota and window of the policy; remaining and reset.
        let name = limit.name.replace(['"', '\\'], "");
        let policy = format!("\"{name}\";q={};w={}", d.limit, limit.window_secs);
        if let Ok(p) = HeaderValue::from_str(&policy) {
            headers.insert(RATELIMIT_POLICY, p);
        }
        let state = format!("\"{name}\";r={};t={}", d.remaining, d.reset_after_secs());
        if let (false, Ok(s)) = (d.degraded, HeaderValue::from_str(&state)) {
            headers.insert(RATELIMIT, s);
        }
    }
    if d.degraded {
        headers.insert(DEGRADED, HeaderValue::from_static("true"));
    }
}

/// The 429 answer. An ordinary denial says when to retry (`Retry-After`, whole seconds >= 1); a request
/// that costs more than the limit gets no `Retry-After` (waiting would not help) and its own problem type.
pub fn denied<B: From<String>>(d: &Decision, limit: &Described<'_>, structured: bool) -> Response<B> {
    let mut body = serde_json::json!({
        "status": 429,
        "limit": limit.name,
        "quota": d.limit,
    });
    if !d.degraded {
        body["remaining"] = d.remaining.into();
    }
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

/// The answer to a caller on the deny list: 403 with its own problem type, nothing to wait for.
pub fn forbidden<B: From<String>>() -> Response<B> {
    let body = serde_json::json!({
        "type": DENIED,
        "title": "Forbidden",
        "status": 403,
        "detail": "requests from this caller are refused",
    });
    let mut response = Response::new(B::from(body.to_string()));
    *response.status_mut() = StatusCode::FORBIDDEN;
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
    response
}

/// The answer when Redis could not decide and the failure policy is `Closed`: the request was not
/// checked, so it says so (its own problem type, 429 or the status the layer was given, e.g. 503),
/// with the `Retry-After` the limiter suggests, instead of blaming the caller's overuse.
pub fn unavailable<B: From<String>>(
    d: &Decision,
    limit: &Described<'_>,
    structured: bool,
    status: StatusCode,
    misconfigured: bool,
) -> Response<B> {
    let secs = d.retry_after_secs().unwrap_or(1);
    let what = if limit.rate { "rate limit" } else { "concurrency limit" };
    let (kind, title, why) = if misconfigured {
        (MISCONFIGURED, "Rate limiter misconfigured", "the rate limiter is misconfigured and fails closed")
    } else {
        (UNAVAILABLE, "Rate limiter unavailable", "the rate limiter is unavailable and fails closed")
    };
    let body = serde_json::json!({
        "type": kind,
        "title": title,
        "status": status.as_u16(),
        "detail": format!("{what} '{}' could not be checked: {why}; retry in {secs} s", limit.name),
        "limit": limit.name,
        "retry_after_seconds": secs,
    });
    let mut response = Response::new(B::from(body.to_string()));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
    headers.insert(RETRY_AFTER, number(secs));
    add_headers(headers, d, limit, structured);
    response
}

/// The 429 of a concurrency limit: so many requests in flight already. `Retry-After` is when the
/// soonest held lease ends, an upper bound (a request that finishes frees its slot sooner). No
/// `RateLimit-*` fields: those describe the rate limits.
pub fn concurrency_limited<B: From<String>>(d: &Decision, limit: &Described<'_>) -> Response<B> {
    let secs = d.retry_after_secs().unwrap_or(1);
    let body = serde_json::json!({
        "type": CONCURRENCY_LIMITED,
        "title": "Too Many Requests In Flight",
        "status": 429,
        "detail": format!(
            "concurrency limit '{}' reached: {} requests in flight at most; retry in {secs} s at the latest",
            limit.name, d.limit
        ),
        "limit": limit.name,
        "in_flight_limit": d.limit,
        "retry_after_seconds": secs,
    });
    let mut response = Response::new(B::from(body.to_string()));
    *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
    headers.insert(RETRY_AFTER, number(secs));
    if d.degraded {
        headers.insert(DEGRADED, HeaderValue::from_static("true"));
    }
    response
}

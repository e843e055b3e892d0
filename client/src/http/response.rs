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

/// A problem body's fixed texts: its `title`, and its `detail` as a template whose `{placeholders}`
/// [`fill`] replaces: `{name}` (the limit's), `{what}` ([`RATE_LIMIT_WHAT`] or
/// [`CONCURRENCY_LIMIT_WHAT`]), `{limit}` (the decision's), `{cost}` (the request's) and
/// `{retry_after_secs}`. The contract's `http.problems` holds each one under `name`, which is also
/// its type's name in `http.problem_types`; every client renders its bodies from there.
pub struct Problem {
    pub name: &'static str,
    pub type_uri: &'static str,
    pub title: &'static str,
    pub detail: &'static str,
}

pub const RATE_LIMITED_PROBLEM: Problem = Problem {
    name: "rate_limited",
    type_uri: RATE_LIMITED,
    title: "Too Many Requests",
    detail: "rate limit '{name}' exceeded: retry in {retry_after_secs} s",
};
pub const COST_EXCEEDS_LIMIT_PROBLEM: Problem = Problem {
    name: "cost_exceeds_limit",
    type_uri: COST_EXCEEDS_LIMIT,
    title: "Request costs more than the limit",
    detail: "this request costs {cost} and limit '{name}' allows {limit}: it can never be allowed, do not retry it",
};
pub const UNAVAILABLE_PROBLEM: Problem = Problem {
    name: "unavailable",
    type_uri: UNAVAILABLE,
    title: "Rate limiter unavailable",
    detail: "{what} '{name}' could not be checked: the rate limiter is unavailable and fails closed; \
             retry in {retry_after_secs} s",
};
pub const MISCONFIGURED_PROBLEM: Problem = Problem {
    name: "misconfigured",
    type_uri: MISCONFIGURED,
    title: "Rate limiter misconfigured",
    detail: "{what} '{name}' could not be checked: the rate limiter is misconfigured and fails closed; \
             retry in {retry_after_secs} s",
};
pub const CONCURRENCY_LIMITED_PROBLEM: Problem = Problem {
    name: "concurrency_limited",
    type_uri: CONCURRENCY_LIMITED,
    title: "Too Many Requests In Flight",
    detail: "concurrency limit '{name}' reached: {limit} requests in flight at most; \
             retry in {retry_after_secs} s at the latest",
};
pub const DENIED_PROBLEM: Problem = Problem {
    name: "denied",
    type_uri: DENIED,
    title: "Forbidden",
    detail: "requests from this caller are refused",
};
/// Every problem the layer answers with.
pub const PROBLEMS: [&Problem; 6] = [
    &RATE_LIMITED_PROBLEM,
    &COST_EXCEEDS_LIMIT_PROBLEM,
    &UNAVAILABLE_PROBLEM,
    &MISCONFIGURED_PROBLEM,
    &CONCURRENCY_LIMITED_PROBLEM,
    &DENIED_PROBLEM,
];
/// `{what}` for a rate limit (the contract's `http.problem_what.rate`).
pub const RATE_LIMIT_WHAT: &str = "rate limit";
/// `{what}` for a concurrency limit (the contract's `http.problem_what.concurrency`).
pub const CONCURRENCY_LIMIT_WHAT: &str = "concurrency limit";

/// `template` with each `{placeholder}` that `values` names replaced by its value, in one pass: a
/// value is written as it is, never read as a template (a limit may be named `{cost}`). Any other
/// brace stays as it is.
pub fn fill(template: &str, values: &[(&str, &dyn std::fmt::Display)]) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(template.len() + 32);
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let found = after.find('}').and_then(|close| {
            values.iter().find(|(name, _)| *name == &after[..close]).map(|(_, value)| (close, value))
        });
        match found {
            Some((close, value)) => {
                let _ = write!(out, "{value}");
                rest = &after[close + 1..];
            }
            None => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

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
    let name = &limit.name;
    match d.retry_after_secs() {
        Some(secs) => {
            let problem = &RATE_LIMITED_PROBLEM;
            body["type"] = problem.type_uri.into();
            body["title"] = problem.title.into();
            body["detail"] = fill(problem.detail, &[("name", name), ("retry_after_secs", &secs)]).into();
            body["retry_after_seconds"] = secs.into();
            response.headers_mut().insert(RETRY_AFTER, number(secs));
        }
        None => {
            let problem = &COST_EXCEEDS_LIMIT_PROBLEM;
            body["type"] = problem.type_uri.into();
            body["title"] = problem.title.into();
            let values: [(&str, &dyn std::fmt::Display); 3] =
                [("name", name), ("cost", &limit.cost), ("limit", &d.limit)];
            body["detail"] = fill(problem.detail, &values).into();
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
    let problem = &DENIED_PROBLEM;
    let body = serde_json::json!({
        "type": problem.type_uri,
        "title": problem.title,
        "status": 403,
        "detail": problem.detail,
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
    let what = if limit.rate { RATE_LIMIT_WHAT } else { CONCURRENCY_LIMIT_WHAT };
    let problem = if misconfigured { &MISCONFIGURED_PROBLEM } else { &UNAVAILABLE_PROBLEM };
    let values: [(&str, &dyn std::fmt::Display); 3] =
        [("what", &what), ("name", &limit.name), ("retry_after_secs", &secs)];
    let body = serde_json::json!({
        "type": problem.type_uri,
        "title": problem.title,
        "status": status.as_u16(),
        "detail": fill(problem.detail, &values),
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
    let problem = &CONCURRENCY_LIMITED_PROBLEM;
    let values: [(&str, &dyn std::fmt::Display); 3] =
        [("name", &limit.name), ("limit", &d.limit), ("retry_after_secs", &secs)];
    let body = serde_json::json!({
        "type": problem.type_uri,
        "title": problem.title,
        "status": 429,
        "detail": fill(problem.detail, &values),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_replaces_named_placeholders_once() {
        let values: [(&str, &dyn std::fmt::Display); 2] = [("name", &"{cost}"), ("cost", &3)];
        assert_eq!(fill("'{name}' costs {cost} {other} {", &values), "'{cost}' costs 3 {other} {");
    }

    #[test]
    fn every_detail_names_only_known_placeholders() {
        let known = ["name", "what", "limit", "cost", "retry_after_secs"];
        for problem in PROBLEMS {
            let mut rest = problem.detail;
            while let Some((_, after)) = rest.split_once('{') {
                let (placeholder, tail) = after.split_once('}').expect("a closed placeholder");
                assert!(known.contains(&placeholder), "{}: {{{placeholder}}}", problem.name);
                rest = tail;
            }
        }
    }
}

//! The rate limit headers LLM clients read (OpenAI's, which LiteLLM and the SDKs' retry logic read):
//! `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`, and beside them the IETF draft's
//! `RateLimit-Policy` and `RateLimit` fields with a policy per unit (`"requests"`, `"tokens"`). For a
//! gateway in front of an LLM: one verdict for its request limit, one for its token budget (a hold's
//! reply, `RL.HOLD`).

/// Each header's name: `{field}` one of [`FIELDS`], `{unit}` one of [`UNITS`].
pub const NAME: &str = "x-ratelimit-{field}-{unit}";
pub const FIELDS: [&str; 3] = ["limit", "remaining", "reset"];
pub const UNITS: [&str; 2] = ["requests", "tokens"];

/// One unit's state: its limit, what is left, when it is whole again and its window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub limit: u64,
    pub remaining: u64,
    pub reset_ms: i64,
    pub window_secs: u64,
}

/// A duration as these headers write it (OpenAI's, Go's form): `0s`, `850ms`, `1s`, `1.5s`, `6m0s`,
/// `1h2m3s`; below a minute, seconds with up to three decimals.
pub fn duration(ms: i64) -> String {
    let ms = ms.max(0);
    if ms == 0 {
        return "0s".into();
    }
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let (h, m) = (ms / 3_600_000, ms / 60_000 % 60);
    let secs = ms % 60_000;
    let s = if secs % 1000 == 0 {
        (secs / 1000).to_string()
    } else {
        format!("{}.{:03}", secs / 1000, secs % 1000).trim_end_matches('0').to_string()
    };
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, m) => format!("{m}m{s}s"),
        (h, m) => format!("{h}h{m}m{s}s"),
    }
}

/// The headers for the units given (`requests`, `tokens`: None leaves a unit out), in order: the
/// three of each unit, then `RateLimit-Policy` and `RateLimit` listing each unit's policy.
pub fn headers(requests: Option<Budget>, tokens: Option<Budget>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let (mut policies, mut states) = (Vec::new(), Vec::new());
    for (unit, budget) in UNITS.iter().zip([requests, tokens]) {
        let Some(b) = budget else { continue };
        let values = [b.limit.to_string(), b.remaining.to_string(), duration(b.reset_ms)];
        for (field, value) in FIELDS.iter().zip(values) {
            out.push((NAME.replace("{field}", field).replace("{unit}", unit), value));
        }
        policies.push(format!("\"{unit}\";q={};w={}", b.limit, b.window_secs));
        let reset_secs = (b.reset_ms.max(0) + 999) / 1000;
        states.push(format!("\"{unit}\";r={};t={reset_secs}", b.remaining));
    }
    if !policies.is_empty() {
        out.push((super::response::RATELIMIT_POLICY.as_str().into(), policies.join(", ")));
        out.push((super::response::RATELIMIT.as_str().into(), states.join(", ")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_openai_writes_them() {
        let cases = [(0, "0s"), (-5, "0s"), (850, "850ms"), (1000, "1s"), (1500, "1.5s"), (1234, "1.234s")];
        for (ms, text) in cases {
            assert_eq!(duration(ms), text);
        }
        assert_eq!(duration(360_000), "6m0s");
        assert_eq!(duration(3_723_400), "1h2m3.4s");
    }

    #[test]
    fn both_units_and_the_draft_s_fields() {
        let requests = Budget { limit: 60, remaining: 59, reset_ms: 1000, window_secs: 60 };
        let tokens = Budget { limit: 150_000, remaining: 149_000, reset_ms: 400, window_secs: 60 };
        let h = headers(Some(requests), Some(tokens));
        assert_eq!(h[0], ("x-ratelimit-limit-requests".into(), "60".into()));
        assert_eq!(h[5], ("x-ratelimit-reset-tokens".into(), "400ms".into()));
        assert_eq!(h[6].1, "\"requests\";q=60;w=60, \"tokens\";q=150000;w=60");
        assert_eq!(h[7].1, "\"requests\";r=59;t=1, \"tokens\";r=149000;t=1");
        assert_eq!(headers(None, Some(tokens)).len(), 5);
        assert!(headers(None, None).is_empty());
    }
}

package httplimit

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	ratelimit "github.com/redis-ratelimit/redis-ratelimit/go"
)

// What the middleware tells the caller: RateLimit-* headers on every limited response, and for a
// denial a 429 with Retry-After and an RFC 9457 problem body; byte for byte the Rust layer's
// answers (the contract's http vectors). Names and problem types are the contract's. Header names
// are written as the contract spells them (lower case), as HTTP/2 and the Rust layer send them.

var names = ratelimit.HTTP()

// Described is the limit a decision describes, for headers and problem bodies.
type Described struct {
	Name       string
	WindowSecs int64
	Cost       uint64
	// Rate: a rate policy, which the RateLimit-* fields describe. A concurrency limit has none.
	Rate bool
}

// Answer is a complete response the middleware sends by itself.
type Answer struct {
	Status  int
	Headers [][2]string
	Body    []byte
}

// Write sends the answer.
func (a Answer) Write(w http.ResponseWriter) {
	h := w.Header()
	for _, kv := range a.Headers {
		h[kv[0]] = []string{kv[1]}
	}
	w.WriteHeader(a.Status)
	_, _ = w.Write(a.Body)
}

// problemBody is JSON as serde_json writes a json! object: keys sorted, no spaces, UTF-8 as it is.
func problemBody(body map[string]any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(body)
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

type headerSet struct{ list [][2]string }

func (s *headerSet) put(name, value string) {
	for i := range s.list {
		if s.list[i][0] == name {
			s.list[i][1] = value
			return
		}
	}
	s.list = append(s.list, [2]string{name, value})
}

func isHeaderText(s string) bool {
	for _, c := range s {
		if !(c == '\t' || (c >= ' ' && c <= '~')) {
			return false
		}
	}
	return true
}

func structuredField(format, name string, values map[string]string) string {
	out := strings.ReplaceAll(format, "{name}", name)
	for k, v := range values {
		out = strings.ReplaceAll(out, "{"+k+"}", v)
	}
	return out
}

// rateHeaders adds the rate limit headers of d. A degraded decision was made without Redis: the
// policy is known, what is left of it and when it resets are not, so those are left out.
func rateHeaders(s *headerSet, d ratelimit.Decision, limit Described, structured bool) {
	h := names.Headers
	if !limit.Rate {
		if d.Degraded {
			s.put(h.Degraded, names.DegradedValue)
		}
		return
	}
	s.put(h.Limit, strconv.FormatUint(d.Limit, 10))
	reset := strconv.FormatInt(d.ResetAfterSecs(), 10)
	if !d.Degraded {
		s.put(h.Remaining, strconv.FormatUint(d.Remaining, 10))
		s.put(h.Reset, reset)
	}
	if structured {
		name := limit.Name
		for _, drop := range names.Structured.NameDrops {
			name = strings.ReplaceAll(name, drop, "")
		}
		if isHeaderText(name) {
			s.put(h.Policy, structuredField(names.Structured.Policy, name, map[string]string{
				"limit": strconv.FormatUint(d.Limit, 10), "window_secs": strconv.FormatInt(limit.WindowSecs, 10)}))
			if !d.Degraded {
				s.put(h.State, structuredField(names.Structured.State, name, map[string]string{
					"remaining": strconv.FormatUint(d.Remaining, 10), "reset_secs": reset}))
			}
		}
	}
	if d.Degraded {
		s.put(h.Degraded, names.DegradedValue)
	}
}

// ServedHeaders are the headers of a served response.
func ServedHeaders(d ratelimit.Decision, limit Described, structured bool) [][2]string {
	var s headerSet
	rateHeaders(&s, d, limit, structured)
	return s.list
}

// problemTexts writes a problem's type, title and detail into body: the contract's texts, the detail's
// placeholders filled with values.
func problemTexts(body map[string]any, typ string, p ratelimit.Problem, values map[string]string) {
	body["type"], body["title"], body["detail"] = typ, p.Title, p.Fill(values)
}

func problem(status int, body map[string]any, s *headerSet) Answer {
	all := append([][2]string{{"content-type", names.Headers.ContentType}}, s.list...)
	return Answer{Status: status, Headers: all, Body: problemBody(body)}
}

// Denied is the 429 answer. An ordinary denial says when to retry (Retry-After, whole seconds >=
// 1); a request that costs more than the limit gets no Retry-After and its own problem type.
func Denied(d ratelimit.Decision, limit Described, structured bool) Answer {
	body := map[string]any{"status": 429, "limit": limit.Name, "quota": d.Limit}
	if !d.Degraded {
		body["remaining"] = d.Remaining
	}
	var s headerSet
	if secs, ok := d.RetryAfterSecs(); ok {
		problemTexts(body, names.ProblemTypes.RateLimited, names.Problems.RateLimited,
			map[string]string{"name": limit.Name, "retry_after_secs": strconv.FormatInt(secs, 10)})
		body["retry_after_seconds"] = secs
		s.put(names.Headers.RetryAfter, strconv.FormatInt(secs, 10))
	} else {
		problemTexts(body, names.ProblemTypes.CostExceedsLimit, names.Problems.CostExceedsLimit, map[string]string{
			"name": limit.Name, "cost": strconv.FormatUint(limit.Cost, 10), "limit": strconv.FormatUint(d.Limit, 10)})
		body["cost"] = limit.Cost
	}
	rateHeaders(&s, d, limit, structured)
	return problem(429, body, &s)
}

// Unavailable is the answer when Redis could not decide and the failure policy is closed.
func Unavailable(d ratelimit.Decision, limit Described, structured bool, status int, misconfigured bool) Answer {
	secs, ok := d.RetryAfterSecs()
	if !ok {
		secs = 1
	}
	what := names.ProblemWhat.Concurrency
	if limit.Rate {
		what = names.ProblemWhat.Rate
	}
	kind, texts := names.ProblemTypes.Unavailable, names.Problems.Unavailable
	if misconfigured {
		kind, texts = names.ProblemTypes.Misconfigured, names.Problems.Misconfigured
	}
	body := map[string]any{"status": status, "limit": limit.Name, "retry_after_seconds": secs}
	problemTexts(body, kind, texts, map[string]string{"what": what, "name": limit.Name, "retry_after_secs": strconv.FormatInt(secs, 10)})
	var s headerSet
	s.put(names.Headers.RetryAfter, strconv.FormatInt(secs, 10))
	rateHeaders(&s, d, limit, structured)
	return problem(status, body, &s)
}

// ConcurrencyLimited is the 429 of a concurrency limit: so many requests in flight already. No
// RateLimit-* fields: those describe rate limits.
func ConcurrencyLimited(d ratelimit.Decision, limit Described) Answer {
	secs, ok := d.RetryAfterSecs()
	if !ok {
		secs = 1
	}
	body := map[string]any{"status": 429, "limit": limit.Name, "in_flight_limit": d.Limit, "retry_after_seconds": secs}
	problemTexts(body, names.ProblemTypes.ConcurrencyLimited, names.Problems.ConcurrencyLimited, map[string]string{
		"name": limit.Name, "limit": strconv.FormatUint(d.Limit, 10), "retry_after_secs": strconv.FormatInt(secs, 10)})
	var s headerSet
	s.put(names.Headers.RetryAfter, strconv.FormatInt(secs, 10))
	if d.Degraded {
		s.put(names.Headers.Degraded, names.DegradedValue)
	}
	return problem(429, body, &s)
}

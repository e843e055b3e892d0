package httplimit

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	ratelimit "github.com/redis-ratelimit/redis-ratelimit/go"
)

// The rate limit headers LLM clients read (OpenAI's, which LiteLLM and the SDKs' retry logic
// read): x-ratelimit-{limit,remaining,reset}-{requests,tokens}, the reset in Go's duration form
// (850ms, 1.5s, 6m0s), and beside them the IETF draft's RateLimit-Policy and RateLimit with a
// policy per unit. For a gateway in front of an LLM: one budget for its request limit, one for its
// token budget. Every name is the contract's (http.llm); the Rust reference is client::http::llm.

// Budget is one unit's state: its limit, what is left, how long until it is whole again, and its
// window in seconds (RateLimit-Policy's w).
type Budget struct {
	Limit      uint64
	Remaining  uint64
	Reset      time.Duration
	WindowSecs int64
}

// BudgetOf is the budget a decision of policy p describes (what a hold, a check or a settle
// replied): its limit, remaining and reset, and the policy's window (at least 1 s).
func BudgetOf(d ratelimit.Decision, p ratelimit.Policy) Budget {
	return Budget{Limit: d.Limit, Remaining: d.Remaining, Reset: d.ResetAfter, WindowSecs: windowSecs(p)}
}

// BudgetOfInspection is the budget a Peek of key under policy p read: a key that does not exist
// is a whole budget (nothing counted, nothing to reset).
func BudgetOfInspection(in ratelimit.Inspection, p ratelimit.Policy) Budget {
	b := Budget{Limit: p.Limit(), Remaining: p.Limit(), WindowSecs: windowSecs(p)}
	if in.Exists {
		b.Remaining, b.Reset = min(in.Remaining, b.Limit), in.ResetAfter
	}
	return b
}

func windowSecs(p ratelimit.Policy) int64 { return max(1, int64(p.Period()/time.Second)) }

// llmNames[u][f] is the header of the contract's unit u and field f; checked once, at init.
var llmNames = func() [2][3]string {
	llm := names.LLM
	if len(llm.Units) != 2 || len(llm.Fields) != 3 || !strings.Contains(llm.Name, "{field}") || !strings.Contains(llm.Name, "{unit}") {
		panic("redis-ratelimit: the contract's http.llm is not two units of three fields")
	}
	var out [2][3]string
	for u, unit := range llm.Units {
		for f, field := range llm.Fields {
			out[u][f] = strings.NewReplacer("{field}", field, "{unit}", unit).Replace(llm.Name)
		}
	}
	return out
}()

// LLMDuration is a reset as these headers write it: Go's time.Duration form in whole
// milliseconds (rounded up), 0s when not positive: 0s, 850ms, 1s, 1.5s, 6m0s, 1h2m3.4s.
func LLMDuration(d time.Duration) string { return wholeMillis(d).String() }

// wholeMillis is d in whole milliseconds, rounded up; 0 when not positive.
func wholeMillis(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return (d + time.Millisecond - 1) / time.Millisecond * time.Millisecond
}

// LLMHeaderList is the headers of the units given (requests, tokens: nil leaves a unit out), in
// the contract's order: the three of each unit (limit, remaining, reset), requests first, then
// RateLimit-Policy and RateLimit listing each unit's policy, named by its unit. None when both are nil.
func LLMHeaderList(requests, tokens *Budget) [][2]string {
	var out [][2]string
	var policies, states []string
	for u, b := range [2]*Budget{requests, tokens} {
		if b == nil {
			continue
		}
		reset := wholeMillis(b.Reset)
		values := [3]string{strconv.FormatUint(b.Limit, 10), strconv.FormatUint(b.Remaining, 10), LLMDuration(reset)}
		for f, value := range values {
			out = append(out, [2]string{llmNames[u][f], value})
		}
		unit := names.LLM.Units[u]
		policies = append(policies, structuredField(names.Structured.Policy, unit, map[string]string{
			"limit": strconv.FormatUint(b.Limit, 10), "window_secs": strconv.FormatInt(b.WindowSecs, 10)}))
		resetSecs := ratelimit.Decision{ResetAfter: reset}.ResetAfterSecs() // whole seconds, rounded up
		states = append(states, structuredField(names.Structured.State, unit, map[string]string{
			"remaining": strconv.FormatUint(b.Remaining, 10), "reset_secs": strconv.FormatInt(resetSecs, 10)}))
	}
	if len(policies) > 0 {
		out = append(out, [2]string{names.Headers.Policy, strings.Join(policies, ", ")},
			[2]string{names.Headers.State, strings.Join(states, ", ")})
	}
	return out
}

// LLMHeaders writes LLMHeaderList(requests, tokens) to h, each replacing what h held under that
// name. Names are written as the contract spells them (lower case), as the middleware writes its
// own (h.Get, which looks up the canonical form, does not see them before they are sent; any
// client's Get does after). What h held under a name, in either form, is replaced.
func LLMHeaders(h http.Header, requests, tokens *Budget) {
	for _, kv := range LLMHeaderList(requests, tokens) {
		h.Del(kv[0])
		h[kv[0]] = []string{kv[1]}
	}
}

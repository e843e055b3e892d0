package httplimit

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"testing"
	"time"

	ratelimit "github.com/redis-ratelimit/redis-ratelimit/go"
)

// The contract's llm_headers vectors, every case: the ordered list, and the same on an http.Header.

func TestVectorsLLMHeaders(t *testing.T) {
	type budget struct {
		Limit      uint64 `json:"limit"`
		Remaining  uint64 `json:"remaining"`
		ResetMs    int64  `json:"reset_ms"`
		WindowSecs int64  `json:"window_secs"`
	}
	of := func(b *budget) *Budget {
		if b == nil {
			return nil
		}
		return &Budget{Limit: b.Limit, Remaining: b.Remaining, Reset: time.Duration(b.ResetMs) * time.Millisecond, WindowSecs: b.WindowSecs}
	}
	for i, c := range vectorCases(t, "llm_headers.json") {
		var in struct {
			Requests *budget `json:"requests"`
			Tokens   *budget `json:"tokens"`
		}
		var out [][2]string
		must(t, json.Unmarshal(c.Input, &in))
		must(t, json.Unmarshal(c.Output, &out))
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			got := LLMHeaderList(of(in.Requests), of(in.Tokens))
			if len(got) != len(out) || (len(out) > 0 && !reflect.DeepEqual(got, out)) {
				t.Fatalf("%s:\ngot  %q\nwant %q", c.Input, got, out)
			}
			// On a header: these names and values only, each once, replacing what was there
			// (in either spelling); a header of another name stays.
			h := http.Header{}
			for _, kv := range out {
				h.Set(kv[0], "stale")
			}
			h.Set("Content-Type", "application/json")
			LLMHeaders(h, of(in.Requests), of(in.Tokens))
			want := http.Header{"Content-Type": {"application/json"}}
			for _, kv := range out {
				want[kv[0]] = []string{kv[1]}
			}
			if !reflect.DeepEqual(h, want) {
				t.Fatalf("%s: the header is %q, want %q", c.Input, h, want)
			}
		})
	}
}

func TestLLMDurationRoundsUpToMilliseconds(t *testing.T) {
	for d, want := range map[time.Duration]string{
		-time.Second: "0s", 0: "0s", time.Microsecond: "1ms", 850 * time.Millisecond: "850ms",
		1500*time.Millisecond + time.Nanosecond: "1.501s", 6 * time.Minute: "6m0s",
		time.Hour + 2*time.Minute + 3400*time.Millisecond: "1h2m3.4s",
	} {
		if got := LLMDuration(d); got != want {
			t.Errorf("LLMDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestBudgetOfAndOfInspection(t *testing.T) {
	p := ratelimit.Must(ratelimit.FixedWindow(1000, time.Hour))
	d := ratelimit.Decision{Allowed: true, Limit: 1000, Remaining: 958, ResetAfter: 1500 * time.Millisecond}
	if got, want := BudgetOf(d, p), (Budget{1000, 958, 1500 * time.Millisecond, 3600}); got != want {
		t.Fatalf("BudgetOf: %+v, want %+v", got, want)
	}
	if got, want := BudgetOfInspection(ratelimit.Inspection{}, p), (Budget{1000, 1000, 0, 3600}); got != want {
		t.Fatalf("a key that does not exist: %+v, want %+v", got, want)
	}
	in := ratelimit.Inspection{Exists: true, Remaining: 7, ResetAfter: time.Minute}
	if got, want := BudgetOfInspection(in, p), (Budget{1000, 7, time.Minute, 3600}); got != want {
		t.Fatalf("a key that exists: %+v, want %+v", got, want)
	}
}

package httplimit

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"
	"time"

	ratelimit "github.com/redis-ratelimit/redis-ratelimit/go"
)

// The contract's callers, forwarded and http vectors, every case.

type vectorCase struct {
	Input  json.RawMessage `json:"input"`
	Output json.RawMessage `json:"output"`
}

func vectorCases(t *testing.T, name string) []vectorCase {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "contract", "vectors", name))
	if os.IsNotExist(err) {
		t.Skipf("%s: not inside the repository", name)
	}
	must(t, err)
	var doc struct {
		Cases []vectorCase `json:"cases"`
	}
	must(t, json.Unmarshal(raw, &doc))
	if len(doc.Cases) == 0 {
		t.Fatalf("%s: no cases", name)
	}
	return doc.Cases
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestVectorsCallers(t *testing.T) {
	for i, c := range vectorCases(t, "callers.json") {
		var in struct {
			Caller, ID, IP, Prefix, Name string
			IPv6Prefix                   int `json:"ipv6_prefix"`
			Policy                       *struct {
				Kind     string  `json:"kind"`
				Limit    uint64  `json:"limit"`
				Rate     float64 `json:"rate"`
				PeriodUs int64   `json:"period_us"`
			} `json:"policy"`
		}
		var out struct {
			Display  string `json:"display"`
			KeyPart  string `json:"key_part"`
			Tag      string `json:"tag"`
			LimitKey string `json:"limit_key"`
		}
		must(t, json.Unmarshal(c.Input, &in))
		must(t, json.Unmarshal(c.Output, &out))
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			var caller Caller
			switch in.Caller {
			case "principal":
				caller = Principal(in.ID)
			case "tenant":
				caller = Tenant(in.ID)
			case "ip":
				caller = IP(GroupIP(netip.MustParseAddr(in.IP), in.IPv6Prefix))
			default:
				caller = Unknown()
			}
			if caller.KeyPart() != out.KeyPart || caller.Tag(in.Prefix) != out.Tag || caller.String() != out.Display {
				t.Fatalf("%s: got %q %q %q, want %s", c.Input, caller.KeyPart(), caller.Tag(in.Prefix), caller, c.Output)
			}
			if in.Policy == nil {
				return
			}
			// The key a limit of this name and policy gets: the one the middleware writes.
			period := time.Duration(in.Policy.PeriodUs) * time.Microsecond
			p, err := map[string]func() (ratelimit.Policy, error){
				"token_bucket":    func() (ratelimit.Policy, error) { return ratelimit.TokenBucket(in.Policy.Limit, in.Policy.Rate) },
				"fixed_window":    func() (ratelimit.Policy, error) { return ratelimit.FixedWindow(in.Policy.Limit, period) },
				"sliding_counter": func() (ratelimit.Policy, error) { return ratelimit.SlidingCounter(in.Policy.Limit, period) },
				"sliding_log":     func() (ratelimit.Policy, error) { return ratelimit.SlidingLog(in.Policy.Limit, period) },
				"concurrency":     func() (ratelimit.Policy, error) { return ratelimit.Concurrency(in.Policy.Limit, period) },
			}[in.Policy.Kind]()
			must(t, err)
			if got := ratelimit.LimitKey(caller.Tag(in.Prefix), in.Name, p); got != out.LimitKey {
				t.Fatalf("%s: limit key %q, want %q", c.Input, got, out.LimitKey)
			}
		})
	}
}

func TestVectorsForwarded(t *testing.T) {
	for i, c := range vectorCases(t, "forwarded.json") {
		var in struct {
			Headers []struct {
				Name     string `json:"name"`
				ValueHex string `json:"value_hex"`
			} `json:"headers"`
			Peer    *string  `json:"peer"`
			Trusted []string `json:"trusted_proxies"`
		}
		var out struct {
			ClientIP *string `json:"client_ip"`
		}
		must(t, json.Unmarshal(c.Input, &in))
		must(t, json.Unmarshal(c.Output, &out))
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			trusted, err := ParseTrustedProxies(in.Trusted...)
			must(t, err)
			h := http.Header{}
			for _, kv := range in.Headers {
				v, err := hex.DecodeString(kv.ValueHex)
				must(t, err)
				h.Add(kv.Name, string(v))
			}
			var peer netip.Addr
			if in.Peer != nil {
				peer = netip.MustParseAddr(*in.Peer)
			}
			got := trusted.ClientIP(peer, h)
			if (out.ClientIP == nil) != !got.IsValid() || (out.ClientIP != nil && got.String() != *out.ClientIP) {
				t.Fatalf("%s: got %v, want %s", c.Input, got, c.Output)
			}
		})
	}
}

func TestVectorsHTTP(t *testing.T) {
	for i, c := range vectorCases(t, "http.json") {
		var in struct {
			Answer   string `json:"answer"`
			Decision struct {
				Allowed      bool   `json:"allowed"`
				Degraded     bool   `json:"degraded"`
				Limit        uint64 `json:"limit"`
				Limiting     int    `json:"limiting"`
				Remaining    uint64 `json:"remaining"`
				ResetAfterMs int64  `json:"reset_after_ms"`
				RetryAfterMs *int64 `json:"retry_after_ms"`
			} `json:"decision"`
			Limit struct {
				Cost       uint64 `json:"cost"`
				Name       string `json:"name"`
				Rate       bool   `json:"rate"`
				WindowSecs int64  `json:"window_secs"`
			} `json:"limit"`
			Misconfigured bool `json:"misconfigured"`
			Status        int  `json:"status"`
			Structured    bool `json:"structured"`
		}
		var out struct {
			Body    string     `json:"body"`
			Headers [][]string `json:"headers"`
			Status  int        `json:"status"`
		}
		must(t, json.Unmarshal(c.Input, &in))
		must(t, json.Unmarshal(c.Output, &out))
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			dd := in.Decision
			d := ratelimit.Decision{Allowed: dd.Allowed, Degraded: dd.Degraded, Limit: dd.Limit, Limiting: dd.Limiting,
				Remaining: dd.Remaining, ResetAfter: time.Duration(dd.ResetAfterMs) * time.Millisecond, RetryAfter: ratelimit.NeverFits}
			if dd.RetryAfterMs != nil {
				d.RetryAfter = time.Duration(*dd.RetryAfterMs) * time.Millisecond
			}
			desc := Described{Name: in.Limit.Name, WindowSecs: in.Limit.WindowSecs, Cost: in.Limit.Cost, Rate: in.Limit.Rate}
			var a Answer
			switch in.Answer {
			case "served":
				a = Answer{Status: 200, Headers: ServedHeaders(d, desc, in.Structured)}
			case "denied":
				a = Denied(d, desc, in.Structured)
			case "concurrency_limited":
				a = ConcurrencyLimited(d, desc)
			default:
				a = Unavailable(d, desc, in.Structured, in.Status, in.Misconfigured)
			}
			headers := [][]string{}
			for _, kv := range a.Headers {
				headers = append(headers, []string{kv[0], kv[1]})
			}
			sort.Slice(headers, func(i, j int) bool {
				if headers[i][0] != headers[j][0] {
					return headers[i][0] < headers[j][0]
				}
				return headers[i][1] < headers[j][1]
			})
			if a.Status != out.Status || string(a.Body) != out.Body || !reflect.DeepEqual(headers, out.Headers) {
				t.Fatalf("%s:\ngot  %d %q %s\nwant %d %q %s", c.Input, a.Status, headers, a.Body, out.Status, out.Headers, out.Body)
			}
		})
	}
}

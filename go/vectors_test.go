package ratelimit

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// The contract's vectors (contract/vectors/*.json, written by the Rust reference): every case this
// package can run, run, with the reference's output. Skipped here, and why:
var skippedVectorFiles = map[string]string{
	// callers, forwarded, http and llm_headers run in the httplimit package's tests.
}

type vectorCase struct {
	Input  json.RawMessage `json:"input"`
	Output json.RawMessage `json:"output"`
}

// VectorCases reads contract/vectors/<name> (the repository's; skipped outside it).
func vectorCases(t *testing.T, name string) []vectorCase {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "contract", "vectors", name))
	if os.IsNotExist(err) {
		t.Skipf("%s: not inside the repository", name)
	}
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Cases []vectorCase `json:"cases"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Cases) == 0 {
		t.Fatalf("%s: no cases", name)
	}
	return doc.Cases
}

func TestEveryVectorFileIsRunOrListed(t *testing.T) {
	run := map[string]bool{"policies.json": true, "commands.json": true, "replies.json": true, "fallback.json": true,
		"callers.json": true, "forwarded.json": true, "http.json": true, "errors.json": true, "engines.json": true,
		"volume.json": true, "llm_headers.json": true}
	files, _ := filepath.Glob(filepath.Join("..", "contract", "vectors", "*.json"))
	for _, f := range files {
		name := filepath.Base(f)
		if !run[name] && skippedVectorFiles[name] == "" {
			t.Errorf("%s: a vector file neither run nor listed with a reason", name)
		}
	}
}

type policySpec struct {
	Kind     string  `json:"kind"`
	Limit    uint64  `json:"limit"`
	Rate     float64 `json:"rate"`
	PeriodUs int64   `json:"period_us"`
}

func (s policySpec) build() (Policy, error) {
	d := time.Duration(s.PeriodUs) * time.Microsecond
	switch s.Kind {
	case "token_bucket":
		return TokenBucket(s.Limit, s.Rate)
	case "fixed_window":
		return FixedWindow(s.Limit, d)
	case "sliding_counter":
		return SlidingCounter(s.Limit, d)
	case "sliding_log":
		return SlidingLog(s.Limit, d)
	case "concurrency":
		return Concurrency(s.Limit, d)
	}
	panic(s.Kind)
}

func TestVectorsPolicies(t *testing.T) {
	for i, c := range vectorCases(t, "policies.json") {
		var in policySpec
		var out struct {
			Limit    uint64   `json:"limit"`
			Params   []string `json:"params"`
			PeriodNs int64    `json:"period_ns"`
			Error    *struct {
				Field, Expected string
			} `json:"error"`
		}
		must(t, json.Unmarshal(c.Input, &in))
		must(t, json.Unmarshal(c.Output, &out))
		t.Run(fmt.Sprintf("%d", i), func(t *testing.T) {
			p, err := in.build()
			if out.Error != nil {
				var pe *PolicyError
				if !errors.As(err, &pe) || pe.Field != out.Error.Field || pe.Reason != out.Error.Expected {
					t.Fatalf("%s: got %v, want %s: %s", c.Input, err, out.Error.Field, out.Error.Expected)
				}
				return
			}
			if err != nil {
				t.Fatalf("%s: refused: %v", c.Input, err)
			}
			if p.Params()[0] != out.Params[0] || p.Params()[1] != out.Params[1] || p.Limit() != out.Limit ||
				int64(p.Period()) != out.PeriodNs {
				t.Fatalf("%s: got %v %d %d, want %v %d %d", c.Input, p.Params(), p.Limit(), p.Period(), out.Params, out.Limit, out.PeriodNs)
			}
		})
	}
}

func words(args []any) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = fmt.Sprint(a)
	}
	return out
}

func TestVectorsCommands(t *testing.T) {
	saved := requestID
	requestID = func() string { return "{request_id}" }
	defer func() { requestID = saved }()
	for i, c := range vectorCases(t, "commands.json") {
		var in struct {
			Call   string `json:"call"`
			Holder string `json:"holder"`
			Limits []struct {
				Key    string     `json:"key"`
				Cost   uint64     `json:"cost"`
				Policy policySpec `json:"policy"`
			} `json:"limits"`
			MaxWaitMs int64  `json:"max_wait_ms"`
			Max       uint64 `json:"max"`
			Cost      string `json:"cost"` // a caller-written cost ("call": "cost")
		}
		var out struct {
			Module  []string    `json:"module"`
			Fcall   []string    `json:"fcall"`
			Evalsha []string    `json:"evalsha"`
			Error   *string     `json:"error"`
			Usage   *UsageError `json:"usage"`
		}
		must(t, json.Unmarshal(c.Input, &in))
		must(t, json.Unmarshal(c.Output, &out))
		t.Run(fmt.Sprintf("%d-%s", i, in.Call), func(t *testing.T) {
			var limits []Limit
			for _, l := range in.Limits {
				p, err := l.Policy.build()
				must(t, err)
				limits = append(limits, Limit{l.Key, p, l.Cost})
			}
			wait := time.Duration(in.MaxWaitMs) * time.Millisecond
			var built []string
			var err error
			switch in.Call {
			case "cost":
				_, err = ParseCost(in.Cost)
			case "decide":
				built, err = buildDecide(limits)
			case "acquire":
				built, err = buildAcquire(limits, in.Holder)
			case "reserve":
				if built, err = buildReserve(limits, wait); built == nil && err == nil {
					built, err = buildDecide(limits)
				} else if err == nil {
					_, err = buildDecide(limits)
				}
			case "refund":
				built, err = buildRefund(limits[0].Key, limits[0].Policy, limits[0].Cost)
			case "reserve_batch":
				built, err = buildBatch(limits[0].Key, limits[0].Policy, limits[0].Cost, in.Max, wait)
			case "inspect":
				built = buildInspect(limits[0].Key, &limits[0].Policy)
			case "release":
				built = buildRelease(limits[0].Key, in.Holder)
			case "renew":
				built = buildRenew(limits[0].Key, limits[0].Policy.Period(), in.Holder)
			default:
				t.Fatalf("unknown call %s", in.Call)
			}
			if err == nil && built != nil {
				err = precheckKeys(keysOf(built), false) // refused before sending, as call does
			}
			if out.Usage != nil {
				var u *UsageError
				if !errors.As(err, &u) || !errors.Is(err, ErrUsage) || u.Code != out.Usage.Code || u.Message != out.Usage.Message {
					t.Fatalf("%s: got %q (%v), want the usage error %s %q", c.Input, built, err, out.Usage.Code, out.Usage.Message)
				}
				return
			}
			if out.Error != nil {
				if !errors.Is(err, ErrUsage) {
					t.Fatalf("%s: built %v (%v), want the error %q", c.Input, built, err, *out.Error)
				}
				// core's render errors are the contract's words; the others name each language's own calls.
				for _, r := range contract.Errors.Render {
					if r == *out.Error && err.Error() != r {
						t.Fatalf("got %q, want %q", err, r)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("%s: %v", c.Input, err)
			}
			if !reflect.DeepEqual(built, out.Module) {
				t.Fatalf("module: got %q, want %q", built, out.Module)
			}
			call, ok := callOf(built)
			if !ok {
				if out.Fcall != nil {
					t.Fatalf("no library call for %q", built)
				}
				return
			}
			if got := words(call.fcall()); !reflect.DeepEqual(got, out.Fcall) {
				t.Fatalf("fcall: got %q, want %q", got, out.Fcall)
			}
			if got := words(call.evalsha()); !reflect.DeepEqual(got, out.Evalsha) {
				t.Fatalf("evalsha: got %q, want %q", got, out.Evalsha)
			}
		})
	}
}

func TestVectorsReplies(t *testing.T) {
	for i, c := range vectorCases(t, "replies.json") {
		var in struct {
			Reply []int64 `json:"reply"`
		}
		var out struct {
			Allowed        bool   `json:"allowed"`
			Limit          uint64 `json:"limit"`
			Remaining      uint64 `json:"remaining"`
			Limiting       int    `json:"limiting"`
			RetryAfterMs   *int64 `json:"retry_after_ms"`
			ResetAfterMs   int64  `json:"reset_after_ms"`
			RetryAfterSecs *int64 `json:"retry_after_secs"`
			ResetAfterSecs int64  `json:"reset_after_secs"`
			NeverFits      bool   `json:"never_fits"`
			Error          *string
		}
		must(t, json.Unmarshal(c.Input, &in))
		must(t, json.Unmarshal(c.Output, &out))
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			reply := make([]any, len(in.Reply))
			for j, v := range in.Reply {
				reply[j] = v
			}
			d, err := DecisionOfReply(reply)
			if out.Error != nil {
				if !errors.Is(err, ErrReply) {
					t.Fatalf("%v: got %+v, want an error", in.Reply, d)
				}
				return
			}
			must(t, err)
			if d.Allowed != out.Allowed || d.Limit != out.Limit || d.Remaining != out.Remaining || d.Limiting != out.Limiting ||
				d.ResetAfter != time.Duration(out.ResetAfterMs)*time.Millisecond || d.NeverFits() != out.NeverFits ||
				d.ResetAfterSecs() != out.ResetAfterSecs {
				t.Fatalf("%v: got %+v, want %s", in.Reply, d, c.Output)
			}
			if (out.RetryAfterMs == nil) != (d.RetryAfter == NeverFits) ||
				(out.RetryAfterMs != nil && d.RetryAfter != time.Duration(*out.RetryAfterMs)*time.Millisecond) {
				t.Fatalf("%v: retry after %v, want %s", in.Reply, d.RetryAfter, c.Output)
			}
			secs, ok := d.RetryAfterSecs()
			if (out.RetryAfterSecs != nil) != ok || (ok && secs != *out.RetryAfterSecs) {
				t.Fatalf("%v: Retry-After %d %v, want %s", in.Reply, secs, ok, c.Output)
			}
		})
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// vectorFields are a decision's fields as the vectors write them (JSON numbers, retry_after_ms
// null when the request never fits).
func vectorFields(d Decision) map[string]any {
	var retry any
	if d.RetryAfter != NeverFits {
		retry = float64(d.RetryAfter / time.Millisecond)
	}
	return map[string]any{"allowed": d.Allowed, "limit": float64(d.Limit), "remaining": float64(d.Remaining),
		"retry_after_ms": retry, "reset_after_ms": float64(d.ResetAfter / time.Millisecond),
		"limiting": float64(d.Limiting)}
}

// contract/vectors/fallback.json: the local fallback's decisions at explicit times, as the Rust
// reference (client/src/fallback.rs) makes them.
func TestVectorsFallback(t *testing.T) {
	for i, c := range vectorCases(t, "fallback.json") {
		var in struct {
			Scenario struct {
				Instances int          `json:"instances"`
				Policies  []policySpec `json:"policies"`
				Steps     []struct {
					AtMs   int64  `json:"at_ms"`
					ID     string `json:"id"`
					Op     string `json:"op"`
					Limits []struct {
						Key    string `json:"key"`
						Cost   uint64 `json:"cost"`
						Policy int    `json:"policy"`
					} `json:"limits"`
				} `json:"steps"`
			} `json:"scenario"`
			T0 int64 `json:"t0_ns"`
		}
		var out struct {
			Steps []json.RawMessage `json:"steps"`
		}
		must(t, json.Unmarshal(c.Input, &in))
		must(t, json.Unmarshal(c.Output, &out))
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			s := in.Scenario
			local := newLocalLimiter(s.Instances)
			policies := make([]Policy, len(s.Policies))
			for j, p := range s.Policies {
				var err error
				policies[j], err = p.build()
				must(t, err)
			}
			for j, step := range s.Steps {
				now := in.T0 + step.AtMs*1_000_000
				var limits []Limit
				for _, l := range step.Limits {
					limits = append(limits, Limit{l.Key, policies[l.Policy], l.Cost})
				}
				first := limits[0]
				got := map[string]any{}
				switch step.Op {
				case "decide":
					got["decision"] = vectorFields(local.decide(limits, nil, now, true))
				case "acquire":
					got["decision"] = vectorFields(local.decide(limits, &step.ID, now, true))
				case "release":
					got["done"] = local.leaseOp(first.Key, step.ID, 0, now)
				case "renew":
					got["done"] = local.leaseOp(first.Key, step.ID, first.Policy.Period(), now)
				case "take":
					taken := local.reserve(first.Key, first.Policy, 1, first.Cost, 0, now, true)
					got["decision"], got["taken"] = vectorFields(taken.Decision), float64(taken.Taken)
				case "refund":
					local.refund(first.Key, first.Policy, first.Cost, now)
				default:
					t.Fatalf("unknown op %s", step.Op)
				}
				var want map[string]any
				must(t, json.Unmarshal(out.Steps[j], &want))
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("step %d (%s at %d ms, %+v): got %v, want %v", j, step.Op, step.AtMs, step.Limits, got, want)
				}
			}
		})
	}
}

// contract/vectors/errors.json runs over a socket, through go-redis: errorswire_test.go.

// contract/vectors/engines.json: the answers a limiter meets, call after call -> what each call
// sends, its outcome, the machine's state and what Engine() reports.
func TestVectorsEngines(t *testing.T) {
	for i, c := range vectorCases(t, "engines.json") {
		var in struct {
			Wanted string     `json:"wanted"`
			Calls  [][]string `json:"calls"`
		}
		var out struct {
			Calls []struct {
				Outcome, Reports, State string
				Sent                    []string
			} `json:"calls"`
		}
		must(t, json.Unmarshal(c.Input, &in))
		must(t, json.Unmarshal(c.Output, &out))
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			m := newMachine(in.Wanted)
			for j, answers := range in.Calls {
				var sent []string
				outcome, _ := m.run("", func(what string) string {
					sent = append(sent, what)
					if len(sent) > len(answers) {
						t.Fatalf("call %d sent %v: more than its %d answers", j, sent, len(answers))
					}
					return answers[len(sent)-1]
				})
				want := out.Calls[j]
				if outcome != want.Outcome || !reflect.DeepEqual(sent, want.Sent) || m.stateName() != want.State || m.reports() != want.Reports {
					t.Fatalf("call %d (%v): %s %v %s %q, want %+v", j, answers, outcome, sent, m.stateName(), m.reports(), want)
				}
				if engine := stateEngine[m.stateName()]; engine.String() != want.Reports {
					t.Fatalf("call %d: Engine() says %q, want %q", j, engine, want.Reports)
				}
			}
		})
	}
}

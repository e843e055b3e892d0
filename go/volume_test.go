package ratelimit

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"
)

// batchSpec is a vectors' policy with its optional batch and lease.
type batchSpec struct {
	policySpec
	Batch   *uint64 `json:"batch"`
	LeaseMs *int64  `json:"lease_ms"`
}

func (s batchSpec) build() (Policy, error) {
	p, err := s.policySpec.build()
	if err != nil || s.Batch == nil {
		return p, err
	}
	lease := DefaultLease()
	if s.LeaseMs != nil {
		lease = time.Duration(*s.LeaseMs) * time.Millisecond
	}
	return p.WithBatch(*s.Batch, lease)
}

// contract/vectors/volume.json: the pre-check and batched units as timed steps, with Redis' replies
// given: the commands each step sends (refunds first), its decision and the units held after it.
func TestVectorsVolume(t *testing.T) {
	const t0 = 1_700_000_000_000_000_000
	for i, c := range vectorCases(t, "volume.json") {
		var in struct {
			Name     string     `json:"name"`
			Precheck bool       `json:"precheck"`
			Policy   *batchSpec `json:"policy"`
			Steps    []struct {
				AtMs     int64 `json:"at_ms"`
				Instance int   `json:"instance"` // another limiter on the same server
				Limits   []struct {
					Key    string    `json:"key"`
					Cost   uint64    `json:"cost"`
					Policy batchSpec `json:"policy"`
				} `json:"limits"`
				Replies [][]int64 `json:"replies"`
			} `json:"steps"`
		}
		var out struct {
			Error *struct{ Field, Expected string } `json:"error"`
			Steps []struct {
				Sent     [][]string        `json:"sent"`
				Decision map[string]any    `json:"decision"`
				Held     map[string]uint64 `json:"held"`
			} `json:"steps"`
		}
		must(t, json.Unmarshal(c.Input, &in))
		must(t, json.Unmarshal(c.Output, &out))
		t.Run(fmt.Sprintf("%d-%s", i, in.Name), func(t *testing.T) {
			if in.Policy != nil { // a refused (or accepted) batch option
				_, err := in.Policy.build()
				var pe *PolicyError
				switch {
				case out.Error == nil && err != nil:
					t.Fatalf("%s: refused: %v", c.Input, err)
				case out.Error != nil && (!errors.As(err, &pe) || !errors.Is(err, ErrUsage) ||
					pe.Field != out.Error.Field || pe.Reason != out.Error.Expected):
					t.Fatalf("%s: got %v, want %s: %s", c.Input, err, out.Error.Field, out.Error.Expected)
				}
				return
			}
			instances := map[int]*Limiter{}
			for j, step := range in.Steps {
				l := instances[step.Instance]
				if l == nil {
					l = &Limiter{units: newUnitBook()}
					if in.Precheck {
						l.denials = newDenialCache()
					}
					instances[step.Instance] = l
				}
				var limits []Limit
				for _, sl := range step.Limits {
					p, err := sl.Policy.build()
					must(t, err)
					limits = append(limits, Limit{sl.Key, p, sl.Cost})
				}
				var sent [][]string
				replies := step.Replies
				next := func(cmd []string) []any {
					sent = append(sent, cmd)
					if len(replies) == 0 {
						t.Fatalf("step %d: sent %q with no reply left", j, cmd)
					}
					reply := make([]any, len(replies[0]))
					for k, v := range replies[0] {
						reply[k] = v
					}
					replies = replies[1:]
					return reply
				}
				io := unitIO{
					refund: func(cmd []string) { next(cmd) },
					call:   func(cmd []string) (Decision, error) { return DecisionOfReply(next(cmd)) },
					// Batches taken ahead: answered before the next step (as the reference's vectors).
					ahead: func(cmd []string, answered func(Decision, error)) { answered(DecisionOfReply(next(cmd))) },
				}
				cmd, err := buildDecide(limits)
				must(t, err)
				now := int64(t0 + step.AtMs*int64(time.Millisecond))
				d, err := l.decideAt(func() int64 { return now }, limits, cmd, io)
				must(t, err)
				want := out.Steps[j]
				got := vectorFields(d)
				got["local"] = d.Local
				held := map[string]uint64{}
				for _, lim := range limits {
					if lim.Policy.batch > 0 {
						held[lim.Key] = l.Held(lim.Key, lim.Policy)
					}
				}
				if len(sent) == 0 {
					sent = [][]string{}
				}
				if !reflect.DeepEqual(sent, want.Sent) || !reflect.DeepEqual(got, want.Decision) ||
					!reflect.DeepEqual(held, want.Held) || len(replies) != 0 {
					t.Fatalf("step %d (at %d ms): sent %q, decision %v, held %v (%d replies unused);\nwant sent %q, decision %v, held %v",
						j, step.AtMs, sent, got, held, len(replies), want.Sent, want.Decision, want.Held)
				}
			}
		})
	}
}

// heldBook is a unit book on one hot key (a bucket of 1,000, batch 16) whose calls a test can hold
// in flight: Redis' bucket takes every call's cost (the request and the extras asked), the clock is
// the test's, and the call made after hold() blocks until release is closed.
type heldBook struct {
	book    *unitBook
	limits  []Limit
	io      unitIO
	calling chan struct{} // a held call has started
	mu      sync.Mutex
	ms      int64
	left    int64
	calls   int
	gate    chan struct{}
}

func newHeldBook(t *testing.T, waitsWithin time.Duration) *heldBook {
	p, err := TokenBucket(1000, 1000)
	must(t, err)
	p, err = p.WithBatch(16, time.Second)
	must(t, err)
	h := &heldBook{book: newUnitBook(), limits: []Limit{{"k", p, 1}}, left: 1000, calling: make(chan struct{}, 8)}
	reply := func(cmd []string) (Decision, error) {
		cost, _ := strconv.ParseInt(cmd[len(cmd)-1], 10, 64)
		h.mu.Lock()
		h.left -= cost
		r := h.left
		h.mu.Unlock()
		return DecisionOfReply([]any{int64(1), int64(1000), r, int64(0), int64(10)})
	}
	h.io = unitIO{
		refund: func([]string) {},
		call: func(cmd []string) (Decision, error) {
			h.mu.Lock()
			g := h.gate
			h.gate = nil
			h.calls++
			h.mu.Unlock()
			if g != nil {
				h.calling <- struct{}{}
				<-g
			}
			return reply(cmd)
		},
		ahead:       func(cmd []string, answered func(Decision, error)) { answered(reply(cmd)) },
		waitsWithin: waitsWithin,
	}
	return h
}

func (h *heldBook) now() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return 1_700_000_000_000_000_000 + h.ms*int64(time.Millisecond)
}

// at moves the clock to ms; hold, when not nil, holds the next call until it is closed.
func (h *heldBook) at(ms int64, hold chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ms, h.gate = ms, hold
}

func (h *heldBook) check() (Decision, error) { return h.book.check(h.now, h.limits, h.io) }

// A check lacking units while its key's batch call is in flight waits for that call and is then
// decided from the units it brought: it shared a round trip, so it is not local (as the reference
// counts it); a later check spending held units is.
func TestAWaitedDecisionIsNotLocal(t *testing.T) {
	h := newHeldBook(t, 0)
	if d, err := h.check(); err != nil || d.Local { // the key's first call
		t.Fatalf("the first check: %+v, %v", d, err)
	}
	release := make(chan struct{})
	h.at(1, release) // a hot key: this call asks extra units
	first, second := make(chan Decision, 1), make(chan Decision, 1)
	go func() { d, _ := h.check(); first <- d }()
	<-h.calling // the call is in flight: the next check lacks units and waits for it
	go func() { d, _ := h.check(); second <- d }()
	time.Sleep(50 * time.Millisecond)
	if len(h.calling) != 0 {
		t.Fatal("the second check called instead of waiting for the batch call in flight")
	}
	close(release)
	if d := <-first; d.Local || !d.Allowed {
		t.Fatalf("the check that called: %+v", d)
	}
	if d := <-second; d.Local || !d.Allowed {
		t.Fatalf("the check that waited for the call: %+v (want allowed, not local)", d)
	}
	for i := int64(0); i < 8; i++ {
		h.at(2+i, nil)
		if d, err := h.check(); err == nil && d.Local && d.Allowed {
			return // a check spending units held without waiting is local
		}
	}
	t.Fatal("no later check was decided from held units")
}

// TestWaitsTakeAtMostTheDeadlineInAll: a check lacking units waits for its key's batch call in
// flight, but all of its waits together take at most io.waitsWithin (the limiter's deadline); then
// it sends its own call (docs/high-volume.md's Wait). The batch call here never lands while the
// check runs: before, the check waited for it however long it took.
func TestWaitsTakeAtMostTheDeadlineInAll(t *testing.T) {
	h := newHeldBook(t, 200*time.Millisecond)
	h.io.ahead = func([]string, func(Decision, error)) {} // no batch taken ahead: one call in flight
	if _, err := h.check(); err != nil {                  // the key's first call
		t.Fatal(err)
	}
	release := make(chan struct{})
	defer close(release)
	h.at(1, release) // a hot key: this call asks extra units, and stays in flight
	go func() { _, _ = h.check() }()
	<-h.calling
	waiting := make(chan Decision, 1)
	go func() { d, _ := h.check(); waiting <- d }()
	select {
	case d := <-waiting:
		if !d.Allowed || d.Local {
			t.Fatalf("the check that stopped waiting: %+v (want its own call's decision)", d)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the check still waits for the batch call in flight")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.calls != 3 {
		t.Fatalf("%d calls, want 3 (the first, the batch in flight, the waiting check's own)", h.calls)
	}
}

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

// A check lacking units while its key's batch call is in flight waits for that call and is then
// decided from the units it brought: it shared a round trip, so it is not local (as the reference
// counts it); a later check spending held units is.
func TestAWaitedDecisionIsNotLocal(t *testing.T) {
	p, err := TokenBucket(1000, 1000)
	must(t, err)
	p, err = p.WithBatch(16, time.Second)
	must(t, err)
	limits := []Limit{{"k", p, 1}}
	book := newUnitBook()
	var mu sync.Mutex
	ms, remaining := int64(0), int64(1000)
	now := func() int64 {
		mu.Lock()
		defer mu.Unlock()
		return 1_700_000_000_000_000_000 + ms*int64(time.Millisecond)
	}
	// Redis' bucket: every call takes its cost (the request and the extras asked).
	reply := func(cmd []string) (Decision, error) {
		cost, _ := strconv.ParseInt(cmd[len(cmd)-1], 10, 64)
		mu.Lock()
		remaining -= cost
		r := remaining
		mu.Unlock()
		return DecisionOfReply([]any{int64(1), int64(1000), r, int64(0), int64(10)})
	}
	var gate chan struct{} // when set, the next call blocks until it is closed
	calling := make(chan struct{}, 8)
	io := unitIO{
		refund: func([]string) {},
		call: func(cmd []string) (Decision, error) {
			mu.Lock()
			g := gate
			gate = nil
			mu.Unlock()
			if g != nil {
				calling <- struct{}{}
				<-g
			}
			return reply(cmd)
		},
		ahead: func(cmd []string, answered func(Decision, error)) { answered(reply(cmd)) },
	}
	if d, err := book.check(now, limits, io); err != nil || d.Local { // the key's first call
		t.Fatalf("the first check: %+v, %v", d, err)
	}
	release := make(chan struct{})
	mu.Lock()
	ms, gate = 1, release // a hot key: this call asks extra units
	mu.Unlock()
	first, second := make(chan Decision, 1), make(chan Decision, 1)
	go func() { d, _ := book.check(now, limits, io); first <- d }()
	<-calling // the call is in flight: the next check lacks units and waits for it
	go func() { d, _ := book.check(now, limits, io); second <- d }()
	time.Sleep(50 * time.Millisecond)
	if len(calling) != 0 {
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
		mu.Lock()
		ms = 2 + i
		mu.Unlock()
		if d, err := book.check(now, limits, io); err == nil && d.Local && d.Allowed {
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
	p, err := TokenBucket(1000, 1000)
	must(t, err)
	p, err = p.WithBatch(16, time.Second)
	must(t, err)
	limits := []Limit{{"k", p, 1}}
	book := newUnitBook()
	var mu sync.Mutex
	ms, remaining, calls := int64(0), int64(1000), 0
	now := func() int64 {
		mu.Lock()
		defer mu.Unlock()
		return 1_700_000_000_000_000_000 + ms*int64(time.Millisecond)
	}
	var gate chan struct{} // when set, the next call blocks until it is closed
	calling := make(chan struct{}, 8)
	io := unitIO{
		refund: func([]string) {},
		call: func(cmd []string) (Decision, error) {
			cost, _ := strconv.ParseInt(cmd[len(cmd)-1], 10, 64)
			mu.Lock()
			g := gate
			gate = nil
			calls++
			mu.Unlock()
			if g != nil {
				calling <- struct{}{}
				<-g
			}
			mu.Lock()
			remaining -= cost
			r := remaining
			mu.Unlock()
			return DecisionOfReply([]any{int64(1), int64(1000), r, int64(0), int64(10)})
		},
		ahead:       func(cmd []string, answered func(Decision, error)) {},
		waitsWithin: 200 * time.Millisecond,
	}
	if _, err := book.check(now, limits, io); err != nil { // the key's first call
		t.Fatal(err)
	}
	release := make(chan struct{})
	defer close(release)
	mu.Lock()
	ms, gate = 1, release // a hot key: this call asks extra units, and stays in flight
	mu.Unlock()
	go func() { _, _ = book.check(now, limits, io) }()
	<-calling
	waiting := make(chan Decision, 1)
	go func() { d, _ := book.check(now, limits, io); waiting <- d }()
	select {
	case d := <-waiting:
		if !d.Allowed || d.Local {
			t.Fatalf("the check that stopped waiting: %+v (want its own call's decision)", d)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the check still waits for the batch call in flight")
	}
	mu.Lock()
	defer mu.Unlock()
	if calls != 3 {
		t.Fatalf("%d calls, want 3 (the first, the batch in flight, the waiting check's own)", calls)
	}
}

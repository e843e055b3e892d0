package ratelimit

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
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

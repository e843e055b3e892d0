package ratelimit

import (
	"fmt"
	"time"
)

// NeverFits is a Decision's RetryAfter when the request costs more than the limit: it can never
// be allowed.
const NeverFits time.Duration = -1

// Decision is what a limiter says about one request: the five fields of every RL.* reply, and
// whether the answer came from Redis or from the failure policy.
type Decision struct {
	// Allowed: the request may go ahead (its cost was taken).
	Allowed bool
	// Limit is the capacity or limit (RateLimit-Limit).
	Limit uint64
	// Remaining: units left after this request (RateLimit-Remaining).
	Remaining uint64
	// RetryAfter: 0 when allowed (a reservation: how long to wait before going ahead); when
	// denied, how long until the same request would be allowed; NeverFits when it never is.
	RetryAfter time.Duration
	// ResetAfter: until the limiter is back to its initial state (bucket full, window empty).
	ResetAfter time.Duration
	// Limiting: in a multi-limit check, the 0-based position of the limit this decision describes.
	Limiting int
	// Degraded: Redis did not decide (unreachable, too slow, breaker open): the failure policy did.
	Degraded bool
	// Local: decided in this process without a round trip (the pre-check's denial, or units of a
	// batched policy taken from Redis earlier).
	Local bool
}

// NeverFits says whether the request can never be allowed (its cost is above the limit).
func (d Decision) NeverFits() bool { return !d.Allowed && d.RetryAfter < 0 }

// RetryAfterSecs is Retry-After in whole seconds, rounded up, at least 1; false when allowed or
// when the request never fits.
func (d Decision) RetryAfterSecs() (int64, bool) {
	if d.Allowed || d.RetryAfter < 0 {
		return 0, false
	}
	return max(1, ceilSecs(d.RetryAfter)), true
}

// ResetAfterSecs is RateLimit-Reset in whole seconds, rounded up.
func (d Decision) ResetAfterSecs() int64 { return ceilSecs(d.ResetAfter) }

func ceilSecs(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// unexpectedReply is an answer that is not what the command answers: the contract's class for an
// answer no rule knows (misconfigured), so the failure policy decides it like any other.
func unexpectedReply(format string, args ...any) *CallError {
	return &CallError{Class: contract.Replies.Otherwise, Cause: ErrReply, Err: fmt.Errorf(format, args...)}
}

// integers reads a reply that is an array of integers (RESP2 and RESP3 alike).
func integers(reply any) ([]int64, error) {
	list, ok := reply.([]any)
	if !ok {
		return nil, unexpectedReply("not a list of integers: %v", reply)
	}
	out := make([]int64, len(list))
	for i, v := range list {
		n, ok := v.(int64)
		if !ok {
			return nil, unexpectedReply("not a list of integers: %v", reply)
		}
		out[i] = n
	}
	return out, nil
}

// decisionOf reads an RL.* reply: [allowed, limit, remaining, retry_after_ms, reset_after_ms (, sixth)].
func decisionOf(fields []int64) (Decision, error) {
	if len(fields) < 5 {
		return Decision{}, unexpectedReply("not a decision: %v", fields)
	}
	d := Decision{
		Allowed:    fields[0] == 1,
		Limit:      uint64(max(0, fields[1])),
		Remaining:  uint64(max(0, fields[2])),
		RetryAfter: time.Duration(fields[3]) * time.Millisecond,
		ResetAfter: time.Duration(max(0, fields[4])) * time.Millisecond,
	}
	if fields[3] < 0 {
		d.RetryAfter = NeverFits
	}
	return d, nil
}

// DecisionOfReply reads an RL.* reply as go-redis returns it (Do(...).Result()).
func DecisionOfReply(reply any) (Decision, error) {
	fields, err := integers(reply)
	if err != nil {
		return Decision{}, err
	}
	d, err := decisionOf(fields)
	if err == nil && len(fields) > 5 {
		d.Limiting = int(max(0, fields[5]-1))
	}
	return d, err
}

// Taken is what a partial grant (Take, ReserveBatch) took: the bucket after it, and the units.
type Taken struct {
	Decision
	Taken uint64
}

func takenOf(reply any) (Taken, error) {
	fields, err := integers(reply)
	if err != nil {
		return Taken{}, err
	}
	if len(fields) < 6 {
		return Taken{}, unexpectedReply("not a partial grant: %v", fields)
	}
	d, err := decisionOf(fields[:5])
	return Taken{Decision: d, Taken: uint64(max(0, fields[5]))}, err
}

// Inspection is what a limiter key holds (RL.INSPECT, read-only). Exists is false when the key
// does not exist (a full bucket, an empty window). With the policy: Remaining (units available
// now), RetryAfter (until one is; 0: now; NeverFits) and ResetAfter. Fields has every integer
// field the command reports.
type Inspection struct {
	Exists     bool
	Limiter    string
	Remaining  uint64
	RetryAfter time.Duration
	ResetAfter time.Duration
	Fields     map[string]int64
}

func inspectionOf(reply any) (Inspection, error) {
	if reply == nil {
		return Inspection{}, nil
	}
	pairs := map[string]any{}
	switch r := reply.(type) {
	case map[any]any:
		for k, v := range r {
			pairs[fmt.Sprint(k)] = v
		}
	case []any:
		if len(r)%2 != 0 {
			return Inspection{}, unexpectedReply("not field/value pairs: %v", reply)
		}
		for i := 0; i < len(r); i += 2 {
			pairs[fmt.Sprint(r[i])] = r[i+1]
		}
	default:
		return Inspection{}, unexpectedReply("not field/value pairs: %v", reply)
	}
	in := Inspection{Exists: true, Fields: map[string]int64{}}
	if s, ok := pairs["limiter"].(string); ok {
		in.Limiter = s
	}
	for k, v := range pairs {
		if n, ok := v.(int64); ok {
			in.Fields[k] = n
		}
	}
	in.Remaining = uint64(max(0, in.Fields["remaining"]))
	if r, ok := in.Fields["retry_after_ms"]; ok {
		in.RetryAfter = time.Duration(r) * time.Millisecond
		if r < 0 {
			in.RetryAfter = NeverFits
		}
	}
	in.ResetAfter = time.Duration(max(0, in.Fields["reset_after_ms"])) * time.Millisecond
	return in, nil
}

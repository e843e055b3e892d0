package ratelimit

import (
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"
)

// A Policy is one limit's algorithm and parameters, validated when built with the module's own
// rules (the contract's bounds and error texts), so a policy is valid exactly when the module
// would accept its parameters. Build one with TokenBucket, FixedWindow, SlidingCounter,
// SlidingLog or Concurrency; the zero Policy is no policy.
type Policy struct {
	kind   *kindDecl
	limit  uint64
	params [2]string
	period time.Duration
	// batch and lease: WithBatch's (batch 0: every check asks Redis).
	batch uint64
	lease time.Duration
}

// Kind is the contract's name of the policy's kind: token_bucket, fixed_window, sliding_counter,
// sliding_log, concurrency.
func (p Policy) Kind() string {
	if p.kind == nil {
		return ""
	}
	return p.kind.Name
}

// Limit is what RateLimit-Limit says: a bucket's capacity, a window's or a lease's limit.
func (p Policy) Limit() uint64 { return p.limit }

// Period is the time the limit is measured over: a window, a lease, a bucket's full refill.
func (p Policy) Period() time.Duration { return p.period }

// Params are the policy's two parameters as its command takes them after the key.
func (p Policy) Params() [2]string { return p.params }

// IsConcurrency says whether the policy is a concurrency limit (taken with Acquire).
func (p Policy) IsConcurrency() bool { return p.kind != nil && p.kind.Request == "lease" }

// Valid says whether p was built by one of the constructors.
func (p Policy) Valid() bool { return p.kind != nil }

func (p Policy) String() string {
	if p.kind == nil {
		return "Policy(none)"
	}
	return fmt.Sprintf("%s(%s, %s)", p.kind.Name, p.params[0], p.params[1])
}

// Must returns p, and panics on err: for policies written as constants.
func Must(p Policy, err error) Policy {
	if err != nil {
		panic(err)
	}
	return p
}

const nsPerSec = 1_000_000_000

func whole(kind, name string, value, low, high uint64, expected string) (uint64, error) {
	if value < low || value > high {
		return 0, &PolicyError{Kind: kind, Field: name, Reason: expected}
	}
	return value, nil
}

// decimalText is a float as core reads it: its shortest decimal, plain digits, no exponent, no
// trailing zeros (5, 0.5, 0.0000001).
func decimalText(f float64) string {
	return strconv.FormatFloat(f, 'f', -1, 64)
}

// outOfRange: what core's decimal parser refuses: more significant digits than it computes
// exactly, or too many fraction digits.
func outOfRange(text string) bool {
	whole, fraction, _ := strings.Cut(text, ".")
	fraction = strings.TrimRight(fraction, "0")
	digits := strings.TrimLeft(whole+fraction, "0")
	b := contract.Bounds
	return len(digits) > b.MaxDecimalDigits || len(fraction) > b.MaxDecimalExponent+b.MaxDecimalDigits
}

func milliseconds(kind, name string, d time.Duration, expected string) (uint64, error) {
	horizonMs := contract.Bounds.MaxHorizonSecs * 1000
	if d <= 0 || d%time.Millisecond != 0 || uint64(d/time.Millisecond) > horizonMs {
		return 0, &PolicyError{Kind: kind, Field: name, Reason: expected}
	}
	return uint64(d / time.Millisecond), nil
}

// secondsText is a length as the commands write it: 1.500.
func secondsText(ms uint64) string {
	return fmt.Sprintf("%d.%03d", ms/1000, ms%1000)
}

func ceilDiv(n, d *big.Int) *big.Int {
	q, m := new(big.Int).QuoRem(n, d, new(big.Int))
	if m.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	return q
}

// TokenBucket is RL.TOKEN: bursts of up to capacity, perSecond tokens per second on average.
func TokenBucket(capacity uint64, perSecond float64) (Policy, error) {
	k := kindOf("token_bucket")
	b := contract.Bounds
	capacity, err := whole(k.Name, "capacity", capacity, 1, b.MaxWhole, paramError(k.Name, "capacity", 0))
	if err != nil {
		return Policy{}, err
	}
	if math.IsNaN(perSecond) || math.IsInf(perSecond, 0) || perSecond <= 0 {
		return Policy{}, &PolicyError{Kind: k.Name, Field: "rate", Reason: paramError(k.Name, "rate", 0)}
	}
	text := decimalText(perSecond)
	if outOfRange(text) {
		return Policy{}, &PolicyError{Kind: k.Name, Field: "rate", Reason: contract.Errors.OutOfRange}
	}
	rate, ok := new(big.Rat).SetString(text)
	if !ok {
		return Policy{}, &PolicyError{Kind: k.Name, Field: "rate", Reason: paramError(k.Name, "rate", 0)}
	}
	// ceil(rate) > the highest rate
	ceilRate := ceilDiv(rate.Num(), rate.Denom())
	if ceilRate.Cmp(new(big.Int).SetUint64(b.MaxRatePerSec)) > 0 {
		return Policy{}, &PolicyError{Kind: k.Name, Field: "rate", Reason: paramError(k.Name, "rate", 1)}
	}
	tooLong := &PolicyError{Kind: k.Name, Field: "capacity", Reason: paramError(k.Name, "capacity", 1)}
	// core/src/token_bucket.rs: the emission interval and a full refill, in ns, rounded up.
	ns := big.NewInt(nsPerSec)
	// 1e9 / (num/den) = 1e9*den/num
	interval := ceilDiv(new(big.Int).Mul(ns, rate.Denom()), rate.Num())
	capBig := new(big.Int).SetUint64(capacity)
	exact := ceilDiv(new(big.Int).Mul(new(big.Int).Mul(capBig, ns), rate.Denom()), rate.Num())
	tau := new(big.Int).Mul(interval, capBig)
	horizon := new(big.Int).Mul(new(big.Int).SetUint64(b.MaxHorizonSecs), ns)
	if tau.Cmp(horizon) > 0 || interval.Sign() == 0 {
		return Policy{}, tooLong
	}
	minExact := exact
	if tau.Cmp(exact) < 0 {
		minExact = tau
	}
	slack := new(big.Int).Sub(tau, minExact)
	if im1 := new(big.Int).Sub(interval, big.NewInt(1)); im1.Cmp(slack) < 0 {
		slack = im1
	}
	period := new(big.Int).Sub(tau, slack)
	return Policy{
		kind:   k,
		limit:  capacity,
		params: [2]string{strconv.FormatUint(capacity, 10), text},
		period: time.Duration(period.Int64()),
	}, nil
}

func windowed(kindName string, limit uint64, window time.Duration, high uint64, expected string) (Policy, error) {
	k := kindOf(kindName)
	limit, err := whole(k.Name, "limit", limit, 1, high, expected)
	if err != nil {
		return Policy{}, err
	}
	ms, err := milliseconds(k.Name, "window", window, paramError(k.Name, "window", 0))
	if err != nil {
		return Policy{}, err
	}
	return Policy{
		kind:   k,
		limit:  limit,
		params: [2]string{strconv.FormatUint(limit, 10), secondsText(ms)},
		period: time.Duration(ms) * time.Millisecond,
	}, nil
}

// FixedWindow is RL.FIXED: limit units per window; a window starts at the key's first request.
func FixedWindow(limit uint64, window time.Duration) (Policy, error) {
	return windowed("fixed_window", limit, window, contract.Bounds.MaxWhole, paramError("fixed_window", "limit", 0))
}

// SlidingCounter is RL.SLIDECOUNT: the sliding window counter, O(1) memory.
func SlidingCounter(limit uint64, window time.Duration) (Policy, error) {
	return windowed("sliding_counter", limit, window, contract.Bounds.MaxWhole, paramError("sliding_counter", "limit", 0))
}

// SlidingLog is RL.SLIDE: the exact sliding window, at most limit requests in any window (memory
// grows with the limit). Counts requests: its cost is always 1.
func SlidingLog(limit uint64, window time.Duration) (Policy, error) {
	return windowed("sliding_log", limit, window, contract.Bounds.MaxLogLimit, paramError("sliding_log", "limit", 0))
}

// Concurrency is RL.ACQUIRE: at most limit weight of work in flight, each permit held on a lease
// its holder renews while it lives. Taken with Acquire, never with Check.
func Concurrency(limit uint64, lease time.Duration) (Policy, error) {
	k := kindOf("concurrency")
	expected := paramError(k.Name, "limit", 0)
	// In core's order: a whole limit, the lease, then the limit's range.
	limit, err := whole(k.Name, "limit", limit, 1, contract.Bounds.MaxWhole, expected)
	if err != nil {
		return Policy{}, err
	}
	ms, err := milliseconds(k.Name, "lease", lease, paramError(k.Name, "lease", 0))
	if err != nil {
		return Policy{}, err
	}
	if limit > contract.Bounds.MaxLeaseLimit {
		return Policy{}, &PolicyError{Kind: k.Name, Field: "limit", Reason: expected}
	}
	return Policy{
		kind:   k,
		limit:  limit,
		params: [2]string{strconv.FormatUint(limit, 10), secondsText(ms)},
		period: time.Duration(ms) * time.Millisecond,
	}, nil
}

// DefaultLease is how long batched units may be held when a policy names no lease (the contract's
// batching.lease_ms: 1 s).
func DefaultLease() time.Duration { return time.Duration(contract.Batching.LeaseMs) * time.Millisecond }

// WithBatch is p with its units taken from Redis up to batch at a time and spent in this process
// (docs/high-volume.md): batch from 1 to the policy's limit, each batch held at most lease (whole
// milliseconds, at least 1; DefaultLease() is 1 s) before the unused units go back. Fewer round
// trips for hot keys, never admitted beyond the limit, at most batch - 1 units per key idle in each
// instance. Token buckets, fixed windows and sliding counters; the kinds that take no refunds (a
// sliding log, a concurrency limit) refuse it. The error is a *PolicyError (it matches ErrUsage).
func (p Policy) WithBatch(batch uint64, lease time.Duration) (Policy, error) {
	if !p.Valid() {
		return Policy{}, usage("WithBatch of no policy")
	}
	b := &contract.Batching
	refused := func(field, reason string) (Policy, error) {
		return Policy{}, &PolicyError{Kind: p.kind.Name, Field: field, Reason: reason}
	}
	if _, ok := b.Kinds[p.kind.Name]; !ok {
		return refused("batch", strings.ReplaceAll(b.Errors.Kind, "{kind}", p.kind.Name))
	}
	if batch < 1 || batch > p.limit {
		return refused("batch", b.Errors.Batch)
	}
	if lease < time.Millisecond || lease%time.Millisecond != 0 {
		return refused("lease", b.Errors.Lease)
	}
	p.batch, p.lease = batch, lease
	return p, nil
}

// Batch is the most units one call takes (0: not batched) and how long they may be held.
func (p Policy) Batch() (uint64, time.Duration) { return p.batch, p.lease }

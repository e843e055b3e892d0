package ratelimit

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"
)

// Token-budget holds (RL.HOLD / RL.SETTLE, docs/commands.md): budgets whose cost is known only
// after the work (LLM tokens). Limiter.Hold holds an estimate now, atomically over every limit;
// Hold.Settle reports the actual later, once: the unused units go back (or an excess is charged) in
// the window the hold was taken from.

// DefaultHoldTTL is how long a hold lives unless HoldOptions.TTL says otherwise: a long model
// call, with room to settle. It is the contract's holds.ttl_default_secs (5 min), read when the
// package loads (contract.go); not meant to be changed.
var DefaultHoldTTL time.Duration

// SettleTries is how many times a settle is sent while Redis does not answer (each within the
// limiter's deadline) before it is logged and given up.
const SettleTries = 3

// Abandon is what happens to a hold never settled by the end of its ttl.
type Abandon int

const (
	// AbandonDefault is the contract's default (Charge).
	AbandonDefault Abandon = iota
	// Charge: a hold never settled stays charged (billing-safe).
	Charge
	// Return: a hold never settled gives back what it held beyond the usage Add reported.
	Return
)

// HoldLimit is one limit of a hold: its key, policy and units (the estimate). A held limit of a
// token bucket, fixed window or sliding counter is settled later; an Exact one is charged as given
// and never settled (a request count, prompt tokens counted before the call). Limits of other
// kinds (a sliding log) are decided with the others and not held.
type HoldLimit struct {
	Key    string
	Policy Policy
	Units  uint64
	Exact  bool
}

// HeldLimit is a limit held at estimate units and settled later.
func HeldLimit(key string, p Policy, estimate uint64) HoldLimit {
	return HoldLimit{Key: key, Policy: p, Units: estimate}
}

// ExactLimit is a limit charged units exactly, never settled.
func ExactLimit(key string, p Policy, units uint64) HoldLimit {
	return HoldLimit{Key: key, Policy: p, Units: units, Exact: true}
}

// HoldOptions are a hold's id, ttl, abandon policy and ledger; the zero value takes the defaults.
type HoldOptions struct {
	// ID names the hold (1 to the contract's most bytes); default: a request id unique to this call.
	// Holding again with the same id takes nothing and replies as the first hold did.
	ID string
	// TTL is how long the hold lives unsettled, in whole milliseconds (default DefaultHoldTTL).
	TTL time.Duration
	// Abandon is what a hold never settled does when its ttl ends (default: the contract's).
	Abandon Abandon
	// Ledger is the key recording the hold; default: the contract's ledger of the first key's hash
	// tag (rl:holds:{tag}), so it shares the limits' slot.
	Ledger string
}

// Hold is a hold the limiter took (or the failure policy decided: Local). Decision says whether it
// was allowed. Settle or Cancel it, and `defer h.Close(ctx)`: leaving the scope unsettled applies
// the hold's abandon policy now (Close). Its methods are safe for concurrent use and on a nil *Hold.
//
// Add, Settle, SettleEach, Cancel and Close outlive the caller's context: each sends on
// context.WithoutCancel(ctx) (its values kept, for tracing), bounded by the limiter's own
// Options.Deadline per try, so a handler's `defer h.Close(r.Context())` still settles once the
// HTTP client went away (the tokens were used all the same).
type Hold struct {
	l        *Limiter
	Decision Decision
	id       string
	ledger   string
	keys     []string          // the keys settled: the held limits of held kinds
	estimate map[string]uint64 // each held key's estimate (its units)
	ret      bool              // the abandon policy is Return (else Charge)

	mu    sync.Mutex
	usage map[string]uint64 // the last usage Add reported, per key
	done  bool              // a FINAL was sent (or given up): Close sends nothing
}

// Settled is what a settle or a usage report met.
type Settled struct {
	// Decision is the most restrictive named limit after the settle, as a one-unit request would
	// meet it now (Limiting: its position among the keys named). Allowed false: a limit went past its
	// held units and has nothing left (stop a stream).
	Decision
	// Found is false when Redis holds no hold of this id (ended, never held, denied) or the hold
	// holds nothing there (local, or no held limit): nothing changed.
	Found bool
	// GaveUp: Redis did not answer (an outage, a misconfiguration) after the tries; it was logged,
	// and the hold ends by its ttl as its abandon policy says.
	GaveUp bool
}

// ID is the hold's id; Ledger the key recording it.
func (h *Hold) ID() string     { return h.id }
func (h *Hold) Ledger() string { return h.ledger }

// Local says whether the failure policy decided the hold (Redis did not): nothing is held in
// Redis, and Add, Settle and Cancel do nothing.
func (h *Hold) Local() bool { return h != nil && h.Decision.Degraded }

// holds says whether Redis holds units for the hold: allowed, not local, a held limit among its limits.
func (h *Hold) holds() bool {
	return h != nil && h.Decision.Allowed && !h.Decision.Degraded && len(h.keys) > 0
}

// Hold decides limits atomically as CheckAll does and, allowed, holds their units under an id
// (RL.HOLD). A call Redis did not decide gets the failure policy's decision and a Local hold. The
// error is a *UsageError (ErrUsage) only: a call that cannot be built, or one Redis refused as the
// caller's (the contract's hold errors among them).
func (l *Limiter) Hold(ctx context.Context, opts HoldOptions, limits ...HoldLimit) (*Hold, error) {
	h, cmd, plain, err := newHold(l, opts, limits)
	if err != nil {
		return nil, l.refused(err)
	}
	v, err := l.call(ctx, cmd)
	if err == nil {
		h.Decision, err = DecisionOfReply(v)
	}
	var ce *CallError
	switch {
	case errors.As(err, &ce):
		h.Decision = l.degrade(plain, ce)
	case err != nil:
		return nil, err
	default:
		l.decided(h.Decision)
	}
	return h, nil
}

// newHold is the hold of limits before it is sent: its RL.HOLD and its limits as a check's.
func newHold(l *Limiter, opts HoldOptions, limits []HoldLimit) (*Hold, []string, []Limit, error) {
	if len(limits) == 0 {
		return nil, nil, nil, usage("no limits to hold")
	}
	h := &Hold{l: l, id: opts.ID, ledger: opts.Ledger, usage: map[string]uint64{}, estimate: map[string]uint64{}}
	if h.id == "" {
		h.id = requestID()
	}
	if len(h.id) > contract.Holds.MaxIDBytes {
		return nil, nil, nil, usageReply(holdError("id"))
	}
	if h.ledger == "" {
		h.ledger = ledgerOf(limits[0].Key)
	}
	ttl := opts.TTL
	if ttl == 0 {
		ttl = DefaultHoldTTL
	}
	ms := (ttl + time.Millisecond/2) / time.Millisecond
	if ms <= 0 || int64(ms) > contract.Holds.MaxTTLSecs*1000 {
		return nil, nil, nil, usageReply(holdError("ttl"))
	}
	if opts.Abandon < AbandonDefault || opts.Abandon > Return {
		return nil, nil, nil, usage("unknown abandon policy %d", opts.Abandon)
	}
	h.ret = abandonReturns(opts.Abandon)
	plain := make([]Limit, len(limits))
	for i, lim := range limits {
		if !lim.Policy.Valid() {
			return nil, nil, nil, usage("limit %q has no policy", lim.Key)
		}
		if lim.Policy.IsConcurrency() {
			return nil, nil, nil, usage("a concurrency limit is held by a permit (Acquire), not a hold")
		}
		plain[i] = Limit{Key: lim.Key, Policy: lim.Policy, Cost: lim.Units}
		if !lim.Exact && heldKind(lim.Policy.Kind()) {
			h.keys = append(h.keys, lim.Key)
			h.estimate[lim.Key] = lim.Units
		}
	}
	cmd := holdCall("hold", map[string]string{"ledger": h.ledger, "id": h.id,
		"ttl": secondsText(uint64(ms)), "abandon": abandonWord(opts.Abandon)})
	cmd, err := groups(cmd, plain, nil)
	if err != nil {
		return nil, nil, nil, err
	}
	return h, cmd, plain, nil
}

// pairs are the keys and units a settle names: units for every held key, or each.
func (h *Hold) pairs(units uint64, each map[string]uint64) ([]string, map[string]uint64, error) {
	if each == nil {
		each = make(map[string]uint64, len(h.keys))
		for _, k := range h.keys {
			each[k] = units
		}
	}
	var out []string
	for _, k := range h.keys { // in the hold's order
		if n, ok := each[k]; ok {
			out = append(out, k, strconv.FormatUint(n, 10))
		}
	}
	if len(out) != 2*len(each) {
		return nil, nil, usageReply(holdError("key"))
	}
	return out, each, nil
}

// Add reports the usage so far (a running total) on every held limit: usage past the hold is
// charged as it comes (PARTIAL). stop is true when a limit went past its held units and has nothing
// left: stop the stream. Sent once; a report Redis did not answer returns false (the next
// report's running total covers it). Does nothing on a hold that holds nothing.
func (h *Hold) Add(ctx context.Context, usage uint64) (stop bool, err error) {
	return h.add(ctx, usage, nil)
}

// AddEach is Add with the usage so far of each key named (held keys only).
func (h *Hold) AddEach(ctx context.Context, usage map[string]uint64) (stop bool, err error) {
	if usage == nil {
		usage = map[string]uint64{}
	}
	return h.add(ctx, 0, usage)
}

func (h *Hold) add(ctx context.Context, units uint64, each map[string]uint64) (bool, error) {
	if !h.holds() {
		return false, nil
	}
	pairs, each, err := h.pairs(units, each)
	if err != nil {
		return false, h.l.refused(err)
	}
	h.mu.Lock()
	done := h.done
	if !done {
		for k, n := range each {
			h.usage[k] = n
		}
	}
	h.mu.Unlock()
	if done || len(pairs) == 0 {
		return false, nil
	}
	s, err := h.send(ctx, false, pairs, 1)
	return s.Found && !s.Allowed, err
}

// Settle settles the hold with the actual usage on every held limit (FINAL), once: the unused
// units go back, an excess is charged, in the window the hold was taken from. Safe to call again:
// Redis replies as the first settle did. A settle Redis does not answer is sent SettleTries times
// with the same id, then logged and given up (GaveUp, no error). The error is a *UsageError only.
func (h *Hold) Settle(ctx context.Context, actual uint64) (Settled, error) {
	return h.final(ctx, actual, nil)
}

// SettleEach is Settle with the actual usage of each key named (held keys only); the held limits
// not named stay charged as held.
func (h *Hold) SettleEach(ctx context.Context, actual map[string]uint64) (Settled, error) {
	if actual == nil {
		actual = map[string]uint64{}
	}
	return h.final(ctx, 0, actual)
}

// Cancel gives every held unit back (FINAL with 0); Exact limits stay charged.
func (h *Hold) Cancel(ctx context.Context) (Settled, error) { return h.final(ctx, 0, nil) }

// Close ends the hold's scope. After a Settle, SettleEach or Cancel (or on a hold that holds
// nothing) it sends nothing. Left unsettled (an early return, a panic, a caller that went away, or
// simply no settle), the hold's abandon policy is applied now, as a FINAL (what the server would do
// when the ttl ends, done now): under Charge (the default) each held limit settles at the larger of
// its estimate and the last usage Add reported for it (nothing goes back: billing-safe); under
// Return at the last usage Add reported (0 when none): the unused part goes back. Exact limits are
// never named. Cancel is the explicit way to give everything back (say, the upstream call failed
// before anything was billed): call it in that error path. Close sends on
// context.WithoutCancel(ctx), bounded by the limiter's deadline, so `defer h.Close(r.Context())`
// settles even after the client left.
func (h *Hold) Close(ctx context.Context) error {
	if !h.holds() {
		return nil
	}
	h.mu.Lock()
	done := h.done
	each := make(map[string]uint64, len(h.keys))
	for _, k := range h.keys {
		each[k] = h.usage[k]
		if !h.ret {
			each[k] = max(each[k], h.estimate[k])
		}
	}
	h.mu.Unlock()
	if done {
		return nil
	}
	_, err := h.final(ctx, 0, each)
	return err
}

func (h *Hold) final(ctx context.Context, units uint64, each map[string]uint64) (Settled, error) {
	if !h.holds() {
		return Settled{}, nil
	}
	pairs, _, err := h.pairs(units, each)
	if err != nil {
		return Settled{}, h.l.refused(err)
	}
	if len(pairs) == 0 {
		return Settled{}, nil
	}
	h.mu.Lock()
	h.done = true
	h.mu.Unlock()
	return h.send(ctx, true, pairs, SettleTries)
}

// send is RL.SETTLE with pairs, sent up to tries times while Redis is in an outage. A call Redis
// did not answer after them is given up (a FINAL's logged once): no error. It runs on
// context.WithoutCancel(ctx): a caller gone (or past its own deadline) does not stop a settle of
// usage already billed; each try is bounded by the limiter's deadline (Limiter.call), so it ends.
func (h *Hold) send(ctx context.Context, final bool, pairs []string, tries int) (Settled, error) {
	ctx = context.WithoutCancel(ctx)
	mode := holdMode(final)
	cmd := append(holdCall("settle", map[string]string{"ledger": h.ledger, "id": h.id, "mode": mode}), pairs...)
	var ce *CallError
	for try := 1; try <= tries; try++ {
		v, err := h.l.call(ctx, cmd)
		if err == nil && v == nil {
			return Settled{}, nil // no hold of this id: nothing changed
		}
		if err == nil {
			var d Decision
			if d, err = DecisionOfReply(v); err == nil {
				return Settled{Decision: d, Found: true}, nil
			}
		}
		if !errors.As(err, &ce) {
			return Settled{}, err // the caller's (usage)
		}
		if ce.Class != ClassOutage {
			break
		}
	}
	if final {
		h.l.log.Warn("redis-ratelimit: a hold's settle was given up: Redis did not take it; the hold ends by its ttl as its abandon policy says",
			"ledger", h.ledger, "id", h.id, "mode", mode, "tries", tries, "cause", ce.Error())
	}
	return Settled{GaveUp: true}, nil
}

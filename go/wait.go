package ratelimit

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"
)

// Reserve takes cost tokens from a token bucket now if they come within maxWait (RL.RESERVE):
// allowed with RetryAfter the time to wait before going ahead (the tokens are the caller's
// already), or denied (nothing taken) when they come later. See Wait, which sleeps.
func (l *Limiter) Reserve(ctx context.Context, key string, p Policy, cost uint64, maxWait time.Duration) (Decision, error) {
	if p.Kind() != "token_bucket" {
		return Decision{}, l.refused(usage("reservations are made on token buckets"))
	}
	return l.reserve(ctx, []Limit{{key, p, cost}}, maxWait)
}

func (l *Limiter) reserve(ctx context.Context, limits []Limit, maxWait time.Duration) (Decision, error) {
	cmd, err := buildReserve(limits, maxWait)
	if err != nil {
		return Decision{}, l.refused(err)
	}
	if cmd == nil {
		return l.CheckAll(ctx, limits...)
	}
	if _, err := buildDecide(limits); err != nil { // the same usage rules as a check
		return Decision{}, l.refused(err)
	}
	v, err := l.call(ctx, cmd)
	var d Decision
	if err == nil {
		d, err = DecisionOfReply(v)
	}
	var ce *CallError
	if errors.As(err, &ce) {
		return l.degrade(limits, ce), nil
	}
	if err != nil {
		return Decision{}, err
	}
	return l.decided(d), nil
}

// Wait decides limits, waiting up to maxWait for them: the token buckets among them are reserved
// in the same call and the wait is slept once; limits of other kinds are asked again after their
// RetryAfter while it fits in maxWait. Returns the decision (allowed with RetryAfter 0 after the
// sleep), or a denial when the wait would be longer. A ctx ended during the sleep gives the
// reserved tokens back and returns ctx.Err().
func (l *Limiter) Wait(ctx context.Context, maxWait time.Duration, limits ...Limit) (Decision, error) {
	giveUp := time.Now().Add(maxWait)
	reserving := false
	for _, lim := range limits {
		reserving = reserving || lim.Policy.Kind() == "token_bucket"
	}
	for {
		left := max(0, time.Until(giveUp))
		d, err := l.reserve(ctx, limits, left)
		if err != nil || d.Degraded {
			return d, err
		}
		if d.Allowed {
			if reserving && d.RetryAfter > 0 {
				if err := sleep(ctx, d.RetryAfter); err != nil {
					l.giveBack(limits)
					return Decision{}, err
				}
				d.RetryAfter = 0
			}
			return d, nil
		}
		if d.RetryAfter < 0 || left <= 0 || d.RetryAfter > left {
			return d, nil
		}
		next := d.RetryAfter
		if lp := limits[min(d.Limiting, len(limits)-1)].Policy; lp.Kind() == "token_bucket" {
			next = max(0, next-lp.Period()) // a bucket is asked again once the wait is within a reservation
		}
		next += time.Duration(rand.Int64N(int64(max(next/10, time.Millisecond))))
		if err := sleep(ctx, min(max(next, time.Millisecond), left)); err != nil {
			return Decision{}, err
		}
	}
}

// giveBack refunds what an allowed, given-up wait took.
func (l *Limiter) giveBack(limits []Limit) {
	for _, lim := range limits {
		if lim.Cost > 0 && lim.Policy.kind.Refunds {
			_ = l.Refund(context.Background(), lim.Key, lim.Policy, lim.Cost)
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ReserveBatch reserves at least least and at most most tokens of a bucket within maxWait
// (RL.RESERVE ... UPTO most): a batch worker's call. Taken.Taken is how many; RetryAfter the
// wait before using them.
func (l *Limiter) ReserveBatch(ctx context.Context, key string, p Policy, least, most uint64, maxWait time.Duration) (Taken, error) {
	cmd, err := buildBatch(key, p, least, most, maxWait)
	if err != nil {
		return Taken{}, l.refused(err)
	}
	v, err := l.call(ctx, cmd)
	var t Taken
	if err == nil {
		t, err = takenOf(v)
	}
	var ce *CallError
	if errors.As(err, &ce) {
		if l.local == nil {
			most = least // fail open grants the least asked
		}
		return l.degradeTake(key, p, least, most, ce), nil
	}
	if err == nil {
		l.decided(t.Decision)
	}
	return t, err
}

package ratelimit

import (
	"context"
	"errors"
	"time"
)

// The limiter's side of docs/high-volume.md: the pre-check (denialcache.go) and batched units
// (batchunits.go, the rules) with their round trips: a check's call, refunds sent without the
// caller waiting, and Close giving every unit back.

// decideAt is a check at now (Unix ns): the pre-check's denial, else batched units or cmd's one call.
func (l *Limiter) decideAt(now int64, limits []Limit, cmd []string, io unitIO) (Decision, error) {
	var key string
	var cost uint64
	if l.denials != nil {
		key, cost = denialKey(limits)
		if d, ok := l.denials.check(key, cost, now); ok {
			return d, nil
		}
	}
	var d Decision
	var err error
	if usesUnits(limits) {
		d, err = l.units.check(now, limits, io)
	} else {
		d, err = io.call(cmd)
	}
	if err == nil && l.denials != nil {
		l.denials.remember(key, cost, d, now)
	}
	return d, err
}

// unitIO sends a check's calls within ctx, and its refunds in the background.
func (l *Limiter) unitIO(ctx context.Context) unitIO {
	return unitIO{
		call: func(cmd []string) (Decision, error) {
			v, err := l.call(ctx, cmd)
			if err != nil {
				return Decision{}, err
			}
			return DecisionOfReply(v)
		},
		refund: func(cmd []string) {
			l.refunding.Add(1)
			go func() {
				defer l.refunding.Done()
				_ = l.refund(context.Background(), cmd) // lost in an outage: units a bucket refills, a window forgets
			}()
		},
	}
}

// refund sends one RL.REFUND of held units.
func (l *Limiter) refund(ctx context.Context, cmd []string) error {
	_, err := l.call(ctx, cmd)
	return err
}

// returnUnits gives every held unit back (Close), waiting for them and for refunds in flight.
func (l *Limiter) returnUnits() error {
	refunds := l.units.close(time.Now().UnixNano())
	errs := make(chan error, len(refunds))
	for _, cmd := range refunds {
		go func() { errs <- l.refund(context.Background(), cmd) }()
	}
	var all []error
	for range refunds {
		all = append(all, <-errs)
	}
	l.refunding.Wait()
	return errors.Join(all...)
}

// Held is how many units of key under p (a batched policy) this limiter holds now: taken from
// Redis and not yet spent.
func (l *Limiter) Held(key string, p Policy) uint64 { return l.units.held(key, p) }

package ratelimit

import (
	"context"
	"errors"
	"time"
)

// The limiter's side of docs/high-volume.md: the pre-check (denialcache.go) and batched units
// (batchunits.go, the rules) with their round trips: a check's call, refunds sent without the
// caller waiting, and Close giving every unit back.

// unixNow is the limiter's clock (Unix ns); the vectors give theirs.
func unixNow() int64 { return time.Now().UnixNano() }

// decideAt is a check at clock(): the pre-check's denial, else batched units or cmd's one call.
func (l *Limiter) decideAt(clock func() int64, limits []Limit, cmd []string, io unitIO) (Decision, error) {
	now := clock()
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
		d, err = l.units.check(clock, limits, io)
	} else {
		d, err = io.call(cmd)
	}
	if err == nil && l.denials != nil {
		l.denials.remember(key, cost, d, clock()) // from the answer: retry_after counts from it
	}
	return d, err
}

// unitIO sends a check's calls within ctx, and its refunds in the background.
func (l *Limiter) unitIO(ctx context.Context) unitIO {
	return unitIO{
		waitsWithin: l.deadline,
		call: func(cmd []string) (Decision, error) {
			v, err := l.call(ctx, cmd)
			if err != nil {
				return Decision{}, err
			}
			return DecisionOfReply(v)
		},
		refund: func(cmd []string) {
			l.background.Add(1)
			go func() {
				defer l.background.Done()
				_ = l.refund(context.Background(), cmd) // lost in an outage: units a bucket refills, a window forgets
			}()
		},
		ahead: func(cmd []string, answered func(Decision, error)) {
			l.background.Add(1)
			go func() {
				defer l.background.Done()
				v, err := l.call(context.Background(), cmd)
				var d Decision
				if err == nil {
					d, err = DecisionOfReply(v)
				}
				answered(d, err) // no decision of the limiter's: a batch for the checks to come
			}()
		},
	}
}

// refund sends one RL.REFUND of held units.
func (l *Limiter) refund(ctx context.Context, cmd []string) error {
	_, err := l.call(ctx, cmd)
	return err
}

// returnUnits gives every held unit back (Close): batching stops, the batch calls in flight land,
// then every held unit goes back; it waits for those refunds and the ones in flight.
func (l *Limiter) returnUnits() error {
	for _, flight := range l.units.stop() {
		<-flight // bounded: every call ends within the deadline
	}
	refunds := l.units.drain(time.Now().UnixNano())
	errs := make(chan error, len(refunds))
	for _, cmd := range refunds {
		go func() { errs <- l.refund(context.Background(), cmd) }()
	}
	var all []error
	for range refunds {
		all = append(all, <-errs)
	}
	l.background.Wait()
	return errors.Join(all...)
}

// Held is how many units of key under p (a batched policy) this limiter holds now: taken from
// Redis and not yet spent.
func (l *Limiter) Held(key string, p Policy) uint64 { return l.units.held(key, p) }

package ratelimit

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Permit holds the concurrency leases an Acquire took: renewed in the background (every third of
// the lease) until Release. Lost reports a lease Redis no longer held (it expired: the renewals
// failed for a whole lease), after which the slot may be someone else's.
type Permit struct {
	l        *Limiter
	Decision Decision
	holder   string
	leases   []Limit // the concurrency limits held

	stop     chan struct{}
	done     chan struct{}
	lost     chan struct{}
	lostOnce sync.Once
	released sync.Once
}

// Holder is the lease id the permit holds its slots under.
func (p *Permit) Holder() string { return p.holder }

// Lost is closed when a lease was lost.
func (p *Permit) Lost() <-chan struct{} { return p.lost }

// Acquire takes a slot of weight in a concurrency limit; see AcquireAll.
func (l *Limiter) Acquire(ctx context.Context, key string, p Policy, weight uint64) (*Permit, Decision, error) {
	return l.AcquireAll(ctx, Limit{Key: key, Policy: p, Cost: weight})
}

// AcquireAll decides limits atomically, the concurrency limits among them taken as leases (a
// concurrency limit's Cost is its weight). Allowed: the *Permit holds them until Release (call it,
// typically deferred). Denied: no permit. Degraded under fail open: a permit that holds nothing.
func (l *Limiter) AcquireAll(ctx context.Context, limits ...Limit) (*Permit, Decision, error) {
	holder := requestID()
	cmd, err := buildAcquire(limits, holder)
	if err != nil {
		return nil, Decision{}, err
	}
	v, err := l.call(ctx, cmd)
	var d Decision
	if err == nil {
		d, err = DecisionOfReply(v)
	}
	var ce *CallError
	if errors.As(err, &ce) {
		d = l.degrade(limits, ce)
		if !d.Allowed {
			return nil, d, nil
		}
		p := &Permit{l: l, Decision: d, holder: holder, stop: make(chan struct{}), done: make(chan struct{}), lost: make(chan struct{})}
		close(p.done)
		return p, d, nil
	}
	if err != nil {
		return nil, Decision{}, err
	}
	l.decided(d)
	if !d.Allowed {
		return nil, d, nil
	}
	p := &Permit{l: l, Decision: d, holder: holder, stop: make(chan struct{}), done: make(chan struct{}), lost: make(chan struct{})}
	for _, lim := range limits {
		if lim.Policy.IsConcurrency() {
			p.leases = append(p.leases, lim)
		}
	}
	go p.renew()
	return p, d, nil
}

func (p *Permit) renew() {
	defer close(p.done)
	if len(p.leases) == 0 {
		return
	}
	every := p.leases[0].Policy.Period()
	for _, lim := range p.leases[1:] {
		every = min(every, lim.Policy.Period())
	}
	t := time.NewTicker(max(every/3, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		for _, lim := range p.leases {
			v, err := p.l.call(context.Background(), buildRenew(lim.Key, lim.Policy.Period(), p.holder))
			if err != nil {
				continue // tried again at the next tick; the lease outlives two missed renewals
			}
			if n, ok := v.(int64); ok && n == 0 {
				p.lostOnce.Do(func() {
					close(p.lost)
					p.l.log.Warn("redis-ratelimit: a concurrency lease was lost (expired before renewal)",
						"key", lim.Key, "holder", p.holder)
				})
			}
		}
	}
}

// Release ends the renewals and gives the slots back. It reports whether every lease was still
// held (false: one was lost or released already). Safe to call more than once.
func (p *Permit) Release(ctx context.Context) (bool, error) {
	if p == nil {
		return false, nil
	}
	held, first := true, false
	var firstErr error
	p.released.Do(func() {
		first = true
		close(p.stop)
		<-p.done
		for _, lim := range p.leases {
			v, err := p.l.call(ctx, buildRelease(lim.Key, p.holder))
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				continue
			}
			if n, ok := v.(int64); ok && n == 0 {
				held = false
			}
		}
	})
	return first && held, firstErr
}

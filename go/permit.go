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
	local    bool    // held by the local fallback's in-process semaphore, not in Redis

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
// typically deferred). Denied: no permit. Degraded under fail open: a permit that holds nothing;
// under LocalFallback: leases of the in-process semaphore (its share of each limit), renewed and
// released there.
func (l *Limiter) AcquireAll(ctx context.Context, limits ...Limit) (*Permit, Decision, error) {
	holder := requestID()
	cmd, err := buildAcquire(limits, holder)
	if err != nil {
		return nil, Decision{}, l.refused(err)
	}
	v, err := l.call(ctx, cmd)
	var d Decision
	if err == nil {
		d, err = DecisionOfReply(v)
	}
	var ce *CallError
	if errors.As(err, &ce) && l.local != nil {
		d = l.countDegraded(l.local.decide(limits, &holder, time.Now().UnixNano(), true), ce)
		if !d.Allowed {
			return nil, d, nil
		}
		p := &Permit{l: l, Decision: d, holder: holder, local: true, stop: make(chan struct{}), done: make(chan struct{}), lost: make(chan struct{})}
		p.leases = concurrencyLimits(limits)
		go p.renew()
		return p, d, nil
	}
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
	p.leases = concurrencyLimits(limits)
	go p.renew()
	return p, d, nil
}

func concurrencyLimits(limits []Limit) []Limit {
	var out []Limit
	for _, lim := range limits {
		if lim.Policy.IsConcurrency() {
			out = append(out, lim)
		}
	}
	return out
}

// renewLease is RL.RENEW of one lease (or the local semaphore's): whether it was still held; an
// error when Redis did not answer.
func (p *Permit) renewLease(lim Limit) (bool, error) {
	if p.local {
		return p.l.local.leaseOp(lim.Key, p.holder, lim.Policy.Period(), time.Now().UnixNano()), nil
	}
	v, err := p.l.call(context.Background(), buildRenew(lim.Key, lim.Policy.Period(), p.holder))
	if err != nil {
		return false, err
	}
	n, ok := v.(int64)
	return !ok || n != 0, nil
}

func (p *Permit) releaseLease(ctx context.Context, lim Limit) (bool, error) {
	if p.local {
		return p.l.local.leaseOp(lim.Key, p.holder, 0, time.Now().UnixNano()), nil
	}
	v, err := p.l.call(ctx, buildRelease(lim.Key, p.holder))
	if err != nil {
		return false, err
	}
	n, ok := v.(int64)
	return !ok || n != 0, nil
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
			held, err := p.renewLease(lim)
			if err != nil {
				continue // tried again at the next tick; the lease outlives two missed renewals
			}
			if !held {
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
			ok, err := p.releaseLease(ctx, lim)
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				continue
			}
			held = held && ok
		}
	})
	return first && held, firstErr
}

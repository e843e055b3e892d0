package ratelimit

import (
	"sync"
	"time"
)

// breaker: after `failures` failed calls in a row, Redis is not called for `cooldown`, so an
// outage costs no request a timeout; then one call (and only one) tries Redis, and its outcome
// closes the breaker or opens it for another cool-down. Meanwhile the limiter's probe asks Redis
// every 50 ms and closes the breaker as soon as it answers. Only outages count against Redis
// (the contract's classes: breaker "failure"); a misconfiguration, a conflict or a usage error
// that Redis answered is a success (breaker "answered"), as a decision is.
type breaker struct {
	failures int
	cooldown time.Duration
	now      func() time.Time

	mu       sync.Mutex
	state    int // closed, open, probing
	inARow   int
	until    time.Time
	opened   uint64
	rejected uint64
}

const (
	breakerClosed = iota
	breakerOpen
	breakerProbing
)

func (b *breaker) allow() bool {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == breakerClosed {
		return true
	}
	if !now.Before(b.until) {
		b.state = breakerProbing
		b.until = now.Add(max(b.cooldown, time.Second))
		return true
	}
	b.rejected++
	return false
}

// success: Redis answered (a decision, or an error reply of a class whose breaker is "answered":
// a misconfiguration, a conflict, a usage error); resets the failures in a row and ends a probe.
// True when this closed the breaker.
func (b *breaker) success() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	was := b.state
	b.state, b.inARow = breakerClosed, 0
	return was != breakerClosed
}

// failure: no answer; counts towards opening; a failed probe opens it again at once. True when
// this opened it.
func (b *breaker) failure() bool {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == breakerClosed {
		b.inARow++
		if b.inARow < b.failures {
			return false
		}
	}
	return b.open(now)
}

func (b *breaker) open(now time.Time) bool {
	opened := b.state == breakerClosed
	if opened {
		b.opened++
	}
	b.state, b.until, b.inARow = breakerOpen, now.Add(b.cooldown), 0
	return opened
}

// awaitsRedis: open (what the probe watches).
func (b *breaker) awaitsRedis() bool { return b.isOpen() }

func (b *breaker) isOpen() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state != breakerClosed
}

package ratelimit

import (
	"sync"
	"time"
)

// breaker: after `failures` failed calls in a row, Redis is not called for `cooldown`, so an
// outage costs no request a timeout; then one call (and only one) tries Redis, and its outcome
// closes the breaker or opens it for another cool-down. Meanwhile the limiter's probe asks Redis
// every probeEvery and closes the breaker as soon as it answers. A configuration fault opens it
// at once: Redis answers, but only the cool-down can tell whether the fault was fixed.
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
	fault    bool // open for a configuration fault (the probe's PING cannot end it)
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

// success: Redis answered (a decision, or an error reply such as a bad argument). True when this
// closed the breaker.
func (b *breaker) success() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	was := b.state
	b.state, b.inARow, b.fault = breakerClosed, 0, false
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
	return b.open(now, false)
}

func (b *breaker) configFault() bool {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.open(now, true)
}

func (b *breaker) open(now time.Time, fault bool) bool {
	opened := b.state == breakerClosed
	if opened {
		b.opened++
	}
	b.state, b.until, b.inARow, b.fault = breakerOpen, now.Add(b.cooldown), 0, fault
	return opened
}

// awaitsRedis: open for an outage (what the probe watches).
func (b *breaker) awaitsRedis() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state != breakerClosed && !b.fault
}

func (b *breaker) isOpen() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state != breakerClosed
}

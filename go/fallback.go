package ratelimit

import (
	"math"
	"math/bits"
	"sort"
	"sync"
	"time"
)

// The local fallback (LocalFallback): while Redis cannot decide, each application instance limits
// on its own with core's algorithms and its share of each limit (limit / instances, at least 1; a
// token bucket refills instances times slower). Imprecise by design: a rough bound that stays
// available. As client/src/fallback.rs (the Rust reference) and python's local_kinds.py, held to
// both by contract/vectors/fallback.json.
//
// The sliding log, which keeps every request, is approximated by the sliding counter (O(1) memory
// per key). Memory is bounded: past maxLocalKeys() keys, expired state goes first, then everything
// (a fresh start errs towards allowing, as failing open does).

// maxLocalKeys is the contract's fallback.max_keys (read after the contract's init).
func maxLocalKeys() int { return contract.Fallback.MaxKeys }

// verdict is core's: durations in ns; retry < 0 is "never fits".
type verdict struct {
	allowed   bool
	limit     uint64
	remaining uint64
	retry     int64
	reset     int64
}

const never int64 = -1

// outcome is one limit's verdict and the state to store (nil: nothing to write), with when it
// stops mattering (Unix ns).
type outcome struct {
	verdict
	state     any
	expiresAt int64
	repair    bool // the state is a repair, stored even when the combination is denied
}

type bucketState struct{ tat int64 }

type windowState struct {
	count  uint64
	endsAt int64
}

type counterState struct{ window, current, previous uint64 }

type lease struct {
	id       string
	expireUs uint64
	weight   uint64
}

type leasesState struct{ held []lease }

type localEntry struct {
	state     any
	expiresAt int64
}

type localLimiter struct {
	instances uint64
	mu        sync.Mutex
	entries   map[string]localEntry
}

func newLocalLimiter(instances int) *localLimiter {
	return &localLimiter{instances: uint64(max(1, instances)), entries: map[string]localEntry{}}
}

func (l *localLimiter) stored(key string, now int64) any {
	e, ok := l.entries[key]
	if !ok || e.expiresAt <= now {
		return nil
	}
	return e.state
}

func (l *localLimiter) store(key string, o outcome, now int64) {
	if o.state == nil {
		return
	}
	if o.expiresAt <= now {
		delete(l.entries, key)
		return
	}
	l.entries[key] = localEntry{o.state, o.expiresAt}
}

func (l *localLimiter) makeRoom(more int, now int64) {
	if len(l.entries)+more <= maxLocalKeys() {
		return
	}
	for k, e := range l.entries {
		if e.expiresAt <= now {
			delete(l.entries, k)
		}
	}
	if len(l.entries)+more > maxLocalKeys() {
		clear(l.entries)
	}
}

// decide decides limits together at now, all or nothing as RL.ALL does; the concurrency limits
// among them take leases held by holder (none without one: a check cannot take a lease it could
// never release).
func (l *localLimiter) decide(limits []Limit, holder *string, now int64, degraded bool) Decision {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(limits) == 0 {
		return toDecision(verdict{allowed: true}, 0, degraded)
	}
	outcomes := make([]outcome, len(limits))
	for i, lim := range limits {
		outcomes[i] = decideOne(l.share(lim.Policy), l.stored(lim.Key, now), now, lim.Cost, holder)
	}
	limiting := mostRestrictive(outcomes)
	v := outcomes[limiting].verdict
	l.makeRoom(len(limits), now)
	for i, lim := range limits {
		if v.allowed || outcomes[i].repair {
			l.store(lim.Key, outcomes[i], now)
		}
	}
	return toDecision(v, limiting, degraded)
}

// reserve is RL.RESERVE on the token bucket of p at this instance's share: at least cost, up to
// upto tokens, within maxWait (RL.TAKE: cost 1, no wait).
func (l *localLimiter) reserve(key string, p Policy, cost, upto uint64, maxWait int64, now int64, degraded bool) Taken {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.share(p)
	if s.kind != "token_bucket" {
		return Taken{Decision: toDecision(neverFits(s.limit).verdict, 0, degraded)}
	}
	tat := bucketOf(l.stored(key, now))
	available := s.bucket(tat, now, 0, 0).remaining
	taken := max(min(available, upto), cost)
	o := s.bucket(tat, now, taken, maxWait)
	if o.state != nil {
		l.makeRoom(1, now)
		l.store(key, o, now)
	}
	t := Taken{Decision: toDecision(o.verdict, 0, degraded)}
	if o.allowed {
		t.Taken = taken
	}
	return t
}

// refund gives units back (token buckets, fixed windows, sliding counters), as RL.REFUND does.
func (l *localLimiter) refund(key string, p Policy, units uint64, now int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.share(p)
	stored := l.stored(key, now)
	switch s.kind {
	case "token_bucket":
		tat := bucketOf(stored)
		backlog, _ := s.backlog(tat, now)
		if backlog == 0 || units == 0 {
			return
		}
		credit := satMul(int64(min(units, s.limit)), s.interval)
		next := now + max(0, backlog-credit)
		l.store(key, outcome{state: bucketState{next}, expiresAt: max(next, now+1)}, now)
	case "fixed_window":
		w, ok := stored.(windowState)
		if !ok || w.endsAt <= now || w.count == 0 || units == 0 {
			return
		}
		w.count -= min(units, w.count)
		l.store(key, outcome{state: w, expiresAt: w.endsAt}, now)
	case "sliding_counter":
		c, ok := stored.(counterState)
		if !ok || c.window < uint64(now)/uint64(s.period) || c.current == 0 || units == 0 {
			return
		}
		c.current -= min(units, c.current)
		l.store(key, outcome{state: c, expiresAt: s.counterExpiry(c)}, now)
	}
}

// leaseOp is RL.RENEW (lease > 0) or RL.RELEASE (lease 0) of holder's lease at key: whether it
// held one.
func (l *localLimiter) leaseOp(key, holder string, lease time.Duration, now int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, _ := l.stored(key, now).(leasesState)
	nowUs := uint64(now / 1000)
	held := liveLeases(s.held, nowUs, math.MaxUint64)
	i := holding(held, holder)
	if i < 0 {
		return false
	}
	if lease > 0 {
		held[i].expireUs = nowUs + uint64(lease/time.Microsecond)
	} else {
		held = append(held[:i], held[i+1:]...)
	}
	last := nowUs
	for _, h := range held {
		last = max(last, h.expireUs)
	}
	l.store(key, outcome{state: leasesState{held}, expiresAt: int64(last) * 1000}, now)
	return true
}

// shared is one policy at an instance's share, in core's terms.
type shared struct {
	kind     string // token_bucket, fixed_window, sliding_counter (also for sliding_log), concurrency
	limit    uint64
	period   int64 // a window or a lease; a bucket's period (tau - slack)
	interval int64 // a bucket's ns per token
	tau      int64
	slack    int64
}

func (l *localLimiter) share(p Policy) shared {
	n := l.instances
	limit := max(1, p.limit/n)
	switch p.Kind() {
	case "token_bucket":
		hi, interval := bits.Mul64(uint64(p.interval), n)
		thi, tau := bits.Mul64(interval, limit)
		if hi == 0 && thi == 0 && tau <= contract.Bounds.MaxHorizonSecs*nsPerSec {
			return shared{kind: "token_bucket", limit: limit, interval: int64(interval), tau: int64(tau), period: int64(tau)}
		}
		// A share the clock cannot express: the whole bucket (as core's share does).
		tau = uint64(p.interval) * p.limit
		return shared{kind: "token_bucket", limit: p.limit, interval: int64(p.interval), tau: int64(tau),
			slack: int64(tau) - int64(p.period), period: int64(p.period)}
	case "sliding_log":
		return shared{kind: "sliding_counter", limit: limit, period: int64(p.period)}
	}
	return shared{kind: p.Kind(), limit: limit, period: int64(p.period)}
}

func neverFits(limit uint64) outcome {
	return outcome{verdict: verdict{limit: limit, retry: never}}
}

func decideOne(s shared, stored any, now int64, cost uint64, holder *string) outcome {
	switch s.kind {
	case "token_bucket":
		return s.bucket(bucketOf(stored), now, cost, 0)
	case "fixed_window":
		w, ok := stored.(windowState)
		return s.fixed(w, ok, now, cost)
	case "sliding_counter":
		c, ok := stored.(counterState)
		return s.counter(c, ok, now, cost)
	case "concurrency":
		if holder == nil {
			return neverFits(s.limit)
		}
		ls, _ := stored.(leasesState)
		return s.acquire(ls.held, now, max(cost, 1), *holder)
	}
	return neverFits(s.limit)
}

func bucketOf(stored any) *int64 {
	if b, ok := stored.(bucketState); ok {
		return &b.tat
	}
	return nil
}

func satMul(a, b int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(lo)
}

func (s shared) backlog(tat *int64, now int64) (int64, bool) {
	var stored int64
	if tat != nil {
		stored = max(0, *tat-now)
	}
	if depth := s.tau + s.slack; stored > 2*depth {
		return depth, true
	}
	return stored, false
}

// bucket is core's TokenBucket::reserve_tat (decide_tat with maxWait 0).
func (s shared) bucket(tat *int64, now int64, cost uint64, maxWait int64) outcome {
	depth := s.tau + s.slack
	backlog, repair := s.backlog(tat, now)
	v := func(allowed bool, backlog, retry int64) verdict {
		return verdict{allowed, s.limit, uint64(max(0, depth-backlog) / s.interval), retry, max(0, backlog-s.slack)}
	}
	unchanged := func(v verdict) outcome {
		o := outcome{verdict: v}
		if repair {
			o.state, o.expiresAt, o.repair = bucketState{now + s.tau}, now+s.tau, true
		}
		return o
	}
	if cost > s.limit {
		return unchanged(v(false, backlog, never))
	}
	if cost == 0 {
		return unchanged(v(true, backlog, 0))
	}
	after := backlog + int64(cost)*s.interval
	wait := max(0, after-depth)
	if wait > min(max(maxWait, 0), s.period) {
		return unchanged(v(false, backlog, wait))
	}
	return outcome{verdict: v(true, after, wait), state: bucketState{now + after}, expiresAt: now + after}
}

// fixed is core's FixedWindow::decide_window.
func (s shared) fixed(w windowState, ok bool, now int64, cost uint64) outcome {
	latestEnd := now + s.period
	current, has := w, ok && w.endsAt > now
	repaired := has && w.endsAt > latestEnd
	if repaired {
		current.endsAt = latestEnd
	}
	count, endsAt, openFor := uint64(0), latestEnd, int64(0)
	if has {
		count, endsAt, openFor = current.count, current.endsAt, current.endsAt-now
	}
	v := func(allowed bool, count uint64, retry, reset int64) verdict {
		return verdict{allowed, s.limit, s.limit - min(count, s.limit), retry, reset}
	}
	unchanged := func(v verdict) outcome {
		o := outcome{verdict: v}
		if repaired {
			o.state, o.expiresAt, o.repair = current, current.endsAt, true
		}
		return o
	}
	if cost > s.limit {
		return unchanged(v(false, count, never, openFor))
	}
	total, carry := bits.Add64(count, cost, 0)
	switch {
	case carry != 0 || total > s.limit:
		return unchanged(v(false, count, openFor, openFor))
	case cost == 0:
		return unchanged(v(true, count, 0, openFor))
	}
	return outcome{verdict: v(true, total, 0, endsAt-now), state: windowState{total, endsAt}, expiresAt: endsAt}
}

// u128 is a 128-bit unsigned integer: the sliding counter compares weighted counts exactly.
type u128 struct{ hi, lo uint64 }

func mul(a, b uint64) u128 { hi, lo := bits.Mul64(a, b); return u128{hi, lo} }

func (a u128) add(b u128) u128 {
	lo, c := bits.Add64(a.lo, b.lo, 0)
	hi, _ := bits.Add64(a.hi, b.hi, c)
	return u128{hi, lo}
}

func (a u128) less(b u128) bool { return a.hi < b.hi || (a.hi == b.hi && a.lo < b.lo) }

// subDiv is (a - b) / d, 0 when b >= a; the quotient must fit 64 bits.
func (a u128) subDiv(b u128, d uint64) uint64 {
	if !b.less(a) {
		return 0
	}
	lo, borrow := bits.Sub64(a.lo, b.lo, 0)
	hi, _ := bits.Sub64(a.hi, b.hi, borrow)
	q, _ := bits.Div64(hi, lo, d)
	return q
}

func (s shared) counterExpiry(c counterState) int64 {
	e := mul(c.window+2, uint64(s.period))
	if e.hi != 0 || e.lo > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(e.lo)
}

// counter is core's SlidingCounter::decide_counts.
func (s shared) counter(stored counterState, ok bool, now int64, cost uint64) outcome {
	w := uint64(s.period)
	t := uint64(max(0, now))
	indexNow := t / w
	repaired := ok && stored.window > indexNow
	if repaired {
		stored.window = indexNow
	}
	var c counterState
	switch {
	case ok && stored.window == indexNow:
		c = stored
	case ok && stored.window+1 == indexNow:
		c = counterState{window: indexNow, previous: stored.current}
	default:
		c = counterState{window: indexNow}
	}
	elapsed := t % w
	weightedPrev := mul(c.previous, w-elapsed)
	capacity := mul(s.limit, w)
	used := func(current uint64) u128 { return weightedPrev.add(mul(current, w)) }
	reset := func(current uint64) int64 {
		toEnd := int64(w - elapsed)
		switch {
		case current > 0:
			return toEnd + int64(w)
		case c.previous > 0:
			return toEnd
		}
		return 0
	}
	v := func(allowed bool, current uint64, retry int64) verdict {
		return verdict{allowed, s.limit, capacity.subDiv(used(current), w), retry, reset(current)}
	}
	o := outcome{}
	if repaired {
		o.state, o.expiresAt, o.repair = stored, s.counterExpiry(stored), true
	}
	if cost > s.limit {
		o.verdict = v(false, c.current, never)
		return o
	}
	after, carry := bits.Add64(c.current, cost, 0)
	if carry == 0 && !capacity.less(used(after)) {
		o.verdict = v(true, after, 0)
		if cost > 0 {
			next := counterState{c.window, after, c.previous}
			o.state, o.expiresAt, o.repair = next, s.counterExpiry(next), false
		}
		return o
	}
	// The smallest elapsed time e at which previous * (w - e) <= room * w.
	fitsAt := func(previous, room uint64) uint64 {
		if previous == 0 || room >= previous {
			return 0
		}
		hi, lo := bits.Mul64(room, w)
		q, _ := bits.Div64(hi, lo, previous)
		return w - q
	}
	var wait uint64
	if c.current <= s.limit && cost <= s.limit-c.current {
		wait = fitsAt(c.previous, s.limit-c.current-cost)
		wait -= min(wait, elapsed)
	} else { // only in the next window, where this window's count becomes the previous one
		wait = (w - elapsed) + fitsAt(c.current, s.limit-cost)
	}
	o.verdict = v(false, c.current, int64(min(wait, math.MaxInt64)))
	return o
}

func liveLeases(held []lease, nowUs, latestUs uint64) []lease {
	out := make([]lease, 0, len(held)+1)
	for _, h := range held {
		if h.expireUs > nowUs {
			h.expireUs = min(h.expireUs, latestUs)
			out = append(out, h)
		}
	}
	return out
}

func holding(held []lease, holder string) int {
	for i, h := range held {
		if h.id == holder {
			return i
		}
	}
	return -1
}

// acquire is core's Leases::decide: a lease of weight for holder (a retry by a holder is the same
// request: the same slot, for longer).
func (s shared) acquire(stored []lease, now int64, weight uint64, holder string) outcome {
	nowUs, leaseUs := uint64(now/1000), uint64(s.period/1000)
	held := liveLeases(stored, nowUs, nowUs+leaseUs)
	v := func(allowed bool, retry int64) verdict {
		var load uint64
		last := nowUs
		for _, h := range held {
			load += h.weight
			last = max(last, h.expireUs)
		}
		return verdict{allowed, s.limit, s.limit - min(load, s.limit), retry, int64(last-nowUs) * 1000}
	}
	expires := nowUs + leaseUs
	if i := holding(held, holder); i >= 0 {
		held[i].expireUs = expires
	} else {
		var load uint64
		for _, h := range held {
			load += h.weight
		}
		if load+weight > s.limit {
			retry := never
			if weight <= s.limit {
				ends := append([]lease(nil), held...)
				sort.Slice(ends, func(i, j int) bool {
					return ends[i].expireUs < ends[j].expireUs ||
						(ends[i].expireUs == ends[j].expireUs && ends[i].weight < ends[j].weight)
				})
				retry = 1
				for _, e := range ends {
					load -= e.weight
					if load+weight <= s.limit {
						retry = max(1, int64(e.expireUs-nowUs)*1000)
						break
					}
				}
			}
			return outcome{verdict: v(false, retry)}
		}
		held = append(held, lease{holder, expires, weight})
	}
	o := outcome{verdict: v(true, 0), state: leasesState{held}}
	o.expiresAt = int64(nowUs+uint64(o.reset/1000)) * 1000
	return o
}

// mostRestrictive is core's: when any denies, the denial that lasts longest (never first); else
// the longest wait, then the fewest left; ties go to the first.
func mostRestrictive(outcomes []outcome) int {
	key := func(v verdict) (bool, uint64, uint64) {
		wait := uint64(math.MaxInt64)
		if v.retry >= 0 {
			wait = uint64(v.retry)
		}
		return !v.allowed, wait, math.MaxUint64 - v.remaining
	}
	best := 0
	for i := 1; i < len(outcomes); i++ {
		d1, w1, r1 := key(outcomes[i].verdict)
		d0, w0, r0 := key(outcomes[best].verdict)
		more := d1 && !d0 || d1 == d0 && (w1 > w0 || w1 == w0 && r1 > r0)
		if more {
			best = i
		}
	}
	return best
}

// ceilMs is a duration in ns rounded up to whole milliseconds, as the module's replies are.
func ceilMs(ns int64) time.Duration {
	if ns <= 0 {
		return 0
	}
	return time.Duration((ns+999_999)/1_000_000) * time.Millisecond
}

func toDecision(v verdict, limiting int, degraded bool) Decision {
	d := Decision{Allowed: v.allowed, Limit: v.limit, Remaining: v.remaining, RetryAfter: ceilMs(v.retry),
		ResetAfter: ceilMs(v.reset), Limiting: limiting, Degraded: degraded}
	if v.retry < 0 {
		d.RetryAfter = NeverFits
	}
	return d
}

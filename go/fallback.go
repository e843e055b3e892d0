package ratelimit

import (
	"math"
	"math/bits"
	"sort"
	"sync"
	"time"
)

// The local fallback (LocalFallback): while Redis cannot decide, each application instance limits
// on its own at its share of each limit. Imprecise by design: a rough bound that stays available. As
// client/src/fallback.rs (the Rust reference), held to it by contract/vectors/fallback.json.
//
// One algorithm serves every kind whose contract fallback is token_bucket (every kind but
// concurrency): core's token bucket (GCRA) of the policy's Limit refilled over its Period, shared by
// the instances: Limit / instances tokens (at least 1), refilled instances times slower. A token
// bucket is then itself at its share; a window or a log lets an instance admit at most its share in
// a burst, plus what refills meanwhile (in any period, at most the share plus Limit / instances). The
// kinds whose fallback is leases (concurrency) keep leases, acquired, renewed and released here. A new
// kind needs nothing of its own here.
//
// Memory is bounded: past maxLocalKeys() keys, expired state goes first, then everything (a fresh
// start errs towards allowing, as failing open does).

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
		outcomes[i] = l.decideOne(lim, l.stored(lim.Key, now), now, holder)
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

func (l *localLimiter) decideOne(lim Limit, stored any, now int64, holder *string) outcome {
	if keepsLeases(lim.Policy) {
		s := leaseShare{limit: max(1, lim.Policy.limit/l.instances), lease: int64(lim.Policy.period)}
		if holder == nil {
			return neverFits(s.limit)
		}
		ls, _ := stored.(leasesState)
		return s.acquire(ls.held, now, max(lim.Cost, 1), *holder)
	}
	b, ok := l.bucketOf(lim.Policy)
	if !ok {
		return neverFits(max(1, lim.Policy.limit/l.instances))
	}
	return b.reserve(tatOf(stored), now, lim.Cost, 0)
}

// reserve is RL.RESERVE on the bucket of p at this instance's share: at least cost, up to upto
// tokens, within maxWait (RL.TAKE: cost 1, no wait).
func (l *localLimiter) reserve(key string, p Policy, cost, upto uint64, maxWait int64, now int64, degraded bool) Taken {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.bucketOf(p)
	if !ok {
		return Taken{Decision: toDecision(neverFits(max(1, p.limit/l.instances)).verdict, 0, degraded)}
	}
	tat := tatOf(l.stored(key, now))
	available := b.reserve(tat, now, 0, 0).remaining
	taken := max(min(available, upto), cost)
	o := b.reserve(tat, now, taken, maxWait)
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

// refund gives units back to the bucket of p at this instance's share (the kinds that take
// refunds), as RL.REFUND does.
func (l *localLimiter) refund(key string, p Policy, units uint64, now int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.bucketOf(p)
	if !ok || p.kind == nil || !p.kind.Refunds {
		return
	}
	backlog, _ := b.backlog(tatOf(l.stored(key, now)), now)
	if backlog == 0 || units == 0 {
		return
	}
	credit := satMul(int64(min(units, b.capacity)), b.interval)
	next := now + max(0, backlog-credit)
	l.store(key, outcome{state: bucketState{next}, expiresAt: max(next, now+1)}, now)
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

// keepsLeases says whether the contract's fallback for p's kind is leases (concurrency).
func keepsLeases(p Policy) bool { return p.kind != nil && p.kind.Fallback == "leases" }

// bucket is core's TokenBucket: capacity tokens, one per interval ns; a full refill takes tau ns,
// of which slack (below one interval) is rounding that counts as full.
type bucket struct {
	capacity             uint64
	interval, tau, slack int64
}

// bucketOf is TokenBucket::per_period(limit, limit, period).share(instances) of p: false for a kind
// that keeps leases, or a period the clock cannot express (within limit ns of the horizon).
func (l *localLimiter) bucketOf(p Policy) (bucket, bool) {
	if keepsLeases(p) || p.limit == 0 || p.period <= 0 {
		return bucket{}, false
	}
	horizon := contract.Bounds.MaxHorizonSecs * nsPerSec
	period := uint64(p.period)
	interval := (period-1)/p.limit + 1
	hi, tau := bits.Mul64(interval, p.limit)
	if hi != 0 || tau > horizon {
		return bucket{}, false
	}
	whole := bucket{p.limit, int64(interval), int64(tau), int64(min(tau-period, interval-1))}
	capacity := max(1, p.limit/l.instances)
	hi, shared := bits.Mul64(interval, l.instances)
	thi, sharedTau := bits.Mul64(shared, capacity)
	if hi != 0 || thi != 0 || sharedTau > horizon {
		return whole, true // a share the clock cannot express: the whole bucket (as core's share does)
	}
	return bucket{capacity, int64(shared), int64(sharedTau), 0}, true
}

func neverFits(limit uint64) outcome {
	return outcome{verdict: verdict{limit: limit, retry: never}}
}

func tatOf(stored any) *int64 {
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

// backlog is the backlog a stored TAT leaves at now, and whether it is impossible (more than two
// full refills ahead: a clock fault, counted as an empty bucket).
func (b bucket) backlog(tat *int64, now int64) (int64, bool) {
	var stored int64
	if tat != nil {
		stored = max(0, *tat-now)
	}
	if depth := b.tau + b.slack; stored > 2*depth {
		return depth, true
	}
	return stored, false
}

// reserve is core's TokenBucket::reserve_tat (decide_tat with maxWait 0).
func (b bucket) reserve(tat *int64, now int64, cost uint64, maxWait int64) outcome {
	depth := b.tau + b.slack
	backlog, repair := b.backlog(tat, now)
	v := func(allowed bool, backlog, retry int64) verdict {
		return verdict{allowed, b.capacity, uint64(max(0, depth-backlog) / b.interval), retry, max(0, backlog-b.slack)}
	}
	unchanged := func(v verdict) outcome {
		o := outcome{verdict: v}
		if repair {
			o.state, o.expiresAt, o.repair = bucketState{now + b.tau}, now+b.tau, true
		}
		return o
	}
	if cost > b.capacity {
		return unchanged(v(false, backlog, never))
	}
	if cost == 0 {
		return unchanged(v(true, backlog, 0))
	}
	after := backlog + int64(cost)*b.interval
	wait := max(0, after-depth)
	if wait > min(max(maxWait, 0), b.tau-b.slack) {
		return unchanged(v(false, backlog, wait))
	}
	return outcome{verdict: v(true, after, wait), state: bucketState{now + after}, expiresAt: now + after}
}

// leaseShare is a concurrency limit at this instance's share: core's Leases.
type leaseShare struct {
	limit uint64
	lease int64 // ns
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
func (s leaseShare) acquire(stored []lease, now int64, weight uint64, holder string) outcome {
	nowUs, leaseUs := uint64(now/1000), uint64(s.lease/1000)
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

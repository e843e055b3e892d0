package ratelimit

import (
	"slices"
	"sync"
	"time"
)

// Batched units (Policy.WithBatch; docs/high-volume.md, whose rules these are, as the Rust
// reference's client/src/batch.rs): a check of a batched limit that lacks units asks Redis for
// cost + extra in its one call, holds the extra units, and decides the next checks here until they
// run out or their lease ends; units not spent go back with RL.REFUND. Every unit spent here was
// taken from Redis first, so local decisions never admit beyond the limit. The rules only: times
// are Unix ns passed in, and what they send goes through a unitIO (the limiter's round trips, or
// the vectors' recorded replies).

// unitState is one batched (key, policy)'s.
type unitState struct {
	key       string
	policy    Policy
	held      uint64   // units taken and not yet spent
	size      uint64   // the units the last call took for a request of cost 1
	since     int64    // when Redis' last answer came
	until     int64    // the end of the held units' use
	windowEnd int64    // the end of the window they belong to; 0: the kind has none (a token bucket)
	last      Decision // Redis' last answer
	// fetching is closed when the call in flight taking this key's extra units is answered (nil:
	// none). Concurrent checks that lack units wait for it rather than each asking their own:
	// one batch at a time keeps what this instance holds at most batch - 1, and the calls few.
	fetching chan struct{}
	// waiting: the checks waiting for it; kept: units of its answer kept for them (a check that
	// waited is served before the checks that did not).
	waiting, kept uint64
}

// free is what a check can spend of s: every held unit for a check that waited on s, else those
// not kept for them.
func (s *unitState) free(waited bool) uint64 {
	if waited {
		return s.held
	}
	return s.held - s.kept
}

// expire takes s's units at now when its lease is over: to give back while their window lasts
// (nil when there are none, or their window is over: they are dropped with it).
func (s *unitState) expire(now int64) []string {
	if now < s.until || s.held == 0 {
		return nil
	}
	held := s.held
	s.held, s.kept = 0, 0
	margin := contract.Batching.RefundMarginMs * int64(time.Millisecond)
	if s.windowEnd != 0 && now+margin >= s.windowEnd {
		return nil
	}
	cmd, _ := buildRefund(s.key, s.policy, held) // a batched policy takes refunds (WithBatch refuses the others)
	return cmd
}

// unitID names a limit's state: its key, its kind's group and its parameters.
func unitID(l Limit) string {
	return l.Key + "\n" + l.Policy.kind.Group + "\n" + l.Policy.params[0] + "\n" + l.Policy.params[1]
}

// unitBook is a limiter's batched units: at most the contract's batching.max_keys states.
type unitBook struct {
	mu        sync.Mutex
	states    map[string]*unitState
	nextSweep int64 // 0: no check yet
	closed    bool  // after close every check asks Redis
}

func newUnitBook() *unitBook { return &unitBook{states: map[string]*unitState{}} }

// unitIO is what the rules send: refunds (not waited for), one check's call, and batches taken
// ahead (off the caller's path: answered calls back when the answer is in).
type unitIO struct {
	refund func(cmd []string)
	call   func(cmd []string) (Decision, error)
	ahead  func(cmd []string, answered func(Decision, error))
	// waitsWithin: all of a check's waits for batch calls in flight take at most this (the
	// limiter's deadline); then the check asks alone. Zero: no bound (the rules' own tests).
	waitsWithin time.Duration
}

// unitPlan is what a check does now: the units to give back first (expired), then a call, or the
// decision made here from held units (call nil) with the batches to take ahead, or the answer to
// wait for of a call in flight taking units it lacks (on the state waitedOn).
type unitPlan struct {
	refunds  [][]string
	call     *unitCall
	local    Decision
	aheads   []*unitCall
	wait     <-chan struct{}
	waitedOn *unitState
}

// unitCall is a check's call: per limit, the extra units asked and the size they come from (0:
// the limit keeps nothing from this call), and the channel its answer closes for the checks
// waiting for those units.
type unitCall struct {
	now      int64
	limits   []Limit
	extras   []uint64
	sizes    []uint64
	fetching []chan struct{}
}

func usesUnits(limits []Limit) bool {
	for _, l := range limits {
		if l.Policy.batch > 0 {
			return true
		}
	}
	return false
}

// check decides limits at clock(): locally when every limit holds its cost, else with one call
// (two when the extras were denied: the request itself may fit). A check that lacks units a
// call in flight is taking waits for its answer, then plans again.
func (b *unitBook) check(clock func() int64, limits []Limit, io unitIO) (Decision, error) {
	var p unitPlan
	// All of a check's waits together take at most io.waitsWithin; then it asks alone.
	var waitsEnd <-chan time.Time
	if io.waitsWithin > 0 {
		t := time.NewTimer(io.waitsWithin)
		defer t.Stop()
		waitsEnd = t.C
	}
	mayWait := true
	for waits := 0; p.call == nil; waits++ {
		p = b.plan(clock(), limits, p.waitedOn, mayWait)
		for _, r := range p.refunds {
			io.refund(r)
		}
		switch {
		case p.wait != nil:
			select {
			case <-p.wait:
			case <-waitsEnd:
				mayWait = false
			}
		case p.call == nil:
			for _, a := range p.aheads {
				io.ahead(a.command(), func(d Decision, err error) { b.answer(a, d, err) })
			}
			d := p.local
			// A check that waited for another's batch call shared that round trip: not local.
			d.Local = waits == 0
			return d, nil
		}
	}
	c := p.call
	d, err := io.call(c.command())
	if err == nil && !d.Allowed && c.asked() {
		b.withoutExtras(c)
		d, err = io.call(c.command())
	}
	return b.answer(c, d, err), err
}

// plan is what a check of limits does at now. waited is the state this check waited on before
// (nil: none); mayWait false: it has waited enough, and asks alone.
func (b *unitBook) plan(now int64, limits []Limit, waited *unitState, mayWait bool) unitPlan {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(limits)
	ids := make([]string, n)
	for i, l := range limits {
		ids[i] = unitID(l)
	}
	refunds := b.sweep(now, ids)
	for _, id := range ids {
		if s := b.states[id]; s != nil {
			if cmd := s.expire(now); cmd != nil {
				refunds = append(refunds, cmd)
			}
		}
	}
	holding := make([]bool, n)
	all := true
	for i, l := range limits {
		s := b.states[ids[i]]
		holding[i] = l.Policy.batch > 0 && s != nil && now < s.until && s.free(s == waited) >= l.Cost
		all = all && holding[i]
	}
	if all {
		local := b.spend(now, limits, ids, waited)
		var aheads []*unitCall
		for _, id := range ids {
			if a := b.ahead(b.states[id], now); a != nil {
				aheads = append(aheads, a)
			}
		}
		return unitPlan{refunds: refunds, local: local, aheads: aheads}
	}
	for i, id := range ids {
		if s := b.states[id]; mayWait && !holding[i] && s != nil && s.fetching != nil {
			s.waiting++
			return unitPlan{refunds: refunds, wait: s.fetching, waitedOn: s}
		}
	}
	c := &unitCall{now: now, limits: limits, extras: make([]uint64, n), sizes: make([]uint64, n), fetching: make([]chan struct{}, n)}
	cfg := &contract.Batching
	for i, l := range limits {
		// In a call of several limits only a bucket batches: a window's end is known only from an
		// answer about that limit alone.
		if b.closed || l.Policy.batch == 0 || holding[i] || (n > 1 && l.Policy.kind.Name != "token_bucket") {
			continue
		}
		s := b.states[ids[i]]
		size := cfg.Start
		switch {
		case s == nil && len(b.states) >= cfg.MaxKeys:
			continue // no room: decided without batching
		case s != nil && s.fetching != nil:
			continue // another check is taking this key's batch
		case s != nil && now < s.until: // hot here: its units ran out before their lease ended
			size = min(s.size*cfg.Grow, max(1, s.last.Remaining/cfg.Share))
		case s != nil: // cool
			size = min(max(1, s.size/cfg.Grow), max(1, s.last.Remaining/cfg.Share))
		}
		size = max(1, min(size, l.Policy.batch))
		c.extras[i], c.sizes[i] = size-1, size
		if s != nil && size > 1 {
			s.fetching = make(chan struct{})
			c.fetching[i] = s.fetching
		}
	}
	return unitPlan{refunds: refunds, call: c}
}

// ahead is the batch to take ahead for s after a local decision: when it holds less than a
// quarter (batching.ahead) of its size, no batch call of it is in flight and its lease goes on;
// the next size, at most what keeps held and in flight below batch. Its call asks for those
// units alone (no request of its own).
func (b *unitBook) ahead(s *unitState, now int64) *unitCall {
	cfg := &contract.Batching
	if b.closed || s.fetching != nil || s.held*cfg.Ahead >= s.size || now >= s.until {
		return nil
	}
	batch := s.policy.batch
	size := max(1, min(s.size*cfg.Grow, batch, s.last.Remaining/cfg.Share))
	units := min(size, batch-1-min(s.held, batch-1))
	if units == 0 {
		return nil
	}
	s.fetching = make(chan struct{})
	return &unitCall{now: now, limits: []Limit{{Key: s.key, Policy: s.policy}}, extras: []uint64{units},
		sizes: []uint64{size}, fetching: []chan struct{}{s.fetching}}
}

// fetched: c's call taking limit i's extra units was answered; the checks waiting for it go on.
func (b *unitBook) fetched(c *unitCall, i int) {
	ch := c.fetching[i]
	if ch == nil {
		return
	}
	if s := b.states[unitID(c.limits[i])]; s != nil && s.fetching == ch {
		s.fetching = nil
		s.kept, s.waiting = min(s.held, s.waiting), 0
	}
	c.fetching[i] = nil
	close(ch)
}

// spend takes each limit's cost from its held units: the decision is each one's last answer with
// what is still held in its remaining and its reset shorter by the time since; the most
// restrictive (the fewest left, the first of equals, as RL.ALL picks among allowed ones).
func (b *unitBook) spend(now int64, limits []Limit, ids []string, waited *unitState) Decision {
	var out Decision
	for i, l := range limits {
		s := b.states[ids[i]]
		s.held -= l.Cost
		if s == waited {
			s.kept -= min(s.kept, l.Cost)
		}
		s.kept = min(s.kept, s.held)
		d := s.last
		d.Remaining += s.held
		d.ResetAfter = max(0, d.ResetAfter-time.Duration(now-s.since))
		d.RetryAfter, d.Limiting, d.Local = 0, 0, true
		if i == 0 || d.Remaining < out.Remaining {
			out = d
			out.Limiting = i
		}
	}
	return out
}

// sweep: every batching.sweep_ms, the expired states of keys other than this check's: their units
// to give back (in the order of their names), the states forgotten.
func (b *unitBook) sweep(now int64, ids []string) [][]string {
	every := contract.Batching.SweepMs * int64(time.Millisecond)
	if b.nextSweep == 0 {
		b.nextSweep = now + every
	}
	if now < b.nextSweep {
		return nil
	}
	b.nextSweep = now + every
	var expired []string
	for id, s := range b.states {
		if now >= s.until && s.fetching == nil && !slices.Contains(ids, id) {
			expired = append(expired, id)
		}
	}
	slices.Sort(expired)
	var refunds [][]string
	for _, id := range expired {
		if cmd := b.states[id].expire(now); cmd != nil {
			refunds = append(refunds, cmd)
		}
		delete(b.states, id)
	}
	return refunds
}

func (c *unitCall) asked() bool {
	return slices.ContainsFunc(c.extras, func(e uint64) bool { return e > 0 })
}

// command is the call: each limit asking its cost and its extra.
func (c *unitCall) command() []string {
	sent := slices.Clone(c.limits)
	for i := range sent {
		sent[i].Cost += c.extras[i]
	}
	cmd, _ := buildDecide(sent) // the limits were built whole before (CheckAllStrict)
	return cmd
}

// withoutExtras: the batch did not fit; the same call without extras, at the starting size.
func (b *unitBook) withoutExtras(c *unitCall) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range c.limits {
		b.fetched(c, i)
		if c.sizes[i] > 0 {
			c.extras[i], c.sizes[i] = 0, contract.Batching.Start
		}
	}
}

// answer takes Redis' answer to c (or the call's error): held units and sizes change. The decision
// for the caller counts the units held here in the remaining of the limit it describes.
func (b *unitBook) answer(c *unitCall, d Decision, err error) Decision {
	b.mu.Lock()
	defer b.mu.Unlock()
	batching := &contract.Batching
	for i, l := range c.limits {
		if c.sizes[i] == 0 {
			continue
		}
		id := unitID(l)
		s := b.states[id]
		if err != nil || d.Degraded {
			continue
		}
		if !d.Allowed {
			if s != nil {
				s.size = batching.Start
			}
			continue
		}
		if s == nil {
			if b.closed {
				continue // the limiter closed meanwhile: these units are not kept
			}
			s = &unitState{key: l.Key, policy: l.Policy}
			b.states[id] = s
		}
		margin := batching.RefundMarginMs * int64(time.Millisecond)
		var end int64 // the window the units belong to ends (0: no window)
		switch batching.Kinds[l.Policy.kind.Name] {
		case "reset":
			end = c.now + int64(d.ResetAfter)
		case "reset_minus_window":
			end = c.now + max(0, int64(d.ResetAfter)-int64(l.Policy.period))
		}
		if s.windowEnd != 0 && end > s.windowEnd+margin {
			s.held, s.kept = 0, 0 // units of a window that has ended do not carry into the next
		}
		s.policy = l.Policy
		s.held += c.extras[i]
		s.size, s.since, s.last, s.windowEnd = c.sizes[i], c.now, d, end
		s.until = c.now + int64(l.Policy.lease)
		if end != 0 {
			s.until = min(s.until, max(c.now, end-margin))
		}
		if len(c.limits) == 1 || d.Limiting == i {
			d.Remaining += s.held
		}
	}
	for i := range c.limits { // after the units are held: the waiting checks spend them
		b.fetched(c, i)
	}
	return d
}

// stop ends batching (Close): no call takes extra units any more; the batch calls in flight, to
// wait for before drain.
func (b *unitBook) stop() []chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	var flights []chan struct{}
	for _, s := range b.states {
		if s.fetching != nil {
			flights = append(flights, s.fetching)
		}
	}
	return flights
}

// drain returns every held unit (while its window lasts, in the order of their names) and forgets
// the states.
func (b *unitBook) drain(now int64) [][]string {
	b.mu.Lock()
	defer b.mu.Unlock()
	ids := make([]string, 0, len(b.states))
	for id := range b.states {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var refunds [][]string
	for _, id := range ids {
		s := b.states[id]
		s.until = min(s.until, now) // the lease ends now
		if cmd := s.expire(now); cmd != nil {
			refunds = append(refunds, cmd)
		}
		delete(b.states, id)
	}
	return refunds
}

// held is what the state of key under p holds now.
func (b *unitBook) held(key string, p Policy) uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.states[unitID(Limit{Key: key, Policy: p})]; s != nil {
		return s.held
	}
	return 0
}

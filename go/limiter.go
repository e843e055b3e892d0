// Package ratelimit is redis-ratelimit's client for go-redis v9: the limiters of the ratelimit
// module (RL.TOKEN, RL.FIXED, RL.SLIDECOUNT, RL.SLIDE, RL.ACQUIRE, ...) or, where no module can be
// loaded, the same limiters as its Lua library (FCALL or EVALSHA), on any redis.UniversalClient,
// with a deadline on every call, a circuit breaker and a failure policy that is the caller's
// choice. The HTTP middleware is in the httplimit subpackage; a drop-in for go-redis/redis_rate
// in redisrate.
package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// FailurePolicy is what a limiter does when Redis cannot decide (unreachable, slower than the
// deadline, breaker open, misconfigured). There is no default: Options.Failure must be set.
type FailurePolicy struct{ kind, instances int }

const (
	failNone = iota
	failOpen
	failClosed
	failLocal
)

// FailOpen allows while Redis cannot decide: the API stays available, unprotected meanwhile.
func FailOpen() FailurePolicy { return FailurePolicy{kind: failOpen} }

// FailClosed denies (retry after 1 s) while Redis cannot decide: what the limiter guards stays
// protected, and a Redis outage becomes an API outage.
func FailClosed() FailurePolicy { return FailurePolicy{kind: failClosed} }

// LocalFallback decides in the process while Redis cannot: each of instances application
// instances limits on its own at its share of each limit (limit / instances, at least 1), every
// rate limit as core's token bucket of that share refilled instances times slower (a window or a
// log: a bucket of its limit per window), so the whole stays roughly within the limit and
// available; concurrency permits are leases of an in-process semaphore. instances must be at least 1.
func LocalFallback(instances int) FailurePolicy {
	return FailurePolicy{kind: failLocal, instances: instances}
}

// IsLocal says whether the policy decides in the process during an outage (LocalFallback).
func (f FailurePolicy) IsLocal() bool { return f.kind == failLocal }

// Instances is LocalFallback's number of instances sharing each limit (0 for the others).
func (f FailurePolicy) Instances() int {
	if f.kind == failLocal {
		return f.instances
	}
	return 0
}

// IsOpen says whether the policy allows during an outage.
func (f FailurePolicy) IsOpen() bool { return f.kind == failOpen }

// IsClosed says whether the policy denies during an outage.
func (f FailurePolicy) IsClosed() bool { return f.kind == failClosed }

func (f FailurePolicy) String() string {
	switch f.kind {
	case failOpen:
		return "fail open"
	case failClosed:
		return "fail closed"
	case failLocal:
		return fmt.Sprintf("local fallback (1/%d of each limit)", f.instances)
	}
	return "no failure policy"
}

// DefaultDeadline bounds every call to Redis unless Options.Deadline says otherwise.
const DefaultDeadline = 100 * time.Millisecond

// Options configure a Limiter. Failure is required.
type Options struct {
	// Failure is what to do when Redis cannot decide: FailOpen(), FailClosed() or
	// LocalFallback(instances). Required.
	Failure FailurePolicy
	// Engine: Auto (the default) chooses the module, else the library through FCALL, else EVALSHA.
	Engine Engine
	// Deadline bounds every call, connect and a library load included, whatever the client's own
	// timeouts (default 100 ms).
	Deadline time.Duration
	// BreakerFailures calls without an answer in a row open the breaker (default 5).
	BreakerFailures int
	// BreakerCooldown is how long an open breaker keeps calls from Redis at most (default 1 s);
	// the probe ends it as soon as Redis answers.
	BreakerCooldown time.Duration
	// Logger receives the outage lines (start, cause, end, counts); default slog.Default().
	Logger *slog.Logger
	// DisableBatching sends every call on its own round trip. By default, while two round trips are
	// in flight, the calls that arrive (concurrent requests) wait for one of them to end and then go
	// together in one pipeline: one write and read on each side for all of them, for more decisions
	// a second on a busy server and less load on Redis. A call that finds fewer in flight is sent at
	// once, so an idle limiter's latency is unchanged; under load a call can wait for a round trip
	// in flight before its own (up to two round trips), always within the deadline. A
	// *redis.ClusterClient's calls always go alone.
	DisableBatching bool
	// LocalPrecheck: a check Redis denied stays denied in this process until the retry_after Redis
	// gave, without a round trip (a local decision): a client hammering while denied costs nothing.
	// A check of the same keys with a smaller cost still asks Redis. Off by default.
	LocalPrecheck bool
}

// Counts are a limiter's counters (for metrics).
type Counts struct {
	Decisions         uint64 // decisions made (by Redis or the failure policy)
	Allowed           uint64 // of them, allowed (degraded ones included)
	Degraded          uint64 // of them, by the failure policy
	DegradedAllowed   uint64 // of those, allowed
	Outages           uint64 // outages started (Redis stopped deciding)
	BreakerOpened     uint64
	BreakerRejected   uint64
	Misconfigurations uint64 // calls answered that the limiter is misconfigured (NOPERM, no engine, an unknown reply)
	Conflicts         uint64 // calls whose key held another limiter's state or another type
	UsageErrors       uint64 // calls refused as the caller's mistake (ErrUsage)
	Local             uint64 // decisions made without a round trip (pre-check denials, batched units; in Decisions too)
}

// Limiter decides rate limits on Redis. Safe for concurrent use; Close stops its probe.
type Limiter struct {
	client      redis.UniversalClient
	failure     FailurePolicy
	deadline    time.Duration
	ctxTimeouts bool
	engine      *engine
	breaker     *breaker
	log         *slog.Logger
	local       *localLimiter // LocalFallback's

	decisions, allowed, degraded, degradedAllowed, outages atomic.Uint64
	misconfigured, conflicts, usageErrors                  atomic.Uint64
	lastMisconfigured                                      atomic.Bool
	logged                                                 logOnce // misconfiguration and conflict lines
	cluster                                                bool    // a *redis.ClusterClient: keys of one call in one slot
	dials                                                  dialWatch

	outageMu    sync.Mutex
	inOutage    bool
	outageSince time.Time
	outageCount uint64 // degraded decisions in this outage

	batch *batcher // nil with Options.DisableBatching

	denials        *denialCache // nil without Options.LocalPrecheck
	units          *unitBook    // batched policies' units
	localDecisions atomic.Uint64
	background     sync.WaitGroup // refunds and batches taken ahead in flight (Close waits for them)

	probing atomic.Bool
	closed  chan struct{}
	once    sync.Once
}

// New makes a Limiter on client (a *redis.Client, *redis.ClusterClient, failover client, ...).
// Nothing needs setting on the client: the limiter bounds every call itself. It recommends
// ContextTimeoutEnabled: true on the client (then a call past its deadline also frees its
// connection at once) and a small MaxRetries.
func New(client redis.UniversalClient, opts Options) (*Limiter, error) {
	if client == nil {
		return nil, errors.New("redis-ratelimit: no client")
	}
	if opts.Failure.kind == failNone {
		return nil, errors.New("redis-ratelimit: Options.Failure is required: FailOpen(), FailClosed() or LocalFallback(instances)")
	}
	if opts.Failure.kind == failLocal && opts.Failure.instances < 1 {
		return nil, errors.New("redis-ratelimit: LocalFallback needs instances >= 1")
	}
	if opts.Engine < Auto || opts.Engine > Scripts {
		return nil, fmt.Errorf("redis-ratelimit: unknown engine %d", opts.Engine)
	}
	if opts.Deadline == 0 {
		opts.Deadline = DefaultDeadline
	}
	if opts.Deadline < 0 {
		return nil, errors.New("redis-ratelimit: Options.Deadline must be > 0")
	}
	if opts.BreakerFailures == 0 {
		opts.BreakerFailures = 5
	}
	if opts.BreakerCooldown == 0 {
		opts.BreakerCooldown = time.Second
	}
	if opts.BreakerFailures < 1 || opts.BreakerCooldown < 0 {
		return nil, errors.New("redis-ratelimit: the breaker needs failures >= 1 and a cooldown >= 0")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	l := &Limiter{
		client:   client,
		failure:  opts.Failure,
		deadline: opts.Deadline,
		engine:   newEngine(opts.Engine, opts.Deadline),
		breaker:  &breaker{failures: opts.BreakerFailures, cooldown: opts.BreakerCooldown, now: time.Now},
		log:      opts.Logger,
		closed:   make(chan struct{}),
		units:    newUnitBook(),
	}
	if opts.LocalPrecheck {
		l.denials = newDenialCache()
	}
	if opts.Failure.kind == failLocal {
		l.local = newLocalLimiter(opts.Failure.instances)
	}
	l.dials.watch(client)
	// Batching on a cluster would tie each pipeline's calls to its slowest node (a paused primary
	// would hold back the keys of every other): there, every call goes alone.
	_, l.cluster = client.(*redis.ClusterClient)
	if !opts.DisableBatching && !l.cluster {
		l.batch = newBatcher(l)
	}
	switch c := client.(type) {
	case *redis.Client:
		l.ctxTimeouts = c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		l.ctxTimeouts = c.Options().ContextTimeoutEnabled
	}
	return l, nil
}

// Close gives every batched unit this limiter holds back to Redis (the error says why some could
// not be) and stops its background work; later checks ask Redis each time. The client is the
// caller's to close.
func (l *Limiter) Close() error {
	err := l.returnUnits()
	l.once.Do(func() { close(l.closed) })
	return err
}

// FailurePolicy is the limiter's failure policy.
func (l *Limiter) FailurePolicy() FailurePolicy { return l.failure }

// Deadline is the bound of every call.
func (l *Limiter) Deadline() time.Duration { return l.deadline }

// BreakerOpen says whether calls are kept away from Redis now.
func (l *Limiter) BreakerOpen() bool { return l.breaker.isOpen() }

// Misconfigured says whether a call met a misconfiguration (the contract's class: NOPERM, no
// engine this user may run, an error reply no rule knows) since Redis last decided.
func (l *Limiter) Misconfigured() bool { return l.lastMisconfigured.Load() }

// Counts are the limiter's counters.
func (l *Limiter) Counts() Counts {
	l.breaker.mu.Lock()
	opened, rejected := l.breaker.opened, l.breaker.rejected
	l.breaker.mu.Unlock()
	return Counts{
		Decisions: l.decisions.Load(), Allowed: l.allowed.Load(), Degraded: l.degraded.Load(), DegradedAllowed: l.degradedAllowed.Load(),
		Outages: l.outages.Load(), BreakerOpened: opened, BreakerRejected: rejected,
		Misconfigurations: l.misconfigured.Load(), Conflicts: l.conflicts.Load(), UsageErrors: l.usageErrors.Load(),
		Local: l.localDecisions.Load(),
	}
}

// Engine is the engine in use and why it was chosen (Verify asks the server first).
func (l *Limiter) Engine() (Engine, string) { return l.engine.describe() }

type result struct {
	v   any
	err error
}

// bounded runs f within the deadline, whatever the client's options: go-redis v9 ignores a
// context's deadline unless ContextTimeoutEnabled is set, so without it f runs in a goroutine of
// its own and the call returns at the deadline (f ends at the client's own timeouts).
func (l *Limiter) bounded(parent context.Context, f func(context.Context) (any, error)) (any, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(parent, l.deadline)
	// A failure without a reply once the deadline passed is the deadline's (or a refused dial's).
	ended := func(v any, err error) (any, error) {
		if err != nil && ctx.Err() != nil {
			if _, reply := replyError(err); !reply {
				return nil, l.timedOut(parent, start)
			}
		}
		return v, err
	}
	if l.ctxTimeouts {
		defer cancel()
		return ended(f(ctx))
	}
	ch := make(chan result, 1)
	go func() {
		defer cancel()
		v, err := f(ctx)
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return ended(r.v, r.err)
	case <-ctx.Done():
		select { // answered at the very deadline: take the answer
		case r := <-ch:
			return ended(r.v, r.err)
		default:
		}
		return nil, l.timedOut(parent, start)
	}
}

// timedOut is a call that ended at the deadline: unreachable when a dial failed meanwhile (a
// refused connection that go-redis kept retrying), else no answer within the deadline.
func (l *Limiter) timedOut(parent context.Context, start time.Time) error {
	if err := parent.Err(); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return &CallError{Class: ClassOutage, Cause: ErrUnreachable, Err: err}
	}
	if err := l.dials.failedSince(start); err != nil {
		return &CallError{Class: ClassOutage, Cause: ErrUnreachable, Err: err}
	}
	return &CallError{Class: ClassOutage, Cause: ErrDeadline, Deadline: l.deadline}
}

// call sends one module command through the checks made before sending, the breaker, the
// deadline and the engine; the error is a *CallError (why Redis did not decide) or a *UsageError.
func (l *Limiter) call(ctx context.Context, cmd []string) (any, error) {
	keys := keysOf(cmd)
	if err := l.precheck(keys); err != nil {
		return nil, l.refused(err)
	}
	if !l.breaker.allow() {
		return nil, &CallError{Class: ClassOutage, Cause: ErrBreakerOpen}
	}
	v, err := l.bounded(ctx, func(ctx context.Context) (any, error) {
		if l.batch != nil {
			return l.batch.do(ctx, cmd)
		}
		return l.engine.run(ctx, l.client, cmd, nil)
	})
	if err != nil && errors.Is(ctx.Err(), context.Canceled) {
		// The caller gave up (its client went away): not an outage. Neither the breaker nor the
		// engine machine (an outage sends it back to its start) hears of it.
		return nil, &CallError{Class: ClassOutage, Cause: ErrUnreachable, Err: ctx.Err(), callerGone: true}
	}
	return v, l.settle(err, keys)
}

// settle does what the contract's class of a call's outcome says to the breaker, the counters
// and the log, and returns the error as a *CallError (the failure policy decides) or a
// *UsageError (the caller's, as Redis answered it: the ones refused before sending never get here).
func (l *Limiter) settle(err error, keys []string) error {
	if err == nil {
		l.redisDecided()
		return nil
	}
	err = callErrorOf(err)
	class := ClassUsage
	var ce *CallError
	if errors.As(err, &ce) {
		class = ce.Class
		if ce.Cause == ErrDeadline && ce.Deadline == 0 {
			ce.Deadline = l.deadline
		}
	}
	// What the class does, as the contract's classes say: the breaker, the counter, the log.
	does := classDeclOf(class)
	switch does.Breaker {
	case "failure":
		if l.breaker.failure() {
			l.startProbe()
		}
	case "answered": // Redis answered: a success, as a decision is (it ends a half-open probe)
		l.heard()
	}
	if n := l.counterOf(does.Counter); n != nil {
		n.Add(1)
	}
	if class == ClassMisconfigured {
		l.lastMisconfigured.Store(true)
	}
	switch does.Log {
	case "once_per_cause":
		l.logMisconfigured(ce)
	case "once_per_key":
		l.logConflict(ce, keys)
	case "outage": // whichever call meets it (strict ones too); heard ends it
		l.startOutage(ce)
	}
	return err
}

// counterOf is the counter a class counts each call in (nil for outage: Outages counts outages
// started, in startOutage).
func (l *Limiter) counterOf(name string) *atomic.Uint64 {
	return map[string]*atomic.Uint64{"misconfigured": &l.misconfigured, "conflicts": &l.conflicts, "usage_errors": &l.usageErrors}[name]
}

// refused counts a usage error (the caller's mistake) and returns it.
func (l *Limiter) refused(err error) error {
	if errors.Is(err, ErrUsage) {
		l.counterOf(classDeclOf(ClassUsage).Counter).Add(1)
	}
	return err
}

// redisDecided: Redis decided; ends an outage and a misconfiguration.
func (l *Limiter) redisDecided() {
	l.lastMisconfigured.Store(false)
	l.heard()
}

// heard: Redis answered (a decision, or an error reply whose class's breaker is "answered"): a
// success for the breaker; ends an outage.
func (l *Limiter) heard() {
	if l.breaker.success() || l.inOutageNow() {
		l.endOutage()
	}
}

func (l *Limiter) inOutageNow() bool {
	l.outageMu.Lock()
	defer l.outageMu.Unlock()
	return l.inOutage
}

func (l *Limiter) endOutage() {
	l.outageMu.Lock()
	was, since, n := l.inOutage, l.outageSince, l.outageCount
	l.inOutage, l.outageCount = false, 0
	l.outageMu.Unlock()
	if was {
		l.log.Info("redis-ratelimit: Redis answers again; outage over",
			"lasted", time.Since(since).Round(time.Millisecond), "degraded_decisions", n)
	}
}

// startProbe: while the breaker is open for an outage, one goroutine PINGs Redis every 50 ms and
// closes the breaker as soon as it answers.
func (l *Limiter) startProbe() {
	if l.probing.Swap(true) {
		return
	}
	go func() {
		defer l.probing.Store(false)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-l.closed:
				return
			case <-t.C:
			}
			if !l.breaker.awaitsRedis() {
				return
			}
			_, err := l.bounded(context.Background(), func(ctx context.Context) (any, error) {
				return l.client.Ping(ctx).Result()
			})
			if err == nil {
				l.heard() // an answer, not a decision: Misconfigured() stays as it was
				return
			}
		}
	}()
}

// degrade is the failure policy's decision over limits that Redis did not make.
func (l *Limiter) degrade(limits []Limit, cause *CallError) Decision {
	if l.local != nil {
		return l.countDegraded(l.local.decide(limits, nil, time.Now().UnixNano(), true), cause)
	}
	var limit uint64
	if len(limits) > 0 {
		limit = limits[0].Policy.Limit()
	}
	allow := l.failure.IsOpen()
	d := Decision{Allowed: allow, Limit: limit, Degraded: true, RetryAfter: time.Second}
	if allow {
		d.Remaining, d.RetryAfter = limit, 0
	}
	return l.countDegraded(d, cause)
}

// countDegraded counts and logs a decision of the failure policy.
func (l *Limiter) countDegraded(d Decision, cause *CallError) Decision {
	allow := d.Allowed
	l.decisions.Add(1)
	l.degraded.Add(1)
	if allow {
		l.degradedAllowed.Add(1)
		l.allowed.Add(1)
	}
	if cause == nil || cause.callerGone || classDeclOf(cause.Class).Log != "outage" {
		return d // counted; no outage (the caller left, or Redis answered: logged by settle)
	}
	l.outageMu.Lock()
	if l.inOutage { // started by settle (or the breaker, open since); a degraded decision in it
		l.outageCount++
	}
	l.outageMu.Unlock()
	return d
}

// startOutage: a call met an outage (settle: whatever the call, strict ones too). The first
// such call since Redis last answered starts it: one WARN line and one count per outage, not
// per call; heard ends it (one INFO line).
func (l *Limiter) startOutage(cause *CallError) {
	if cause == nil || cause.callerGone {
		return
	}
	l.outageMu.Lock()
	started := !l.inOutage
	if started {
		l.inOutage, l.outageSince = true, time.Now()
	}
	l.outageMu.Unlock()
	if started {
		l.outages.Add(1)
		l.log.Warn("redis-ratelimit: Redis does not decide (an outage); checks get the failure policy's decision, strict calls the error",
			"cause", cause.Error(), "policy", l.failure.String(), "engine", l.engine.used().String())
	}
}

func (l *Limiter) decided(d Decision) Decision {
	l.decisions.Add(1)
	if d.Allowed {
		l.allowed.Add(1)
	}
	if d.Local {
		l.localDecisions.Add(1)
	}
	return d
}

// Check decides one limit: key, policy and cost (1 for most requests; 0 peeks). The error is
// non-nil only for a call that cannot be built (ErrUsage); a call Redis did not decide gives the
// failure policy's decision (Degraded).
func (l *Limiter) Check(ctx context.Context, key string, p Policy, cost uint64) (Decision, error) {
	return l.CheckAll(ctx, Limit{Key: key, Policy: p, Cost: cost})
}

// CheckAll decides several limits atomically in one call (one RL.TOKEN for token buckets, else
// one RL.ALL): all are taken or none. Decision.Limiting names the limit it describes. In a
// cluster, the keys must share a hash tag.
func (l *Limiter) CheckAll(ctx context.Context, limits ...Limit) (Decision, error) {
	d, err := l.CheckAllStrict(ctx, limits...)
	var ce *CallError
	if errors.As(err, &ce) {
		return l.degrade(limits, ce), nil
	}
	return d, err
}

// CheckAllStrict is CheckAll without the failure policy: a call Redis did not decide returns its
// *CallError (errors.Is ErrDeadline, ErrUnreachable, ErrBreakerOpen, ErrServer, ErrConfiguration,
// ErrConflict, ErrReply).
func (l *Limiter) CheckAllStrict(ctx context.Context, limits ...Limit) (Decision, error) {
	cmd, err := buildDecide(limits)
	if err == nil {
		err = l.precheck(keysOf(cmd))
	}
	if err != nil {
		return Decision{}, l.refused(err)
	}
	d, err := l.decideAt(unixNow, limits, cmd, l.unitIO(ctx))
	if err != nil {
		return Decision{}, err
	}
	return l.decided(d), nil
}

// Take grants as many tokens as the bucket holds now, up to most (RL.TAKE). Degraded: fail open
// grants all of most, fail closed none, the local fallback what its share of the bucket holds.
func (l *Limiter) Take(ctx context.Context, key string, p Policy, most uint64) (Taken, error) {
	cmd, err := buildTake(key, p, most)
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
		return l.degradeTake(key, p, 1, most, ce), nil
	}
	if err == nil {
		l.decided(t.Decision)
	}
	return t, err
}

// degradeTake is the failure policy's partial grant of least to most tokens: fail open grants
// most, fail closed none, the local fallback what its share holds.
func (l *Limiter) degradeTake(key string, p Policy, least, most uint64, cause *CallError) Taken {
	if l.local != nil {
		t := l.local.reserve(key, p, least, most, 0, time.Now().UnixNano(), true)
		t.Decision = l.countDegraded(t.Decision, cause)
		return t
	}
	d := l.degrade([]Limit{{key, p, most}}, cause)
	if d.Allowed {
		return Taken{Decision: d, Taken: most}
	}
	return Taken{Decision: d}
}

// Refund gives units back to a token bucket, fixed window or sliding counter (RL.REFUND). Strict:
// the error says why Redis did not take it.
func (l *Limiter) Refund(ctx context.Context, key string, p Policy, units uint64) error {
	cmd, err := buildRefund(key, p, units)
	if err != nil {
		return l.refused(err)
	}
	_, err = l.call(ctx, cmd)
	return err
}

// Peek reads what key holds and, with its policy, what a request would meet now (RL.INSPECT,
// read-only). Strict.
func (l *Limiter) Peek(ctx context.Context, key string, p Policy) (Inspection, error) {
	var pp *Policy
	if p.Valid() {
		pp = &p
	}
	v, err := l.call(ctx, buildInspect(key, pp))
	if err != nil {
		return Inspection{}, err
	}
	return inspectionOf(v)
}

// Verified is what Verify found: the engine in use and why.
type Verified struct {
	Engine Engine
	Why    string
}

func (v Verified) String() string { return v.Engine.String() + " (" + v.Why + ")" }

// Verify asks the server which engine works (the module, the library through FCALL, or EVALSHA;
// loading the library where it is missing) and says which and why. Its error is a *CallError:
// ErrConfiguration when no engine works for this user on this server.
func (l *Limiter) Verify(ctx context.Context) (Verified, error) {
	const key = "rl:{verify}"
	// RL.INSPECT (read-only, on a key that need not exist), then a token bucket's command with cost 0 (a
	// peek: writes nothing), which answers a decision.
	peek := []string{kindOf("token_bucket").Command, key, "1", "1", "0"}
	for i, cmd := range [][]string{buildInspect(key, nil), peek} {
		v, err := l.bounded(ctx, func(ctx context.Context) (any, error) { return l.engine.run(ctx, l.client, cmd, nil) })
		if err = l.settle(err, keysOf(cmd)); err != nil {
			return Verified{}, err
		}
		if i == 1 {
			if _, err := DecisionOfReply(v); err != nil {
				return Verified{}, err
			}
		}
	}
	e, why := l.engine.describe()
	return Verified{Engine: e, Why: why}, nil
}

package ratelimit_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimit "github.com/redis-ratelimit/redis-ratelimit/go"
	"github.com/redis-ratelimit/redis-ratelimit/go/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The holds (RL.HOLD / RL.SETTLE) against a real server with the module loaded.

func holdServer(t *testing.T) (*redistest.Server, *redis.Client, *ratelimit.Limiter) {
	t.Helper()
	return holdServerOn(t, engineCases[0])
}

func holdServerOn(t *testing.T, ec engineCase) (*redistest.Server, *redis.Client, *ratelimit.Limiter) {
	t.Helper()
	srv := redistest.Start(t, ec.module)
	c := srv.Client(t)
	return srv, c, newLimiter(t, c, ratelimit.Options{Failure: ratelimit.FailClosed(), Engine: ec.engine})
}

// onEngines runs a hold test on the module and, when the embedded library defines the hold
// functions, on a stock server through FCALL and EVALSHA.
func onEngines(t *testing.T, test func(t *testing.T, c *redis.Client, l *ratelimit.Limiter)) {
	for _, ec := range engineCases {
		if ec.redis62 {
			continue
		}
		t.Run(ec.name, func(t *testing.T) {
			if !ec.module && !strings.Contains(ratelimit.LibrarySource(), "function C.rl_hold(") {
				t.Skip("the embedded Lua library has no rl_hold yet")
			}
			_, c, l := holdServerOn(t, ec)
			test(t, c, l)
			if e, _ := l.Engine(); e != ec.want {
				t.Fatalf("decided by %v, want %v", e, ec.want)
			}
		})
	}
}

var tpm = ratelimit.Must(ratelimit.FixedWindow(100, time.Hour))

// remaining is what a limit has left now (a peek: writes nothing).
func left(t *testing.T, l *ratelimit.Limiter, key string, p ratelimit.Policy) uint64 {
	t.Helper()
	in, err := l.Peek(context.Background(), key, p)
	if err != nil {
		t.Fatal(err)
	}
	if !in.Exists {
		return p.Limit()
	}
	return in.Remaining
}

func exists(t *testing.T, c *redis.Client, keys ...string) int64 {
	t.Helper()
	n, err := c.Exists(context.Background(), keys...).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestHoldAllowedThenDeniedWritesNothing(t *testing.T) {
	onEngines(t, func(t *testing.T, c *redis.Client, l *ratelimit.Limiter) {
		ctx := context.Background()
		const key = "rl:{t1}:tpm"
		h, err := l.Hold(ctx, ratelimit.HoldOptions{}, ratelimit.HeldLimit(key, tpm, 60))
		if err != nil || !h.Decision.Allowed || h.Decision.Remaining != 40 || h.Local() {
			t.Fatalf("hold: %+v %v", h, err)
		}
		// Each hold is its own key, <ledger>:<id>; a CHARGE hold is not listed in the ledger.
		own := h.Ledger() + ":" + h.ID()
		if h.Ledger() != "rl:holds:{t1}" || exists(t, c, own) != 1 || exists(t, c, h.Ledger()) != 0 {
			t.Fatalf("the hold %q is not written", own)
		}
		denied, err := l.Hold(ctx, ratelimit.HoldOptions{}, ratelimit.HeldLimit(key, tpm, 50))
		if err != nil || denied.Decision.Allowed || denied.Decision.RetryAfter <= 0 {
			t.Fatalf("a hold past the limit: %+v %v", denied, err)
		}
		if exists(t, c, h.Ledger(), denied.Ledger()+":"+denied.ID()) != 0 || left(t, l, key, tpm) != 40 {
			t.Fatal("a denied hold wrote a hold, the ledger or the window")
		}
		// On fresh keys a denial leaves nothing at all; its settle finds no hold.
		fresh, err := l.Hold(ctx, ratelimit.HoldOptions{}, ratelimit.HeldLimit("rl:{t2}:tpm", tpm, 101))
		if err != nil || fresh.Decision.Allowed || exists(t, c, "rl:{t2}:tpm", "rl:holds:{t2}") != 0 {
			t.Fatalf("a denied hold on fresh keys: %+v %v", fresh, err)
		}
		if s, err := fresh.Settle(ctx, 0); err != nil || s.Found {
			t.Fatalf("settling a denied hold: %+v %v", s, err)
		}
	})
}

func TestHoldSettleReturnsUnusedOnce(t *testing.T) {
	onEngines(t, func(t *testing.T, _ *redis.Client, l *ratelimit.Limiter) {
		ctx := context.Background()
		const key = "rl:{s}:tpm"
		h, err := l.Hold(ctx, ratelimit.HoldOptions{ID: "req-1", TTL: time.Minute}, ratelimit.HeldLimit(key, tpm, 60))
		if err != nil || !h.Decision.Allowed || h.ID() != "req-1" {
			t.Fatalf("hold: %+v %v", h, err)
		}
		s, err := h.Settle(ctx, 20)
		if err != nil || !s.Found || !s.Allowed || s.Remaining != 80 {
			t.Fatalf("settle: %+v %v", s, err)
		}
		if got := left(t, l, key, tpm); got != 80 {
			t.Fatalf("remaining %d after settling 20 of 60, want 80", got)
		}
		// Retried (the same, another actual, a cancel, the scope's exit): counted once.
		for _, again := range []func() (ratelimit.Settled, error){
			func() (ratelimit.Settled, error) { return h.Settle(ctx, 20) },
			func() (ratelimit.Settled, error) { return h.Settle(ctx, 5) },
			func() (ratelimit.Settled, error) { return h.Cancel(ctx) },
		} {
			if s, err := again(); err != nil || !s.Found {
				t.Fatalf("a repeated settle: %+v %v", s, err)
			}
		}
		if err := h.Close(ctx); err != nil {
			t.Fatal(err)
		}
		// A retried hold with the same id replies as the first and takes nothing.
		again, err := l.Hold(ctx, ratelimit.HoldOptions{ID: "req-1", TTL: time.Minute}, ratelimit.HeldLimit(key, tpm, 60))
		if err != nil || !again.Decision.Allowed || again.Decision.Remaining != 40 {
			t.Fatalf("a retried hold: %+v %v", again, err)
		}
		if got := left(t, l, key, tpm); got != 80 {
			t.Fatalf("remaining %d after a retried settle and hold, want 80", got)
		}
	})
}

func TestHoldAddStopsPastTheLimit(t *testing.T) {
	onEngines(t, func(t *testing.T, _ *redis.Client, l *ratelimit.Limiter) {
		ctx := context.Background()
		const key = "rl:{a}:tpm"
		h, err := l.Hold(ctx, ratelimit.HoldOptions{}, ratelimit.HeldLimit(key, tpm, 50))
		if err != nil || !h.Decision.Allowed {
			t.Fatalf("hold: %+v %v", h, err)
		}
		defer func() { _ = h.Close(ctx) }()
		for _, step := range []struct {
			usage uint64
			stop  bool
			left  uint64
		}{{40, false, 50}, {90, false, 10}, {110, true, 0}} {
			stop, err := h.Add(ctx, step.usage)
			if err != nil || stop != step.stop {
				t.Fatalf("Add(%d): stop %v %v, want %v", step.usage, stop, err, step.stop)
			}
			if got := left(t, l, key, tpm); got != step.left {
				t.Fatalf("after Add(%d): remaining %d, want %d", step.usage, got, step.left)
			}
		}
		if _, err := h.AddEach(ctx, map[string]uint64{"rl:{a}:other": 1}); !errors.Is(err, ratelimit.ErrUsage) {
			t.Fatalf("a usage of a key the hold does not hold: %v", err)
		}
	})
}

// Leaving a hold's scope unsettled applies its abandon policy now (a FINAL): CHARGE keeps the
// larger of the estimate and the usage reported, RETURN gives back what the usage did not use; an
// explicit Cancel still gives everything back, and Close after it sends nothing.
func TestHoldScopeExit(t *testing.T) {
	onEngines(t, func(t *testing.T, _ *redis.Client, l *ratelimit.Limiter) {
		ctx := context.Background()
		// scope holds 60 (a retry-safe ttl), reports usage when > 0, runs end, then leaves by Close.
		scope := func(key string, abandon ratelimit.Abandon, usage uint64, end func(h *ratelimit.Hold)) *ratelimit.Hold {
			h, err := l.Hold(ctx, ratelimit.HoldOptions{Abandon: abandon}, ratelimit.HeldLimit(key, tpm, 60))
			if err != nil || !h.Decision.Allowed {
				t.Fatalf("hold: %+v %v", h, err)
			}
			defer func() {
				if err := h.Close(ctx); err != nil {
					t.Fatal(err)
				}
			}()
			if usage > 0 {
				if _, err := h.Add(ctx, usage); err != nil {
					t.Fatal(err)
				}
			}
			if end != nil {
				end(h)
			}
			return h
		}
		// (1) CHARGE, no settle, no usage: the estimate stays charged, and the hold is ended (FINAL).
		h := scope("rl:{x}:charged", ratelimit.AbandonDefault, 0, nil)
		if got := left(t, l, "rl:{x}:charged", tpm); got != 40 {
			t.Fatalf("a CHARGE scope left unsettled: remaining %d, want 40 (the estimate charged)", got)
		}
		// It was a FINAL: a later cancel meets the settled hold and gives nothing back.
		if s, err := h.Cancel(ctx); err != nil || !s.Found || left(t, l, "rl:{x}:charged", tpm) != 40 {
			t.Fatalf("a cancel after the scope's exit: %+v %v, remaining %d, want 40 (the hold was settled)", s, err, left(t, l, "rl:{x}:charged", tpm))
		}
		// (2) CHARGE, usage past the estimate: the usage is charged.
		scope("rl:{x}:over", ratelimit.Charge, 75, nil)
		if got := left(t, l, "rl:{x}:over", tpm); got != 25 {
			t.Fatalf("a CHARGE scope left after Add(75) of 60: remaining %d, want 25 (the usage charged)", got)
		}
		// (2b) CHARGE, usage below the estimate: the estimate stays charged (billing-safe).
		scope("rl:{x}:under", ratelimit.Charge, 30, nil)
		if got := left(t, l, "rl:{x}:under", tpm); got != 40 {
			t.Fatalf("a CHARGE scope left after Add(30) of 60: remaining %d, want 40 (the estimate kept)", got)
		}
		// (3) RETURN, usage 30 of 60: the 30 unused come back.
		scope("rl:{x}:returned", ratelimit.Return, 30, nil)
		if got := left(t, l, "rl:{x}:returned", tpm); got != 70 {
			t.Fatalf("a RETURN scope left after Add(30) of 60: remaining %d, want 70", got)
		}
		// (3b) RETURN, no usage: everything comes back.
		scope("rl:{x}:returnall", ratelimit.Return, 0, nil)
		if got := left(t, l, "rl:{x}:returnall", tpm); got != 100 {
			t.Fatalf("a RETURN scope left unsettled: remaining %d, want 100", got)
		}
		// (4) An explicit Cancel (CHARGE hold, usage reported) still gives everything back; Close
		// after it sends nothing.
		scope("rl:{x}:cancelled", ratelimit.Charge, 30, func(h *ratelimit.Hold) {
			if _, err := h.Cancel(ctx); err != nil {
				t.Fatal(err)
			}
		})
		if got := left(t, l, "rl:{x}:cancelled", tpm); got != 100 {
			t.Fatalf("a cancelled scope: remaining %d, want 100", got)
		}
	})
}

// A caller gone (its context cancelled, as r.Context() is once the HTTP client left) does not
// stop a settle or the scope's exit: they run on the context without its cancel, bounded by the
// limiter's deadline.
func TestHoldSettlesOutliveTheCaller(t *testing.T) {
	onEngines(t, func(t *testing.T, _ *redis.Client, l *ratelimit.Limiter) {
		hold := func(key string, abandon ratelimit.Abandon) (*ratelimit.Hold, context.Context) {
			h, err := l.Hold(context.Background(), ratelimit.HoldOptions{Abandon: abandon}, ratelimit.HeldLimit(key, tpm, 60))
			if err != nil || !h.Decision.Allowed {
				t.Fatalf("hold: %+v %v", h, err)
			}
			gone, cancel := context.WithCancel(context.Background())
			cancel()
			return h, gone
		}
		h, gone := hold("rl:{g}:settled", ratelimit.Charge)
		if s, err := h.Settle(gone, 10); err != nil || !s.Found || s.GaveUp {
			t.Fatalf("a settle on a cancelled context: %+v %v", s, err)
		}
		if got := left(t, l, "rl:{g}:settled", tpm); got != 90 {
			t.Fatalf("a settle of 10 on a cancelled context: remaining %d, want 90", got)
		}
		h, gone = hold("rl:{g}:closed", ratelimit.Return)
		if _, err := h.Add(gone, 20); err != nil {
			t.Fatal(err)
		}
		if err := h.Close(gone); err != nil {
			t.Fatal(err)
		}
		if got := left(t, l, "rl:{g}:closed", tpm); got != 80 {
			t.Fatalf("a RETURN scope left after Add(20), on a cancelled context: remaining %d, want 80", got)
		}
		if c := l.Counts(); c.Outages != 0 {
			t.Fatalf("counts %+v: a caller gone is no outage", c)
		}
	})
}

func TestHoldExactPromptHeldCompletion(t *testing.T) {
	onEngines(t, func(t *testing.T, _ *redis.Client, l *ratelimit.Limiter) {
		ctx := context.Background()
		rpm := ratelimit.Must(ratelimit.SlidingCounter(10, time.Minute))
		in := ratelimit.Must(ratelimit.FixedWindow(1000, time.Hour))
		out := ratelimit.Must(ratelimit.TokenBucket(1000, 0.001))
		limits := []ratelimit.HoldLimit{
			ratelimit.ExactLimit("rl:{k}:rpm", rpm, 1),
			ratelimit.ExactLimit("rl:{k}:in", in, 300),
			ratelimit.HeldLimit("rl:{k}:out", out, 500),
		}
		h, err := l.Hold(ctx, ratelimit.HoldOptions{Abandon: ratelimit.Return}, limits...)
		if err != nil || !h.Decision.Allowed {
			t.Fatalf("hold: %+v %v", h, err)
		}
		if s, err := h.Settle(ctx, 120); err != nil || !s.Found {
			t.Fatalf("settle: %+v %v", s, err)
		}
		if got := left(t, l, "rl:{k}:in", in); got != 700 {
			t.Fatalf("the exact prompt limit: remaining %d, want 700", got)
		}
		if got := left(t, l, "rl:{k}:rpm", rpm); got != 9 {
			t.Fatalf("the exact request limit: remaining %d, want 9", got)
		}
		if got := left(t, l, "rl:{k}:out", out); got != 880 {
			t.Fatalf("the held completion limit: remaining %d, want 880", got)
		}
		// A cancel gives the held limit back; the exact ones stay charged.
		h2, err := l.Hold(ctx, ratelimit.HoldOptions{}, limits...)
		if err != nil || !h2.Decision.Allowed {
			t.Fatalf("hold: %+v %v", h2, err)
		}
		if _, err := h2.Cancel(ctx); err != nil {
			t.Fatal(err)
		}
		if in, out := left(t, l, "rl:{k}:in", in), left(t, l, "rl:{k}:out", out); in != 400 || out != 880 {
			t.Fatalf("after a cancel: in %d (want 400), out %d (want 880)", in, out)
		}
	})
}

// lines is a logger's output, safe for concurrent writes.
type lines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *lines) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *lines) count(s string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Count(w.buf.String(), s)
}

func TestHoldSettleOutageIsGivenUp(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t, true)
	log := &lines{}
	l := newLimiter(t, srv.Client(t), ratelimit.Options{Failure: ratelimit.FailClosed(), Deadline: time.Second,
		Logger: slog.New(slog.NewTextHandler(log, nil)), BreakerFailures: 10})
	h, err := l.Hold(ctx, ratelimit.HoldOptions{}, ratelimit.HeldLimit("rl:{o}:tpm", tpm, 60))
	if err != nil || !h.Decision.Allowed {
		t.Fatalf("hold: %+v %v", h, err)
	}
	srv.Stop()
	s, err := h.Settle(ctx, 10)
	if err != nil || !s.GaveUp || s.Found {
		t.Fatalf("a settle during an outage: %+v %v", s, err)
	}
	if n := log.count("settle was given up"); n != 1 {
		t.Fatalf("the give-up logged %d times, want once:\n%s", n, log.buf.String())
	}
	if err := h.Close(ctx); err != nil || log.count("settle was given up") != 1 {
		t.Fatalf("the scope's exit after a given-up settle sent again: %v", err)
	}
	if c := l.Counts(); c.Outages != 1 {
		t.Fatalf("counts %+v, want one outage", c)
	}
}

func TestHoldUnderTheFailurePolicyIsLocal(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t, true)
	c := srv.Client(t)
	open := newLimiter(t, c, ratelimit.Options{Failure: ratelimit.FailOpen(), Deadline: time.Second})
	closed := newLimiter(t, c, ratelimit.Options{Failure: ratelimit.FailClosed(), Deadline: time.Second})
	// A ledger key holding something else: a conflict, decided by the failure policy.
	if err := c.Set(ctx, "rl:holds:{c}", "not a ledger", 0).Err(); err != nil {
		t.Fatal(err)
	}
	h, err := closed.Hold(ctx, ratelimit.HoldOptions{}, ratelimit.HeldLimit("rl:{c}:tpm", tpm, 1))
	if err != nil || h.Decision.Allowed || !h.Local() {
		t.Fatalf("a conflict under fail closed: %+v %v", h, err)
	}
	srv.Stop()
	h, err = open.Hold(ctx, ratelimit.HoldOptions{}, ratelimit.HeldLimit("rl:{l}:tpm", tpm, 60))
	if err != nil || !h.Decision.Allowed || !h.Local() {
		t.Fatalf("an outage under fail open: %+v %v", h, err)
	}
	if s, err := h.Settle(ctx, 10); err != nil || s.Found || s.GaveUp {
		t.Fatalf("a local hold's settle does nothing: %+v %v", s, err)
	}
}

func TestHoldUsageErrors(t *testing.T) {
	ctx := context.Background()
	_, _, l := holdServer(t)
	bad := map[string]ratelimit.HoldOptions{
		"ttl": {TTL: 25 * time.Hour},
		"id":  {ID: strings.Repeat("x", 257)},
	}
	for field, opts := range bad {
		_, err := l.Hold(ctx, opts, ratelimit.HeldLimit("rl:{u}:tpm", tpm, 1))
		var ue *ratelimit.UsageError
		if !errors.As(err, &ue) || ue.Code != "ERR" || !strings.Contains(ue.Message, "invalid "+field) {
			t.Fatalf("%s: %v", field, err)
		}
	}
	lease := ratelimit.Must(ratelimit.Concurrency(2, time.Second))
	if _, err := l.Hold(ctx, ratelimit.HoldOptions{}, ratelimit.HeldLimit("rl:{u}:c", lease, 1)); !errors.Is(err, ratelimit.ErrUsage) {
		t.Fatalf("a concurrency limit in a hold: %v", err)
	}
	if _, err := l.Hold(ctx, ratelimit.HoldOptions{}); !errors.Is(err, ratelimit.ErrUsage) {
		t.Fatalf("no limits: %v", err)
	}
	// Redis' own: the same key twice (refused before sending in the server's words).
	_, err := l.Hold(ctx, ratelimit.HoldOptions{}, ratelimit.HeldLimit("rl:{u}:tpm", tpm, 1), ratelimit.HeldLimit("rl:{u}:tpm", tpm, 1))
	if !errors.Is(err, ratelimit.ErrUsage) {
		t.Fatalf("a key twice: %v", err)
	}
	if l.Counts().UsageErrors != 5 {
		t.Fatalf("counts %+v, want 5 usage errors", l.Counts())
	}
}

// On a cluster the default ledger shares the limits' slot (their hash tag); a ledger in another slot
// is refused before sending, as Redis would (CROSSSLOT).
func TestHoldOnACluster(t *testing.T) {
	ctx := context.Background()
	cl := sharedCluster(t, true)
	rc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rc.Close() })
	l := newLimiter(t, rc, ratelimit.Options{Failure: ratelimit.FailClosed()})
	for i := range 8 { // tags on different nodes
		key := fmt.Sprintf("rl:{holdtag%d}:tpm", i)
		h, err := l.Hold(ctx, ratelimit.HoldOptions{}, ratelimit.HeldLimit(key, tpm, 60))
		if err != nil || !h.Decision.Allowed || h.Local() {
			t.Fatalf("hold on %s: %+v %v", key, h, err)
		}
		if s, err := h.Settle(ctx, 10); err != nil || !s.Found || s.Remaining != 90 {
			t.Fatalf("settle on %s: %+v %v", key, s, err)
		}
	}
	_, err := l.Hold(ctx, ratelimit.HoldOptions{Ledger: "rl:holds:elsewhere"}, ratelimit.HeldLimit("rl:{holdtag0}:x", tpm, 1))
	var ue *ratelimit.UsageError
	if !errors.As(err, &ue) || ue.Code != "CROSSSLOT" {
		t.Fatalf("a ledger in another slot: %v", err)
	}
}

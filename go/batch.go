package ratelimit

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// maxBatch bounds the commands of one pipeline.
const maxBatch = 128

// maxFlying bounds the round trips in flight at once.
const maxFlying = 2

// batcher coalesces concurrent calls (the default; Options.DisableBatching turns it off): a call
// that finds fewer than maxFlying round trips in flight is sent at once, alone (an idle limiter's
// latency is that of one call); calls that arrive while maxFlying are in flight wait, and when one
// ends they go together in one pipeline (up to maxBatch), sent by a goroutine so that the caller
// whose reply came back returns at once. Two in flight let this process work while Redis runs a
// pipeline. A round trip that outlives the deadline (a client without ContextTimeoutEnabled waits
// for its own timeouts) stops holding the others back at the deadline. A reply that asks for the
// engine's slow path (an unknown command or NOPERM under Auto, NOSCRIPT, "Function not found")
// goes on through the engine machine alone.
type batcher struct {
	l       *Limiter
	mu      sync.Mutex
	flying  int        // round trips in flight
	waiting []*batched // calls that came meanwhile
}

type batched struct {
	ctx  context.Context
	cmd  []string
	done chan result
}

func newBatcher(l *Limiter) *batcher { return &batcher{l: l} }

// do sends cmd now when nothing is in flight, else queues it for the next pipeline and waits for
// its reply, or for ctx.
func (b *batcher) do(ctx context.Context, cmd []string) (any, error) {
	b.mu.Lock()
	if b.flying < maxFlying {
		b.flying++
		b.mu.Unlock()
		end := b.begin()
		v, err := b.l.engine.run(ctx, b.l.client, cmd, nil)
		end()
		return v, err
	}
	call := &batched{ctx: ctx, cmd: cmd, done: make(chan result, 1)}
	b.waiting = append(b.waiting, call)
	b.mu.Unlock()
	select {
	case r := <-call.done:
		return r.v, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// begin starts a round trip; the function it returns ends it (b.next), once: when the reply came,
// or at the deadline where the client does not end a call there itself.
func (b *batcher) begin() func() {
	if b.l.ctxTimeouts {
		return b.next
	}
	var once sync.Once
	t := time.AfterFunc(b.l.deadline, func() { once.Do(b.next) })
	return func() {
		t.Stop()
		once.Do(b.next)
	}
}

// next: the round trip in flight ended. The calls that came meanwhile (at most maxBatch) are sent
// in one pipeline by a goroutine; with none, nothing is in flight any more.
func (b *batcher) next() {
	b.mu.Lock()
	calls := b.waiting
	if len(calls) == 0 {
		b.flying--
		b.mu.Unlock()
		return
	}
	if len(calls) > maxBatch {
		b.waiting = calls[maxBatch:]
		calls = calls[:maxBatch:maxBatch]
	} else {
		b.waiting = nil
	}
	b.mu.Unlock()
	go func() {
		end := b.begin()
		b.send(calls)
		end()
	}()
}

// argsOf is cmd as the machine's state sends it first (module, fcall or evalsha).
func argsOf(sends string, cmd []string) []any {
	call, isLibrary := callOf(cmd)
	switch {
	case sends == "module" || !isLibrary:
		return moduleArgs(cmd)
	case sends == "fcall":
		return call.fcall()
	default:
		return call.evalsha()
	}
}

func (b *batcher) send(calls []*batched) {
	var live []*batched
	for _, c := range calls {
		if c.ctx.Err() != nil {
			c.done <- result{nil, c.ctx.Err()}
			continue
		}
		live = append(live, c)
	}
	if len(live) == 0 {
		return
	}
	e := b.l.engine
	if len(live) == 1 {
		c := live[0]
		v, err := e.run(c.ctx, b.l.client, c.cmd, nil)
		c.done <- result{v, err}
		return
	}
	// One deadline for the pipeline: the limiter's (each caller still waits at most its own).
	ctx, cancel := context.WithTimeout(context.Background(), b.l.deadline)
	defer cancel()
	sends, loads := e.m.sends(), e.loads.count.Load()
	pipe := b.l.client.Pipeline()
	cmds := make([]*redis.Cmd, len(live))
	for i, c := range live {
		cmds[i] = pipe.Do(ctx, argsOf(sends, c.cmd)...)
	}
	_, _ = pipe.Exec(ctx)
	for i, c := range live {
		v, err := cmds[i].Result()
		if errors.Is(err, redis.Nil) {
			v, err = nil, nil
		}
		// The machine goes on from the pipeline's answer (alone, where it says to send again).
		v, err = e.run(c.ctx, b.l.client, c.cmd, &pipelined{what: sends, v: v, err: err, loads: loads})
		c.done <- result{v, err}
	}
}

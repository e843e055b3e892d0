package ratelimit

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// maxBatch bounds the commands of one pipeline.
const maxBatch = 128

// batcher sends the calls that arrive together in one pipeline (Options.Batch): one goroutine
// takes the first call waiting, every other call waiting then (up to maxBatch), and sends them
// in one round trip; calls that arrive meanwhile wait for the next. A reply that asks for the
// engine's slow path (an unknown command or NOPERM under Auto, NOSCRIPT, "Function not found")
// sends that call again alone through it.
type batcher struct {
	l     *Limiter
	queue chan *batched
}

type batched struct {
	ctx  context.Context
	cmd  []string
	done chan result
}

func newBatcher(l *Limiter) *batcher {
	b := &batcher{l: l, queue: make(chan *batched, 4*maxBatch)}
	go b.loop()
	return b
}

// do queues cmd and waits for its reply, or for ctx.
func (b *batcher) do(ctx context.Context, cmd []string) (any, error) {
	call := &batched{ctx: ctx, cmd: cmd, done: make(chan result, 1)}
	select {
	case b.queue <- call:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case r := <-call.done:
		return r.v, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (b *batcher) loop() {
	calls := make([]*batched, 0, maxBatch)
	for {
		select {
		case <-b.l.closed:
			return
		case first := <-b.queue:
			calls = append(calls[:0], first)
		}
	more:
		for len(calls) < maxBatch {
			select {
			case c := <-b.queue:
				calls = append(calls, c)
			default:
				break more
			}
		}
		b.send(calls)
		clear(calls)
	}
}

// argsOf is cmd as the engine in use sends it (engine.run's first try).
func argsOf(e Engine, cmd []string) []any {
	call, isLibrary := callOf(cmd)
	switch {
	case e == Module || !isLibrary:
		return moduleArgs(cmd)
	case e == Functions:
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
		v, err := e.run(c.ctx, b.l.client, c.cmd)
		c.done <- result{v, err}
		return
	}
	// One deadline for the pipeline: the limiter's (each caller still waits at most its own).
	ctx, cancel := context.WithTimeout(context.Background(), b.l.deadline)
	defer cancel()
	chosen := e.get()
	pipe := b.l.client.Pipeline()
	cmds := make([]*redis.Cmd, len(live))
	for i, c := range live {
		cmds[i] = pipe.Do(ctx, argsOf(chosen, c.cmd)...)
	}
	_, _ = pipe.Exec(ctx)
	for i, c := range live {
		v, err := cmds[i].Result()
		if errors.Is(err, redis.Nil) {
			v, err = nil, nil
		}
		if err != nil && (missing(err) || (e.wanted == Auto && refuses(err))) {
			v, err = e.run(c.ctx, b.l.client, c.cmd) // the slow path, alone
		}
		c.done <- result{v, err}
	}
}

package ratelimit

import (
	"context"
	"net"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// A connection Redis refuses fails at once, but go-redis retries it (with backoff) until the
// limiter's deadline: without looking at the dials, a refused connection would be reported as
// "no answer within the deadline". The limiter watches its client's dials (a go-redis hook) and
// reports a call whose dials failed as unreachable, with the dial's error.

type dialFailure struct {
	err error
	at  time.Time
}

// dialWatch is a go-redis hook that remembers the last failed dial.
type dialWatch struct{ last atomic.Pointer[dialFailure] }

func (w *dialWatch) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil {
			w.last.Store(&dialFailure{err: err, at: time.Now()})
		}
		return conn, err
	}
}

func (w *dialWatch) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (w *dialWatch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// watch adds the hook to a client, or to each node a cluster or ring client makes from now on.
func (w *dialWatch) watch(c redis.UniversalClient) {
	switch c := c.(type) {
	case *redis.ClusterClient:
		c.OnNewNode(func(n *redis.Client) { n.AddHook(w) })
	case *redis.Ring:
		c.OnNewNode(func(n *redis.Client) { n.AddHook(w) })
	default:
		c.AddHook(w)
	}
}

// failedSince is the error of a dial that failed at or after start, if any.
func (w *dialWatch) failedSince(start time.Time) error {
	if f := w.last.Load(); f != nil && !f.at.Before(start) {
		return f.err
	}
	return nil
}

package ratelimit

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// PolicyError is a policy that cannot be built; it names the kind and the field in the module's
// words: "token_bucket: invalid capacity: must be a whole number >= 1".
type PolicyError struct {
	Kind, Field, Reason string
}

func (e *PolicyError) Error() string {
	msg := strings.NewReplacer("{field}", e.Field, "{expected}", e.Reason).Replace(contract.Errors.Format)
	return e.Kind + ": " + strings.TrimPrefix(msg, "ERR ")
}

// ErrUsage is matched (errors.Is) by every call that cannot be built whatever Redis says: no limits,
// a sliding log with a cost other than 1, a concurrency limit in a check, a refund of a kind that
// takes none. Never left to the failure policy.
var ErrUsage = errors.New("redis-ratelimit: invalid call")

// UsageError is a call that cannot be built (errors.Is(err, ErrUsage)).
type UsageError struct{ Msg string }

func (e *UsageError) Error() string        { return e.Msg }
func (e *UsageError) Is(target error) bool { return target == ErrUsage }

func usage(format string, args ...any) error { return &UsageError{Msg: fmt.Sprintf(format, args...)} }

// The causes of a call that Redis did not decide (errors.Is). A *CallError wraps one of them.
var (
	// ErrDeadline: no answer within the limiter's deadline (connect included).
	ErrDeadline = errors.New("no answer from Redis within the deadline")
	// ErrUnreachable: the connection failed (refused, reset, closed).
	ErrUnreachable = errors.New("Redis unreachable") //lint:ignore ST1005 Redis is a name
	// ErrBreakerOpen: the circuit breaker is open; Redis is not called until its cool-down ends
	// or the probe sees Redis answer.
	ErrBreakerOpen = errors.New("the circuit breaker is open: Redis is not called until it answers again")
	// ErrServer: Redis answered with an error reply (ERR ..., WRONGTYPE ...).
	ErrServer = errors.New("Redis answered with an error") //lint:ignore ST1005 Redis is a name
	// ErrConfiguration: Redis answered that the limiter cannot work with it as configured: no
	// engine's command is known, or this user may not run it (NOPERM). Not an outage. Also matches
	// ErrServer.
	ErrConfiguration = errors.New("the limiter cannot work with this server as configured")
	// ErrReply: a reply that is not what the command answers.
	ErrReply = errors.New("unexpected reply")
)

// CallError says why Redis gave no decision: Cause is one of ErrDeadline, ErrUnreachable,
// ErrBreakerOpen, ErrServer, ErrConfiguration, ErrReply; Err the underlying error, if any.
type CallError struct {
	Cause    error
	Err      error
	Deadline time.Duration
	// callerGone: the caller's context was cancelled (a client that went away): Redis is not at
	// fault, so neither the breaker nor the outage count hears of it.
	callerGone bool
}

func (e *CallError) Error() string {
	switch {
	case e.Cause == ErrDeadline:
		return fmt.Sprintf("redis-ratelimit: %v (%v)", e.Cause, e.Deadline)
	case e.Err != nil:
		return fmt.Sprintf("redis-ratelimit: %v: %v", e.Cause, e.Err)
	}
	return "redis-ratelimit: " + e.Cause.Error()
}

func (e *CallError) Unwrap() []error {
	out := []error{e.Cause}
	if e.Cause == ErrConfiguration {
		out = append(out, ErrServer)
	}
	if e.Err != nil {
		out = append(out, e.Err)
	}
	return out
}

// outage: no answer (the breaker counts it; the failure policy decides).
func (e *CallError) outage() bool {
	return e.Cause == ErrDeadline || e.Cause == ErrUnreachable || e.Cause == ErrBreakerOpen
}

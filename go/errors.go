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

// Is makes a policy that cannot be built a usage error (errors.Is(err, ErrUsage)): the caller's.
func (e *PolicyError) Is(target error) bool { return target == ErrUsage }

// ErrUsage is matched (errors.Is) by every call that is the caller's mistake, refused before
// sending or answered so by Redis (the contract's class "usage"): no limits, an empty or duplicate
// key, keys of one call in different cluster slots (CROSSSLOT), an argument out of bounds, a
// sliding log with a cost other than 1, a concurrency limit in a check, a refund of a kind that
// takes none, a policy that cannot be built (*PolicyError: a batch its kind cannot take, say).
// Never decided by the failure policy, never a failure for the breaker (one that Redis
// answered is a success, as a decision is).
var ErrUsage = errors.New("redis-ratelimit: invalid call")

// UsageError is a call refused as the caller's mistake (errors.Is(err, ErrUsage)). Code is the
// error code Redis gives the same mistake (ERR, CROSSSLOT) and Message its whole text, the same in
// every language whether refused before sending or by Redis; Code is empty for a call only this
// package refuses (no limits, a check of a concurrency limit, ...).
type UsageError struct {
	Code    string
	Message string
}

func (e *UsageError) Error() string        { return e.Message }
func (e *UsageError) Is(target error) bool { return target == ErrUsage }

// usage is a refusal of this package's own (no Redis code).
func usage(format string, args ...any) error {
	return &UsageError{Message: fmt.Sprintf(format, args...)}
}

// usageReply is a refusal with Redis' code and text ("ERR invalid key: ...").
func usageReply(text string) error {
	code, _ := splitReply(text)
	return &UsageError{Code: code, Message: text}
}

// The causes of a call that Redis did not decide (errors.Is). A *CallError wraps one of them.
var (
	// ErrDeadline: no answer within the limiter's deadline (connect included).
	ErrDeadline = errors.New("no answer from Redis within the deadline")
	// ErrUnreachable: the connection failed (refused, reset, closed).
	ErrUnreachable = errors.New("Redis unreachable") //lint:ignore ST1005 Redis is a name
	// ErrBreakerOpen: the circuit breaker is open; Redis is not called until its cool-down ends
	// or the probe sees Redis answer.
	ErrBreakerOpen = errors.New("the circuit breaker is open: Redis is not called until it answers again")
	// ErrServer: Redis answered with an error reply (LOADING, READONLY, ...; also matched by
	// ErrConfiguration and ErrConflict).
	ErrServer = errors.New("Redis answered with an error") //lint:ignore ST1005 Redis is a name
	// ErrConfiguration: Redis answered that the limiter cannot work with it as configured: no
	// engine's command is known, this user may not run it (NOPERM), or an error reply no rule
	// knows (class misconfigured). Not an outage. Also matches ErrServer.
	ErrConfiguration = errors.New("the limiter cannot work with this server as configured")
	// ErrConflict: the key holds another limiter's state or another type (class conflict): a key
	// written by another kind of limit under the same name. Not an outage. Also matches ErrServer.
	ErrConflict = errors.New("the key holds another limiter's state")
	// ErrReply: a reply that is not what the command answers.
	ErrReply = errors.New("unexpected reply")
)

// CallError says why Redis gave no decision: Class is the contract's class (outage,
// misconfigured, conflict); Cause is one of ErrDeadline, ErrUnreachable, ErrBreakerOpen,
// ErrServer, ErrConfiguration, ErrConflict, ErrReply; Err the underlying error, if any.
type CallError struct {
	Class    Class
	Cause    error
	Err      error
	Deadline time.Duration
	// callerGone: the caller's context was cancelled (a client that went away): Redis is not at
	// fault, so neither the breaker nor the outage count hears of it.
	callerGone bool
	// logCause groups the log lines of a misconfiguration (once per cause a minute).
	logCause string
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
	if e.Cause == ErrConfiguration || e.Cause == ErrConflict {
		out = append(out, ErrServer)
	}
	if e.Err != nil {
		out = append(out, e.Err)
	}
	return out
}

// callErrorOf is a failure without a decision as a *CallError of its class, or the *UsageError of
// a usage reply.
func callErrorOf(err error) error {
	var ce *CallError
	if errors.As(err, &ce) {
		return ce
	}
	text, reply := replyError(err)
	class := classOf(err)
	switch {
	case classDeclOf(class).Decision == "raise": // the caller's: returned, never decided
		if reply {
			return usageReply(text)
		}
		return &UsageError{Message: err.Error()}
	case !reply:
		cause := ErrUnreachable
		if transportOf(err) == "timeout" {
			cause = ErrDeadline
		}
		return &CallError{Class: class, Cause: cause, Err: err}
	}
	cause := map[Class]error{ClassMisconfigured: ErrConfiguration, ClassConflict: ErrConflict}[class]
	if cause == nil {
		cause = ErrServer
	}
	code, rest := splitReply(text)
	logCause := code
	// The cause a line is logged under: the rule it matched, by its start (a key-level NOPERM, which
	// the engine machine tells from the command's, is a cause of its own).
	rules := make([]codeRule, 0, len(contract.Engines.Answers)+len(contract.Replies.Rules))
	for _, a := range contract.Engines.Answers {
		rules = append(rules, a.codeRule)
	}
	for _, r := range contract.Replies.Rules {
		rules = append(rules, r.codeRule)
	}
	for _, r := range rules {
		if r.matches(code, rest) && r.Starts != nil {
			logCause = code + " " + *r.Starts
			break
		}
	}
	return &CallError{Class: class, Cause: cause, Err: err, logCause: logCause}
}

package ratelimit

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// Class is what a limiter does with an answer that is not a decision: the contract's `replies`
// (docs/errors.md), read from the embedded contract, never restated here.
type Class string

// The contract's classes.
const (
	// ClassOutage: no answer, or Redis cannot decide now (LOADING, READONLY, ...): the failure
	// policy decides (Degraded), the breaker counts a failure, the outage log. The other classes
	// are Redis answering: a success for the breaker, as a decision is.
	ClassOutage Class = "outage"
	// ClassMisconfigured: the server as configured cannot run the limiter (NOPERM, unknown command,
	// an error reply no rule knows): the failure policy decides, logged at error level once per
	// cause a minute, counted, Misconfigured() true until Redis decides again.
	ClassMisconfigured Class = "misconfigured"
	// ClassConflict: the key holds another limiter's state or another type: the failure policy
	// decides, logged once per key with how to recover, counted (Counts.Conflicts).
	ClassConflict Class = "conflict"
	// ClassUsage: the caller's own mistake (CROSSSLOT, a duplicate or empty key, an argument out of
	// bounds): returned as a *UsageError (errors.Is ErrUsage), never decided by the failure policy.
	ClassUsage Class = "usage"
)

// classDecl is one class's behaviour as the contract declares it.
type classDecl struct {
	Name     Class  `json:"name"`
	Decision string `json:"decision"` // failure_policy | raise
	Degraded bool   `json:"degraded"`
	Breaker  string `json:"breaker"` // failure | answered
	Log      string `json:"log"`     // outage | once_per_cause | once_per_key | none
	Counter  string `json:"counter"`
}

// codeRule matches an error reply by its code (first word) and the start of the text after it.
type codeRule struct {
	Code   string  `json:"code"`
	Starts *string `json:"starts"`
}

// matches: the code is the reply's first word; starts (nil: any) is compared, ignoring case, with
// the start of the text after the code and one space.
func (r codeRule) matches(code, rest string) bool {
	if code != r.Code {
		return false
	}
	return r.Starts == nil || (len(rest) >= len(*r.Starts) && strings.EqualFold(rest[:len(*r.Starts)], *r.Starts))
}

type repliesDecl struct {
	Classes []classDecl `json:"classes"`
	Rules   []struct {
		codeRule
		Class Class `json:"class"`
	} `json:"rules"`
	Transport map[string]Class `json:"transport"`
	Otherwise Class            `json:"otherwise"`
}

// splitReply is an error reply's code and the text after it.
func splitReply(text string) (code, rest string) {
	code, rest, _ = strings.Cut(text, " ")
	return code, rest
}

// classOfReply is the class of an error reply's text: the first rule that matches, else otherwise.
func classOfReply(text string) Class {
	code, rest := splitReply(text)
	for _, r := range contract.Replies.Rules {
		if r.matches(code, rest) {
			return r.Class
		}
	}
	return contract.Replies.Otherwise
}

// classDeclOf is what the contract says a class does.
func classDeclOf(c Class) *classDecl {
	for i := range contract.Replies.Classes {
		if contract.Replies.Classes[i].Name == c {
			return &contract.Replies.Classes[i]
		}
	}
	panic("redis-ratelimit: the contract has no reply class " + string(c))
}

// transportOf names a failure without a reply as the contract's `transport` does: timeout,
// refused, reset or closed.
func transportOf(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout(), errors.Is(err, redis.ErrPoolTimeout):
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED), isDialError(err):
		return "refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNABORTED):
		return "reset"
	}
	return "closed" // io.EOF, a closed client or connection, anything else without a reply
}

// isDialError: a connection that could not be made (no server on the port, no route).
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// classOf is the class of what a call got instead of a decision: an error reply by the rules, any
// other failure by the transport table.
func classOf(err error) Class {
	if text, ok := replyError(err); ok {
		return classOfReply(text)
	}
	return contract.Replies.Transport[transportOf(err)]
}

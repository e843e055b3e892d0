package ratelimit

import (
	"strings"
	"sync"
	"time"
)

// logOnce keeps the log lines of answers that are not outages from repeating per request: a
// misconfiguration once per cause a minute, a conflict once per key (the contract's
// once_per_cause and once_per_key).
type logOnce struct {
	mu     sync.Mutex
	causes map[string]time.Time
	keys   map[string]struct{}
}

// maxLoggedKeys bounds the conflicts remembered; past it, they are forgotten (and may be logged
// once more).
const maxLoggedKeys = 10_000

func (o *logOnce) cause(c string, now time.Time) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.causes == nil {
		o.causes = map[string]time.Time{}
	}
	if last, seen := o.causes[c]; seen && now.Sub(last) < time.Minute {
		return false
	}
	o.causes[c] = now
	return true
}

func (o *logOnce) key(k string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, seen := o.keys[k]; seen {
		return false
	}
	if o.keys == nil || len(o.keys) >= maxLoggedKeys {
		o.keys = map[string]struct{}{}
	}
	o.keys[k] = struct{}{}
	return true
}

// logMisconfigured: at error level, once per cause a minute, with what to fix.
func (l *Limiter) logMisconfigured(ce *CallError) {
	if !l.logged.cause(ce.logCause, time.Now()) {
		return
	}
	l.log.Error("redis-ratelimit: Redis answers that the limiter is misconfigured (not an outage); the failure policy decides until it is fixed",
		"cause", ce.Error(), "fix", fixOf(ce), "policy", l.failure.String(), "engine", l.engine.get().String())
}

// fixOf says what to fix: the user's key patterns when Redis refused a key (a NOPERM the engine
// machine reads as no refusal of the command), its credentials when it refused the user, else an
// engine this user may run.
func fixOf(ce *CallError) string {
	text, _ := replyError(ce.Err)
	switch code, _ := splitReply(text); {
	case code == "NOPERM" && answerOf(ce.Err) == answerError:
		return "let this user reach the limiter's keys (its ACL key patterns, e.g. ~rl:*); see docs/errors.md"
	case code == "NOAUTH" || code == "WRONGPASS":
		return "give the client the username and password of a user this server knows; see docs/errors.md"
	}
	return "load the module, or let this user run FCALL and FUNCTION LOAD (or EVALSHA and EVAL); see docs/errors.md"
}

// logConflict: at error level, once per key, with the key and how to recover.
func (l *Limiter) logConflict(ce *CallError, keys []string) {
	named := strings.Join(keys, " ")
	if !l.logged.key(named) {
		return
	}
	l.log.Error("redis-ratelimit: the key holds another limiter's state (a conflict, not an outage); the failure policy decides for it",
		"keys", named, "reply", ce.Err.Error(), "policy", l.failure.String(),
		"recover", "delete the old key, wait for it to expire (at most its limit's period), or give the new limit another name")
}

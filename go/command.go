package ratelimit

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Limit is one limit of a check: a key, its policy, and what this request costs (1 for most; 0
// peeks; for a concurrency limit, the permit's weight).
type Limit struct {
	Key    string
	Policy Policy
	Cost   uint64
}

// The one place that turns limits into module commands (as client/src/command.rs). Each limit's
// arguments follow its kind's declaration in the contract.

const noRelease = "a concurrency limit is taken with Acquire, which releases it: Check has no release"

func buildDecide(limits []Limit) ([]string, error) { return build(limits, nil) }

func buildAcquire(limits []Limit, holder string) ([]string, error) { return build(limits, &holder) }

func build(limits []Limit, holder *string) ([]string, error) {
	if len(limits) == 0 {
		return nil, usage("no limits to check")
	}
	for _, l := range limits {
		if !l.Policy.Valid() {
			return nil, usage("limit %q has no policy", l.Key)
		}
	}
	if len(limits) == 1 {
		l := limits[0]
		req, err := request(l.Policy, l.Cost, holder)
		if err != nil {
			return nil, err
		}
		return append([]string{l.Policy.kind.Command, l.Key, l.Policy.params[0], l.Policy.params[1]}, req...), nil
	}
	allBuckets := true
	for _, l := range limits {
		allBuckets = allBuckets && l.Policy.kind.Name == "token_bucket"
	}
	bucket := kindOf("token_bucket")
	out := make([]string, 1, 1+6*len(limits))
	if allBuckets {
		out[0] = bucket.Command
	} else {
		out[0] = commandWithGroups()
	}
	if !allBuckets {
		return groups(out, limits, holder)
	}
	for _, l := range limits {
		req, err := request(l.Policy, l.Cost, holder)
		if err != nil {
			return nil, err
		}
		out = append(out, l.Key, l.Policy.params[0], l.Policy.params[1])
		out = append(out, req...)
	}
	return out, nil
}

// groups appends limits to out as RL.ALL's groups: key KIND p1 p2 request.
func groups(out []string, limits []Limit, holder *string) ([]string, error) {
	for _, l := range limits {
		req, err := request(l.Policy, l.Cost, holder)
		if err != nil {
			return nil, err
		}
		out = append(out, l.Key, l.Policy.kind.Group, l.Policy.params[0], l.Policy.params[1])
		out = append(out, req...)
	}
	return out, nil
}

// commandWithGroups is the command taking groups of any kinds (RL.ALL): the contract's.
func commandWithGroups() string {
	for _, c := range contract.Commands {
		if c.Keys.Rule == "groups" {
			return c.Name
		}
	}
	panic("redis-ratelimit: the contract has no command with groups")
}

// request is a limit's request after its parameters, in its kind's form.
func request(p Policy, cost uint64, holder *string) ([]string, error) {
	switch p.kind.Request {
	case "cost":
		return []string{strconv.FormatUint(cost, 10)}, nil
	case "id":
		if cost != 1 {
			return nil, usage("%s", contract.Errors.Render["log_cost"])
		}
		return []string{requestID()}, nil
	}
	if holder == nil {
		return nil, usage(noRelease)
	}
	if cost == 0 {
		return nil, usage("%s", contract.Errors.Render["lease_weight"])
	}
	form := contract.RequestForms[p.kind.Request]
	return []string{*holder, form.Option.Word, strconv.FormatUint(cost, 10)}, nil
}

func buildTake(key string, p Policy, most uint64) ([]string, error) {
	if p.Kind() != "token_bucket" {
		return nil, usage("partial grants are taken from token buckets")
	}
	if most < 1 {
		return nil, usage("take at least one token (max >= 1)")
	}
	return call("take", map[string]string{"key": key, "p1": p.params[0], "p2": p.params[1], "max": strconv.FormatUint(most, 10)}), nil
}

func buildRefund(key string, p Policy, units uint64) ([]string, error) {
	if !p.Valid() {
		return nil, usage("limit %q has no policy", key)
	}
	if !p.kind.Refunds {
		return nil, usage("a %s takes no refunds", p.kind.Name)
	}
	return call("refund", map[string]string{"group": p.kind.Group, "key": key, "p1": p.params[0], "p2": p.params[1],
		"units": strconv.FormatUint(units, 10)}), nil
}

func buildInspect(key string, p *Policy) []string {
	if p == nil || !p.Valid() {
		return call("inspect", map[string]string{"key": key})
	}
	return call("inspect_peek", map[string]string{"key": key, "p1": p.params[0], "p2": p.params[1]})
}

func buildRelease(key, holder string) []string {
	return call("release", map[string]string{"key": key, "id": holder})
}

func buildRenew(key string, lease time.Duration, holder string) []string {
	return call("renew", map[string]string{"key": key, "lease": secondsText(uint64(lease / time.Millisecond)), "id": holder})
}

// waitText is a max_wait as the commands take it: whole ms, rounded down (never past max_wait).
func waitText(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	return secondsText(uint64(d / time.Millisecond))
}

// buildReserve reserves the token buckets among limits within maxWait while the others decide
// now; nil when none reserves (then it is a check).
func buildReserve(limits []Limit, maxWait time.Duration) ([]string, error) {
	reserving := false
	for _, l := range limits {
		reserving = reserving || l.Policy.Kind() == "token_bucket"
	}
	if !reserving {
		return nil, nil
	}
	wait := waitText(maxWait)
	reserve := kindOf("reservation")
	if len(limits) == 1 {
		l := limits[0]
		return []string{reserve.Command, l.Key, l.Policy.params[0], l.Policy.params[1], strconv.FormatUint(l.Cost, 10), wait}, nil
	}
	out := []string{commandWithGroups()}
	for _, l := range limits {
		if l.Policy.Kind() == "token_bucket" {
			out = append(out, l.Key, reserve.Group, l.Policy.params[0], l.Policy.params[1], strconv.FormatUint(l.Cost, 10), wait)
			continue
		}
		one, err := buildDecide([]Limit{l})
		if err != nil {
			return nil, err
		}
		out = append(out, l.Key, l.Policy.kind.Group)
		out = append(out, one[2:]...)
	}
	return out, nil
}

func buildBatch(key string, p Policy, least, most uint64, maxWait time.Duration) ([]string, error) {
	if p.Kind() != "token_bucket" {
		return nil, usage("batches are reserved from token buckets")
	}
	if least < 1 || most < least {
		return nil, usage("a batch takes at least one token, and max >= min")
	}
	return call("reserve_upto", map[string]string{"key": key, "p1": p.params[0], "p2": p.params[1],
		"min": strconv.FormatUint(least, 10), "max_wait": waitText(maxWait), "max": strconv.FormatUint(most, 10)}), nil
}

var (
	runID = func() string {
		var b [8]byte
		_, _ = rand.Read(b[:])
		return hex.EncodeToString(b[:])
	}()
	seq atomic.Uint64
	// requestID is a request id unique to this process run and call, for RL.SLIDE (a variable:
	// the contract's vectors write it {request_id}).
	requestID = func() string { return runID + "-" + strconv.FormatUint(seq.Add(1), 16) }
)

// libraryCall is a library function's call: its name, keys and other arguments.
type libraryCall struct {
	function string
	keys     []string
	args     []string
}

// callOf is the library's form of a module command; ok false for a command the library lacks.
func callOf(cmd []string) (libraryCall, bool) {
	if len(cmd) == 0 {
		return libraryCall{}, false
	}
	name := strings.ToUpper(cmd[0])
	fn, ok := functionOf[name]
	if !ok {
		return libraryCall{}, false
	}
	rest := cmd[1:]
	positions := keyPositions(name, rest)
	if len(positions) == 1 && positions[0] == 0 {
		return libraryCall{fn, rest[:1], rest[1:]}, true
	}
	at := make(map[int]bool, len(positions))
	for _, p := range positions {
		at[p] = true
	}
	c := libraryCall{function: fn}
	for i, w := range rest {
		if at[i] {
			c.keys = append(c.keys, w)
		} else {
			c.args = append(c.args, w)
		}
	}
	return c, true
}

func (c libraryCall) with(head ...string) []any {
	out := make([]any, 0, len(head)+1+len(c.keys)+len(c.args))
	for _, h := range head {
		out = append(out, h)
	}
	out = append(out, strconv.Itoa(len(c.keys)))
	for _, k := range c.keys {
		out = append(out, k)
	}
	for _, a := range c.args {
		out = append(out, a)
	}
	return out
}

func (c libraryCall) fcall() []any   { return c.with("FCALL", c.function) }
func (c libraryCall) evalsha() []any { return c.with("EVALSHA", scripts[c.function].sha) }
func (c libraryCall) eval() []any    { return c.with("EVAL", scripts[c.function].code) }

// routeOf is the first key of a module command (what routes it in a cluster); "" without keys.
func routeOf(cmd []string) string {
	if len(cmd) < 2 {
		return ""
	}
	pos := keyPositions(cmd[0], cmd[1:])
	if len(pos) == 0 {
		return ""
	}
	return cmd[1+pos[0]]
}

package ratelimit

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Engine is what computes the limiters on the server.
type Engine int

const (
	// Auto: the module when the server answers its commands, else the library through FCALL
	// (loaded with FUNCTION LOAD where this user may), else the EVALSHA scripts; found by the
	// first call (the contract's engine machine), and again after an outage (a failover may land
	// on another server). As what Engine() reports: no call has decided yet.
	Auto Engine = iota
	// Module: the ratelimit module's native RL.* commands.
	Module
	// Functions: the Lua library through FCALL (Redis 7+, Valkey).
	Functions
	// Scripts: the Lua library's EVALSHA scripts (Redis 6.2, users without FUNCTION).
	Scripts
)

// String is what the contract's engine states report: "not yet known" for Auto (no call has
// decided yet), else the engine's name.
func (e Engine) String() string {
	for name, en := range stateEngine {
		if en == e {
			return contract.Engines.States[stateIndex(name)].Reports
		}
	}
	return fmt.Sprintf("Engine(%d)", int(e))
}

type script struct{ code, sha string }

// scripts are the EVALSHA scripts of the library's functions: generated files (the repository's
// lua/scripts/<function>.lua, at the contract's library.evalsha.scripts), embedded and sent as they are.
var scripts = map[string]script{}

// ScriptSource is the EVALSHA script of the library function fn (rl_token, ...).
func ScriptSource(fn string) string { return scripts[fn].code }

// ScriptSHA1 is the SHA-1 EVALSHA names the script of fn by.
func ScriptSHA1(fn string) string { return scripts[fn].sha }

func readScripts() {
	for _, f := range contract.Library.Functions {
		name := strings.ReplaceAll(contract.Library.Evalsha.Scripts, "{function}", f.Name)
		code, err := scriptFiles.ReadFile(strings.TrimPrefix(name, "lua/"))
		if err != nil {
			panic(fmt.Sprintf("redis-ratelimit: the embedded EVALSHA script of %s is missing: %v", f.Name, err))
		}
		sum := sha1.Sum(code)
		scripts[f.Name] = script{code: string(code), sha: hex.EncodeToString(sum[:])}
	}
}

// engine sends a limiter's calls as the engine machine says (the contract's `engines`) and
// loads the library at most once per node at a time.
type engine struct {
	wanted   Engine
	m        *machine
	deadline time.Duration // a library load's, whoever waits for it
	mu       sync.Mutex
	why      string
	inUse    atomic.Int32 // the state of the last decided call (named in outage lines)
	loads    libraryLoads
}

// wantedName is the contract's name of an Engine asked for; stateEngine the Engine of a state.
var (
	wantedName  = map[Engine]string{Auto: "auto", Module: "module", Functions: "fcall", Scripts: "evalsha"}
	stateEngine = map[string]Engine{"unknown": Auto, "module": Module, "fcall": Functions, "evalsha": Scripts}
)

func newEngine(wanted Engine, deadline time.Duration) *engine {
	e := &engine{wanted: wanted, m: newMachine(wantedName[wanted]), deadline: deadline}
	e.inUse.Store(e.m.state.Load())
	return e
}

// get is the engine the machine is in now (Auto: not yet known).
func (e *engine) get() Engine { return stateEngine[e.m.stateName()] }

// used is the engine of the last call Redis decided (what outage lines name).
func (e *engine) used() Engine {
	return stateEngine[contract.Engines.States[e.inUse.Load()].Name]
}

func (e *engine) describe() (Engine, string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.get()
	switch {
	case e.wanted != Auto:
		return now, "asked for"
	case now == Auto:
		return now, "no call has decided yet"
	case e.why == "":
		return now, "the module answered"
	}
	return now, e.why
}

// replyError is the error reply Redis answered with, if err is one.
func replyError(err error) (string, bool) {
	var re redis.Error
	if errors.As(err, &re) && !errors.Is(err, redis.Nil) {
		return re.Error(), true
	}
	return "", false
}

// refusal says why a step moved the machine on (what Verify reports).
func refusal(s step) string {
	noperm := s.answer == "noperm"
	switch s.sent {
	case "module":
		if noperm {
			return "the module's commands refused to this user (NOPERM)"
		}
		return "module not loaded"
	case "fcall", "function_load":
		if noperm {
			return "FCALL or FUNCTION LOAD refused to this user (NOPERM)"
		}
		if s.answer == "unknown_command" {
			return "FCALL unknown to this server"
		}
		return "FUNCTION LOAD failed"
	}
	return s.sent + " answered " + s.answer
}

func moduleArgs(cmd []string) []any {
	out := make([]any, len(cmd))
	for i, w := range cmd {
		out[i] = w
	}
	return out
}

func do(ctx context.Context, c redis.UniversalClient, args []any) (any, error) {
	v, err := c.Do(ctx, args...).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	return v, err
}

// pipelined is a command a pipeline already sent for a call, and what came back.
type pipelined struct {
	what  string // the machine's name of it: module, fcall or evalsha
	v     any
	err   error
	loads uint64 // libraryLoads.count before it was sent
}

// errGaveUp: the machine ended a call as misconfigured (no engine works as configured).
var errGaveUp = errors.New("no engine answers for this user on this server")

// run sends cmd (a module command) as the machine says until it ends: the reply, or the error
// of the last command (done:misconfigured: a *CallError of class misconfigured). pre is the
// first command when a pipeline sent it already.
func (e *engine) run(ctx context.Context, c redis.UniversalClient, cmd []string, pre *pipelined) (any, error) {
	call, isLibrary := callOf(cmd)
	if !isLibrary { // a command the library lacks: the module's, whatever the engine
		if pre != nil {
			return pre.v, pre.err
		}
		return do(ctx, c, moduleArgs(cmd))
	}
	route := routeOf(cmd)
	var v any
	var err error
	var loadsSeen uint64
	first := ""
	send := func(what string) string {
		if pre != nil {
			v, err, loadsSeen, pre = pre.v, pre.err, pre.loads, nil
			return answerOf(err)
		}
		switch what {
		case "module":
			v, err = do(ctx, c, moduleArgs(cmd))
		case "fcall":
			loadsSeen = e.loads.count.Load()
			v, err = do(ctx, c, call.fcall())
		case "function_load":
			v, err = nil, e.loadOnce(ctx, c, route, loadsSeen)
		case "evalsha":
			v, err = do(ctx, c, call.evalsha())
		case "eval":
			v, err = do(ctx, c, call.eval())
		}
		if err != nil && errors.Is(ctx.Err(), context.Canceled) {
			return "" // the caller went away: not an answer
		}
		return answerOf(err)
	}
	if pre != nil {
		first = pre.what
	}
	outcome, steps := e.m.run(first, send)
	switch outcome {
	case "decided":
		e.inUse.Store(e.m.state.Load())
		if e.wanted == Auto && len(steps) > 1 {
			var reasons []string
			for _, s := range steps {
				if s.answer == "unknown_command" || s.answer == "noperm" || (s.sent == "function_load" && s.answer == answerError) {
					reasons = append(reasons, refusal(s))
				}
			}
			if len(reasons) > 0 {
				e.mu.Lock()
				e.why = strings.Join(append(reasons, "using "+e.get().String()), "; ")
				e.mu.Unlock()
			}
		}
		return v, nil
	case "misconfigured":
		last := steps[len(steps)-1]
		why := errGaveUp
		if err == nil {
			err = fmt.Errorf("%d commands sent (%s answered %s)", len(steps), last.sent, last.answer)
		}
		return nil, &CallError{Cause: ErrConfiguration, Class: ClassMisconfigured, Err: fmt.Errorf("%w: %w", why, err), logCause: "no engine answers"}
	}
	return v, err // outage or error: classified by the limiter
}

// libraryLoads: at most one FUNCTION LOAD per node at a time. A call that finds the library
// missing while a load is in flight on its node waits for it; one whose FCALL was sent before a
// load there ended sends its FCALL again without loading.
type libraryLoads struct {
	mu    sync.Mutex
	nodes map[string]*nodeLoad
	count atomic.Uint64 // loads ended well, on any node
}

type nodeLoad struct {
	done   uint64 // the count when the last load here ended well
	flight *loadFlight
}

type loadFlight struct {
	over chan struct{}
	err  error
}

// loadOnce: the library on the node of route, loaded since seen (a load count read before the
// call's FCALL) or now.
func (e *engine) loadOnce(ctx context.Context, c redis.UniversalClient, route string, seen uint64) error {
	node, addr, err := nodeOf(ctx, c, route)
	if err != nil {
		return err
	}
	ls := &e.loads
	ls.mu.Lock()
	if ls.nodes == nil {
		ls.nodes = map[string]*nodeLoad{}
	}
	n := ls.nodes[addr]
	if n == nil {
		n = &nodeLoad{}
		ls.nodes[addr] = n
	}
	if n.done > seen { // loaded there since this call's FCALL went out
		ls.mu.Unlock()
		return nil
	}
	if f := n.flight; f != nil {
		ls.mu.Unlock()
		select {
		case <-f.over:
			return f.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f := &loadFlight{over: make(chan struct{})}
	n.flight = f
	ls.mu.Unlock()
	// The load is every waiter's: it runs to its own deadline, whoever started it gives up.
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.deadline)
	f.err = node.Do(lctx, "FUNCTION", "LOAD", "REPLACE", librarySource).Err()
	cancel()
	ls.mu.Lock()
	n.flight = nil
	if f.err == nil {
		n.done = ls.count.Add(1)
	}
	ls.mu.Unlock()
	close(f.over)
	return f.err
}

// nodeOf is the node that serves route (a cluster's primary for that key), or the server, and its
// address.
func nodeOf(ctx context.Context, c redis.UniversalClient, route string) (redis.UniversalClient, string, error) {
	if cc, ok := c.(*redis.ClusterClient); ok && route != "" {
		n, err := cc.MasterForKey(ctx, route)
		if err != nil {
			return nil, "", err
		}
		return n, n.Options().Addr, nil
	}
	return c, "", nil
}

// LoadLibrary loads the Lua library (FUNCTION LOAD REPLACE) on the server, or on every primary
// of a cluster. The limiter loads it by itself where a call finds it missing; this is for
// deployments that load it ahead of time.
func LoadLibrary(ctx context.Context, c redis.UniversalClient) error {
	if cc, ok := c.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			return n.Do(ctx, "FUNCTION", "LOAD", "REPLACE", librarySource).Err()
		})
	}
	return c.Do(ctx, "FUNCTION", "LOAD", "REPLACE", librarySource).Err()
}

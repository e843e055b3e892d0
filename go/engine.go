package ratelimit

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Engine is what computes the limiters on the server.
type Engine int

const (
	// Auto: the module when the server answers its commands, else the library through FCALL
	// (loaded with FUNCTION LOAD where this user may), else the EVALSHA scripts; chosen on the
	// first call, and again after an outage (a failover may land on another server).
	Auto Engine = iota
	// Module: the ratelimit module's native RL.* commands.
	Module
	// Functions: the Lua library through FCALL (Redis 7+, Valkey).
	Functions
	// Scripts: the Lua library's EVALSHA scripts (Redis 6.2, users without FUNCTION).
	Scripts
)

func (e Engine) String() string {
	switch e {
	case Module:
		return "the ratelimit module"
	case Functions:
		return "the Lua library through FCALL"
	case Scripts:
		return "the Lua library through EVALSHA scripts"
	}
	return "not chosen yet"
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

// engine is the engine a limiter asked for, the one it uses, and why.
type engine struct {
	wanted Engine
	mu     sync.Mutex
	chosen Engine
	why    string
	load   sync.Mutex // one load at a time
}

func newEngine(wanted Engine) *engine {
	e := &engine{wanted: wanted, chosen: wanted}
	if wanted == Auto {
		e.chosen = Module
	}
	return e
}

func (e *engine) get() Engine {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.chosen
}

func (e *engine) choose(c Engine, why string) {
	e.mu.Lock()
	e.chosen, e.why = c, why
	e.mu.Unlock()
}

func (e *engine) describe() (Engine, string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.wanted != Auto {
		return e.chosen, "asked for"
	}
	if e.why == "" {
		return e.chosen, "the module answered"
	}
	return e.chosen, e.why
}

// forget chooses anew on the next call (after an outage: a failover may land on another server).
func (e *engine) forget() {
	if e.wanted == Auto {
		e.choose(Module, "")
	}
}

// replyError is the error reply Redis answered with, if err is one.
func replyError(err error) (string, bool) {
	var re redis.Error
	if errors.As(err, &re) && !errors.Is(err, redis.Nil) {
		return re.Error(), true
	}
	return "", false
}

// refuses: an error reply saying this engine cannot work for this user here.
func refuses(err error) bool {
	text, ok := replyError(err)
	return ok && (strings.Contains(text, "unknown command") || strings.HasPrefix(text, "NOPERM"))
}

// missing: NOSCRIPT or "Function not found": the library or the script is not on this node; the
// call never ran.
func missing(err error) bool {
	text, ok := replyError(err)
	return ok && (strings.HasPrefix(text, "NOSCRIPT") || strings.Contains(strings.ToLower(text), "function not found"))
}

func refusal(e Engine, err error) string {
	text, _ := replyError(err)
	noperm := strings.HasPrefix(text, "NOPERM")
	if e == Functions {
		if noperm {
			return "FCALL or FUNCTION LOAD refused to this user (NOPERM)"
		}
		return "FCALL unknown to this server"
	}
	if noperm {
		return "the module's commands refused to this user (NOPERM)"
	}
	return "module not loaded"
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

// run sends cmd (a module command) as the engine in use takes it; under Auto, moves to the next
// engine where the server refuses one. A call answered NOSCRIPT or "Function not found" loads
// the library or the script on the node that answered and is sent again, once.
func (e *engine) run(ctx context.Context, c redis.UniversalClient, cmd []string) (any, error) {
	auto := e.wanted == Auto
	var reasons []string
	askedAgain := !auto
	call, isLibrary := callOf(cmd)
	if e.get() == Module {
		v, err := do(ctx, c, moduleArgs(cmd))
		if err == nil || !(auto && refuses(err)) || !isLibrary {
			return v, err
		}
		reasons = append(reasons, refusal(Module, err))
		askedAgain = true
		e.mu.Lock()
		e.chosen = Functions
		e.mu.Unlock()
	}
	if !isLibrary {
		return do(ctx, c, moduleArgs(cmd))
	}
	route := routeOf(cmd)
	for {
		eng := e.get()
		var args []any
		switch eng {
		case Functions:
			args = call.fcall()
		case Scripts:
			args = call.evalsha()
		default:
			args = moduleArgs(cmd)
		}
		v, err := do(ctx, c, args)
		if err != nil && eng != Module && missing(err) {
			if !askedAgain {
				// A server without the library may be another kind of server: the module first, once.
				askedAgain = true
				reasons = nil
				e.choose(Module, "")
				continue
			}
			v, err = e.loadAndSend(ctx, c, eng, call, route)
		}
		if err != nil {
			if ctx.Err() != nil || !(auto && eng != Scripts && refuses(err)) {
				return v, err
			}
			reasons = append(reasons, refusal(eng, err))
			next := Scripts
			if eng == Module {
				next = Functions
			}
			e.mu.Lock()
			e.chosen = next
			e.mu.Unlock()
			continue
		}
		if len(reasons) > 0 {
			reasons = append(reasons, "using "+eng.String())
			e.choose(eng, strings.Join(reasons, "; "))
		}
		return v, nil
	}
}

// loadAndSend: call where the node answered that it has neither the library nor the script: EVAL
// (which caches the script), or FUNCTION LOAD REPLACE on that node and FCALL again.
func (e *engine) loadAndSend(ctx context.Context, c redis.UniversalClient, eng Engine, call libraryCall, route string) (any, error) {
	if eng == Scripts {
		return do(ctx, c, call.eval())
	}
	e.load.Lock()
	err := loadLibrary(ctx, c, route)
	e.load.Unlock()
	if err != nil {
		return nil, err
	}
	return do(ctx, c, call.fcall())
}

// loadLibrary loads the library on the node of route (a cluster's primary for that key), or on
// the server.
func loadLibrary(ctx context.Context, c redis.UniversalClient, route string) error {
	node := c
	if cc, ok := c.(*redis.ClusterClient); ok && route != "" {
		n, err := cc.MasterForKey(ctx, route)
		if err != nil {
			return err
		}
		node = n
	}
	return node.Do(ctx, "FUNCTION", "LOAD", "REPLACE", librarySource).Err()
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

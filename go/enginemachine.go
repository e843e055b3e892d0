package ratelimit

import (
	"fmt"
	"strings"
	"sync/atomic"
)

// The engine machine (the contract's `engines`, docs/errors.md): how a call finds the engine that
// answers. This file interprets the table; it restates none of its rules.

type enginesDecl struct {
	States []struct {
		Name    string `json:"name"`
		Sends   string `json:"sends"`
		Reports string `json:"reports"`
	} `json:"states"`
	Start   map[string]string `json:"start"`
	Answers []struct {
		codeRule
		Answer string `json:"answer"`
	} `json:"answers"`
	MaxSends    int          `json:"max_sends"`
	Transitions []transition `json:"transitions"`
}

type transition struct {
	Sent    []string `json:"sent"`
	Answers []string `json:"answers"`
	Wanted  []string `json:"wanted"`
	Next    string   `json:"next"` // a state, "same" or "start"
	Then    string   `json:"then"` // send:<what> or done:<outcome>
}

// The answers the table names besides its `answers` rules.
const (
	answerOK     = "ok"
	answerOutage = "outage"
	answerError  = "error"
)

// answerOf is what the machine reads in a command's outcome: ok for a reply that is not an error,
// the first of the contract's answers whose code and start match, outage for what the replies
// rules class as outage (no reply included), else error.
func answerOf(err error) string {
	if err == nil {
		return answerOK
	}
	if text, ok := replyError(err); ok {
		code, rest := splitReply(text)
		for _, a := range contract.Engines.Answers {
			if a.matches(code, rest) {
				return a.Answer
			}
		}
	}
	if classOf(err) == ClassOutage {
		return answerOutage
	}
	return answerError
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// machine is one limiter's engine state and the table's transitions for the engine it wants.
type machine struct {
	wanted string
	state  atomic.Int32 // index in contract.Engines.States
	// moves: (sent, answer) -> the first transition of the table that matches them and wanted.
	moves map[[2]string]*transition
}

func stateIndex(name string) int32 {
	for i, s := range contract.Engines.States {
		if s.Name == name {
			return int32(i)
		}
	}
	panic("redis-ratelimit: the contract's engines have no state " + name)
}

func newMachine(wanted string) *machine {
	m := &machine{wanted: wanted, moves: map[[2]string]*transition{}}
	if _, ok := contract.Engines.Start[wanted]; !ok {
		panic("redis-ratelimit: the contract's engines do not start " + wanted)
	}
	m.state.Store(stateIndex(contract.Engines.Start[wanted]))
	for i := range contract.Engines.Transitions {
		t := &contract.Engines.Transitions[i]
		if !contains(t.Wanted, wanted) {
			continue
		}
		for _, s := range t.Sent {
			for _, a := range t.Answers {
				if _, seen := m.moves[[2]string{s, a}]; !seen {
					m.moves[[2]string{s, a}] = t
				}
			}
		}
	}
	return m
}

// stateName is the state now; reports what Engine() says of it.
func (m *machine) stateName() string { return contract.Engines.States[m.state.Load()].Name }
func (m *machine) reports() string   { return contract.Engines.States[m.state.Load()].Reports }

// sends is what a call sends first in the state now.
func (m *machine) sends() string { return contract.Engines.States[m.state.Load()].Sends }

// step is one command of a call and its answer.
type step struct{ sent, answer string }

// run drives one call: send sends a command ("module", "fcall", "function_load", "evalsha",
// "eval") and says its answer ("" when the caller gave up: the machine stays); first, when not "", is the command already sent (a pipeline's).
// It returns the call's outcome (decided, outage, misconfigured, error) and its steps.
func (m *machine) run(first string, send func(sent string) string) (string, []step) {
	sent := first
	if sent == "" {
		sent = m.sends()
	}
	var steps []step
	for {
		if len(steps) == contract.Engines.MaxSends {
			return "misconfigured", steps
		}
		answer := send(sent)
		if answer == "" { // the caller gave up: no answer to move the machine by
			return "abandoned", steps
		}
		steps = append(steps, step{sent, answer})
		t := m.moves[[2]string{sent, answer}]
		if t == nil {
			panic(fmt.Sprintf("redis-ratelimit: the contract's engines have no transition for %s answered %s (wanted %s)", sent, answer, m.wanted))
		}
		switch t.Next {
		case "same":
		case "start":
			m.state.Store(stateIndex(contract.Engines.Start[m.wanted]))
		default:
			m.state.Store(stateIndex(t.Next))
		}
		kind, what, _ := strings.Cut(t.Then, ":")
		if kind == "done" {
			return what, steps
		}
		sent = what
	}
}

package ratelimit

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis-ratelimit/redis-ratelimit/go/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// contract/vectors/errors.json over a real socket: a TCP server on loopback answers every limiter
// command with a case's RESP2 bytes (its RESP3 bytes to a connection that said HELLO 3), or fails
// the way its transport says (no answer, a reset, a closed connection; refused: a port nothing
// listens on). go-redis reads them with its own parser, on Protocol 2 and 3, and the real Limiter
// does what it does with them: the case's class, decision or usage error, breaker effect, log
// and counter. The mirror of node/test/replies-wire.test.ts.

type errorsInput struct {
	Reply, Resp2, Resp3, Transport, Failure string
	Call                                    struct {
		Key    string     `json:"key"`
		Cost   uint64     `json:"cost"`
		Method string     `json:"method"`
		Policy policySpec `json:"policy"`
	}
}

type errorsOutput struct {
	Class    Class `json:"class"`
	Decision *struct {
		Allowed, Degraded bool
	} `json:"decision"`
	Raise   *UsageError `json:"raise"`
	Breaker string      `json:"breaker"`
	Log     string      `json:"log"`
	Counter string      `json:"counter"`
}

// wireServer answers each connection as the case its client is named after (go-redis sends
// Options.ClientName in HELLO's SETNAME): one listener for every case of both protocols.
type wireServer struct {
	ln    net.Listener
	cases []errorsInput

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	said  map[string]string // client name -> the protocol its last HELLO asked for
	wg    sync.WaitGroup
}

func startWireServer(t *testing.T, cases []errorsInput) *wireServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	s := &wireServer{ln: ln, cases: cases, conns: map[net.Conn]struct{}{}, said: map[string]string{}}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns[c] = struct{}{}
			s.mu.Unlock()
			s.wg.Add(1)
			go s.serve(c)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		s.mu.Lock()
		for c := range s.conns {
			_ = c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

// isLimiterCommand: a command a limiter sends for a decision (the module's, the library's).
func isLimiterCommand(name string) bool {
	switch name {
	case "FCALL", "FCALL_RO", "EVALSHA", "EVALSHA_RO", "EVAL", "EVAL_RO":
		return true
	}
	return strings.HasPrefix(name, "RL.")
}

func (s *wireServer) serve(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		_ = c.Close()
	}()
	r := bufio.NewReader(c)
	var in *errorsInput // the case this connection's client is named after
	resp3 := false
	for {
		cmd, err := readCommand(r)
		if err != nil {
			return
		}
		var answer string
		switch name := strings.ToUpper(cmd[0]); {
		case name == "HELLO":
			resp3 = len(cmd) > 1 && cmd[1] == "3"
			for i := 2; i+1 < len(cmd); i++ {
				if strings.EqualFold(cmd[i], "setname") {
					var n int
					if _, err := fmt.Sscanf(cmd[i+1], "case-%d-", &n); err == nil && n < len(s.cases) {
						in = &s.cases[n]
					}
					s.mu.Lock()
					s.said[cmd[i+1]] = cmd[1]
					s.mu.Unlock()
				}
			}
			answer = "*2\r\n$5\r\nproto\r\n:2\r\n"
			if resp3 {
				answer = "%1\r\n+proto\r\n:3\r\n"
			}
		case name == "PING":
			answer = "+PONG\r\n"
		case !isLimiterCommand(name): // CLIENT SETNAME, CLIENT SETINFO, ...
			answer = "+OK\r\n"
		case in == nil:
			answer = "-ERR the test server: a connection that named no case\r\n"
		case in.Transport == "reset":
			_ = c.(*net.TCPConn).SetLinger(0) // the close sends RST
			return
		case in.Transport == "closed":
			return
		case in.Transport == "timeout":
			continue // never answers
		case resp3:
			answer = in.Resp3
		default:
			answer = in.Resp2
		}
		if _, err := io.WriteString(c, answer); err != nil {
			return
		}
	}
}

// readCommand reads one command as clients send them: an array of bulk strings.
func readCommand(r *bufio.Reader) ([]string, error) {
	line := func() (string, error) {
		s, err := r.ReadString('\n')
		return strings.TrimSuffix(s, "\r\n"), err
	}
	head, err := line()
	if err != nil {
		return nil, err
	}
	n, err := strconv.Atoi(strings.TrimPrefix(head, "*"))
	if !strings.HasPrefix(head, "*") || err != nil || n < 1 {
		return nil, fmt.Errorf("not a command: %q", head)
	}
	args := make([]string, n)
	for i := range args {
		l, err := line()
		if err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(strings.TrimPrefix(l, "$"))
		if err != nil {
			return nil, fmt.Errorf("not a bulk string: %q", l)
		}
		buf := make([]byte, size+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		args[i] = string(buf[:size])
	}
	return args, nil
}

// logLevels counts the records a limiter logs, by level.
type logLevels struct {
	mu sync.Mutex
	n  map[slog.Level]int
}

func (h *logLevels) Enabled(context.Context, slog.Level) bool { return true }
func (h *logLevels) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n[r.Level]++
	return nil
}
func (h *logLevels) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logLevels) WithGroup(string) slog.Handler      { return h }
func (h *logLevels) count(l slog.Level) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[l]
}

func TestVectorsErrors(t *testing.T) {
	raw := vectorCases(t, "errors.json")
	ins := make([]errorsInput, len(raw))
	outs := make([]errorsOutput, len(raw))
	classes := map[Class]bool{}
	for i, c := range raw {
		must(t, json.Unmarshal(c.Input, &ins[i]))
		must(t, json.Unmarshal(c.Output, &outs[i]))
		classes[outs[i].Class] = true
	}
	for _, class := range contract.Replies.Classes {
		if !classes[class.Name] {
			t.Errorf("errors.json has no case of the class %s", class.Name)
		}
	}
	srv := startWireServer(t, ins)
	refused := fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t))
	for _, protocol := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", protocol), func(t *testing.T) {
			t.Parallel()
			for i := range ins {
				t.Run(fmt.Sprint(i), func(t *testing.T) {
					runErrorsCase(t, srv, refused, protocol, i, ins[i], outs[i])
				})
			}
		})
	}
}

// breakerFailures: the case's call comes after breakerFailures-1 failures in a row.
const breakerFailures = 3

func runErrorsCase(t *testing.T, srv *wireServer, refused string, protocol, i int, in errorsInput, out errorsOutput) {
	what := in.Reply + in.Transport + " (fail " + in.Failure + ")"
	name := fmt.Sprintf("case-%d-resp%d", i, protocol)
	addr := srv.ln.Addr().String()
	if in.Transport == "refused" {
		addr = refused
	}
	// As the README recommends; go-redis' retries (of LOADING, READONLY, a closed connection, a
	// refused dial, ...: the server answers each the same) without pauses.
	client := redis.NewClient(&redis.Options{Addr: addr, Protocol: protocol, ClientName: name,
		ContextTimeoutEnabled: true, MinRetryBackoff: -1, DialerRetries: 1})
	defer client.Close()
	deadline := 10 * time.Second // not about deadlines
	if in.Transport == "timeout" {
		deadline = 100 * time.Millisecond
	}
	policy, err := in.Call.Policy.build()
	must(t, err)
	failure := map[string]FailurePolicy{"open": FailOpen(), "closed": FailClosed()}[in.Failure]
	limiter := func(log slog.Handler) *Limiter {
		l, err := New(client, Options{Failure: failure, Engine: Module, Deadline: deadline,
			BreakerFailures: breakerFailures, Logger: slog.New(log)})
		must(t, err)
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	ctx := context.Background()

	// The class: what CheckAllStrict returns, a *CallError of the class or the *UsageError.
	strict := limiter(&logLevels{n: map[slog.Level]int{}})
	_, err = strict.CheckAllStrict(ctx, Limit{Key: in.Call.Key, Policy: policy, Cost: in.Call.Cost})
	var ce *CallError
	var u *UsageError
	if out.Raise != nil {
		if !errors.As(err, &u) || !errors.Is(err, ErrUsage) || u.Code != out.Raise.Code || u.Message != out.Raise.Message {
			t.Fatalf("%s: got %v, want the usage error %+v", what, err, out.Raise)
		}
	} else {
		if !errors.As(err, &ce) || ce.Class != out.Class {
			t.Fatalf("%s: got %#v, want a *CallError of the class %s", what, err, out.Class)
		}
		cause := map[Class]error{ClassOutage: ErrServer, ClassMisconfigured: ErrConfiguration, ClassConflict: ErrConflict}[out.Class]
		switch in.Transport {
		case "timeout":
			cause = ErrDeadline
		case "refused", "reset", "closed":
			cause = ErrUnreachable
		}
		if !errors.Is(err, cause) {
			t.Errorf("%s: %v does not match %v", what, err, cause)
		}
	}

	// The outcome through Check, after breakerFailures-1 failures in a row: the decision or the
	// usage error, the breaker, the log and the counter.
	logged := &logLevels{n: map[slog.Level]int{}}
	l := limiter(logged)
	for range breakerFailures - 1 {
		l.breaker.failure()
	}
	d, err := l.Check(ctx, in.Call.Key, policy, in.Call.Cost)
	if out.Raise != nil {
		if !errors.As(err, &u) || !errors.Is(err, ErrUsage) || u.Code != out.Raise.Code || u.Message != out.Raise.Message {
			t.Fatalf("%s: Check returned %v, want the usage error %+v", what, err, out.Raise)
		}
	} else if err != nil || d.Allowed != out.Decision.Allowed || d.Degraded != out.Decision.Degraded {
		t.Fatalf("%s: Check returned %+v, %v; want %+v", what, d, err, *out.Decision)
	}
	switch out.Breaker {
	case "failure": // the last failure of the row opens it
		if n := l.Counts().BreakerOpened; n != 1 {
			t.Errorf("%s: the breaker opened %d times, want once", what, n)
		}
	case "answered": // a success: the row starts again, so one more failure leaves it closed
		l.breaker.failure()
		if n := l.Counts().BreakerOpened; n != 0 || l.BreakerOpen() {
			t.Errorf("%s: the breaker opened (%d) after the answer and one failure", what, n)
		}
	default:
		t.Fatalf("%s: breaker %q", what, out.Breaker)
	}
	warns, errs := logged.count(slog.LevelWarn), logged.count(slog.LevelError)
	want := map[string][2]int{"outage": {1, 0}, "once_per_cause": {0, 1}, "once_per_key": {0, 1}, "none": {0, 0}}[out.Log]
	if [2]int{warns, errs} != want {
		t.Errorf("%s: log %q: %d WARN and %d ERROR lines, want %v", what, out.Log, warns, errs, want)
	}
	c := l.Counts()
	counters := map[string]uint64{"outage": c.Outages, "misconfigured": c.Misconfigurations,
		"conflicts": c.Conflicts, "usage_errors": c.UsageErrors}
	if _, ok := counters[out.Counter]; !ok {
		t.Fatalf("%s: no counter %q here", what, out.Counter)
	}
	for counter, n := range counters {
		if w := map[bool]uint64{true: 1}[counter == out.Counter]; n != w {
			t.Errorf("%s: counter %s = %d, want %d", what, counter, n, w)
		}
	}
	if got := l.Misconfigured(); got != (out.Class == ClassMisconfigured) {
		t.Errorf("%s: Misconfigured() = %v", what, got)
	}
	if in.Transport != "refused" {
		srv.mu.Lock()
		said := srv.said[name]
		srv.mu.Unlock()
		if said != fmt.Sprint(protocol) {
			t.Errorf("%s: the client said HELLO %q, not %d", what, said, protocol)
		}
	}
}

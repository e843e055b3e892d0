// Package redistest starts real redis-server processes on free loopback ports for the tests,
// stopped with t.Cleanup. Never mocks.
package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is one redis-server process.
type Server struct {
	Addr string
	Port int
	cmd  *exec.Cmd
	// exited is closed once the process has exited (its one Wait is the starter's).
	exited chan struct{}
}

// Binary is the redis-server to run (REDIS_SERVER, else redis-server on PATH).
func Binary() string {
	if b := os.Getenv("REDIS_SERVER"); b != "" {
		return b
	}
	return "redis-server"
}

// ModulePath is the built module (RL_MODULE, else target/release/libredis_ratelimit.so of the
// repository this module sits in); "" when there is none.
func ModulePath() string {
	if p := os.Getenv("RL_MODULE"); p != "" {
		return p
	}
	_, file, _, _ := runtime.Caller(0)
	p := filepath.Join(filepath.Dir(file), "..", "..", "..", "target", "release", "libredis_ratelimit.so")
	if abs, err := filepath.Abs(p); err == nil {
		if _, err := os.Stat(abs); err == nil {
			return abs
		}
	}
	return ""
}

// FreePort is a loopback port free now.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Start runs redis-server with args (besides port, no persistence) and waits until it answers.
func Start(t testing.TB, module bool, args ...string) *Server {
	t.Helper()
	return StartBinary(t, Binary(), module, args...)
}

// StartBinary is Start with another redis-server binary (a Redis 6.2 one, say).
func StartBinary(t testing.TB, binary string, module bool, args ...string) *Server {
	t.Helper()
	dir := t.TempDir()
	s, err := startBinary(binary, module, dir, args...)
	if errors.Is(err, ErrUnavailable) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// ErrUnavailable: no redis-server on this machine, or the module is not built.
var ErrUnavailable = errors.New("redistest: unavailable")

func start(module bool, dir string, args ...string) (*Server, error) {
	return startBinary(Binary(), module, dir, args...)
}

func startBinary(binary string, module bool, dir string, args ...string) (*Server, error) {
	if _, err := exec.LookPath(binary); err != nil {
		return nil, fmt.Errorf("%w: no redis-server on this machine", ErrUnavailable)
	}
	all := []string{"--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir}
	if module {
		m := ModulePath()
		if m == "" {
			return nil, fmt.Errorf("%w: the module is not built (target/release/libredis_ratelimit.so; or set RL_MODULE)", ErrUnavailable)
		}
		all = append(all, "--loadmodule", m)
	}
	all = append(all, args...)
	cluster := slices.Contains(args, "--cluster-enabled")
	// testkit's rule (testkit/src/lib.rs): a port chosen free may be taken by another process before
	// the server binds it (for a cluster node, its bus port too): that start is retried on another.
	for attempt := 1; ; attempt++ {
		port, err := freePort(cluster)
		if err != nil {
			return nil, err
		}
		s, log, err := startOn(binary, dir, port, all)
		if err == nil {
			return s, nil
		}
		if attempt < 5 && strings.Contains(log, "already in use") {
			continue
		}
		return nil, fmt.Errorf("redistest: redis-server on port %d did not start: %v; its log:\n%s", port, err, log)
	}
}

// freePort is a loopback port free now; for a cluster node, one whose bus port (port + 10000,
// at most 65535) is free too.
func freePort(cluster bool) (int, error) {
	for {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if !cluster {
			return port, nil
		}
		if port > 55535 {
			continue
		}
		if bus, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port+10000)); err == nil {
			bus.Close()
			return port, nil
		}
	}
}

// startOn starts the server on port and waits until it is ready; else its log and why not.
func startOn(binary, dir string, port int, args []string) (*Server, string, error) {
	logPath := filepath.Join(dir, fmt.Sprintf("server-%d.log", port))
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, "", err
	}
	defer logFile.Close()
	cmd := exec.Command(binary, append([]string{"--port", strconv.Itoa(port)}, args...)...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logFile, logFile // a config error is said on stderr
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	exited := make(chan struct{})
	s := &Server{Addr: fmt.Sprintf("127.0.0.1:%d", port), Port: port, cmd: cmd, exited: exited}
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	err = s.waitReady(20 * time.Second)
	if err == nil {
		return s, "", nil
	}
	s.Stop()
	log, _ := os.ReadFile(logPath)
	return nil, string(log), err
}

// waitReady: testkit's rule. Ready means this child answers (not another server that took the
// port) and has loaded its data: INFO shows its own process_id and loading:0 (INFO is answered
// while an RDB or AOF loads). A child that exits first did not start.
func (s *Server) waitReady(within time.Duration) error {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	pid := fmt.Sprintf("process_id:%d", s.cmd.Process.Pid)
	end := time.Now().Add(within)
	for {
		if info, err := c.Info(context.Background()).Result(); err == nil {
			if hasLine(info, pid) && hasLine(info, "loading:0") {
				return nil
			}
		}
		select {
		case <-s.exited:
			return errors.New("it exited before it answered")
		default:
		}
		if time.Now().After(end) {
			return fmt.Errorf("not ready within %v", within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func hasLine(info, line string) bool {
	for _, l := range strings.Split(info, "\n") {
		if strings.TrimSpace(l) == line {
			return true
		}
	}
	return false
}

// Client is a plain client of the server, closed at cleanup.
func (s *Server) Client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Pause stops the process (SIGSTOP): it holds its connections and answers nothing.
func (s *Server) Pause() { _ = s.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume continues a paused process.
func (s *Server) Resume() { _ = s.cmd.Process.Signal(syscall.SIGCONT) }

// Stop ends the process (resumed first if paused) and waits for it to exit.
func (s *Server) Stop() {
	select {
	case <-s.exited:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT)
	_ = s.cmd.Process.Kill()
	<-s.exited
}

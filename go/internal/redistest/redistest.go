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
	"strconv"
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
	all := []string{"--bind", "127.0.0.1", "--save", "", "--appendonly", "no"}
	if module {
		m := ModulePath()
		if m == "" {
			return nil, fmt.Errorf("%w: the module is not built (target/release/libredis_ratelimit.so; or set RL_MODULE)", ErrUnavailable)
		}
		all = append(all, "--loadmodule", m)
	}
	all = append(all, args...)
	for try := 0; try < 3; try++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		cmd := exec.Command(binary, append([]string{"--port", strconv.Itoa(port)}, all...)...)
		cmd.Dir = dir
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		s := &Server{Addr: fmt.Sprintf("127.0.0.1:%d", port), Port: port, cmd: cmd}
		if s.waitReady() {
			return s, nil
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	return nil, errors.New("redis-server did not start")
}

func (s *Server) waitReady() bool {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer c.Close()
	for i := 0; i < 200; i++ {
		if c.Ping(context.Background()).Err() == nil {
			return true
		}
		time.Sleep(10 * time.Millisecond)
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

// Stop ends the process (resumed first if paused).
func (s *Server) Stop() {
	if s.cmd.ProcessState != nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT)
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}

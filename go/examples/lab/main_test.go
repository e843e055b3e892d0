package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/redis-ratelimit/redis-ratelimit/go/internal/redistest"
)

// The lab on a stock server (the Lua library through FCALL) prints the seed's lines
// (expected.txt). The lab on the module runs in `make demo` (scripts/go.sh demo), which runs it on
// both and holds each output to the same lines, so go test runs it once, not twice per CI run.
func TestLab(t *testing.T) {
	want, err := os.ReadFile("expected.txt")
	if err != nil {
		t.Fatal(err)
	}
	srv := redistest.Start(t, false)
	cmd := exec.Command("go", "run", ".")
	cmd.Env = append(os.Environ(), "REDIS_ADDR="+srv.Addr)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	lines := append(strings.Split(strings.TrimSpace(string(want)), "\n"), "engine: the Lua library through FCALL")
	for _, line := range lines {
		if !strings.Contains(out.String(), line) {
			t.Errorf("no line %q in\n%s", line, out.String())
		}
	}
}

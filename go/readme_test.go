package ratelimit_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis-ratelimit/redis-ratelimit/go/internal/redistest"
)

// The README's quick start, as written, in a fresh module outside the repository that requires
// this one through a replace: nothing depends on the repository's layout.
func TestReadmeQuickStart(t *testing.T) {
	out := runReadmeProgram(t, "<!-- quickstart")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 11 || lines[0] != "true 9 0s" || !strings.HasPrefix(lines[10], "false 0 ") {
		t.Fatalf("quick start printed:\n%s", out)
	}
}

// The README's high-volume example, the same way: 100 checks, most of them local, and Close gives
// the held tokens back: what was held when the program read it, and what a batch taken ahead brought
// while it read the counts (at most one batch, 16), plus what the bucket refilled meanwhile (one a
// second). (CI once saw 1 held and 13 given back, at 100 a second, where this said equal.)
func TestReadmeHighVolume(t *testing.T) {
	out := runReadmeProgram(t, "<!-- highvolume")
	var decisions, local, held, back int
	if _, err := fmt.Sscanf(strings.TrimSpace(out), "%d decisions, %d local; %d tokens held; %d given back",
		&decisions, &local, &held, &back); err != nil || decisions != 100 || local < 80 || back < held || back > held+16+5 {
		t.Fatalf("the high-volume example printed:\n%s", out)
	}
}

// runReadmeProgram runs the Go block after marker in README.md in a fresh module (with a
// module-enabled server at REDIS_ADDR) and returns what it printed.
func runReadmeProgram(t *testing.T, marker string) string {
	readme, err := os.ReadFile("README.md")
	must(t, err)
	_, rest, ok := strings.Cut(string(readme), marker)
	if !ok {
		t.Fatalf("no %s in README.md", marker)
	}
	_, rest, _ = strings.Cut(rest, "```go\n")
	code, _, _ := strings.Cut(rest, "```")
	dir := t.TempDir()
	here, _ := os.Getwd()
	mod := "module readme\n\ngo 1.23\n\nrequire github.com/redis-ratelimit/redis-ratelimit/go v0.0.0\n\n" +
		"replace github.com/redis-ratelimit/redis-ratelimit/go => " + here + "\n"
	must(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(code), 0o644))
	sum, _ := os.ReadFile("go.sum")
	must(t, os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644))
	srv := redistest.Start(t, true)
	tidy := exec.Command("go", "mod", "tidy")
	tidy.Dir = dir
	if out, err := tidy.CombinedOutput(); err != nil {
		t.Fatalf("go mod tidy: %v\n%s", err, out)
	}
	cmd := exec.Command("go", "run", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "REDIS_ADDR="+srv.Addr)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	return out.String()
}

// The README's hold example, the same way: the output tokens' limit after settling 212 of the 1,000
// held (99,788 of 100,000 left).
func TestReadmeHolds(t *testing.T) {
	out := runReadmeProgram(t, "<!-- holds")
	if strings.TrimSpace(out) != "output tokens left: 99788" {
		t.Fatalf("the hold example printed:\n%s", out)
	}
}

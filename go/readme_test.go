package ratelimit_test

import (
	"bytes"
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
	readme, err := os.ReadFile("README.md")
	must(t, err)
	_, rest, ok := strings.Cut(string(readme), "<!-- quickstart")
	if !ok {
		t.Fatal("no quick start in README.md")
	}
	_, rest, _ = strings.Cut(rest, "```go\n")
	code, _, _ := strings.Cut(rest, "```")
	dir := t.TempDir()
	here, _ := os.Getwd()
	mod := "module quickstart\n\ngo 1.23\n\nrequire github.com/redis-ratelimit/redis-ratelimit/go v0.0.0\n\n" +
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
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 11 || lines[0] != "true 9 0s" || !strings.HasPrefix(lines[10], "false 0 ") {
		t.Fatalf("quick start printed:\n%s", out.String())
	}
}

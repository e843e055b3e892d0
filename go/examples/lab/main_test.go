package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/redis-ratelimit/redis-ratelimit/go/internal/redistest"
)

// The lab on the module and on a stock server prints the seed's lines.
func TestLab(t *testing.T) {
	for _, module := range []bool{true, false} {
		srv := redistest.Start(t, module)
		cmd := exec.Command("go", "run", ".")
		cmd.Env = append(os.Environ(), "REDIS_ADDR="+srv.Addr)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("%v\n%s", err, out.String())
		}
		for _, want := range []string{"burst of 12: 10 allowed, 2 denied", "first denial: retry after 200 ms",
			"after 1 s: 5 of 8 allowed", "bob: allowed=true remaining=9", "200 concurrent: 10 allowed",
			"request 1: 200 remaining=9", "request 10: 200 remaining=0", "request 11: 429", "request 12: 429",
			"redis down, fail open: allowed=true degraded=true within deadline=true",
			"redis down, fail closed: allowed=false degraded=true within deadline=true"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("module=%v: no line %q in\n%s", module, want, out.String())
			}
		}
	}
}

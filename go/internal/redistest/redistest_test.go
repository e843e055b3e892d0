package redistest

import (
	"strings"
	"testing"
)

// A server started on a port another server holds exits; the harness does not take the other
// server's answers for its own (it waits for its child's process_id), and says why with the log.
func TestAStartOnATakenPortIsNotReady(t *testing.T) {
	taken := Start(t, false)
	all := []string{"--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir()}
	s, log, err := startOn(Binary(), t.TempDir(), taken.Port, all)
	if err == nil {
		s.Stop()
		t.Fatal("a server on a taken port was counted as started")
	}
	if !strings.Contains(log, "already in use") {
		t.Fatalf("%v; the log does not say the port was taken:\n%s", err, log)
	}
}

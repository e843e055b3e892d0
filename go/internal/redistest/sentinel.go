package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Service is the name the sentinels monitor.
const Service = "rl-primary"

// Sentinels is a primary and a replica (with the module or stock) watched by three sentinels
// (redis-server --sentinel), quorum 2, down after 1 s, as testkit/src/sentinel.rs builds one. All
// processes are stopped at the test's cleanup.
type Sentinels struct {
	// Nodes are the primary and the replica at the start (either may be the primary later).
	Nodes     []*Server
	sentinels []*exec.Cmd
	// Addrs are the sentinels' addresses.
	Addrs []string
}

// StartSentinels starts the topology and waits until every sentinel knows the replica and the
// other sentinels.
func StartSentinels(t testing.TB, module bool) *Sentinels {
	t.Helper()
	primary := Start(t, module, "--repl-diskless-sync-delay", "0")
	replica := Start(t, module, "--repl-diskless-sync-delay", "0", "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port))
	s := &Sentinels{Nodes: []*Server{primary, replica}}
	if err := WaitLinked(replica, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		s.startSentinel(t, primary.Port)
	}
	end := time.Now().Add(15 * time.Second)
	for _, addr := range s.Addrs {
		for {
			info := sentinelInfo(addr, "sentinel")
			if strings.Contains(info, "slaves=1") && strings.Contains(info, "sentinels=3") {
				break
			}
			if time.Now().After(end) {
				t.Fatalf("redistest: sentinel %s does not see the replica and the other sentinels: %s", addr, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return s
}

func (s *Sentinels) startSentinel(t testing.TB, primary int) {
	t.Helper()
	for try := 0; try < 3; try++ {
		dir := t.TempDir()
		port := FreePort(t)
		conf := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor %s 127.0.0.1 %d 2\n"+
			"sentinel down-after-milliseconds %s 1000\nsentinel failover-timeout %s 5000\nsentinel parallel-syncs %s 1\n",
			port, dir, Service, primary, Service, Service, Service)
		path := filepath.Join(dir, "sentinel.conf")
		if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(Binary(), path, "--sentinel")
		cmd.Dir = dir
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() {
			_ = cmd.Wait()
			close(exited)
		}()
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			<-exited
		})
		// Ready by testkit's rule: this child answers (its own process_id), not another process
		// that took the port; one that exits first is started again on another port.
		pid := fmt.Sprintf("process_id:%d", cmd.Process.Pid)
		end := time.Now().Add(10 * time.Second)
		for gone := false; !gone; {
			select {
			case <-exited:
				gone = true
				continue
			default:
			}
			if time.Now().After(end) {
				t.Fatalf("redistest: the sentinel on %s did not answer within 10 s", addr)
			}
			if info := sentinelInfo(addr, "server"); hasLine(info, pid) {
				s.sentinels = append(s.sentinels, cmd)
				s.Addrs = append(s.Addrs, addr)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	t.Fatal("redistest: a sentinel did not start")
}

func sentinelInfo(addr string, section string) string {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	info, _ := c.Info(context.Background(), section).Result()
	return info
}

// PrimaryAddr is the primary the first sentinel names now ("" when it does not answer).
func (s *Sentinels) PrimaryAddr() string {
	c := redis.NewSentinelClient(&redis.Options{Addr: s.Addrs[0], MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	addr, err := c.GetMasterAddrByName(context.Background(), Service).Result()
	if err != nil || len(addr) != 2 {
		return ""
	}
	return addr[0] + ":" + addr[1]
}

// Node is the node listening on addr.
func (s *Sentinels) Node(addr string) *Server {
	for _, n := range s.Nodes {
		if n.Addr == addr {
			return n
		}
	}
	return nil
}

// Failover asks the first sentinel to fail over now (SENTINEL FAILOVER: no agreement needed).
func (s *Sentinels) Failover(ctx context.Context) error {
	c := redis.NewSentinelClient(&redis.Options{Addr: s.Addrs[0]})
	defer c.Close()
	return c.Failover(ctx, Service).Err()
}

// WaitLinked waits until replica says its link to its primary is up.
func WaitLinked(replica *Server, within time.Duration) error {
	c := redis.NewClient(&redis.Options{Addr: replica.Addr, MaxRetries: -1})
	defer c.Close()
	end := time.Now().Add(within)
	for {
		info, _ := c.Info(context.Background(), "replication").Result()
		if strings.Contains(info, "role:slave") && strings.Contains(info, "master_link_status:up") {
			return nil
		}
		if time.Now().After(end) {
			return errors.New("redistest: the replica's link is not up: " + strings.TrimSpace(info))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

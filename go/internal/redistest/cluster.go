package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster of three primaries (no replicas), slots 0-5460, 5461-10922 and
// 10923-16383, built as testkit/src/cluster.rs builds one: --cluster-enabled yes, CLUSTER
// ADDSLOTSRANGE and MEET, then cluster_state:ok on every node. Not tied to one test: start it once
// for a package (TestMain) and Stop it after.
type Cluster struct {
	Nodes []*Server
	dirs  []string
}

// StartCluster starts the three primaries, with the module or stock. Errors matching
// ErrUnavailable mean the machine cannot run one (tests skip).
func StartCluster(module bool) (*Cluster, error) {
	c := &Cluster{}
	ranges := [][2]int{{0, 5460}, {5461, 10922}, {10923, 16383}}
	for range ranges {
		dir, err := os.MkdirTemp("", "rl-cluster-")
		if err != nil {
			c.Stop()
			return nil, err
		}
		c.dirs = append(c.dirs, dir)
		s, err := start(module, dir, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "2000")
		if err != nil {
			c.Stop()
			return nil, err
		}
		c.Nodes = append(c.Nodes, s)
	}
	ctx := context.Background()
	for i, n := range c.Nodes {
		cl := redis.NewClient(&redis.Options{Addr: n.Addr})
		err := cl.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", ranges[i][0], ranges[i][1]).Err()
		if err == nil && i > 0 {
			err = cl.Do(ctx, "CLUSTER", "MEET", "127.0.0.1", c.Nodes[0].Port).Err()
		}
		cl.Close()
		if err != nil {
			c.Stop()
			return nil, fmt.Errorf("redistest: building the cluster: %w", err)
		}
	}
	if err := c.waitHealthy(10 * time.Second); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// waitHealthy: every node says cluster_state:ok and knows the three primaries' slots.
func (c *Cluster) waitHealthy(within time.Duration) error {
	ctx := context.Background()
	end := time.Now().Add(within)
	for _, n := range c.Nodes {
		cl := redis.NewClient(&redis.Options{Addr: n.Addr})
		for {
			info, _ := cl.ClusterInfo(ctx).Result()
			//lint:ignore SA1019 go-redis' ClusterClient reads CLUSTER SLOTS too: this is what it will see
			slots, _ := cl.ClusterSlots(ctx).Result()
			if strings.Contains(info, "cluster_state:ok") && len(slots) == len(c.Nodes) {
				break
			}
			if time.Now().After(end) {
				cl.Close()
				return errors.New("redistest: the cluster is not healthy: " + strings.TrimSpace(info))
			}
			time.Sleep(50 * time.Millisecond)
		}
		cl.Close()
	}
	return nil
}

// Addrs are the nodes' addresses.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.Addr
	}
	return out
}

// Owner is the node serving key's slot.
func (c *Cluster) Owner(ctx context.Context, key string) (*Server, error) {
	cl := redis.NewClient(&redis.Options{Addr: c.Nodes[0].Addr})
	defer cl.Close()
	slot, err := cl.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		return nil, err
	}
	//lint:ignore SA1019 go-redis' ClusterClient reads CLUSTER SLOTS too: this is what it will see
	slots, err := cl.ClusterSlots(ctx).Result()
	if err != nil {
		return nil, err
	}
	for _, r := range slots {
		if int64(r.Start) <= slot && slot <= int64(r.End) {
			for _, n := range c.Nodes {
				if len(r.Nodes) > 0 && r.Nodes[0].Addr == n.Addr {
					return n, nil
				}
			}
		}
	}
	return nil, fmt.Errorf("redistest: no node serves %q", key)
}

// Stop ends the nodes and removes their directories.
func (c *Cluster) Stop() {
	for _, n := range c.Nodes {
		n.Stop()
	}
	for _, d := range c.dirs {
		_ = os.RemoveAll(d)
	}
}

package redistest

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ID returns a Cluster node's id (CLUSTER MYID).
func (s *Server) ID() string {
	s.t.Helper()
	return s.MustDo("CLUSTER", "MYID")
}

// Migration is a slot being moved from one master to another by hand, as
// redis-cli --cluster reshard moves each slot: marked importing on the
// target and migrating on the source, its keys moved with MIGRATE, then
// given to the target. Between BeginMigration and Finish it stays
// migrating for as long as the test likes.
type Migration struct {
	t        testing.TB
	c        *Cluster
	slot     int
	from, to *Server
}

// BeginMigration marks slot importing on to and migrating on from (CLUSTER
// SETSLOT ... IMPORTING, then ... MIGRATING). from must own the slot.
func (c *Cluster) BeginMigration(t testing.TB, slot int, from, to *Server) *Migration {
	t.Helper()
	s := strconv.Itoa(slot)
	to.MustDo("CLUSTER", "SETSLOT", s, "IMPORTING", from.ID())
	from.MustDo("CLUSTER", "SETSLOT", s, "MIGRATING", to.ID())
	return &Migration{t: t, c: c, slot: slot, from: from, to: to}
}

// MoveKeys moves up to n of the slot's keys from the source to the target
// with one MIGRATE (CLUSTER GETKEYSINSLOT picks them) and returns how
// many it moved.
func (m *Migration) MoveKeys(n int) int {
	m.t.Helper()
	out := m.from.MustDo("CLUSTER", "GETKEYSINSLOT", strconv.Itoa(m.slot), strconv.Itoa(n))
	if out == "" {
		return 0
	}
	keys := strings.Split(out, "\n")
	host, port, _ := strings.Cut(m.to.Addr, ":")
	args := append([]string{"MIGRATE", host, port, "", "0", "5000", "KEYS"}, keys...)
	m.from.MustDo(args...)
	return len(keys)
}

// Finish moves the slot's remaining keys, 10 per MIGRATE as redis-cli
// does by default (the source answers no other client while a MIGRATE
// waits for the target), and gives the slot to the target on the target,
// the source and every other master (CLUSTER SETSLOT ... NODE), as
// redis-cli does.
func (m *Migration) Finish() {
	m.t.Helper()
	for m.MoveKeys(10) > 0 {
	}
	id, s := m.to.ID(), strconv.Itoa(m.slot)
	m.to.MustDo("CLUSTER", "SETSLOT", s, "NODE", id)
	m.from.MustDo("CLUSTER", "SETSLOT", s, "NODE", id)
	for _, n := range m.c.Nodes {
		if n != m.from && n != m.to {
			n.MustDo("CLUSTER", "SETSLOT", s, "NODE", id)
		}
	}
}

// Reshard moves slots slots from one master to another with redis-cli
// --cluster reshard and returns its output.
func (c *Cluster) Reshard(t testing.TB, from, to *Server, slots int) string {
	t.Helper()
	out, err := exec.Command("redis-cli", "--cluster", "reshard", from.Addr,
		"--cluster-from", from.ID(), "--cluster-to", to.ID(),
		"--cluster-slots", strconv.Itoa(slots), "--cluster-yes").CombinedOutput()
	if err != nil {
		t.Fatalf("redistest: redis-cli --cluster reshard: %v\n%s", err, out)
	}
	return string(out)
}

// AddMaster starts a node run as the Cluster's are, joins it to the
// Cluster as a master without slots (redis-cli --cluster add-node), waits
// until every master knows it, and adds it to Nodes.
func (c *Cluster) AddMaster(t testing.TB) *Server {
	t.Helper()
	n := startClusterNode(t, c.opts)
	if out, err := exec.Command("redis-cli", "--cluster", "add-node", n.Addr, c.Nodes[0].Addr).CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli --cluster add-node: %v\n%s", err, out)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		known := true
		for _, m := range c.Nodes {
			nodes, err := m.Do("CLUSTER", "NODES")
			known = known && err == nil && strings.Contains(nodes, n.Addr)
		}
		if info, err := n.Do("CLUSTER", "INFO"); known && err == nil && strings.Contains(info, "cluster_state:ok") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: %s not known to every master 30s after add-node", n.Addr)
		}
	}
	c.Nodes = append(c.Nodes, n)
	return n
}

// Rebalance spreads the slots over the masters by weight, those without
// slots included (redis-cli --cluster rebalance --cluster-use-empty-masters),
// and returns redis-cli's output. weights are "node-id=weight" for the
// masters whose weight is not 1.
func (c *Cluster) Rebalance(t testing.TB, weights ...string) string {
	t.Helper()
	args := []string{"--cluster", "rebalance", c.Nodes[0].Addr, "--cluster-use-empty-masters", "--cluster-yes"}
	if len(weights) > 0 {
		args = append(append(args, "--cluster-weight"), weights...)
	}
	out, err := exec.Command("redis-cli", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redistest: redis-cli --cluster rebalance: %v\n%s", err, out)
	}
	return string(out)
}

// Masters returns the Cluster's nodes, replicas included, that are masters
// now (ROLE), as after a failover.
func (c *Cluster) Masters(t testing.TB) []*Server {
	t.Helper()
	out := append([]*Server(nil), c.Nodes...)
	for _, reps := range c.Replicas {
		out = append(out, reps...)
	}
	masters := out[:0]
	for _, n := range out {
		if role, err := n.Do("ROLE"); err == nil && strings.HasPrefix(role, "master") {
			masters = append(masters, n)
		}
	}
	return masters
}

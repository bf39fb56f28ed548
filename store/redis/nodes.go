package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate/internal/breaker"
	"github.com/floodgate-go/floodgate/store"
)

// slotCount is the number of Redis Cluster slots.
const slotCount = 16384

// Failure isolation in a Cluster follows the topology: each master has its
// own circuit breaker, found for a call by its slot through the Cluster's
// slot map, and a failed call's error is a *store.ConfinedError, which
// the limiter's own breaker does not count. A master that fails (killed,
// hung, CLUSTERDOWN) thus costs the decisions on its keys, which follow the
// failure policy, and only those; after its breaker opens they are refused
// at once, without a round trip, and a probe a cooldown later finds out
// whether the master (or the replica promoted in its place) answers again.
//
// The slot map is read with CLUSTER SLOTS when the store is made, again
// soon after a call fails, and every refreshEvery, so it follows failovers
// and resharding; until it is known, calls go out unguarded.

// refreshEvery is how often the slot map is read while calls succeed.
const refreshEvery = 10 * time.Second

// refreshAfterFailure is the least time between two reads of the slot map
// prompted by failed calls.
const refreshAfterFailure = 500 * time.Millisecond

// slotRange is a range of slots, its master's address and how many
// replicas it has.
type slotRange struct {
	start, end int
	master     string
	replicas   int
}

// node is one master and its breaker.
type node struct {
	addr string
	br   *breaker.Breaker
	// refused is the error of a call the open breaker refused.
	refused error
}

// nodes are a Cluster store's per-master breakers.
type nodes struct {
	run    *rueidisRunner
	tuning breaker.Options // each master's breaker's
	logger *slog.Logger

	mu     sync.Mutex
	byAddr map[string]*node

	table      atomic.Pointer[[slotCount]*node] // nil until the slot map is read
	next       atomic.Int64                     // ns: no refresh before this
	refreshing atomic.Bool
	wg         sync.WaitGroup
}

func newNodes(run *rueidisRunner, o store.BreakerOptions, logger *slog.Logger) *nodes {
	return &nodes{run: run, tuning: breaker.Options(o), logger: logger, byAddr: map[string]*node{}}
}

// of returns the master of slot, or nil while it is not known.
func (n *nodes) of(slot uint16) *node {
	if t := n.table.Load(); t != nil {
		return t[slot]
	}
	return nil
}

// get returns the node of addr, made on first use.
func (n *nodes) get(addr string) *node {
	n.mu.Lock()
	defer n.mu.Unlock()
	nd := n.byAddr[addr]
	if nd == nil {
		nd = &node{addr: addr, br: breaker.NewWith(n.tuning)}
		nd.refused = &store.ConfinedError{Part: addr, Err: fmt.Errorf("redis: Cluster node %s: %w", addr, store.ErrBreakerOpen)}
		n.byAddr[addr] = nd
	}
	return nd
}

// allow reports whether g's call may go out at now (ns, the store's local
// clock, as record's). A call its
// master's open breaker refuses gets that error.
func (n *nodes) allow(g *group, now int64) bool {
	g.node = n.of(g.slot)
	if g.node == nil || g.node.br.Allow(now) {
		return true
	}
	g.c.err = g.node.refused
	return false
}

// record feeds the outcome of g's call to its master's breaker.
func (n *nodes) record(ctx context.Context, g *group, now int64) {
	nd := g.node
	if g.c.err == nil {
		if nd != nil && nd.br.Success() {
			n.logger.Info("floodgate/redis: Cluster node answers again; its keys are enforced", "node", nd.addr)
		}
		return
	}
	if nd == nil {
		n.refreshSoon()
		return
	}
	if errors.Is(ctx.Err(), context.Canceled) || g.waited || moving(g.c.err) {
		// The caller gave up, or the node refused the call for a slot
		// that is migrating or data it is loading (and the deadline may
		// have passed while the store waited to send it again): no
		// verdict on the node, which answered.
		nd.br.Abandon()
		return
	}
	if elsewhere(g.c.err, nd.addr) {
		// rueidis, whose slot map is older than the store's, sent the
		// call to the slot's master before a failover: no verdict on the
		// promoted replica, which would otherwise be refused a cooldown
		// after rueidis learns of it.
		nd.br.Abandon()
		n.refreshSoon()
		return
	}
	if nd.br.Failure(now) {
		n.logger.Warn("floodgate/redis: Cluster node failing; decisions on its keys follow the failure policy, others are unaffected",
			"node", nd.addr, "err", g.c.err)
	}
	n.refreshSoon()
}

// elsewhere reports whether err is a network error from a node other than
// addr, an IP and port. For a host name it reports false: the error names
// the address the name resolved to.
func elsewhere(err error, addr string) bool {
	var oe *net.OpError
	if !errors.As(err, &oe) {
		return false
	}
	to, ok := oe.Addr.(*net.TCPAddr)
	want, parseErr := netip.ParseAddrPort(addr)
	if !ok || parseErr != nil {
		return false
	}
	got := to.AddrPort()
	return got.Addr().Unmap() != want.Addr().Unmap() || got.Port() != want.Port()
}

// confine returns err, the failure of g's call, as a ConfinedError naming
// its master (or its slot, while the slot map is not known).
func confine(g *group, err error) error {
	var ce *store.ConfinedError
	if errors.As(err, &ce) {
		return err
	}
	part := "slot " + strconv.Itoa(int(g.slot))
	if g.node != nil {
		part = g.node.addr
	}
	return &store.ConfinedError{Part: part, Err: err}
}

// due starts a refresh of the slot map when the periodic one is due.
func (n *nodes) due() {
	if time.Now().UnixNano() >= n.next.Load() {
		n.refreshSoon()
	}
}

// refreshSoon reads the slot map again in the background, unless it was
// read less than refreshAfterFailure ago or a read is under way. It works
// on the wall clock: a batch's time may be a test's.
func (n *nodes) refreshSoon() {
	if time.Now().UnixNano() < n.next.Load()-int64(refreshEvery-refreshAfterFailure) || !n.refreshing.CompareAndSwap(false, true) {
		return
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer n.refreshing.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		n.refresh(ctx)
	}()
}

// refresh reads the slot map and returns it.
func (n *nodes) refresh(ctx context.Context) ([]slotRange, error) {
	n.next.Store(time.Now().UnixNano() + int64(refreshEvery))
	ranges, err := n.run.slots(ctx)
	if err != nil {
		return nil, err
	}
	t := new([slotCount]*node)
	for _, r := range ranges {
		nd := n.get(r.master)
		for s := max(r.start, 0); s <= r.end && s < slotCount; s++ {
			t[s] = nd
		}
	}
	n.table.Store(t)
	return ranges, nil
}

// close waits for a refresh under way.
func (n *nodes) close() { n.wg.Wait() }

// check reads the slot map and the settings a Cluster needs for one lost
// master to cost only its keys, and logs a warning for each that is
// missing. Settings a node does not let the store read (managed services
// often refuse CONFIG) are not checked.
func (n *nodes) check(ctx context.Context) {
	ranges, err := n.refresh(ctx)
	if err != nil {
		n.logger.Warn("floodgate/redis: cannot read the Cluster's slot map; per-node failure isolation starts once it can", "err", err)
		return
	}
	var bare []string
	for _, r := range ranges {
		if r.replicas == 0 {
			bare = append(bare, r.master)
		}
	}
	if len(bare) > 0 {
		n.logger.Warn("floodgate/redis: Cluster masters without replicas: if one is lost, decisions on its keys follow the failure policy until it returns",
			"nodes", strings.Join(dedupe(bare), ","))
	}
	full, err := n.run.config(ctx, "cluster-require-full-coverage")
	if err != nil {
		return
	}
	var yes []string
	for addr, v := range full {
		if v == "yes" {
			yes = append(yes, addr)
		}
	}
	if len(yes) > 0 {
		n.logger.Warn("floodgate/redis: cluster-require-full-coverage is yes: once a lost master is marked failed, every node refuses every key (CLUSTERDOWN) until a replica takes over; set it to no (see docs/redis.md)",
			"nodes", strings.Join(dedupe(yes), ","))
	}
}

// dedupe sorts addrs and drops repeats.
func dedupe(addrs []string) []string {
	sort.Strings(addrs)
	out := addrs[:0]
	for i, a := range addrs {
		if i == 0 || a != addrs[i-1] {
			out = append(out, a)
		}
	}
	return out
}

// hostPort joins a CLUSTER SLOTS endpoint into an address.
func hostPort(host string, port int64) string {
	return net.JoinHostPort(host, strconv.FormatInt(port, 10))
}

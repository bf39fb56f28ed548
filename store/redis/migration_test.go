package redis_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/internal/syncbuf"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/redis"
)

// movingSlots is the range of slots the migration tests move: from the
// master that holds slot 0 (redis-cli --cluster create gives it the
// lowest slots) to another.
const movingSlots = 600

// slotCount is the number of Cluster slots.
const slotCount = 16384

// migrationDeadline is the limiters' deadline in the migration tests:
// long enough that a decision on a slot that stays is answered on a test
// machine running other tests on two cores.
const migrationDeadline = time.Second

// TestClusterSlotMigration moves slots between the masters of a Cluster
// under concurrent load, with the default hash tag and with TagLimiter:
// held migrating by hand (CLUSTER SETSLOT ... IMPORTING and MIGRATING for
// 2s, then the keys moved with MIGRATE and the slots given to the target),
// by redis-cli --cluster reshard, by redis-cli --cluster add-node and
// rebalance onto a fourth master (about 600 slots), and by CLUSTER
// FAILOVER of a master's replica (its slots move with it). The load is a fail-closed limiter of
// a per-user fixed window, a per-tenant token bucket, a global
// clock-aligned window and a per-user ledger (every fourth admission
// refunded), a second such limiter, and a concurrency limiter whose every
// lease is released (a refund). It requires: no decision by policy
// whose slots do not move and no Cluster node's breaker opened; no refund
// failed; each ledger equal to its user's admissions less refunds (a
// decision by policy may have been charged: at most that many more); no
// lease left held; no key without a TTL on any master. It logs
// how many decisions on the moving slots still reached the policy.
func TestClusterSlotMigration(t *testing.T) {
	t.Parallel()
	for _, tag := range []redis.HashTag{redis.TagRule, redis.TagLimiter} {
		for _, how := range []string{"by-hand", "reshard", "add-node+rebalance", "cluster-failover"} {
			t.Run(tag.String()+"/"+how, func(t *testing.T) {
				t.Parallel()
				slotMigration(t, tag, how)
			})
		}
	}
}

// migration is the load of a migration test and what it saw.
type migration struct {
	t        *testing.T
	cl       *redistest.Cluster
	tag      redis.HashTag
	users    []string
	moving   map[int]bool // slots that move
	slotMemo sync.Map     // hash tag → slot

	rate, still, conc *floodgate.Limiter

	// Per limiter (rate, still) and user: admissions, refunds, decisions
	// by policy (which may have been charged: past their deadline, or on
	// a slot whose compensation failed) and refunds that failed (which
	// may have been applied on some slots).
	admitted, refunded, unsure, unsureRefunds [2][]atomic.Int64
	leaseUnsure                               atomic.Int64

	// Per limiter (rate, still, conc) and user: decisions, and those by
	// policy, with their errors.
	decided, byPolicy [3][]atomic.Int64
	mu                sync.Mutex
	errs              map[[2]int]map[string]int

	refundsFailed atomic.Int64
	firstRefund   atomic.Value // error
}

func slotMigration(t *testing.T, tag redis.HashTag, how string) {
	// A node that does not answer for 5 s is failing: a loaded test machine that
	// stalls a second must not fail a master over or make the Cluster
	// refuse keys (CLUSTERDOWN), which is not what is measured here.
	co := redistest.ClusterOptions{InMemory: true, Args: []string{
		"--cluster-node-timeout", "5000",
		"--cluster-require-full-coverage", "no",
	}}
	if how == "cluster-failover" {
		co.Replicas = 1
	}
	cl := redistest.StartClusterWith(t, co)
	owners := slotOwners(t, cl.Nodes[0])
	var from, to *redistest.Server
	for _, n := range cl.Nodes {
		if n.Addr == owners[0] {
			from = n
		}
	}
	for _, n := range cl.Nodes {
		if n != from {
			to = n
			break
		}
	}
	for s := range movingSlots {
		if owners[s] != from.Addr {
			t.Fatalf("slot %d is on %s, not on %s with slot 0", s, owners[s], from.Addr)
		}
	}
	m := &migration{t: t, cl: cl, tag: tag, moving: map[int]bool{}, errs: map[[2]int]map[string]int{}}
	for i := range 200 {
		m.users = append(m.users, "u"+strconv.Itoa(i))
	}
	for i := range m.admitted {
		m.admitted[i] = make([]atomic.Int64, len(m.users))
		m.refunded[i] = make([]atomic.Int64, len(m.users))
		m.unsure[i] = make([]atomic.Int64, len(m.users))
		m.unsureRefunds[i] = make([]atomic.Int64, len(m.users))
	}
	for i := range m.decided {
		m.decided[i] = make([]atomic.Int64, len(m.users))
		m.byPolicy[i] = make([]atomic.Int64, len(m.users))
	}
	// Under TagLimiter, a limiter's keys share its name's slot: rate and
	// conc on slots that move, still on one that does not, on the same
	// master.
	rateName, concName, stillName := "rate", "conc", "still"
	if tag == redis.TagLimiter {
		rateName = m.pickName("rate", func(s int) bool { return s < movingSlots })
		concName = m.pickName("conc", func(s int) bool { return s < movingSlots })
		stillName = m.pickName("still", func(s int) bool { return s >= movingSlots && owners[s] == from.Addr })
	}
	var logs syncbuf.Buffer
	st := serverStore(t, cl.Addrs(), true, func(o *redis.Options) {
		o.HashTag = tag
		o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	opts := &floodgate.Options{FailurePolicy: floodgate.FailClosed, Logger: slog.New(slog.DiscardHandler)}
	rules := []floodgate.Rule{
		{Name: "user", Algorithm: floodgate.FixedWindow, Limit: 4, Window: 500 * time.Millisecond, Key: []string{"user"}},
		{Name: "tenant", Algorithm: floodgate.TokenBucket, Limit: 2000, Window: time.Second, Key: []string{"tenant"}},
		{Name: "global", Algorithm: floodgate.FixedWindow, Limit: 1e9, Window: time.Second, Align: floodgate.AlignClock},
		{Name: "ledger", Algorithm: floodgate.FixedWindow, Limit: 1e9, Window: time.Hour, Key: []string{"user"}},
	}
	var err error
	guardedStore := func() store.Store { return guarded(t, st, migrationDeadline, store.BreakerOptions{}) }
	if m.rate, err = floodgate.New(rateName, guardedStore(), rules, opts); err != nil {
		t.Fatal(err)
	}
	if m.still, err = floodgate.New(stillName, guardedStore(), rules, opts); err != nil {
		t.Fatal(err)
	}
	if m.conc, err = floodgate.New(concName, guardedStore(), []floodgate.Rule{
		{Name: "inflight", Algorithm: floodgate.Concurrency, Limit: 3, Window: time.Minute, Key: []string{"user"}},
	}, opts); err != nil {
		t.Fatal(err)
	}

	// The slots that move: by hand, those of [0, movingSlots) that hold
	// a key of the load; by reshard, the first movingSlots; by rebalance,
	// those it gives another master, known once it is done.
	var held []int
	for _, lim := range []*floodgate.Limiter{m.rate, m.still, m.conc} {
		for _, u := range m.users {
			for _, s := range m.slots(lim, u) {
				if s < movingSlots && !m.moving[s] {
					m.moving[s] = true
					held = append(held, s)
				}
			}
		}
	}
	if how != "by-hand" {
		clear(m.moving)
		held = nil
	}
	if how == "reshard" {
		for s := range movingSlots {
			m.moving[s] = true
		}
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() { m.work(uint64(w), stop) })
	}
	time.Sleep(time.Second)
	start := time.Now()
	switch how {
	case "reshard":
		cl.Reshard(t, from, to, movingSlots)
	case "cluster-failover":
		// The replica of slot 0's master takes over (CLUSTER FAILOVER:
		// the master pauses its clients until the replica has caught up).
		var heir *redistest.Server
		for i, n := range cl.Nodes {
			if n == from {
				heir = cl.Replicas[i][0]
			}
		}
		heir.MustDo("CLUSTER", "FAILOVER")
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if role, _ := heir.Do("ROLE"); strings.HasPrefix(role, "master") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the replica did not take over within 10s of CLUSTER FAILOVER")
			}
		}
	case "add-node+rebalance":
		// The new master's weight gives it about 600 slots, 200 of
		// each master's.
		n := cl.AddMaster(t)
		cl.Rebalance(t, n.ID()+"=0.12")
	default:
		var ms []*redistest.Migration
		for _, s := range held {
			ms = append(ms, cl.BeginMigration(t, s, from, to))
		}
		time.Sleep(2 * time.Second)
		for _, mg := range ms {
			mg.Finish()
		}
	}
	moved := time.Since(start)
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()

	after := slotOwners(t, cl.Nodes[0])
	for s := range slotCount {
		switch {
		case (how == "add-node+rebalance" || how == "cluster-failover") && after[s] != owners[s]:
			m.moving[s] = true
		case m.moving[s] && after[s] != to.Addr:
			t.Fatalf("slot %d is on %s after the migration, want %s", s, after[s], to.Addr)
		}
	}
	var decisions, policy [2]int64 // [0] on slots that stay, [1] moving
	stillErrs, movingErrs := map[string]int{}, map[string]int{}
	for li, lim := range []*floodgate.Limiter{m.rate, m.still, m.conc} {
		for u, user := range m.users {
			mv := m.isMoving(lim, user)
			decisions[mv] += m.decided[li][u].Load()
			policy[mv] += m.byPolicy[li][u].Load()
			for msg, n := range m.errs[[2]int{li, u}] {
				if mv == 1 {
					movingErrs[msg] += n
				} else {
					stillErrs[msg] += n
				}
			}
		}
	}
	t.Logf("%d slots moved in %v (%d held migrating by hand); decisions: %d on slots that stay, %d on moving slots, %d of them by policy",
		len(m.moving), moved.Round(time.Millisecond), len(held), decisions[0], decisions[1], policy[1])
	if len(movingErrs) > 0 {
		t.Logf("their errors: %v", movingErrs)
	}
	if policy[0] != 0 {
		t.Errorf("%d decisions by policy on slots that do not move, want 0; their errors: %v", policy[0], stillErrs)
	}
	if decisions[1] == 0 || how == "by-hand" && decisions[0] == 0 {
		t.Errorf("no load measured on one side: %d on slots that stay, %d on moving ones", decisions[0], decisions[1])
	}
	if n := m.refundsFailed.Load(); n != 0 {
		t.Errorf("%d refunds failed, want 0; first: %v", n, m.firstRefund.Load())
	}
	if strings.Contains(logs.String(), "Cluster node failing") {
		t.Errorf("a Cluster node's breaker opened:\n%s", logs.String())
	}
	m.checkLedgers(rateName, stillName)
	m.checkLeases(concName)
	checkTTLs(t, cl)
}

// pickName returns the first of prefix, prefix1, prefix2, ... whose slot
// (as a TagLimiter hash tag) ok accepts.
func (m *migration) pickName(prefix string, ok func(slot int) bool) string {
	for i := 0; ; i++ {
		name := prefix + strconv.Itoa(i)
		if ok(m.slot(name)) {
			return name
		}
	}
}

// slot returns the slot of a hash tag's content.
func (m *migration) slot(tag string) int {
	if s, ok := m.slotMemo.Load(tag); ok {
		return s.(int)
	}
	s, err := strconv.Atoi(m.cl.Nodes[0].MustDo("CLUSTER", "KEYSLOT", "{"+tag+"}"))
	if err != nil {
		m.t.Fatal(err)
	}
	m.slotMemo.Store(tag, s)
	return s
}

// tenantOf is a user's tenant.
func tenantOf(u int) string { return "t" + strconv.Itoa(u%10) }

// slots returns the slots of the keys lim's decision for user u touches.
func (m *migration) slots(lim *floodgate.Limiter, user string) []int {
	if m.tag == redis.TagLimiter {
		return []int{m.slot(lim.Name())}
	}
	var out []int
	for _, r := range lim.Rules() {
		key := "*"
		switch {
		case len(r.Key) == 0:
		case r.Key[0] == "user":
			key = user
		case r.Key[0] == "tenant":
			u, _ := strconv.Atoi(user[1:])
			key = tenantOf(u)
		}
		out = append(out, m.slot(lim.Name()+"/"+r.Name+":"+key))
	}
	return out
}

// isMoving reports whether lim's decision for user touches a slot that
// moves.
func (m *migration) isMoving(lim *floodgate.Limiter, user string) int {
	for _, s := range m.slots(lim, user) {
		if m.moving[s] {
			return 1
		}
	}
	return 0
}

// work makes decisions of random users until stop: a decision of rate or
// still (every fourth admission refunded), and a lease of conc held for a
// moment and released.
func (m *migration) work(seed uint64, stop chan struct{}) {
	rng := rand.New(rand.NewPCG(seed, 28))
	ctx := context.Background()
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		u := rng.IntN(len(m.users))
		attrs := floodgate.Attributes{"user": m.users[u], "tenant": tenantOf(u)}
		li, lim := n%2, m.rate
		if li == 1 {
			lim = m.still
		}
		o, err := lim.Decide(ctx, floodgate.ModeConsume, attrs, 1)
		if err != nil {
			m.t.Error(err)
			return
		}
		m.count(li, u, o.Decision)
		if o.Reason == floodgate.ReasonStore {
			// Its call may have run past its deadline, or charged a
			// slot whose compensation failed.
			m.unsure[li][u].Add(1)
		}
		if o.Allowed {
			m.admitted[li][u].Add(1)
			if n%4 == 0 {
				// A refund that failed may have been applied on some
				// of its slots.
				if err := m.refund(lim, o.Ticket()); err == nil {
					m.refunded[li][u].Add(1)
				} else {
					m.unsureRefunds[li][u].Add(1)
				}
			}
		}
		lease, err := m.conc.Decide(ctx, floodgate.ModeConsume, attrs, 1)
		if err != nil {
			m.t.Error(err)
			return
		}
		m.count(2, u, lease.Decision)
		if lease.Reason == floodgate.ReasonStore {
			m.leaseUnsure.Add(1)
		}
		if lease.Allowed {
			time.Sleep(time.Millisecond)
			if err := m.refund(m.conc, lease.Ticket()); err != nil {
				m.leaseUnsure.Add(1)
			}
		}
	}
}

// count records a decision of limiter li (rate, still, conc) for user u.
func (m *migration) count(li, u int, d floodgate.Decision) {
	m.decided[li][u].Add(1)
	if d.Reason != floodgate.ReasonStore {
		return
	}
	m.byPolicy[li][u].Add(1)
	m.mu.Lock()
	defer m.mu.Unlock()
	k := [2]int{li, u}
	if m.errs[k] == nil {
		m.errs[k] = map[string]int{}
	}
	m.errs[k][reasonOf(d.Err)]++
}

// reasonOf is err's message up to its first digit (slots and addresses
// vary).
func reasonOf(err error) string {
	msg := fmt.Sprint(err)
	if i := strings.IndexAny(msg, "0123456789"); i >= 0 {
		msg = msg[:i]
	}
	return msg
}

// refund refunds t and returns why it was not applied, if it was not.
func (m *migration) refund(lim *floodgate.Limiter, t floodgate.Ticket) error {
	err := lim.Refund(context.Background(), t)
	if err != nil {
		m.refundsFailed.Add(1)
		m.firstRefund.CompareAndSwap(nil, fmt.Errorf("%s: %w", lim.Name(), err))
	}
	return err
}

// key is the name of a rule key's state under the test's hash tag.
func (m *migration) key(limiter, rule, key, sfx string) string {
	if m.tag == redis.TagLimiter {
		return "fg:{" + limiter + "}/" + rule + ":" + key + ":" + sfx
	}
	return "fg:{" + limiter + "/" + rule + ":" + key + "}:" + sfx
}

// find returns key's value on the master holding it, "" if none does.
func (m *migration) find(args ...string) string {
	for _, n := range m.cl.Masters(m.t) {
		if v, err := n.Do(args...); err == nil && v != "" {
			return v
		}
	}
	return ""
}

// checkLedgers compares each user's ledger with its admissions less its
// refunds: no lost charge, and no double charge, beyond the decisions by
// policy and the refunds that failed.
func (m *migration) checkLedgers(names ...string) {
	var admitted, refunded, unsure int64
	for li, name := range names {
		for u, user := range m.users {
			a, r := m.admitted[li][u].Load(), m.refunded[li][u].Load()
			x, y := m.unsure[li][u].Load(), m.unsureRefunds[li][u].Load()
			admitted, refunded, unsure = admitted+a, refunded+r, unsure+x+y
			var got int64
			if v := m.find("HGET", m.key(name, "ledger@1h", user, "fixed"), "n"); v != "" {
				got = fixedCount(m.t, v)
			}
			if got < a-r-y || got > a-r+x {
				m.t.Errorf("%s ledger of %s: %d, want %d admitted less %d refunded (plus up to %d decisions by policy, less up to %d refunds that failed)", name, user, got, a, r, x, y)
			}
		}
	}
	m.t.Logf("ledgers: %d admitted, %d refunded; %d decisions by policy and refunds failed", admitted, refunded, unsure)
}

// checkLeases requires every lease to have been released: no user's
// lease state holds a lease (but those of decisions by policy, which may
// have been taken, and of releases that failed).
func (m *migration) checkLeases(name string) {
	var held int64
	for _, user := range m.users {
		if v := m.find("HGET", m.key(name, "inflight", user, "leases"), "n"); v != "" {
			n, _ := strconv.ParseInt(v, 10, 64)
			held += n
		}
	}
	if held > m.leaseUnsure.Load() {
		m.t.Errorf("%d leases left held, want at most %d (decisions by policy, releases that failed)", held, m.leaseUnsure.Load())
	}
}

// checkTTLs requires every key on every master to have a TTL.
func checkTTLs(t *testing.T, cl *redistest.Cluster) {
	t.Helper()
	for _, n := range cl.Masters(t) {
		cursor := "0"
		for {
			out := strings.Split(n.MustDo("SCAN", cursor, "COUNT", "1000"), "\n")
			cursor = out[0]
			for _, k := range out[1:] {
				if k == "" {
					continue
				}
				if ttl := n.MustDo("PTTL", k); ttl == "-1" {
					t.Errorf("%s: key %q has no TTL", n.Addr, k)
				}
			}
			if cursor == "0" {
				break
			}
		}
	}
}

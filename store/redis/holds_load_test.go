package redis_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/store"
)

// noonZone is a time zone whose day is at its middle now (a whole number
// of hours from UTC), so that a test's daily budget does not turn during
// it.
func noonZone() *time.Location {
	return zoneAt(12 - time.Now().UTC().Hour())
}

func zoneAt(hours int) *time.Location {
	return time.FixedZone(fmt.Sprintf("UTC%+d", hours), hours*3600)
}

// dailyBudget is a budget of limit units a day in loc, reservable, keyed
// by tenant, beside a generous per-user rule, so that every reservation
// is a decision of two rules.
func dailyBudget(t testing.TB, name string, st store.Store, limit int64, loc *time.Location) *floodgate.Limiter {
	t.Helper()
	lim, err := floodgate.New(name, st, []floodgate.Rule{
		{Name: "budget", Algorithm: floodgate.FixedWindow, Limit: limit, Align: floodgate.AlignDay, Location: loc, Key: []string{"tenant"}, Reservable: true},
		{Name: "rpm", Algorithm: floodgate.FixedWindow, Limit: 1_000_000, Window: time.Minute, Key: []string{"user"}},
	}, patient)
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// crashEnv, when set to "addr zone-hours", makes TestReservationsOutliveACrash
// the child that reserves on the Redis at addr and waits to be killed.
const crashEnv = "FG_TEST_RESERVE_AND_BLOCK"

const (
	crashBudget = 1000
	crashHolds  = 5  // reservations the child holds
	crashUnits  = 40 // units each
	crashHold   = 2 * time.Second
)

// TestReservationsOutliveACrash starts a process (this test binary again)
// that reserves units of a daily budget on a redis-server, held for 2 s,
// and kills it with SIGKILL: the holds count until their time, then, with
// nothing of floodgate's running, Redis alone gives them back, within the
// hold time plus 1 s; no key is left without a TTL.
func TestReservationsOutliveACrash(t *testing.T) {
	if v := os.Getenv(crashEnv); v != "" {
		reserveAndBlock(t, v)
		return
	}
	srv := redistest.Start(t)
	hours := 12 - time.Now().UTC().Hour()
	cmd := exec.Command(os.Args[0], "-test.run=^TestReservationsOutliveACrash$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashEnv+"="+srv.Addr+" "+strconv.Itoa(hours))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := bufio.NewScanner(out)
	for lines.Scan() && !strings.HasPrefix(lines.Text(), "reserved") {
	}
	if !strings.HasPrefix(lines.Text(), "reserved") {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the child did not reserve: %s\n%s", lines.Text(), stderr.String())
	}
	if err := cmd.Process.Signal(os.Kill); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	killed := time.Now()

	// Nothing of ours runs now: read what Redis holds with its own client.
	const holds = "fg:{crash/budget@day:t}:holds"
	if n := srv.MustDo("ZCARD", holds); n != strconv.Itoa(crashHolds) {
		t.Fatalf("%s holds %s reservations after the kill, want %d", holds, n, crashHolds)
	}
	if ttl, _ := strconv.Atoi(srv.MustDo("PTTL", holds)); ttl <= 0 || time.Duration(ttl)*time.Millisecond > crashHold {
		t.Fatalf("the holds' set expires in %d ms, want within the hold time %v", ttl, crashHold)
	}
	// The deadline counts from before the child started, so that it covers
	// every hold's time, however late the child reserved.
	deadline := start.Add(crashHold + time.Second)
	for srv.MustDo("EXISTS", holds) != "0" {
		if time.Now().After(deadline) {
			t.Fatalf("the holds are still there %v after the process started (killed %v after)", time.Since(start), killed.Sub(start))
		}
		time.Sleep(10 * time.Millisecond)
	}
	back := time.Since(start)

	// A fresh store reads the whole budget back.
	lim := dailyBudget(t, "crash", serverStore(t, []string{srv.Addr}, false, nil), crashBudget, zoneAt(hours))
	o := must(lim.Decide(context.Background(), floodgate.ModePeek, floodgate.Attributes{"tenant": "t"}, 1))
	if o.Reason == floodgate.ReasonStore || o.Rules[0].Remaining != crashBudget {
		t.Fatalf("the budget after the holds lapsed: %+v %+v, want %d remaining", o.Decision, o.Rules, crashBudget)
	}
	if keys, err := srv.KeysWithoutTTL(); err != nil || len(keys) > 0 {
		t.Fatalf("keys without a TTL: %v, %v", keys, err)
	}
	t.Logf("killed %v after the start; the holds were back %v after the start", killed.Sub(start).Round(time.Millisecond), back.Round(time.Millisecond))
}

// reserveAndBlock is the child of TestReservationsOutliveACrash: spec is
// "addr zone-hours". It reserves, says so on stdout, and waits to be
// killed (it leaves by itself after a minute, should nobody kill it).
func reserveAndBlock(t *testing.T, spec string) {
	addr, h, _ := strings.Cut(spec, " ")
	hours, err := strconv.Atoi(h)
	if err != nil {
		t.Fatal(err)
	}
	lim := dailyBudget(t, "crash", serverStore(t, []string{addr}, false, nil), crashBudget, zoneAt(hours))
	var wg sync.WaitGroup
	for i := range crashHolds {
		wg.Go(func() {
			o, err := lim.Reserve(context.Background(), floodgate.Attributes{"tenant": "t", "user": strconv.Itoa(i)}, crashUnits, crashHold)
			if err != nil || !o.Allowed {
				fmt.Printf("failed %+v %v\n", o.Decision, err)
				os.Exit(1)
			}
		})
	}
	wg.Wait()
	fmt.Println("reserved")
	time.Sleep(time.Minute)
	os.Exit(1)
}

// TestReservedBudgetUnderLoad runs the load of an LLM gateway through
// reservations: 20 workers, through 4 limiters each with its own store on
// one redis-server, each reserve 8,000 tokens of a daily budget of 100,000
// (with a per-user rule) and settle a random 1,000 to 8,000 a few
// milliseconds later, for 2 s, on a single node and on a Cluster (where
// the two rules' keys live on different slots). Demand is far above the
// budget: the budget ends spent exactly as the settlements say, never past
// its limit, and at least 90% of it used.
func TestReservedBudgetUnderLoad(t *testing.T) {
	for _, d := range deployments(t) {
		t.Run(d.name, func(t *testing.T) { testReservedBudgetUnderLoad(t, d) })
	}
}

func testReservedBudgetUnderLoad(t *testing.T, d deployment) {
	const instances, workers, budget, reserve = 4, 20, 100_000, 8_000
	loc := noonZone()
	var lims []*floodgate.Limiter
	for range instances {
		lims = append(lims, dailyBudget(t, "load", serverStore(t, d.addrs, d.cluster, nil), budget, loc))
	}
	ctx := context.Background()
	tenant := floodgate.Attributes{"tenant": "t"}
	var spent, settled, denied atomic.Int64
	end := time.Now().Add(2 * time.Second)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			lim := lims[w%instances]
			attrs := floodgate.Attributes{"tenant": "t", "user": strconv.Itoa(w)}
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for time.Now().Before(end) {
				o, err := lim.Reserve(ctx, attrs, reserve, 10*time.Second)
				switch {
				case err != nil || o.Reason == floodgate.ReasonStore:
					t.Errorf("reserve: %+v, %v", o.Decision, err)
					return
				case !o.Allowed:
					denied.Add(1)
					time.Sleep(2 * time.Millisecond)
					continue
				}
				time.Sleep(time.Duration(rng.IntN(5000)) * time.Microsecond) // the answer streams
				used := 1000 + rng.Int64N(reserve-1000+1)
				if s, err := lim.Settle(ctx, o.Ticket(), used); err != nil || s != floodgate.Settled {
					t.Errorf("settle: %v, %v", s, err)
					return
				}
				spent.Add(used)
				settled.Add(1)
			}
		})
	}
	wg.Wait()
	o := must(lims[0].Decide(ctx, floodgate.ModePeek, tenant, 1))
	counted := budget - o.Rules[0].Remaining
	t.Logf("%d reservations settled (%d denied), %d tokens used of %d", settled.Load(), denied.Load(), spent.Load(), budget)
	if counted != spent.Load() {
		t.Errorf("the budget counts %d, the settlements %d", counted, spent.Load())
	}
	if spent.Load() > budget {
		t.Errorf("%d spent, over the budget of %d", spent.Load(), budget)
	}
	if spent.Load() < budget*9/10 {
		t.Errorf("%d spent, under 90%% of the budget of %d", spent.Load(), budget)
	}
	if n := d.do(t, "EXISTS", "fg:{load/budget@day:t}:holds"); n != "0" {
		t.Errorf("holds left after every reservation was settled")
	}
}

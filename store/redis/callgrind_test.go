package redis

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/store"
)

// TestCallgrindWorkload drives a redis-server that runs under valgrind's
// callgrind (scripts/redis-callgrind.sh starts it and reads the count), so
// that the server's instructions per decision, which load on the machine
// does not change, can be compared: FG_CALLGRIND_ADDR is the server,
// FG_CALLGRIND the workload (fixed, fixed-clock, bucket: floodgate's
// function; floor: the minimal one-key INCRBY script), FG_CALLGRIND_PER the
// decisions per call and FG_CALLGRIND_CALLS the calls counted. It zeroes
// callgrind's counters after a warm-up over the 1,000 keys and dumps them
// at the end. Without FG_CALLGRIND_ADDR it is skipped.
func TestCallgrindWorkload(t *testing.T) {
	addr := os.Getenv("FG_CALLGRIND_ADDR")
	if addr == "" {
		t.Skip("FG_CALLGRIND_ADDR is not set (see scripts/redis-callgrind.sh)")
	}
	per, _ := strconv.Atoi(os.Getenv("FG_CALLGRIND_PER"))
	calls, _ := strconv.Atoi(os.Getenv("FG_CALLGRIND_CALLS"))
	if per < 1 || calls < 1 {
		t.Fatal("FG_CALLGRIND_PER and FG_CALLGRIND_CALLS must be positive")
	}
	counting := func(run func(n int)) {
		run(1000)
		if err := exec.Command("callgrind_control", "-z").Run(); err != nil {
			t.Fatal(err)
		}
		run(calls)
		if err := exec.Command("callgrind_control", "-d").Run(); err != nil {
			t.Fatal(err)
		}
	}
	p := store.Params{Algorithm: store.FixedWindow, Limit: 1 << 40, Window: time.Minute}
	ps := []store.Params{p}
	switch w := os.Getenv("FG_CALLGRIND"); w {
	case "fixed":
	case "fixed-clock":
		ps[0].Align = store.AlignClock
	case "fixed-clock-3": // windows of a second, a minute and an hour
		ps = nil
		for _, w := range []time.Duration{time.Second, time.Minute, time.Hour} {
			ps = append(ps, store.Params{Algorithm: store.FixedWindow, Limit: 1 << 40, Window: w, Align: store.AlignClock})
		}
	case "bucket":
		ps[0] = store.Params{Algorithm: store.TokenBucket, Limit: 1 << 40, Window: time.Minute, Burst: 1 << 40}
	case "floor":
		counting(floorCalls(t, addr, floorScript, "60000"))
		return
	case "floor-3":
		counting(floorCalls(t, addr, floor3Script, "1000", "60000", "3600000"))
		return
	default:
		t.Fatalf("FG_CALLGRIND %q: want fixed, fixed-clock, fixed-clock-3, bucket, floor or floor-3", w)
	}
	s, err := New(&Options{URL: "redis://" + addr})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	counting(func(n int) {
		for i := range n {
			bs := make([]*store.Batch, per)
			for j := range bs {
				b := &store.Batch{Mode: store.Consume, Cost: 1}
				for r, p := range ps {
					b.Ops = append(b.Ops, store.Op{Scope: "cg/r" + strconv.Itoa(r),
						Key: "user:" + strconv.Itoa((i*per+j)%1000), Params: p})
				}
				bs[j] = b
			}
			sendTogether(t, s, bs...)
		}
	})
}

// The floor scripts: INCRBY and a TTL on the first hit, on one key, or on
// each of the call's keys (key i's TTL in ARGV[i+1]).
const (
	floorScript  = `local n = redis.call('INCRBY', KEYS[1], ARGV[1]); if n == tonumber(ARGV[1]) then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end; return n`
	floor3Script = `local n; for i, k in ipairs(KEYS) do n = redis.call('INCRBY', k, ARGV[1]); if n == tonumber(ARGV[1]) then redis.call('PEXPIRE', k, ARGV[i + 1]) end end; return n`
)

// floorCalls returns a run of n calls of a floor script over 1,000 keys
// (as many keys per call as ttls), the TTLs in ms.
func floorCalls(t *testing.T, addr, script string, ttls ...string) func(n int) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	r := bufio.NewReader(c)
	fmt.Fprintf(c, "*3\r\n$6\r\nSCRIPT\r\n$4\r\nLOAD\r\n$%d\r\n%s\r\n", len(script), script)
	r.ReadString('\n') // $40
	sha, err := r.ReadString('\n')
	if err != nil || len(sha) < 40 {
		t.Fatalf("SCRIPT LOAD: %q, %v", sha, err)
	}
	sha = sha[:40]
	bulk := func(w *bufio.Writer, s string) { fmt.Fprintf(w, "$%d\r\n%s\r\n", len(s), s) }
	return func(n int) {
		for i := range n {
			w := bufio.NewWriter(c)
			fmt.Fprintf(w, "*%d\r\n", 3+2*len(ttls)+1)
			bulk(w, "EVALSHA")
			bulk(w, sha)
			bulk(w, strconv.Itoa(len(ttls)))
			for k := range ttls {
				bulk(w, "floor:"+strconv.Itoa(k)+":user:"+strconv.Itoa(i%1000))
			}
			bulk(w, "1")
			for _, ttl := range ttls {
				bulk(w, ttl)
			}
			w.Flush()
			if l, err := r.ReadString('\n'); err != nil || l[0] != ':' {
				t.Fatalf("EVALSHA: %q, %v", l, err)
			}
		}
	}
}

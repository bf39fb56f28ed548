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
	switch w := os.Getenv("FG_CALLGRIND"); w {
	case "fixed":
	case "fixed-clock":
		p.Align = store.AlignClock
	case "bucket":
		p = store.Params{Algorithm: store.TokenBucket, Limit: 1 << 40, Window: time.Minute, Burst: 1 << 40}
	case "floor":
		counting(floorCalls(t, addr))
		return
	default:
		t.Fatalf("FG_CALLGRIND %q: want fixed, fixed-clock, bucket or floor", w)
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
				bs[j] = &store.Batch{Mode: store.Consume, Cost: 1, Ops: []store.Op{{Scope: "cg/r@1m",
					Key: "user:" + strconv.Itoa((i*per+j)%1000), Params: p}}}
			}
			sendTogether(t, s, bs...)
		}
	})
}

// floorCalls returns a run of n calls of the minimal fixed window script
// (one key, INCRBY and a TTL on its first hit) over 1,000 keys.
func floorCalls(t *testing.T, addr string) func(n int) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	r := bufio.NewReader(c)
	script := `local n = redis.call('INCRBY', KEYS[1], ARGV[1]); if n == tonumber(ARGV[1]) then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end; return n`
	fmt.Fprintf(c, "*3\r\n$6\r\nSCRIPT\r\n$4\r\nLOAD\r\n$%d\r\n%s\r\n", len(script), script)
	r.ReadString('\n') // $40
	sha, err := r.ReadString('\n')
	if err != nil || len(sha) < 40 {
		t.Fatalf("SCRIPT LOAD: %q, %v", sha, err)
	}
	sha = sha[:40]
	return func(n int) {
		for i := range n {
			k := "floor:user:" + strconv.Itoa(i%1000)
			fmt.Fprintf(c, "*6\r\n$7\r\nEVALSHA\r\n$40\r\n%s\r\n$1\r\n1\r\n$%d\r\n%s\r\n$1\r\n1\r\n$5\r\n60000\r\n", sha, len(k), k)
			if l, err := r.ReadString('\n'); err != nil || l[0] != ':' {
				t.Fatalf("EVALSHA: %q, %v", l, err)
			}
		}
	}
}

package redis_test

import (
	"context"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/redistest"
)

// keyBytesChild marks the process TestLongKeysCostLikeShortOnes measures in.
const keyBytesChild = "FLOODGATE_KEYBYTES_CHILD"

// TestLongKeysCostLikeShortOnes floods a limiter on Redis with distinct
// 30 KB keys, each admitted, refunded (a spent-ticket record), admitted
// again and denied, and checks that a key costs this process's heap and
// Redis's memory at most twice what a short key does (give or take 64 heap
// bytes: the store keeps nothing per key): the limiter hands the store a
// long key's digest, never the key. It logs the bytes per key, for
// docs/operations.md.
//
// The heap is measured in a process of its own: in the test binary's
// process, goroutines that earlier tests left behind free memory during the
// flood and make the figure meaningless.
func TestLongKeysCostLikeShortOnes(t *testing.T) {
	t.Parallel()
	if os.Getenv(keyBytesChild) == "" {
		args := []string{"-test.run=^TestLongKeysCostLikeShortOnes$", "-test.v"}
		if testing.Short() {
			args = append(args, "-test.short")
		}
		cmd := exec.Command(os.Args[0], args...)
		cmd.Env = append(os.Environ(), keyBytesChild+"=1")
		out, err := cmd.CombinedOutput()
		t.Logf("in a process of its own:\n%s", out)
		if err != nil {
			t.Fatalf("the measurement failed: %v", err)
		}
		return
	}
	srv := redistest.Start(t)
	keys := 8_000
	if testing.Short() {
		keys = 2_000
	}
	const valueLen = 30_000
	long := []byte(strings.Repeat("k", valueLen))
	short := make([]byte, 0, 32)
	value := map[string]func(i int) string{
		"short": func(i int) string { return string(strconv.AppendInt(append(short[:0], "key-"...), int64(i), 10)) },
		"30 KB": func(i int) string {
			copy(long, strconv.AppendInt(short[:0], int64(i), 10))
			return string(long)
		},
	}
	usedMemory := func() int64 {
		for _, line := range strings.Split(srv.MustDo("INFO", "memory"), "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		t.Fatal("INFO memory has no used_memory")
		return 0
	}
	ctx := context.Background()
	heap, redisBytes := map[string]int64{}, map[string]int64{}
	start := time.Now()
	for _, name := range []string{"short", "30 KB"} {
		// A store of its own, its connections set up before the heap is
		// measured.
		store := serverStore(t, []string{srv.Addr}, false, nil)
		l, err := floodgate.New("long"+strconv.Itoa(len(heap)), store, []floodgate.Rule{
			{Name: "per-key", Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Hour, Key: []string{"key"}},
		}, patient)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 200 {
			if d := l.Allow(ctx, floodgate.Attributes{"key": "warm-up" + strconv.Itoa(i)}); !d.Allowed {
				t.Fatalf("warm-up decision %d denied: %+v", i, d)
			}
		}
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		redisBefore := usedMemory()
		attrs := floodgate.Attributes{}
		for i := range keys {
			attrs["key"] = value[name](i)
			d := must(l.Decide(ctx, floodgate.ModeConsume, attrs, 1))
			if !d.Allowed {
				t.Fatalf("%s key %d: first decision denied: %+v", name, i, d)
			}
			if err := l.Refund(ctx, d.Ticket()); err != nil {
				t.Fatalf("%s key %d: refund: %v", name, i, err)
			}
			if d := l.Allow(ctx, attrs); !d.Allowed {
				t.Fatalf("%s key %d: denied after a refund: %+v", name, i, d)
			}
			if d := l.Allow(ctx, attrs); d.Allowed || d.Reason != floodgate.ReasonLimit {
				t.Fatalf("%s key %d: over the limit: %+v", name, i, d)
			}
			if time.Since(start) > 2*time.Minute {
				t.Fatalf("the flood took over two minutes (%d %s keys sent)", i, name)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		heap[name] = (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / int64(keys)
		redisBytes[name] = (usedMemory() - redisBefore) / int64(keys)
		t.Logf("%d distinct %s keys: %d heap bytes per key, %d Redis bytes per key (state and spent ticket)",
			keys, name, heap[name], redisBytes[name])
		runtime.KeepAlive(l)
		runtime.KeepAlive(store)
	}
	if heap["30 KB"] > 2*heap["short"]+64 {
		t.Errorf("a 30 KB key costs %d heap bytes, over twice a short key's %d", heap["30 KB"], heap["short"])
	}
	if redisBytes["30 KB"] > 2*redisBytes["short"] {
		t.Errorf("a 30 KB key costs Redis %d bytes, over twice a short key's %d", redisBytes["30 KB"], redisBytes["short"])
	}
}

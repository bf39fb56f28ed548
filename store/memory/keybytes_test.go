package memory_test

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store/memory"
)

// TestLongKeysCostLikeShortOnes floods a limiter on the memory store with
// distinct 30 KB keys (as an attacker choosing an API key header might)
// and checks that each held key costs the heap at most twice what a short
// key does: the limiter stores a long key by its digest, never whole. It
// logs the bytes per key and the process's RSS, for docs/operations.md.
func TestLongKeysCostLikeShortOnes(t *testing.T) {
	keys := 20_000
	if raceEnabled || testing.Short() {
		keys = 4_000
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
	perKey := map[string]int64{}
	start := time.Now()
	for _, name := range []string{"short", "30 KB"} {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		rssBefore := rss()
		store := memory.New(&memory.Options{MaxKeys: 100_000, SweepInterval: -1})
		l, _ := floodLimiter(t, store, perIP(floodgate.FixedWindow, 3, time.Hour))
		attrs := ip("")
		for i := range keys {
			attrs["ip"] = value[name](i)
			if d := l.Allow(context.Background(), attrs); !d.Allowed || d.Remaining != 2 {
				t.Fatalf("%s key %d: Allowed=%v Remaining=%d, want a fresh key's true, 2", name, i, d.Allowed, d.Remaining)
			}
			if time.Since(start) > time.Minute {
				t.Fatalf("the flood took over a minute (%d %s keys sent)", i, name)
			}
		}
		if n := store.Len(); n != keys {
			t.Fatalf("%s keys: the store holds %d keys, want %d", name, n, keys)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perKey[name] = (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / int64(keys)
		t.Logf("%d distinct %s keys: %d heap bytes per held key; RSS %.1f MB before, %.1f MB after",
			keys, name, perKey[name], float64(rssBefore)/1e6, float64(rss())/1e6)
		runtime.KeepAlive(l)
		store.Close()
	}
	if perKey["30 KB"] > 2*perKey["short"] {
		t.Errorf("a 30 KB key costs %d heap bytes, over twice a short key's %d", perKey["30 KB"], perKey["short"])
	}
}

// rss returns the process's resident set size in bytes (Linux), or 0.
func rss() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

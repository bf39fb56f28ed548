package floodgate

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/store"
)

// countingStore is a store that holds nothing and admits nothing; it only
// has to be a distinct value.
type countingStore struct{ applied int }

func (s *countingStore) Apply(context.Context, *store.Batch) error { s.applied++; return nil }

// heldNames is how many names the table holds for store.
func heldNames(store store.Store) int {
	names.Lock()
	defer names.Unlock()
	n := 0
	for k := range names.m {
		if k.store == store {
			n++
		}
	}
	return n
}

// TestNameTableLetsStoresGo: the table of live names forgets a limiter that
// is closed or garbage-collected, so it never keeps a discarded store (and
// all it holds) alive.
func TestNameTableLetsStoresGo(t *testing.T) {
	rules := []Rule{{Name: "r", Algorithm: FixedWindow, Limit: 1, Window: time.Second, Key: []string{"user"}}}

	closed := &countingStore{}
	l, err := New("api", closed, rules, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := heldNames(closed); got != 1 {
		t.Fatalf("names held for a live limiter's store: %d, want 1", got)
	}
	l.Close()
	if got := heldNames(closed); got != 0 {
		t.Errorf("names held after Close: %d, want 0", got)
	}

	dropped := &countingStore{}
	if _, err := New("api", dropped, rules, nil); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for heldNames(dropped) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the name of a garbage-collected limiter is still held")
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

package memory_test

import (
	"testing"

	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/memory"
	"github.com/floodgate-go/floodgate/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s := memory.New(&memory.Options{SweepInterval: -1}) // see storetest's doc
		t.Cleanup(func() { s.Close() })
		return s
	})
}

// TestConcurrentConformance runs the concurrent part of the suite on the
// limiters' wall clock.
func TestConcurrentConformance(t *testing.T) {
	s := memory.New(nil)
	defer s.Close()
	storetest.RunConcurrent(t, s, nil)
}

package topkeys

import (
	"hash/maphash"
	"math/rand/v2"
	"strconv"
	"testing"
)

// TestSummaryBoundsHold checks the summary's invariants against exact
// counts on seeded random streams: skewed (a few heavy keys among many),
// evenly spread, and a flood of distinct keys, each event of weight 1 or
// (as from a sampling limiter) of a random weight from 1 to 8. Every key's
// true count lies within its bounds, and the heavy keys are tracked with a
// small error.
func TestSummaryBoundsHold(t *testing.T) {
	seed := maphash.MakeSeed()
	for _, tc := range []struct {
		name  string
		next  func(r *rand.Rand, i int) string
		heavy int // keys "h0".."h{heavy-1}" are sent every 50th event each
	}{
		{"skewed", func(r *rand.Rand, i int) string { return "k" + strconv.Itoa(int(r.ExpFloat64()*300)) }, 3},
		{"even", func(r *rand.Rand, i int) string { return "k" + strconv.Itoa(r.IntN(5000)) }, 2},
		{"flood", func(r *rand.Rand, i int) string { return "k" + strconv.Itoa(i) }, 2},
	} {
		for _, weighted := range []bool{false, true} {
			name := tc.name
			if weighted {
				name += "/weighted"
			}
			t.Run(name, func(t *testing.T) {
				r := rand.New(rand.NewPCG(1, uint64(len(tc.name))))
				s := newSummary(64)
				exact := map[string]int64{}
				var total int64
				for i := range 100_000 {
					k := tc.next(r, i)
					if i%50 < tc.heavy {
						k = "h" + strconv.Itoa(i%50)
					}
					w := int64(1)
					if weighted {
						w += r.Int64N(8)
					}
					exact[k] += w
					total += w
					s.add(k, maphash.String(seed, k), w)
				}
				if s.total != total {
					t.Errorf("total %d, want %d", s.total, total)
				}
				for k, n := range exact {
					lo, hi := s.bounds(k, maphash.String(seed, k))
					if n < lo || n > hi {
						t.Fatalf("key %s: true count %d outside [%d, %d]", k, n, lo, hi)
					}
				}
				for h := range tc.heavy {
					k := "h" + strconv.Itoa(h)
					lo, hi := s.bounds(k, maphash.String(seed, k))
					if tracked := s.find(k, maphash.String(seed, k)) >= 0; !tracked || hi-lo > exact[k]/10 {
						t.Errorf("heavy key %s (%d events): tracked %v, bounds [%d, %d]", k, exact[k], tracked, lo, hi)
					}
				}
				indexed := 0
				for _, e := range s.index {
					if e.slot >= 0 {
						indexed++
						if s.find(s.slots[e.slot].key, e.hash) != e.slot {
							t.Errorf("slot %d (%s) indexed but not found", e.slot, s.slots[e.slot].key)
						}
					}
				}
				if len(s.slots) > 64 || indexed != len(s.slots) {
					t.Errorf("%d slots, %d indexed: want equal, at most capacity 64", len(s.slots), indexed)
				}
			})
		}
	}
}

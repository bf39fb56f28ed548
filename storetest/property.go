package storetest

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store"
)

var algorithms = []floodgate.Algorithm{
	floodgate.FixedWindow, floodgate.SlidingWindow, floodgate.TokenBucket, floodgate.GCRA, floodgate.Concurrency,
}

var limitChoices = []int64{1, 2, 3, 4, 5, 8, 10, 16, 25, 50}

// randomRule draws a rule of algorithm alg: its limits (perhaps two, to
// switch between through a LimitFunc), window, burst, buckets, alignment.
func randomRule(rng *rand.Rand, alg floodgate.Algorithm, name, attr string, zones []*time.Location) harnessRule {
	between := func(lo, hi int64) int64 { return lo + rng.Int64N(hi-lo+1) }
	hr := harnessRule{spec: ruleSpec{name: name, alg: alg}, attr: attr}
	limit := limitChoices[rng.IntN(len(limitChoices))]
	alt := limitChoices[rng.IntN(len(limitChoices))]
	hr.dynamic = rng.IntN(2) == 0
	hr.override = hr.dynamic && rng.IntN(2) == 0
	bucket := alg == floodgate.TokenBucket || alg == floodgate.GCRA
	if bucket && rng.IntN(2) == 0 {
		hr.burst = between(1, 3*limit)
	}
	if bucket && hr.override && rng.IntN(2) == 0 {
		hr.overrideBurst = between(1, 3*alt)
	}
	// A limit that sets no burst keeps the rule's burst:limit ratio,
	// rounded down, at least 1 (docs/semantics.md); the limits here are
	// small enough for plain arithmetic.
	burstOf := func(l int64) int64 {
		if hr.burst == 0 {
			return l
		}
		return max(1, hr.burst*l/limit)
	}
	hr.alts = []limits{{limit, burstOf(limit)}}
	if hr.dynamic {
		hr.alts = append(hr.alts, limits{alt, burstOf(alt)})
		if hr.overrideBurst != 0 {
			hr.alts[1].burst = hr.overrideBurst
		}
	}
	s := &hr.spec
	switch alg {
	case floodgate.FixedWindow:
		s.holds = rng.IntN(2) == 0
		s.window = between(1000, 2_000_000)
		switch r := rng.IntN(10); {
		case r < 5:
			s.align = floodgate.AlignFirstHit
		case r < 8:
			s.align = floodgate.AlignClock
		default:
			s.align = floodgate.AlignDay + floodgate.Align(rng.IntN(2))
			s.loc = zones[rng.IntN(len(zones))]
			s.window = int64(24 * time.Hour / time.Microsecond)
			if s.align == floodgate.AlignMonth {
				s.window *= 30
			}
		}
	case floodgate.SlidingWindow:
		s.buckets = []int64{1, 2, 3, 5, 10, 60}[rng.IntN(6)]
		width := between((1000+s.buckets-1)/s.buckets, 50_000)
		s.window = width * s.buckets
		if rng.IntN(4) == 0 {
			s.buckets = 0 // the engine's default; the harness reads it back
			s.window = between(1, 200) * 1000
		}
	default:
		s.window = between(1000, 2_000_000)
	}
	return hr
}

// capacity is the most a rule can ever admit at once under l.
func capacity(alg floodgate.Algorithm, l limits) int64 {
	if alg == floodgate.TokenBucket || alg == floodgate.GCRA {
		return l.burst
	}
	return l.limit
}

// run plays steps random operations, comparing every answer with the model.
// absent is the percentage of requests lacking each key attribute.
func (h *harness) run(steps, absent int) {
	h.t.Helper()
	for range steps {
		h.step(absent)
	}
}

func (h *harness) step(absent int) {
	h.t.Helper()
	h.advanceRandom()
	attrs, keys := h.request(absent)
	var most int64 = 1
	for i, k := range keys {
		if k != "" {
			most = max(most, capacity(h.specs[i].alg, h.limitsFor(attrs)[i]))
		}
	}
	cost := func() int64 {
		if h.rng.IntN(2) == 0 {
			return 1
		}
		return 1 + h.rng.Int64N(most+1) // now and then more than any rule admits
	}
	if ok, _ := h.reservable(); ok && h.rng.IntN(10) < 3 {
		h.stepReservation(attrs, keys, most)
		return
	}
	switch r := h.rng.IntN(100); {
	case r < 40:
		n := cost()
		d := h.consume(attrs, keys, n)
		if !d.Allowed && !d.Never && h.rng.IntN(3) == 0 {
			h.probeRetry(attrs, keys, n, d)
		}
	case r < 50:
		h.peek(attrs, keys, 0)
	case r < 60:
		h.peek(attrs, keys, cost())
	case r < 70:
		n := h.rng.Int64N(most + 1)
		if n == 0 && h.hasConcurrency() {
			n = 1 // a lease of no slots is meaningless; keep it out of the contract
		}
		h.record(attrs, keys, n)
	case r < 86:
		h.refund()
		h.peek(attrs, keys, 0)
	case r < 89:
		h.reset(attrs, keys)
	default:
		i := h.rng.IntN(len(h.lims)) // overridden rules ignore h.lims
		h.lims[i] = h.alts[i][h.rng.IntN(len(h.alts[i]))]
		h.logf("rule %s limits now %+v", h.specs[i].name, h.lims[i])
		// Tickets and keys from before the change meet the new limits:
		// a peek must leave them as they were, a refund give back no
		// more than it took.
		if h.rng.IntN(2) == 0 {
			h.peek(attrs, keys, cost())
			h.refund()
			h.peek(attrs, keys, 0)
		}
	}
}

func (h *harness) hasConcurrency() bool {
	for _, s := range h.specs {
		if s.alg == floodgate.Concurrency {
			return true
		}
	}
	return false
}

// advanceRandom moves the clock forward by a random step scaled to the
// shortest window: often not at all, often within a bucket, sometimes past
// whole windows.
func (h *harness) advanceRandom() {
	w := h.specs[0].window
	fine := w
	for _, s := range h.specs {
		w = min(w, s.window)
		if s.alg == floodgate.SlidingWindow {
			fine = min(fine, s.window/s.buckets)
		}
	}
	fine = min(fine, w)
	if h.rng.IntN(10) == 0 {
		// Stores count whole µs: a reading between two of them is the
		// earlier one.
		h.clock.Advance(time.Duration(h.rng.IntN(1000)))
	}
	switch r := h.rng.IntN(100); {
	case r < 35:
	case r < 60:
		h.advance(1 + h.rng.Int64N(max(1, fine/4)))
	case r < 90:
		h.advance(1 + h.rng.Int64N(w))
	default:
		h.advance(w + h.rng.Int64N(2*w))
	}
}

func newRand(seed, stream uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, stream)) }

// startTime is a random instant in 2024, a leap year, in whole µs.
func startTime(rng *rand.Rand) time.Time {
	base := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	return base.Add(time.Duration(rng.Int64N(int64(366*24*time.Hour/time.Microsecond))) * time.Microsecond)
}

// startAfter is a random instant in 2024 if the store has not seen it yet,
// else a random instant in the three days after the latest it has seen.
func (s *sharedStore) startAfter(rng *rand.Rand) time.Time {
	t := startTime(rng)
	if l := s.latest(); !l.Before(t) {
		t = l.Add(time.Duration(1+rng.Int64N(int64(72*time.Hour/time.Microsecond))) * time.Microsecond)
	}
	return t
}

// testProperties plays random sequences against one rule of each algorithm.
func testProperties(t *testing.T, newStore func(*testing.T) store.Store, cfg *config) {
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			store := openStore(t, newStore)
			for i := range cfg.sequences {
				seed := cfg.seed + uint64(i)
				rng := newRand(seed, 1)
				hr := randomRule(rng, alg, "r", "k", cfg.zones)
				h := newHarness(t, store, fmt.Sprintf("prop-%s-%d", alg, seed), seed, store.startAfter(rng), []harnessRule{hr}, false)
				h.run(cfg.steps, 5)
			}
		})
	}
}

// testMultiRule plays random sequences against limiters of two or three
// rules of random algorithms, keyed on different attributes, some of them
// shadow rules; and against limiters that run dark as a whole.
func testMultiRule(t *testing.T, newStore func(*testing.T) store.Store, cfg *config, shadowLimiter bool) {
	store := openStore(t, newStore)
	for i := range cfg.sequences {
		seed := cfg.seed + uint64(i)
		rng := newRand(seed, 2)
		var rules []harnessRule
		for j := range 2 + rng.IntN(2) {
			alg := algorithms[rng.IntN(len(algorithms))]
			attr := []string{"k", "u", ""}[rng.IntN(3)]
			hr := randomRule(rng, alg, fmt.Sprintf("r%d", j), attr, cfg.zones)
			hr.spec.shadow = rng.IntN(5) == 0
			rules = append(rules, hr)
		}
		name := fmt.Sprintf("multi-%v-%d", shadowLimiter, seed)
		h := newHarness(t, store, name, seed, store.startAfter(rng), rules, shadowLimiter)
		h.run(cfg.steps, 15)
	}
}

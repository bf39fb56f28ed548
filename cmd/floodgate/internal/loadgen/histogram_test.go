package loadgen

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

// exactQuantile is the nearest-rank quantile of sorted samples.
func exactQuantile(sorted []time.Duration, q float64) time.Duration {
	rank := int(math.Ceil(q * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

func TestBucketsCoverEveryValue(t *testing.T) {
	// Every value falls in a bucket whose bounds contain it, and buckets are
	// contiguous and increasing.
	check := func(v uint64) {
		t.Helper()
		i := bucketOf(v)
		if i < 0 || i >= numBuckets {
			t.Fatalf("bucketOf(%d) = %d, outside [0, %d)", v, i, numBuckets)
		}
		lo, w := bucketBounds(i)
		if v < lo || v-lo >= w {
			t.Fatalf("value %d in bucket %d = [%d, %d+%d)", v, i, lo, lo, w)
		}
		if i >= subCount && float64(w)/float64(lo) > 1.0/subCount {
			t.Fatalf("bucket %d = [%d, +%d) wider than 1/%d of its bound", i, lo, w, subCount)
		}
	}
	for v := uint64(0); v < 1<<16; v++ {
		check(v)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		check(r.Uint64() >> r.IntN(64))
	}
	check(math.MaxUint64)
	check(math.MaxInt64)
	for i := 1; i < numBuckets; i++ {
		plo, pw := bucketBounds(i - 1)
		lo, _ := bucketBounds(i)
		if plo+pw != lo {
			t.Fatalf("bucket %d ends at %d, bucket %d starts at %d", i-1, plo+pw, i, lo)
		}
	}
}

func TestHistogramQuantilesWithinOnePercent(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	shapes := map[string]func() time.Duration{
		// Latency-like: log-normal around 200µs with a long tail.
		"lognormal": func() time.Duration {
			return time.Duration(200e3 * math.Exp(r.NormFloat64()))
		},
		"uniform-small": func() time.Duration { return time.Duration(r.IntN(5000)) },
		"wide": func() time.Duration {
			return time.Duration(r.Int64N(int64(10 * time.Second)))
		},
		"bimodal": func() time.Duration {
			if r.IntN(100) == 0 {
				return 50*time.Millisecond + time.Duration(r.IntN(1e6))
			}
			return 100*time.Microsecond + time.Duration(r.IntN(1e4))
		},
	}
	qs := []float64{0, 0.001, 0.1, 0.5, 0.9, 0.99, 0.999, 0.9999, 1}
	for name, draw := range shapes {
		t.Run(name, func(t *testing.T) {
			var h Histogram
			samples := make([]time.Duration, 100000)
			for i := range samples {
				samples[i] = draw()
				h.Record(samples[i])
			}
			slices.Sort(samples)
			for _, q := range qs {
				got, want := h.Quantile(q), exactQuantile(samples, q)
				if rel := math.Abs(float64(got-want)) / float64(want); rel > 0.01 {
					t.Errorf("Quantile(%v) = %v, want %v within 1%% (off by %.2f%%)", q, got, want, rel*100)
				}
			}
			if got, want := h.Count(), uint64(len(samples)); got != want {
				t.Errorf("Count() = %d, want %d", got, want)
			}
			if got, want := h.Min(), samples[0]; got != want {
				t.Errorf("Min() = %v, want %v", got, want)
			}
			if got, want := h.Max(), samples[len(samples)-1]; got != want {
				t.Errorf("Max() = %v, want %v", got, want)
			}
		})
	}
}

func TestHistogramMergeAndConcurrentRecord(t *testing.T) {
	var a, b Histogram
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 1000 {
				a.Record(time.Duration(w*1000+i) * time.Microsecond)
			}
		})
	}
	wg.Wait()
	b.Record(time.Hour)
	b.Record(-time.Second) // counts as zero
	b.Merge(&a)
	if got, want := b.Count(), uint64(4002); got != want {
		t.Fatalf("Count() = %d, want %d", got, want)
	}
	if got, want := b.Max(), time.Hour; got != want {
		t.Errorf("Max() = %v, want %v", got, want)
	}
	if got, want := b.Min(), time.Duration(0); got != want {
		t.Errorf("Min() = %v, want %v", got, want)
	}
	// The median of 0, 0µs..3999µs, 1h is 1999µs.
	if got, want := b.Quantile(0.5), 1999*time.Microsecond; math.Abs(float64(got-want))/float64(want) > 0.01 {
		t.Errorf("Quantile(0.5) = %v, want %v within 1%%", got, want)
	}
}

func TestEmptyHistogram(t *testing.T) {
	var h Histogram
	for _, q := range []float64{0, 0.5, 1} {
		if got := h.Quantile(q); got != 0 {
			t.Errorf("Quantile(%v) of empty = %v, want 0", q, got)
		}
	}
	if h.Min() != 0 || h.Max() != 0 || h.Mean() != 0 {
		t.Errorf("empty Min, Max, Mean = %v, %v, %v; want zeros", h.Min(), h.Max(), h.Mean())
	}
}

package loadgen

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// The histogram's buckets are log-linear, in the style of HdrHistogram: values
// below 2^subBits nanoseconds each get a bucket of their own, and every
// power-of-two range above is split into 2^subBits equal buckets. A bucket is
// thus at most 1/2^subBits = 1/128 of its lower bound wide, and a value
// reported as its bucket's midpoint is within 1/256 (0.4%) of every value
// counted in that bucket.
const (
	subBits    = 7
	subCount   = 1 << subBits
	numBuckets = (64-subBits)*subCount + subCount
)

// Histogram counts durations in log-linear buckets that keep every reported
// quantile within 0.4% of the exact value, from 1ns up to the largest
// time.Duration, in a fixed 58 KiB. Negative durations count as zero.
//
// The zero value is an empty histogram ready to use. A Histogram is safe for
// concurrent use; readings taken while others record see some consistent-enough
// mix of before and after, which is what a progress display needs. A Histogram
// must not be copied after first use.
type Histogram struct {
	counts [numBuckets]atomic.Uint64
	total  atomic.Uint64
	sum    atomic.Uint64 // nanoseconds
	max    atomic.Uint64
	notMin atomic.Uint64 // ^min, so that the zero value means "no minimum yet"
}

// bucketOf returns the index of the bucket that counts v nanoseconds.
func bucketOf(v uint64) int {
	if v < subCount {
		return int(v)
	}
	e := bits.Len64(v) - 1 // position of the top bit, ≥ subBits
	shift := e - subBits
	sub := int(v>>shift) - subCount
	return (shift+1)*subCount + sub
}

// bucketBounds returns the smallest value counted in bucket i and the bucket's
// width.
func bucketBounds(i int) (lo, width uint64) {
	if i < subCount {
		return uint64(i), 1
	}
	shift := i/subCount - 1
	sub := uint64(i % subCount)
	return (subCount + sub) << shift, 1 << shift
}

// Record counts one duration.
func (h *Histogram) Record(d time.Duration) {
	v := uint64(max(d, 0))
	h.counts[bucketOf(v)].Add(1)
	h.total.Add(1)
	h.sum.Add(v)
	raise(&h.max, v)
	raise(&h.notMin, ^v)
}

// raise sets a to v if v is larger than a's value.
func raise(a *atomic.Uint64, v uint64) {
	for {
		old := a.Load()
		if v <= old || a.CompareAndSwap(old, v) {
			return
		}
	}
}

// Merge adds every duration counted in o to h.
func (h *Histogram) Merge(o *Histogram) {
	n := o.total.Load()
	if n == 0 {
		return
	}
	for i := range o.counts {
		if c := o.counts[i].Load(); c != 0 {
			h.counts[i].Add(c)
		}
	}
	h.total.Add(n)
	h.sum.Add(o.sum.Load())
	raise(&h.max, o.max.Load())
	raise(&h.notMin, o.notMin.Load())
}

// Count returns the number of durations recorded.
func (h *Histogram) Count() uint64 { return h.total.Load() }

// Max returns the largest duration recorded, exactly, or 0 when empty.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max.Load()) }

// Min returns the smallest duration recorded, exactly, or 0 when empty.
func (h *Histogram) Min() time.Duration {
	if h.total.Load() == 0 {
		return 0
	}
	return time.Duration(^h.notMin.Load())
}

// Mean returns the mean of the durations recorded, exactly, or 0 when empty.
func (h *Histogram) Mean() time.Duration {
	n := h.total.Load()
	if n == 0 {
		return 0
	}
	return time.Duration(h.sum.Load() / n)
}

// Quantile returns the q-quantile (0 ≤ q ≤ 1) of the durations recorded by
// the nearest-rank method: the smallest recorded duration d such that at
// least a fraction q of the durations are ≤ d, to within 0.4%. Quantile(0)
// is Min and Quantile(1) is Max, both exact. It returns 0 when the histogram
// is empty.
func (h *Histogram) Quantile(q float64) time.Duration {
	n := h.total.Load()
	if n == 0 {
		return 0
	}
	if !(q > 0) { // also NaN
		return h.Min()
	}
	if q >= 1 {
		return h.Max()
	}
	rank := uint64(math.Ceil(q * float64(n))) // 1-based
	rank = max(rank, 1)
	var seen uint64
	for i := range h.counts {
		seen += h.counts[i].Load()
		if seen >= rank {
			lo, width := bucketBounds(i)
			mid := time.Duration(lo + width/2)
			// The exact extremes are known; never report beyond them.
			return min(max(mid, h.Min()), h.Max())
		}
	}
	// Counts were added while we read them; the top is the best answer.
	return h.Max()
}

// difference sets h to the durations counted in now but not in before, an
// earlier reading of the same histogram. Min and max become the bounds of
// the lowest and highest buckets left. It must not run concurrently with
// any other method of h.
func (h *Histogram) difference(now, before *Histogram) {
	h.reset()
	lowest, highest := -1, -1
	var total uint64
	for i := range h.counts {
		a, b := now.counts[i].Load(), before.counts[i].Load()
		if a <= b {
			continue
		}
		h.counts[i].Store(a - b)
		total += a - b
		if lowest < 0 {
			lowest = i
		}
		highest = i
	}
	if total == 0 {
		return
	}
	h.total.Store(total)
	if a, b := now.sum.Load(), before.sum.Load(); a > b {
		h.sum.Store(a - b)
	}
	lo, _ := bucketBounds(lowest)
	top, width := bucketBounds(highest)
	h.notMin.Store(^lo)
	h.max.Store(top + width - 1)
}

// reset empties h. It must not run concurrently with any other method.
func (h *Histogram) reset() {
	for i := range h.counts {
		h.counts[i].Store(0)
	}
	h.total.Store(0)
	h.sum.Store(0)
	h.max.Store(0)
	h.notMin.Store(0)
}

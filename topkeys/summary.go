package topkeys

import "strings"

// summary is one Filtered Space-Saving summary (Homem and Carvalho, 2010):
// the counts of at most cap keys, and a small array of counters (the
// filter) that absorbs the keys it does not track.
//
// Invariants, for every key k of the stream counted here:
//   - tracked: count(k)−err(k) ≤ true(k) ≤ count(k);
//   - untracked: 0 ≤ true(k) ≤ filter[h(k)].
//
// A key that is not tracked counts into its filter cell; it replaces the
// tracked key with the smallest count once its cell's count would exceed
// twice that one, taking the cell's count as its error. (Admitting at once,
// as the paper does, keeps the invariants too, but under evenly spread
// traffic it replaces a tracked key every few events: 40 times the churn,
// for no better answer about the keys that stand out.) The evicted key's count
// goes back into its own cell (as a maximum), so its bound survives. A
// flood of keys seen once each therefore churns the filter, not the tracked
// set. A summary is not safe for concurrent use.
type summary struct {
	index  map[string]int32 // key → slot
	slots  []slot
	heap   []int32  // slot indexes, a min-heap by count
	filter []uint32 // counts of untracked keys, by hash
	total  int64    // events counted
}

// slot is one tracked key.
type slot struct {
	key   string
	hash  uint64
	count int64
	err   int64
	pos   int32 // index in heap
}

func newSummary(capacity int) *summary {
	return &summary{
		index:  make(map[string]int32, capacity),
		slots:  make([]slot, 0, capacity),
		heap:   make([]int32, 0, capacity),
		filter: make([]uint32, filterCells(capacity)),
	}
}

// filterCells is the filter's size for a capacity: a power of two of at
// least four cells per tracked key.
func filterCells(capacity int) int {
	n := 1
	for n < 4*capacity {
		n <<= 1
	}
	return n
}

// reset empties s, keeping its memory.
func (s *summary) reset() {
	clear(s.index)
	clear(s.slots) // drop the keys
	s.slots = s.slots[:0]
	s.heap = s.heap[:0]
	clear(s.filter)
	s.total = 0
}

// add counts one event of key, whose hash is h.
func (s *summary) add(key string, h uint64) {
	s.total++
	if i, ok := s.index[key]; ok {
		s.slots[i].count++
		s.down(int(s.slots[i].pos))
		return
	}
	cell := &s.filter[h&uint64(len(s.filter)-1)]
	if len(s.slots) < cap(s.slots) {
		i := int32(len(s.slots))
		s.slots = append(s.slots, slot{key: strings.Clone(key), hash: h, count: int64(*cell) + 1, err: int64(*cell), pos: int32(len(s.heap))})
		s.index[s.slots[i].key] = i
		s.heap = append(s.heap, i)
		s.up(len(s.heap) - 1)
		return
	}
	i := s.heap[0]
	low := &s.slots[i]
	if int64(*cell)+1 <= 2*low.count {
		if *cell < ^uint32(0) {
			*cell++
		}
		return
	}
	// key takes the place of the tracked key with the smallest count.
	old := &s.filter[low.hash&uint64(len(s.filter)-1)]
	*old = uint32(max(int64(*old), min(low.count, int64(^uint32(0)))))
	delete(s.index, low.key)
	*low = slot{key: strings.Clone(key), hash: h, count: int64(*cell) + 1, err: int64(*cell), pos: 0}
	s.index[low.key] = i
	s.down(0)
}

// bounds returns the least and the greatest count key may have had: the
// tracked count and its error, or the filter cell's count.
func (s *summary) bounds(key string, h uint64) (lo, hi int64) {
	if i, ok := s.index[key]; ok {
		sl := &s.slots[i]
		return sl.count - sl.err, sl.count
	}
	return 0, int64(s.filter[h&uint64(len(s.filter)-1)])
}

func (s *summary) less(a, b int) bool {
	return s.slots[s.heap[a]].count < s.slots[s.heap[b]].count
}

func (s *summary) swap(a, b int) {
	s.heap[a], s.heap[b] = s.heap[b], s.heap[a]
	s.slots[s.heap[a]].pos = int32(a)
	s.slots[s.heap[b]].pos = int32(b)
}

// up restores the heap order above position i.
func (s *summary) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !s.less(i, p) {
			return
		}
		s.swap(i, p)
		i = p
	}
}

// down restores the heap order below position i, after its count grew.
func (s *summary) down(i int) {
	n := len(s.heap)
	for {
		c := 2*i + 1
		if c >= n {
			return
		}
		if c+1 < n && s.less(c+1, c) {
			c++
		}
		if !s.less(c, i) {
			return
		}
		s.swap(i, c)
		i = c
	}
}

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
	index  []entry // open addressing by hash: key → slot
	slots  []slot
	heap   []int32  // slot indexes, a min-heap by count
	filter []uint32 // counts of untracked keys, by hash
	total  int64    // events counted, by weight
	weight int64    // the largest weight counted
}

// slot is one tracked key.
type slot struct {
	key   string
	hash  uint64
	count int64
	err   int64
	pos   int32 // index in heap
}

// entry is one cell of a summary's index: a tracked key's hash and slot,
// or slot −1 when empty.
type entry struct {
	hash uint64
	slot int32
}

func newSummary(capacity int) *summary {
	s := &summary{
		index:  make([]entry, pow2(2*capacity)),
		slots:  make([]slot, 0, capacity),
		heap:   make([]int32, 0, capacity),
		filter: make([]uint32, pow2(4*capacity)),
	}
	s.clearIndex()
	return s
}

// pow2 returns the least power of two not below n.
func pow2(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}

func (s *summary) clearIndex() {
	for i := range s.index {
		s.index[i] = entry{slot: -1}
	}
}

// find returns the slot of key, or −1. The index is at most half full, so
// a probe sequence is short; a hash is compared before a key.
func (s *summary) find(key string, h uint64) int32 {
	mask := uint64(len(s.index) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		e := s.index[i]
		if e.slot < 0 {
			return -1
		}
		if e.hash == h && s.slots[e.slot].key == key {
			return e.slot
		}
	}
}

// insert indexes slot under hash h, which it must not be yet.
func (s *summary) insert(h uint64, slot int32) {
	mask := uint64(len(s.index) - 1)
	i := h & mask
	for s.index[i].slot >= 0 {
		i = (i + 1) & mask
	}
	s.index[i] = entry{hash: h, slot: slot}
}

// remove unindexes slot, whose hash is h, shifting the entries after it
// back so that no probe sequence has a hole (no tombstones).
func (s *summary) remove(h uint64, slot int32) {
	mask := uint64(len(s.index) - 1)
	i := h & mask
	for s.index[i].slot != slot {
		i = (i + 1) & mask
	}
	for j := (i + 1) & mask; s.index[j].slot >= 0; j = (j + 1) & mask {
		// The entry at j may move to the hole at i if its home is not in
		// the cyclic range (i, j].
		home := s.index[j].hash & mask
		if (j-home)&mask >= (j-i)&mask {
			s.index[i] = s.index[j]
			i = j
		}
	}
	s.index[i] = entry{slot: -1}
}

// reset empties s, keeping its memory.
func (s *summary) reset() {
	s.clearIndex()
	clear(s.slots) // drop the keys
	s.slots = s.slots[:0]
	s.heap = s.heap[:0]
	clear(s.filter)
	s.total, s.weight = 0, 0
}

// add counts w events of key, whose hash is h (w above 1 where one event
// stands for several, sampled).
func (s *summary) add(key string, h uint64, w int64) {
	s.total += w
	s.weight = max(s.weight, w)
	if i := s.find(key, h); i >= 0 {
		s.slots[i].count += w
		s.down(int(s.slots[i].pos))
		return
	}
	cell := &s.filter[h&uint64(len(s.filter)-1)]
	if len(s.slots) < cap(s.slots) {
		i := int32(len(s.slots))
		s.slots = append(s.slots, slot{key: strings.Clone(key), hash: h, count: int64(*cell) + w, err: int64(*cell), pos: int32(len(s.heap))})
		s.insert(h, i)
		s.heap = append(s.heap, i)
		s.up(len(s.heap) - 1)
		return
	}
	i := s.heap[0]
	low := &s.slots[i]
	if int64(*cell)+w <= 2*low.count {
		*cell = uint32(min(int64(*cell)+w, int64(^uint32(0))))
		return
	}
	// key takes the place of the tracked key with the smallest count.
	old := &s.filter[low.hash&uint64(len(s.filter)-1)]
	*old = uint32(max(int64(*old), min(low.count, int64(^uint32(0)))))
	s.remove(low.hash, i)
	*low = slot{key: strings.Clone(key), hash: h, count: int64(*cell) + w, err: int64(*cell), pos: 0}
	s.insert(h, i)
	s.down(0)
}

// bounds returns the least and the greatest count key may have had: the
// tracked count and its error, or the filter cell's count.
func (s *summary) bounds(key string, h uint64) (lo, hi int64) {
	if i := s.find(key, h); i >= 0 {
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

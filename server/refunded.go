package server

import "sync"

// refundedCap bounds how many refunded ticket ids a server remembers
// (8 bytes each in a ring, plus a map entry: a few MB at most).
const refundedCap = 1 << 16

// refunded remembers the ids of the tickets this server refunded, the
// latest refundedCap of them, so that a replay is counted as one. The store
// refunds a ticket at most once whichever instance is asked; this record
// only labels the metric, and sees the refunds of this instance alone.
// It is safe for concurrent use.
type refunded struct {
	mu   sync.Mutex
	ids  map[uint64]struct{}
	ring []uint64
	next int
}

// first records id and reports whether it was not already recorded.
func (r *refunded) first(id uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ids == nil {
		r.ids = make(map[uint64]struct{})
	}
	if _, ok := r.ids[id]; ok {
		return false
	}
	if len(r.ring) < refundedCap {
		r.ring = append(r.ring, id)
	} else {
		delete(r.ids, r.ring[r.next])
		r.ring[r.next] = id
		r.next = (r.next + 1) % refundedCap
	}
	r.ids[id] = struct{}{}
	return true
}

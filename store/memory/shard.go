package memory

import "time"

// The index maps a key string to the first slot of a chain, linked by
// entry.next, of the slots holding that key under different scopes (rules).
// Keying the map by the key alone hashes one string per look-up instead of
// two; the chain is one slot long unless several rules of the store key on
// the same value, and its scope comparisons are pointer-equal in the common
// case (a rule's scope is one string).

// find returns the slot of key under scope, or -1. The caller holds sh.mu.
func (sh *shard) find(scope, key string) int32 {
	j, ok := sh.index[key]
	if !ok {
		return -1
	}
	for j >= 0 {
		e := &sh.entries[j]
		if e.scope == scope {
			return j
		}
		j = e.next
	}
	return -1
}

// unlink takes slot j, which holds a key, out of its key's chain. The caller
// holds sh.mu.
func (sh *shard) unlink(j int32) {
	e := &sh.entries[j]
	head, ok := sh.index[e.key]
	switch {
	case !ok:
		return
	case head == j && e.next < 0:
		delete(sh.index, e.key)
	case head == j:
		sh.index[e.key] = e.next
	default:
		for p := head; p >= 0; p = sh.entries[p].next {
			if sh.entries[p].next == j {
				sh.entries[p].next = e.next
				break
			}
		}
	}
	e.next = -1
}

// insert adds key under scope to the shard, evicting a key if the shard is
// full, and returns its slot. The key must not be present. The caller holds
// sh.mu.
func (sh *shard) insert(scope, key string, now int64) int32 {
	var j int32
	switch {
	case len(sh.free) > 0:
		j = sh.free[len(sh.free)-1]
		sh.free = sh.free[:len(sh.free)-1]
	case len(sh.entries) < sh.cap:
		sh.entries = append(sh.entries, entry{})
		j = int32(len(sh.entries) - 1)
	default:
		j = sh.evict(now)
	}
	e := &sh.entries[j]
	e.scope, e.key, e.use, e.exp, e.ref, e.pin = scope, key, true, 0, false, false
	e.st.Reset()
	e.next = -1
	if head, ok := sh.index[key]; ok {
		e.next = head
	}
	sh.index[key] = j
	sh.n++
	return j
}

// evict frees a slot of a full shard with the second-chance (CLOCK) policy:
// expired keys go first, a key used since the hand last passed gets another
// round, pinned keys (in the batch being applied) are never taken. The
// caller holds sh.mu.
func (sh *shard) evict(now int64) int32 {
	n := len(sh.entries)
	for range 3 * n {
		j := sh.hand
		sh.hand++
		if sh.hand >= n {
			sh.hand = 0
		}
		e := &sh.entries[j]
		if !e.use || e.pin {
			continue
		}
		if e.ref && e.exp > now {
			e.ref = false
			continue
		}
		sh.unlink(int32(j))
		e.use = false
		sh.n--
		return int32(j)
	}
	// Every key is pinned: only possible when a single batch holds more
	// keys than the shard's capacity. Grow rather than fail.
	sh.entries = append(sh.entries, entry{})
	return int32(len(sh.entries) - 1)
}

// remove forgets slot j. The caller holds sh.mu.
func (sh *shard) remove(j int32) {
	e := &sh.entries[j]
	if !e.use {
		return
	}
	sh.unlink(j)
	e.use, e.scope, e.key = false, "", ""
	sh.n--
	sh.free = append(sh.free, j)
}

// sweepBatch is how many slots the sweeper examines per shard per lock hold.
const sweepBatch = 4096

func (s *Store) sweeper(interval time.Duration) {
	defer close(s.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			for i := range s.shards {
				s.shards[i].sweepOnce()
			}
		}
	}
}

// sweepOnce reclaims expired keys and spent tickets in one stretch of the
// shard, under its lock.
func (sh *shard) sweepOnce() {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := sh.now
	n := len(sh.entries)
	for range min(n, sweepBatch) {
		if sh.sweep >= n {
			sh.sweep = 0
		}
		j := sh.sweep
		sh.sweep++
		if e := &sh.entries[j]; e.use && !e.pin && e.exp <= now {
			sh.remove(int32(j))
		}
	}
	for id, exp := range sh.spent {
		if exp <= now {
			delete(sh.spent, id)
		}
	}
}

package memory

import "time"

// insert adds k to the shard, evicting a key if the shard is full, and
// returns its slot. The caller holds sh.mu.
func (sh *shard) insert(k mkey, now int64) int32 {
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
	e.k, e.use, e.exp, e.ref, e.pin = k, true, 0, false, false
	e.st.Reset()
	sh.index[k] = j
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
		delete(sh.index, e.k)
		e.use = false
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
	delete(sh.index, e.k)
	e.use, e.k = false, mkey{}
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

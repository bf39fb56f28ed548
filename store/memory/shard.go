package memory

import (
	"hash/maphash"
	"time"
)

// The index maps a key to the first slot of a chain, linked by entry.next,
// of the slots holding that key under different scopes (rules). It is an
// open-addressing table with linear probing over the key's hash, which the
// store computes once per op and also uses to pick the shard: one string
// hash per look-up, where a Go map would hash the key again. Each element
// packs the high 32 bits of the hash (its tag, whose low bits are also its
// home position) and the slot + 1; 0 is an empty element. A tag match is
// confirmed by comparing the slot's key. The chain is one slot long unless
// several rules of the store key on the same value; scopes are compared
// by number.

// minTable is the smallest index table.
const minTable = 16

func tagOf(h uint64) uint64 { return h >> 32 }

// lookup returns the table position of key's element, or -1 when the key is
// not indexed. The caller holds sh.mu.
func (sh *shard) lookup(h uint64, key string) int {
	if len(sh.tab) == 0 {
		return -1
	}
	mask := len(sh.tab) - 1
	tag := tagOf(h)
	for i := int(tag) & mask; ; i = (i + 1) & mask {
		el := sh.tab[i]
		if el == 0 {
			return -1
		}
		if el>>32 == tag && sh.entries[int32(uint32(el))-1].key == key {
			return i
		}
	}
}

// find returns the slot of key (whose hash is h) under scope, or -1. The
// caller holds sh.mu.
func (sh *shard) find(h uint64, scope uint32, key string) int32 {
	i := sh.lookup(h, key)
	if i < 0 {
		return -1
	}
	for j := int32(uint32(sh.tab[i])) - 1; j >= 0; {
		e := &sh.entries[j]
		if e.scope == scope {
			return j
		}
		j = e.next
	}
	return -1
}

// findAfter is find for a decision whose previous rule on the same key
// has slot prev (-1: none): a key's chain holds its rules' slots in the
// order they were first decided together, so the slot sought is usually
// the next one along it.
func (sh *shard) findAfter(prev int32, h uint64, scope uint32, key string) int32 {
	if prev >= 0 {
		if j := sh.entries[prev].next; j >= 0 && sh.entries[j].scope == scope {
			return j
		}
	}
	return sh.find(h, scope, key)
}

// index adds key (hash h), which the table does not hold, with slot j as
// the head of its chain. The caller holds sh.mu.
func (sh *shard) index(h uint64, j int32) {
	if 2*(sh.keys+1) > len(sh.tab) {
		sh.grow()
	}
	sh.place(tagOf(h)<<32 | uint64(uint32(j+1)))
	sh.keys++
}

// place puts el in the first empty element from its home position.
func (sh *shard) place(el uint64) {
	mask := len(sh.tab) - 1
	i := int(el>>32) & mask
	for sh.tab[i] != 0 {
		i = (i + 1) & mask
	}
	sh.tab[i] = el
}

// grow doubles the table (keeping it at most half full).
func (sh *shard) grow() {
	old := sh.tab
	sh.tab = make([]uint64, max(minTable, 2*len(old)))
	for _, el := range old {
		if el != 0 {
			sh.place(el)
		}
	}
}

// del empties table position i, shifting back the elements after it whose
// probe sequence passed over it, so that no tombstones are needed.
func (sh *shard) del(i int) {
	mask := len(sh.tab) - 1
	for j := (i + 1) & mask; sh.tab[j] != 0; j = (j + 1) & mask {
		home := int(sh.tab[j]>>32) & mask
		// Leave the element at j if its home lies cyclically in (i, j].
		if i <= j {
			if i < home && home <= j {
				continue
			}
		} else if i < home || home <= j {
			continue
		}
		sh.tab[i] = sh.tab[j]
		i = j
	}
	sh.tab[i] = 0
	sh.keys--
}

// unlink takes slot j, which holds a key, out of its key's chain. The caller
// holds sh.mu.
func (sh *shard) unlink(j int32) {
	e := &sh.entries[j]
	h := maphash.String(sh.seed, e.key)
	i := sh.lookup(h, e.key)
	if i < 0 {
		return
	}
	head := int32(uint32(sh.tab[i])) - 1
	switch {
	case head == j && e.next < 0:
		sh.del(i)
	case head == j:
		sh.tab[i] = tagOf(h)<<32 | uint64(uint32(e.next+1))
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
func (sh *shard) insert(h uint64, scope uint32, key string, now int64) int32 {
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
	if i := sh.lookup(h, key); i >= 0 {
		// Append to the key's chain, so that a batch's ops, in rule order,
		// walk slots inserted in that order (usually adjacent).
		p := int32(uint32(sh.tab[i])) - 1
		for sh.entries[p].next >= 0 {
			p = sh.entries[p].next
		}
		sh.entries[p].next = j
	} else {
		sh.index(h, j)
	}
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
	e.use, e.scope, e.key = false, 0, ""
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
			now := s.latest() - lateness
			for i := range s.shards {
				s.shards[i].sweepOnce(now)
			}
		}
	}
}

// lateness (µs) is how late the sweeper reclaims an expired key: a
// decision carries its limiter's clock reading and may reach the store
// after a later-timed one, and a window that later decision saw end still
// counts that earlier one.
const lateness = int64(time.Second / time.Microsecond)

// latest is the latest time any shard has seen, µs: the store's clock
// (decisions carry the time; the store has no clock of its own). The
// sweeper reclaims every shard against it, so a shard whose keys see no
// more traffic is reclaimed too.
func (s *Store) latest() int64 {
	var now int64
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		now = max(now, sh.now)
		sh.mu.Unlock()
	}
	return now
}

// sweepOnce reclaims the keys and spent tickets expired at now in one
// stretch of the shard, under its lock.
func (sh *shard) sweepOnce(now int64) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
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

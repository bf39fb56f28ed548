package redis

import (
	"crypto/sha1"
	_ "embed"
	"encoding/binary"
	"encoding/hex"
	"math"
	"strconv"
	"strings"
	"unsafe"

	"github.com/floodgate-go/floodgate/internal/algo"
	"github.com/floodgate-go/floodgate/store"
)

//go:embed scripts/apply.lua
var scriptSrc string

// scriptSHA is the SHA-1 EVALSHA names the script by.
var scriptSHA = func() string {
	sum := sha1.Sum([]byte(scriptSrc))
	return hex.EncodeToString(sum[:])
}()

// Script modes: store.Mode values, plus compensate.
const modeCompensate = 5

// The script's arguments and reply (see scripts/apply.lua).
const (
	// headArgs are the numbers before a batch's ops: mode, now, cost, ops,
	// keys, how long a refunded ticket is remembered.
	headArgs = 6
	// opArgs are the numbers every op has (kind, limit, window, burst,
	// align, shadow); calendar windows, sliding windows and refunds add
	// theirs.
	opArgs = 6
	// keysArg is the byte offset of the number of keys in a batch's blob.
	keysArg = 8 * 4
	// replyPerOp are the numbers of each op in a batch's reply, after the
	// batch's own two (allowed, now).
	replyPerOp = 5
)

// The numbers of an op's reply, by position.
const (
	replyStatus = iota // statusRefused, statusAdmitted, statusCharged or statusNever
	replyRetry
	replyRemaining
	replyReset
	replyStamp
)

// An op's status in a reply.
const (
	statusRefused  = 0
	statusAdmitted = 1 // admitted, not charged (a peek, or a denied batch)
	statusCharged  = 2 // admitted and charged
	statusNever    = 3 // the cost exceeds what the rule can ever admit
)

// suffix names each algorithm's state key, so a rule that changes its
// algorithm never reads another algorithm's state as its own.
var suffix = [...]string{
	store.FixedWindow:   ":f",
	store.SlidingWindow: ":s",
	store.TokenBucket:   ":t",
	store.GCRA:          ":g",
	store.Concurrency:   ":c",
}

// limiterOf returns the limiter part of a scope ("limiter/rule"): the tag
// of its keys under TagLimiter. A scope without '/' is its own limiter.
func limiterOf(scope string) string {
	if i := strings.IndexByte(scope, '/'); i >= 0 {
		return scope[:i]
	}
	return scope
}

// keyOf is the key of a rule key's data named by sfx (a state suffix, or
// ":r:" and a ticket). Under TagRule it is the prefix, then the hash tag
// {scope:key}, so that all of one rule key's data lives in one Cluster slot;
// under TagLimiter it is the prefix, the tag {limiter} (a validated name:
// letters, digits and "._-", so never a brace), then the rest of the scope,
// ':' and the key, so that all of one limiter's data lives in one slot. The
// scope holds no ':' and every suffix has a fixed form after the key, so
// distinct (scope, key) pairs never share a key; under TagRule the scope's
// limiter is followed by '/', under TagLimiter by '}', so the two layouts
// never share a key either. A scope with an empty limiter part (which no
// Limiter makes) keeps the TagRule layout: "{}" is no hash tag.
func (s *Store) keyOf(scope, key, sfx string) string {
	if s.tag == TagLimiter {
		if lim := limiterOf(scope); lim != "" {
			return s.prefix + "{" + lim + "}" + scope[len(lim):] + ":" + key + sfx
		}
	}
	return s.prefix + "{" + scope + ":" + key + "}" + sfx
}

// stateKey is the key of op's state.
func (s *Store) stateKey(op *store.Op) string {
	return s.keyOf(op.Scope, op.Key, suffix[op.Params.Algorithm])
}

// calendar reports whether p's windows are calendar days or months.
func calendar(p *store.Params) bool {
	return p.Algorithm == store.FixedWindow && (p.Align == store.AlignDay || p.Align == store.AlignMonth)
}

// calWindow returns the calendar window [start, end) holding t (µs), as
// algo computes it: the script cannot read time zones.
func calWindow(p *store.Params, t int64) (start, end int64) {
	return algo.WindowAt(p, t)
}

// calBounds returns the boundaries of the calendar windows before, at and
// after t: the script picks the one that holds its clock's reading, so a
// server clock a window away from ours still finds its window.
func calBounds(p *store.Params, t int64) [4]int64 {
	s, e := calWindow(p, t)
	ps, _ := calWindow(p, s-1)
	_, ne := calWindow(p, e)
	return [4]int64{ps, s, e, ne}
}

// build fills c with the keys and arguments that run the ops at idx of b in
// the given mode. now is the time in µs, or -1 for the server's; ref (µs) is
// the time calendar windows are computed around. The numbers travel as one
// blob of little-endian doubles, which the script reads with struct.unpack:
// parsing many decimal arguments costs the server more than the rest of the
// script, and a double is what Lua holds anyway (every number here is an
// integer below 2^53, so it is exact). Each op sends only the numbers its
// algorithm and the mode use; the ticket follows in decimal.
func (s *Store) build(c *call, b *store.Batch, idx []int, mode int, now, ref int64, stamps []int64) {
	c.keys = c.keys[:0]
	blob := make([]byte, 0, 8*(headArgs+(opArgs+1)*len(idx))+20)
	put := func(v int64) { blob = binary.LittleEndian.AppendUint64(blob, math.Float64bits(float64(v))) }
	var keep int64 // only a refund keeps a spent-ticket record
	if mode == int(store.Refund) {
		for _, i := range idx {
			keep = max(keep, algo.TicketLifetime(&b.Ops[i].Params))
		}
	}
	refund := mode == int(store.Refund) || mode == modeCompensate
	put(int64(mode))
	put(now)
	put(b.Cost)
	put(int64(len(idx)))
	put(0) // the number of keys, set below
	put(keep)
	for _, i := range idx {
		op := &b.Ops[i]
		p := &op.Params
		key := s.stateKey(op)
		c.keys = append(c.keys, key)
		if p.Algorithm == store.Concurrency {
			c.keys = append(c.keys, key+"l")
		}
		var shadow int64
		if op.Shadow {
			shadow = 1
		}
		put(int64(p.Algorithm))
		put(p.Limit)
		put(p.Window.Microseconds())
		put(p.Burst)
		put(int64(p.Align))
		put(shadow)
		if calendar(p) { // the script reads bounds of fixed windows with align >= 2
			for _, v := range calBounds(p, ref) {
				put(v)
			}
		}
		if p.Algorithm == store.SlidingWindow {
			put(p.Buckets)
		}
		if refund {
			stamp := op.Stamp
			if stamps != nil {
				stamp = stamps[i]
			}
			put(stamp)
		}
	}
	if mode == int(store.Refund) {
		op := &b.Ops[idx[0]]
		c.keys = append(c.keys, s.keyOf(op.Scope, op.Key, ":r:"+strconv.FormatUint(b.Ticket, 10)))
	}
	binary.LittleEndian.PutUint64(blob[keysArg:], math.Float64bits(float64(len(c.keys))))
	blob = strconv.AppendUint(blob, b.Ticket, 10)
	c.args = append(c.args[:0], unsafe.String(unsafe.SliceData(blob), len(blob)))
}

// leasesOnly reports whether every op of b is a Concurrency rule.
func leasesOnly(b *store.Batch) bool {
	for i := range b.Ops {
		if b.Ops[i].Params.Algorithm != store.Concurrency {
			return false
		}
	}
	return true
}

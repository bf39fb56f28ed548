package redis

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/floodgate-go/floodgate/internal/algo"
	"github.com/floodgate-go/floodgate/store"
)

// The scripts, one file per algorithm (or family) and the call around
// them, are one Redis Functions library, in this order (see
// scripts/lib.lua).
//
//go:embed scripts/*.lua
var scriptFiles embed.FS

// library is the library's source and function is the name of its library
// and of its function that applies batches: "floodgate_" and the start of
// the scripts' SHA-1, so that a node holding another version's library (a
// rolling upgrade) is never called with this version's arguments.
var library, function = func() (string, string) {
	var b strings.Builder
	for _, name := range []string{"lib", "fixed", "aligned", "holds", "bucket", "sliding", "concurrency", "args", "apply"} {
		src, err := scriptFiles.ReadFile("scripts/" + name + ".lua")
		if err != nil {
			panic(err) // embedded: cannot happen
		}
		b.Write(src)
		b.WriteByte('\n')
	}
	sum := sha1.Sum([]byte(b.String()))
	name := "floodgate_" + hex.EncodeToString(sum[:8])
	return "#!lua name=" + name + "\nlocal FUNCTION = '" + name + "'\n" + b.String(), name
}()

// Script modes: store.Mode values, plus compensate (a refund that keeps
// no spent-ticket record), spend (a refund of no ops: it records the
// ticket spent and gives nothing back) and settlepart (a settle that
// keeps no spent-ticket record: see apart). A consume that holds a
// reservation (Batch.Hold) is named reserve.
const modeCompensate, modeSpend, modeSettlePart = 6, 7, 8

var modeNames = [...]string{"consume", "peek", "record", "refund", "reset", "settle", "compensate", "refund", "settlepart"}

// A batch's reply: allowed and now, then replyPerOp numbers per op.
const replyPerOp = 5

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
	store.FixedWindow:   ":fixed",
	store.SlidingWindow: ":sliding",
	store.TokenBucket:   ":bucket",
	store.GCRA:          ":gcra",
	store.Concurrency:   ":leases",
}

// leaseSet is the suffix of a concurrency key's sorted set of leases.
const leaseSet = ":expiry"

// holdSet is the suffix of the sorted set of holds of a fixed window's
// key whose rule keeps reservations (store.Params.Holds): the rule key's,
// whatever its window (see scripts/holds.lua).
const holdSet = ":holds"

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
	var b strings.Builder
	s.writeKey(&b, scope, key, sfx, 0)
	return b.String()
}

// writeKey writes keyOf(scope, key, sfx) to b, grown to hold it and
// extra bytes more: a key is built in one allocation.
func (s *Store) writeKey(b *strings.Builder, scope, key, sfx string, extra int) {
	b.Grow(len(s.prefix) + len(scope) + len(key) + len(sfx) + 3 + extra)
	b.WriteString(s.prefix)
	b.WriteByte('{')
	lim := ""
	if s.tag == TagLimiter {
		lim = limiterOf(scope)
	}
	if lim != "" {
		b.WriteString(lim)
		b.WriteByte('}')
		b.WriteString(scope[len(lim):])
		b.WriteByte(':')
		b.WriteString(key)
	} else {
		b.WriteString(scope)
		b.WriteByte(':')
		b.WriteString(key)
		b.WriteByte('}')
	}
	b.WriteString(sfx)
}

// aligned reports whether p is a fixed window aligned to the clock or the
// calendar: its state is a counter in a key naming the window.
func aligned(p *store.Params) bool {
	return p.Algorithm == store.FixedWindow && p.Align != store.AlignFirstHit
}

// holding reports whether p's keys keep reservations' holds, beside their
// state (a fixed window's).
func holding(p *store.Params) bool {
	return p.Holds && p.Algorithm == store.FixedWindow
}

// windowKey is the counter key of an aligned window of a rule key that
// starts at start (µs): the rule key's fixed-window state key, ':' and the
// start in Unix ms.
func (s *Store) windowKey(scope, key string, start int64) string {
	var b strings.Builder
	s.writeKey(&b, scope, key, suffix[store.FixedWindow], 21)
	b.WriteByte(':')
	var digits [20]byte
	b.Write(strconv.AppendInt(digits[:0], start/1000, 10))
	return b.String()
}

// build fills c with the keys and arguments that run the ops at idx of b
// in the given mode, in decimal (see scripts/apply.lua), so that MONITOR
// shows what a decision asked: the batch's head ("consume -1 1 0 1"), one
// argument, as each argument costs the server about as much as a
// hundred-line Lua function; a reservation's head goes on with the units
// held and for how long ("reserve -1 1 77 2 8000 30000000"). now is the
// time in µs, or -1 for the server's; ref (µs) is the time aligned
// windows are named at (the script answers a miss when its clock is in
// another window, and is sent again with its reading as ref); stamps,
// when not nil, replace the ops' stamps (a compensation's). A refund, and
// a settle of a ticket, names its ticket's spent record, beside the first
// op's state, and how long it lives: as long as the longest window its
// ops may have charged (algo.TicketLifetime).
func (s *Store) build(c *call, b *store.Batch, idx []int, mode int, now, ref int64, stamps []int64) {
	c.keys, c.shape = c.keys[:0], shape{ops: len(idx), now: now}
	reserve := b.Mode == store.Consume && b.Hold.Units > 0
	if mode == int(store.Consume) && b.Cost > 0 && !reserve && allAligned(b, idx) {
		s.buildAligned(c, b, idx, now, ref)
		return
	}
	ops := idx
	if mode == modeSpend {
		ops, c.shape.ops = nil, 0
	}
	stamped := mode == int(store.Refund) || mode == modeCompensate || mode == int(store.Settle) || mode == modeSettlePart
	head := make([]byte, 0, 64)
	if reserve && mode == int(store.Consume) {
		head = append(head, "reserve "...)
	} else {
		head = append(append(head, modeNames[mode]...), ' ')
	}
	head = append(strconv.AppendInt(head, now, 10), ' ')
	head = append(strconv.AppendInt(head, b.Cost, 10), ' ')
	head = append(strconv.AppendUint(head, b.Ticket, 10), ' ')
	head = strconv.AppendInt(head, int64(len(ops)), 10)
	if reserve && (mode == int(store.Consume) || mode == modeCompensate) {
		head = strconv.AppendInt(append(head, ' '), b.Hold.Units, 10)
		head = strconv.AppendInt(append(head, ' '), max(0, b.Hold.Until-b.Now.UnixMicro()), 10)
	}
	c.args = append(c.args[:0], string(head))
	for _, i := range ops {
		op := &b.Ops[i]
		var key string
		var start, end int64
		if aligned(&op.Params) {
			start, end = algo.WindowAt(&op.Params, ref)
			key = s.windowKey(op.Scope, op.Key, start)
		} else {
			key = s.keyOf(op.Scope, op.Key, suffix[op.Params.Algorithm])
		}
		c.keys = append(c.keys, key)
		if op.Params.Algorithm == store.Concurrency {
			c.keys = append(c.keys, key+leaseSet)
		}
		if holding(&op.Params) {
			c.keys = append(c.keys, s.keyOf(op.Scope, op.Key, holdSet))
		}
		c.args = append(c.args, ruleText(op, start, end, reserve && op.Held))
		if stamped {
			stamp := op.Stamp
			if stamps != nil {
				stamp = stamps[i]
			}
			c.args = append(c.args, strconv.FormatInt(stamp, 10))
		}
	}
	if mode == int(store.Refund) || mode == modeSpend || (mode == int(store.Settle) && b.Ticket != 0) {
		var life int64
		for _, i := range idx {
			life = max(life, algo.TicketLifetime(&b.Ops[i].Params))
		}
		op := &b.Ops[idx[0]]
		c.keys = append(c.keys, s.keyOf(op.Scope, op.Key, ":r:"+strconv.FormatUint(b.Ticket, 10)))
		c.args = append(c.args, strconv.FormatInt(life, 10))
	}
}

// allAligned reports whether every op at idx of b is an aligned window
// that keeps no holds.
func allAligned(b *store.Batch, idx []int) bool {
	for _, i := range idx {
		if p := &b.Ops[i].Params; !aligned(p) || p.Holds {
			return false
		}
	}
	return true
}

// buildAligned fills c for a consume whose every op is an aligned window,
// the common case that scripts/aligned.lua runs in straight lines: one
// argument, "aligned now cost ops", then per op its limit, the window its
// key names (start and end, µs) and 1 for a shadow rule or 0, such as
// "aligned -1 1 1 100 1733220000000000 1733220060000000 0".
func (s *Store) buildAligned(c *call, b *store.Batch, idx []int, now, ref int64) {
	t := make([]byte, 0, 24+48*len(idx))
	t = append(t, "aligned "...)
	t = append(strconv.AppendInt(t, now, 10), ' ')
	t = append(strconv.AppendInt(t, b.Cost, 10), ' ')
	t = strconv.AppendInt(t, int64(len(idx)), 10)
	c.shape.aligned, c.spans = true, c.spans[:0]
	for _, i := range idx {
		op := &b.Ops[i]
		start, end := algo.WindowAt(&op.Params, ref)
		c.spans = append(c.spans, start, end)
		c.keys = append(c.keys, s.windowKey(op.Scope, op.Key, start))
		t = strconv.AppendInt(append(t, ' '), op.Params.Limit, 10)
		t = strconv.AppendInt(append(t, ' '), start, 10)
		t = strconv.AppendInt(append(t, ' '), end, 10)
		if op.Shadow {
			t = append(t, " 1"...)
		} else {
			t = append(t, " 0"...)
		}
	}
	c.args = append(c.args[:0], string(t))
}

// expandAligned turns the reply to c, an aligned consume of the ops at
// idx of b (now, then one number per op; see scripts/aligned.lua, which
// decided), into the reply decide gives (see scripts/apply.lua). An op's
// number is x if the decision was admitted, -2 - x if it was denied; x is
// 3 times the window's count before the decision (at most its limit) plus
// 0 if the window had room for the cost (it was then charged if the
// decision was admitted), 1 if not, 2 if it never has.
func expandAligned(c *call, b *store.Batch, idx []int) []int64 {
	raw := c.reply // now and len(idx) numbers (see decode)
	now := raw[0]
	r := make([]int64, 2+replyPerOp*len(idx))
	r[0], r[1] = 1, now
	for j, i := range idx {
		x := raw[1+j]
		if x < 0 {
			r[0], x = 0, -2-x
		}
		start, end := c.spans[2*j], c.spans[2*j+1]
		v := r[2+replyPerOp*j : 2+replyPerOp*(j+1)]
		v[replyRemaining], v[replyReset] = b.Ops[i].Params.Limit-x/3, end-now
		switch x % 3 {
		case 0:
			v[replyStatus] = statusAdmitted
			if raw[1+j] >= 0 {
				v[replyStatus], v[replyRemaining], v[replyStamp] = statusCharged, v[replyRemaining]-b.Cost, start
			}
		case 1:
			v[replyStatus], v[replyRetry] = statusRefused, end-now
		default:
			v[replyStatus] = statusNever
		}
	}
	return r
}

// ruleText is op's rule as the script reads it, such as
// "gcra limit=100 window=60000000 burst=20": fields at their defaults
// (burst 0, align first_hit, no shadow, no holds) are left out. An aligned
// window carries the window [start, end) its key names; held says the op
// holds the units of the batch's reservation.
func ruleText(op *store.Op, start, end int64, held bool) string {
	p := &op.Params
	t := make([]byte, 0, 96)
	t = append(t, p.Algorithm.String()...)
	t = strconv.AppendInt(append(t, " limit="...), p.Limit, 10)
	t = strconv.AppendInt(append(t, " window="...), p.Window.Microseconds(), 10)
	if p.Burst != 0 {
		t = strconv.AppendInt(append(t, " burst="...), p.Burst, 10)
	}
	if p.Algorithm == store.SlidingWindow {
		t = strconv.AppendInt(append(t, " buckets="...), p.Buckets, 10)
	}
	if aligned(p) {
		t = append(append(t, " align="...), p.Align.String()...)
		t = strconv.AppendInt(append(t, " start="...), start, 10)
		t = strconv.AppendInt(append(t, " end="...), end, 10)
	}
	if op.Shadow {
		t = append(t, " shadow=1"...)
	}
	switch {
	case held && holding(p):
		t = append(t, " held=1"...)
	case holding(p):
		t = append(t, " holds=1"...)
	}
	return string(t)
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

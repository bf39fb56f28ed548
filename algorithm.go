package floodgate

import "github.com/floodgate-go/floodgate/store"

// Algorithm selects how a rule counts. The zero value is invalid. It is the
// store package's type: stores evaluate it.
type Algorithm = store.Algorithm

// The algorithms. docs/semantics.md gives each one's exact formulas.
const (
	// FixedWindow counts units per window. The window opens at the key's
	// first hit unless the rule aligns it to the clock or the calendar.
	FixedWindow = store.FixedWindow
	// SlidingWindow counts units in sub-buckets and never admits more than
	// the limit in any span of one window, at bucket granularity.
	SlidingWindow = store.SlidingWindow
	// TokenBucket holds Burst tokens, refilled at Limit per Window.
	TokenBucket = store.TokenBucket
	// GCRA is the generic cell rate algorithm: rate Limit per Window, burst
	// tolerance Burst, one timestamp per key. It admits exactly what
	// TokenBucket admits.
	GCRA = store.GCRA
	// Concurrency allows at most Limit leases at once; a lease is released
	// by refunding its ticket or lapses after Window. Ask with
	// Limiter.Decide, whose Outcome.LeaseTicket releases the lease (Allow
	// returns no ticket, so its leases lapse).
	Concurrency = store.Concurrency
)

// Align says where a FixedWindow rule's windows start.
type Align = store.Align

const (
	// AlignFirstHit opens a key's window at its first hit (the default).
	AlignFirstHit = store.AlignFirstHit
	// AlignClock makes windows multiples of the rule's Window since the
	// Unix epoch, so every key's window rolls at the same instant.
	AlignClock = store.AlignClock
	// AlignDay makes each window a calendar day in the rule's Location.
	AlignDay = store.AlignDay
	// AlignMonth makes each window a calendar month in the rule's Location.
	AlignMonth = store.AlignMonth
)

// Mode says what a decision does: ModeConsume (Allow, AllowN), ModePeek
// (Peek) or ModeRecord (Record).
type Mode = store.Mode

// The decision modes.
const (
	ModeConsume = store.Consume
	ModePeek    = store.Peek
	ModeRecord  = store.Record
)

package store

import (
	"fmt"
	"strings"
)

// Algorithm selects how a rule counts. The zero value is invalid.
type Algorithm uint8

// The algorithms. docs/semantics.md gives each one's exact formulas.
const (
	// FixedWindow counts units per window. The window opens at the key's
	// first hit unless the rule aligns it to the clock or the calendar.
	FixedWindow Algorithm = iota + 1
	// SlidingWindow counts units in sub-buckets and never admits more than
	// the limit in any span of one window, at bucket granularity.
	SlidingWindow
	// TokenBucket holds Burst tokens, refilled at Limit per Window.
	TokenBucket
	// GCRA is the generic cell rate algorithm: rate Limit per Window, burst
	// tolerance Burst, one timestamp per key. It admits exactly what
	// TokenBucket admits.
	GCRA
	// Concurrency allows at most Limit leases at once; a lease is released
	// by refunding its ticket or lapses after Window.
	Concurrency
)

var algorithmNames = [...]string{
	FixedWindow:   "fixed_window",
	SlidingWindow: "sliding_window",
	TokenBucket:   "token_bucket",
	GCRA:          "gcra",
	Concurrency:   "concurrency",
}

// String returns the algorithm's configuration name, such as "token_bucket".
func (a Algorithm) String() string {
	if a.Valid() {
		return algorithmNames[a]
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

// AlgorithmNames lists the algorithms' configuration names for messages:
// "fixed_window, sliding_window, token_bucket, gcra or concurrency".
func AlgorithmNames() string {
	names := algorithmNames[1:]
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// Valid reports whether a is one of the algorithms.
func (a Algorithm) Valid() bool { return a >= FixedWindow && a <= Concurrency }

// ParseAlgorithm returns the algorithm with the given configuration name.
func ParseAlgorithm(name string) (Algorithm, error) {
	for a, n := range algorithmNames {
		if n != "" && n == name {
			return Algorithm(a), nil
		}
	}
	return 0, fmt.Errorf("unknown algorithm %q (want one of %s)", name, strings.Join(algorithmNames[1:], ", "))
}

// MarshalText implements encoding.TextMarshaler.
func (a Algorithm) MarshalText() ([]byte, error) {
	if !a.Valid() {
		return nil, fmt.Errorf("invalid algorithm %d", uint8(a))
	}
	return []byte(a.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (a *Algorithm) UnmarshalText(b []byte) error {
	v, err := ParseAlgorithm(string(b))
	if err != nil {
		return err
	}
	*a = v
	return nil
}

// Align says where a FixedWindow rule's windows start.
type Align uint8

const (
	// AlignFirstHit opens a key's window at its first hit (the default).
	AlignFirstHit Align = iota
	// AlignClock makes windows multiples of the rule's Window since the
	// Unix epoch, so every key's window rolls at the same instant.
	AlignClock
	// AlignDay makes each window a calendar day in the rule's Location.
	AlignDay
	// AlignMonth makes each window a calendar month in the rule's Location.
	AlignMonth
)

var alignNames = [...]string{"first_hit", "clock", "day", "month"}

// String returns the alignment's configuration name.
func (a Align) String() string {
	if int(a) < len(alignNames) {
		return alignNames[a]
	}
	return fmt.Sprintf("Align(%d)", uint8(a))
}

// ParseAlign returns the alignment with the given configuration name; ""
// means AlignFirstHit.
func ParseAlign(name string) (Align, error) {
	if name == "" {
		return AlignFirstHit, nil
	}
	for a, n := range alignNames {
		if n == name {
			return Align(a), nil
		}
	}
	return 0, fmt.Errorf("unknown alignment %q (want one of %s)", name, strings.Join(alignNames[:], ", "))
}

package floodgate

import (
	"encoding/binary"
	"errors"
	"time"
)

// Ticket is what refunding an admitted decision needs: the rules it was
// charged to, each with its key and the window (or lease) the units were
// counted in, and the cost. A ticket is refunded at most once: the store
// remembers spent tickets for as long as their windows live.
//
// A ticket handed to an untrusted party must be sealed first (the decision
// service authenticates the encoding with a server secret); MarshalBinary
// alone does not protect it.
type Ticket struct {
	Limiter string
	ID      uint64
	Cost    int64
	Entries []TicketEntry
	// Until is when a reservation's holds lapse (see Limiter.Reserve): the
	// ticket settles the reservation. It is the zero Time for any other
	// decision's ticket.
	Until time.Time
}

// TicketEntry is one charged rule of a Ticket.
type TicketEntry struct {
	Rule  string
	Key   string
	Stamp int64
	// Limit and Burst are the rule's limits for the charged request (after
	// overrides and limit functions), so that the refund gives back what
	// was taken; 0 means the rule's configured ones.
	Limit, Burst int64
}

// Valid reports whether the ticket has anything to refund.
func (t Ticket) Valid() bool { return t.Limiter != "" && len(t.Entries) > 0 }

const ticketVersion = 2

// MarshalBinary encodes the ticket compactly.
func (t Ticket) MarshalBinary() ([]byte, error) {
	b := make([]byte, 0, 32+len(t.Limiter)+len(t.Entries)*24)
	b = append(b, ticketVersion)
	b = appendString(b, t.Limiter)
	b = binary.AppendUvarint(b, t.ID)
	b = binary.AppendVarint(b, t.Cost)
	var until int64
	if !t.Until.IsZero() {
		until = t.Until.UnixMicro()
	}
	b = binary.AppendVarint(b, until)
	b = binary.AppendUvarint(b, uint64(len(t.Entries)))
	for _, e := range t.Entries {
		b = appendString(b, e.Rule)
		b = appendString(b, e.Key)
		b = binary.AppendVarint(b, e.Stamp)
		b = binary.AppendVarint(b, e.Limit)
		b = binary.AppendVarint(b, e.Burst)
	}
	return b, nil
}

var errTicketEncoding = errors.New("floodgate: malformed ticket")

// UnmarshalBinary decodes a ticket encoded by MarshalBinary.
func (t *Ticket) UnmarshalBinary(b []byte) error {
	r := ticketReader{b: b}
	if v := r.byte(); v != ticketVersion {
		return errTicketEncoding
	}
	var out Ticket
	out.Limiter = r.string()
	out.ID = r.uvarint()
	out.Cost = r.varint()
	until := r.varint()
	n := r.uvarint()
	if r.err || n > 64 || out.Cost < 0 || until < 0 {
		return errTicketEncoding
	}
	if until > 0 {
		out.Until = time.UnixMicro(until)
	}
	for range n {
		e := TicketEntry{Rule: r.string(), Key: r.string(), Stamp: r.varint(), Limit: r.varint(), Burst: r.varint()}
		if e.Limit < 0 || e.Burst < 0 {
			return errTicketEncoding
		}
		out.Entries = append(out.Entries, e)
	}
	if r.err || len(r.b) != 0 {
		return errTicketEncoding
	}
	*t = out
	return nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

type ticketReader struct {
	b   []byte
	err bool
}

func (r *ticketReader) byte() byte {
	if len(r.b) == 0 {
		r.err = true
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *ticketReader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *ticketReader) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *ticketReader) string() string {
	n := r.uvarint()
	if r.err || n > uint64(len(r.b)) {
		r.err = true
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

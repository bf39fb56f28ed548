package envoy

import (
	"strings"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

// match finds the rate limit of one request descriptor the way the
// reference service does, and the key its counter is kept under.
//
// The entries are walked down the tree one level each. At each level the
// most specific child wins: the one with the entry's key and value, else
// the first wildcard (in file order) with the entry's key whose pattern the
// value has, else the one with the entry's key and no value. The walk stops
// at a child without children. The descriptor has a rate limit only when
// the child its last entry reached has one: a descriptor with more or fewer
// entries than the configured path matches nothing.
//
// The key holds every entry, so each distinct value has its own counter,
// except that a wildcard with share_threshold stands for all the values it
// matches. A limit of 0 requests per unit has a key too (it is reported,
// though never counted); an unlimited one has none.
func (d *domain) match(entries []*ratelimitv3.RateLimitDescriptor_Entry) (l *leaf, key string) {
	if len(entries) == 0 {
		return nil, ""
	}
	n := d.root
	var shared []sharedEntry // entries matched by a sharing wildcard
	for i, e := range entries {
		next, wild := n.child(e.Key, e.Value)
		if next == nil {
			return nil, ""
		}
		if wild && next.share {
			shared = append(shared, sharedEntry{i, next.pattern})
		}
		if i == len(entries)-1 {
			l = next.limit
			break
		}
		if !next.hasChildren() {
			return nil, ""
		}
		n = next
	}
	if l == nil || l.unlimited {
		return l, ""
	}
	return l, counterKey(entries, shared)
}

// child returns n's most specific child for the entry key=value: the one
// with the key and the value, else the first wildcard (in file order) with
// the key whose pattern the value has (wild is then true), else the one
// with the key and no value; nil when there is none.
func (n *node) child(key, value string) (next *node, wild bool) {
	if next := n.exact[entry{key, value}]; next != nil {
		return next, false
	}
	for _, w := range n.wild {
		if w.key == key && w.matches(value) {
			return w.n, true
		}
	}
	return n.anyValue[key], false
}

type sharedEntry struct {
	index   int
	pattern string
}

// counterKey joins the entries as key=value pairs, '|' between them, with
// '\', '=' and '|' escaped, so distinct entry lists never share a counter.
// It is never empty: every configured key is.
func counterKey(entries []*ratelimitv3.RateLimitDescriptor_Entry, shared []sharedEntry) string {
	var b strings.Builder
	n := 0
	for _, e := range entries {
		n += len(e.Key) + len(e.Value) + 2
	}
	b.Grow(n)
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('|')
		}
		writeKeyPart(&b, e.Key)
		b.WriteByte('=')
		if len(shared) > 0 && shared[0].index == i {
			// A leading '*' is escaped in no value, so the pattern
			// cannot collide with a real value.
			b.WriteByte('*')
			writeKeyPart(&b, shared[0].pattern)
			shared = shared[1:]
			continue
		}
		writeKeyPart(&b, e.Value)
	}
	return b.String()
}

func writeKeyPart(b *strings.Builder, s string) {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\', '=', '|', '*':
			b.WriteByte('\\')
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
}

package floodgate

import (
	"crypto/sha256"
	"encoding/base64"
	"strings"
	"sync"
)

// Attributes are the facts about one request that rules derive keys from and
// overrides match on: a user id, a tenant, a client IP, a route. A missing or
// empty attribute skips every rule keyed on it.
type Attributes map[string]string

// matches reports whether attrs holds every value of a.
func (a Attributes) matches(attrs Attributes) bool {
	for k, v := range a {
		if attrs[k] != v {
			return false
		}
	}
	return true
}

// lend lends a copy of a request's attributes to a rule's callbacks
// (KeyFunc and LimitFunc) and takes it back when the callback returns.
//
// Handing the callbacks the caller's own map would let it escape, as far as
// the compiler can tell, from every decision method, so every Attributes
// literal a caller writes in a call (lim.Allow(ctx, floodgate.Attributes{"user": id}))
// would be allocated on the heap, callbacks or not. With the copy, such a
// literal stays on the caller's stack and a decision allocates nothing; the
// copy is paid only by rules that have callbacks, and the copies are
// recycled. A callback must therefore not keep attrs after it returns.
func lend(attrs Attributes) Attributes {
	c := lentPool.Get().(Attributes)
	for k, v := range attrs {
		c[k] = v
	}
	return c
}

// giveBack clears a map from lend and recycles it.
func giveBack(c Attributes) {
	clear(c)
	lentPool.Put(c)
}

var lentPool = sync.Pool{New: func() any { return make(Attributes, 8) }}

// globalKey is the key of a rule with no key attributes.
const globalKey = "*"

// MaxKeyLen is the longest key a rule stores as derived (escaped and
// joined). A longer key is stored as its digest (see digestKey), so a key
// costs at most this many bytes wherever it is held (a store, the Redis
// over-limit cache, tickets), however long the attribute values it came from:
// they are often the client's to choose.
const MaxKeyLen = 128

// digestPrefix is how much of a long key its digest keeps readable.
const digestPrefix = 48

// keyFor returns the rule's key for attrs, or "" when the rule is skipped.
// A single attribute value is used as is unless it needs escaping or is
// longer than MaxKeyLen, so the common case does not allocate. Composite
// keys join escaped values with ':'.
func (c *compiledRule) keyFor(attrs Attributes) string {
	if c.KeyFunc != nil {
		lent := lend(attrs)
		k := c.KeyFunc(lent)
		giveBack(lent)
		if k == "" {
			return ""
		}
		return escapeKey(k)
	}
	switch len(c.Key) {
	case 0:
		return globalKey
	case 1:
		v := attrs[c.Key[0]]
		if v == "" {
			return ""
		}
		return escapeKey(v)
	}
	n := len(c.Key) - 1
	for _, name := range c.Key {
		v := attrs[name]
		if v == "" {
			return ""
		}
		n += len(v)
	}
	var b strings.Builder
	b.Grow(n)
	for i, name := range c.Key {
		if i > 0 {
			b.WriteByte(':')
		}
		writeEscaped(&b, attrs[name])
	}
	return bounded(b.String())
}

// escapeKey escapes ':' and '\' (and a lone "*", the global key) so that
// distinct key tuples can never produce the same key.
func escapeKey(v string) string {
	if v == globalKey {
		return `\*`
	}
	if !needsEscape(v) {
		return bounded(v)
	}
	var b strings.Builder
	b.Grow(len(v) + 4)
	writeEscaped(&b, v)
	return bounded(b.String())
}

// bounded returns the escaped key k, or its digest when k is longer than
// MaxKeyLen.
func bounded(k string) string {
	if len(k) <= MaxKeyLen {
		return k
	}
	return digestKey(k)
}

// digestKey returns the stored form of a long escaped key k: its first
// digestPrefix bytes (cut before an escape pair rather than through it),
// then `\#`, then the unpadded base64url SHA-256 of the whole of k, at most
// 93 bytes in all. Read from its start, an escaped key is plain bytes and
// the pairs `\\`, `\:` and `\*`; a digest holds the pair `\#` too, so it
// never equals a key stored as derived, and two long keys share a digest
// only if SHA-256 collides.
func digestKey(k string) string {
	n := 0
	for n < digestPrefix {
		step := 1
		if k[n] == '\\' {
			step = 2
		}
		if n+step > digestPrefix {
			break
		}
		n += step
	}
	sum := sha256.Sum256([]byte(k))
	var b strings.Builder
	b.Grow(n + 2 + base64.RawURLEncoding.EncodedLen(len(sum)))
	b.WriteString(k[:n])
	b.WriteString(`\#`)
	var enc [43]byte
	base64.RawURLEncoding.Encode(enc[:], sum[:])
	b.Write(enc[:])
	return b.String()
}

// needsEscape reports whether v holds ':' or '\'. A plain loop: keys are
// short, and strings.ContainsAny's set building costs more than the scan.
func needsEscape(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c == ':' || c == '\\' {
			return true
		}
	}
	return false
}

func writeEscaped(b *strings.Builder, v string) {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c == ':' || c == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(v[i])
	}
}

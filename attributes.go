package floodgate

import (
	"crypto/sha256"
	"encoding/base64"
	"strings"
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

// clone copies a for a rule's callback. (maps.Clone would make a escape:
// it hands the map to the runtime as an interface value.)
func (a Attributes) clone() Attributes {
	c := make(Attributes, len(a))
	for k, v := range a {
		c[k] = v
	}
	return c
}

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
//
// A rule keys on a fixed number of attributes, and its keys live in its own
// scope, so keys of different shapes never meet: a single attribute value
// (or a KeyFunc's result) is the key as it is, escaped only if it holds a
// backslash (so that it can never read as the digest of a long key, see
// digestKey). Composite keys join escaped values with ':'. A key longer
// than MaxKeyLen is stored as its digest.
//
// A KeyFunc is given a copy of attrs: handing it the caller's map would let
// the map escape, as far as the compiler can tell, from every decision
// method, and put every Attributes literal written in a call on the heap.
func (c *compiledRule) keyFor(attrs Attributes) string {
	if c.KeyFunc != nil {
		return single(c.KeyFunc(attrs.clone()))
	}
	switch len(c.Key) {
	case 0:
		return globalKey
	case 1:
		return single(attrs[c.Key[0]])
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

// single is the key of a rule keyed on one value v ("" when v is empty).
func single(v string) string {
	if strings.IndexByte(v, '\\') < 0 {
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
// the pairs `\\` and `\:`; a digest holds the pair `\#` too, so it
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

func writeEscaped(b *strings.Builder, v string) {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c == ':' || c == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(v[i])
	}
}

package clientip

import (
	"net/netip"
	"strings"
)

// xffHops yields the entries of X-Forwarded-For from the right, treating
// every line of the header as part of one comma-separated list. It reads the
// header in place, without allocating.
type xffHops struct {
	lines []string
	line  int // current line, counting down
	end   int // unread part of lines[line] is [:end]
}

func (h *xffHops) next() (netip.Addr, bool, error) {
	for h.line >= 0 {
		if h.end < 0 {
			h.line--
			if h.line >= 0 {
				h.end = len(h.lines[h.line])
			}
			continue
		}
		s := h.lines[h.line][:h.end]
		i := strings.LastIndexByte(s, ',')
		entry := strings.TrimSpace(s[i+1:])
		h.end = i // -1 once the line is used up
		a, err := parseEntry(entry)
		return a, true, err
	}
	return netip.Addr{}, false, nil
}

// fwdElem is one element of a Forwarded header as far as the client address
// is concerned.
type fwdElem struct {
	node   string // the for= value, unquoted
	hasFor bool
	bad    bool // the element does not parse
}

// fromForwarded finds the client in RFC 7239 Forwarded header lines.
func (r *Resolver) fromForwarded(lines []string) (netip.Addr, error) {
	var buf [8]fwdElem
	elems := buf[:0]
	for _, line := range lines {
		elems = appendForwarded(elems, line)
	}
	return pick(r, &hops{forwarded: true, fwd: fwdHops{elems: elems, i: len(elems)}})
}

type fwdHops struct {
	elems []fwdElem
	i     int
}

func (h *fwdHops) next() (netip.Addr, bool, error) {
	if h.i == 0 {
		return netip.Addr{}, false, nil
	}
	h.i--
	e := h.elems[h.i]
	switch {
	case e.bad:
		return netip.Addr{}, true, ErrMalformed
	case !e.hasFor:
		return netip.Addr{}, true, ErrUnusable
	}
	a, err := parseNode(e.node)
	return a, true, err
}

// appendForwarded parses one line of a Forwarded header and appends its
// non-empty elements to out. An element that does not parse is appended as
// bad, and parsing resumes after the next comma, so that a malformed element
// written by a client cannot swallow the well-formed elements that proxies
// append to its right.
func appendForwarded(out []fwdElem, line string) []fwdElem {
	i := 0
	for {
		e, n, ok, empty := parseElement(line[i:])
		switch {
		case !ok:
			out = append(out, fwdElem{bad: true})
			j := strings.IndexByte(line[i:], ',')
			if j < 0 {
				return out
			}
			i += j + 1
			continue
		case !empty:
			out = append(out, e)
		}
		i += n
		if i >= len(line) {
			return out
		}
		i++ // the comma
	}
}

// parseElement parses one forwarded-element at the start of s, up to a
// top-level comma or the end. n is the length consumed (the comma's index).
//
//	forwarded-element = [ forwarded-pair ] *( ";" [ forwarded-pair ] )
//	forwarded-pair    = token "=" value
//	value             = token / quoted-string
func parseElement(s string) (e fwdElem, n int, ok, empty bool) {
	empty = true
	i := 0
	for {
		i = skipOWS(s, i)
		if i == len(s) || s[i] == ',' {
			return e, i, true, empty
		}
		empty = false
		if s[i] == ';' {
			i++
			continue
		}
		j := i
		for j < len(s) && isTchar(s[j]) {
			j++
		}
		if j == i || j == len(s) || s[j] != '=' {
			return e, 0, false, false
		}
		name := s[i:j]
		j++
		var val string
		if j < len(s) && s[j] == '"' {
			v, k, qok := parseQuoted(s, j)
			if !qok {
				return e, 0, false, false
			}
			val, j = v, k
		} else {
			k := j
			for k < len(s) && isTchar(s[k]) {
				k++
			}
			if k == j {
				return e, 0, false, false
			}
			val, j = s[j:k], k
		}
		if strings.EqualFold(name, "for") {
			if e.hasFor {
				return e, 0, false, false // a parameter occurs once per element
			}
			e.node, e.hasFor = val, true
		}
		i = skipOWS(s, j)
		if i < len(s) && s[i] != ';' && s[i] != ',' {
			return e, 0, false, false
		}
	}
}

// parseQuoted parses the quoted-string starting at s[i] == '"' and returns
// its content and the index after the closing quote.
func parseQuoted(s string, i int) (string, int, bool) {
	i++
	start, escaped := i, false
	for i < len(s) {
		switch c := s[i]; {
		case c == '"':
			v := s[start:i]
			if escaped {
				v = unescape(v)
			}
			return v, i + 1, true
		case c == '\\':
			if i+1 == len(s) || !isQuotedPairChar(s[i+1]) {
				return "", 0, false
			}
			escaped = true
			i += 2
		case c == '\t' || c == ' ' || c == 0x21 || 0x23 <= c && c <= 0x5b || 0x5d <= c && c <= 0x7e || c >= 0x80:
			i++
		default:
			return "", 0, false
		}
	}
	return "", 0, false // unterminated
}

func unescape(v string) string {
	var b strings.Builder
	b.Grow(len(v))
	for i := 0; i < len(v); i++ {
		if v[i] == '\\' {
			i++
		}
		b.WriteByte(v[i])
	}
	return b.String()
}

// parseNode parses an RFC 7239 node: an IPv4 address or a bracketed IPv6
// address, with an optional port. "unknown" and obfuscated identifiers are
// not usable.
//
//	node     = nodename [ ":" node-port ]
//	nodename = IPv4address / "[" IPv6address "]" / "unknown" / obfnode
func parseNode(s string) (netip.Addr, error) {
	if s == "" {
		return netip.Addr{}, ErrMalformed
	}
	if s[0] == '_' || s == "unknown" || strings.HasPrefix(s, "unknown:") {
		return netip.Addr{}, ErrUnusable
	}
	host, port := s, ""
	if s[0] == '[' {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return netip.Addr{}, ErrMalformed
		}
		host, port = s[1:end], s[end+1:]
	} else if i := strings.IndexByte(s, ':'); i >= 0 {
		host, port = s[:i], s[i:]
	}
	if port != "" && (port[0] != ':' || !validNodePort(port[1:])) {
		return netip.Addr{}, ErrMalformed
	}
	a, err := netip.ParseAddr(host)
	if err != nil || (s[0] == '[') != a.Is6() {
		return netip.Addr{}, ErrMalformed
	}
	a = normalise(a)
	if a.IsUnspecified() {
		return netip.Addr{}, ErrUnusable
	}
	return a, nil
}

// validNodePort accepts a port or an obfuscated port ("_abc").
func validNodePort(p string) bool {
	if p != "" && p[0] == '_' {
		if len(p) == 1 {
			return false
		}
		for i := 1; i < len(p); i++ {
			c := p[i]
			if !(isAlnum(c) || c == '.' || c == '_' || c == '-') {
				return false
			}
		}
		return true
	}
	return validPort(p)
}

func skipOWS(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	return i
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// isTchar reports whether c may appear in an HTTP token (RFC 9110).
func isTchar(c byte) bool {
	return isAlnum(c) || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

func isQuotedPairChar(c byte) bool {
	return c == '\t' || c == ' ' || 0x21 <= c && c <= 0x7e || c >= 0x80
}

func validToken(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isTchar(s[i]) {
			return false
		}
	}
	return s != ""
}

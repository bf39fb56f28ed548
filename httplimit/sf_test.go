package httplimit

import (
	"fmt"
	"strconv"
	"strings"
)

// A strict parser for RFC 9651 structured-field Lists, enough to check that
// the quota headers are well formed. It rejects anything the RFC rejects in
// the subset it covers (integers, decimals, strings, tokens, booleans, byte
// sequences; no inner lists, which the headers never use).

type sfItem struct {
	value  any // int64, float64, string, sfToken, bool, []byte
	params []sfParam
}

type sfToken string

type sfParam struct {
	key   string
	value any
}

func (it sfItem) param(key string) (any, bool) {
	for _, p := range it.params {
		if p.key == key {
			return p.value, true
		}
	}
	return nil, false
}

type sfParser struct {
	s string
	i int
}

func parseSFList(field string) ([]sfItem, error) {
	p := &sfParser{s: field}
	p.skipSP()
	var out []sfItem
	for p.i < len(p.s) {
		if p.s[p.i] == '(' {
			return nil, p.errorf("inner lists are not expected")
		}
		it, err := p.item()
		if err != nil {
			return nil, err
		}
		out = append(out, it)
		p.skipOWS()
		if p.i == len(p.s) {
			return out, nil
		}
		if p.s[p.i] != ',' {
			return nil, p.errorf("expected ','")
		}
		p.i++
		p.skipOWS()
		if p.i == len(p.s) {
			return nil, p.errorf("trailing comma")
		}
	}
	return out, nil
}

func (p *sfParser) errorf(format string, args ...any) error {
	return fmt.Errorf("sf: at %d of %q: %s", p.i, p.s, fmt.Sprintf(format, args...))
}

func (p *sfParser) skipSP() {
	for p.i < len(p.s) && p.s[p.i] == ' ' {
		p.i++
	}
}

func (p *sfParser) skipOWS() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *sfParser) item() (sfItem, error) {
	v, err := p.bareItem()
	if err != nil {
		return sfItem{}, err
	}
	it := sfItem{value: v}
	for p.i < len(p.s) && p.s[p.i] == ';' {
		p.i++
		p.skipSP()
		k, err := p.key()
		if err != nil {
			return sfItem{}, err
		}
		var pv any = true
		if p.i < len(p.s) && p.s[p.i] == '=' {
			p.i++
			if pv, err = p.bareItem(); err != nil {
				return sfItem{}, err
			}
		}
		for _, q := range it.params {
			if q.key == k {
				return sfItem{}, p.errorf("duplicate parameter %q", k)
			}
		}
		it.params = append(it.params, sfParam{k, pv})
	}
	return it, nil
}

func (p *sfParser) key() (string, error) {
	start := p.i
	if p.i == len(p.s) || !(p.s[p.i] >= 'a' && p.s[p.i] <= 'z' || p.s[p.i] == '*') {
		return "", p.errorf("bad key")
	}
	for p.i < len(p.s) && (p.s[p.i] >= 'a' && p.s[p.i] <= 'z' || p.s[p.i] >= '0' && p.s[p.i] <= '9' || strings.IndexByte("_-.*", p.s[p.i]) >= 0) {
		p.i++
	}
	return p.s[start:p.i], nil
}

func (p *sfParser) bareItem() (any, error) {
	if p.i == len(p.s) {
		return nil, p.errorf("missing item")
	}
	switch c := p.s[p.i]; {
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	case c == '"':
		return p.str()
	case c == '?':
		if p.i+1 < len(p.s) && (p.s[p.i+1] == '0' || p.s[p.i+1] == '1') {
			p.i += 2
			return p.s[p.i-1] == '1', nil
		}
		return nil, p.errorf("bad boolean")
	case c == ':':
		end := strings.IndexByte(p.s[p.i+1:], ':')
		if end < 0 {
			return nil, p.errorf("unterminated byte sequence")
		}
		b := p.s[p.i+1 : p.i+1+end]
		p.i += end + 2
		return []byte(b), nil
	case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '*':
		start := p.i
		for p.i < len(p.s) && (isTchar(p.s[p.i]) || p.s[p.i] == ':' || p.s[p.i] == '/') {
			p.i++
		}
		return sfToken(p.s[start:p.i]), nil
	}
	return nil, p.errorf("unexpected %q", p.s[p.i])
}

func isTchar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

func (p *sfParser) number() (any, error) {
	start := p.i
	if p.s[p.i] == '-' {
		p.i++
	}
	digits, dot := 0, -1
	for p.i < len(p.s) {
		c := p.s[p.i]
		if c >= '0' && c <= '9' {
			digits++
		} else if c == '.' && dot < 0 {
			dot = digits
		} else {
			break
		}
		p.i++
	}
	num := p.s[start:p.i]
	switch {
	case digits == 0:
		return nil, p.errorf("no digits")
	case dot < 0:
		if digits > 15 {
			return nil, p.errorf("integer too long")
		}
		n, err := strconv.ParseInt(num, 10, 64)
		return n, err
	case dot > 12 || digits-dot > 3 || digits == dot:
		return nil, p.errorf("bad decimal")
	}
	return strconv.ParseFloat(num, 64)
}

func (p *sfParser) str() (any, error) {
	p.i++
	var b strings.Builder
	for p.i < len(p.s) {
		c := p.s[p.i]
		p.i++
		switch {
		case c == '"':
			return b.String(), nil
		case c == '\\':
			if p.i == len(p.s) || (p.s[p.i] != '"' && p.s[p.i] != '\\') {
				return nil, p.errorf("bad escape")
			}
			b.WriteByte(p.s[p.i])
			p.i++
		case c < 0x20 || c > 0x7e:
			return nil, p.errorf("bad string character")
		default:
			b.WriteByte(c)
		}
	}
	return nil, p.errorf("unterminated string")
}

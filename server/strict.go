package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"
)

// strictCheck checks a request body against the shape of v (a pointer to
// the request struct) for what encoding/json lets through: a field name in
// another case ("Limiter"), a field or map key given twice (the last would
// silently win), and null as a map value (an attribute sent as null would
// be taken as absent, skipping the rules keyed on it). It returns nil for
// bodies that are not well-formed JSON: decoding them reports the syntax
// error. It scans the bytes once and allocates only to report a problem.
func strictCheck(body []byte, v any) *httpError {
	sc := scanner{b: body}
	p, _ := sc.value(shapeOf(reflect.TypeOf(v).Elem()))
	if p == nil {
		return nil
	}
	return badRequest(p.message())
}

// shape is what a request type allows where a JSON value stands.
type shape struct {
	kind   reflect.Kind // Struct, Map, Slice, or anything else for a scalar
	fields []field      // Struct: by exact JSON name
	elem   *shape       // Map and Slice: the values
	// what describes a map's values for errors: "a string".
	what string
}

type field struct {
	name  string
	shape *shape
}

var shapes sync.Map // reflect.Type → *shape

// shapeOf returns t's shape, built once per type.
func shapeOf(t reflect.Type) *shape {
	if s, ok := shapes.Load(t); ok {
		return s.(*shape)
	}
	s, _ := shapes.LoadOrStore(t, buildShape(t))
	return s.(*shape)
}

func buildShape(t reflect.Type) *shape {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	s := &shape{kind: t.Kind()}
	switch t.Kind() {
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if f.IsExported() && name != "" && name != "-" {
				s.fields = append(s.fields, field{name, buildShape(f.Type)})
			}
		}
	case reflect.Map, reflect.Slice, reflect.Array:
		s.kind = reflect.Map
		if t.Kind() != reflect.Map {
			s.kind = reflect.Slice
		}
		s.elem = buildShape(t.Elem())
		switch t.Elem().Kind() {
		case reflect.String:
			s.what = "a string"
		case reflect.Int, reflect.Int64:
			s.what = "a whole number"
		default:
			s.what = "a value"
		}
	}
	return s
}

// strictProblem is a problem found at a path, built while unwinding.
type strictProblem struct {
	path []string // innermost first
	msg  func(path string) string
}

func (p *strictProblem) at(key string) *strictProblem {
	p.path = append(p.path, key)
	return p
}

func (p *strictProblem) message() string {
	var b strings.Builder
	for i := len(p.path) - 1; i >= 0; i-- {
		k := p.path[i]
		if b.Len() > 0 && !strings.HasPrefix(k, "[") {
			b.WriteByte('.')
		}
		b.WriteString(k)
	}
	return p.msg(b.String())
}

// scanner walks JSON bytes. Its methods return ok false at the first byte
// that is not well-formed JSON.
type scanner struct {
	b     []byte
	i     int
	depth int
}

// maxDepth bounds nesting: no request nests deeper, and a body of nested
// lists must not recurse 64 Ki deep. Deeper bodies are left to decoding.
const maxDepth = 32

// anything is the shape of a value no request field describes: decoding
// judges it.
var anything = &shape{}

func (sc *scanner) ws() {
	for sc.i < len(sc.b) {
		switch sc.b[sc.i] {
		case ' ', '\t', '\n', '\r':
			sc.i++
		default:
			return
		}
	}
}

// peek returns the next byte after whitespace, or 0 at the end.
func (sc *scanner) peek() byte {
	sc.ws()
	if sc.i >= len(sc.b) {
		return 0
	}
	return sc.b[sc.i]
}

// value reads one value that s describes.
func (sc *scanner) value(s *shape) (*strictProblem, bool) {
	if sc.depth++; sc.depth > maxDepth {
		return nil, false
	}
	defer func() { sc.depth-- }()
	switch sc.peek() {
	case '{':
		return sc.object(s)
	case '[':
		return sc.list(s)
	case '"':
		_, _, ok := sc.str()
		return nil, ok
	case 0:
		return nil, false
	}
	return nil, sc.literal()
}

// object reads an object; keys are checked against s when it is a struct,
// and values against s.elem when it is a map.
func (sc *scanner) object(s *shape) (*strictProblem, bool) {
	sc.i++ // '{'
	var seenArr [16][]byte
	seen := seenArr[:0]
	if sc.peek() == '}' {
		sc.i++
		return nil, true
	}
	for {
		if sc.peek() != '"' {
			return nil, false
		}
		raw, escaped, ok := sc.str()
		if !ok {
			return nil, false
		}
		key := raw
		if escaped {
			var k string
			if json.Unmarshal(sc.b[sc.i-len(raw)-2:sc.i], &k) != nil {
				return nil, false
			}
			key = []byte(k)
		}
		if sc.peek() != ':' {
			return nil, false
		}
		sc.i++
		for _, k := range seen {
			if bytes.Equal(k, key) {
				return &strictProblem{path: []string{string(key)}, msg: func(p string) string { return p + ": given twice" }}, true
			}
		}
		seen = append(seen, key)
		child := anything
		switch s.kind {
		case reflect.Struct:
			child = nil
			for _, f := range s.fields {
				if string(key) == f.name {
					child = f.shape
					break
				}
			}
			if child == nil {
				return unknownField(s, string(key)), true
			}
		case reflect.Map:
			child = s.elem
			if sc.peek() == 'n' && bytes.HasPrefix(sc.b[sc.i:], []byte("null")) {
				what := s.what
				return &strictProblem{path: []string{string(key)}, msg: func(p string) string {
					return p + ": must be " + what + ", got null"
				}}, true
			}
		}
		if p, ok := sc.value(child); p != nil || !ok {
			if p != nil {
				p.at(string(key))
			}
			return p, ok
		}
		switch sc.peek() {
		case ',':
			sc.i++
		case '}':
			sc.i++
			return nil, true
		default:
			return nil, false
		}
	}
}

// list reads a list whose items s.elem describes (when s is a list).
func (sc *scanner) list(s *shape) (*strictProblem, bool) {
	sc.i++ // '['
	elem := anything
	if s.kind == reflect.Slice {
		elem = s.elem
	}
	if sc.peek() == ']' {
		sc.i++
		return nil, true
	}
	for n := 0; ; n++ {
		if p, ok := sc.value(elem); p != nil || !ok {
			if p != nil {
				p.at(fmt.Sprintf("[%d]", n))
			}
			return p, ok
		}
		switch sc.peek() {
		case ',':
			sc.i++
		case ']':
			sc.i++
			return nil, true
		default:
			return nil, false
		}
	}
}

// str reads a string and returns its raw contents (between the quotes)
// and whether they hold an escape.
func (sc *scanner) str() (raw []byte, escaped, ok bool) {
	start := sc.i + 1
	for i := start; i < len(sc.b); i++ {
		switch sc.b[i] {
		case '\\':
			escaped = true
			i++
		case '"':
			sc.i = i + 1
			return sc.b[start:i], escaped, true
		}
	}
	return nil, false, false
}

// literal reads a number, true, false or null.
func (sc *scanner) literal() bool {
	start := sc.i
	for sc.i < len(sc.b) {
		c := sc.b[sc.i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || c == '-' || c == '+' || c == '.' || c == 'E') {
			break
		}
		sc.i++
	}
	return sc.i > start
}

// unknownField explains a key no field of s has, naming the field it would
// be in another case.
func unknownField(s *shape, key string) *strictProblem {
	hint := ""
	for _, f := range s.fields {
		if strings.EqualFold(f.name, key) {
			hint = fmt.Sprintf(" (field names are case-sensitive: %q)", f.name)
		}
	}
	return &strictProblem{path: []string{key}, msg: func(p string) string {
		return fmt.Sprintf("unknown field %q%s; see docs/http-api.md", p, hint)
	}}
}

package config

import (
	"fmt"
	"strings"
)

// Error is one problem in a configuration, at a place in its file.
type Error struct {
	File   string
	Line   int // 1-based; 0 when unknown
	Column int // 1-based; 0 when unknown
	// Field is the path of the offending key, such as
	// "limiters[0].rules[1].window"; "" for problems of the file as a
	// whole.
	Field string
	Msg   string
}

// Error returns "file:line:column: field: message". The column is left out
// when unknown (YAML syntax errors), line and column when the problem is the
// file as a whole.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
		if e.Column > 0 {
			fmt.Fprintf(&b, ":%d", e.Column)
		}
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// ErrorList is every problem found in a configuration, in file order. Parse
// and Load return one as their error when the configuration is invalid.
type ErrorList []*Error

// Error returns the errors one per line.
func (l ErrorList) Error() string {
	s := make([]string, len(l))
	for i, e := range l {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

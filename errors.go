package floodgate

import (
	"errors"
	"fmt"
)

// ConfigError reports a misconfigured limiter, naming the limiter, the rule
// (if any) and the field at fault.
type ConfigError struct {
	Limiter string
	Rule    string // "" for limiter-level fields and for a rule without a name
	// RuleIndex is the position (from 0) of the rule at fault among the
	// rules given to New, or -1 when the error is about the limiter.
	RuleIndex int
	Field     string
	Reason    string
}

// limiterError is a ConfigError about the limiter itself, not a rule.
func limiterError(limiter, field, reason string) *ConfigError {
	return &ConfigError{Limiter: limiter, RuleIndex: -1, Field: field, Reason: reason}
}

// Error returns, for example,
// `floodgate: limiter "api" rule "per-user": window: must be at least 1ms, got 0s`.
func (e *ConfigError) Error() string {
	where := fmt.Sprintf("limiter %q", e.Limiter)
	field := e.Field
	switch {
	case e.Rule != "":
		where += fmt.Sprintf(" rule %q", e.Rule)
	case e.RuleIndex >= 0:
		field = fmt.Sprintf("rules[%d].%s", e.RuleIndex, field) // the rule has no name
	}
	if field != "" {
		where += ": " + field
	}
	return "floodgate: " + where + ": " + e.Reason
}

// ErrNotOneKey is the Err of AllowKey's decision on a limiter whose rules
// key on several attributes, composite keys or a KeyFunc: the key's
// attribute is unknown. Such a limiter is asked with Allow.
var ErrNotOneKey = errors.New("floodgate: AllowKey needs rules keyed on one attribute at most; use Allow")

// KeyError is the Err of a decision denied under Options.RequireKeys: the
// request has no key for one of the limiter's keyed rules.
type KeyError struct {
	Limiter string
	Rule    string
	// Attributes are the rule's key attributes, one or more of which the
	// request lacks (or has empty); none for a KeyFunc that returned "".
	Attributes []string
}

// Error returns, for example, `floodgate: limiter "api" rule "per-user":
// the request has no key (attributes [user])`.
func (e *KeyError) Error() string {
	return fmt.Sprintf("floodgate: limiter %q rule %q: the request has no key (attributes %v)", e.Limiter, e.Rule, e.Attributes)
}

// ErrForeignTicket is returned by Refund for a ticket issued by another
// limiter.
var ErrForeignTicket = errors.New("floodgate: ticket belongs to another limiter")

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }

func sprintfErr(format string, args ...any) error { return fmt.Errorf(format, args...) }

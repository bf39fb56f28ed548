package floodgate

import (
	"errors"
	"fmt"
)

// ConfigError reports a misconfigured limiter, naming the limiter, the rule
// (if any) and the field at fault.
type ConfigError struct {
	Limiter string
	Rule    string // "" for limiter-level fields
	Field   string
	Reason  string
}

// Error returns, for example,
// `floodgate: limiter "api" rule "per-user": window: must be at least 1ms, got 0s`.
func (e *ConfigError) Error() string {
	where := fmt.Sprintf("limiter %q", e.Limiter)
	if e.Rule != "" {
		where += fmt.Sprintf(" rule %q", e.Rule)
	}
	if e.Field != "" {
		where += ": " + e.Field
	}
	return "floodgate: " + where + ": " + e.Reason
}

// ErrBreakerOpen is the store error of decisions answered by the failure
// policy because the circuit breaker is open.
var ErrBreakerOpen = errors.New("floodgate: store circuit breaker open")

// ErrForeignTicket is returned by Refund for a ticket issued by another
// limiter.
var ErrForeignTicket = errors.New("floodgate: ticket belongs to another limiter")

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }

func sprintfErr(format string, args ...any) error { return fmt.Errorf(format, args...) }

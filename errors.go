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

func (e *ConfigError) Error() string {
	where := "limiter " + quoteName(e.Limiter)
	if e.Rule != "" || e.Field != "" && e.Field != "name" {
		if e.Rule != "" {
			where += " rule " + quoteName(e.Rule)
		}
	}
	if e.Field != "" {
		where += ": " + e.Field
	}
	return "floodgate: " + where + ": " + e.Reason
}

func quoteName(s string) string { return fmt.Sprintf("%q", s) }

// ErrBreakerOpen is the store error of decisions answered by the failure
// policy because the circuit breaker is open.
var ErrBreakerOpen = errors.New("floodgate: store circuit breaker open")

// ErrForeignTicket is returned by Refund for a ticket issued by another
// limiter.
var ErrForeignTicket = errors.New("floodgate: ticket belongs to another limiter")

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }

func sprintfErr(format string, args ...any) error { return fmt.Errorf(format, args...) }

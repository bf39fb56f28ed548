package floodgate_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

func TestOnly(t *testing.T) {
	perMinute := func(name string, limit int64) floodgate.Rule {
		return floodgate.Rule{Name: name, Algorithm: floodgate.SlidingWindow, Limit: limit, Window: time.Minute, Key: []string{"user"}}
	}
	l, _ := memLimiter(t, []floodgate.Rule{perMinute("rpm", 5), perMinute("tpm", 100)}, nil)
	if _, err := l.Only(); err == nil {
		t.Error("Only() with no rule names succeeded")
	}
	if _, err := l.Only("tpm", "nope"); err == nil || !strings.Contains(err.Error(), `no rule "nope"`) {
		t.Errorf("Only with an unknown rule: %v", err)
	}
	tokens, err := l.Only("tpm")
	if err != nil {
		t.Fatal(err)
	}
	requests, err := l.Only("rpm")
	if err != nil {
		t.Fatal(err)
	}
	if got := tokens.Name(); got != "test" {
		t.Errorf("view name %q, want test", got)
	}
	if _, err := tokens.Record(context.Background(), user("alice"), 40); err != nil {
		t.Fatal(err)
	}
	// The view's record moved the limiter's tpm rule and not its rpm rule.
	if got := peek(t, tokens, user("alice")).Remaining; got != 60 {
		t.Errorf("tpm: remaining %d, want 60", got)
	}
	if got := peek(t, requests, user("alice")).Remaining; got != 5 {
		t.Errorf("rpm: remaining %d, want 5", got)
	}
}

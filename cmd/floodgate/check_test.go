package main

import (
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate/server"
)

// A token bucket's remaining units count against its burst, so the summary
// line and the table say "199 of 200", not "199 of 100" (its rate).
func TestPrintDecisionShowsCapacity(t *testing.T) {
	d := &server.DecisionResponse{Allowed: true, Rule: "per-org", Limit: 100, Remaining: 199, ResetAfterMS: 10,
		Rules: []server.RuleResponse{
			{Name: "per-user", Allowed: true, Limit: 20, Capacity: 20, Remaining: 19, ResetAfterMS: 1000},
			{Name: "per-org", Allowed: true, Limit: 100, Capacity: 200, Remaining: 199, ResetAfterMS: 10},
		}}
	var out strings.Builder
	printDecision(&out, "api", d)
	got := out.String()
	if !strings.Contains(got, "binding rule per-org: 199 of 200 left") {
		t.Errorf("summary does not count against the burst:\n%s", got)
	}
	if !strings.Contains(got, "CAPACITY") || !strings.Contains(got, "per-org   allowed  100    200       199") {
		t.Errorf("table has no capacity column with the burst:\n%s", got)
	}
}

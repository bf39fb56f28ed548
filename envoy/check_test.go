package envoy_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/envoy"
)

// checkDomain nests user under tenant and a plan under user, and has a
// per-address limit, a block list and an unlimited path.
const checkDomain = `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: remote_address
    value: 10.6.6.6
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: path
    value: /health
    rate_limit: {unlimited: true}
  - key: tenant
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 1}
  - key: user
    descriptors:
      - key: plan
        value: gold
        rate_limit: {unit: minute, requests_per_unit: 5}
`

// Decide takes a request's attributes as one descriptor's entries, in the
// order the domain nests their keys, and decides it as ShouldRateLimit
// does: the two share the counters.
func TestDecideAttributesAsDescriptor(t *testing.T) {
	f, err := envoy.ParseFile("edge.yaml", []byte(checkDomain))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := envoy.NewConfig(f)
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, cfg, nil, nil)
	ctx := context.Background()
	decide := func(attrs floodgate.Attributes, cost int64) floodgate.Outcome {
		t.Helper()
		o, err := h.svc.Decide(ctx, "edge", floodgate.ModeConsume, attrs, cost)
		if err != nil {
			t.Fatalf("Decide(%v): %v", attrs, err)
		}
		return o
	}

	// One address: gRPC and Decide count together.
	h.check(h.ask("edge", 0, desc("remote_address", "10.0.0.1")), ok, want{ok, 2, minute, 1, 30e9})
	o := decide(floodgate.Attributes{"remote_address": "10.0.0.1"}, 1)
	if !o.Allowed || o.Rule != "remote_address" || o.Remaining != 0 || !o.Ticket().Valid() {
		t.Errorf("second request: %+v, want admitted by remote_address with nothing left and a ticket", o.Decision)
	}
	h.check(h.ask("edge", 0, desc("remote_address", "10.0.0.1")), over, want{over, 2, minute, 0, 30e9})
	if o := decide(floodgate.Attributes{"remote_address": "10.0.0.1"}, 0); o.Allowed {
		t.Errorf("check at the limit: %+v, want denied", o.Decision)
	}
	if o := decide(floodgate.Attributes{"remote_address": "10.0.0.1"}, 1); o.Allowed || o.Reason != floodgate.ReasonLimit {
		t.Errorf("over the limit: %+v, want denied by the limit", o.Decision)
	}

	// A refused hit is charged to the fixed window that refused it, as
	// ShouldRateLimit charges it.
	if o := decide(floodgate.Attributes{"remote_address": "10.0.0.3"}, 5); o.Allowed {
		t.Errorf("5 units against a limit of 2: %+v, want denied", o.Decision)
	}
	h.check(h.ask("edge", 0, desc("remote_address", "10.0.0.3")), over, want{over, 2, minute, 0, 30e9})

	// The tree decides the order: tenant then user, or user then tenant.
	if o := decide(floodgate.Attributes{"user": "ann", "tenant": "globex"}, 1); !o.Allowed || o.Rule != "tenant.user" {
		t.Errorf("tenant, user: %+v, want admitted by tenant.user", o.Decision)
	}
	h.check(h.ask("edge", 0, desc("tenant", "globex", "user", "ann")), over, want{over, 1, minute, 0, 30e9})
	if o := decide(floodgate.Attributes{"plan": "gold", "user": "ann"}, 1); !o.Allowed || o.Rule != "user.plan_gold" || o.Remaining != 4 {
		t.Errorf("user, plan gold: %+v, want admitted by user.plan_gold with 4 left", o.Decision)
	}

	// A block list refuses for good; an unlimited path and attributes that
	// match nothing are admitted by no rule.
	if o := decide(floodgate.Attributes{"remote_address": "10.6.6.6"}, 1); o.Allowed || !o.Never || o.Rule != "remote_address_10.6.6.6" {
		t.Errorf("blocked address: %+v, want refused for good", o.Decision)
	}
	for _, attrs := range []floodgate.Attributes{{"path": "/health"}, {"path": "/other"}, {"remote_address": "10.0.0.2", "path": "/x"}, {}} {
		if o := decide(attrs, 1); !o.Allowed || o.Rule != "" {
			t.Errorf("%v: %+v, want admitted by no rule", attrs, o.Decision)
		}
	}
	if _, err := h.svc.Decide(ctx, "nowhere", floodgate.ModeConsume, nil, 1); !errors.Is(err, envoy.ErrUnknownDomain) {
		t.Errorf("unknown domain: %v", err)
	}
}

// Attributes that two nestings of the domain's keys take to two limits
// are an error that names both.
func TestDecideAmbiguousOrder(t *testing.T) {
	f, err := envoy.ParseFile("d.yaml", []byte(`domain: d
descriptors:
  - key: a
    descriptors: [{key: b, rate_limit: {unit: minute, requests_per_unit: 1}}]
  - key: b
    descriptors: [{key: a, rate_limit: {unit: minute, requests_per_unit: 1}}]
`))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := envoy.NewConfig(f)
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, cfg, nil, nil)
	_, err = h.svc.Decide(context.Background(), "d", floodgate.ModeConsume, floodgate.Attributes{"a": "1", "b": "2"}, 1)
	if err == nil || !strings.Contains(err.Error(), "(a, b) for the limit a.b and (b, a) for b.a") {
		t.Errorf("error = %v, want one naming both orders", err)
	}
}

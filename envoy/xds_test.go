package envoy_test

import (
	"strings"
	"testing"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-go/floodgate/envoy"
)

func resources(t *testing.T, cs ...*rlsconfv3.RateLimitConfig) []*anypb.Any {
	t.Helper()
	var out []*anypb.Any
	for _, c := range cs {
		a, err := anypb.New(c)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, a)
	}
	return out
}

// A resource shaped as Envoy Gateway sends them reads as the file that
// says the same.
func TestLoadResources(t *testing.T) {
	res := resources(t, &rlsconfv3.RateLimitConfig{
		Name:   "default/eg/http",
		Domain: "default/eg/http",
		Descriptors: []*rlsconfv3.RateLimitDescriptor{{
			Key: "httproute/default/api/rule/0/match/0", Value: "httproute/default/api/rule/0/match/0",
			Descriptors: []*rlsconfv3.RateLimitDescriptor{
				{Key: "rule-0-match-0", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: 3}},
				{Key: "rule-0-match-1", Value: "/v*/users", ShadowMode: true, RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit(7), RequestsPerUnit: 9, Name: "weekly"}},
				{Key: "rule-0-match-2", RateLimit: &rlsconfv3.RateLimitPolicy{Unlimited: true, Replaces: []*rlsconfv3.RateLimitReplace{{Name: "weekly"}}}},
			},
		}},
	})
	cfg, err := envoy.LoadResources(res)
	if err != nil {
		t.Fatal(err)
	}
	file, err := envoy.ParseFile("eg.yaml", []byte(`
domain: default/eg/http
descriptors:
  - key: httproute/default/api/rule/0/match/0
    value: httproute/default/api/rule/0/match/0
    descriptors:
      - key: rule-0-match-0
        rate_limit: {unit: minute, requests_per_unit: 3}
      - key: rule-0-match-1
        value: /v*/users
        shadow_mode: true
        rate_limit: {unit: week, requests_per_unit: 9, name: weekly}
      - key: rule-0-match-2
        rate_limit: {unlimited: true, replaces: [{name: weekly}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	want, err := envoy.NewConfig(file)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cfg.Dump(), want.Dump(); got != want {
		t.Errorf("from xDS:\n%s\nfrom the file:\n%s", got, want)
	}
	if got, want := cfg.File("default/eg/http"), "xds:default/eg/http"; got != want {
		t.Errorf("File = %q, want %q", got, want)
	}
}

// A push is checked as a directory is: every mistake of every resource,
// by resource and field.
func TestLoadResourcesErrors(t *testing.T) {
	quota := &rlsconfv3.RateLimitDescriptor{Key: "q", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_SECOND, RequestsPerUnit: 1}}
	// quota_mode (field 7) of a newer proto, unknown to this one.
	quota.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 7, protowire.VarintType), 1))
	res := resources(t,
		&rlsconfv3.RateLimitConfig{Name: "a", Domain: "shared", Descriptors: []*rlsconfv3.RateLimitDescriptor{
			{Key: "k", RateLimit: &rlsconfv3.RateLimitPolicy{RequestsPerUnit: 5}},
			{Key: "", Value: "v"},
			quota,
		}},
		&rlsconfv3.RateLimitConfig{Name: "b", Domain: "ok", Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: "k"}, {Key: "k"}}},
		&rlsconfv3.RateLimitConfig{Name: "c"},
	)
	wrong, err := anypb.New(wrapperspb.String("not a config"))
	if err != nil {
		t.Fatal(err)
	}
	res = append(res, wrong)
	_, err = envoy.LoadResources(res)
	if err == nil {
		t.Fatal("an invalid push was accepted")
	}
	for _, want := range []string{
		"xds:a: descriptors[0].rate_limit.unit: missing",
		"xds:a: descriptors[1].key: must not be empty",
		"xds:a: descriptors[2].quota_mode: not supported",
		`xds:b: descriptors[1]: duplicate descriptor "k"`,
		"xds:c: domain: must not be empty",
		`xDS resource 3 has type "type.googleapis.com/google.protobuf.StringValue"`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q:\n%v", want, err)
		}
	}
	_, err = envoy.LoadResources(resources(t,
		&rlsconfv3.RateLimitConfig{Name: "one", Domain: "d"},
		&rlsconfv3.RateLimitConfig{Name: "two", Domain: "d"}))
	if err == nil || !strings.Contains(err.Error(), `xds:two: domain: duplicate domain "d" (also in xds:one)`) {
		t.Errorf("two resources of one domain: %v", err)
	}
	if cfg, err := envoy.LoadResources(nil); err != nil || len(cfg.Domains()) != 0 {
		t.Errorf("an empty push: %v %v", cfg.Domains(), err)
	}
}

// FuzzLoadResources feeds arbitrary bytes as a pushed resource: a push is
// refused or loaded, never a panic.
func FuzzLoadResources(f *testing.F) {
	for _, c := range []*rlsconfv3.RateLimitConfig{
		{Name: "a", Domain: "a", Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: "k", Value: "v*", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_SECOND, RequestsPerUnit: 3}}}},
		{Domain: "b", Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: "k", RateLimit: &rlsconfv3.RateLimitPolicy{Unlimited: true, Name: "n", Replaces: []*rlsconfv3.RateLimitReplace{{Name: "m"}}}}}},
	} {
		a, err := anypb.New(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(a.GetValue())
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := envoy.LoadResources([]*anypb.Any{{TypeUrl: envoy.ResourceType, Value: data}})
		if err == nil {
			cfg.Dump()
		}
	})
}

package envoy_test

import (
	"testing"

	"github.com/floodgate-go/floodgate/envoy"
)

func TestDump(t *testing.T) {
	cfg, err := envoy.NewConfig(mustParse(t, "basic.yaml", `domain: basic
descriptors:
  - key: key1
    rate_limit: {unit: second, requests_per_unit: 50}
  - key: k
    value: v
    descriptors:
      - key: sub
        shadow_mode: true
        rate_limit: {unit: hour, requests_per_unit: 5, unit_multiplier: 2}
  - key: free
    rate_limit: {unlimited: true}
  - key: bucket
    rate_limit: {unit: minute, requests_per_unit: 10, floodgate: {algorithm: token_bucket, burst: 20}}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := `basic.bucket: unit=MINUTE requests_per_unit=10, shadow_mode: false, quota_mode: false, algorithm: token_bucket, burst: 20
basic.free: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, quota_mode: false, unlimited: true
basic.k_v.sub: unit=HOUR requests_per_unit=5, shadow_mode: true, quota_mode: false, unit_multiplier: 2
basic.key1: unit=SECOND requests_per_unit=50, shadow_mode: false, quota_mode: false
`
	if got := cfg.Dump(); got != want {
		t.Errorf("Dump() =\n%s\nwant\n%s", got, want)
	}
	var none *envoy.Config
	if none.Dump() != "" {
		t.Error("nil Config dumps something")
	}
}

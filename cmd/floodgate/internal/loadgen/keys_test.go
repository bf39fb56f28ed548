package loadgen

import (
	"strconv"
	"strings"
	"testing"
)

func TestKeyPickerDistributions(t *testing.T) {
	const keys, draws = 100, 20000
	count := func(d Distribution) map[string]int {
		cfg := Config{Keys: keys, Distribution: d, KeyPrefix: "k", ZipfS: 1.1}
		p := newKeyPicker(&cfg, 0)
		seen := map[string]int{}
		for range draws {
			k := p.nextString()
			n, err := strconv.Atoi(strings.TrimPrefix(k, "k"))
			if !strings.HasPrefix(k, "k") || err != nil || n < 0 || n >= keys {
				t.Fatalf("%s drew %q, want k0..k%d", d, k, keys-1)
			}
			seen[k]++
		}
		return seen
	}
	u := count(Uniform)
	if len(u) != keys {
		t.Errorf("uniform drew %d distinct keys of %d", len(u), keys)
	}
	for k, n := range u {
		if n < draws/keys/2 || n > draws/keys*2 {
			t.Errorf("uniform drew %s %d times, want about %d", k, n, draws/keys)
		}
	}
	z := count(Zipf)
	if z["k0"] < draws/10 || z["k0"] <= z["k1"] || z["k1"] <= z["k50"] {
		t.Errorf("zipf drew k0 %d, k1 %d, k50 %d times; want k0 hot and decreasing", z["k0"], z["k1"], z["k50"])
	}
}

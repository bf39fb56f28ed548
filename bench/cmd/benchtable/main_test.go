package main

import (
	"strings"
	"testing"
)

const sampleOutput = `goos: linux
BenchmarkCompare/floodgate/token_bucket/serial-2   100  100.0 ns/op  90 cpu-ns/op  0 B/op  0 allocs/op
BenchmarkCompare/floodgate/token_bucket/serial-2   100  300.0 ns/op  110 cpu-ns/op  0 B/op  0 allocs/op
BenchmarkCompare/peer/serial-2                     100  400.0 ns/op  300 cpu-ns/op  32 B/op  2 allocs/op
BenchmarkCompare/floodgate/token_bucket/parallel-2 100  50.0 ns/op   0 B/op  0 allocs/op
BenchmarkDenied-2                                  100  70.0 ns/op   0 B/op  0 allocs/op
BenchmarkAlgorithm/gcra-2                          100  80.0 ns/op   0 B/op  0 allocs/op
PASS
`

func TestTable(t *testing.T) {
	runs, order, err := parse(strings.NewReader(sampleOutput))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(order), 5; got != want {
		t.Fatalf("results = %d, want %d", got, want)
	}
	var b strings.Builder
	write(&b, runs, order, "floodgate/token_bucket")
	out := b.String()
	for _, want := range []string{
		"**serial**",
		"| **floodgate/token_bucket** | 200.0 | 100–300 | 100 | 0 | 0 | 1.00x | 1.00x | 2 |",
		"| peer | 400.0 | 400–400 | 300 | 32 | 2 | 2.00x | 3.00x | 1 |",
		"**parallel**",
		"| Denied | 70.0 |",
		"| Algorithm/gcra | 80.0 |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

package gateway_test

import (
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate/gateway"
	"github.com/floodgate-go/floodgate/internal/algo"
)

var tokenWeights = gateway.Weights{"input": 1, "output": 3}

func TestWeightsCost(t *testing.T) {
	for _, tt := range []struct {
		usage gateway.Usage
		want  int64
		err   string
	}{
		{usage: gateway.Usage{"input": 2, "output": 3}, want: 11},
		{usage: gateway.Usage{"input": 7}, want: 7},
		{usage: gateway.Usage{}, want: 0},
		{usage: nil, want: 0},
		{usage: gateway.Usage{"input": 1, "audio": 4}, err: `unknown token class "audio"`},
		{usage: gateway.Usage{"output": -1}, err: `token class "output": count -1 must not be negative`},
		{usage: gateway.Usage{"output": 1 << 52}, err: "weighted cost exceeds"},
		// The bound is the largest cost a decision carries.
		{usage: gateway.Usage{"input": algo.MaxUnits}, want: algo.MaxUnits},
		{usage: gateway.Usage{"input": algo.MaxUnits + 1}, err: "weighted cost exceeds"},
	} {
		got, err := tokenWeights.Cost(tt.usage)
		switch {
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("Cost(%v): error %v, want one containing %q", tt.usage, err, tt.err)
		case tt.err == "" && (err != nil || got != tt.want):
			t.Errorf("Cost(%v) = %d, %v; want %d", tt.usage, got, err, tt.want)
		}
	}
	if err := (gateway.Weights{"output": -3}).Validate(); err == nil {
		t.Error("a negative weight validated")
	}
	if err := tokenWeights.Validate(); err != nil {
		t.Error(err)
	}
}

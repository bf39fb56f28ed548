package loadgen

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	ok := Config{Target: HTTP, Addr: "127.0.0.1:1", Concurrency: 1, Duration: time.Second}
	if err := ok.Validate(); err != nil {
		t.Fatalf("Validate(%+v) = %v, want nil", ok, err)
	}
	tests := []struct {
		name   string
		modify func(*Config)
		want   string
	}{
		{"target", func(c *Config) { c.Target = "udp" }, `loadgen: unknown target "udp" (want http or grpc)`},
		{"addr", func(c *Config) { c.Addr = "" }, "loadgen: addr is required"},
		{"keys", func(c *Config) { c.Keys = -1 }, "loadgen: keys must be > 0, got -1"},
		{"dist", func(c *Config) { c.Distribution = "pareto" }, `loadgen: unknown key distribution "pareto" (want uniform or zipf)`},
		{"zipf-s", func(c *Config) { c.Distribution, c.ZipfS = Zipf, 0.5 }, "loadgen: zipf exponent must be > 1, got 0.5"},
		{"cost", func(c *Config) { c.Cost = -2 }, "loadgen: cost must be between 1 and 4294967295, got -2"},
		{"rate", func(c *Config) { c.Rate = -1 }, "loadgen: rate must be a finite number ≥ 0, got -1"},
		{"neither", func(c *Config) { c.Concurrency = 0 }, "loadgen: set a rate (open model) or a concurrency (closed model)"},
		{"duration", func(c *Config) { c.Duration = -time.Second }, "loadgen: duration must be > 0, got -1s"},
		{"warmup", func(c *Config) { c.Warmup = -time.Second }, "loadgen: warmup must be ≥ 0, got -1s"},
		{"requests", func(c *Config) { c.Requests = -1 }, "loadgen: requests must be ≥ 0, got -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.modify(&c)
			err := c.Validate()
			if err == nil || err.Error() != tt.want {
				t.Errorf("Validate() = %v, want %q", err, tt.want)
			}
			if _, err := Run(t.Context(), c); err == nil || err.Error() != tt.want {
				t.Errorf("Run() = %v, want %q", err, tt.want)
			}
		})
	}
	// Every problem is reported at once.
	err := Config{}.Validate()
	if err == nil || !strings.Contains(err.Error(), "addr is required") || !strings.Contains(err.Error(), "set a rate") {
		t.Errorf("Validate() of the zero Config = %v, want several problems", err)
	}
}

func TestRegisterFlags(t *testing.T) {
	var c Config
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.RegisterFlags(fs)
	err := fs.Parse([]string{"-target", "grpc", "-addr", "127.0.0.1:8081", "-rate", "1000",
		"-duration", "5s", "-keys", "10", "-dist", "zipf", "-domain", "edge"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Target != GRPC || c.Addr != "127.0.0.1:8081" || c.Rate != 1000 || c.Duration != 5*time.Second ||
		c.Keys != 10 || c.Distribution != Zipf || c.Domain != "edge" || c.Attribute != DefaultAttribute {
		t.Errorf("parsed %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("Validate() = %v", err)
	}
	if err := fs.Parse([]string{"-target", "udp"}); err == nil {
		t.Errorf("parsing -target udp succeeded, want an error")
	}
}

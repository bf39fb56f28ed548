package config

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/clocktest"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/guard"
	"github.com/floodgate-go/floodgate/store/memory"
)

// TestInvalid pins the exact messages of invalid configurations: each names
// the file, line, column and field.
func TestInvalid(t *testing.T) {
	tests := []struct {
		file string
		want []string
	}{
		{"align_on_bucket.yaml", []string{
			"align_on_bucket.yaml:7:16: limiters[0].rules[0].align: applies to fixed_window only, not token_bucket",
		}},
		{"bad_algorithm.yaml", []string{
			"bad_algorithm.yaml:6:20: limiters[0].rules[0].algorithm: unknown algorithm \"leaky_bucket\" (want one of fixed_window, sliding_window, token_bucket, gcra, concurrency)",
		}},
		{"reservable.yaml", []string{
			"reservable.yaml:5:98: limiters[0].rules[1].reservable: applies to fixed_window only, not token_bucket",
		}},
		{"bad_duration.yaml", []string{
			"bad_duration.yaml:7:17: limiters[0].rules[0].window: must be a duration with a unit, such as 500ms, 1s, 15m or 24h, got \"10\"",
		}},
		{"bad_limiter_name.yaml", []string{
			"bad_limiter_name.yaml:2:11: limiters[0].name: may hold only letters, digits, '.', '_' and '-'",
		}},
		{"breaker.yaml", []string{
			"breaker.yaml:1:32: breaker.ratio: must be a number above 0 and at most 1, got \"1.5\"",
			"breaker.yaml:1:45: breaker.window: must be at least 10ms, got 5ms",
			"breaker.yaml:4:14: limiters[0].breaker.max_cooldown: must not be shorter than cooldown (2s), got 1s",
		}},
		{"buckets.yaml", []string{
			"buckets.yaml:8:18: limiters[0].rules[0].buckets: window 1s does not divide into 7 buckets of whole microseconds",
		}},
		{"burst_on_fixed.yaml", []string{
			"burst_on_fixed.yaml:8:16: limiters[0].rules[0].burst: applies to token_bucket and gcra only, not fixed_window",
		}},
		{"grant.yaml", []string{
			"grant.yaml:8:16: limiters[0].rules[0].grant: needs store.redis: grants share a Redis count among instances, and a memory store answers in-process already",
		}},
		{"grant_algorithm.yaml", []string{
			"grant_algorithm.yaml:11:16: limiters[0].rules[0].grant: applies to fixed_window and token_bucket only, not gcra",
		}},
		{"duplicate_key.yaml", []string{
			"duplicate_key.yaml:3:5: limiters[0].name: duplicate key",
		}},
		{"duplicate_limiter.yaml", []string{
			"duplicate_limiter.yaml:5:11: limiters[1].name: duplicate limiter name \"api\" (first defined at line 2)",
		}},
		{"duplicate_rule.yaml", []string{
			"duplicate_rule.yaml:8:15: limiters[0].rules[1].name: duplicate rule name \"per-user\" (first defined at line 4)",
		}},
		{"empty.yaml", []string{
			"empty.yaml: empty configuration: it must define at least one limiter",
		}},
		{"empty_cluster.yaml", []string{
			"empty_cluster.yaml:3:14: store.redis.cluster: must list at least one address",
		}},
		{"empty_limiters.yaml", []string{
			"empty_limiters.yaml:1:11: limiters: must hold at least one limiter",
		}},
		{"empty_rules.yaml", []string{
			"empty_rules.yaml:3:12: limiters[0].rules: must hold at least one rule",
		}},
		{"every_error.yaml", []string{
			"every_error.yaml:1:17: failure_policy: must be open or closed, got \"sometimes\"",
			"every_error.yaml:7:16: limiters[0].rules[0].limit: must be at least 1, got -5",
			"every_error.yaml:9:16: limiters[0].rules[0].burst: applies to token_bucket and gcra only, not fixed_window",
			"every_error.yaml:14:18: limiters[0].rules[1].buckets: window 1s does not divide into 7 buckets of whole microseconds",
			"every_error.yaml:19:16: limiters[0].rules[2].burst: must be at least 1, got 0 (leave burst out for a burst of limit)",
			"every_error.yaml:23:17: limiters[0].rules[3].window: must be at least 1ms, got 0s",
			"every_error.yaml:25:40: limiters[0].rules[3].overrides[0].limit: must be at least 1, got 0",
			// Duplicate names, beside the other errors.
			"every_error.yaml:26:15: limiters[0].rules[4].name: duplicate rule name \"per-org\" (first defined at line 10)",
			"every_error.yaml:30:11: limiters[1].name: duplicate limiter name \"api\" (first defined at line 3)",
		}},
		{"failure_policy.yaml", []string{
			"failure_policy.yaml:1:17: failure_policy: must be open or closed, got \"ajar\"",
			"failure_policy.yaml:4:21: limiters[0].failure_policy: must be open or closed, got \"shut\"",
		}},
		{"fractional_limit.yaml", []string{
			"fractional_limit.yaml:6:16: limiters[0].rules[0].limit: must be a whole number, got \"2.5\"",
		}},
		{"many.yaml", []string{
			"many.yaml:1:17: failure_policy: must be open or closed, got \"sometimes\"",
			"many.yaml:2:21: breaker.failures: must be between 1 and 1000000, got 0",
			"many.yaml:5:13: limiters[0].shadow: must be true or false, got \"maybe\"",
			"many.yaml:9:16: limiters[0].rules[0].limit: must be a whole number, got \"ten\"",
			"many.yaml:13:9: limiters[1].rules[0].algorithm: must be set (fixed_window, sliding_window, token_bucket, gcra or concurrency)",
		}},
		{"missing_limit.yaml", []string{
			"missing_limit.yaml:4:9: limiters[0].rules[0].limit: must be set",
		}},
		{"negative_limit.yaml", []string{
			"negative_limit.yaml:6:16: limiters[0].rules[0].limit: must be at least 1, got -3",
		}},
		{"no_limiters.yaml", []string{
			"no_limiters.yaml:1:1: limiters: must hold at least one limiter",
		}},
		{"override_limit.yaml", []string{
			"override_limit.yaml:11:20: limiters[0].rules[0].overrides[0].limit: must be at least 1, got 0",
		}},
		{"redis_bad_url.yaml", []string{
			"redis_bad_url.yaml:2:16: store.redis.url: must start with redis://, rediss:// or unix://, got \"http://127.0.0.1:6379\"",
			"redis_bad_url.yaml:2:51: store.redis.deadline: must be at least 1ms, got 0s",
		}},
		{"removed_limiters.yaml", []string{
			"removed_limiters.yaml:4:25: removed_limiters[1]: limiter \"api\" is still defined under limiters",
		}},
		{"reserved_name.yaml", []string{
			"reserved_name.yaml:2:11: limiters[0].name: names starting with \"envoy.\" are reserved for the domains of --envoy-config-dir",
		}},
		{"redis_fallback.yaml", []string{
			"redis_fallback.yaml:3:33: store.redis.cluster[1]: must be host:port, got \"nohost\"",
			"redis_fallback.yaml:4:17: store.redis.key_prefix: must not contain '{' or '}' (keys carry their own hash tags)",
			"redis_fallback.yaml:5:15: store.redis.fallback.instances: must be set: how many instances share the limits",
			"redis_fallback.yaml:5:23: store.redis.fallback.retry: is no longer a fallback setting: the breaker decides when Redis is tried again (breaker.cooldown)",
			"redis_fallback.yaml:6:15: store.redis.hash_tag: must be rule or limiter, got \"slot\"",
		}},
		{"redis_two_modes.yaml", []string{
			"redis_two_modes.yaml:4:14: store.redis.cluster: set only one of url, cluster or sentinel (url is set too)",
		}},
		{"route_broken_limiter.yaml", []string{
			// A route naming an invalid limiter is not blamed a second time.
			"route_broken_limiter.yaml:8:69: limiters[0].rules[0].limit: must be at least 1, got 0",
		}},
		{"route_duplicates.yaml", []string{
			"route_duplicates.yaml:9:19: routes[0].candidates[1].name: duplicate candidate name \"route-primary\" in this route (a candidate's name defaults to its limiter's)",
			"route_duplicates.yaml:10:11: routes[1].name: duplicate route name \"chat\" (first defined at line 6)",
			"route_duplicates.yaml:11:17: routes[1].candidates: must list at least one candidate",
			"route_duplicates.yaml:12:5: routes[2].name: must be set",
			"route_duplicates.yaml:13:58: routes[2].candidates[0].cost: unknown field (known fields: name, limiter, attributes)",
		}},
		{"route_unknown_limiter.yaml", []string{
			"route_unknown_limiter.yaml:9:33: routes[0].candidates[1].limiter: no limiter named \"route-backpu\"",
			"route_unknown_limiter.yaml:10:9: routes[0].candidates[2].limiter: must be set",
		}},
		{"short_window.yaml", []string{
			"short_window.yaml:13:17: limiters[0].rules[1].window: must be at least 1ms, got 500µs",
		}},
		{"store_both.yaml", []string{
			"store_both.yaml:3:10: store.redis: set either memory or redis, not both",
		}},
		{"syntax.yaml", []string{
			"syntax.yaml:3: did not find expected node content",
		}},
		{"syntax_flow.yaml", []string{
			"syntax_flow.yaml:5: did not find expected ',' or ']'",
		}},
		{"syntax_tab.yaml", []string{
			"syntax_tab.yaml:3: found a tab character that violates indentation",
		}},
		{"tier_limit.yaml", []string{
			"tier_limit.yaml:12:24: limiters[0].rules[0].tiers.pro.limit: must be at least 1, got 0",
		}},
		{"tiers_without_attribute.yaml", []string{
			"tiers_without_attribute.yaml:9:11: limiters[0].rules[0].tiers: needs tier_attribute, on the rule or its limiter, to name the attribute that selects a tier",
		}},
		{"time_zone.yaml", []string{
			"time_zone.yaml:7:20: limiters[0].rules[0].time_zone: unknown time zone \"Mars/Olympus_Mons\" (use an IANA name such as Europe/Berlin, or UTC)",
		}},
		{"time_zone_unaligned.yaml", []string{
			"time_zone_unaligned.yaml:7:20: limiters[0].rules[0].time_zone: applies to calendar-aligned fixed windows only",
		}},
		{"token_classes.yaml", []string{
			"token_classes.yaml:3:11: token_classes.output: must be at least 0, got -3",
			"token_classes.yaml:4:17: token_classes.cached_input: must be a whole number, got \"0.5\"",
			"token_classes.yaml:5:9: token_classes.audio: must be set to a whole weight of at least 0",
			"token_classes.yaml:13:19: routes[0].candidates[0].limiter: no limiter named \"broken\"",
		}},
		{"token_rules.yaml", []string{
			"token_rules.yaml:3:24: limiters[0].token_rules[1]: limiter \"keys\" has no rule named \"rpn\"",
			"token_rules.yaml:3:29: limiters[0].token_rules[2]: rule \"tpm\" is listed twice",
			"token_rules.yaml:8:18: limiters[1].token_rules: must name at least one rule (leave it out to record usage into every rule)",
		}},
		{"unknown_field.yaml", []string{
			"unknown_field.yaml:8:9: limiters[0].rules[0].windw: unknown field (did you mean window?)",
		}},
		{"unnamed_rule.yaml", []string{
			"unnamed_rule.yaml:5:9: limiters[0].rules[1].name: must not be empty",
		}},
		{"wrong_type.yaml", []string{
			"wrong_type.yaml:2:3: limiters: must be a list, got a mapping",
		}},
	}
	seen := make(map[string]bool)
	for _, tt := range tests {
		seen[tt.file] = true
		t.Run(tt.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", "invalid", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			c, err := Parse(tt.file, data)
			if c != nil {
				t.Errorf("Parse returned a config with error %v", err)
			}
			var list ErrorList
			if !errors.As(err, &list) {
				t.Fatalf("error is %T %v, want an ErrorList", err, err)
			}
			if got, want := err.Error(), strings.Join(tt.want, "\n"); got != want {
				t.Errorf("errors:\n%s\nwant:\n%s", got, want)
			}
		})
	}
	files, _ := filepath.Glob(filepath.Join("testdata", "invalid", "*.yaml"))
	for _, f := range files {
		if !seen[filepath.Base(f)] {
			t.Errorf("fixture %s has no test case", f)
		}
	}
}

func TestSampleConfig(t *testing.T) {
	c, err := Load(filepath.Join("..", "floodgate.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Store.Memory == nil || c.Store.Memory.MaxKeys != 1_000_000 || c.Store.Redis != nil {
		t.Errorf("store = %+v, want memory with 1000000 keys", c.Store)
	}
	var names []string
	for _, l := range c.Limiters {
		names = append(names, l.Name)
	}
	if got, want := strings.Join(names, ","), "api,login,tokens,in-flight,route-primary,route-backup"; got != want {
		t.Errorf("limiters = %s, want %s", got, want)
	}
	login := c.Limiters[1]
	if login.FailurePolicy != floodgate.FailClosed {
		t.Errorf("login failure policy = %v, want closed", login.FailurePolicy)
	}
	org := c.Limiters[0].Rules[1]
	if got, want := len(org.Overrides), 2; got != want {
		t.Fatalf("per-org overrides = %d, want %d (one per tier)", got, want)
	}
	if o := org.Overrides[1]; o.Match["plan"] != "pro" || o.Limit != 500 || o.Burst != 1000 {
		t.Errorf("pro tier = %+v", o)
	}
	monthly := c.Limiters[2].Rules[1]
	if monthly.Align != floodgate.AlignMonth || monthly.Location.String() != "Europe/Berlin" {
		t.Errorf("monthly = align %v in %v", monthly.Align, monthly.Location)
	}
}

func TestRedisSentinel(t *testing.T) {
	c, err := Load(filepath.Join("testdata", "valid", "redis_sentinel.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	r := c.Store.Redis
	if c.Store.Memory != nil || r == nil {
		t.Fatalf("store = %+v, want redis only", c.Store)
	}
	if r.Sentinel == nil || r.Sentinel.Master != "mymaster" || len(r.Sentinel.Addrs) != 2 {
		t.Errorf("sentinel = %+v", r.Sentinel)
	}
	if r.Password != "secret" || r.Deadline != 20*time.Millisecond || r.KeyPrefix != "rl:" || r.HashTag != "rule" {
		t.Errorf("redis = %+v", r)
	}
	api, web := c.Limiters[0], c.Limiters[1]
	// Limiter settings inherit the global ones field by field.
	if api.FailurePolicy != floodgate.FailClosed || api.Deadline != 10*time.Millisecond {
		t.Errorf("api = %+v", api)
	}
	if got, want := api.Breaker, (store.BreakerOptions{Failures: 3, Ratio: 0.25, Window: 2 * time.Second, Cooldown: 500 * time.Millisecond, MaxCooldown: 4 * time.Second}); got != want {
		t.Errorf("api breaker = %+v, want %+v", got, want)
	}
	if web.FailurePolicy != floodgate.FailOpen || web.Deadline != 20*time.Millisecond || web.Breaker.Failures != -1 {
		t.Errorf("web = %+v", web)
	}
	if got := api.Rules[0].Key; len(got) != 1 || got[0] != "user" {
		t.Errorf("key = %q, want [user] (a single name is a list of one)", got)
	}
}

func TestRedisURL(t *testing.T) {
	c, err := Load(filepath.Join("testdata", "valid", "redis_url.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	r := c.Store.Redis
	want := Redis{URL: "rediss://user:pw@redis.internal:6380/2", DB: 3, KeyPrefix: "rl:", HashTag: "limiter", Deadline: guard.DefaultTimeout,
		DenyCacheSize: -1, Fallback: &Fallback{Instances: 4, MaxKeys: 5000}}
	if r.URL != want.URL || r.DB != want.DB || r.KeyPrefix != want.KeyPrefix || r.HashTag != want.HashTag || r.Deadline != want.Deadline ||
		r.DenyCacheSize != want.DenyCacheSize || *r.Fallback != *want.Fallback {
		t.Errorf("redis = %+v (fallback %+v), want %+v", r, r.Fallback, want)
	}
	if c.Limiters[0].Deadline != guard.DefaultTimeout {
		t.Errorf("limiter deadline = %v, want the store's", c.Limiters[0].Deadline)
	}
}

func TestAnchorsAndNulls(t *testing.T) {
	c, err := Load(filepath.Join("testdata", "valid", "anchors.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Store.Memory.MaxKeys != 1000 {
		t.Errorf("max_keys = %d, want 1000", c.Store.Memory.MaxKeys)
	}
	if c.FailurePolicy != floodgate.FailOpen {
		t.Errorf("a null failure_policy must keep the default")
	}
	if r := c.Limiters[1].Rules[0]; r.Name != "per-user" || r.Buckets != 12 || r.Algorithm != floodgate.SlidingWindow {
		t.Errorf("aliased rule = %+v", r)
	}
}

// TestTiersDecide builds a configured limiter and checks that tiers and
// overrides set the limit, explicit overrides first.
func TestTiersDecide(t *testing.T) {
	c, err := Parse("tiers.yaml", []byte(`
limiters:
  - name: api
    tier_attribute: plan
    rules:
      - name: per-org
        key: [org]
        algorithm: fixed_window
        limit: 1
        window: 1m
        overrides:
          - match: {org: big}
            limit: 7
        tiers:
          pro: {limit: 3}
`))
	if err != nil {
		t.Fatal(err)
	}
	store := memory.New(nil)
	defer store.Close()
	clock := clocktest.New(time.Unix(1_700_000_000, 0))
	l, err := c.Limiters[0].New(store, floodgate.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		attrs floodgate.Attributes
		want  int64
	}{
		{floodgate.Attributes{"org": "a"}, 1},
		{floodgate.Attributes{"org": "b", "plan": "pro"}, 3},
		{floodgate.Attributes{"org": "c", "plan": "enterprise"}, 1},
		{floodgate.Attributes{"org": "big", "plan": "pro"}, 7},
	} {
		d := l.Allow(context.Background(), tt.attrs)
		if !d.Allowed || d.Limit != tt.want {
			t.Errorf("%v: allowed %v limit %d, want limit %d", tt.attrs, d.Allowed, d.Limit, tt.want)
		}
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "absent.yaml"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("err = %v, want a not-exist error", err)
	}
}

func TestTooLarge(t *testing.T) {
	_, err := Parse("big.yaml", make([]byte, MaxFileSize+1))
	if err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("err = %v", err)
	}
	path := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, 50<<20+200<<10); err != nil {
		t.Fatal(err)
	}
	_, err = Load(path)
	if got, want := fmt.Sprint(err), path+": the file is 50.2 MiB; a configuration may be at most 4 MiB"; got != want {
		t.Errorf("Load of a 50 MiB file: %s, want %s", got, want)
	}
}

// FuzzLoad checks that no input makes the loader panic, and that a
// configuration it accepts keeps the promises of Config's documentation:
// unique limiter names, token rules that name rules of their limiter, and
// route candidates that name configured limiters. (That each accepted
// limiter builds is not checked here: Parse accepts a limiter only once it
// has built it.)
func FuzzLoad(f *testing.F) {
	for _, dir := range []string{"valid", "invalid"} {
		files, _ := filepath.Glob(filepath.Join("testdata", dir, "*.yaml"))
		for _, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	if data, err := os.ReadFile(filepath.Join("..", "floodgate.yaml")); err == nil {
		f.Add(data)
	}
	f.Add([]byte("a: &a [*a]"))
	f.Add([]byte("limiters: [&x {name: a, rules: [{name: r, algorithm: gcra, limit: 1, window: 1s}]}, *x]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("fuzz.yaml", data)
		if err != nil {
			var list ErrorList
			if !errors.As(err, &list) && len(data) <= MaxFileSize {
				t.Fatalf("error %T is not an ErrorList: %v", err, err)
			}
			return
		}
		limiters := make(map[string]bool, len(c.Limiters))
		for _, l := range c.Limiters {
			if limiters[l.Name] {
				t.Fatalf("limiter name %q accepted twice", l.Name)
			}
			limiters[l.Name] = true
			for _, name := range l.TokenRules {
				if !hasRule(l.Rules, name) {
					t.Fatalf("limiter %q: token rule %q names no rule", l.Name, name)
				}
			}
		}
		for _, r := range c.Routes {
			for _, cand := range r.Candidates {
				if !limiters[cand.Limiter] {
					t.Fatalf("route %q: candidate %q names no accepted limiter (%q)", r.Name, cand.Name, cand.Limiter)
				}
			}
		}
	})
}

package floodgate_test

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store"
)

// keyRecorder is a store that admits everything and remembers the last
// batch's keys, so tests can see the keys a limiter derives.
type keyRecorder struct {
	scopes, keys []string
}

func (s *keyRecorder) Apply(_ context.Context, b *store.Batch) error {
	s.scopes, s.keys = s.scopes[:0], s.keys[:0]
	for i := range b.Ops {
		s.scopes = append(s.scopes, b.Ops[i].Scope)
		s.keys = append(s.keys, b.Ops[i].Key)
		b.Ops[i].Result = store.Result{Allowed: true, Remaining: b.Ops[i].Params.Limit}
	}
	b.Allowed = b.Mode == floodgate.ModeConsume
	return nil
}

func TestKeysAreNamespacedAndEscaped(t *testing.T) {
	rec := &keyRecorder{}
	l, err := floodgate.New("api", rec, []floodgate.Rule{
		{Name: "global", Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Second},
		{Name: "per-user", Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Second, Key: []string{"user"}},
		{Name: "per-pair", Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Second, Key: []string{"tenant", "user"}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		tenant, user string
		wantKeys     []string
	}{
		{"t1", "alice", []string{"*", "alice", "t1:alice"}},
		{"t:1", "a\\b", []string{"*", `a\\b`, `t\:1:a\\b`}},
		// One value is the key as given (its rule's scope keeps it apart
		// from the global key and from composite keys), unless it holds a
		// backslash.
		{"t", "*", []string{"*", `*`, `t:*`}},
		{"t", "user:1", []string{"*", `user:1`, `t:user\:1`}},
	} {
		l.Allow(context.Background(), floodgate.Attributes{"tenant": tt.tenant, "user": tt.user})
		if got, want := strings.Join(rec.scopes, " "), "api/global@1s api/per-user@1s api/per-pair@1s"; got != want {
			t.Errorf("scopes %q, want %q", got, want)
		}
		if got, want := strings.Join(rec.keys, " "), strings.Join(tt.wantKeys, " "); got != want {
			t.Errorf("tenant %q user %q: keys %q, want %q", tt.tenant, tt.user, got, want)
		}
	}
}

// TestDistinctKeyTuplesNeverCollide derives keys for many random attribute
// tuples drawn from an alphabet rich in separators and escapes, and checks
// that within each rule two tuples share a key only if they are equal.
func TestDistinctKeyTuplesNeverCollide(t *testing.T) {
	rec := &keyRecorder{}
	l, err := floodgate.New("api", rec, []floodgate.Rule{
		{Name: "one", Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Second, Key: []string{"a"}},
		{Name: "two", Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Second, Key: []string{"a", "b"}},
		{Name: "three", Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Second, Key: []string{"a", "b", "c"}},
		{Name: "func", Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Second,
			KeyFunc: func(a floodgate.Attributes) string { return a["a"] }},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	const alphabet = `:\*a`
	rng := rand.New(rand.NewPCG(1, 2))
	value := func() string {
		b := make([]byte, 1+rng.IntN(4))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return string(b)
	}
	// For each rule (by position): key → the tuple that produced it.
	seen := make([]map[string][3]string, 4)
	for i := range seen {
		seen[i] = make(map[string][3]string)
	}
	for range 20_000 {
		tuple := [3]string{value(), value(), value()}
		l.Allow(context.Background(), floodgate.Attributes{"a": tuple[0], "b": tuple[1], "c": tuple[2]})
		if len(rec.keys) != 4 {
			t.Fatalf("%q: %d rules applied, want 4", tuple, len(rec.keys))
		}
		// The part of the tuple each rule's key is made of.
		parts := [4][3]string{{tuple[0]}, {tuple[0], tuple[1]}, tuple, {tuple[0]}}
		for i, key := range rec.keys {
			if prev, ok := seen[i][key]; ok && prev != parts[i] {
				t.Fatalf("rule %s: tuples %q and %q both have key %q", rec.scopes[i], prev, parts[i], key)
			}
			seen[i][key] = parts[i]
		}
	}
	if n := len(seen[2]); n < 10_000 {
		t.Errorf("only %d distinct three-part keys from 20000 tuples: the generator is too narrow", n)
	}
}

func TestOverrideMatchNeedsEveryValue(t *testing.T) {
	rec := &keyRecorder{}
	l, err := floodgate.New("api", rec, []floodgate.Rule{{
		Name: "r", Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Second, Key: []string{"user"},
		Overrides: []floodgate.Override{{Match: floodgate.Attributes{"plan": "pro", "region": "eu"}, Limit: 7}},
	}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		attrs floodgate.Attributes
		want  int64
	}{
		{floodgate.Attributes{"user": "u", "plan": "pro", "region": "eu"}, 7},
		{floodgate.Attributes{"user": "u", "plan": "pro", "region": "eu", "extra": "x"}, 7},
		{floodgate.Attributes{"user": "u", "plan": "pro"}, 1},
		{floodgate.Attributes{"user": "u", "plan": "pro", "region": "us"}, 1},
	} {
		if d := l.Allow(context.Background(), tt.attrs); d.Limit != tt.want {
			t.Errorf("%v: Limit = %d, want %d", tt.attrs, d.Limit, tt.want)
		}
	}
}

// TestLongKeysAreDigested checks that a key longer than MaxKeyLen is stored
// as a digest of at most 93 bytes that keeps its start readable, that keys up
// to MaxKeyLen are stored as derived, and that neither kind ever collides
// with a key of another tuple, not even with a value spelling a digest.
func TestLongKeysAreDigested(t *testing.T) {
	rec := &keyRecorder{}
	l, err := floodgate.New("api", rec, []floodgate.Rule{
		{Name: "one", Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Second, Key: []string{"a"}},
		{Name: "two", Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Second, Key: []string{"a", "b"}},
		{Name: "func", Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Second,
			KeyFunc: func(a floodgate.Attributes) string { return a["a"] }},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	keys := func(a, b string) []string {
		l.Allow(context.Background(), floodgate.Attributes{"a": a, "b": b})
		return append([]string(nil), rec.keys...)
	}
	exact := strings.Repeat("x", floodgate.MaxKeyLen)
	if k := keys(exact, "b"); k[0] != exact || k[2] != exact {
		t.Errorf("a key of MaxKeyLen bytes is stored as %.100q, want it as is", k[0])
	}
	long := strings.Repeat("y", 30_000)
	k := keys(long, "b")
	for i, key := range k {
		if len(key) > 93 {
			t.Errorf("rule %s: a 30 KB value gives a %d-byte key", rec.scopes[i], len(key))
		}
	}
	if want := strings.Repeat("y", 48) + `\#`; !strings.HasPrefix(k[0], want) {
		t.Errorf("digest %.100q does not start with %.100q", k[0], want)
	}
	if k[0] != k[2] {
		t.Errorf("a KeyFunc's long key %.100q differs from the attribute's %.100q", k[2], k[0])
	}
	// The cut falls before an escape pair, never through it.
	if got := keys(strings.Repeat("a", 47)+`\`+long, "b")[0]; !strings.HasPrefix(got, strings.Repeat("a", 47)+`\#`) {
		t.Errorf("an escape pair at the cut: digest %.100q", got)
	}
	// A value spelling a digest is escaped, so it is not that digest.
	if spelled := keys(k[0], "b"); spelled[0] == k[0] || spelled[2] == k[0] {
		t.Errorf("the value %.100q has the digest's own key", k[0])
	}

	rng := rand.New(rand.NewPCG(3, 4))
	seen := make([]map[string][2]string, 3)
	for i := range seen {
		seen[i] = make(map[string][2]string)
	}
	for range 5_000 {
		// Long values that differ only near their end, and values around
		// MaxKeyLen with separators and escapes.
		n := floodgate.MaxKeyLen - 4 + rng.IntN(8)
		if rng.IntN(2) == 0 {
			n = 1_000
		}
		b := []byte(strings.Repeat("z", n))
		for range 3 {
			b[n-1-rng.IntN(min(n, 8))] = `:\*z`[rng.IntN(4)]
		}
		tuple := [2]string{string(b), string(b[:1+rng.IntN(3)])}
		for i, key := range keys(tuple[0], tuple[1]) {
			if len(key) > floodgate.MaxKeyLen {
				t.Fatalf("rule %s: %d-byte key", rec.scopes[i], len(key))
			}
			part := tuple
			if i != 1 {
				part[1] = ""
			}
			if prev, ok := seen[i][key]; ok && prev != part {
				t.Fatalf("rule %s: tuples %.100q and %.100q both have key %.100q", rec.scopes[i], prev, part, key)
			}
			seen[i][key] = part
		}
	}
}

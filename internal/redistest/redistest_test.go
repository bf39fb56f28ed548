package redistest

import (
	"fmt"
	"slices"
	"testing"
)

// TestKeysWithoutTTL: the keys a server holds that never expire are found
// among many that do, past one SCAN page, on a server with a password.
func TestKeysWithoutTTL(t *testing.T) {
	s := Start(t, "--requirepass", "secret")
	for i := range 2500 {
		s.MustDo("SET", fmt.Sprint("timed:", i), "1", "PX", "60000")
	}
	s.MustDo("SET", "untimed:a", "1")
	s.MustDo("HSET", "untimed:b", "f", "1")
	got, err := s.KeysWithoutTTL()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if want := []string{"untimed:a", "untimed:b"}; !slices.Equal(got, want) {
		t.Fatalf("KeysWithoutTTL() = %v, want %v", got, want)
	}
	s.MustDo("DEL", "untimed:a", "untimed:b") // the check when the test ends
}

package memory

import (
	"testing"
	"unsafe"
)

// TestEntryLayout pins what the entry's comment promises: 128 bytes, and
// the key, scope, flags, expiry and the head of the state (Live, A, B, C)
// in the first 64, the cache line a one-rule decision touches.
func TestEntryLayout(t *testing.T) {
	var e entry
	if got := unsafe.Sizeof(e); got != 128 {
		t.Errorf("entry is %d bytes, want 128", got)
	}
	if end := unsafe.Offsetof(e.st) + unsafe.Offsetof(e.st.C) + unsafe.Sizeof(e.st.C); end > 64 {
		t.Errorf("the state's head ends at byte %d of the entry, past its first cache line", end)
	}
}

package redis_test

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate/internal/redistest"
)

// TestExpireUntimedScript runs the clean-up docs/redis.md gives for keys
// that earlier versions left without a TTL: every floodgate key without
// one gets one (past a SCAN page, with a key that needs escaping), and
// nothing else changes.
func TestExpireUntimedScript(t *testing.T) {
	srv := redistest.Start(t)
	for i := range 1200 {
		srv.MustDo("SET", "fg:{api/per-user:u"+strconv.Itoa(i)+"}:fixed", "n=6 start=1 end=2")
	}
	srv.MustDo("SET", `fg:{api/per-user:a\:b c}:fixed`, "n=1 start=1 end=2")
	srv.MustDo("SET", "fg:{api/per-user:timed}:fixed", "n=1 start=1 end=2", "PX", "5000")
	srv.MustDo("SET", "other:untimed", "1")
	cmd := exec.Command("bash", "../../scripts/redis-expire-untimed.sh", "-p", strconv.Itoa(srv.Port))
	cmd.Env = append(cmd.Environ(), "TTL_MS=60000")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got, want := strings.TrimSpace(string(out)), "1201 keys without a TTL given one of 60000 ms"; got != want {
		t.Errorf("output %q, want %q", got, want)
	}
	untimed, err := srv.KeysWithoutTTL()
	if err != nil {
		t.Fatal(err)
	}
	if len(untimed) != 1 || untimed[0] != "other:untimed" {
		t.Errorf("keys without a TTL after the script: %v, want only other:untimed", untimed)
	}
	if ttl, _ := strconv.Atoi(srv.MustDo("PTTL", `fg:{api/per-user:a\:b c}:fixed`)); ttl <= 55000 || ttl > 60000 {
		t.Errorf("PTTL of the escaped key %d ms, want about 60000", ttl)
	}
	if ttl, _ := strconv.Atoi(srv.MustDo("PTTL", "fg:{api/per-user:timed}:fixed")); ttl > 5000 {
		t.Errorf("a key that had a TTL got another: %d ms", ttl)
	}
	srv.MustDo("DEL", "other:untimed")
}

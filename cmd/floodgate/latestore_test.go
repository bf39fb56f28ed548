package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/guard"
	"github.com/floodgate-go/floodgate/store/memory"
	"github.com/floodgate-go/floodgate/store/redis"
	"github.com/floodgate-go/floodgate/store/share"
)

// A service whose Redis is down when it starts decides on its fallback,
// reports the dial error as unready, and moves to Redis once Redis answers.
func TestRedisDownAtStart(t *testing.T) {
	rs := redistest.Start(t)
	rs.Kill() // its port is now free: Redis is down
	opts := &redis.Options{URL: "redis://" + rs.Addr}
	_, err := redis.New(opts)
	if err == nil {
		t.Fatal("redis.New succeeded with Redis down")
	}
	hide := func(msg string) string { return "hidden: " + msg }
	late := dialLater(opts, err, hide, slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer late.Close()
	mem := memory.New(nil)
	defer mem.Close()
	fallback, _ := share.New(mem, 1)
	guarded, err := guard.New(late, &guard.Options{Fallback: fallback, Breaker: store.BreakerOptions{Cooldown: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := floodgate.New("api", guarded, []floodgate.Rule{
		{Name: "r", Algorithm: floodgate.FixedWindow, Limit: 100, Window: time.Hour, Key: []string{"user"}},
	}, &floodgate.Options{FailurePolicy: floodgate.FailClosed})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if d := lim.AllowKey(ctx, "u"); !d.Allowed || d.Reason == floodgate.ReasonStore {
		t.Fatalf("with Redis down: %+v, want decided on the fallback", d)
	}
	if err := late.Ping(ctx); err == nil || !strings.HasPrefix(err.Error(), "hidden: ") {
		t.Fatalf("Ping before Redis is up: %v, want the dial error with its secrets hidden", err)
	}
	rs.Restart()
	deadline := time.Now().Add(10 * time.Second)
	for late.Ping(ctx) != nil {
		if time.Now().After(deadline) {
			t.Fatal("not connected 10s after Redis came up")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Decided by Redis now: its count starts from zero (the fallback's one
	// charge stays in memory).
	deadline = time.Now().Add(5 * time.Second)
	for {
		d := lim.AllowKey(ctx, "u")
		if rs.MustDo("DBSIZE") != "0" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no decision reached Redis after it came up: %+v", d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

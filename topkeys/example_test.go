package topkeys_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store/memory"
	"github.com/floodgate-go/floodgate/topkeys"
)

// A Tracker plugged into a limiter as its Observer tells who is denied.
// The limiter tells it of every denial and of 1 in 8 admitted decisions.
func Example() {
	tops := topkeys.New(nil)
	store := memory.New(nil)
	defer store.Close()
	limiter, err := floodgate.New("api", store, []floodgate.Rule{
		{Name: "per-user", Key: []string{"user"}, Algorithm: floodgate.FixedWindow, Limit: 5, Window: time.Minute},
	}, &floodgate.Options{Observer: tops.Observe, ObserveSample: 8})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for range 12 {
		limiter.AllowKey(ctx, "mallory")
	}
	limiter.AllowKey(ctx, "alice")

	r, err := tops.Top("api", "per-user", topkeys.Denials, 5*time.Minute, 10)
	if err != nil {
		panic(err)
	}
	for _, e := range r.Entries {
		fmt.Printf("%s: %d denials (error %d)\n", e.Key, e.Count, e.Error)
	}
	// Output:
	// mallory: 7 denials (error 0)
}

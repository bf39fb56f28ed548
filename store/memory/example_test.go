package memory_test

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store/memory"
)

// A store capped at 1,000 keys: a flood of distinct client addresses
// evicts cold keys, so memory stays bounded, while a key in steady use
// keeps its count.
func ExampleNew() {
	store := memory.New(&memory.Options{MaxKeys: 1000})
	defer store.Close() // stops the background sweeper

	limiter, err := floodgate.New("edge", store, []floodgate.Rule{{
		Name:      "per-ip",
		Algorithm: floodgate.SlidingWindow,
		Limit:     1000,
		Window:    time.Minute,
		Key:       []string{"ip"},
	}}, &floodgate.Options{Clock: fixedClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))})
	if err != nil {
		panic(err)
	}

	ctx := context.Background()
	regular := floodgate.Attributes{"ip": "192.0.2.10"}
	for i := range 50_000 {
		if i%250 == 0 {
			limiter.Allow(ctx, regular)
		}
		limiter.Allow(ctx, floodgate.Attributes{"ip": "198.51.100." + strconv.Itoa(i)})
	}
	d, _ := limiter.AllowN(ctx, regular, 0)
	fmt.Println("keys held:", store.Len())
	fmt.Println("regular client's remaining:", d.Remaining)
	// Output:
	// keys held: 1000
	// regular client's remaining: 800
}

// fixedClock is a Clock that always reads the same instant, so the
// example's output is exact; a real limiter leaves the clock nil and reads
// the system clock.
type fixedClock time.Time

func (c fixedClock) Now() time.Time { return time.Time(c) }

package grant_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store/grant"
	"github.com/floodgate-go/floodgate/store/memory"
)

// A rule with Grant set, on a limiter over a grant store: the first
// decision takes a grant of 1/32 of the limit from the shared store, and
// the next ones are answered from it in-process. In production the inner
// store is the Redis store every instance shares; the memory store stands
// in for it here.
func Example() {
	shared := memory.New(nil)
	defer shared.Close()
	g := grant.New(shared, nil)
	defer g.Close()
	lim, err := floodgate.New("api", g, []floodgate.Rule{{
		Name: "global", Algorithm: floodgate.FixedWindow, Limit: 32_000, Window: time.Minute, Grant: true,
	}}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lim.Close()
	ctx := context.Background()
	for range 100 {
		lim.AllowKey(ctx, "")
	}
	st := g.Stats()
	fmt.Printf("%d grant of %d units, %d decisions answered locally\n", st.Grants, st.Granted, st.Local)
	d := lim.AllowKey(ctx, "")
	fmt.Println(d.Allowed, d.Remaining)
	// Output:
	// 1 grant of 1000 units, 99 decisions answered locally
	// true 31899
}

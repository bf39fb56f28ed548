package loadgen_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate/cmd/floodgate/internal/loadgen"
)

// A closed-model run of 30 requests from 3 workers against a stand-in for
// floodgate's HTTP API that denies every third request.
func ExampleRun() {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"allowed":%t}`, n.Add(1)%3 != 0)
	}))
	defer srv.Close()

	sum, err := loadgen.Run(context.Background(), loadgen.Config{
		Target:      loadgen.HTTP,
		Addr:        srv.URL,
		Limiter:     "api",
		Attribute:   "user",
		Keys:        100,
		Concurrency: 3,
		Requests:    30,
		Duration:    10 * time.Second,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%d requests: %d allowed, %d denied, %d errors\n", sum.Requests, sum.Allowed, sum.Denied, sum.Errors)
	// Output: 30 requests: 20 allowed, 10 denied, 0 errors
}

// Validation reports every problem of a Config at once.
func ExampleConfig_Validate() {
	err := loadgen.Config{Target: "udp", Rate: -5}.Validate()
	fmt.Println(err)
	// Output:
	// loadgen: unknown target "udp" (want http or grpc)
	// loadgen: addr is required
	// loadgen: rate must be a finite number ≥ 0, got -5
}

// Command llmgateway is a small LLM gateway built on floodgate, in front of
// two fake upstream model servers it starts itself on loopback ports:
//
//   - per API key: requests and weighted tokens per minute (sliding windows
//     in 1 s buckets), with output tokens priced at three input tokens;
//   - per route: a requests-per-minute and a tokens-per-minute cap; a capped
//     route is skipped, a failing one failed over;
//   - a response cache: a cached answer costs the key its tokens and no
//     route anything;
//   - a monthly budget per tenant, in New York's calendar months: each
//     request reserves the most it can cost before the model runs and
//     settles the reservation with what it cost.
//
// Run it with
//
//	go run ./examples/llmgateway
//
// and follow README.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store/memory"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, floodgate.SystemClock{}); err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

// run starts the fake models and the gateway, prints where it listens, and
// serves until ctx is done.
func run(ctx context.Context, args []string, stdout io.Writer, clock floodgate.Clock) error {
	fs := flag.NewFlagSet("llmgateway", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8080", "address to listen on")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var models []*model
	for _, name := range upstreamNames {
		m, err := startModel(name)
		if err != nil {
			return err
		}
		defer m.Close()
		fmt.Fprintf(stdout, "upstream %s at %s\n", name, m.url)
		models = append(models, m)
	}
	store := memory.New(nil)
	defer store.Close()
	gw, err := newGateway(store, clock, models)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: gw.handler(), ReadHeaderTimeout: 5 * time.Second}
	fmt.Fprintf(stdout, "gateway listening on http://%s\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(shutdown)
}

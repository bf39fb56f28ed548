package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/floodgate-go/floodgate/server"
)

const checkUsage = `
Usage: floodgate check --limiter NAME [--attr key=value]... [flags]

Asks a running service for one decision (POST /v1/check) and prints it.
Cost 0 peeks without consuming; --record posts to /v1/record instead;
--reserve with --hold asks for a reservation, whose ticket POST
/v1/settle settles.

Exit status: 0 when admitted, 1 when denied, 2 when the service could not
be asked (bad flags, connection refused, an error answer).

An Envoy domain's limiter, envoy.<domain>, takes a descriptor's entries
as attributes.

Examples:
  floodgate check --limiter api --attr user=u1 --attr org=acme
  floodgate check --limiter envoy.edge --attr remote_address=10.0.0.1
  floodgate check --limiter llm --attr tenant=acme --reserve 8000 --hold 10m
`

// attrFlag collects repeated --attr key=value flags.
type attrFlag map[string]string

func (a attrFlag) String() string {
	keys := make([]string, 0, len(a))
	for k := range a {
		keys = append(keys, k+"="+a[k])
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}

func (a attrFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q is not key=value", s)
	}
	a[k] = v
	return nil
}

func (m *Main) check(ctx context.Context, args []string) int {
	fs := m.flagSet("check", checkUsage)
	addr := fs.String("addr", "127.0.0.1:8080", "the service's HTTP `address` (host:port or an http:// or https:// URL)")
	limiter := fs.String("limiter", "", "the limiter to ask (required)")
	attrs := attrFlag{}
	fs.Var(attrs, "attr", "a request attribute as `key=value` (repeatable)")
	cost := fs.Int64("cost", 1, "units to ask for; 0 peeks")
	record := fs.Bool("record", false, "record the cost as usage after the fact (POST /v1/record)")
	reserve := fs.Int64("reserve", 0, "reserve `units` of the limiter's reservable rules, held for --hold, instead of consuming --cost")
	hold := fs.Duration("hold", 0, "how long a reservation's units stay held unless settled (with --reserve)")
	asJSON := fs.Bool("json", false, "print the service's JSON answer as is")
	timeout := fs.Duration("timeout", 5*time.Second, "how long to wait for the answer")
	insecure := fs.Bool("insecure", false, "accept any TLS certificate (testing only)")
	if code, ok := m.parseArgs(fs, args); !ok {
		return code
	}
	if *limiter == "" {
		fmt.Fprintln(m.Stderr, "floodgate check: --limiter is required")
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(m.Stderr, "floodgate check: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	switch {
	case *reserve != 0 && *hold == 0:
		fmt.Fprintln(m.Stderr, "floodgate check: --reserve needs --hold, how long the units stay held unless settled")
		return exitUsage
	case *reserve == 0 && *hold != 0:
		fmt.Fprintln(m.Stderr, "floodgate check: --hold is the hold of a reservation: set --reserve")
		return exitUsage
	case *reserve != 0 && *record:
		fmt.Fprintln(m.Stderr, "floodgate check: --reserve and --record: set one, not both")
		return exitUsage
	}
	base := *addr
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	endpoint := strings.TrimRight(base, "/") + "/v1/check"
	if *record {
		endpoint = strings.TrimRight(base, "/") + "/v1/record"
	}
	ask := map[string]any{"limiter": *limiter, "attributes": map[string]string(attrs), "cost": *cost}
	if *reserve != 0 {
		delete(ask, "cost") // a reservation charges the other rules 1
		ask["reserve"] = map[string]any{"units": *reserve, "hold": hold.String()}
	}
	body, _ := json.Marshal(ask)
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		fmt.Fprintf(m.Stderr, "floodgate check: %v\n", err)
		return exitUsage
	}
	req.Header.Set("Content-Type", "application/json")
	client := &http.Client{}
	if *insecure {
		client.Transport = &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
	}
	resp, err := client.Do(req)
	if err != nil {
		fmt.Fprintf(m.Stderr, "floodgate check: %v\n", err)
		return exitUsage
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		fmt.Fprintf(m.Stderr, "floodgate check: reading the answer: %v\n", err)
		return exitUsage
	}
	if resp.StatusCode != http.StatusOK {
		var p struct{ Title, Detail string }
		if json.Unmarshal(raw, &p) == nil && p.Title != "" {
			fmt.Fprintf(m.Stderr, "floodgate check: %d %s: %s\n", resp.StatusCode, p.Title, p.Detail)
		} else {
			fmt.Fprintf(m.Stderr, "floodgate check: %s: %s\n", resp.Status, bytes.TrimSpace(raw))
		}
		return exitUsage
	}
	var d server.DecisionResponse
	if err := json.Unmarshal(raw, &d); err != nil {
		fmt.Fprintf(m.Stderr, "floodgate check: the answer is not a decision: %v\n", err)
		return exitUsage
	}
	if *asJSON {
		m.Stdout.Write(raw)
	} else {
		printDecision(m.Stdout, *limiter, &d)
	}
	if !d.Allowed {
		return exitFail
	}
	return exitOK
}

func ms(n int64) string {
	if n == 0 {
		return "0s"
	}
	return (time.Duration(n) * time.Millisecond).String()
}

func printDecision(w io.Writer, limiter string, d *server.DecisionResponse) {
	verdict := "ALLOWED"
	if !d.Allowed {
		verdict = "DENIED"
	}
	if d.Reason != "" {
		verdict += " (" + d.Reason + ")"
	}
	fmt.Fprintf(w, "%s  limiter %s", verdict, limiter)
	switch {
	case d.Never:
		fmt.Fprint(w, ": the cost exceeds what the limit can ever admit")
	case !d.Allowed && d.RetryAfterMS > 0:
		fmt.Fprintf(w, ": retry in %s", ms(d.RetryAfterMS))
	}
	fmt.Fprintln(w)
	if d.Rule != "" {
		capacity := d.Limit
		for _, r := range d.Rules {
			if r.Name == d.Rule {
				capacity = r.Capacity // a token bucket's burst
			}
		}
		fmt.Fprintf(w, "binding rule %s: %d of %d left, full again in %s\n", d.Rule, d.Remaining, capacity, ms(d.ResetAfterMS))
	}
	if len(d.Rules) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "\nRULE\tRESULT\tLIMIT\tCAPACITY\tREMAINING\tRESET\tRETRY")
		for _, r := range d.Rules {
			res := "allowed"
			if !r.Allowed {
				res = "denied"
			}
			if r.Shadow {
				res += " (shadow)"
			}
			retry := "-"
			if !r.Allowed && !r.Never {
				retry = ms(r.RetryAfterMS)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\n", r.Name, res, r.Limit, r.Capacity, r.Remaining, ms(r.ResetAfterMS), retry)
		}
		tw.Flush()
	}
	if d.Ticket != "" {
		fmt.Fprintf(w, "\nticket %s\n", d.Ticket)
	}
	if d.LapsesAfterMS > 0 {
		fmt.Fprintf(w, "a reservation: its holds lapse in %s unless settled (POST /v1/settle)\n", ms(d.LapsesAfterMS))
	}
}

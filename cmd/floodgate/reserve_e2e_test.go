package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-go/floodgate"
)

// The budget of the reservation tests: an LLM gateway's tenant, 100,000
// tokens, 20 answers streaming at once, each reserving its max_tokens of
// 8,000 and using 1,000 to 8,000.
const (
	reservedBudget  = 100_000
	reservedStreams = 20
	reservedMost    = 8000
)

// instances starts n floodgate serve processes on store (a store section)
// with config, sharing a ticket secret; n is 1 on the memory store, which
// instances cannot share.
func instances(t *testing.T, store, config string, n int, args ...string) []*service {
	t.Helper()
	if store == "" {
		n = 1
	}
	out := make([]*service, n)
	for i := range out {
		out[i] = startService(t, store+config, []string{"FLOODGATE_TICKET_SECRET=shared"}, args...)
	}
	return out
}

// noonZone is a fixed time zone where it is noon now, so that a daily
// budget's day cannot end while a test runs.
func noonZone() string {
	x := (12 - time.Now().UTC().Hour() + 24) % 24 // hours east of UTC
	if x > 12 {
		x -= 24
	}
	if x == 0 {
		return "Etc/GMT"
	}
	return fmt.Sprintf("Etc/GMT%+d", -x) // the Etc zones' signs are inverted
}

// answer is one reservation of a reservedHTTP load: admitted, settled
// with used, in the window stamp.
type answer struct {
	stamp      int64
	used       int64
	settlement string
}

// reservedHTTP runs 20 concurrent streams for at most d against tenant's
// budget in limiter llm, through the HTTP API of services: stream w
// reserves through one instance and settles through the next. Each
// reserves 8,000 tokens held for a minute, streams a moment and settles
// 1,000 to 8,000; a refused stream waits its retry_after_ms (at most
// 20 ms). With untilSpent, a stream stops when it is refused while no
// stream holds a reservation: what is left is then less than one.
func reservedHTTP(t *testing.T, services []*service, tenant string, d time.Duration, untilSpent bool) (answers []answer, demanded int64) {
	var (
		mu      sync.Mutex
		wanted  atomic.Int64
		holding atomic.Int64 // streams with a reservation not yet settled
		wg      sync.WaitGroup
	)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: reservedStreams}}
	defer client.CloseIdleConnections()
	post := func(s *service, path, body string, v any) bool {
		resp, err := client.Post(s.http+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Error(err)
			return false
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(v); resp.StatusCode != http.StatusOK || err != nil {
			t.Errorf("POST %s %s: %d %v", path, body, resp.StatusCode, err)
			return false
		}
		return true
	}
	reserve := fmt.Sprintf(`{"limiter":"llm","attributes":{"tenant":%q},"reserve":{"units":%d,"hold":"1m"}}`, tenant, reservedMost)
	deadline := time.Now().Add(d)
	for w := range reservedStreams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			from, to := services[w%len(services)], services[(w+1)%len(services)]
			for time.Now().Before(deadline) && !t.Failed() {
				var dec decision
				if !post(from, "/v1/check", reserve, &dec) {
					return
				}
				used := 1000 + rand.Int64N(reservedMost-1000+1)
				wanted.Add(used)
				if !dec.Allowed {
					if untilSpent && holding.Load() == 0 {
						return
					}
					time.Sleep(min(time.Duration(dec.RetryAfterMS)*time.Millisecond, 20*time.Millisecond))
					continue
				}
				holding.Add(1)
				time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond) // the answer streams
				var st struct {
					Settlement string `json:"settlement"`
				}
				ok := post(to, "/v1/settle", fmt.Sprintf(`{"ticket":%q,"used":%d}`, dec.Ticket, used), &st)
				holding.Add(-1)
				if !ok {
					return
				}
				mu.Lock()
				answers = append(answers, answer{stamp: ticketStamp(t, dec.Ticket), used: used, settlement: st.Settlement})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return answers, wanted.Load()
}

// ticketStamp reads the window a sealed reservation ticket's hold was
// taken in: its binary form is base64url, followed by a 16-byte tag.
func ticketStamp(t *testing.T, sealed string) int64 {
	b, err := base64.RawURLEncoding.DecodeString(sealed)
	var tk floodgate.Ticket
	if err == nil && len(b) > 16 {
		err = tk.UnmarshalBinary(b[:len(b)-16])
	}
	if err != nil || len(tk.Entries) != 1 || tk.Until.IsZero() {
		t.Errorf("ticket %q: %+v %v, want a reservation's of one hold", sealed, tk, err)
		return 0
	}
	return tk.Entries[0].Stamp
}

// spentPerWindow adds up what the settlements charged in each window: a
// settlement that found its hold charged its usage in the window the hold
// was taken in; one whose hold had ended with its window charged nothing.
func spentPerWindow(t *testing.T, answers []answer) map[int64]int64 {
	t.Helper()
	spent := map[int64]int64{}
	for _, a := range answers {
		switch a.settlement {
		case "settled":
			spent[a.stamp] += a.used
		case "lapsed":
		default:
			t.Errorf("a settlement answered %q", a.settlement)
		}
	}
	return spent
}

// tokensLeft peeks at what a budget has left. (A check of cost 0 on a
// reservable Envoy limit would reserve.)
func (s *service) tokensLeft(limiter, attrs string) int64 {
	s.t.Helper()
	d := s.decide("/v1/check", `{"limiter":"`+limiter+`","attributes":`+attrs+`,"peek":true}`)
	return d.Remaining
}

// TestReservedBudgetOverHTTP: 20 concurrent streams against a daily budget
// of 100,000 tokens through the HTTP API, reserving 8,000 each and
// settling 1,000 to 8,000: never more spent than the budget, and at least
// 90% of it used. On Redis, four instances share the budget, and each
// stream settles through another instance than the one it reserved
// through.
func TestReservedBudgetOverHTTP(t *testing.T) {
	forEachStore(t, func(t *testing.T, store string) {
		config := fmt.Sprintf(`
limiters:
  - name: llm
    rules:
      - {name: tokens, key: [tenant], algorithm: fixed_window, align: day, time_zone: %s, limit: %d, reservable: true}
`, noonZone(), reservedBudget)
		services := instances(t, store, config, 4)
		answers, demanded := reservedHTTP(t, services, "acme", 10*time.Second, true)
		if t.Failed() {
			return
		}
		spent := spentPerWindow(t, answers)
		var total int64
		for _, n := range spent {
			total += n
		}
		left := services[0].tokensLeft("llm", `{"tenant":"acme"}`)
		t.Logf("%d instances: %d tokens demanded, %d spent of %d in %d answers, %d left", len(services), demanded, total, reservedBudget, len(answers), left)
		switch {
		case len(spent) != 1:
			t.Errorf("spending in %d windows, want the one day", len(spent))
		case demanded <= reservedBudget:
			t.Fatalf("%d tokens demanded: the load did not exceed the budget", demanded)
		case total > reservedBudget:
			t.Errorf("%d tokens spent, over the budget of %d", total, reservedBudget)
		case total < reservedBudget*9/10:
			t.Errorf("%d tokens spent, under 90%% of the budget of %d", total, reservedBudget)
		case left != reservedBudget-total:
			t.Errorf("the budget has %d left, want %d: what was not spent", left, reservedBudget-total)
		}
	})
}

// TestReservedBudgetWindowsTurn: the same load against a budget of
// 100,000 tokens a second, for 3 seconds, so that windows turn while
// answers stream: no window spends more than the budget.
func TestReservedBudgetWindowsTurn(t *testing.T) {
	forEachStore(t, func(t *testing.T, store string) {
		config := fmt.Sprintf(`
limiters:
  - name: llm
    rules:
      - {name: tokens, key: [tenant], algorithm: fixed_window, window: 1s, align: clock, limit: %d, reservable: true}
`, reservedBudget)
		services := instances(t, store, config, 4)
		answers, _ := reservedHTTP(t, services, "acme", 3*time.Second, false)
		if t.Failed() {
			return
		}
		spent := spentPerWindow(t, answers)
		var most int64
		for w, n := range spent {
			if n > reservedBudget {
				t.Errorf("window %d: %d tokens spent, over the budget of %d", w, n, reservedBudget)
			}
			most = max(most, n)
		}
		t.Logf("%d instances: %d answers over %d windows, at most %d of %d spent in one", len(services), len(answers), len(spent), most, reservedBudget)
		if len(spent) < 2 {
			t.Errorf("spending in %d windows: the windows did not turn under the load", len(spent))
		}
	})
}

// aiReserving is an Envoy AI Gateway token budget of 100,000 tokens a day
// whose checks reserve 8,000, held for a second.
const aiReserving = `domain: ai
descriptors:
  - key: user_id
    rate_limit:
      unit: day
      requests_per_unit: 100000
      floodgate: {reserve: 8000, hold: 1s}
`

// awayFromMidnight waits, when the UTC day (an Envoy day's window) ends
// within the next 15 seconds, until it has begun again.
func awayFromMidnight() {
	now := time.Now().UTC()
	next := now.Truncate(24 * time.Hour).Add(24 * time.Hour)
	if wait := next.Sub(now); wait < 15*time.Second {
		time.Sleep(wait + time.Second)
	}
}

// TestEnvoyReservedBudget replays Envoy AI Gateway's calls against a
// reservable budget: 20 concurrent streams for 3 seconds, each checking
// (hits_addend 0) before its request and, when its answer has streamed,
// charging the tokens it used (hits_addend 1,000 to 8,000; the answer is
// ignored) through another instance; one admitted stream in eight is cut
// off and never charged, its hold lapsing after a second. No more is spent than
// the budget, and the store counts exactly what was charged. On Redis,
// four instances share the budget.
func TestEnvoyReservedBudget(t *testing.T) {
	forEachStore(t, func(t *testing.T, store string) {
		dir := filepath.Join(t.TempDir(), "envoy")
		os.Mkdir(dir, 0o755)
		write(t, filepath.Join(dir, "ai.yaml"), aiReserving)
		config := "" // the store section alone
		if store == "" {
			config = "store:\n  memory: {max_keys: 100000}\n"
		}
		services := instances(t, store, config, 4, "--envoy-config-dir", dir)
		clients := make([]rlsv3.RateLimitServiceClient, len(services))
		for i, s := range services {
			clients[i] = dialRLS(t, s.grpc)
		}
		awayFromMidnight()
		call := func(c rlsv3.RateLimitServiceClient, hits uint64) (rlsv3.RateLimitResponse_Code, bool) {
			resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "ai",
				Descriptors: []*commonv3.RateLimitDescriptor{withHits(desc("user_id", "ann"), hits)}})
			if err != nil {
				t.Error(err)
				return 0, false
			}
			return resp.OverallCode, true
		}
		var (
			admitted, charged, answers, cut, refused atomic.Int64
			wg                                       sync.WaitGroup
		)
		deadline := time.Now().Add(3 * time.Second)
		for w := range reservedStreams {
			wg.Add(1)
			go func() {
				defer wg.Done()
				check, charge := clients[w%len(clients)], clients[(w+1)%len(clients)]
				for time.Now().Before(deadline) && !t.Failed() {
					code, ok := call(check, 0)
					if !ok {
						return
					}
					if code != rlsv3.RateLimitResponse_OK {
						refused.Add(1)
						time.Sleep(5 * time.Millisecond)
						continue
					}
					if admitted.Add(1)%8 == 0 { // the stream is cut off: no charge ever comes
						cut.Add(1)
						continue
					}
					time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond) // the answer streams
					used := 1000 + rand.Int64N(reservedMost-1000+1)
					if _, ok := call(charge, uint64(used)); !ok {
						return
					}
					charged.Add(used)
					answers.Add(1)
				}
			}()
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		time.Sleep(1100 * time.Millisecond) // the cut-off streams' holds lapse
		left := services[0].tokensLeft("envoy.ai", `{"user_id":"ann"}`)
		got := charged.Load()
		t.Logf("%d instances: %d answers charged %d tokens of %d, %d cut off, %d checks refused; %d left",
			len(services), answers.Load(), got, reservedBudget, cut.Load(), refused.Load(), left)
		switch {
		case refused.Load() == 0:
			t.Errorf("no check was refused: the load did not exceed the budget")
		case got > reservedBudget:
			t.Errorf("%d tokens charged, over the budget of %d", got, reservedBudget)
		case left != reservedBudget-got:
			t.Errorf("the budget has %d left, want %d: the budget less what was charged (a hold stranded, or a charge lost)", left, reservedBudget-got)
		}
	})
}

// TestReserveCommandLine: floodgate check --reserve asks for a
// reservation and prints its ticket and when it lapses.
func TestReserveCommandLine(t *testing.T) {
	s := startService(t, `
limiters:
  - name: llm
    rules:
      - {name: tokens, key: [tenant], algorithm: fixed_window, align: day, limit: 10000, reservable: true}
`, nil)
	addr := strings.TrimPrefix(s.http, "http://")
	out, err := runCheck(t, "--addr", addr, "--limiter", "llm", "--attr", "tenant=acme", "--reserve", "8000", "--hold", "10m")
	if err != nil || !strings.Contains(out, "ALLOWED") || !strings.Contains(out, "its holds lapse in 10m0s") || !strings.Contains(out, "ticket ") {
		t.Errorf("floodgate check --reserve: %v\n%s", err, out)
	}
	if left := s.tokensLeft("llm", `{"tenant":"acme"}`); left != 2000 {
		t.Errorf("%d left after the reservation, want 2000", left)
	}
	out, err = runCheck(t, "--addr", addr, "--limiter", "llm", "--attr", "tenant=acme", "--reserve", "8000", "--hold", "10m")
	if exitCode(err) != 1 || !strings.Contains(out, "DENIED") {
		t.Errorf("a reservation that does not fit: exit %d\n%s", exitCode(err), out)
	}
	out, err = runCheck(t, "--addr", addr, "--limiter", "llm", "--reserve", "8000")
	if exitCode(err) != 2 || !strings.Contains(out, "--reserve needs --hold") {
		t.Errorf("--reserve without --hold: exit %d\n%s", exitCode(err), out)
	}
}

// runCheck runs floodgate check with args and returns its output.
func runCheck(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command(binary, append([]string{"check"}, args...)...).CombinedOutput()
	return string(out), err
}

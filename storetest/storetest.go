// Package storetest is the conformance suite every store.Store must pass,
// and the reference model it checks stores against.
//
// A store's tests call Run with a constructor:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) store.Store {
//			s := memory.New(&memory.Options{SweepInterval: -1})
//			t.Cleanup(func() { s.Close() })
//			return s
//		})
//	}
//
// Background reclamation stays off: a sweep may forget an expired token
// bucket that a decision read but did not write, which the model keeps
// (full only at the burst of its last write), so a
// sweep between two steps that change a rule's burst would make the
// answers depend on when it ran. The memory store's own tests cover the
// sweeper.
//
// RunConcurrent is the suite's other part: it drives a store as
// production does, on its own clock, with many callers on one key and
// windows that turn during the run, and checks the bounds no schedule may
// break (and, for a remote store, every key's TTL).
//
// The suite drives the store through the public Limiter API with a clock
// that moves only when the suite moves it, so a store must take the time of
// each decision from Batch.Now (a remote store needs an option for that). It
// shares one store among many limiters, each with a name of its own, so a
// store must keep limiters and rules apart by the ops' scopes; it never needs
// the store empty.
//
// A store that binds a limiter's rules (store.Binder, as the memory store
// does) answers most decisions on that bound path, without a Batch. The
// suite then runs twice, the second time (subtests under BatchPath) with
// the store behind its Store interface alone, so that both of its paths
// meet the model on the same sequences.
//
// The model (see model.go) restates each algorithm's meaning independently
// of internal/algo, and the suite compares every answer with it exactly:
// Allowed, Never, Remaining, ResetAfter and RetryAfter of the decision and of
// every rule. Random sequences are seeded; a failure prints its seed, and
// setting the environment variable named by SeedEnv to it replays the run.
//
// Where the model makes a choice a store might make differently, it follows
// internal/algo and says so:
//
//   - Every access to a key, peeks and denials included, brings its state to
//     the access time with that access's parameters. Only a token bucket
//     whose limit changes can tell the difference: tokens refill at the rate
//     in force at each access that observes them.
//   - A refund is applied with the limits the ticket was charged under, and
//     gives tokens back only within one window of the charge.
//   - After a change of limit a GCRA key keeps its theoretical arrival time
//     rounded up to a whole µs: stores hold its fraction in 1/limit µs.
//   - A reservation is a write: a first-hit window it opens lives to its
//     end, and a denial's retry may be the lapse of a hold. Holds that
//     lapse together end oldest first in the order they were taken (what
//     settling without a ticket ends). See model.go for the rest.
package storetest

import (
	"hash/fnv"
	"os"
	"strconv"
	"testing"
	"time"

	// The calendar tests need time zones even on machines without a zone
	// database.
	_ "time/tzdata"

	"github.com/floodgate-go/floodgate/internal/clocktest"
	"github.com/floodgate-go/floodgate/store"
)

// SeedEnv names the environment variable that fixes the suite's random seed
// (an unsigned integer). Unset, each run draws a new one and failures print
// it.
const SeedEnv = "STORETEST_SEED"

// config is one run's randomness and size.
type config struct {
	seed      uint64
	sequences int
	steps     int
	zones     []*time.Location
}

// sharedStore is a store under test, shared by the limiters of a group of
// subtests, and the clocks that drive it. Limiters are given the store
// itself (Store), so that they see what it implements beyond the port
// (store.Binder). A store may assume that time does
// not go backwards across its keys (the memory store reclaims keys by the
// latest time it has seen), so each new clock starts no earlier than the
// others read.
type sharedStore struct {
	store.Store
	clocks []*clocktest.Manual
}

func openStore(t *testing.T, newStore func(*testing.T) store.Store) *sharedStore {
	return &sharedStore{Store: newStore(t)}
}

// latest is the latest time any of the store's clocks reads.
func (s *sharedStore) latest() time.Time {
	var l time.Time
	for _, c := range s.clocks {
		if now := c.Now(); now.After(l) {
			l = now
		}
	}
	return l
}

// clockAt returns a new clock for the store reading t, or the next whole
// hour after the latest time the store has seen if t is earlier.
func (s *sharedStore) clockAt(t time.Time) *clocktest.Manual {
	if l := s.latest(); !l.Before(t) {
		t = l.Truncate(time.Hour).Add(time.Hour)
	}
	c := clocktest.New(t)
	s.clocks = append(s.clocks, c)
	return c
}

// Run runs the conformance suite. newStore returns the store under test; it
// is called once per group of subtests, which share it, and should register
// its own clean-up with t.Cleanup.
func Run(t *testing.T, newStore func(t *testing.T) store.Store) {
	cfg := &config{sequences: 30, steps: 120, zones: []*time.Location{time.UTC}}
	if s := os.Getenv(SeedEnv); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", SeedEnv, s, err)
		}
		cfg.seed = v
	} else {
		cfg.seed = uint64(time.Now().UnixNano())
	}
	for _, name := range []string{"America/New_York", "Europe/Berlin", "America/Santiago"} {
		loc, err := time.LoadLocation(name)
		if err != nil {
			t.Fatalf("load time zone %s: %v", name, err)
		}
		cfg.zones = append(cfg.zones, loc)
	}
	t.Logf("storetest: seed %d (set %s to replay)", cfg.seed, SeedEnv)
	suite(t, newStore, cfg)
	// A store that binds (store.Binder) decides most decisions without a
	// Batch: the suite above ran that path. It runs again with the store
	// behind its port alone, so that the Batch path meets the model too.
	if _, binds := newStore(t).(store.Binder); binds {
		t.Run("BatchPath", func(t *testing.T) {
			suite(t, func(t *testing.T) store.Store { return batchOnly{newStore(t)} }, cfg)
		})
	}
}

// batchOnly is a store with its Binder hidden: limiters over it take the
// Batch path.
type batchOnly struct{ store.Store }

// suite runs every test of the suite on stores made by newStore.
func suite(t *testing.T, newStore func(t *testing.T) store.Store, cfg *config) {
	// Each subtest gets a seed of its own, derived from its name, so that
	// running one subtest alone replays it.
	sub := func(name string) *config {
		h := fnv.New64a()
		h.Write([]byte(name))
		c := *cfg
		c.seed = cfg.seed ^ h.Sum64()
		return &c
	}

	t.Run("Property", func(t *testing.T) { testProperties(t, newStore, sub("Property")) })
	t.Run("PropertyMultiRule", func(t *testing.T) { testMultiRule(t, newStore, sub("PropertyMultiRule"), false) })
	t.Run("PropertyShadowLimiter", func(t *testing.T) {
		c := sub("PropertyShadowLimiter")
		c.sequences = 10
		testMultiRule(t, newStore, c, true)
	})
	t.Run("PropertyCalendar", func(t *testing.T) { testCalendarProperty(t, newStore, sub("PropertyCalendar")) })
	t.Run("AllOrNothing", func(t *testing.T) { testAllOrNothing(t, newStore) })
	t.Run("AllOrNothingConcurrent", func(t *testing.T) { testAllOrNothingConcurrent(t, newStore) })
	t.Run("ShadowRule", func(t *testing.T) { testShadowRule(t, newStore) })
	t.Run("ShadowLimiter", func(t *testing.T) { testShadowLimiter(t, newStore) })
	t.Run("Never", func(t *testing.T) { testNever(t, newStore) })
	t.Run("Refund", func(t *testing.T) { testRefund(t, newStore) })
	t.Run("Record", func(t *testing.T) { testRecord(t, newStore) })
	t.Run("Calendar", func(t *testing.T) { testCalendar(t, newStore, cfg.zones) })
	t.Run("LimitChanges", func(t *testing.T) { testLimitChanges(t, newStore) })
	t.Run("Keys", func(t *testing.T) { testKeys(t, newStore) })
	t.Run("Reset", func(t *testing.T) { testReset(t, newStore) })
	t.Run("Reservations", func(t *testing.T) { testReservations(t, newStore) })
}

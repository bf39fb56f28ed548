package server

import (
	"container/heap"
	"log/slog"
	"slices"
	"sort"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-go/floodgate"
)

// The store keeps no totals of the holds it keeps, so the service counts
// its own: the reservations this instance admitted (over HTTP and Envoy's
// API), each rule's hold of them until it ends here, settled or released
// through this instance, or until its hold time passes, when it lapses.
// floodgate_held_units and floodgate_holds_lapsed_total report them
// (docs/metrics.md says what the numbers mean across instances).

// maxHolds bounds the holds one instance follows at once (a few hundred
// bytes each); further reservations are not counted until some end.
const maxHolds = 1 << 16

// holds follows the holds of the reservations this instance admitted. It
// is a prometheus.Collector of floodgate_held_units and
// floodgate_holds_lapsed_total, and safe for concurrent use.
type holds struct {
	clock    floodgate.Clock
	ruleName func(limiter, rule string) string
	logger   *slog.Logger

	mu      sync.Mutex
	byID    map[reservation][]*heldPart // by the reservation's ticket
	byKey   map[heldKey][]*heldPart     // each key's holds, the first to lapse first
	queue   partQueue                   // every hold followed, the first to lapse first
	held    map[ruleRef]int64           // units held, by rule
	lapsed  map[ruleRef]uint64          // holds lapsed, by rule
	dropped bool                        // a reservation went unfollowed, at maxHolds
}

// ruleRef names a rule of a limiter.
type ruleRef struct{ limiter, rule string }

// reservation names a reservation: its limiter and ticket id.
type reservation struct {
	limiter string
	id      uint64
}

// heldKey is a rule's key, as Envoy's settlements find holds by it.
type heldKey struct {
	ruleRef
	key string
}

// heldPart is one rule's hold of one reservation.
type heldPart struct {
	at    heldKey
	id    uint64
	units int64
	until int64 // µs since the epoch: when the hold lapses
	index int   // in the queue
}

func newHolds(clock floodgate.Clock, ruleName func(limiter, rule string) string, logger *slog.Logger) *holds {
	if clock == nil {
		clock = floodgate.SystemClock{}
	}
	return &holds{clock: clock, ruleName: ruleName, logger: logger,
		byID: map[reservation][]*heldPart{}, byKey: map[heldKey][]*heldPart{},
		held: map[ruleRef]int64{}, lapsed: map[ruleRef]uint64{}}
}

// Reserved follows the holds of t, an admitted reservation's ticket; any
// other ticket is ignored.
func (h *holds) Reserved(t floodgate.Ticket) {
	if !t.Valid() || t.Until.IsZero() {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sweep()
	if len(h.queue)+len(t.Entries) > maxHolds {
		if !h.dropped {
			h.dropped = true
			h.logger.Warn("too many live reservations to follow: floodgate_held_units counts the first ones only", "holds", maxHolds)
		}
		return
	}
	id := reservation{t.Limiter, t.ID}
	for _, e := range t.Entries {
		p := &heldPart{at: heldKey{ruleRef{t.Limiter, e.Rule}, e.Key}, id: t.ID, units: t.Cost, until: t.Until.UnixMicro()}
		h.byID[id] = append(h.byID[id], p)
		list := h.byKey[p.at]
		i := sort.Search(len(list), func(i int) bool { return list[i].until > p.until })
		h.byKey[p.at] = slices.Insert(list, i, p)
		heap.Push(&h.queue, p)
		h.held[p.at.ruleRef] += p.units
	}
}

// Settled ends the holds of t, a reservation's ticket settled or released
// through this instance (whatever the store found: a hold it no longer
// had has ended all the same).
func (h *holds) Settled(t floodgate.Ticket) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sweep()
	id := reservation{t.Limiter, t.ID}
	for _, p := range h.byID[id] {
		h.end(p)
	}
	delete(h.byID, id)
}

// SettledOldest ends this instance's oldest hold of limiter's rule on key,
// if it follows one, when a settlement without a ticket found a hold there
// (found).
func (h *holds) SettledOldest(limiter, rule, key string, found bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sweep()
	if list := h.byKey[heldKey{ruleRef{limiter, rule}, key}]; found && len(list) > 0 {
		p := list[0]
		h.end(p)
		h.forget(p)
	}
}

// sweep lapses every hold whose time has passed. It requires h.mu.
func (h *holds) sweep() {
	now := h.clock.Now().UnixMicro()
	for len(h.queue) > 0 && h.queue[0].until <= now {
		p := h.queue[0]
		h.end(p)
		h.forget(p)
		h.lapsed[p.at.ruleRef]++
	}
}

// end stops counting p. It requires h.mu.
func (h *holds) end(p *heldPart) {
	if p.index < 0 {
		return // ended already
	}
	heap.Remove(&h.queue, p.index)
	h.held[p.at.ruleRef] -= p.units
	list := h.byKey[p.at]
	if i := slices.Index(list, p); i >= 0 {
		list = slices.Delete(list, i, i+1)
	}
	if len(list) == 0 {
		delete(h.byKey, p.at)
	} else {
		h.byKey[p.at] = list
	}
}

// forget drops p from its reservation's holds. It requires h.mu.
func (h *holds) forget(p *heldPart) {
	id := reservation{p.at.limiter, p.id}
	list := h.byID[id]
	if i := slices.Index(list, p); i >= 0 {
		list = slices.Delete(list, i, i+1)
	}
	if len(list) == 0 {
		delete(h.byID, id)
	} else {
		h.byID[id] = list
	}
}

var (
	heldUnitsDesc = prometheus.NewDesc("floodgate_held_units",
		"Units held by the reservations this instance admitted, by limiter and rule, until they are settled or released through this instance or their hold time passes.",
		[]string{"limiter", "rule"}, nil)
	holdsLapsedDesc = prometheus.NewDesc("floodgate_holds_lapsed_total",
		"Holds of reservations this instance admitted that lapsed (their hold time passed) before a settlement or release through this instance ended them, by limiter and rule.",
		[]string{"limiter", "rule"}, nil)
)

// Describe implements prometheus.Collector.
func (h *holds) Describe(ch chan<- *prometheus.Desc) {
	ch <- heldUnitsDesc
	ch <- holdsLapsedDesc
}

// Collect implements prometheus.Collector. Holds whose time has passed
// lapse first.
func (h *holds) Collect(ch chan<- prometheus.Metric) {
	h.mu.Lock()
	h.sweep()
	type sample struct {
		ruleRef
		held   int64
		lapsed uint64
	}
	out := make([]sample, 0, len(h.held))
	for r, n := range h.held {
		out = append(out, sample{r, n, h.lapsed[r]})
	}
	h.mu.Unlock()
	for _, s := range out {
		rule := h.ruleName(s.limiter, s.rule)
		ch <- prometheus.MustNewConstMetric(heldUnitsDesc, prometheus.GaugeValue, float64(s.held), s.limiter, rule)
		ch <- prometheus.MustNewConstMetric(holdsLapsedDesc, prometheus.CounterValue, float64(s.lapsed), s.limiter, rule)
	}
}

// partQueue is a heap of holds, the first to lapse first.
type partQueue []*heldPart

func (q partQueue) Len() int           { return len(q) }
func (q partQueue) Less(i, j int) bool { return q[i].until < q[j].until }
func (q partQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}

func (q *partQueue) Push(x any) {
	p := x.(*heldPart)
	p.index = len(*q)
	*q = append(*q, p)
}

func (q *partQueue) Pop() any {
	old := *q
	p := old[len(old)-1]
	old[len(old)-1] = nil
	p.index = -1
	*q = old[:len(old)-1]
	return p
}

// envoyReservations tells the metrics of the Envoy service's reservations
// (envoy.Options.Reservations): the holds of its checks, and the
// settlements of its charges.
type envoyReservations struct{ m *metrics }

// Reserved implements envoy.Reservations.
func (r envoyReservations) Reserved(t floodgate.Ticket) { r.m.holds.Reserved(t) }

// SettledOldest implements envoy.Reservations.
func (r envoyReservations) SettledOldest(limiter, rule, key string, s floodgate.Settlement, err error) {
	if err != nil {
		r.m.settlements.WithLabelValues(limiter, "failed").Inc()
		return
	}
	r.m.settlements.WithLabelValues(limiter, s.String()).Inc()
	r.m.holds.SettledOldest(limiter, rule, key, s == floodgate.Settled)
}

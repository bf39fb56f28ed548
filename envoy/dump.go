package envoy

import (
	"fmt"
	"sort"
	"strings"

	"github.com/floodgate-go/floodgate"
)

// Dump describes every rate limit of the configuration, one line each,
// sorted, in the reference service's /rlconfig format:
//
//	domain.key_value.key: unit=MINUTE requests_per_unit=20, shadow_mode: false, quota_mode: false
//
// followed, for limits that use floodgate's extension, by the
// unit_multiplier, algorithm, burst, grant, reserve and hold.
func (c *Config) Dump() string {
	if c == nil {
		return ""
	}
	var lines []string
	for name, d := range c.domains {
		var walk func(n *node)
		walk = func(n *node) {
			if l := n.limit; l != nil {
				lines = append(lines, l.dumpLine(name))
			}
			for _, child := range sortedChildren(n) {
				walk(child)
			}
		}
		walk(d.root)
	}
	sort.Strings(lines)
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.String()
}

func (l *leaf) dumpLine(domain string) string {
	s := fmt.Sprintf("%s.%s: unit=%s requests_per_unit=%d, shadow_mode: %t, quota_mode: false",
		domain, l.path, l.unit, l.rpu, l.shadow)
	if l.multiplier > 1 {
		s += fmt.Sprintf(", unit_multiplier: %d", l.multiplier)
	}
	if l.algorithm != floodgate.FixedWindow {
		s += ", algorithm: " + l.algorithm.String()
	}
	if l.burst > 0 {
		s += fmt.Sprintf(", burst: %d", l.burst)
	}
	if l.grant {
		s += ", grant: true"
	}
	if l.reserve > 0 {
		s += fmt.Sprintf(", reserve: %d, hold: %v", l.reserve, l.hold)
	}
	if l.unlimited {
		s += ", unlimited: true"
	}
	return s
}

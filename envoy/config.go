package envoy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store"
)

// Config is a loaded set of Envoy rate limit configuration files: one domain
// per file. It is immutable and safe for concurrent use.
type Config struct {
	domains map[string]*domain
}

// File is one parsed configuration file, holding one domain.
type File struct {
	// Name is the file's path, as given to ParseFile.
	Name string
	// Domain is the domain the file configures.
	Domain string

	root *node
	line int // of the domain key
}

// ConfigError is a configuration mistake, located by file, line, column and
// field. Field is a path such as "descriptors[0].rate_limit.unit".
type ConfigError struct {
	File   string
	Line   int
	Column int
	Field  string
	Reason string
}

// Error returns "file:line:column: field: reason".
func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d:%d", e.Line, e.Column)
	}
	if e.Field != "" {
		b.WriteString(": ")
		b.WriteString(e.Field)
	}
	b.WriteString(": ")
	b.WriteString(e.Reason)
	return b.String()
}

// Domains returns the configured domains, sorted.
func (c *Config) Domains() []string {
	if c == nil {
		return nil
	}
	out := make([]string, 0, len(c.domains))
	for name := range c.domains {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// File returns the file that configured domain, or "".
func (c *Config) File(domain string) string {
	if c == nil || c.domains[domain] == nil {
		return ""
	}
	return c.domains[domain].file
}

// LoadDir loads every configuration file in dir: the regular files (or
// symbolic links to them) whose names end in ".yaml" or ".yml", in name
// order, skipping names that start with a dot (so the "..data" entries of
// a Kubernetes ConfigMap mount are not read twice). Subdirectories are not
// read. An empty directory is a valid, empty Config. The error joins every
// *ConfigError found, in file order.
func LoadDir(dir string) (*Config, error) {
	paths, err := DirFiles(dir)
	if err != nil {
		return nil, err
	}
	return LoadFiles(paths...)
}

// DirFiles lists, sorted, the files LoadDir reads in dir: its regular
// files (or links to them) named *.yaml or *.yml, not starting with a dot.
func DirFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("envoy: reading config directory: %w", err)
	}
	var paths []string
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue
		}
		if ext := filepath.Ext(name); ext != ".yaml" && ext != ".yml" {
			continue
		}
		p := filepath.Join(dir, name)
		fi, err := os.Stat(p) // follows symbolic links
		if err != nil {
			return nil, fmt.Errorf("envoy: %w", err)
		}
		if fi.Mode().IsRegular() {
			paths = append(paths, p)
		}
	}
	return paths, nil
}

// LoadFiles loads the named configuration files. Two files may not
// configure the same domain: that is reported with the files' other
// errors, even for a file that has some.
func LoadFiles(paths ...string) (*Config, error) {
	var files []*File
	var errs []error
	first := map[string]*File{} // by domain
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("envoy: %w", err))
			continue
		}
		f, err := parse(p, data)
		dup := false
		if f != nil && f.Domain != "" {
			if prev := first[f.Domain]; prev != nil {
				errs = append(errs, duplicateDomain(f, prev.Name))
				dup = true
			} else {
				first[f.Domain] = f
			}
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !dup {
			files = append(files, f)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return NewConfig(files...)
}

// NewConfig combines parsed files into a Config. It returns a *ConfigError
// for a domain configured by more than one file.
func NewConfig(files ...*File) (*Config, error) {
	c := &Config{domains: make(map[string]*domain, len(files))}
	var errs []error
	for _, f := range files {
		if prev := c.domains[f.Domain]; prev != nil {
			errs = append(errs, duplicateDomain(f, prev.file))
			continue
		}
		d, err := newDomain(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		c.domains[f.Domain] = d
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return c, nil
}

// duplicateDomain is the error of f, which configures a domain that the
// file prev configures already.
func duplicateDomain(f *File, prev string) *ConfigError {
	return &ConfigError{File: f.Name, Line: f.line, Column: 1, Field: "domain",
		Reason: fmt.Sprintf("duplicate domain %q (also in %s)", f.Domain, prev)}
}

// node is one level of a domain's descriptor tree: a descriptor of the file
// and the descriptors nested under it.
type node struct {
	exact    map[entry]*node  // children with a key and a value
	wild     []wildChild      // children whose value holds '*', in file order
	anyValue map[string]*node // children with a key and no value
	limit    *leaf            // the node's rate_limit, if any
	share    bool             // share_threshold: wildcard matches share one counter
	pattern  string           // the wildcard value, when share is set
}

type entry struct{ key, value string }

type wildChild struct {
	key, pattern string
	parts        []string // pattern split at each '*'
	n            *node
}

// matches says whether value matches the pattern, each '*' standing for
// any run of bytes, the empty one included.
func (w *wildChild) matches(value string) bool {
	first, last := w.parts[0], w.parts[len(w.parts)-1]
	if len(value) < len(first)+len(last) || !strings.HasPrefix(value, first) || !strings.HasSuffix(value, last) {
		return false
	}
	rest := value[len(first) : len(value)-len(last)]
	for _, p := range w.parts[1 : len(w.parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}

func (n *node) hasChildren() bool {
	return len(n.exact) > 0 || len(n.wild) > 0 || len(n.anyValue) > 0
}

// leaf is one rate_limit block.
type leaf struct {
	path      string   // the descriptor path, as the reference names it: key_value.key
	keys      []string // the descriptor's entry keys, in order
	rule      string   // the floodgate rule name
	field     string   // where the rate_limit block is, e.g. descriptors[0].rate_limit
	line, col int
	unlimited bool
	shadow    bool
	name      string
	replaces  []string

	rpu        uint32
	unit       rlsv3.RateLimitResponse_RateLimit_Unit
	multiplier uint32 // 0 when not configured
	window     time.Duration
	algorithm  floodgate.Algorithm
	burst      int64
	grant      bool // answered from quota grants (floodgate.Rule.Grant)
	override   bool // a limit Envoy supplied in the request
	// reserve, when not 0, makes the limit reservable (its extension's
	// reserve and hold): a check reserves reserve units for hold, and a
	// charge settles the oldest live hold (reserve.go).
	reserve int64
	hold    time.Duration
}

// counted says the leaf is one of its domain's floodgate rules: a limit
// that is neither unlimited nor 0 requests per unit.
func (l *leaf) counted() bool { return !l.unlimited && l.rpu > 0 }

// capacity is the most units the leaf's rule can hold.
func (l *leaf) capacity() int64 { return max(int64(l.rpu), l.burst) }

// domain is one file's compiled tree and the floodgate rules of its leaves.
type domain struct {
	name   string
	file   string
	root   *node
	leaves []*leaf // rules only, in rule order
	zeros  []*leaf // limits of 0 requests per unit, refused without a rule
	// written maps each rule name (of leaves and zeros) to the name
	// operators read: the descriptor path as written; keys to the
	// descriptor's entry keys.
	written map[string]string
	keys    map[string][]string
}

func newDomain(f *File) (*domain, error) {
	d := &domain{name: f.Domain, file: f.Name, root: f.root}
	var walk func(n *node)
	walk = func(n *node) {
		if l := n.limit; l != nil && l.counted() {
			d.leaves = append(d.leaves, l)
		} else if l != nil && !l.unlimited {
			d.zeros = append(d.zeros, l)
		}
		for _, c := range sortedChildren(n) {
			walk(c)
		}
	}
	walk(d.root)
	// A key holding '.' can give two paths one name: number the later one
	// ('g' never follows '-' in an encoded name). The counted limits are
	// named first, so that a limit of 0 never renames a counter.
	// Operators read each limit under its path as written (path_/api/*);
	// two limits of one path are told apart the same way.
	names, shown := map[string]bool{}, map[string]bool{}
	d.written, d.keys = map[string]string{}, map[string][]string{}
	for _, l := range append(append([]*leaf{}, d.leaves...), d.zeros...) {
		for i := 1; names[l.rule]; i++ {
			l.rule = fmt.Sprintf("%s-g%d", encodeName(l.path), i)
		}
		names[l.rule] = true
		w := l.path
		for i := 1; shown[w]; i++ {
			w = fmt.Sprintf("%s-g%d", l.path, i)
		}
		shown[w] = true
		d.written[l.rule], d.keys[l.rule] = w, l.keys
	}
	if len(d.leaves) == 0 {
		return d, nil
	}
	// Let the engine check what it will be asked to run.
	_, err := floodgate.New(limiterName(d.name), nopStore{}, d.rules(), nil)
	var ce *floodgate.ConfigError
	if errors.As(err, &ce) {
		for _, l := range d.leaves {
			if l.rule == ce.Rule {
				field := map[string]string{"limit": "requests_per_unit", "window": "unit", "burst": "floodgate.burst"}[ce.Field]
				if field == "" {
					field = ce.Field
				}
				return nil, &ConfigError{File: f.Name, Line: l.line, Column: l.col, Field: l.field + "." + field, Reason: ce.Reason}
			}
		}
		return nil, &ConfigError{File: f.Name, Line: f.line, Column: 1, Field: "domain", Reason: ce.Reason}
	}
	return d, err
}

// nopStore lets NewConfig validate rules without a store.
type nopStore struct{}

func (nopStore) Apply(context.Context, *store.Batch) error { return nil }

// sortedChildren lists n's children in a fixed order, so rule order does
// not depend on map iteration.
func sortedChildren(n *node) []*node {
	type kv struct {
		k string
		n *node
	}
	var all []kv
	for e, c := range n.exact {
		all = append(all, kv{"1" + e.key + "\x00" + e.value, c})
	}
	for _, w := range n.wild {
		all = append(all, kv{"2" + w.key + "\x00" + w.pattern, w.n})
	}
	for k, c := range n.anyValue {
		all = append(all, kv{"3" + k, c})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].k < all[j].k })
	out := make([]*node, len(all))
	for i := range all {
		out[i] = all[i].n
	}
	return out
}

// rules returns the floodgate rules of the domain's leaves.
func (d *domain) rules() []floodgate.Rule {
	rules := make([]floodgate.Rule, len(d.leaves))
	for i, l := range d.leaves {
		r := floodgate.Rule{
			Name:       l.rule,
			Algorithm:  l.algorithm,
			Limit:      int64(l.rpu),
			Window:     l.window,
			Burst:      l.burst,
			Key:        []string{l.rule},
			Shadow:     l.shadow,
			Grant:      l.grant,
			Reservable: l.reserve > 0,
		}
		if l.algorithm == floodgate.FixedWindow {
			r.Align = floodgate.AlignClock
		}
		rules[i] = r
	}
	return rules
}

// limiterName is the floodgate limiter name of an Envoy domain. It is
// prefixed so that it cannot collide with a limiter of floodgate's own
// config sharing the store.
func limiterName(domain string) string { return "envoy." + encodeName(domain) }

// encodeName maps s one-to-one onto the characters floodgate allows in
// names: letters, digits, '.' and '_' stand for themselves; every other
// byte becomes '-' and two hex digits. The names it makes are part of the
// store's keys, so they must not change; operators read the names as
// written instead (Service.RuleName).
func encodeName(s string) string {
	const hex = "0123456789abcdef"
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('-')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

// unitSeconds is the length of each unit, as the reference service counts
// it: a month is 30 days and a year 365 days.
var unitSeconds = map[rlsv3.RateLimitResponse_RateLimit_Unit]int64{
	rlsv3.RateLimitResponse_RateLimit_SECOND: 1,
	rlsv3.RateLimitResponse_RateLimit_MINUTE: 60,
	rlsv3.RateLimitResponse_RateLimit_HOUR:   3600,
	rlsv3.RateLimitResponse_RateLimit_DAY:    86400,
	rlsv3.RateLimitResponse_RateLimit_WEEK:   7 * 86400,
	rlsv3.RateLimitResponse_RateLimit_MONTH:  30 * 86400,
	rlsv3.RateLimitResponse_RateLimit_YEAR:   365 * 86400,
}

// maxWindowSeconds bounds unit × unit_multiplier: about 100 years.
const maxWindowSeconds = 100 * 365 * 86400

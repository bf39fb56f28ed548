package config

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate/internal/yamlnode"
	"go.yaml.in/yaml/v3"

	"github.com/floodgate-go/floodgate"
)

// maxNodes bounds the YAML nodes one configuration may visit, aliases
// included, so that a small file of nested aliases cannot make decoding
// explode.
const maxNodes = 200_000

// decoder turns a YAML document into a Config, collecting every error with
// its position. Defaults are set before a section is decoded; a key that is
// absent or null keeps its default.
type decoder struct {
	file   string
	opts   Options
	errs   ErrorList
	budget int
	// pos maps a field path ("limiters[0].rules[1].window") to the node of
	// its value, so that errors found later (by floodgate.New) can be
	// placed in the file.
	pos map[string]*yaml.Node
}

func (d *decoder) errorf(n *yaml.Node, field, format string, args ...any) {
	e := &Error{File: d.file, Field: field, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	d.errs = append(d.errs, e)
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

func (d *decoder) decode(data []byte) *Config {
	d.pos = make(map[string]*yaml.Node)
	c := &Config{File: d.file, Store: Store{Memory: &Memory{MaxKeys: DefaultMaxKeys}}}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		msg := err.Error()
		e := &Error{File: d.file, Msg: strings.TrimPrefix(msg, "yaml: ")}
		if m := yamlLine.FindStringSubmatch(msg); m != nil {
			e.Msg = m[2]
			e.Line = syntaxErrorLine(data, e.Msg)
		}
		d.errs = append(d.errs, e)
		return nil
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		d.errorf(nil, "", "empty configuration: it must define at least one limiter")
		return nil
	}
	root := doc.Content[0]
	f := d.mapping(root, "", "store", "failure_policy", "breaker", "limiters", "token_classes", "routes", "removed_limiters",
		"envoy", "grpc", "tracing")
	if f == nil {
		return nil
	}
	if n := f["envoy"]; n != nil {
		d.envoySection(n, c)
	}
	if n := f["grpc"]; n != nil {
		d.grpcSection(n, c)
	}
	if n := f["tracing"]; n != nil {
		d.tracingSection(n, c)
	}
	envoyDomains := d.opts.EnvoyDomains || c.EnvoyXDS != nil
	if n := f["store"]; n != nil {
		d.store(n, "store", &c.Store)
	}
	if n := f["failure_policy"]; n != nil {
		c.FailurePolicy = d.policy(n, "failure_policy")
	}
	if n := f["breaker"]; n != nil {
		d.breaker(n, "breaker", &c.Breaker)
	}
	// Limiters are required, unless Envoy domains are served too.
	var items []*yaml.Node
	switch n := f["limiters"]; {
	case n != nil:
		items = d.sequence(n, "limiters")
		if items != nil && len(items) == 0 && !envoyDomains {
			d.errorf(n, "limiters", "must hold at least one limiter")
		}
	case !envoyDomains:
		d.errorf(root, "limiters", "must hold at least one limiter")
		return c
	}
	seen := make(map[string]*yaml.Node)
	named := make(map[string]bool) // every limiter name written, valid or not
	for i, item := range items {
		p := fmt.Sprintf("limiters[%d]", i)
		l, ok := d.limiter(item, p, c)
		if l.Name != "" {
			named[l.Name] = true
		}
		// Names are checked whatever else is wrong with the limiter, so
		// that every error is reported at once.
		switch first := seen[l.Name]; {
		case l.Name == "":
		case strings.HasPrefix(l.Name, "envoy."):
			d.errorf(d.pos[p+".name"], p+".name", "names starting with \"envoy.\" are reserved for the domains of --envoy-config-dir")
			continue
		case first != nil:
			d.errorf(d.pos[p+".name"], p+".name", "duplicate limiter name %q (first defined at line %d)", l.Name, first.Line)
			continue
		default:
			seen[l.Name] = d.pos[p+".name"]
		}
		if ok {
			c.Limiters = append(c.Limiters, l)
		}
	}
	if n := f["token_classes"]; n != nil {
		c.TokenClasses = d.tokenClasses(n, "token_classes")
	}
	if n := f["routes"]; n != nil {
		c.Routes = d.routes(n, named)
	}
	if n := f["removed_limiters"]; n != nil {
		c.RemovedLimiters = d.removed(n, "removed_limiters", named)
	}
	return c
}

// removed decodes removed_limiters: names that the file no longer defines.
func (d *decoder) removed(n *yaml.Node, path string, defined map[string]bool) []string {
	names, _ := d.strs(n, path)
	for i, name := range names {
		if defined[name] {
			p := fmt.Sprintf("%s[%d]", path, i)
			d.errorf(d.at(p, n), p, "limiter %q is still defined under limiters", name)
		}
	}
	return names
}

// syntaxErrorLine returns the line of a YAML syntax error whose message is
// msg. The YAML package reports the line where the enclosing construct
// starts (sometimes counted from 0), not the line at fault; the line at
// fault is the one that, added to the lines before it, first makes the
// document fail with msg. A binary search over prefixes finds it.
func syntaxErrorLine(data []byte, msg string) int {
	ends := []int{} // ends[i] is the end of line i+1, newline included
	for i, c := range data {
		if c == '\n' {
			ends = append(ends, i+1)
		}
	}
	if len(ends) == 0 || ends[len(ends)-1] != len(data) {
		ends = append(ends, len(data))
	}
	fails := func(lines int) bool {
		var doc yaml.Node
		err := yaml.Unmarshal(data[:ends[lines-1]], &doc)
		return err != nil && strings.HasSuffix(err.Error(), ": "+msg)
	}
	lo, hi := 0, len(ends) // prefix lo does not fail with msg; prefix hi does
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if fails(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// resolve follows aliases and charges the node budget.
func (d *decoder) resolve(n *yaml.Node) *yaml.Node {
	d.budget--
	return yamlnode.Resolve(n)
}

func (d *decoder) exhausted(n *yaml.Node) bool {
	if d.budget >= 0 {
		return false
	}
	if d.budget > -1<<30 {
		d.errorf(n, "", "configuration too large: more than %d YAML nodes (counting aliases)", maxNodes)
		d.budget = -1 << 30
	}
	return true
}

// mapping checks that n is a mapping whose keys are all known, and returns
// its non-null values by key. It records each value's position.
func (d *decoder) mapping(n *yaml.Node, path string, known ...string) map[string]*yaml.Node {
	n = d.resolve(n)
	if d.exhausted(n) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "must be a mapping, got %s", yamlnode.Describe(n))
		return nil
	}
	out := make(map[string]*yaml.Node, len(n.Content)/2)
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := d.resolve(n.Content[i]), d.resolve(n.Content[i+1])
		key := k.Value
		p := yamlnode.Join(path, key)
		if k.Kind != yaml.ScalarNode {
			d.errorf(k, path, "keys must be plain names, got %s", yamlnode.Describe(k))
			continue
		}
		if seen[key] {
			d.errorf(k, p, "duplicate key")
			continue
		}
		seen[key] = true
		if known != nil && !slices.Contains(known, key) {
			d.errorf(k, p, "unknown field%s", yamlnode.Suggest(key, known, "fields"))
			continue
		}
		d.pos[p] = v
		if !yamlnode.IsNull(v) {
			out[key] = v
		}
	}
	return out
}

// attributes decodes a mapping of attribute names to string values.
func (d *decoder) attributes(n *yaml.Node, path string) floodgate.Attributes {
	f := d.mapping(n, path)
	if f == nil {
		return nil
	}
	out := make(floodgate.Attributes, len(f))
	for k, v := range f {
		if s, ok := d.str(v, yamlnode.Join(path, k)); ok {
			out[k] = s
		}
	}
	return out
}

// sequence returns the items of the list n: nil when n is not a list (an
// error is recorded), and an empty, non-nil slice for an empty list, so
// that callers can require at least one item.
func (d *decoder) sequence(n *yaml.Node, path string) []*yaml.Node {
	n = d.resolve(n)
	if d.exhausted(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, path, "must be a list, got %s", yamlnode.Describe(n))
		return nil
	}
	for i, item := range n.Content {
		d.pos[fmt.Sprintf("%s[%d]", path, i)] = item
	}
	if n.Content == nil {
		return []*yaml.Node{} // an empty list, told apart from no list (nil)
	}
	return n.Content
}

func (d *decoder) scalar(n *yaml.Node, path string) (*yaml.Node, bool) {
	n = d.resolve(n)
	if d.exhausted(n) {
		return n, false
	}
	if n.Kind != yaml.ScalarNode || yamlnode.IsNull(n) {
		d.errorf(n, path, "must be a single value, got %s", yamlnode.Describe(n))
		return n, false
	}
	return n, true
}

func (d *decoder) str(n *yaml.Node, path string) (string, bool) {
	n, ok := d.scalar(n, path)
	if !ok {
		return "", false
	}
	return n.Value, true
}

// strs decodes a list of strings; a single string is a list of one.
func (d *decoder) strs(n *yaml.Node, path string) ([]string, bool) {
	if r := d.resolve(n); r.Kind == yaml.ScalarNode && !yamlnode.IsNull(r) {
		return []string{r.Value}, true
	}
	items := d.sequence(n, path)
	if items == nil {
		return nil, false
	}
	out := make([]string, 0, len(items))
	ok := true
	for i, item := range items {
		s, good := d.str(item, fmt.Sprintf("%s[%d]", path, i))
		ok = ok && good
		out = append(out, s)
	}
	return out, ok
}

func (d *decoder) integer(n *yaml.Node, path string) (int64, bool) {
	n, ok := d.scalar(n, path)
	if !ok {
		return 0, false
	}
	switch n.ShortTag() {
	case "!!int":
		v, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
		if err != nil {
			d.errorf(n, path, "%s is out of range", n.Value)
			return 0, false
		}
		return v, true
	case "!!float":
		f, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64)
		if err == nil && f == math.Trunc(f) && math.Abs(f) < 1<<53 {
			return int64(f), true
		}
	}
	d.errorf(n, path, "must be a whole number, got %s", yamlnode.Describe(n))
	return 0, false
}

// intIn decodes a whole number from lo to hi. A number outside that range
// is an error whose message is format applied to the number.
func (d *decoder) intIn(n *yaml.Node, path string, lo, hi int64, format string) (int, bool) {
	i, ok := d.integer(n, path)
	if !ok {
		return 0, false
	}
	if i < lo || i > hi {
		d.errorf(n, path, format, i)
		return 0, false
	}
	return int(i), true
}

func (d *decoder) boolean(n *yaml.Node, path string) (bool, bool) {
	n, ok := d.scalar(n, path)
	if !ok {
		return false, false
	}
	if n.ShortTag() == "!!bool" {
		if b, err := strconv.ParseBool(strings.ToLower(n.Value)); err == nil {
			return b, true
		}
	}
	d.errorf(n, path, "must be true or false, got %s", yamlnode.Describe(n))
	return false, false
}

// duration decodes a Go duration such as 500ms, 1s, 15m or 24h.
func (d *decoder) duration(n *yaml.Node, path string) (time.Duration, bool) {
	n, ok := d.scalar(n, path)
	if !ok {
		return 0, false
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		if _, e := strconv.ParseFloat(n.Value, 64); e == nil {
			d.errorf(n, path, "must be a duration with a unit, such as 500ms, 1s, 15m or 24h, got %s", yamlnode.Describe(n))
		} else {
			d.errorf(n, path, "must be a duration such as 500ms, 1s, 15m or 24h, got %s", yamlnode.Describe(n))
		}
		return 0, false
	}
	return v, true
}

// positive decodes a duration of at least 1ms.
func (d *decoder) positive(n *yaml.Node, path string) (time.Duration, bool) {
	v, ok := d.duration(n, path)
	if ok && v < time.Millisecond {
		d.errorf(n, path, "must be at least 1ms, got %v", v)
		return 0, false
	}
	return v, ok
}

func (d *decoder) policy(n *yaml.Node, path string) floodgate.FailurePolicy {
	s, ok := d.str(n, path)
	if !ok {
		return floodgate.FailOpen
	}
	switch s {
	case "open":
		return floodgate.FailOpen
	case "closed":
		return floodgate.FailClosed
	}
	d.errorf(n, path, "must be open or closed, got %q", s)
	return floodgate.FailOpen
}

// at returns the node recorded for path, or fallback.
func (d *decoder) at(path string, fallback *yaml.Node) *yaml.Node {
	if n := d.pos[path]; n != nil {
		return n
	}
	return fallback
}

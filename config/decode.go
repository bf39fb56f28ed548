package config

import (
	"fmt"
	"math"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

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
			e.Line, _ = strconv.Atoi(m[1])
			e.Msg = m[2]
		}
		d.errs = append(d.errs, e)
		return nil
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		d.errorf(nil, "", "empty configuration: it must define at least one limiter")
		return nil
	}
	root := doc.Content[0]
	f := d.mapping(root, "", "store", "failure_policy", "breaker", "limiters")
	if f == nil {
		return nil
	}
	if n := f["store"]; n != nil {
		d.store(n, "store", &c.Store)
	}
	if n := f["failure_policy"]; n != nil {
		c.FailurePolicy = d.policy(n, "failure_policy")
	}
	if n := f["breaker"]; n != nil {
		d.breaker(n, "breaker", &c.Breaker)
	}
	n := f["limiters"]
	if n == nil {
		d.errorf(root, "limiters", "must hold at least one limiter")
		return c
	}
	items := d.sequence(n, "limiters")
	if items != nil && len(items) == 0 {
		d.errorf(n, "limiters", "must hold at least one limiter")
	}
	var deadline time.Duration
	if c.Store.Redis != nil {
		deadline = c.Store.Redis.Deadline
	}
	seen := make(map[string]*yaml.Node)
	for i, item := range items {
		p := fmt.Sprintf("limiters[%d]", i)
		l, ok := d.limiter(item, p, c, deadline)
		if !ok {
			continue
		}
		if strings.HasPrefix(l.Name, "envoy.") {
			d.errorf(d.pos[p+".name"], p+".name", "names starting with \"envoy.\" are reserved for the domains of --envoy-config-dir")
			continue
		}
		if first := seen[l.Name]; first != nil {
			d.errorf(d.pos[p+".name"], p+".name", "duplicate limiter name %q (first defined at line %d)", l.Name, first.Line)
			continue
		}
		seen[l.Name] = d.pos[p+".name"]
		c.Limiters = append(c.Limiters, l)
	}
	return c
}

// resolve follows aliases and charges the node budget.
func (d *decoder) resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 16; i++ {
		n = n.Alias
	}
	d.budget--
	return n
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

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if isNull(n) {
			return "nothing"
		}
		return strconv.Quote(n.Value)
	}
	return "something else"
}

// mapping checks that n is a mapping whose keys are all known, and returns
// its non-null values by key. It records each value's position.
func (d *decoder) mapping(n *yaml.Node, path string, known ...string) map[string]*yaml.Node {
	n = d.resolve(n)
	if d.exhausted(n) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "must be a mapping, got %s", describe(n))
		return nil
	}
	out := make(map[string]*yaml.Node, len(n.Content)/2)
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := d.resolve(n.Content[i]), d.resolve(n.Content[i+1])
		key := k.Value
		p := join(path, key)
		if k.Kind != yaml.ScalarNode {
			d.errorf(k, path, "keys must be plain names, got %s", describe(k))
			continue
		}
		if seen[key] {
			d.errorf(k, p, "duplicate key")
			continue
		}
		seen[key] = true
		if known != nil && !contains(known, key) {
			d.errorf(k, p, "unknown field%s", suggest(key, known))
			continue
		}
		d.pos[p] = v
		if !isNull(v) {
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
		if s, ok := d.str(v, join(path, k)); ok {
			out[k] = s
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// suggest names the closest known key, or lists them all.
func suggest(key string, known []string) string {
	best, dist := "", 3
	for _, k := range known {
		if e := editDistance(key, k); e < dist {
			best, dist = k, e
		}
	}
	if best != "" {
		return fmt.Sprintf(" (did you mean %s?)", best)
	}
	return " (known fields: " + strings.Join(known, ", ") + ")"
}

func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func (d *decoder) sequence(n *yaml.Node, path string) []*yaml.Node {
	n = d.resolve(n)
	if d.exhausted(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, path, "must be a list, got %s", describe(n))
		return nil
	}
	for i, item := range n.Content {
		d.pos[fmt.Sprintf("%s[%d]", path, i)] = item
	}
	return n.Content
}

func (d *decoder) scalar(n *yaml.Node, path string) (*yaml.Node, bool) {
	n = d.resolve(n)
	if d.exhausted(n) {
		return n, false
	}
	if n.Kind != yaml.ScalarNode || isNull(n) {
		d.errorf(n, path, "must be a single value, got %s", describe(n))
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
	if r := d.resolve(n); r.Kind == yaml.ScalarNode && !isNull(r) {
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
	d.errorf(n, path, "must be a whole number, got %s", describe(n))
	return 0, false
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
	d.errorf(n, path, "must be true or false, got %s", describe(n))
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
			d.errorf(n, path, "must be a duration with a unit, such as 500ms, 1s, 15m or 24h, got %s", describe(n))
		} else {
			d.errorf(n, path, "must be a duration such as 500ms, 1s, 15m or 24h, got %s", describe(n))
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

func (d *decoder) breaker(n *yaml.Node, path string, b *floodgate.BreakerOptions) {
	f := d.mapping(n, path, "failures", "cooldown", "disabled")
	if f == nil {
		return
	}
	if v := f["failures"]; v != nil {
		if i, ok := d.integer(v, path+".failures"); ok {
			if i < 1 || i > 1_000_000 {
				d.errorf(v, path+".failures", "must be between 1 and 1000000, got %d", i)
			} else {
				b.Failures = int(i)
			}
		}
	}
	if v := f["cooldown"]; v != nil {
		if c, ok := d.positive(v, path+".cooldown"); ok {
			b.Cooldown = c
		}
	}
	if v := f["disabled"]; v != nil {
		if off, ok := d.boolean(v, path+".disabled"); ok && off {
			b.Failures = -1
		}
	}
}

func (d *decoder) store(n *yaml.Node, path string, s *Store) {
	f := d.mapping(n, path, "memory", "redis")
	if f == nil {
		return
	}
	if f["memory"] != nil && f["redis"] != nil {
		d.errorf(f["redis"], path+".redis", "set either memory or redis, not both")
		return
	}
	if v := f["memory"]; v != nil {
		p := path + ".memory"
		m := d.mapping(v, p, "max_keys")
		if v := m["max_keys"]; v != nil {
			if k, ok := d.integer(v, p+".max_keys"); ok {
				if k < 1 || k > 1<<40 {
					d.errorf(v, p+".max_keys", "must be at least 1, got %d", k)
				} else {
					s.Memory.MaxKeys = int(k)
				}
			}
		}
	}
	if v := f["redis"]; v != nil {
		s.Memory = nil
		s.Redis = d.redis(v, path+".redis")
	}
}

func (d *decoder) redis(n *yaml.Node, path string) *Redis {
	r := &Redis{Deadline: floodgate.DefaultTimeout, KeyPrefix: "fg:"}
	f := d.mapping(n, path, "url", "cluster", "sentinel", "username", "password", "db", "deadline",
		"key_prefix", "deny_cache_size", "fallback")
	if f == nil {
		return r
	}
	var modes []string
	for _, k := range []string{"url", "cluster", "sentinel"} {
		if f[k] != nil {
			modes = append(modes, k)
		}
	}
	switch {
	case len(modes) == 0:
		d.errorf(n, path, "set one of url, cluster or sentinel")
	case len(modes) > 1:
		d.errorf(f[modes[1]], join(path, modes[1]), "set only one of url, cluster or sentinel (%s is set too)", modes[0])
	}
	if v := f["url"]; v != nil {
		p := path + ".url"
		if s, ok := d.str(v, p); ok {
			u, err := url.Parse(s)
			switch {
			case err != nil:
				d.errorf(v, p, "%v", err)
			case u.Scheme != "redis" && u.Scheme != "rediss" && u.Scheme != "unix":
				d.errorf(v, p, "must start with redis://, rediss:// or unix://, got %q", s)
			default:
				r.URL = s
			}
		}
	}
	if v := f["cluster"]; v != nil {
		r.Cluster = d.addrs(v, path+".cluster")
	}
	if v := f["sentinel"]; v != nil {
		p := path + ".sentinel"
		s := &Sentinel{}
		sf := d.mapping(v, p, "master", "addrs", "password")
		if sf != nil {
			if m := sf["master"]; m != nil {
				s.Master, _ = d.str(m, p+".master")
			} else {
				d.errorf(v, p+".master", "must be set")
			}
			if a := sf["addrs"]; a != nil {
				s.Addrs = d.addrs(a, p+".addrs")
			} else {
				d.errorf(v, p+".addrs", "must list at least one sentinel")
			}
			if pw := sf["password"]; pw != nil {
				s.Password, _ = d.str(pw, p+".password")
			}
		}
		r.Sentinel = s
	}
	if v := f["username"]; v != nil {
		r.Username, _ = d.str(v, path+".username")
	}
	if v := f["password"]; v != nil {
		r.Password, _ = d.str(v, path+".password")
	}
	if v := f["deadline"]; v != nil {
		if t, ok := d.positive(v, path+".deadline"); ok {
			r.Deadline = t
		}
	}
	if v := f["key_prefix"]; v != nil {
		p := path + ".key_prefix"
		if s, ok := d.str(v, p); ok {
			if strings.ContainsAny(s, "{}") {
				d.errorf(v, p, "must not contain '{' or '}' (keys carry their own hash tags)")
			}
			r.KeyPrefix = s
		}
	}
	if v := f["db"]; v != nil {
		if db, ok := d.integer(v, path+".db"); ok {
			if db < 0 || db > 1<<20 {
				d.errorf(v, path+".db", "must be a database number, got %d", db)
			} else {
				r.DB = int(db)
			}
		}
	}
	if v := f["deny_cache_size"]; v != nil {
		if n, ok := d.integer(v, path+".deny_cache_size"); ok {
			if n < -1 || n > 1<<30 {
				d.errorf(v, path+".deny_cache_size", "must be -1 (off) or a key count, got %d", n)
			} else {
				r.DenyCacheSize = int(n)
			}
		}
	}
	if v := f["fallback"]; v != nil {
		r.Fallback = d.fallback(v, path+".fallback")
	}
	return r
}

func (d *decoder) fallback(n *yaml.Node, path string) *Fallback {
	fb := &Fallback{}
	f := d.mapping(n, path, "instances", "retry", "max_keys")
	if f == nil {
		return fb
	}
	if v := f["instances"]; v != nil {
		if i, ok := d.integer(v, path+".instances"); ok {
			if i < 1 || i > 1_000_000 {
				d.errorf(v, path+".instances", "must be at least 1, got %d", i)
			} else {
				fb.Instances = int(i)
			}
		}
	} else {
		d.errorf(n, path+".instances", "must be set: how many instances share the limits")
	}
	if v := f["retry"]; v != nil {
		fb.Retry, _ = d.positive(v, path+".retry")
	}
	if v := f["max_keys"]; v != nil {
		if k, ok := d.integer(v, path+".max_keys"); ok {
			if k < 1 || k > 1<<40 {
				d.errorf(v, path+".max_keys", "must be at least 1, got %d", k)
			} else {
				fb.MaxKeys = int(k)
			}
		}
	}
	return fb
}

// addrs decodes a non-empty list of host:port addresses.
func (d *decoder) addrs(n *yaml.Node, path string) []string {
	list, ok := d.strs(n, path)
	if !ok {
		return nil
	}
	if len(list) == 0 {
		d.errorf(n, path, "must list at least one address")
	}
	for i, a := range list {
		if _, _, err := net.SplitHostPort(a); err != nil {
			p := fmt.Sprintf("%s[%d]", path, i)
			d.errorf(d.at(p, n), p, "must be host:port, got %q", a)
			return nil
		}
	}
	return list
}

// at returns the node recorded for path, or fallback.
func (d *decoder) at(path string, fallback *yaml.Node) *yaml.Node {
	if n := d.pos[path]; n != nil {
		return n
	}
	return fallback
}

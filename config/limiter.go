package config

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate/internal/yamlnode"
	"github.com/floodgate-go/floodgate/store"
	"go.yaml.in/yaml/v3"

	"github.com/floodgate-go/floodgate"
)

// ruleSource remembers where a rule's tiers came from, so that an error
// floodgate.New reports about a generated override points at the tier.
type ruleSource struct {
	explicit int      // overrides written as such; tiers follow them
	tiers    []string // tier values, in the order their overrides follow
}

// limiter decodes one limiter, starting from c's global settings.
func (d *decoder) limiter(n *yaml.Node, path string, c *Config) (Limiter, bool) {
	l := Limiter{FailurePolicy: c.FailurePolicy, Breaker: c.Breaker}
	if c.Store.Redis != nil {
		l.Deadline = c.Store.Redis.Deadline
	}
	errs := len(d.errs)
	f := d.mapping(n, path, "name", "failure_policy", "shadow", "require_keys", "deadline", "breaker", "tier_attribute", "token_rules", "rules")
	if f == nil {
		return l, false
	}
	if v := f["name"]; v != nil {
		l.Name, _ = d.str(v, path+".name")
	}
	if v := f["failure_policy"]; v != nil {
		l.FailurePolicy = d.policy(v, path+".failure_policy")
	}
	if v := f["shadow"]; v != nil {
		l.Shadow, _ = d.boolean(v, path+".shadow")
	}
	if v := f["require_keys"]; v != nil {
		l.RequireKeys, _ = d.boolean(v, path+".require_keys")
	}
	if v := f["deadline"]; v != nil {
		l.Deadline, _ = d.positive(v, path+".deadline")
	}
	if v := f["breaker"]; v != nil {
		d.breaker(v, path+".breaker", &l.Breaker)
	}
	var tierAttr string
	if v := f["tier_attribute"]; v != nil {
		tierAttr, _ = d.str(v, path+".tier_attribute")
	}
	var sources []ruleSource
	if v := f["rules"]; v != nil {
		ruleNames := map[string]*yaml.Node{}
		for i, item := range d.sequence(v, path+".rules") {
			p := fmt.Sprintf("%s.rules[%d]", path, i)
			before := len(d.errs)
			r, src := d.rule(item, p, tierAttr)
			d.checkRule(r, item, p, src, d.errs[before:])
			if v := d.pos[p+".grant"]; r.Grant && c.Store.Redis == nil && v != nil {
				d.errorf(v, p+".grant", "needs store.redis: grants share a Redis count among instances, and a memory store answers in-process already")
			}
			// Checked here, not left to floodgate.New, so that it is
			// reported with the limiter's other errors.
			if at := d.pos[p+".name"]; r.Name != "" && at != nil {
				if first := ruleNames[r.Name]; first != nil {
					d.errorf(at, p+".name", "duplicate rule name %q (first defined at line %d)", r.Name, first.Line)
				} else {
					ruleNames[r.Name] = at
				}
			}
			l.Rules = append(l.Rules, r)
			sources = append(sources, src)
		}
	}
	if len(d.errs) > errs {
		return l, false
	}
	// floodgate.New is the one authority on what a valid limiter is: build
	// it on a store that holds nothing and place its complaint in the file.
	if _, err := l.New(nopStore{}, floodgate.Options{}); err != nil {
		d.placeConfigError(err, n, path, sources)
		return l, false
	}
	if v := f["token_rules"]; v != nil {
		d.tokenRules(v, path+".token_rules", &l)
		if len(d.errs) > errs {
			return l, false
		}
	}
	return l, true
}

// checkRule reports every problem floodgate.New finds in the rule r at
// path, not only the first: it validates r alone, and after each complaint
// sets the field at fault to a value New accepts and validates again.
// Fields that decoding already reported (reported) are not reported twice.
func (d *decoder) checkRule(r floodgate.Rule, n *yaml.Node, path string, src ruleSource, reported ErrorList) {
	done := make(map[string]bool, len(reported))
	for _, e := range reported {
		field := strings.TrimPrefix(e.Field, path+".")
		if field == "algorithm" || field == path || strings.HasPrefix(e.Msg, "unknown field") {
			return // the rest depends on what the rule is, or on a misspelt field
		}
		done[field] = true
	}
	r.Overrides = slices.Clone(r.Overrides)
	for range 32 {
		_, err := floodgate.New("check", nopStore{}, []floodgate.Rule{r}, nil)
		var ce *floodgate.ConfigError
		if err == nil || !errors.As(err, &ce) || ce.RuleIndex != 0 {
			return
		}
		field := ruleField(ce.Field, src)
		if !done[field] {
			done[field] = true
			p := path + "." + field
			d.errorf(d.nearest(p, n), p, "%s", ce.Reason)
		}
		if !neutralize(&r, ce.Field) {
			return
		}
	}
}

// neutralize sets the field of r that floodgate.New named to a value it
// accepts, and reports whether it knew how.
func neutralize(r *floodgate.Rule, field string) bool {
	var i int
	var sub string
	if n, _ := fmt.Sscanf(field, "overrides[%d].%s", &i, &sub); n == 2 && i < len(r.Overrides) {
		o := &r.Overrides[i]
		switch sub {
		case "match":
			o.Match = floodgate.Attributes{"a": "a"}
		case "limit":
			o.Limit, o.Burst = 1, 0
		case "burst":
			o.Burst = 0
		default:
			return false
		}
		return true
	}
	switch {
	case field == "name":
		r.Name = "rule"
	case field == "limit" && r.Limit < 1:
		r.Limit = 1
	case field == "limit": // too large, with the burst or the window
		r.Limit, r.Burst, r.Window = 1, 0, time.Second
		for i := range r.Overrides {
			r.Overrides[i].Burst = 0
		}
	case field == "window" || field == "buckets" && r.Buckets == 0:
		r.Window = time.Second
	case field == "buckets":
		r.Buckets = 0
	case field == "burst":
		r.Burst = 0
	case field == "grant":
		r.Grant = false
	case field == "reservable":
		r.Reservable = false
	case field == "align":
		r.Align, r.Location = floodgate.AlignFirstHit, nil
	case field == "location":
		r.Location = nil
	case strings.HasPrefix(field, "key["):
		r.Key = nil
	default:
		return false
	}
	return true
}

func (d *decoder) rule(n *yaml.Node, path, tierAttr string) (floodgate.Rule, ruleSource) {
	var r floodgate.Rule
	var src ruleSource
	f := d.mapping(n, path, "name", "key", "algorithm", "limit", "window", "burst", "buckets",
		"align", "time_zone", "shadow", "grant", "reservable", "overrides", "tier_attribute", "tiers")
	if f == nil {
		return r, src
	}
	if v := f["name"]; v != nil {
		r.Name, _ = d.str(v, path+".name")
	}
	if v := f["key"]; v != nil {
		r.Key, _ = d.strs(v, path+".key")
	}
	if v := f["algorithm"]; v != nil {
		if s, ok := d.str(v, path+".algorithm"); ok {
			a, err := store.ParseAlgorithm(s)
			if err != nil {
				d.errorf(v, path+".algorithm", "%v", err)
			}
			r.Algorithm = a
		}
	} else {
		d.errorf(n, path+".algorithm", "must be set (%s)", store.AlgorithmNames())
	}
	if v := f["limit"]; v != nil {
		r.Limit, _ = d.integer(v, path+".limit")
	} else {
		d.errorf(n, path+".limit", "must be set")
	}
	if v := f["window"]; v != nil {
		r.Window, _ = d.duration(v, path+".window")
	}
	if v := f["burst"]; v != nil {
		r.Burst = d.burst(v, path+".burst")
	}
	if v := f["buckets"]; v != nil {
		r.Buckets, _ = d.integer(v, path+".buckets")
	}
	if v := f["align"]; v != nil {
		if s, ok := d.str(v, path+".align"); ok {
			a, err := store.ParseAlign(s)
			if err != nil {
				d.errorf(v, path+".align", "%v", err)
			}
			r.Align = a
		}
	}
	if v := f["time_zone"]; v != nil {
		if s, ok := d.str(v, path+".time_zone"); ok {
			loc, err := time.LoadLocation(s)
			if err != nil || s == "" || strings.EqualFold(s, "local") {
				d.errorf(v, path+".time_zone", "unknown time zone %q (use an IANA name such as Europe/Berlin, or UTC)", s)
			} else {
				r.Location = loc
			}
		}
	}
	if v := f["shadow"]; v != nil {
		r.Shadow, _ = d.boolean(v, path+".shadow")
	}
	if v := f["grant"]; v != nil {
		r.Grant, _ = d.boolean(v, path+".grant")
	}
	if v := f["reservable"]; v != nil {
		r.Reservable, _ = d.boolean(v, path+".reservable")
	}
	if v := f["overrides"]; v != nil {
		for i, item := range d.sequence(v, path+".overrides") {
			p := fmt.Sprintf("%s.overrides[%d]", path, i)
			of := d.mapping(item, p, "match", "limit", "burst")
			if of == nil {
				continue
			}
			var o floodgate.Override
			if m := of["match"]; m != nil {
				o.Match = d.attributes(m, p+".match")
			}
			d.limits(item, p, of, &o)
			r.Overrides = append(r.Overrides, o)
		}
	}
	src.explicit = len(r.Overrides)
	if v := f["tier_attribute"]; v != nil {
		tierAttr, _ = d.str(v, path+".tier_attribute")
		if f["tiers"] == nil {
			d.errorf(v, path+".tier_attribute", "is set but the rule has no tiers")
		}
	}
	if v := f["tiers"]; v != nil {
		p := path + ".tiers"
		if tierAttr == "" {
			d.errorf(v, p, "needs tier_attribute, on the rule or its limiter, to name the attribute that selects a tier")
		}
		tiers := d.mapping(v, p)
		for _, value := range orderedKeys(d.resolve(v)) {
			tv := tiers[value]
			if tv == nil {
				continue
			}
			tp := p + "." + value
			tf := d.mapping(tv, tp, "limit", "burst")
			if tf == nil {
				continue
			}
			o := floodgate.Override{Match: floodgate.Attributes{tierAttr: value}}
			d.limits(tv, tp, tf, &o)
			r.Overrides = append(r.Overrides, o)
			src.tiers = append(src.tiers, value)
		}
	}
	return r, src
}

// limits decodes the limit (required) and burst of an override or a tier:
// n is its node and f its fields.
func (d *decoder) limits(n *yaml.Node, path string, f map[string]*yaml.Node, o *floodgate.Override) {
	if v := f["limit"]; v != nil {
		o.Limit, _ = d.integer(v, path+".limit")
	} else {
		d.errorf(n, path+".limit", "must be set")
	}
	if v := f["burst"]; v != nil {
		o.Burst = d.burst(v, path+".burst")
	}
}

// burst decodes a burst: 0 would mean "the default" to floodgate.New, so
// written out it is an error rather than a silent default.
func (d *decoder) burst(n *yaml.Node, path string) int64 {
	b, ok := d.integer(n, path)
	if ok && b == 0 {
		d.errorf(n, path, "must be at least 1, got 0 (leave burst out for a burst of limit)")
	}
	return b
}

// orderedKeys returns a mapping's keys in file order.
func orderedKeys(n *yaml.Node) []string {
	if n.Kind != yaml.MappingNode {
		return nil
	}
	var keys []string
	for i := 0; i+1 < len(n.Content); i += 2 {
		keys = append(keys, n.Content[i].Value)
	}
	return keys
}

// placeConfigError turns floodgate.New's *ConfigError into an Error at the
// node of the field it names.
func (d *decoder) placeConfigError(err error, n *yaml.Node, path string, sources []ruleSource) {
	var ce *floodgate.ConfigError
	if !errors.As(err, &ce) {
		d.errorf(n, path, "%v", err)
		return
	}
	rule, field := ce.RuleIndex, ce.Field
	var p string
	switch {
	case rule >= 0 && rule < len(sources):
		p = fmt.Sprintf("%s.rules[%d].%s", path, rule, ruleField(field, sources[rule]))
	case field == "timeout":
		p = path + ".deadline"
	default:
		p = yamlnode.Join(path, field)
	}
	d.errorf(d.nearest(p, n), p, "%s", ce.Reason)
}

// ruleField maps a floodgate.Rule field name to its configuration key.
func ruleField(field string, src ruleSource) string {
	if field == "location" {
		return "time_zone"
	}
	var i int
	var rest string
	if _, err := fmt.Sscanf(field, "overrides[%d]", &i); err == nil {
		rest = field[strings.Index(field, "]")+1:]
		if k := i - src.explicit; k >= 0 && k < len(src.tiers) {
			return "tiers." + src.tiers[k] + rest
		}
	}
	return field
}

// nearest returns the node recorded for path or for its closest recorded
// ancestor, or fallback.
func (d *decoder) nearest(path string, fallback *yaml.Node) *yaml.Node {
	for path != "" {
		if n := d.pos[path]; n != nil {
			return n
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			break
		}
		path = path[:i]
	}
	return fallback
}

// nopStore holds nothing: it lets validation build limiters without a real
// store.
type nopStore struct{}

func (nopStore) Apply(context.Context, *store.Batch) error { return nil }

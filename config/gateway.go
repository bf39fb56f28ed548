package config

import (
	"fmt"

	"github.com/floodgate-go/floodgate/internal/yamlnode"
	"go.yaml.in/yaml/v3"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/gateway"
)

// Route is a named, ordered list of candidates that POST /v1/select
// chooses among: the first candidate whose limiter admits the request is
// chosen, capped ones are skipped.
type Route struct {
	Name string
	// Candidates are tried in order; their names are unique within the
	// route.
	Candidates []Candidate
}

// Candidate is one option of a Route: a limiter (the candidate's caps) and
// the fixed attributes its rules key on, such as {route: primary}.
type Candidate struct {
	// Name identifies the candidate in answers and in a request's exclude
	// list; it defaults to Limiter.
	Name string
	// Limiter names one of the configuration's limiters.
	Limiter string
	// Attributes are merged over the request's attributes when the
	// candidate is decided (the candidate's own win).
	Attributes floodgate.Attributes
}

// tokenClasses decodes token_classes: a mapping of class name to a whole
// weight of at least 0.
func (d *decoder) tokenClasses(n *yaml.Node, path string) gateway.Weights {
	f := d.mapping(n, path)
	if f == nil {
		return nil
	}
	w := make(gateway.Weights, len(f))
	for _, class := range orderedKeys(d.resolve(n)) {
		v := f[class]
		p := yamlnode.Join(path, class)
		if v == nil {
			d.errorf(d.at(p, n), p, "must be set to a whole weight of at least 0")
			continue
		}
		if class == "" {
			d.errorf(v, path, "a token class needs a name")
			continue
		}
		weight, ok := d.integer(v, p)
		if !ok {
			continue
		}
		if weight < 0 {
			d.errorf(v, p, "must be at least 0, got %d", weight)
			continue
		}
		w[class] = weight
	}
	return w
}

// tokenRules checks limiters[i].token_rules against the limiter's rules.
func (d *decoder) tokenRules(n *yaml.Node, path string, l *Limiter) {
	names, ok := d.strs(n, path)
	if ok && len(names) == 0 {
		d.errorf(d.resolve(n), path, "must name at least one rule (leave it out to record usage into every rule)")
		return
	}
	if !ok {
		return
	}
	seen := make(map[string]bool, len(names))
	for i, name := range names {
		p := fmt.Sprintf("%s[%d]", path, i)
		at := d.at(p, n)
		switch {
		case seen[name]:
			d.errorf(at, p, "rule %q is listed twice", name)
		case !hasRule(l.Rules, name):
			d.errorf(at, p, "limiter %q has no rule named %q", l.Name, name)
		default:
			seen[name] = true
			l.TokenRules = append(l.TokenRules, name)
		}
	}
}

func hasRule(rules []floodgate.Rule, name string) bool {
	for _, r := range rules {
		if r.Name == name {
			return true
		}
	}
	return false
}

// routes decodes the routes section. limiters holds the name of every
// limiter the file defines, valid or not, so that a reference to a broken
// limiter is not reported a second time.
func (d *decoder) routes(n *yaml.Node, limiters map[string]bool) []Route {
	var out []Route
	seen := make(map[string]int)
	for i, item := range d.sequence(n, "routes") {
		p := fmt.Sprintf("routes[%d]", i)
		f := d.mapping(item, p, "name", "candidates")
		if f == nil {
			continue
		}
		var r Route
		ok := true
		if v := f["name"]; v != nil {
			r.Name, ok = d.str(v, p+".name")
			if ok && r.Name == "" {
				d.errorf(v, p+".name", "must not be empty")
				ok = false
			}
			if line, dup := seen[r.Name]; ok && dup {
				d.errorf(v, p+".name", "duplicate route name %q (first defined at line %d)", r.Name, line)
				ok = false
			}
			if ok {
				seen[r.Name] = v.Line
			}
		} else {
			d.errorf(item, p+".name", "must be set")
			ok = false
		}
		v := f["candidates"]
		if v == nil {
			d.errorf(item, p+".candidates", "must list at least one candidate")
			continue
		}
		items := d.sequence(v, p+".candidates")
		if items != nil && len(items) == 0 {
			d.errorf(v, p+".candidates", "must list at least one candidate")
			ok = false
		}
		names := make(map[string]bool, len(items))
		for j, ci := range items {
			c, good := d.candidate(ci, fmt.Sprintf("%s.candidates[%d]", p, j), limiters, names)
			ok = ok && good
			r.Candidates = append(r.Candidates, c)
		}
		if ok {
			out = append(out, r)
		}
	}
	return out
}

func (d *decoder) candidate(n *yaml.Node, path string, limiters, names map[string]bool) (Candidate, bool) {
	var c Candidate
	f := d.mapping(n, path, "name", "limiter", "attributes")
	if f == nil {
		return c, false
	}
	errs := len(d.errs)
	if v := f["limiter"]; v != nil {
		if s, ok := d.str(v, path+".limiter"); ok {
			c.Limiter = s
			if !limiters[s] {
				d.errorf(v, path+".limiter", "no limiter named %q", s)
			}
		}
	} else {
		d.errorf(n, path+".limiter", "must be set")
	}
	c.Name = c.Limiter
	nameAt := d.at(path+".limiter", n)
	if v := f["name"]; v != nil {
		if s, ok := d.str(v, path+".name"); ok {
			c.Name, nameAt = s, v
			if s == "" {
				d.errorf(v, path+".name", "must not be empty")
			}
		}
	}
	if c.Name != "" {
		if names[c.Name] {
			d.errorf(nameAt, path+".name", "duplicate candidate name %q in this route (a candidate's name defaults to its limiter's)", c.Name)
		}
		names[c.Name] = true
	}
	if v := f["attributes"]; v != nil {
		c.Attributes = d.attributes(v, path+".attributes")
	}
	return c, len(d.errs) == errs
}

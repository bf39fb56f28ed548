package envoy

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/yamlnode"
	"github.com/floodgate-go/floodgate/store"
	"go.yaml.in/yaml/v3"
)

// ParseFile parses one configuration file in the reference service's format.
// name is used in error messages only. Unknown keys are errors, and so is
// everything the reference service rejects. The error joins every
// *ConfigError found.
//
// The format, with floodgate's extension:
//
//	domain: <name>                      # required, one per file
//	descriptors:
//	  - key: <key>                      # required
//	    value: <value>                  # optional; '*' in it is a wildcard ("/api/*", "/v*/users")
//	    rate_limit:                     # optional
//	      unit: second                  # second|minute|hour|day|week|month|year
//	      requests_per_unit: 10
//	      unit_multiplier: 1            # optional: the window is unit × this
//	      unlimited: false              # true: never limited (no unit allowed)
//	      name: <name>                  # optional, for replaces
//	      replaces: [{name: <name>}]
//	      floodgate:                    # optional extension
//	        algorithm: token_bucket     # fixed_window (default) | sliding_window | token_bucket | gcra
//	        burst: 20                   # token_bucket and gcra only
//	        grant: true                 # quota grants (a Redis store; fixed_window and token_bucket)
//	        reserve: 8000               # fixed_window only: a check (hits_addend 0) reserves this many,
//	        hold: 10m                   #   held this long; a charge (hits_addend N) settles the oldest hold
//	    shadow_mode: false
//	    detailed_metric: false          # accepted; metrics only
//	    value_to_metric: false          # accepted; metrics only
//	    metadata: {...}                 # accepted; not returned
//	    quota_mode: false               # true is an error
//	    share_threshold: false          # wildcard values share one counter
//	    descriptors: [...]              # nested descriptors
func ParseFile(name string, data []byte) (*File, error) {
	f, err := parse(name, data)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// parse is ParseFile, but a file with errors is returned too, holding
// what could be read (its Domain, when it names one), so that a loader
// can check it against the other files.
func parse(name string, data []byte) (f *File, err error) {
	p := &parser{file: name}
	defer func() {
		// The YAML decoder is not expected to panic, but a config loader
		// must never take the process down.
		if r := recover(); r != nil {
			f, err = nil, &ConfigError{File: name, Reason: fmt.Sprintf("cannot parse: %v", r)}
		}
	}()
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, &ConfigError{File: name, Reason: strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	if len(doc.Content) == 0 {
		return nil, &ConfigError{File: name, Field: "domain", Reason: "empty file: want a domain"}
	}
	return p.document(doc.Content[0])
}

// document reads a file's root mapping, from a file or made from an xDS
// resource (xds.go).
func (p *parser) document(root *yaml.Node) (*File, error) {
	f := &File{Name: p.file, root: newNode()}
	if !p.mapping(&root, "") {
		return nil, p.err()
	}
	var descs *yaml.Node
	named := false
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		switch k.Value {
		case "domain":
			f.Domain, f.line, named = p.str(v, "domain"), k.Line, true
			if f.Domain == "" {
				p.fail(v, "domain", "must not be empty")
			}
		case "descriptors":
			descs = v
		default:
			p.unknown(k, "", "domain", "descriptors")
		}
	}
	if !named {
		p.fail(root, "domain", "missing: every file configures one domain")
	}
	if descs != nil {
		p.descriptors(f.root, descs, "descriptors", "", nil)
	}
	if len(p.errs) > 0 {
		return f, p.err()
	}
	return f, nil
}

func newNode() *node {
	return &node{exact: map[entry]*node{}, anyValue: map[string]*node{}}
}

type parser struct {
	file  string
	errs  []error
	nodes int // descriptors read, against aliases that multiply them
}

// maxDescriptors bounds the descriptors of one file.
const maxDescriptors = 100_000

func (p *parser) err() error { return errors.Join(p.errs...) }

func (p *parser) fail(n *yaml.Node, field, format string, args ...any) {
	p.errs = append(p.errs, &ConfigError{File: p.file, Line: n.Line, Column: n.Column, Field: field,
		Reason: fmt.Sprintf(format, args...)})
}

// unknown reports the key k under path, naming the closest of the keys
// known there ("did you mean rate_limit?").
func (p *parser) unknown(k *yaml.Node, path string, known ...string) {
	p.fail(k, yamlnode.Join(path, k.Value), "unknown key%s", yamlnode.Suggest(k.Value, known, "keys"))
}

// mapping checks that *np is a mapping without repeated keys, resolving
// an alias in place.
func (p *parser) mapping(np **yaml.Node, field string) bool {
	n := yamlnode.Resolve(*np)
	*np = n
	if n.Kind != yaml.MappingNode {
		p.fail(n, field, "want a mapping, got %s", yamlnode.Describe(n))
		return false
	}
	seen := make(map[string]bool, len(n.Content)/2)
	ok := true
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if k.Kind != yaml.ScalarNode {
			p.fail(k, field, "keys must be strings")
			ok = false
			continue
		}
		if seen[k.Value] {
			p.fail(k, yamlnode.Join(field, k.Value), "repeated key")
			ok = false
		}
		seen[k.Value] = true
	}
	return ok
}

func (p *parser) scalar(n *yaml.Node, field string) bool {
	n = yamlnode.Resolve(n)
	if n.Kind != yaml.ScalarNode || yamlnode.IsNull(n) {
		p.fail(n, field, "want a value, got %s", yamlnode.Describe(n))
		return false
	}
	return true
}

func (p *parser) str(n *yaml.Node, field string) string {
	if !p.scalar(n, field) {
		return ""
	}
	return yamlnode.Resolve(n).Value
}

func (p *parser) boolean(n *yaml.Node, field string) bool {
	if !p.scalar(n, field) {
		return false
	}
	n = yamlnode.Resolve(n)
	v, err := strconv.ParseBool(n.Value)
	if err != nil || n.Tag != "!!bool" {
		p.fail(n, field, "want true or false, got %q", n.Value)
		return false
	}
	return v
}

func (p *parser) uint(n *yaml.Node, field string, bits int) uint64 {
	if !p.scalar(n, field) {
		return 0
	}
	n = yamlnode.Resolve(n)
	v, err := strconv.ParseUint(n.Value, 10, bits)
	if err != nil {
		p.fail(n, field, "want a whole number from 0 to %d, got %q", uint64(1)<<bits-1, n.Value)
		return 0
	}
	return v
}

// descriptors loads a descriptor list into parent's children.
func (p *parser) descriptors(parent *node, list *yaml.Node, field, parentPath string, parentKeys []string) {
	list = yamlnode.Resolve(list)
	if yamlnode.IsNull(list) {
		return
	}
	if list.Kind != yaml.SequenceNode {
		p.fail(list, field, "want a list, got %s", yamlnode.Describe(list))
		return
	}
	composite := map[string]*yaml.Node{}
	for i, item := range list.Content {
		f := fmt.Sprintf("%s[%d]", field, i)
		if p.nodes++; p.nodes > maxDescriptors {
			if p.nodes == maxDescriptors+1 {
				p.fail(item, f, "more than %d descriptors", maxDescriptors)
			}
			return
		}
		if !p.mapping(&item, f) {
			continue
		}
		var key, value string
		var keyNode, rl, children, shareNode *yaml.Node
		n := newNode()
		shadow := false
		for j := 0; j+1 < len(item.Content); j += 2 {
			k, v := item.Content[j], item.Content[j+1]
			switch k.Value {
			case "key":
				key, keyNode = p.str(v, f+".key"), v
			case "value":
				value = p.str(v, f+".value")
			case "rate_limit":
				rl = v
			case "descriptors":
				children = v
			case "shadow_mode":
				shadow = p.boolean(v, f+".shadow_mode")
			case "detailed_metric", "value_to_metric":
				p.boolean(v, f+"."+k.Value) // accepted: they shape the reference's metrics only
			case "metadata":
				// Accepted: the reference returns it as dynamic metadata
				// (RESPONSE_DYNAMIC_METADATA), which floodgate does not.
				p.mapping(&v, f+".metadata")
			case "quota_mode":
				if p.boolean(v, f+".quota_mode") {
					p.fail(k, f+".quota_mode", "not supported: floodgate has no quota mode (an over-limit quota descriptor would be enforced)")
				}
			case "share_threshold":
				if p.boolean(v, f+".share_threshold") {
					shareNode = k
				}
			default:
				p.unknown(k, f, "key", "value", "rate_limit", "descriptors", "shadow_mode", "detailed_metric",
					"value_to_metric", "metadata", "quota_mode", "share_threshold")
			}
		}
		if keyNode == nil {
			p.fail(item, f+".key", "missing: every descriptor needs a key")
			continue
		}
		if key == "" {
			p.fail(keyNode, f+".key", "must not be empty")
			continue
		}
		final := key
		if value != "" {
			final += "_" + value
		}
		path := yamlnode.Join(parentPath, final)
		if prev := composite[final]; prev != nil {
			if prev.Line > 0 {
				p.fail(keyNode, f, "duplicate descriptor %q (also at line %d)", path, prev.Line)
			} else {
				p.fail(keyNode, f, "duplicate descriptor %q", path)
			}
			continue
		}
		composite[final] = keyNode
		wild := strings.Contains(value, "*")
		if shareNode != nil {
			if !wild {
				p.fail(shareNode, f+".share_threshold", "applies only to wildcard values (holding '*')")
			}
			n.share, n.pattern = true, value
		}
		keys := append(slices.Clip(parentKeys), key)
		if rl != nil {
			n.limit = p.rateLimit(rl, f+".rate_limit", path)
			if n.limit != nil {
				n.limit.shadow = shadow
				n.limit.keys = keys
			}
		}
		if children != nil {
			p.descriptors(n, children, f+".descriptors", path, keys)
		}
		switch {
		case value == "":
			parent.anyValue[key] = n
		case wild:
			parent.wild = append(parent.wild, wildChild{key: key, pattern: value, parts: strings.Split(value, "*"), n: n})
		default:
			parent.exact[entry{key, value}] = n
		}
	}
}

// rateLimit loads a rate_limit block.
func (p *parser) rateLimit(n *yaml.Node, field, path string) *leaf {
	if !p.mapping(&n, field) {
		return nil
	}
	l := &leaf{path: path, field: field, line: n.Line, col: n.Column, algorithm: floodgate.FixedWindow}
	var unitNode, nameNode, extNode, rpuNode *yaml.Node
	var unit string
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		f := field + "." + k.Value
		switch k.Value {
		case "unit":
			unit, unitNode = p.str(v, f), v
		case "requests_per_unit":
			l.rpu, rpuNode = uint32(p.uint(v, f, 32)), v
		case "unit_multiplier":
			before := len(p.errs)
			l.multiplier = uint32(p.uint(v, f, 32))
			if l.multiplier == 0 && len(p.errs) == before {
				p.fail(v, f, "must be at least 1")
			}
		case "unlimited":
			l.unlimited = p.boolean(v, f)
		case "name":
			l.name, nameNode = p.str(v, f), v
		case "replaces":
			p.replaces(l, v, f)
		case "floodgate":
			extNode = v
		default:
			p.unknown(k, field, "unit", "requests_per_unit", "unit_multiplier", "unlimited", "name", "replaces", "floodgate")
		}
	}
	u, known := rlsv3.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(unit)]
	valid := known && u != int32(rlsv3.RateLimitResponse_RateLimit_UNKNOWN)
	switch {
	case l.unlimited && unitNode != nil:
		p.fail(unitNode, field+".unit", "must not be set when unlimited is true")
	case l.unlimited && rpuNode != nil:
		p.fail(rpuNode, field+".requests_per_unit", "must not be set when unlimited is true")
	case !l.unlimited && unitNode == nil:
		p.fail(n, field+".unit", "missing: want one of second, minute, hour, day, week, month, year")
	case !l.unlimited && !valid:
		p.fail(unitNode, field+".unit", "unknown unit %q: want one of second, minute, hour, day, week, month, year", unit)
	}
	l.unit = rlsv3.RateLimitResponse_RateLimit_Unit(u)
	for _, r := range l.replaces {
		if r == l.name && nameNode != nil {
			p.fail(nameNode, field+".replaces", "must not name the limit itself (%q)", r)
		}
	}
	if valid {
		mult := int64(max(1, l.multiplier))
		secs := unitSeconds[l.unit] * mult
		if secs > maxWindowSeconds {
			p.fail(n, field+".unit_multiplier", "window of %d %s is too long (at most about 100 years)", mult, unit)
		} else {
			l.window = time.Duration(secs) * time.Second
		}
	}
	if extNode != nil {
		p.extension(l, extNode, field+".floodgate")
	}
	l.rule = encodeName(path)
	return l
}

func (p *parser) replaces(l *leaf, v *yaml.Node, field string) {
	v = yamlnode.Resolve(v)
	if v.Kind != yaml.SequenceNode {
		p.fail(v, field, "want a list of {name: ...}, got %s", yamlnode.Describe(v))
		return
	}
	for i, item := range v.Content {
		f := fmt.Sprintf("%s[%d]", field, i)
		if !p.mapping(&item, f) {
			continue
		}
		name := ""
		for j := 0; j+1 < len(item.Content); j += 2 {
			k, val := item.Content[j], item.Content[j+1]
			if k.Value != "name" {
				p.unknown(k, f, "name")
				continue
			}
			name = p.str(val, f+".name")
		}
		if name == "" {
			p.fail(item, f+".name", "must not be empty")
			continue
		}
		l.replaces = append(l.replaces, name)
	}
}

// extension loads floodgate's extension block of a rate_limit.
func (p *parser) extension(l *leaf, n *yaml.Node, field string) {
	if !p.mapping(&n, field) {
		return
	}
	var burstNode, grantNode, reserveNode, holdNode *yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		f := field + "." + k.Value
		switch k.Value {
		case "algorithm":
			s := p.str(v, f)
			a, err := store.ParseAlgorithm(s)
			switch {
			case err != nil:
				p.fail(v, f, "unknown algorithm %q: want fixed_window, sliding_window, token_bucket or gcra", s)
			case a == floodgate.Concurrency:
				p.fail(v, f, "concurrency needs a release after the request, which Envoy's API has no call for")
			default:
				l.algorithm = a
			}
		case "burst":
			l.burst, burstNode = int64(p.uint(v, f, 32)), v
		case "grant":
			l.grant, grantNode = p.boolean(v, f), v
		case "reserve":
			before := len(p.errs)
			l.reserve, reserveNode = int64(p.uint(v, f, 32)), v
			if l.reserve == 0 && len(p.errs) == before {
				p.fail(v, f, "must be at least 1")
			}
		case "hold":
			holdNode = v
			if s := p.str(v, f); s != "" {
				d, err := time.ParseDuration(s)
				switch {
				case err != nil:
					p.fail(v, f, "want a duration such as 10m, got %q", s)
				case d < time.Millisecond:
					p.fail(v, f, "must be at least 1ms, got %v", d)
				default:
					l.hold = d
				}
			}
		default:
			p.unknown(k, field, "algorithm", "burst", "grant", "reserve", "hold")
		}
	}
	if l.unlimited {
		p.fail(n, field, "must not be set when unlimited is true")
	}
	if burstNode != nil && l.algorithm != floodgate.TokenBucket && l.algorithm != floodgate.GCRA {
		p.fail(burstNode, field+".burst", "applies to token_bucket and gcra only, not %s", l.algorithm)
	}
	if l.grant && l.algorithm != floodgate.FixedWindow && l.algorithm != floodgate.TokenBucket {
		p.fail(grantNode, field+".grant", "applies to fixed_window and token_bucket only, not %s", l.algorithm)
	}
	switch {
	case reserveNode == nil && holdNode != nil:
		p.fail(holdNode, field+".hold", "applies with reserve only: set reserve, the units each check reserves")
	case reserveNode == nil:
	case l.algorithm != floodgate.FixedWindow:
		p.fail(reserveNode, field+".reserve", "applies to fixed_window only, not %s", l.algorithm)
	case l.grant:
		p.fail(reserveNode, field+".reserve", "cannot be combined with grant: a grant cannot see the units held")
	case holdNode == nil:
		p.fail(n, field+".hold", "missing: how long a reservation is held unless a charge settles it, such as 10m")
	case l.reserve > int64(l.rpu) && !l.unlimited:
		p.fail(reserveNode, field+".reserve", "%d is more than requests_per_unit %d: no check could ever reserve it", l.reserve, l.rpu)
	}
	if reserveNode == nil {
		l.reserve, l.hold = 0, 0
	}
}

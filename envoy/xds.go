package envoy

import (
	"errors"
	"fmt"
	"strconv"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// ResourceType is the xDS type URL of the rate limit configuration that
// an xDS management server (Envoy Gateway's) sends: one RateLimitConfig
// resource per domain.
const ResourceType = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// ResourceFile is the File name a resource named name is given: errors,
// the status page and /rlconfig show it where they show a file's path.
func ResourceFile(name string) string { return "xds:" + name }

// LoadResources decodes the resources of one xDS response, each a
// RateLimitConfig, and checks them as LoadFiles checks a directory's
// files: every mistake of every resource is reported, and two resources
// may not configure one domain. Nothing is returned unless all are valid.
func LoadResources(resources []*anypb.Any) (*Config, error) {
	var files []*File
	var errs []error
	for i, res := range resources {
		if res.GetTypeUrl() != ResourceType {
			errs = append(errs, fmt.Errorf("envoy: xDS resource %d has type %q, want %s", i, res.GetTypeUrl(), ResourceType))
			continue
		}
		var c rlsconfv3.RateLimitConfig
		if err := anypb.UnmarshalTo(res, &c, proto.UnmarshalOptions{}); err != nil {
			errs = append(errs, fmt.Errorf("envoy: xDS resource %d: %w", i, err))
			continue
		}
		name := c.GetName()
		if name == "" {
			name = c.GetDomain()
		}
		f, err := ParseResource(ResourceFile(name), &c)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		files = append(files, f)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return NewConfig(files...)
}

// ParseResource reads one RateLimitConfig resource into a File named
// name, with the checks ParseFile makes of a file holding the same
// configuration. Its errors name the field ("descriptors[0].rate_limit.unit")
// but no line. The resource's own name is not part of the File.
//
// Units and fields that newer versions of the resource add (week, month
// and year; quota_mode, refused as in a file; metadata, ignored) are read
// too.
func ParseResource(name string, c *rlsconfv3.RateLimitConfig) (*File, error) {
	p := &parser{file: name}
	root := mapNode()
	addScalar(root, "domain", "!!str", c.GetDomain())
	if len(c.GetDescriptors()) > 0 {
		add(root, "descriptors", descriptorNodes(c.GetDescriptors()))
	}
	f, err := p.document(root)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// resourceUnits names the units of RateLimitPolicy.unit, those newer
// protos define included.
var resourceUnits = map[int32]string{1: "second", 2: "minute", 3: "hour", 4: "day", 5: "month", 6: "year", 7: "week"}

// Field numbers of RateLimitDescriptor that newer protos define.
const (
	quotaModeField protowire.Number = 7
)

func descriptorNodes(ds []*rlsconfv3.RateLimitDescriptor) *yaml.Node {
	list := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	for _, d := range ds {
		n := mapNode()
		addScalar(n, "key", "!!str", d.GetKey())
		if d.GetValue() != "" {
			addScalar(n, "value", "!!str", d.GetValue())
		}
		if rl := d.GetRateLimit(); rl != nil {
			add(n, "rate_limit", policyNode(rl))
		}
		if len(d.GetDescriptors()) > 0 {
			add(n, "descriptors", descriptorNodes(d.GetDescriptors()))
		}
		if d.GetShadowMode() {
			addScalar(n, "shadow_mode", "!!bool", "true")
		}
		if d.GetDetailedMetric() {
			addScalar(n, "detailed_metric", "!!bool", "true")
		}
		if unknownVarint(d, quotaModeField) != 0 {
			addScalar(n, "quota_mode", "!!bool", "true")
		}
		list.Content = append(list.Content, n)
	}
	return list
}

func policyNode(rl *rlsconfv3.RateLimitPolicy) *yaml.Node {
	n := mapNode()
	if u := int32(rl.GetUnit()); u != 0 {
		unit, ok := resourceUnits[u]
		if !ok {
			unit = strconv.Itoa(int(u))
		}
		addScalar(n, "unit", "!!str", unit)
	}
	if rpu := rl.GetRequestsPerUnit(); rpu != 0 {
		addScalar(n, "requests_per_unit", "!!int", strconv.FormatUint(uint64(rpu), 10))
	}
	if rl.GetUnlimited() {
		addScalar(n, "unlimited", "!!bool", "true")
	}
	if rl.GetName() != "" {
		addScalar(n, "name", "!!str", rl.GetName())
	}
	if len(rl.GetReplaces()) > 0 {
		list := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		for _, r := range rl.GetReplaces() {
			m := mapNode()
			addScalar(m, "name", "!!str", r.GetName())
			list.Content = append(list.Content, m)
		}
		add(n, "replaces", list)
	}
	return n
}

func mapNode() *yaml.Node { return &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"} }

func add(m *yaml.Node, key string, v *yaml.Node) {
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, v)
}

func addScalar(m *yaml.Node, key, tag, value string) {
	add(m, key, &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: value})
}

// unknownVarint returns the last value of the varint field num among m's
// unknown fields (those of a newer proto than this package's), or 0.
func unknownVarint(m proto.Message, num protowire.Number) uint64 {
	var v uint64
	b := m.ProtoReflect().GetUnknown()
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return v
		}
		b = b[l:]
		if n == num && typ == protowire.VarintType {
			x, l := protowire.ConsumeVarint(b)
			if l < 0 {
				return v
			}
			v, b = x, b[l:]
			continue
		}
		if l = protowire.ConsumeFieldValue(n, typ, b); l < 0 {
			return v
		}
		b = b[l:]
	}
	return v
}

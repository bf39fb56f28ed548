// Package yamlnode holds the small helpers over go.yaml.in/yaml/v3 nodes that
// floodgate's two configuration loaders (config and envoy) share.
package yamlnode

import (
	"strconv"

	"go.yaml.in/yaml/v3"
)

// Resolve follows an alias to the node it names.
func Resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 16; i++ {
		n = n.Alias
	}
	return n
}

// IsNull reports whether n is a null scalar ("", "~" or "null").
func IsNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// Describe names what n is for an error message: "a mapping", "a list",
// "nothing" or the quoted scalar.
func Describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if IsNull(n) {
			return "nothing"
		}
		return strconv.Quote(n.Value)
	}
	return "something else"
}

// Join appends key to a dotted field path.
func Join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

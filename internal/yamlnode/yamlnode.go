// Package yamlnode holds the small helpers over go.yaml.in/yaml/v3 nodes that
// floodgate's two configuration loaders (config and envoy) share.
package yamlnode

import (
	"fmt"
	"strconv"
	"strings"

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

// Suggest completes an "unknown field" message: the closest of the known
// keys, " (did you mean window?)", or, when none is close, all of them
// (" (known fields: a, b)", noun being what the loader calls its keys).
func Suggest(key string, known []string, noun string) string {
	best, dist := "", 3
	for _, k := range known {
		if e := editDistance(key, k); e < dist {
			best, dist = k, e
		}
	}
	if best != "" {
		return fmt.Sprintf(" (did you mean %s?)", best)
	}
	return " (known " + noun + ": " + strings.Join(known, ", ") + ")"
}

// editDistance is the Levenshtein distance of two short strings.
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

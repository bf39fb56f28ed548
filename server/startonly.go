package server

import (
	"reflect"

	"github.com/floodgate-go/floodgate/config"
)

// startOnlyChanges names the sections of the configuration that the
// service reads only when it starts (the store, and how it is deployed:
// envoy.xds, grpc.tls, tracing) and that next changes from prev.
func startOnlyChanges(prev, next *config.Config) []string {
	var out []string
	for _, s := range []struct {
		name       string
		prev, next any
	}{
		{"store", prev.Store, next.Store},
		{"envoy.xds", prev.EnvoyXDS, next.EnvoyXDS},
		{"grpc.tls", prev.GRPCTLS, next.GRPCTLS},
		{"tracing", prev.Tracing, next.Tracing},
	} {
		if !reflect.DeepEqual(s.prev, s.next) {
			out = append(out, s.name)
		}
	}
	return out
}

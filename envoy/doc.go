// Package envoy serves Envoy's rate limit API
// (envoy.service.ratelimit.v3.RateLimitService) on floodgate, and reads the
// configuration files of Envoy's reference rate limit service
// (github.com/envoyproxy/ratelimit) so that one can replace the other without
// touching Envoy or the config.
//
// LoadDir reads a directory of those files into a Config: one domain per
// file, a tree of descriptors per domain, a rate limit at any node. New
// turns a Config into a Service over a store.Store: each domain becomes
// one floodgate.Limiter whose rules are the domain's rate limits, counted in
// fixed windows aligned to the Unix epoch like the reference service's, or
// with another floodgate algorithm named by the "floodgate" extension key.
// Service.Register puts it on a gRPC server; Service.Update swaps in a new
// Config atomically.
//
// Options.Headers adds the reference service's quota headers (and the
// IETF RateLimit pair) to the answers; Config.Dump describes the limits in
// force as the reference's /rlconfig does. duration_until_reset is in
// whole seconds, rounded up, as the reference and Envoy count it.
//
// All the descriptors of one request are decided together: a request that
// is over the limit on one descriptor charges none of the others. See
// docs/envoy.md for the matching rules, the response fields and the
// differences from the reference service.
package envoy

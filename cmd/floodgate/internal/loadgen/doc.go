// Package loadgen drives floodgate's decision service with load and measures
// what it sees: throughput, allowed and denied decisions, errors, and latency
// percentiles.
//
// Two targets are supported: the HTTP JSON API (POST /v1/check) and the Envoy
// gRPC API (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit), so
// the same run can be pointed at floodgate or at any other service that speaks
// Envoy's protocol.
//
// Two load models are supported:
//
//   - Fixed rate (an open model, Config.Rate > 0): requests are issued on a
//     fixed schedule whatever the service does, and each latency is measured
//     from the request's intended send time, so a stalled service shows up as
//     latency instead of silently lowering the offered load (no coordinated
//     omission).
//   - Fixed concurrency (a closed model, Config.Rate == 0): Config.Concurrency
//     workers each send a request, wait for the answer and send the next.
//
// Every run is bounded: it stops after Config.Duration (plus an optional
// warm-up that is not measured), after Config.Requests requests when that is
// set, or when its context is cancelled, whichever comes first.
package loadgen

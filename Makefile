# Common tasks. The README's two commands do not need make; these are
# shortcuts for developers.

.PHONY: test check load-exact grant-hot

# The whole test suite (installs redis-server if missing).
test:
	./scripts/test.sh

# The service-level exactness check at length: 4 floodgate serve on one Redis,
# one hot clock-aligned window, ~15x demand for 35 s; no window may admit over
# its limit; evenly spread, then with 90% of the callers on one instance (the
# test suite runs it with 3 instances for 3 s).
load-exact:
	FLOODGATE_EXACT_LOAD=35s FLOODGATE_EXACT_INSTANCES=4 go test -count=1 -run '^TestHotKeyAcrossInstances$$' -v ./cmd/floodgate
	FLOODGATE_EXACT_LOAD=35s FLOODGATE_EXACT_INSTANCES=4 FLOODGATE_EXACT_FIRST=90 go test -count=1 -run '^TestHotKeyAcrossInstances$$' -v ./cmd/floodgate

# The quota-grant acceptance runs at length (store/grant): 4 instances, one
# hot key, 10,000 per second, demand 10x, 30 windows; fixed window and token
# bucket, even and 90/10. The suite runs them for 4 windows.
grant-hot:
	FLOODGATE_GRANT_WINDOWS=30 go test -count=1 -run '^TestHot(FixedWindow|TokenBucket)$$' -v ./store/grant

# Static checks run by CI before the tests.
check:
	gofmt -l $$(git ls-files '*.go')
	go vet ./...
	staticcheck ./...

# The fault tests against a real redis-server, FAULT_COUNT times
# each: an 86 ms stall (SIGSTOP) under 64 callers, an outage and the
# breaker's return, the fallback handing back after a freeze, and a rule's
# unit changed under load. CI runs each once, in seconds; repeated, they
# show how often a busy machine breaks their bounds. Minutes of Zipf load on
# the service come from `floodgate load` (bench/service) instead.
FAULT_COUNT ?= 20

.PHONY: faults
faults:
	go test -run 'TestShortStallIsNoOutage|TestOutageOpensAndRecovers|TestFallbackHandsBackOnRedis' \
		-count=$(FAULT_COUNT) -timeout 30m ./store/guard
	go test -run 'TestChangedWindowUnderLoad' -count=$(FAULT_COUNT) -timeout 30m .

# Benchmarks. BENCHTIME and COUNT trade time for less noise; results are
# ratios within one run (see docs/benchmarks.md). Each target builds its test
# binary once and runs the whole set COUNT times in rounds, so that every
# contender sees the same spread of machine load. Raw output and markdown
# tables go to BENCH_OUT.
BENCHTIME ?= 300ms
COUNT ?= 8
BENCH_OUT ?= $(CURDIR)/bench/results

.PHONY: bench bench-compare bench-redis-floor bench-grant

# In-repo benchmarks of the memory store through the Limiter API.
bench:
	mkdir -p $(BENCH_OUT)
	go test -c -o $(BENCH_OUT)/memory.test ./store/memory
	rm -f $(BENCH_OUT)/memory.txt
	for i in $$(seq $(COUNT)); do \
		$(BENCH_OUT)/memory.test -test.run '^$$' -test.bench . -test.benchmem -test.benchtime=$(BENCHTIME) >> $(BENCH_OUT)/memory.txt || exit 1; \
	done
	cd bench && go run ./cmd/benchtable -base rules=1/keys=10k < $(BENCH_OUT)/memory.txt | tee $(BENCH_OUT)/memory.md

# floodgate's memory store against peer Go limiters (the bench/ module), as a
# markdown table of medians with ratios to floodgate's token bucket.
bench-compare:
	mkdir -p $(BENCH_OUT)
	cd bench && go test -c -o $(BENCH_OUT)/compare.test .
	rm -f $(BENCH_OUT)/compare.txt
	for i in $$(seq $(COUNT)); do \
		$(BENCH_OUT)/compare.test -test.run '^$$' -test.bench '^BenchmarkCompare$$' -test.benchmem -test.benchtime=$(BENCHTIME) >> $(BENCH_OUT)/compare.txt || exit 1; \
	done
	cd bench && go run ./cmd/benchtable -base floodgate/key < $(BENCH_OUT)/compare.txt | tee $(BENCH_OUT)/compare.md

# floodgate's Redis store next to the minimal one- and three-key scripts and
# redis_rate, in one run on one redis-server: a markdown table of
# medians and ratios, about 2 minutes. REDISFLOOR_ROUNDS, REDISFLOOR_TIME and
# REDISFLOOR_CALLERS make it longer (see bench/redisfloor_test.go).
bench-redis-floor:
	mkdir -p $(BENCH_OUT)
	cd bench && go test -run '^$$' -bench '^BenchmarkRedisFloor$$' -benchtime 1x -timeout 30m > $(BENCH_OUT)/redisfloor.txt; \
		s=$$?; cat $(BENCH_OUT)/redisfloor.txt; exit $$s

# floodgate's quota grants next to an in-process 4-peer gubernator cluster
# (GLOBAL) on the same hot-key load, loopback only (bench/grant_test.go):
# admissions against the limit, per window. GRANT_SIDE sets the run's length
# for each.
GRANT_SIDE ?= 10s
bench-grant:
	cd bench && FLOODGATE_SIDE_BY_SIDE=$(GRANT_SIDE) go test -run '^TestGrantSideBySide$$' -count=1 -v -timeout 10m .

#!/usr/bin/env bash
# compare.sh — floodgate's decision service against Envoy's reference
# rate-limit service (github.com/envoyproxy/ratelimit), side by side in one
# run, on the same Redis, with the same load over the same gRPC API
# (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit).
#
#   bench/service/compare.sh                      # 10s each, 64 workers
#   DURATION=30s CONCURRENCY=128 bench/service/compare.sh
#   RATE=5000 bench/service/compare.sh            # open model at 5000 req/s
#
# It starts a throwaway redis-server on a free loopback port, builds the
# reference service from the Go module proxy (cached between runs), starts it
# and `floodgate serve` on that Redis with the same limits (envoy.yaml here,
# in the reference service's own format, loaded by both), drives each in turn
# with the load generator, and prints a table. Every process it starts is
# stopped on exit, and each is also capped by `timeout`.
#
# Settings (environment variables, defaults in brackets):
#   DURATION [10s] WARMUP [2s]   measured time and warm-up per service
#   CONCURRENCY [64]             workers (closed model), or the in-flight cap with RATE
#   RATE [0]                     requests/s for the open model; 0 = closed model
#   KEYS [1000] DIST [uniform]   key cardinality and distribution
#   DESCRIPTORS [1]              descriptors per request, 1 to 3 (user: 100/s,
#                                user2: 100,000/minute, user3: 1,000,000/hour)
#   CONNS [2]                    gRPC connections from the load generator
#   GRPC_CLIENT [wire]           the load generator's gRPC client: wire (its own
#                                h2c client, cheap per call) or grpc-go
#   LOAD_PROCS                   GOMAXPROCS of the load generator (unset: all CPUs)
#   ROUNDS [1]                   how many times to drive each service; the order
#                                alternates (odd rounds reference first, even
#                                rounds floodgate first)
#   SERVICE_GOGC                 GOGC of both services (unset: Go's default, 100)
#   REF_ENV                      extra environment for the reference service,
#                                e.g. "REDIS_PIPELINE_WINDOW=150us" (its recommended write batching)
#                                (unset: its defaults)
#   RATELIMIT_VERSION            the reference service's module version
#   CACHE_DIR [~/.cache/floodgate-bench]   where its binary is kept
#   FG_STORE [redis]             floodgate's store: redis, falling back to
#                                memory when the Redis store cannot start
#                                (the table says which one ran)
set -euo pipefail

DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-2s}
CONCURRENCY=${CONCURRENCY:-64}
RATE=${RATE:-0}
KEYS=${KEYS:-1000}
DIST=${DIST:-uniform}
DESCRIPTORS=${DESCRIPTORS:-1}
if ! [[ $DESCRIPTORS =~ ^[1-3]$ ]]; then
	echo "compare.sh: DESCRIPTORS must be 1, 2 or 3 (envoy.yaml has three limits), got $DESCRIPTORS" >&2
	exit 2
fi
CONNS=${CONNS:-2}
GRPC_CLIENT=${GRPC_CLIENT:-wire}
LOAD_PROCS=${LOAD_PROCS:-}
REF_ENV=${REF_ENV:-}
SERVICE_GOGC=${SERVICE_GOGC:-}
# svc_env is the environment both services start with.
svc_env=()
if [[ -n $SERVICE_GOGC ]]; then
	svc_env=(GOGC="$SERVICE_GOGC")
fi
RATELIMIT_VERSION=${RATELIMIT_VERSION:-v1.4.1-0.20260122083618-3fb702589d36}
RATELIMIT_PKG=github.com/envoyproxy/ratelimit/src/service_cmd
CACHE_DIR=${CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/floodgate-bench}
# Hard cap on every process this script starts, in seconds.
MAX_LIFE=${MAX_LIFE:-900}

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"

work=$(mktemp -d "${TMPDIR:-/tmp}/fg-compare.XXXXXX")
pids=()
cleanup() {
	local pid
	for pid in "${pids[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in "${pids[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { printf '== %s\n' "$*" >&2; }

# free_port prints a loopback TCP port nobody listens on.
free_port() {
	local p
	for _ in $(seq 200); do
		p=$((20000 + RANDOM % 40000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return
		fi
	done
	echo "no free port found" >&2
	return 1
}

# wait_port waits up to $2 seconds for 127.0.0.1:$1 to accept connections,
# giving up early when process $3 (if given) has exited.
wait_port() {
	local deadline=$((SECONDS + $2))
	while ((SECONDS < deadline)); do
		if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then
			return 0
		fi
		if [[ -n ${3:-} ]] && ! kill -0 "$3" 2>/dev/null; then
			return 1
		fi
		sleep 0.1
	done
	return 1
}

# field prints the number after "$2": in the JSON object $1.
field() { grep -o "\"$2\":[-0-9.e+]*" <<<"$1" | head -1 | cut -d: -f2; }

# --- floodgate and its load generator (`floodgate load`) -----------------
log "building floodgate"
if ! go build -o "$work/floodgate" ./cmd/floodgate >"$work/fg-build.log" 2>&1; then
	cat "$work/fg-build.log" >&2
	log "floodgate could not be built"; exit 1
fi
load=("$work/floodgate" load)
if [[ -n $LOAD_PROCS ]]; then
	load=(env GOMAXPROCS="$LOAD_PROCS" "${load[@]}")
fi
# The load generator's own CPU time is measured with /usr/bin/time when
# there is one.
timed=()
if [[ -x /usr/bin/time ]]; then
	timed=(/usr/bin/time -f "%U %S")
fi

# --- Redis ----------------------------------------------------------------
redis_port=$(free_port)
log "starting redis-server on 127.0.0.1:$redis_port"
timeout "$MAX_LIFE" redis-server --bind 127.0.0.1 --port "$redis_port" \
	--save '' --appendonly no --maxmemory-policy noeviction \
	>"$work/redis.log" 2>&1 &
redis_pid=$!
pids+=($!)
wait_port "$redis_port" 10 || { echo "redis-server did not start:"; cat "$work/redis.log"; exit 1; } >&2

# --- the limits, in the reference service's format ------------------------
mkdir -p "$work/runtime/ratelimit/config" "$work/envoy"
cp "$here/envoy.yaml" "$work/runtime/ratelimit/config/config.yaml"
cp "$here/envoy.yaml" "$work/envoy/bench.yaml"

# --- Envoy's reference service --------------------------------------------
ref_bin="$CACHE_DIR/ratelimit-$RATELIMIT_VERSION"
ref_note=""
if [[ ! -x $ref_bin ]]; then
	log "building $RATELIMIT_PKG@$RATELIMIT_VERSION from the module proxy (once; cached in $CACHE_DIR)"
	mkdir -p "$CACHE_DIR/bin"
	if GOBIN="$CACHE_DIR/bin" GOFLAGS=-mod=mod timeout 900 \
		go install "$RATELIMIT_PKG@$RATELIMIT_VERSION" >"$work/ref-build.log" 2>&1; then
		mv "$CACHE_DIR/bin/service_cmd" "$ref_bin"
	else
		ref_note="the reference service could not be built: $(tail -3 "$work/ref-build.log" | tr '\n' ' ')"
		log "$ref_note"
	fi
fi
ref_port=""
if [[ -x $ref_bin ]]; then
	ref_port=$(free_port)
	log "starting the reference service on 127.0.0.1:$ref_port (gRPC)"
	# DISABLE_STATS=true puts the reference's stats in a null sink: with
	# USE_STATSD=false alone it logs every stat (about 18 MB in 8 s), which
	# costs it some 8% of its CPU and throughput; floodgate's metrics cost
	# nothing until scraped, so this compares both at their best.
	env "${svc_env[@]}" USE_STATSD=false DISABLE_STATS=true LOG_LEVEL=error \
		HOST=127.0.0.1 PORT="$(free_port)" \
		GRPC_HOST=127.0.0.1 GRPC_PORT="$ref_port" \
		DEBUG_HOST=127.0.0.1 DEBUG_PORT="$(free_port)" \
		REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$redis_port" \
		RUNTIME_ROOT="$work/runtime" RUNTIME_SUBDIRECTORY=ratelimit \
		RUNTIME_WATCH_ROOT=false RUNTIME_IGNOREDOTFILES=true \
		$REF_ENV \
		timeout "$MAX_LIFE" "$ref_bin" >"$work/ref.log" 2>&1 &
	ref_pid=$!
	pids+=($!)
	if ! wait_port "$ref_port" 30 $!; then
		ref_note="the reference service did not start: $(tail -3 "$work/ref.log" | tr '\n' ' ')"
		log "$ref_note"
		ref_port=""
	fi
fi

# --- floodgate --------------------------------------------------------------
# start_floodgate STORE writes a config for STORE (redis or memory) and starts
# floodgate serve with it; it fails when the service does not come up.
start_floodgate() {
	local store_yaml
	if [[ $1 == redis ]]; then
		# The store deadline is the load generator's request timeout
		# (1s), not the guard's default of 100ms (store/guard
		# DefaultTimeout): on a loaded machine a stall past the deadline
		# would let floodgate answer by its failure policy, without
		# Redis, and open its breaker, which is less work than the
		# reference does (it waits for Redis however long it takes).
		store_yaml="  redis: {url: \"redis://127.0.0.1:$redis_port/0\", key_prefix: \"fg:\", deadline: 1s}"
	else
		store_yaml="  memory: {max_keys: 1000000}"
	fi
	cat >"$work/floodgate.yaml" <<EOF
store:
$store_yaml
failure_policy: open
limiters:
  - name: api
    rules:
      - {name: per-user, key: [user], algorithm: fixed_window, limit: 100, window: 1s}
EOF
	fg_port=$(free_port)
	fg_http_port=$(free_port)
	log "starting floodgate serve on 127.0.0.1:$fg_port (gRPC), $1 store"
	env "${svc_env[@]}" timeout "$MAX_LIFE" "$work/floodgate" serve --config "$work/floodgate.yaml" \
		--http "127.0.0.1:$fg_http_port" --grpc "127.0.0.1:$fg_port" \
		--envoy-config-dir "$work/envoy" --log-level warn >"$work/fg.log" 2>&1 &
	fg_pid=$!
	pids+=($!)
	if ! wait_port "$fg_port" 30 $!; then
		fg_note="floodgate serve ($1 store) did not start: $(tail -3 "$work/fg.log" | tr '\n' ' ')"
		log "$fg_note"
		fg_port=""
		return 1
	fi
}
fg_store=${FG_STORE:-redis}
fg_port=""
fg_note=""
if ! start_floodgate "$fg_store" && [[ $fg_store == redis ]]; then
	# If the Redis store cannot start, compare against the memory store,
	# and say so in the table.
	fg_store=memory
	start_floodgate memory || true
fi

# --- the runs ---------------------------------------------------------------
# cpu_ticks PID prints the CPU time (user + system, in clock ticks) used so far
# by process PID, or by its child when PID is the `timeout` wrapper.
cpu_ticks() {
	local pid=$1 child
	child=$(ps -o pid= --ppid "$pid" 2>/dev/null | head -1 | tr -d ' ')
	[[ -n $child ]] && pid=$child
	awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo 0
}
hz=$(getconf CLK_TCK)

# fallbacks prints how many decisions floodgate has made without its store
# (fail_open + fail_closed in its metrics): a store that times out under load
# would otherwise pass for a fast one. It prints "-" for the reference
# service, whose store failures reach the client as gRPC errors.
fallbacks() {
	if [[ $1 != floodgate ]]; then
		echo -
		return
	fi
	local m
	if ! m=$(curl -sf --max-time 5 "http://127.0.0.1:$fg_http_port/metrics"); then
		echo "?"
		return
	fi
	awk '/^floodgate_decisions_total/ && /result="fail_(open|closed)"/ {s += $NF} END {print s + 0}' <<<"$m"
}

# drive NAME PORT PID ROUND warms one service up, then measures it, writing the
# load generator's JSON summary to $work/NAME-ROUND.json and the CPU time the
# service and Redis spent during the measured part to $work/NAME-ROUND.cpu.
drive() {
	local common=(-target grpc -addr "127.0.0.1:$2" -domain bench -attribute user -descriptors "$DESCRIPTORS"
		-keys "$KEYS" -dist "$DIST" -rate "$RATE" -concurrency "$CONCURRENCY" -conns "$CONNS"
		-grpc-client "$GRPC_CLIENT")
	redis-cli -p "$redis_port" flushall >/dev/null
	log "load: $1 on 127.0.0.1:$2, round $4: $WARMUP warm-up + $DURATION"
	if [[ $WARMUP != 0 && $WARMUP != 0s ]]; then
		"${load[@]}" "${common[@]}" -duration "$WARMUP" -quiet -json >/dev/null || true
	fi
	local s0 r0 f0 f1
	s0=$(cpu_ticks "$3")
	r0=$(cpu_ticks "$redis_pid")
	f0=$(fallbacks "$1")
	local lt="? ?"
	if ((${#timed[@]} > 0)); then
		"${timed[@]}" -o "$work/$1-$4.time" "${load[@]}" "${common[@]}" -duration "$DURATION" -json >"$work/$1-$4.json" || true
		lt=$(tail -1 "$work/$1-$4.time")
	else
		"${load[@]}" "${common[@]}" -duration "$DURATION" -json >"$work/$1-$4.json" || true
	fi
	echo "$(($(cpu_ticks "$3") - s0)) $(($(cpu_ticks "$redis_pid") - r0)) $lt" >"$work/$1-$4.cpu"
	f1=$(fallbacks "$1")
	if [[ $f0 =~ ^[0-9]+$ && $f1 =~ ^[0-9]+$ ]]; then
		echo $((f1 - f0)) >"$work/$1-$4.fail"
	else
		echo "$f1" >"$work/$1-$4.fail"
	fi
}
ROUNDS=${ROUNDS:-1}
for ((round = 1; round <= ROUNDS; round++)); do
	if ((round % 2 == 1)); then
		[[ -n $ref_port ]] && drive reference "$ref_port" "$ref_pid" "$round"
		[[ -n $fg_port ]] && drive floodgate "$fg_port" "$fg_pid" "$round"
	else
		[[ -n $fg_port ]] && drive floodgate "$fg_port" "$fg_pid" "$round"
		[[ -n $ref_port ]] && drive reference "$ref_port" "$ref_pid" "$round"
	fi
done

# --- the table ----------------------------------------------------------------
echo
echo "# Service comparison over gRPC ShouldRateLimit, $(date -u +%Y-%m-%dT%H:%MZ)"
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2 | sed 's/^ //'),"\
	"$(go env GOVERSION), redis $(redis-server --version | awk '{print $3}' | cut -d= -f2), load average $(cut -d' ' -f1-3 /proc/loadavg)"
if ((RATE > 0)); then model="open model, $RATE req/s offered, ≤$CONCURRENCY in flight"; else model="closed model, $CONCURRENCY workers"; fi
echo "load: $model, $CONNS gRPC conns ($GRPC_CLIENT client${LOAD_PROCS:+, GOMAXPROCS=$LOAD_PROCS}), $KEYS $DIST keys, $WARMUP warm-up + $DURATION per service and round;"
echo "      one Redis (flushed before each run), services driven one after the other (order alternating by round), load generator on the same machine"
echo "reference service stats: USE_STATSD=false DISABLE_STATS=true (no stats sink, no stats log)"
[[ -n $REF_ENV ]] && echo "reference service environment: $REF_ENV"
[[ -n $SERVICE_GOGC ]] && echo "both services run with GOGC=$SERVICE_GOGC"
echo "command: floodgate load -target grpc -addr ADDR -domain bench -attribute user -descriptors $DESCRIPTORS -keys $KEYS -dist $DIST \\"
echo "         -rate $RATE -concurrency $CONCURRENCY -conns $CONNS -grpc-client $GRPC_CLIENT -duration $DURATION -json  (after a $WARMUP run)"
echo
printf '| %-32s | %10s | %9s | %9s | %9s | %13s | %13s | %13s | %8s | %7s | %9s |\n' \
	service "req/s" "p50 µs" "p99 µs" "max µs" "svc µs/req" "redis µs/req" "load µs/req" denied errors "no store"
echo "|----------------------------------|-----------:|---------:|---------:|---------:|-------------:|-------------:|-------------:|---------:|--------:|----------:|"
row() {
	local j c
	j=$(cat "$work/$2.json")
	read -r -a c <"$work/$2.cpu"
	awk -v name="$1" -v t="$(field "$j" throughput)" -v p50="$(field "$j" p50)" -v p99="$(field "$j" p99)" \
		-v mx="$(field "$j" max)" -v n="$(field "$j" requests)" -v d="$(field "$j" denied)" \
		-v e="$(field "$j" errors)" -v sc="${c[0]}" -v rc="${c[1]}" -v lu="${c[2]:-?}" -v ls="${c[3]:-?}" \
		-v hz="$hz" -v f="$(cat "$work/$2.fail")" 'BEGIN {
		n = (n > 0 ? n : 1)
		lc = (lu == "?" ? "?" : sprintf("%.1f", (lu + ls) * 1e6 / n))
		printf "| %-32s | %10.0f | %8.0f | %8.0f | %8.0f | %12.1f | %12.1f | %12s | %8d | %7d | %9s |\n",
			name, t, p50, p99, mx, sc / hz * 1e6 / n, rc / hz * 1e6 / n, lc, d, e, f
	}'
}
for ((round = 1; round <= ROUNDS; round++)); do
	if ((round % 2 == 1)); then
		[[ -n $ref_port ]] && row "envoyproxy/ratelimit (redis), $round" "reference-$round"
		[[ -n $fg_port ]] && row "floodgate ($fg_store store), $round" "floodgate-$round"
	else
		[[ -n $fg_port ]] && row "floodgate ($fg_store store), $round" "floodgate-$round"
		[[ -n $ref_port ]] && row "envoyproxy/ratelimit (redis), $round" "reference-$round"
	fi
done
echo
# median reads numbers, one a line, and prints their median.
median() {
	sort -g | awk '{ a[NR] = $1 } END {
		if (NR == 0) { print "?"; exit }
		if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2
	}'
}
# stat NAME FIELD prints FIELD of every round's summary of NAME, one a line.
stat() {
	local round
	for ((round = 1; round <= ROUNDS; round++)); do
		field "$(cat "$work/$1-$round.json")" "$2"
	done
}
if [[ -n $ref_port && -n $fg_port ]]; then
	ratios=()
	for ((round = 1; round <= ROUNDS; round++)); do
		rj=$(cat "$work/reference-$round.json")
		fj=$(cat "$work/floodgate-$round.json")
		awk -v ft="$(field "$fj" throughput)" -v rt="$(field "$rj" throughput)" \
			-v fp="$(field "$fj" p99)" -v rp="$(field "$rj" p99)" -v st="$fg_store" -v r="$round" 'BEGIN {
			printf "round %d, floodgate / reference: throughput %.2fx, p99 %.2fx", r, ft / rt, fp / rp
			if (st != "redis") printf "  (floodgate on its %s store: not like for like)", st
			printf "\n"
		}'
		ratios+=("$(awk -v ft="$(field "$fj" throughput)" -v rt="$(field "$rj" throughput)" \
			-v fp="$(field "$fj" p99)" -v rp="$(field "$rj" p99)" 'BEGIN { printf "%.4f %.4f", ft / rt, fp / rp }')")
	done
	if ((ROUNDS > 1)); then
		rt=$(stat reference throughput | median)
		ft=$(stat floodgate throughput | median)
		rp=$(stat reference p99 | median)
		fp=$(stat floodgate p99 | median)
		tr=$(printf '%s\n' "${ratios[@]}" | cut -d' ' -f1 | median)
		pr=$(printf '%s\n' "${ratios[@]}" | cut -d' ' -f2 | median)
		awk -v n="$ROUNDS" -v rt="$rt" -v ft="$ft" -v rp="$rp" -v fp="$fp" -v tr="$tr" -v pr="$pr" 'BEGIN {
			printf "medians of %d rounds: reference %.0f req/s, p99 %.0f µs; floodgate %.0f req/s, p99 %.0f µs\n", n, rt, rp, ft, fp
			printf "median of the per-round ratios, floodgate / reference: throughput %.2fx, p99 %.2fx\n", tr, pr
		}'
	fi
fi
echo "svc/redis/load µs/req: CPU time the service / Redis / load generator used per measured request."
echo "no store: decisions floodgate made by its failure policy because the store failed or timed out"
echo "          (not comparable work: such runs measure the fallback, not Redis)."
[[ -n $ref_note ]] && echo "note: $ref_note"
[[ -n $fg_note ]] && echo "note: $fg_note"
for f in "$work"/*.json; do
	[[ -e $f ]] || continue
	if grep -q '"error_kinds"' "$f"; then
		echo "errors in $(basename "$f" .json): $(grep -o '"error_kinds":\[[^]]*\]' "$f")"
	fi
done
exit 0

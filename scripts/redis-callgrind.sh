#!/usr/bin/env bash
# Counts the instructions a redis-server spends per decision, under
# valgrind's callgrind (load on the machine does not change the count):
#
#   scripts/redis-callgrind.sh WORKLOAD PER CALLS
#
# WORKLOAD is fixed, fixed-clock, fixed-clock-3 (three clock-aligned rules)
# or bucket (floodgate's function, PER decisions coalesced into each of
# CALLS calls), or floor or floor-3 (the minimal INCRBY script on one key or
# three, CALLS calls, PER ignored). Needs valgrind and redis-server
# (apt-get install valgrind redis-server). About a minute.
set -euo pipefail
cd "$(dirname "$0")/.."
workload=${1:?workload}; per=${2:?per}; calls=${3:?calls}
dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
valgrind --tool=callgrind --callgrind-out-file="$dir/cg.%p" \
	redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" >/dev/null 2>"$dir/valgrind.log" &
trap 'redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.3; done
FG_CALLGRIND_ADDR=127.0.0.1:$port FG_CALLGRIND=$workload FG_CALLGRIND_PER=$per FG_CALLGRIND_CALLS=$calls \
	go test -count=1 -run '^TestCallgrindWorkload$' ./store/redis/ >/dev/null
redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
sleep 2
dump=$(ls "$dir"/cg.*.1 | head -1) # the dump the test asked for
total=$(callgrind_annotate "$dump" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1; exit}')
decisions=$((per * calls))
case $workload in floor*) decisions=$calls ;; esac
echo "$workload, $per per call: $((total / decisions)) instructions per decision ($total over $decisions)"

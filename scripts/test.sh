#!/usr/bin/env bash
# Runs floodgate's whole test suite on a fresh machine: installs what the tests
# need (redis-server from Debian's packages), then the unit, property,
# conformance, end-to-end and short fuzz tests, all under the race detector.
set -euo pipefail
cd "$(dirname "$0")/.."

need_redis() {
	command -v redis-server >/dev/null && command -v redis-cli >/dev/null
}
if ! need_redis; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		echo "test.sh: installing redis-server with apt-get" >&2
		apt-get update -qq >/dev/null
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
	fi
fi
if ! need_redis; then
	echo "test.sh: redis-server and redis-cli are required: apt-get install redis-server" >&2
	exit 1
fi

go test -race -count=1 -timeout 30m ./...

# The full-size key flood (10M distinct keys against a 100k-key cap) is too
# slow under the race detector, which runs a scaled-down version above.
go test -count=1 -run '^TestFloodDistinctKeys$' ./store/memory

# The chi example is its own module, so chi stays out of floodgate's go.mod.
(cd examples/http && go test -race -count=1 ./...)

# Fuzz every parser briefly; a crash fails the run.
FUZZTIME=${FUZZTIME:-10s}
go list -f '{{.ImportPath}} {{.Dir}}' ./... | while read -r pkg dir; do
	for f in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //'); do
		echo "fuzz $pkg $f ($FUZZTIME)"
		go test -run '^$' -fuzz "^$f\$" -fuzztime "$FUZZTIME" "$pkg"
	done
done

#!/usr/bin/env bash
# Builds floodgate's release artefacts into dist/ (ignored by git):
#
#   ./scripts/release.sh            # VERSION from git (scripts/version.sh)
#   VERSION=v1.2.0 ./scripts/release.sh
#
# For linux and darwin, amd64 and arm64: a static, stripped binary
# (CGO_ENABLED=0, -trimpath, version stamped) packed with the README,
# CHANGELOG and sample configuration as floodgate_VERSION_OS_ARCH.tar.gz,
# and a CycloneDX SBOM of the Go modules linked into that binary, read from
# its build information,
# floodgate_VERSION_OS_ARCH.cdx.json (cyclonedx-gomod, pinned below, from
# the Go module proxy). SHA256SUMS lists every artefact; the script checks
# it and runs the binary for this machine before it finishes.
set -euo pipefail
cd "$(dirname "$0")/.."

# The SBOM generator, pinned; "go run" fetches and caches it.
CYCLONEDX_GOMOD=github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@v1.10.0
TARGETS=${TARGETS:-"linux/amd64 linux/arm64 darwin/amd64 darwin/arm64"}

. scripts/version.sh
# Archives carry the commit's time, so a rebuild of a commit is identical.
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
dist=dist
rm -rf "$dist"
mkdir -p "$dist"
ldflags="-s -w -X main.version=$VERSION -X main.revision=$REVISION -X main.revisionTime=$REVISION_TIME"

for target in $TARGETS; do
	os=${target%/*}
	arch=${target#*/}
	name="floodgate_${VERSION}_${os}_${arch}"
	echo "release.sh: $name" >&2
	stage="$dist/$name"
	mkdir -p "$stage"
	CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -buildvcs=false -ldflags "$ldflags" \
		-o "$stage/floodgate" ./cmd/floodgate
	cp README.md CHANGELOG.md floodgate.yaml "$stage/"
	tar -C "$dist" --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
		-cf - "$name" | gzip -9n >"$dist/$name.tar.gz"
	# From the binary's own build information: exactly the modules (with
	# their go.sum hashes) and the Go release linked into it.
	go run "$CYCLONEDX_GOMOD" bin -json -std -version "$VERSION" \
		-output "$dist/$name.cdx.json" "$stage/floodgate"
done

(cd "$dist" && sha256sum -- *.tar.gz *.cdx.json >SHA256SUMS && sha256sum --quiet -c SHA256SUMS)
host="$dist/floodgate_${VERSION}_$(go env GOOS)_$(go env GOARCH)/floodgate"
if [ -x "$host" ]; then
	"$host" version | grep -qF "floodgate $VERSION" || { echo "release.sh: $host does not report $VERSION" >&2; exit 1; }
fi
echo "release.sh: $VERSION in $dist/:" >&2
ls -l "$dist"/*.tar.gz "$dist"/*.cdx.json "$dist/SHA256SUMS" >&2

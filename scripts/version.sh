# Sourced by scripts/image.sh and scripts/release.sh: sets VERSION, REVISION
# and REVISION_TIME (each kept if already set) from git, for stamping into
# the binary with -ldflags "-X main.version=…" (cmd/floodgate/version.go).
#
# VERSION is the tag on HEAD (v1.2.3), or "git describe" past the last tag
# (v1.2.3-4-gabcdef012345), or a Go-style pseudo-version when nothing is
# tagged yet (v0.0.0-20261201210623-1436a0ada27c); "-dirty" marks
# uncommitted changes.

REVISION=${REVISION:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
REVISION_TIME=${REVISION_TIME:-$(TZ=UTC git log -1 --date=format-local:%Y-%m-%dT%H:%M:%SZ --format=%cd 2>/dev/null || echo unknown)}
if [ -z "${VERSION:-}" ]; then
	if VERSION=$(git describe --tags --match 'v[0-9]*' --abbrev=12 --dirty 2>/dev/null); then
		:
	elif [ "$REVISION" != unknown ]; then
		VERSION="v0.0.0-$(TZ=UTC git log -1 --date=format-local:%Y%m%d%H%M%S --format=%cd)-${REVISION:0:12}"
		git diff --quiet HEAD 2>/dev/null || VERSION+=-dirty
	else
		VERSION=dev
	fi
fi

#!/usr/bin/env bash
# Builds floodgate's container image from the Containerfile with podman (or
# buildah), stamped with the git version, and reports its size.
#
#   ./scripts/image.sh                     # localhost/floodgate:<version>
#   IMAGE=registry.example/floodgate:v1 ./scripts/image.sh
#
# Environment:
#   IMAGE       the tag to build (default localhost/floodgate:<version>, also
#               tagged localhost/floodgate:latest)
#   VERSION     the version stamped into the binary (default: from git, see
#               scripts/version.sh)
#   BUILDER     "registry": the Containerfile's Go image (GO_IMAGE);
#               "local": a builder image made from this machine's Go
#               toolchain, with the module and build caches mounted and no
#               network in the build; "auto" (default): registry if the Go
#               image is present or can be pulled, else local
#   GO_IMAGE    the Go build stage's image (default: the Containerfile's)
#   ISOLATION   how RUN steps are isolated: chroot (default, works where the
#               OCI runtime cannot manage cgroups) or oci
#   MAX_MB      fail when the image is larger (default 32)
#
# Installs podman with apt-get when neither podman nor buildah is present.
# Prints "image: NAME size: N bytes" as its last line.
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "image.sh: $*" >&2; exit 1; }

if ! command -v podman >/dev/null && ! command -v buildah >/dev/null; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		echo "image.sh: installing podman with apt-get" >&2
		apt-get update -qq >/dev/null
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman >/dev/null
	fi
fi
if command -v podman >/dev/null; then
	tool=podman
elif command -v buildah >/dev/null; then
	tool=buildah
else
	die "podman or buildah is required: apt-get install podman"
fi

. scripts/version.sh
latest=
if [ -z "${IMAGE:-}" ]; then
	IMAGE=localhost/floodgate:$VERSION
	latest=localhost/floodgate:latest # what deploy/ and compose.yaml name
fi
ISOLATION=${ISOLATION:-chroot}
MAX_MB=${MAX_MB:-32}
GO_IMAGE=${GO_IMAGE:-$(sed -n 's/^ARG GO_IMAGE=//p' Containerfile)}
BUILDER=${BUILDER:-auto}

have_image() { # image
	if [ "$tool" = podman ]; then podman image exists "$1"; else buildah inspect --type image "$1" >/dev/null 2>&1; fi
}

# local_builder makes (once) an image holding a static busybox for the
# shell and the CA certificates, with Go's environment set: the stand-in for
# GO_IMAGE when no registry is reachable. This machine's Go toolchain is
# mounted into the build, not copied into the image.
local_builder() {
	local name=localhost/floodgate-builder:local c
	command -v go >/dev/null || die "BUILDER=local needs Go on this machine"
	if have_image "$name"; then
		echo "$name"
		return
	fi
	if [ ! -x /bin/busybox ] || ! file_is_static /bin/busybox; then
		if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
			echo "image.sh: installing busybox-static with apt-get" >&2
			apt-get update -qq >/dev/null
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq busybox-static >/dev/null
		fi
		file_is_static /bin/busybox || die "BUILDER=local needs a static /bin/busybox: apt-get install busybox-static"
	fi
	[ -f /etc/ssl/certs/ca-certificates.crt ] || die "BUILDER=local needs /etc/ssl/certs/ca-certificates.crt: apt-get install ca-certificates"
	command -v buildah >/dev/null || die "BUILDER=local needs buildah: apt-get install buildah"
	echo "image.sh: making $name" >&2
	c=$(buildah from scratch)
	buildah copy -q "$c" /bin/busybox /bin/busybox >/dev/null
	buildah run --isolation "$ISOLATION" "$c" /bin/busybox --install -s /bin
	buildah run --isolation "$ISOLATION" "$c" /bin/mkdir -p /tmp /root /go /usr/local/go
	buildah copy -q "$c" /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt >/dev/null
	buildah config --env PATH=/usr/local/go/bin:/go/bin:/bin --env GOPATH=/go \
		--env GOTOOLCHAIN=local --env HOME=/root "$c"
	buildah commit -q --rm "$c" "$name" >/dev/null
	echo "$name"
}

# file_is_static reports whether a program needs no shared libraries.
file_is_static() {
	[ -x "$1" ] && ! ldd "$1" >/dev/null 2>&1
}

build_args=(--build-arg "VERSION=$VERSION" --build-arg "REVISION=$REVISION" --build-arg "REVISION_TIME=$REVISION_TIME")
case $BUILDER in
auto)
	if have_image "$GO_IMAGE" || $tool pull -q "$GO_IMAGE" >/dev/null 2>&1; then
		BUILDER=registry
	else
		echo "image.sh: cannot pull $GO_IMAGE; building with this machine's Go toolchain (BUILDER=local)" >&2
		BUILDER=local
	fi
	;;
registry | local) ;;
*) die "BUILDER=$BUILDER: want auto, registry or local" ;;
esac
if [ "$BUILDER" = local ]; then
	GO_IMAGE=$(local_builder)
	# The toolchain is this machine's; the modules come from its cache,
	# filled here, so the build itself needs no network; the build cache is
	# shared with builds on this machine of the same flags (cgo off,
	# -trimpath), so a package compiled by one is not compiled again.
	go mod download
	modcache=$(go env GOMODCACHE)
	gocache=$(go env GOCACHE)
	mkdir -p "$gocache"
	build_args+=(--build-arg GOPROXY=off --build-arg GOFLAGS=-mod=readonly
		--volume "$(go env GOROOT):/usr/local/go:ro"
		--volume "$modcache:/go/pkg/mod" --volume "$gocache:/root/.cache/go-build")
	# (chroot isolation shares the host's network; GOPROXY=off keeps the
	# build off it.)
	[ "$ISOLATION" = chroot ] || build_args+=(--network none)
fi
build_args+=(--build-arg "GO_IMAGE=$GO_IMAGE")

echo "image.sh: building $IMAGE with $tool (builder $GO_IMAGE, version $VERSION)" >&2
if [ "$tool" = podman ]; then
	podman build --isolation "$ISOLATION" "${build_args[@]}" -f Containerfile -t "$IMAGE" . >&2
	size=$(podman image inspect --format '{{.Size}}' "$IMAGE")
else
	buildah bud --isolation "$ISOLATION" "${build_args[@]}" -f Containerfile -t "$IMAGE" . >&2
	size=$(buildah inspect --type image --format '{{.ImageSize}}' "$IMAGE" 2>/dev/null || echo 0)
fi
if [ -n "$latest" ]; then
	$tool tag "$IMAGE" "$latest"
fi
if [ "$size" -gt $((MAX_MB * 1024 * 1024)) ]; then
	die "$IMAGE is $size bytes, over the ${MAX_MB} MiB limit"
fi
echo "image: $IMAGE size: $size bytes ($((size / 1024 / 1024)) MiB)"

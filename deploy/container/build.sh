#!/usr/bin/env bash
# build.sh: versioned builds of exactly.
#
#   build.sh binary OUT   a static binary (CGO_ENABLED=0) at OUT
#   build.sh image [TAG]  the container image of Containerfile, from a
#                         binary built here with the host's Go; pulls no
#                         image (every stage it uses is FROM scratch).
#                         TAG defaults to localhost/exactly:$VERSION.
#
# Both stamp the version and commit that `exactly version` prints:
#   VERSION  default: `git describe --tags --match 'v*' --dirty`, or
#            v0.0.0-dev when the clone has no release tag
#   COMMIT   default: `git rev-parse HEAD`
# The image needs buildah or podman (Debian: apt-get install buildah):
#   BUILDER        the builder command (default: buildah, else podman)
#   BUILDER_FLAGS  global flags put before its subcommand, e.g.
#                  "--storage-driver vfs --root DIR --runroot DIR"
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"

die() {
	echo "build.sh: $*" >&2
	exit 1
}

version() {
	if [[ -n "${VERSION:-}" ]]; then
		echo "$VERSION"
	elif git -C "$ROOT" describe --tags --match 'v*' --dirty 2>/dev/null; then
		:
	else
		echo v0.0.0-dev
	fi
}

commit() {
	if [[ -n "${COMMIT:-}" ]]; then
		echo "$COMMIT"
	else
		git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown
	fi
}

# binary OUT: the static binary, version stamped.
binary() {
	local out=$1 pkg=github.com/exactly-io/exactly/cmd/exactly/internal/buildinfo
	[[ "$out" = /* ]] || out="$PWD/$out"
	(cd "$ROOT" && CGO_ENABLED=0 go build -trimpath -buildvcs=false \
		-ldflags "-s -w -X $pkg.Version=$(version) -X $pkg.Commit=$(commit)" \
		-o "$out" ./cmd/exactly)
}

image() {
	local tag=${1:-localhost/exactly:$(version)} builder=${BUILDER:-}
	if [[ -z "$builder" ]]; then
		if command -v buildah >/dev/null 2>&1; then
			builder=buildah
		elif command -v podman >/dev/null 2>&1; then
			builder=podman
		else
			die "neither buildah nor podman is installed (Debian: apt-get install buildah)"
		fi
	fi
	ctx="$(mktemp -d)" # global: the EXIT trap runs after image returns
	trap 'rm -rf "$ctx"' EXIT
	binary "$ctx/rootfs/usr/local/bin/exactly"
	sh "$HERE/rootfs.sh" "$ctx/rootfs"
	mkdir "$ctx/statedir" # the empty source of /var/lib/exactly
	# shellcheck disable=SC2086 # BUILDER_FLAGS is a list of flags
	"$builder" ${BUILDER_FLAGS:-} build --build-arg BINARY_FROM=prebuilt \
		--label "org.opencontainers.image.version=$(version)" \
		--label "org.opencontainers.image.revision=$(commit)" \
		-f "$HERE/Containerfile" -t "$tag" "$ctx"
}

case "${1:-}" in
binary)
	[[ $# -eq 2 ]] || die "usage: build.sh binary OUT"
	binary "$2"
	;;
image)
	[[ $# -le 2 ]] || die "usage: build.sh image [TAG]"
	image "${2:-}"
	;;
*)
	die "usage: build.sh binary OUT | build.sh image [TAG]"
	;;
esac

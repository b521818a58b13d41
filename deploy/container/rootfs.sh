#!/bin/sh
# rootfs.sh DIR: adds to DIR the files the exactly image holds besides the
# binary: the user and group 65532 (exactly), the CA certificates of
# Debian's ca-certificates package, and /var/lib, the parent of the state
# directory that the Containerfile adds. POSIX sh: it runs in the golang
# image and on the host.
set -eu
dir=$1
ca=/etc/ssl/certs/ca-certificates.crt
if [ ! -s "$ca" ]; then
	echo "rootfs.sh: $ca is missing: install Debian's ca-certificates package" >&2
	exit 1
fi
mkdir -p "$dir/etc/ssl/certs"
cp "$ca" "$dir/etc/ssl/certs/ca-certificates.crt"
printf 'exactly:x:65532:65532:exactly:/nonexistent:/sbin/nologin\n' >"$dir/etc/passwd"
printf 'exactly:x:65532:\n' >"$dir/etc/group"
mkdir -p "$dir/var/lib"

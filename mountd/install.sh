#!/bin/sh
# Builds the release binaries and installs them:
#   bigtable-mountd, bigtable-bench  -> $BINDIR   (default /usr/local/bin)
#   mount.bigtable                   -> $SBINDIR  (default /sbin, where mount(8) looks for helpers)
# Usage: mountd/install.sh [--debug]   (--debug installs the debug build instead: faster to build)
# Environment: BINDIR, SBINDIR, DESTDIR (staging root), CARGO_TARGET_DIR, CARGO,
# BIGTABLE_NO_URING=1 (leave the kernel's FUSE over io_uring switch alone).
set -eu

here=$(cd "$(dirname "$0")/.." && pwd)
cargo=${CARGO:-cargo}
bindir=${BINDIR:-/usr/local/bin}
sbindir=${SBINDIR:-/sbin}
dest=${DESTDIR:-}
profile=release
flag=--release
if [ "${1:-}" = "--debug" ]; then
    profile=debug
    flag=
fi

cd "$here"
# etcd's client (for -o lock=etcd://…) is generated from .proto files at
# build time: the build needs protoc, the installed daemon does not.
if ! command -v protoc >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1; then
        echo "mountd/install.sh: installing protobuf-compiler (protoc) for the build"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq protobuf-compiler >/dev/null
    else
        echo "mountd/install.sh: the build needs protoc (protobuf-compiler): install it first" >&2
        exit 1
    fi
fi
# shellcheck disable=SC2086
"$cargo" build $flag -p mountd --bins
target=${CARGO_TARGET_DIR:-$here/target}
out="$target/$profile"

install -d "$dest$bindir" "$dest$sbindir"
install -m 0755 "$out/bigtable-mountd" "$dest$bindir/bigtable-mountd"
if [ -x "$out/bigtable-bench" ]; then
    install -m 0755 "$out/bigtable-bench" "$dest$bindir/bigtable-bench"
fi
# The mount(8) helper: mount -t bigtable DATA_DIR MOUNTPOINT runs /sbin/mount.bigtable.
install -m 0755 "$out/mount-bigtable" "$dest$sbindir/mount.bigtable"

# FUSE over io_uring: several times faster than /dev/fuse, offered by Linux
# 6.14+ to new mounts only while the fuse module's enable_uring parameter is
# on. Turn it on now and at every boot (a modprobe.d line), unless staging
# (DESTDIR) or told not to (BIGTABLE_NO_URING=1).
param=/sys/module/fuse/parameters/enable_uring
conf=/etc/modprobe.d/bigtable-fuse.conf
if [ -z "$dest" ] && [ -z "${BIGTABLE_NO_URING:-}" ] && [ "$(id -u)" = 0 ]; then
    modprobe fuse 2>/dev/null || true
    if [ ! -e "$param" ]; then
        echo "this kernel has no FUSE over io_uring (Linux 6.14+): mounts use /dev/fuse"
    elif [ "$(cat "$param")" != Y ]; then
        if echo Y > "$param" 2>/dev/null; then
            if [ -d /etc/modprobe.d ]; then
                echo "options fuse enable_uring=1" > "$conf"
            fi
            echo "turned on FUSE over io_uring for new mounts, now and at boot ($conf);"
            echo "  undo: rm -f $conf && echo N > $param"
        else
            echo "could not turn on FUSE over io_uring ($param): mounts use /dev/fuse"
        fi
    fi
fi

echo "installed: $dest$bindir/bigtable-mountd $dest$sbindir/mount.bigtable$( [ -x "$out/bigtable-bench" ] && echo " $dest$bindir/bigtable-bench")"
echo "mount with: mkdir -p /var/lib/bigtable /mnt/bt && mount -t bigtable /var/lib/bigtable /mnt/bt"

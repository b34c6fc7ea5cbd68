#!/bin/sh
# Builds the release binaries and installs them:
#   bigtable-mountd, bigtable-bench  -> $BINDIR   (default /usr/local/bin)
#   mount.bigtable                   -> $SBINDIR  (default /sbin, where mount(8) looks for helpers)
# Usage: mountd/install.sh [--debug]   (--debug installs the debug build instead: faster to build)
# Environment: BINDIR, SBINDIR, DESTDIR (staging root), CARGO_TARGET_DIR, CARGO.
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

echo "installed: $dest$bindir/bigtable-mountd $dest$sbindir/mount.bigtable$( [ -x "$out/bigtable-bench" ] && echo " $dest$bindir/bigtable-bench")"
echo "mount with: mkdir -p /var/lib/bigtable /mnt/bt && mount -t bigtable /var/lib/bigtable /mnt/bt"

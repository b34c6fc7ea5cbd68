#!/usr/bin/env bash
# What bigtable-bench needs beyond the default build, installed from Debian's
# packages, and the environment that links the `peers` feature to the system
# RocksDB instead of compiling the vendored copy (over ten minutes here).
#
#   sudo .ci/bench-deps.sh          # install (skips what is already there)
#   . .ci/bench-deps.sh             # install if needed, and export the variables
#   cargo build -p mountd --features peers --release --bin bigtable-bench
#
# Packages:
#   librocksdb-dev  librocksdb.so (7.8) and its headers, for the rocksdb crate (=0.20.1,
#                   default-features = false: librocksdb-sys 0.10 then links only
#                   -lrocksdb -lstdc++; the Debian library brings its own compressors)
#   libclang-dev    libclang for librocksdb-sys's bindgen step (it reads rocksdb/c.h)
#   bindfs fuse3    the FUSE passthrough peer of `bigtable-bench fs`
#   fio             the raw-I/O peer of `bigtable-bench gfs`
#
# Environment read by librocksdb-sys 0.10's build script:
#   ROCKSDB_LIB_DIR      link the library found here (dynamically) instead of building it
#   ROCKSDB_INCLUDE_DIR  generate bindings from these headers, so they match the 7.8
#                        library rather than the crate's bundled 7.9.2 headers
# (SNAPPY_LIB_DIR etc. are only read with the crate's compression features, which are off.)

_bench_deps_main() {
  local pkgs=(librocksdb-dev libclang-dev bindfs fuse3 fio)
  local missing=() p
  for p in "${pkgs[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    local sudo=()
    [ "$(id -u)" -eq 0 ] || sudo=(sudo)
    echo "installing: ${missing[*]}" >&2
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq || return 1
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null || return 1
  fi
  local multiarch
  multiarch=$(gcc -print-multiarch 2>/dev/null || dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
  export ROCKSDB_LIB_DIR="/usr/lib/$multiarch"
  export ROCKSDB_INCLUDE_DIR=/usr/include
  if [ ! -e "$ROCKSDB_LIB_DIR/librocksdb.so" ]; then
    echo "librocksdb.so not found in $ROCKSDB_LIB_DIR" >&2
    return 1
  fi
  echo "export ROCKSDB_LIB_DIR=$ROCKSDB_LIB_DIR ROCKSDB_INCLUDE_DIR=$ROCKSDB_INCLUDE_DIR" >&2
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  set -euo pipefail
  _bench_deps_main
else
  _bench_deps_main
fi

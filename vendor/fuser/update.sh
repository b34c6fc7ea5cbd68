#!/usr/bin/env bash
# Rebuilds vendor/fuser from the pristine fuser crate and the patch series in
# patches/ (see PATCHED.md).
#
#   update.sh [VERSION]            pristine fuser VERSION + patches/series -> vendor/fuser
#   update.sh --refresh [VERSION]  vendor/fuser - pristine fuser VERSION -> patches/*.patch
#
# VERSION defaults to the version in vendor/fuser/Cargo.toml. The pristine
# crate comes from the local cargo cache, or is fetched from crates.io by
# `cargo fetch` in a throwaway project.
#
# Apply: the paths in patches/remove are deleted from the pristine crate, then
# the patches named in patches/series are applied in order with `patch -p1`
# (no fuzz); the first that does not apply stops the script, and vendor/fuser
# is left as it was. Otherwise every file of vendor/fuser except the ones this
# script owns (PATCHED.md, update.sh, patches/) and target/ is replaced.
#
# Refresh: each patch is rewritten as the diff, for the files its series line
# names, between the pristine crate (less patches/remove) and vendor/fuser as
# it is now; its leading description (the lines before its first `--- `) is
# kept. A changed file that no series line names is an error.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
patches="$here/patches"
# Files of vendor/fuser that are not fuser's: never replaced or diffed.
own=(PATCHED.md update.sh patches target)

die() {
  echo "update.sh: $*" >&2
  exit 1
}

mode=apply
if [ "${1:-}" = "--refresh" ]; then
  mode=refresh
  shift
fi
version=${1:-$(sed -n 's/^version = "\(.*\)"$/\1/p' "$here/Cargo.toml" | head -n 1)}
[ -n "$version" ] || die "no VERSION given and none found in Cargo.toml"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The pristine crate, unpacked into $work/pristine.
cargo_home=${CARGO_HOME:-$HOME/.cargo}
find_crate() {
  { find "$cargo_home/registry/cache" -maxdepth 2 -name "fuser-$version.crate" 2>/dev/null || true; } | head -n 1
}
crate=$(find_crate)
if [ -z "$crate" ]; then
  echo "fuser $version is not in $cargo_home/registry/cache: fetching it" >&2
  mkdir -p "$work/fetch/src"
  printf '[package]\nname = "fuser-fetch"\nversion = "0.0.0"\nedition = "2021"\n\n[dependencies]\nfuser = { version = "=%s", default-features = false }\n' \
    "$version" >"$work/fetch/Cargo.toml"
  echo 'fn main() {}' >"$work/fetch/src/main.rs"
  (cd "$work/fetch" && cargo fetch --quiet) || die "cargo fetch of fuser $version failed"
  crate=$(find_crate)
  [ -n "$crate" ] || die "cargo fetched fuser $version but its .crate is not in $cargo_home/registry/cache"
fi
mkdir -p "$work/pristine"
tar -xzf "$crate" -C "$work/pristine"
base="$work/pristine/fuser-$version"
[ -f "$base/Cargo.toml" ] || die "$crate holds no fuser-$version/Cargo.toml"

# What is not vendored at all.
while read -r path; do
  case "$path" in '' | '#'*) continue ;; esac
  rm -rf "${base:?}/$path"
done <"$patches/remove"

# Series lines: `NAME.patch FILE...` (blank lines and # comments skipped).
series() {
  grep -v -e '^[[:space:]]*#' -e '^[[:space:]]*$' "$patches/series"
}

is_own() {
  local top=${1%%/*} o
  for o in "${own[@]}"; do [ "$top" = "$o" ] && return 0; done
  return 1
}

# The files of a tree, relative to it, less the ones this script owns.
tree_files() {
  (cd "$1" && find . -type f | sed 's|^\./||' | sort) | while read -r f; do
    is_own "$f" || echo "$f"
  done
}

if [ "$mode" = apply ]; then
  while read -r name _; do
    [ -f "$patches/$name" ] || die "patches/series names $name, which does not exist"
    if ! out=$(cd "$base" && patch -p1 --batch --forward --fuzz=0 --dry-run <"$patches/$name" 2>&1); then
      echo "$out" >&2
      die "patches/$name does not apply to fuser $version; vendor/fuser is unchanged. Fix that patch (see PATCHED.md) and run again."
    fi
    (cd "$base" && patch -p1 --batch --forward --fuzz=0 --quiet --no-backup-if-mismatch <"$patches/$name") ||
      die "patches/$name failed to apply"
  done < <(series)
  # Replace vendor/fuser's own files with the result.
  tree_files "$here" | while read -r f; do rm -f "$here/$f"; done
  find "$here" -mindepth 1 -type d -empty -delete
  (cd "$base" && tar -cf - .) | (cd "$here" && tar -xf -)
  echo "vendor/fuser is fuser $version with $(series | wc -l) patches applied"
  exit 0
fi

# Refresh.
declare -A claimed=()
while read -r name files; do
  [ -n "$files" ] || die "patches/series: $name names no files"
  out="$work/$name"
  if [ -f "$patches/$name" ]; then
    sed -n '/^--- /q;p' "$patches/$name" >"$out"
  else
    printf '%s\n\n' "${name%.patch}" >"$out"
  fi
  for f in $files; do
    claimed[$f]=1
    old="$base/$f" new="$here/$f" from="a/$f" to="b/$f"
    [ -e "$old" ] || { old=/dev/null from=/dev/null; }
    [ -e "$new" ] || { new=/dev/null to=/dev/null; }
    rc=0
    diff -u --label "$from" --label "$to" "$old" "$new" >>"$out" || rc=$?
    [ "$rc" -le 1 ] || die "diff of $f failed"
  done
  grep -q '^--- ' "$out" || die "$name: none of its files differ from fuser $version"
  mv "$out" "$patches/$name"
done < <(series)
# Every difference must belong to a patch.
for f in $( (tree_files "$base" && tree_files "$here") | sort -u); do
  [ -n "${claimed[$f]:-}" ] && continue
  if ! cmp -s "$base/$f" "$here/$f" 2>/dev/null; then
    die "$f differs from fuser $version but no line of patches/series names it"
  fi
done
echo "patches/ refreshed against fuser $version"

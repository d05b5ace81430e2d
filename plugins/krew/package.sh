#!/usr/bin/env bash
# Packs a built driftgate binary (linux/amd64) as the krew tarball: one file, kubectl-driftgate,
# with fixed owner and time so the same binary always gives the same sha256.
# Usage: plugins/krew/package.sh BINARY OUT_DIR   (prints the tarball's path)
set -euo pipefail
if [[ $# -ne 2 ]]; then
  echo "usage: $0 BINARY OUT_DIR (e.g. target/x86_64-unknown-linux-musl/release/driftgate dist)" >&2
  exit 2
fi
binary=$1 out=$2
if [[ ! -x $binary ]]; then
  echo "$0: $binary is not an executable file; build it first (cargo build --release)" >&2
  exit 2
fi
root=$(cd "$(dirname "$0")/../.." && pwd)
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/Cargo.toml" | head -n1)
mkdir -p "$out"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
install -m 0755 "$binary" "$stage/kubectl-driftgate"
tarball="$out/kubectl-driftgate_v${version}_linux_amd64.tar.gz"
tar --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$stage" -cf - kubectl-driftgate \
  | gzip -n >"$tarball"
echo "$tarball"

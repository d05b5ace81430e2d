#!/usr/bin/env bash
# Builds Kyverno's admission controller -- a peer of driftgate in
# `cargo bench --bench apiserver_latency -- --peers kyverno` -- from the Go module pinned in this
# directory's go.mod, once, into
#   ${DRIFTGATE_TESTENV_DIR:-$HOME/.cache/driftgate/testenv}/kyverno-<version>/
# with Kyverno's CRDs (config/crds of the same module) beside it in crds/, and build.txt saying how
# long the build took. A binary and CRDs already there are kept. Only the benchmark runs this, on
# demand: neither `cargo test` nor .ci/run needs Kyverno.
# Prints the directory on its last line of stdout; progress goes to stderr. Exits 3 when Go is
# missing or too old. Cold on 2 cores (module downloads included): see build.txt; the issue's
# author measured 253 s, a 263 MB binary and 2.9 GB of peak memory.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"

version="$(awk '$1 == "require" && $2 == "github.com/kyverno/kyverno" { print $3; exit }' go.mod)"
if [[ -z "$version" ]]; then
  echo "driftgate bench: cannot read the pinned Kyverno version from $here/go.mod" >&2
  exit 1
fi
out="${DRIFTGATE_TESTENV_DIR:-$HOME/.cache/driftgate/testenv}/kyverno-$version"
complete() {
  [[ -x "$out/kyverno" ]] || return 1
  [[ -s "$out/crds/kyverno.io_clusterpolicies.yaml" ]] || return 1
}
if complete; then
  echo "driftgate bench: Kyverno $version cached in $out" >&2
  echo "$out"
  exit 0
fi

if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
  export PATH="/usr/local/go/bin:$PATH"
fi
gov="$(go env GOVERSION 2>/dev/null || true)"
if [[ ! "$gov" =~ ^go1\.([0-9]+) ]] || (( BASH_REMATCH[1] < 26 )); then
  echo "driftgate bench: Kyverno $version needs Go >= 1.26 (found: ${gov:-none}); install it from go.dev" >&2
  exit 3
fi
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod"
export GOTOOLCHAIN=local
export CGO_ENABLED=0
mkdir -p "$out/crds"

start=$SECONDS
kyverno_dir="$(go mod download -json "github.com/kyverno/kyverno@$version" | awk -F'"' '$2 == "Dir" { print $4 }')"
# Kyverno's own replace of pod-security-admission must be the one repeated in go.mod above.
theirs="$(awk '$1 == "replace" && $2 == "k8s.io/pod-security-admission"' "$kyverno_dir/go.mod")"
ours="$(awk '$1 == "replace" && $2 == "k8s.io/pod-security-admission"' go.mod)"
if [[ "$theirs" != "$ours" ]]; then
  echo "driftgate bench: Kyverno $version replaces pod-security-admission with" >&2
  echo "  $theirs" >&2
  echo "but $here/go.mod has" >&2
  echo "  $ours" >&2
  exit 1
fi
for crd in "$kyverno_dir"/config/crds/*/*.yaml; do
  name="$(basename "$crd")"
  cp "$crd" "$out/crds/$name.tmp"
  chmod 0644 "$out/crds/$name.tmp"
  mv "$out/crds/$name.tmp" "$out/crds/$name"
done

if [[ ! -x "$out/kyverno" ]]; then
  echo "driftgate bench: building Kyverno $version with $(go version) into $out ..." >&2
  build_start=$SECONDS
  # Peak memory of the build (the Go linker takes several GB here), from GNU time when present.
  timing=()
  if [[ -x /usr/bin/time ]]; then timing=(/usr/bin/time -f "%M" -o "$out/build-maxrss.tmp"); fi
  "${timing[@]}" go build -trimpath -ldflags "-s -w -X github.com/kyverno/kyverno/pkg/version.BuildVersion=$version" \
    -o "$out/kyverno.tmp" github.com/kyverno/kyverno/cmd/kyverno
  mv "$out/kyverno.tmp" "$out/kyverno"
  {
    echo "Kyverno $version (cmd/kyverno) built $(date -u +%Y-%m-%dT%H:%MZ) with $(go version)"
    echo "seconds: $((SECONDS - start)) with module downloads, $((SECONDS - build_start)) for go build"
    echo "binary bytes: $(stat -c %s "$out/kyverno")"
    if [[ -s "$out/build-maxrss.tmp" ]]; then echo "peak RSS KiB of go build: $(tail -1 "$out/build-maxrss.tmp")"; fi
    echo "nice: $(nice), load: $(cut -d' ' -f1-3 /proc/loadavg)"
  } >"$out/build.txt"
  rm -f "$out/build-maxrss.tmp"
  echo "driftgate bench: built Kyverno in $((SECONDS - build_start))s" >&2
fi
echo "$out"

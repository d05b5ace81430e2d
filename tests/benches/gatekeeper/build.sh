#!/usr/bin/env bash
# Builds OPA Gatekeeper's manager -- a peer of driftgate in
# `cargo bench --bench apiserver_latency -- --peers gatekeeper` -- from the Go module pinned in
# this directory's go.mod, once, into
#   ${DRIFTGATE_TESTENV_DIR:-$HOME/.cache/driftgate/testenv}/gatekeeper-<version>/
# with Gatekeeper's CRDs (the CustomResourceDefinitions of the module's deploy/gatekeeper.yaml,
# its release manifest) beside it in crds.yaml, and build.txt saying how long the build took. A
# binary and CRDs already there are kept. Only the benchmark runs this, on demand.
# Prints the directory on its last line of stdout; progress goes to stderr. Exits 3 when Go is
# missing or too old. The issue's author measured ~170 s cold on 2 cores.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"

version="$(awk '$1 == "require" && $2 == "github.com/open-policy-agent/gatekeeper/v3" { print $3; exit }' go.mod)"
if [[ -z "$version" ]]; then
  echo "driftgate bench: cannot read the pinned Gatekeeper version from $here/go.mod" >&2
  exit 1
fi
out="${DRIFTGATE_TESTENV_DIR:-$HOME/.cache/driftgate/testenv}/gatekeeper-$version"
complete() {
  [[ -x "$out/gatekeeper" ]] || return 1
  [[ -s "$out/crds.yaml" ]] || return 1
}
if complete; then
  echo "driftgate bench: Gatekeeper $version cached in $out" >&2
  echo "$out"
  exit 0
fi

if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
  export PATH="/usr/local/go/bin:$PATH"
fi
gov="$(go env GOVERSION 2>/dev/null || true)"
if [[ ! "$gov" =~ ^go1\.([0-9]+) ]] || (( BASH_REMATCH[1] < 26 )); then
  echo "driftgate bench: Gatekeeper $version needs Go >= 1.26 (found: ${gov:-none}); install it from go.dev" >&2
  exit 3
fi
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod"
export GOTOOLCHAIN=local
export CGO_ENABLED=0
mkdir -p "$out"

start=$SECONDS
gatekeeper_dir="$(go mod download -json "github.com/open-policy-agent/gatekeeper/v3@$version" | awk -F'"' '$2 == "Dir" { print $4 }')"
# The CRDs alone: the manifest's Deployments, Service and webhook configurations point at an
# in-cluster Gatekeeper, which the benchmark replaces with this binary on loopback.
awk '
  /^---/ { if (crd) printf "---\n%s", doc; doc = ""; crd = 0; next }
  { doc = doc $0 "\n"; if ($0 == "kind: CustomResourceDefinition") crd = 1 }
  END { if (crd) printf "---\n%s", doc }
' "$gatekeeper_dir/deploy/gatekeeper.yaml" >"$out/crds.yaml.tmp"
mv "$out/crds.yaml.tmp" "$out/crds.yaml"

if [[ ! -x "$out/gatekeeper" ]]; then
  echo "driftgate bench: building Gatekeeper $version with $(go version) into $out ..." >&2
  build_start=$SECONDS
  timing=()
  if [[ -x /usr/bin/time ]]; then timing=(/usr/bin/time -f "%M" -o "$out/build-maxrss.tmp"); fi
  "${timing[@]}" go build -trimpath -ldflags "-s -w" -o "$out/gatekeeper.tmp" github.com/open-policy-agent/gatekeeper/v3
  mv "$out/gatekeeper.tmp" "$out/gatekeeper"
  {
    echo "Gatekeeper $version (module root, the manager) built $(date -u +%Y-%m-%dT%H:%MZ) with $(go version)"
    echo "seconds: $((SECONDS - start)) with module downloads, $((SECONDS - build_start)) for go build"
    echo "binary bytes: $(stat -c %s "$out/gatekeeper")"
    if [[ -s "$out/build-maxrss.tmp" ]]; then echo "peak RSS KiB of go build: $(tail -1 "$out/build-maxrss.tmp")"; fi
    echo "nice: $(nice), load: $(cut -d' ' -f1-3 /proc/loadavg)"
  } >"$out/build.txt"
  rm -f "$out/build-maxrss.tmp"
  echo "driftgate bench: built Gatekeeper in $((SECONDS - build_start))s" >&2
fi
echo "$out"

#!/usr/bin/env bash
# Builds Flux's kustomize-controller -- the real GitOps controller the e2e tests run -- from the
# Go module pinned in this directory's go.mod, once, into
#   ${DRIFTGATE_TESTENV_DIR:-$HOME/.cache/driftgate/testenv}/kustomize-controller-<version>/
# with the CRDs it needs beside it in crds/: its Kustomization, and the sources it watches
# (GitRepository, OCIRepository, Bucket, ExternalArtifact) from source-controller at the version
# of the source API it is built against. A binary and CRDs already there are kept.
# Prints the directory on its last line of stdout; progress goes to stderr. Exits 3 when Go is
# missing or too old. Cold: 319 s on 2 cores with empty Go caches (module downloads included); 86 MB.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"

version="$(awk '$1 == "require" && $2 == "github.com/fluxcd/kustomize-controller" { print $3; exit }' go.mod)"
source_version="$(awk '$1 == "github.com/fluxcd/source-controller/api" { print $2; exit }' go.mod)"
if [[ -z "$version" || -z "$source_version" ]]; then
  echo "driftgate e2e: cannot read the pinned Flux versions from $here/go.mod" >&2
  exit 1
fi
out="${DRIFTGATE_TESTENV_DIR:-$HOME/.cache/driftgate/testenv}/kustomize-controller-$version"
crds=(
  "kustomize.toolkit.fluxcd.io_kustomizations.yaml"
  "source.toolkit.fluxcd.io_gitrepositories.yaml"
  "source.toolkit.fluxcd.io_ocirepositories.yaml"
  "source.toolkit.fluxcd.io_buckets.yaml"
  "source.toolkit.fluxcd.io_externalartifacts.yaml"
)
complete() {
  [[ -x "$out/kustomize-controller" ]] || return 1
  for crd in "${crds[@]}"; do [[ -s "$out/crds/$crd" ]] || return 1; done
}
if complete; then
  echo "driftgate e2e: kustomize-controller $version cached in $out" >&2
  echo "$out"
  exit 0
fi

if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
  export PATH="/usr/local/go/bin:$PATH"
fi
gov="$(go env GOVERSION 2>/dev/null || true)"
if [[ ! "$gov" =~ ^go1\.([0-9]+) ]] || (( BASH_REMATCH[1] < 26 )); then
  echo "driftgate e2e: kustomize-controller $version needs Go >= 1.26 (found: ${gov:-none}); install it from go.dev" >&2
  exit 3
fi
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod"
export GOTOOLCHAIN=local
export CGO_ENABLED=0
mkdir -p "$out/crds"

# The CRDs come from the modules' own config/crd/bases, at the pinned versions.
module_dir() {
  go mod download -json "$1@$2" | awk -F'"' '$2 == "Dir" { print $4 }'
}
kustomize_dir="$(module_dir github.com/fluxcd/kustomize-controller "$version")"
source_dir="$(module_dir github.com/fluxcd/source-controller "$source_version")"
for crd in "${crds[@]}"; do
  case "$crd" in
    kustomize.*) from="$kustomize_dir" ;;
    *) from="$source_dir" ;;
  esac
  cp "$from/config/crd/bases/$crd" "$out/crds/$crd.tmp"
  chmod 0644 "$out/crds/$crd.tmp"
  mv "$out/crds/$crd.tmp" "$out/crds/$crd"
done

if [[ ! -x "$out/kustomize-controller" ]]; then
  echo "driftgate e2e: building kustomize-controller $version with $(go version) into $out ..." >&2
  start=$SECONDS
  go build -trimpath -ldflags "-s -w" -o "$out/kustomize-controller.tmp" github.com/fluxcd/kustomize-controller
  mv "$out/kustomize-controller.tmp" "$out/kustomize-controller"
  echo "driftgate e2e: built kustomize-controller in $((SECONDS - start))s" >&2
fi
echo "$out"

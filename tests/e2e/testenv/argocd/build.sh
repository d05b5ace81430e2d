#!/usr/bin/env bash
# Builds Argo CD -- the second real GitOps controller the e2e tests run -- from the Go module
# pinned in this directory's go.mod, once, into
#   ${DRIFTGATE_TESTENV_DIR:-$HOME/.cache/driftgate/testenv}/argocd-<version>/
# with Argo CD's CRDs (Application, AppProject, ApplicationSet) from the module's manifests/crds
# beside it in crds/. Argo CD is one multi-call binary that picks its component by the name it
# is run as, as Argo CD's image does with symlinks: argocd-application-controller and
# argocd-repo-server are links to it. What is already there is kept.
# Prints the directory on its last line of stdout; progress goes to stderr. Exits 3 when Go is
# missing or too old. Cold, with empty Go caches (module downloads included), on 2 cores shared
# with other builds: 735 s (1011 s at nice 10); 149 MB, and 1.7 GB of modules and 2.2 GB of Go
# build cache on the way.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"

version="$(awk '$1 == "require" && $2 == "github.com/argoproj/argo-cd/v3" { print $3; exit }' go.mod)"
if [[ -z "$version" ]]; then
  echo "driftgate e2e: cannot read the pinned Argo CD version from $here/go.mod" >&2
  exit 1
fi
out="${DRIFTGATE_TESTENV_DIR:-$HOME/.cache/driftgate/testenv}/argocd-$version"
crds=(application-crd.yaml appproject-crd.yaml applicationset-crd.yaml)
components=(argocd-application-controller argocd-repo-server)
complete() {
  [[ -x "$out/argocd" ]] || return 1
  for component in "${components[@]}"; do [[ -L "$out/$component" ]] || return 1; done
  for crd in "${crds[@]}"; do [[ -s "$out/crds/$crd" ]] || return 1; done
}
if complete; then
  echo "driftgate e2e: Argo CD $version cached in $out" >&2
  echo "$out"
  exit 0
fi

if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
  export PATH="/usr/local/go/bin:$PATH"
fi
gov="$(go env GOVERSION 2>/dev/null || true)"
if [[ ! "$gov" =~ ^go1\.([0-9]+) ]] || (( BASH_REMATCH[1] < 26 )); then
  echo "driftgate e2e: Argo CD $version needs Go >= 1.26 here (found: ${gov:-none}); install it from go.dev" >&2
  exit 3
fi
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod"
export GOTOOLCHAIN=local
export CGO_ENABLED=0
mkdir -p "$out/crds"

argocd_dir="$(go mod download -json "github.com/argoproj/argo-cd/v3@$version" | awk -F'"' '$2 == "Dir" { print $4 }')"
for crd in "${crds[@]}"; do
  cp "$argocd_dir/manifests/crds/$crd" "$out/crds/$crd.tmp"
  chmod 0644 "$out/crds/$crd.tmp"
  mv "$out/crds/$crd.tmp" "$out/crds/$crd"
done

if [[ ! -x "$out/argocd" ]]; then
  echo "driftgate e2e: building Argo CD $version with $(go version) into $out ..." >&2
  start=$SECONDS
  go build -trimpath -ldflags "-s -w" -o "$out/argocd.tmp" github.com/argoproj/argo-cd/v3/cmd
  mv "$out/argocd.tmp" "$out/argocd"
  echo "driftgate e2e: built Argo CD in $((SECONDS - start))s" >&2
fi
for component in "${components[@]}"; do
  ln -sfn argocd "$out/$component"
done
echo "$out"

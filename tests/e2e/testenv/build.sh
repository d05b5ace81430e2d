#!/usr/bin/env bash
# Builds the control plane the e2e tests run -- kube-apiserver, kube-controller-manager, etcd and
# kubectl -- from the Go modules pinned in this directory's go.mod, once, into
#   ${DRIFTGATE_TESTENV_DIR:-$HOME/.cache/driftgate/testenv}/<kubernetes version>/
# A binary that is already there and answers --version is kept; Go is needed only to build.
# Prints the directory on its last line of stdout; progress goes to stderr. Exits 3 when Go is
# missing or too old.
#
# A cold build takes a long while on a small machine (kube-apiserver is the big one); the Go build
# cache (`go env GOCACHE`, outside the repository) makes later builds of a new version cheaper.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"

k8s_version="$(awk '$1 == "k8s.io/kubernetes" { print $2; exit }' go.mod)"
etcd_version="$(awk '$1 == "go.etcd.io/etcd/server/v3" { print $2; exit }' go.mod)"
if [[ -z "$k8s_version" || -z "$etcd_version" ]]; then
  echo "driftgate e2e: cannot read the pinned versions from $here/go.mod" >&2
  exit 1
fi
out="${DRIFTGATE_TESTENV_DIR:-$HOME/.cache/driftgate/testenv}/$k8s_version"

# name, main package, arguments that print its version
binaries=(
  "etcd|go.etcd.io/etcd/server/v3|--version"
  "kubectl|k8s.io/kubernetes/cmd/kubectl|version --client"
  "kube-apiserver|k8s.io/kubernetes/cmd/kube-apiserver|--version"
  "kube-controller-manager|k8s.io/kubernetes/cmd/kube-controller-manager|--version"
)

cached() {
  local name="$1" version_args="$2"
  # shellcheck disable=SC2086 # the version arguments are words
  [[ -x "$out/$name" ]] && "$out/$name" $version_args >/dev/null 2>&1
}

missing=0
for entry in "${binaries[@]}"; do
  IFS='|' read -r name _ version_args <<<"$entry"
  cached "$name" "$version_args" || missing=1
done
if (( missing == 0 )); then
  echo "driftgate e2e: Kubernetes $k8s_version and etcd $etcd_version cached in $out" >&2
  echo "$out"
  exit 0
fi

# go.dev's tarball installs into /usr/local/go, which a non-login shell may not have on PATH.
if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
  export PATH="/usr/local/go/bin:$PATH"
fi
if ! command -v go >/dev/null 2>&1; then
  echo "driftgate e2e: Go is missing: install Go >= 1.25 (from go.dev, or apt-get install golang where it is that new: Debian 12 has 1.19)" >&2
  exit 3
fi
# go.mod says `go 1.25.0`; an older go would try to fetch a newer toolchain, which is not what a
# developer expects from a test run.
gov="$(go env GOVERSION)"
if [[ "$gov" =~ ^go1\.([0-9]+) ]] && (( BASH_REMATCH[1] < 25 )); then
  echo "driftgate e2e: $gov is too old for Kubernetes ${k8s_version%.*}: install Go >= 1.25 (from go.dev, or apt-get install golang where it is that new: Debian 12 has 1.19)" >&2
  exit 3
fi

# The module's go.sum is committed: -mod=mod lets `go build` record a missing hash (it never
# changes a pinned version), and GOTOOLCHAIN=local keeps it from downloading another Go.
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod"
export GOTOOLCHAIN=local
export CGO_ENABLED=0
mkdir -p "$out"

echo "driftgate e2e: building Kubernetes $k8s_version and etcd $etcd_version with $(go version) into $out; a cold build takes many minutes" >&2
for entry in "${binaries[@]}"; do
  IFS='|' read -r name pkg version_args <<<"$entry"
  if cached "$name" "$version_args"; then
    echo "driftgate e2e: $name: cached" >&2
    continue
  fi
  echo "driftgate e2e: building $name ($pkg) ..." >&2
  start=$SECONDS
  # Kubernetes' own builds stamp the version through -ldflags; without it kube-apiserver reports
  # v0.0.0-master, which kubectl's version-skew warning and /version would show.
  ldflags="-s -w"
  if [[ "$pkg" == k8s.io/kubernetes/* ]]; then
    p=k8s.io/component-base/version
    minor="$(cut -d. -f2 <<<"$k8s_version")"
    ldflags+=" -X $p.gitVersion=$k8s_version -X $p.gitMajor=1 -X $p.gitMinor=$minor"
  fi
  go build -trimpath -ldflags "$ldflags" -o "$out/$name.tmp" "$pkg"
  mv "$out/$name.tmp" "$out/$name"
  echo "driftgate e2e: built $name in $((SECONDS - start))s" >&2
done
echo "$out"

#!/usr/bin/env bash
# Install a pinned helm from source with `go install` (no binary download from a URL) into a cache
# outside the repository, and print its path on stdout. Idempotent: when the cached binary already
# reports the pinned version, nothing is built. Everything but the path goes to stderr.
#
#   HELM=/path/to/helm         use this helm instead (printed as is, nothing installed)
#   DRIFTGATE_TOOLS_DIR=DIR    cache directory (default ~/.cache/driftgate/tools)
set -euo pipefail

# The pin. helm's release Makefile stamps the version and the Kubernetes version that `helm
# template`/`helm lint` assume (.Capabilities.KubeVersion, deprecation checks) with -ldflags; a
# plain `go install` would leave them at "v3.22" and 1.20, so the same stamps are set here. The
# Kubernetes version follows helm's k8s.io/client-go (v0.37.x -> 1.37).
HELM_VERSION="v3.22.0"
K8S_MAJOR="1"
K8S_MINOR="37"

if [[ -n "${HELM:-}" ]]; then
  if [[ ! -x "$HELM" ]]; then
    echo "HELM=$HELM is not an executable file" >&2
    exit 1
  fi
  echo "$HELM"
  exit 0
fi

tools="${DRIFTGATE_TOOLS_DIR:-$HOME/.cache/driftgate/tools}"
bin="$tools/bin"
helm="$bin/helm"

installed_version() {
  [[ -x "$helm" ]] && "$helm" version --template '{{.Version}}' 2>/dev/null || true
}

if [[ "$(installed_version)" == "$HELM_VERSION" ]]; then
  echo "$helm"
  exit 0
fi

need_go() {
  cat >&2 <<MSG
install-helm.sh: $1, and helm $HELM_VERSION is built from source with Go.
Install Go 1.21 or newer (https://go.dev/doc/install; it fetches the go 1.26 toolchain that helm
needs through the module proxy by itself; Debian 12's golang-go, 1.19, is too old), or point HELM
at a helm 3 binary: HELM=/usr/local/bin/helm
MSG
  exit 1
}
if ! command -v go >/dev/null 2>&1; then
  need_go "Go is not installed"
fi
go_version="$(go env GOVERSION 2>/dev/null || true)"
if [[ ! "$go_version" =~ ^go1\.([0-9]+) ]] || (( BASH_REMATCH[1] < 21 )); then
  need_go "go is '${go_version:-unknown}', older than 1.21"
fi

mkdir -p "$bin"
# Two concurrent runs (parallel test binaries) must not build into the same place at once.
exec 9>"$tools/.install-helm.lock"
if command -v flock >/dev/null 2>&1; then
  flock 9
fi
if [[ "$(installed_version)" == "$HELM_VERSION" ]]; then
  echo "$helm"
  exit 0
fi

echo "install-helm.sh: building helm $HELM_VERSION with $(go version) (a few minutes the first time)" >&2
staging="$(mktemp -d "$tools/.helm-build.XXXXXX")"
trap 'rm -rf "$staging"' EXIT
ldflags="-w -s"
ldflags+=" -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
ldflags+=" -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=$K8S_MAJOR"
ldflags+=" -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$K8S_MINOR"
ldflags+=" -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=$K8S_MAJOR"
ldflags+=" -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$K8S_MINOR"
# Run outside any Go module so that the repository's surroundings cannot change the build.
(
  cd "$staging"
  GOBIN="$staging" GOFLAGS=-buildvcs=false CGO_ENABLED=0 \
    go install -trimpath -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
) >&2
mv -f "$staging/helm" "$helm"

got="$(installed_version)"
if [[ "$got" != "$HELM_VERSION" ]]; then
  echo "install-helm.sh: built $helm but it reports '$got', not $HELM_VERSION" >&2
  exit 1
fi
echo "$helm"

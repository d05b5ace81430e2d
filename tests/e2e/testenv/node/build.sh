#!/usr/bin/env bash
# Builds what a real Kubernetes node of the e2e tests runs, once, into
#   ${DRIFTGATE_TESTENV_DIR:-$HOME/.cache/driftgate/testenv}/node-<versions>/
#     bin/   kubelet, kube-proxy and kube-scheduler (from ../go.mod: the control plane's own
#            k8s.io/kubernetes), containerd, containerd-shim-runc-v2 and ctr (containerd/go.mod),
#            runc (runc/go.mod)
#     cni/   the CNI plugins bridge, host-local, loopback and portmap (cni/go.mod)
#     images/pause.tar   Kubernetes' pause image (build/pause/linux/pause.c of the same
#            k8s.io/kubernetes module, compiled static), an OCI archive for `ctr images import`
#     images/kubectl.tar   what the chart's `helm test` Pod runs (`sh` and `kubectl`): Debian's
#            busybox-static (pinned by version and sha256 below) and the control plane's kubectl
# Each upstream has a go.mod of its own, so that each is built with the dependency versions its
# own go.mod selects (one module for all three pulled containerd 2.3 and k8s.io 0.36 in through
# the CNI plugins' requirements). A binary already there that reports the pinned version is kept.
# Prints the directory on its last line of stdout; progress goes to stderr. Exits 3 when Go is
# missing or too old, 4 when a C toolchain or libseccomp's headers are missing (runc needs cgo:
# its nsenter is C, and seccomp is what the chart's RuntimeDefault profile asks of it).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
testenv="$(dirname "$here")"

pinned() { # go.mod module -> version
  awk -v m="$2" '($1 == m) || ($1 == "require" && $2 == m) { print ($1 == m ? $2 : $3); exit }' "$1"
}
k8s_version="$(pinned "$testenv/go.mod" k8s.io/kubernetes)"
containerd_version="$(pinned "$here/containerd/go.mod" github.com/containerd/containerd/v2)"
runc_version="$(pinned "$here/runc/go.mod" github.com/opencontainers/runc)"
cni_version="$(pinned "$here/cni/go.mod" github.com/containernetworking/plugins)"
for v in k8s_version containerd_version runc_version cni_version; do
  if [[ -z "${!v}" ]]; then
    echo "driftgate e2e: cannot read $v from the go.mod files under $testenv" >&2
    exit 1
  fi
done
# The pause image's tag, as Kubernetes' build/pause/Makefile sets it for this release.
pause_tag=3.10.1
# The helm test image's shell: Debian bookworm's busybox-static.
busybox_deb="busybox-static=1:1.35.0-4+deb12u1+b1"
busybox_sha256=3d3fdbe91d4660c873e14b092c213fe81c1da6362daa236eb25d0171eb108744
out="${DRIFTGATE_TESTENV_DIR:-$HOME/.cache/driftgate/testenv}/node-$k8s_version-containerd-$containerd_version-runc-$runc_version-cni-$cni_version"

# name | module directory | main package | where | cgo | build tags | -ldflags -X | version args | expected in the version output
k8s=k8s.io/component-base/version
k8s_x="-X $k8s.gitVersion=$k8s_version -X $k8s.gitMajor=1 -X $k8s.gitMinor=$(cut -d. -f2 <<<"$k8s_version")"
ctrd=github.com/containerd/containerd/v2/version
ctrd_x="-X $ctrd.Version=$containerd_version -X $ctrd.Package=github.com/containerd/containerd/v2"
cni_x="-X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$cni_version"
binaries=(
  # btrfs, devmapper and zfs snapshotters are not used (overlayfs is); btrfs would need cgo.
  "containerd|$here/containerd|github.com/containerd/containerd/v2/cmd/containerd|bin|0|no_btrfs no_devmapper no_zfs|$ctrd_x|--version|$containerd_version"
  "containerd-shim-runc-v2|$here/containerd|github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2|bin|0||$ctrd_x|-v|$containerd_version"
  "ctr|$here/containerd|github.com/containerd/containerd/v2/cmd/ctr|bin|0||$ctrd_x|--version|$containerd_version"
  # runc's Makefile's tags: seccomp (linked against the machine's libseccomp).
  "runc|$here/runc|github.com/opencontainers/runc|bin|1|seccomp urfave_cli_no_docs||--version|runc version ${runc_version#v}"
  "bridge|$here/cni|github.com/containernetworking/plugins/plugins/main/bridge|cni|0||$cni_x||plugin $cni_version"
  "host-local|$here/cni|github.com/containernetworking/plugins/plugins/ipam/host-local|cni|0||$cni_x||plugin $cni_version"
  "loopback|$here/cni|github.com/containernetworking/plugins/plugins/main/loopback|cni|0||$cni_x||plugin $cni_version"
  "portmap|$here/cni|github.com/containernetworking/plugins/plugins/meta/portmap|cni|0||$cni_x||plugin $cni_version"
  "kubelet|$testenv|k8s.io/kubernetes/cmd/kubelet|bin|0||$k8s_x|--version|Kubernetes $k8s_version"
  "kube-proxy|$testenv|k8s.io/kubernetes/cmd/kube-proxy|bin|0||$k8s_x|--version|Kubernetes $k8s_version"
  "kube-scheduler|$testenv|k8s.io/kubernetes/cmd/kube-scheduler|bin|0||$k8s_x|--version|Kubernetes $k8s_version"
)

cached() {
  local path="$1" version_args="$2" expected="$3"
  [[ -x "$path" ]] || return 1
  # A CNI plugin run with no CNI_COMMAND prints "CNI <name> plugin <version>" and exits 1.
  local said
  # shellcheck disable=SC2086 # the version arguments are words
  said="$("$path" $version_args 2>&1 </dev/null || true)"
  [[ "$said" == *"$expected"* ]]
}
pause_cached() { [[ -s "$out/images/pause.tar" ]]; }
kubectl_image_cached() { [[ -s "$out/images/kubectl.tar" ]]; }

missing=0
for entry in "${binaries[@]}"; do
  IFS='|' read -r name _ _ where _ _ _ version_args expected <<<"$entry"
  cached "$out/$where/$name" "$version_args" "$expected" || missing=1
done
pause_cached || missing=1
kubectl_image_cached || missing=1
if (( missing == 0 )); then
  echo "driftgate e2e: node (Kubernetes $k8s_version, containerd $containerd_version, runc $runc_version, CNI plugins $cni_version) cached in $out" >&2
  echo "$out"
  exit 0
fi

if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
  export PATH="/usr/local/go/bin:$PATH"
fi
gov="$(go env GOVERSION 2>/dev/null || true)"
# The CNI plugins' go.mod says go 1.26.
if [[ ! "$gov" =~ ^go1\.([0-9]+) ]] || (( BASH_REMATCH[1] < 26 )); then
  echo "driftgate e2e: the node's binaries need Go >= 1.26 (found: ${gov:-none}); install it from go.dev" >&2
  exit 3
fi
if ! command -v cc >/dev/null 2>&1 || ! printf '#include <seccomp.h>\nint main(void){return 0;}\n' | cc -x c -o /dev/null - -lseccomp 2>/dev/null; then
  echo "driftgate e2e: runc and the pause image need a C compiler and libseccomp's headers: apt-get install gcc libc6-dev libseccomp-dev" >&2
  exit 4
fi
# The go.sum files are committed: -mod=mod lets `go build` record a missing hash (it never changes
# a pinned version), and GOTOOLCHAIN=local keeps it from downloading another Go.
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod"
export GOTOOLCHAIN=local
mkdir -p "$out/bin" "$out/cni" "$out/images"

echo "driftgate e2e: building the node (Kubernetes $k8s_version, containerd $containerd_version, runc $runc_version, CNI plugins $cni_version) with $(go version) into $out" >&2
for entry in "${binaries[@]}"; do
  IFS='|' read -r name module pkg where cgo tags xflags version_args expected <<<"$entry"
  target="$out/$where/$name"
  if cached "$target" "$version_args" "$expected"; then
    echo "driftgate e2e: $name: cached" >&2
    continue
  fi
  echo "driftgate e2e: building $name ($pkg) ..." >&2
  start=$SECONDS
  (cd "$module" && CGO_ENABLED="$cgo" go build -trimpath -tags "$tags" -ldflags "-s -w $xflags" -o "$target.tmp" "$pkg")
  mv "$target.tmp" "$target"
  cached "$target" "$version_args" "$expected" || {
    echo "driftgate e2e: $target does not report $expected" >&2
    exit 1
  }
  echo "driftgate e2e: built $name in $((SECONDS - start))s" >&2
done

if ! pause_cached; then
  echo "driftgate e2e: building the pause image $pause_tag ..." >&2
  start=$SECONDS
  k8s_dir="$(cd "$testenv" && go mod download -json "k8s.io/kubernetes@$k8s_version" | awk -F'"' '$2 == "Dir" { print $4 }')"
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  mkdir -p "$work/rootfs"
  # The flags of build/pause/Makefile; static, as the image has nothing else.
  cc -Os -Wall -Werror -static -DVERSION="v$pause_tag-$k8s_version" -o "$work/rootfs/pause" "$k8s_dir/build/pause/linux/pause.c"
  chmod 0755 "$work/rootfs/pause"
  # build/pause/Dockerfile: FROM scratch, /pause, USER 65535:65535, ENTRYPOINT ["/pause"].
  bash "$here/oci-image.sh" "$work/rootfs" "registry.k8s.io/pause:$pause_tag" \
    '{"User": "65535:65535", "Entrypoint": ["/pause"]}' "$out/images/pause.tar.tmp"
  mv "$out/images/pause.tar.tmp" "$out/images/pause.tar"
  echo "driftgate e2e: built the pause image in $((SECONDS - start))s" >&2
fi

if ! kubectl_image_cached; then
  echo "driftgate e2e: building the helm test image (busybox, kubectl $k8s_version) ..." >&2
  start=$SECONDS
  control_plane="$(bash "$testenv/build.sh")"
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  # A machine whose package lists are missing or older than the pin needs them read first.
  (cd "$work" && apt-get download "$busybox_deb" >/dev/null 2>&1) ||
    { apt-get update -qq >/dev/null 2>&1 && (cd "$work" && apt-get download "$busybox_deb" >/dev/null 2>&1); } ||
    { echo "driftgate e2e: apt-get download $busybox_deb failed (as root: apt-get update)" >&2; exit 1; }
  echo "$busybox_sha256  $(echo "$work"/busybox-static_*.deb)" | sha256sum --check --quiet - ||
    { echo "driftgate e2e: busybox-static does not have the pinned sha256 $busybox_sha256" >&2; exit 1; }
  dpkg-deb -x "$work"/busybox-static_*.deb "$work/deb"
  rootfs="$work/rootfs"
  mkdir -p "$rootfs/bin" "$rootfs/usr/local/bin" "$rootfs/tmp"
  cp "$work/deb/bin/busybox" "$rootfs/bin/busybox"
  for applet in sh cat echo env ls sleep; do ln -s busybox "$rootfs/bin/$applet"; done
  cp "$control_plane/kubectl" "$rootfs/usr/local/bin/kubectl"
  chmod 0755 "$rootfs/bin/busybox" "$rootfs/usr/local/bin/kubectl"
  chmod 1777 "$rootfs/tmp"
  bash "$here/oci-image.sh" "$rootfs" "driftgate.local/e2e-kubectl:e2e" \
    '{"User": "65532:65532"}' "$out/images/kubectl.tar.tmp"
  mv "$out/images/kubectl.tar.tmp" "$out/images/kubectl.tar"
  echo "driftgate e2e: built the helm test image in $((SECONDS - start))s" >&2
fi
echo "$out"

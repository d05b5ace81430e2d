#!/usr/bin/env bash
# Checks the OCI layout image/build.sh wrote, as a container runtime would see it, and runs the
# image's own binary from its unpacked root filesystem (no host libraries): --version,
# `serve --help`, `policy check`, and `serve` answering a review over TLS as the image's user.
#
#   bash image/verify.sh [LAYOUT]      # default image/out/oci
#
# Needs jq, sha256sum, gzip, tar, curl, python3 (free ports); umoci (Debian) to unpack the image
# as a runtime bundle (else tar); root for chroot (else `unshare -r`, which cannot switch to 65532).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
layout=${1:-$repo/image/out/oci}
fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { echo "ok: $*"; }

[[ -f $layout/index.json ]] || fail "$layout/index.json is missing: run image/build.sh first"
[[ $(jq -r .imageLayoutVersion "$layout/oci-layout") == 1.0.0 ]] || fail "oci-layout is not 1.0.0"

# Prints the path of the blob DESCRIPTOR names, after checking its size and digest.
blob() {
  local descriptor=$1 digest size path
  digest=$(jq -r .digest <<<"$descriptor")
  size=$(jq -r .size <<<"$descriptor")
  path=$layout/blobs/sha256/${digest#sha256:}
  [[ -f $path ]] || fail "blob $digest is missing"
  [[ $(stat -c %s "$path") == "$size" ]] || fail "blob $digest is not $size bytes"
  [[ sha256:$(sha256sum "$path" | cut -d' ' -f1) == "$digest" ]] || fail "blob $digest does not hash to its digest"
  echo "$path"
}

[[ $(jq '.manifests | length' "$layout/index.json") == 1 ]] || fail "the index should list one manifest"
manifest_descriptor=$(jq -c '.manifests[0]' "$layout/index.json")
tag=$(jq -r '.annotations["org.opencontainers.image.ref.name"]' <<<"$manifest_descriptor")
manifest=$(blob "$manifest_descriptor")
[[ $(jq -r .mediaType "$manifest") == application/vnd.oci.image.manifest.v1+json ]] || fail "not an OCI manifest"
config=$(blob "$(jq -c .config "$manifest")")
layers=()
while read -r descriptor; do layers+=("$(blob "$descriptor")"); done < <(jq -c '.layers[]' "$manifest")
ok "index, manifest $(jq -r .digest <<<"$manifest_descriptor"), config and ${#layers[@]} layers match their digests and sizes"

mapfile -t diff_ids < <(jq -r '.rootfs.diff_ids[]' "$config")
[[ ${#diff_ids[@]} == "${#layers[@]}" ]] || fail "the config lists ${#diff_ids[@]} diff_ids for ${#layers[@]} layers"
for i in "${!layers[@]}"; do
  [[ sha256:$(gzip -dc "${layers[$i]}" | sha256sum | cut -d' ' -f1) == "${diff_ids[$i]}" ]] \
    || fail "layer $i does not uncompress to diff_id ${diff_ids[$i]}"
done
ok "every layer uncompresses to its diff_id"

expect() { # JQ_PATH EXPECTED_JSON
  [[ $(jq -c "$1" "$config") == "$2" ]] || fail "config $1 is $(jq -c "$1" "$config"), not $2"
}
expect .config.User '"65532:65532"'
expect .config.Entrypoint '["/driftgate"]'
expect .config.Cmd '["serve"]'
expect .os '"linux"'
for label in source version revision; do
  [[ -n $(jq -r ".config.Labels[\"org.opencontainers.image.$label\"] // empty" "$config") ]] \
    || fail "label org.opencontainers.image.$label is missing"
done
ok "config: user 65532:65532, entrypoint [/driftgate], cmd [serve], labels $(jq -c '.config.Labels | with_entries(.key |= ltrimstr("org.opencontainers.image."))' "$config")"

work=$(mktemp -d)
server=
cleanup() { [[ -n $server ]] && kill "$server" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
if command -v umoci >/dev/null && [[ $(id -u) == 0 ]]; then
  # umoci checks the digests again, applies the layers and writes the runtime spec (config.json)
  # a runtime would start the container from.
  umoci unpack --image "$layout:$tag" "$work/bundle" >/dev/null
  rootfs=$work/bundle/rootfs
  spec=$work/bundle/config.json
  [[ $(jq -c '[.process.user.uid, .process.user.gid]' "$spec") == '[65532,65532]' ]] || fail "runtime spec user: $(jq -c .process.user "$spec")"
  [[ $(jq -c .process.args "$spec") == '["/driftgate","serve"]' ]] || fail "runtime spec args: $(jq -c .process.args "$spec")"
  ok "umoci unpack: the runtime would run /driftgate serve as 65532:65532"
else
  rootfs=$work/rootfs
  mkdir -p "$rootfs"
  for layer in "${layers[@]}"; do
    ! gzip -dc "$layer" | tar -t | grep -q '\.wh\.' || fail "a layer holds whiteouts, which this check does not apply"
    tar -C "$rootfs" --numeric-owner -xzf "$layer"
  done
  ok "layers unpacked with tar (umoci missing or not root)"
fi

[[ $(stat -c '%a %u' "$rootfs/driftgate") == '755 0' ]] || fail "/driftgate is $(stat -c '%a %u' "$rootfs/driftgate"), not 755 owned by root"
[[ $(stat -c '%a %u:%g' "$rootfs/home/nonroot") == '700 65532:65532' ]] || fail "/home/nonroot is $(stat -c '%a %u:%g' "$rootfs/home/nonroot")"
[[ $(stat -c %a "$rootfs/tmp") == 1777 ]] || fail "/tmp is not 1777"
grep -qx 'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' "$rootfs/etc/passwd" || fail "/etc/passwd has no nonroot 65532"
certs=$(grep -c 'BEGIN CERTIFICATE' "$rootfs/etc/ssl/certs/ca-certificates.crt")
[[ $certs -gt 100 ]] || fail "the CA bundle holds $certs certificates"
shells=$(find "$rootfs" \( -name sh -o -name bash -o -name dash -o -name busybox -o -name ash \) -printf '/%P ')
[[ -z $shells ]] || fail "the image holds a shell: $shells"
[[ -z $(find "$rootfs" -name '*.so*' -printf x) ]] || fail "the image holds shared libraries: $(find "$rootfs" -name '*.so*')"
ok "rootfs: /driftgate 755 root, /home/nonroot 700 65532, /tmp 1777, $certs CA certificates, no shell, no shared library"

if [[ $(id -u) == 0 ]]; then
  in_image() { chroot --userspec=65532:65532 "$rootfs" "$@"; }
else
  in_image() { unshare -r chroot "$rootfs" "$@"; }
fi
version=$(in_image /driftgate --version)
[[ $version == "driftgate $(jq -r '.config.Labels["org.opencontainers.image.version"]' "$config")" ]] \
  || fail "/driftgate --version says '$version', the version label differs"
in_image /driftgate serve --help | grep -q -- '--tls-cert' || fail "/driftgate serve --help does not list --tls-cert"
mkdir -p "$rootfs/tmp/policies"
cp "$repo/policies/example.yaml" "$rootfs/tmp/policies/"
in_image /driftgate policy check /tmp/policies/example.yaml >/dev/null || fail "policy check refused policies/example.yaml"
ok "from the image's rootfs as 65532: '$version', serve --help, policy check"

# serve as the image's user, in the host's network namespace, with no cluster.
in_image /driftgate certs dev --out /tmp/certs >/dev/null
# Ports are picked free, but other processes may take them first: a few attempts.
free_ports() {
  python3 -c 'import socket
s=[socket.socket() for _ in range(2)]
[x.bind(("127.0.0.1", 0)) for x in s]
print(*[x.getsockname()[1] for x in s])'
}
ready=
for _attempt in 1 2 3 4 5; do
  read -r port admin_port < <(free_ports)
  in_image /driftgate serve --policy /tmp/policies --tls-cert /tmp/certs/tls.crt --tls-key /tmp/certs/tls.key \
    --no-kube --addr "127.0.0.1:$port" --admin-addr "127.0.0.1:$admin_port" >"$work/serve.log" 2>&1 &
  server=$!
  for _ in $(seq 100); do
    curl -fs "http://127.0.0.1:$admin_port/readyz" >/dev/null && ready=1 && break 2
    kill -0 "$server" 2>/dev/null || break
    sleep 0.1
  done
  grep -q 'Address in use' "$work/serve.log" || break
done
[[ -n $ready ]] || fail "serve never became ready: $(cat "$work/serve.log")"
response=$(curl -fs --cacert "$rootfs/tmp/certs/ca.crt" -H 'Content-Type: application/json' \
  --data "@$repo/tests/fixtures/kubectl-edit.json" "https://127.0.0.1:$port/validate")
[[ $(jq .response.allowed <<<"$response") == false ]] || fail "kubectl-edit.json was not denied: $response"
ok "serve from the image answered over TLS: kubectl-edit.json denied ($(jq -r .response.status.message <<<"$response" | head -c 90)...)"

echo "image: $(du -cb "${layers[@]}" | tail -1 | cut -f1) bytes compressed, $(du -sb "$rootfs" | cut -f1) bytes unpacked; /driftgate $(stat -c %s "$rootfs/driftgate") bytes"

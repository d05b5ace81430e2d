#!/usr/bin/env bash
# Builds the driftgate image without a container engine: the static (musl) release binary on a
# base assembled from the pinned Debian packages in image/base-packages.lock (what distroless
# static-debian12 holds), written as an OCI image layout with tar, gzip, sha256sum and jq, and,
# when skopeo is installed, as a docker-archive for `docker load` / `kind load image-archive`.
# One-off release work, not part of .ci/run. image/verify.sh checks what it writes.
#
#   bash image/build.sh            # -> image/out/oci (layout, tag VERSION), image/out/driftgate-VERSION.tar
#
# Needs: cargo with the x86_64-unknown-linux-musl target, musl-gcc (Debian: musl-tools), apt-get
# (to download the pinned .debs), dpkg-deb, GNU tar, gzip, sha256sum, jq; skopeo is optional.
# Environment: OUT (default image/out), IMAGE_NAME (docker-archive name, default driftgate),
# IMAGE_SOURCE (label org.opencontainers.image.source, default https://github.com/driftgate/driftgate),
# CARGO_TARGET_DIR. The layers are reproducible: every mtime is the commit's time.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$repo/image/out}
image_name=${IMAGE_NAME:-driftgate}
source_url=${IMAGE_SOURCE:-https://github.com/driftgate/driftgate}
rust_target=x86_64-unknown-linux-musl
cargo_target_dir=${CARGO_TARGET_DIR:-$repo/target}

die() { echo "image/build.sh: $*" >&2; exit 1; }
need() { command -v "$1" >/dev/null || die "$1 is not installed; $2"; }

need musl-gcc "install Debian's musl-tools (mimalloc and ring compile C for musl with it)"
need jq "install jq"
need dpkg-deb "it unpacks the base's Debian packages"
need apt-get "it downloads the base's pinned Debian packages"
rustup target list --installed 2>/dev/null | grep -qx "$rust_target" \
  || die "the Rust target $rust_target is missing: rustup target add $rust_target"

version=$(cargo metadata --manifest-path "$repo/Cargo.toml" --no-deps --format-version 1 \
  | jq -r '.packages[] | select(.name == "driftgate") | .version')
revision=$(git -C "$repo" rev-parse HEAD)
git -C "$repo" diff --quiet HEAD || echo "image/build.sh: the work tree differs from $revision; the revision label names the commit only" >&2
epoch=${SOURCE_DATE_EPOCH:-$(git -C "$repo" log -1 --format=%ct)}
created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)

# 1. The static binary. musl's target links statically by default; the check below says so if not.
echo "== cargo build --release --target $rust_target"
CC_x86_64_unknown_linux_musl=musl-gcc \
  cargo build --manifest-path "$repo/Cargo.toml" --release --locked --target "$rust_target" --bin driftgate
binary=$cargo_target_dir/$rust_target/release/driftgate
file -b "$binary" | grep -Eq 'statically linked|static-pie linked' \
  || die "$binary is not statically linked: $(file -b "$binary")"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# 2. The base: the pinned .debs, checked against their sha256 before they are unpacked.
debs=$out/debs
mkdir -p "$debs"
base=$work/base
mkdir -p "$base"
while read -r name deb_version arch sha256; do
  [[ -z $name || $name == \#* ]] && continue
  deb=$debs/${name}_${deb_version}_${arch}.deb
  if [[ ! -f $deb ]]; then
    (cd "$work" && apt-get download "$name=$deb_version" >/dev/null 2>&1) \
      || die "apt-get download $name=$deb_version failed: run apt-get update, or fetch it from snapshot.debian.org into $debs, or bump image/base-packages.lock"
    mv "$work"/"${name}"_*.deb "$deb"
  fi
  echo "$sha256  $deb" | sha256sum --check --quiet - \
    || die "$deb does not have the sha256 pinned in image/base-packages.lock ($sha256)"
  dpkg-deb -x "$deb" "$base"
done <"$repo/image/base-packages.lock"

# What dpkg's maintainer scripts would have made, and what distroless adds: the CA bundle, the
# users (nonroot is 65532, the chart's runAsUser), a world-writable /tmp and nonroot's home.
mkdir -p "$base/etc/ssl/certs" "$base/tmp" "$base/home/nonroot" "$base/root"
find "$base/usr/share/ca-certificates" -name '*.crt' -print0 | LC_ALL=C sort -z \
  | xargs -0 cat >"$base/etc/ssl/certs/ca-certificates.crt"
printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' \
  'nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin' \
  'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' >"$base/etc/passwd"
printf '%s\n' 'root:x:0:' 'nobody:x:65534:' 'nonroot:x:65532:' >"$base/etc/group"
# Documentation other than copyright notices is not needed at run time.
rm -rf "$base/usr/share/man" "$base/usr/share/lintian" "$base/usr/share/info"
find "$base/usr/share/doc" ! -type d ! -name copyright -delete
chmod 0755 "$base/etc/ssl/certs" "$base/home" "$base/root"
chmod 0644 "$base/etc/ssl/certs/ca-certificates.crt" "$base/etc/passwd" "$base/etc/group"
chmod 1777 "$base/tmp"
chmod 0700 "$base/home/nonroot"

app=$work/app
mkdir -p "$app"
install -m 0755 "$binary" "$app/driftgate"

# 3. The layers: deterministic tars (sorted, one mtime, numeric owners, no atime/ctime).
tar_flags=(--sort=name --mtime="@$epoch" --numeric-owner --format=posix
  --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime)
layout=$out/oci
rm -rf "$layout"
mkdir -p "$layout/blobs/sha256"

# Stores FILE as a blob and prints its descriptor with MEDIA_TYPE.
blob() {
  local file=$1 media_type=$2 digest size
  digest=$(sha256sum "$file" | cut -d' ' -f1)
  size=$(stat -c %s "$file")
  mv "$file" "$layout/blobs/sha256/$digest"
  jq -cn --arg m "$media_type" --arg d "sha256:$digest" --argjson s "$size" \
    '{mediaType: $m, digest: $d, size: $s}'
}

# Writes the gzipped layer of TAR, prints "diff_id descriptor".
layer() {
  local tar=$1 diff_id
  diff_id=sha256:$(sha256sum "$tar" | cut -d' ' -f1)
  gzip -n -9 "$tar"
  echo "$diff_id $(blob "$tar.gz" application/vnd.oci.image.layer.v1.tar+gzip)"
}

# Everything root-owned but nonroot's home, appended with its own owner.
tar -C "$base" "${tar_flags[@]}" --owner=0 --group=0 --exclude=./home/nonroot -cf "$work/base.tar" .
tar -C "$base" "${tar_flags[@]}" --owner=65532 --group=65532 -rf "$work/base.tar" ./home/nonroot
tar -C "$app" "${tar_flags[@]}" --owner=0 --group=0 -cf "$work/app.tar" ./driftgate
base_out=$(layer "$work/base.tar")
app_out=$(layer "$work/app.tar")
read -r base_diff base_layer <<<"$base_out"
read -r app_diff app_layer <<<"$app_out"

packages=$(grep -v '^#' "$repo/image/base-packages.lock" | awk 'NF {printf "%s%s=%s", sep, $1, $2; sep=" "}')
labels=$(jq -cn --arg source "$source_url" --arg version "$version" --arg revision "$revision" \
  --arg created "$created" '{
    "org.opencontainers.image.source": $source, "org.opencontainers.image.version": $version,
    "org.opencontainers.image.revision": $revision, "org.opencontainers.image.created": $created,
    "org.opencontainers.image.title": "driftgate", "org.opencontainers.image.licenses": "Apache-2.0"}')

jq -cn --arg created "$created" --argjson labels "$labels" --arg base_diff "$base_diff" \
  --arg app_diff "$app_diff" --arg packages "$packages" '{
  created: $created, architecture: "amd64", os: "linux",
  config: {
    User: "65532:65532", Entrypoint: ["/driftgate"], Cmd: ["serve"], WorkingDir: "/",
    Env: ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
          "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"],
    ExposedPorts: {"8443/tcp": {}, "8080/tcp": {}},
    Labels: $labels
  },
  rootfs: {type: "layers", diff_ids: [$base_diff, $app_diff]},
  history: [
    {created: $created, created_by: ("image/build.sh: Debian bookworm " + $packages + ", /etc/passwd, /tmp")},
    {created: $created, created_by: "image/build.sh: /driftgate (static, musl)"}
  ]}' >"$work/config.json"
config=$(blob "$work/config.json" application/vnd.oci.image.config.v1+json)

jq -cn --argjson config "$config" --argjson base "$base_layer" --argjson app "$app_layer" \
  --argjson labels "$labels" '{
  schemaVersion: 2, mediaType: "application/vnd.oci.image.manifest.v1+json",
  config: $config, layers: [$base, $app], annotations: $labels}' >"$work/manifest.json"
manifest=$(blob "$work/manifest.json" application/vnd.oci.image.manifest.v1+json)

jq -cn --argjson manifest "$manifest" --arg version "$version" '{
  schemaVersion: 2, mediaType: "application/vnd.oci.image.index.v1+json",
  manifests: [$manifest + {platform: {architecture: "amd64", os: "linux"},
    annotations: {"org.opencontainers.image.ref.name": $version}}]}' >"$layout/index.json"
echo '{"imageLayoutVersion":"1.0.0"}' >"$layout/oci-layout"

echo "== $layout (tag $version), manifest $(jq -r .digest <<<"$manifest")"
if command -v skopeo >/dev/null; then
  archive=$out/driftgate-$version.tar
  rm -f "$archive"
  skopeo --insecure-policy copy --quiet "oci:$layout:$version" "docker-archive:$archive:$image_name:$version"
  echo "== $archive ($image_name:$version): docker load -i, or kind load image-archive"
fi

#!/usr/bin/env bash
# Writes an OCI image archive (an image layout, tarred) of one layer, for `ctr images import`:
#   oci-image.sh ROOTFS NAME CONFIG OUT.tar
# ROOTFS becomes the layer (every file root-owned, one mtime, sorted: the same bytes every time),
# NAME (repository:tag) is what containerd names the image, CONFIG is a JSON object merged into
# the image config (User, Entrypoint, Env, ...). linux/amd64. Needs GNU tar, gzip, sha256sum, jq.
set -euo pipefail
rootfs="$1" name="$2" config="$3" archive="$4"
epoch=0
created="1970-01-01T00:00:00Z"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
layout="$work/layout"
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

tar -C "$rootfs" --sort=name --mtime="@$epoch" --numeric-owner --owner=0 --group=0 \
  --format=posix --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
  -cf "$work/layer.tar" .
diff_id="sha256:$(sha256sum "$work/layer.tar" | cut -d' ' -f1)"
gzip -n -9 "$work/layer.tar"
layer=$(blob "$work/layer.tar.gz" application/vnd.oci.image.layer.v1.tar+gzip)

jq -cn --arg created "$created" --arg diff_id "$diff_id" --argjson config "$config" '{
  created: $created, architecture: "amd64", os: "linux",
  config: ({Env: ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]} + $config),
  rootfs: {type: "layers", diff_ids: [$diff_id]}}' >"$work/config.json"
config_descriptor=$(blob "$work/config.json" application/vnd.oci.image.config.v1+json)
jq -cn --argjson config "$config_descriptor" --argjson layer "$layer" '{
  schemaVersion: 2, mediaType: "application/vnd.oci.image.manifest.v1+json",
  config: $config, layers: [$layer]}' >"$work/manifest.json"
manifest=$(blob "$work/manifest.json" application/vnd.oci.image.manifest.v1+json)
# containerd names an imported image by io.containerd.image.name; ref.name is the tag alone.
jq -cn --argjson manifest "$manifest" --arg name "$name" '{
  schemaVersion: 2, mediaType: "application/vnd.oci.image.index.v1+json",
  manifests: [$manifest + {platform: {architecture: "amd64", os: "linux"},
    annotations: {"io.containerd.image.name": $name,
      "org.opencontainers.image.ref.name": ($name | sub("^.*:"; ""))}}]}' >"$layout/index.json"
echo '{"imageLayoutVersion":"1.0.0"}' >"$layout/oci-layout"
tar -C "$layout" --sort=name --mtime="@$epoch" --numeric-owner --owner=0 --group=0 -cf "$archive" .

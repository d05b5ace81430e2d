#!/usr/bin/env bash
# Renders the krew manifest (driftgate.yaml.in) for a release tarball made by package.sh: the
# sha256 is computed from the tarball itself, so it cannot be a placeholder.
# Usage: plugins/krew/render.sh TARBALL URI > driftgate.yaml
set -euo pipefail
if [[ $# -ne 2 ]]; then
  echo "usage: $0 TARBALL URI (URI: where the release publishes the tarball, https://...)" >&2
  exit 2
fi
tarball=$1 uri=$2
here=$(cd "$(dirname "$0")" && pwd)
if [[ ! -f $tarball ]]; then
  echo "$0: $tarball does not exist; make it with plugins/krew/package.sh" >&2
  exit 2
fi
if ! listing=$(tar -tzf "$tarball" 2>&1); then
  echo "$0: $tarball is not a gzip tarball: $listing" >&2
  exit 2
fi
if ! grep -qx 'kubectl-driftgate' <<<"$listing"; then
  echo "$0: $tarball holds no kubectl-driftgate at its top level; make it with plugins/krew/package.sh" >&2
  exit 2
fi
if [[ $uri != https://* ]]; then
  echo "$0: the URI must be https:// (krew downloads it): got $uri" >&2
  exit 2
fi
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$here/../../Cargo.toml" | head -n1)
sha256=$(sha256sum "$tarball" | cut -d' ' -f1)
sed -e "s|@VERSION@|$version|" -e "s|@URI@|$uri|" -e "s|@SHA256@|$sha256|" "$here/driftgate.yaml.in"

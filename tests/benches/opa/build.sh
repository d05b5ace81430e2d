#!/usr/bin/env bash
# Installs the pinned OPA, the load benchmark's peer, from the Go module proxy into
# $DRIFTGATE_TOOLS/bin (default ~/.cache/driftgate/tools/bin) when it is missing or another
# version, and prints its path. tests/opa_equivalence.rs (in `cargo test`) and load.sh run it.
# Cold (empty Go caches) it takes about 3 minutes on 2 cores; warm, a version check.
set -euo pipefail

OPA_VERSION=v1.22.3
tools=${DRIFTGATE_TOOLS:-$HOME/.cache/driftgate/tools}
opa="$tools/bin/opa"
if ! [ -x "$opa" ] || ! "$opa" version 2>/dev/null | grep -x "Version: ${OPA_VERSION#v}" >/dev/null; then
  if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
    export PATH="/usr/local/go/bin:$PATH"
  fi
  mkdir -p "$tools/bin"
  GOBIN="$tools/bin" GOFLAGS=-mod=mod go install "github.com/open-policy-agent/opa@$OPA_VERSION" >&2
fi
echo "$opa"

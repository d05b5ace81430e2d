#!/usr/bin/env bash
# Load benchmark: `driftgate serve` and an OPA peer under the same HTTPS load and reviews.
#
#   bash tests/benches/load.sh            # the full run recorded in tests/benches/BENCHMARKS.md
#   LOAD_DURATION=3 LOAD_QUIET_WAIT=0 bash tests/benches/load.sh   # a quick try
#
# Builds driftgate (release), installs the load generator oha and OPA when missing (pinned,
# from crates.io and the Go module proxy, into ~/.cache/driftgate/tools), starts both servers
# on loopback with the development certificates, checks first that they decide every fixture
# alike, then drives each with oha over HTTPS/1.1 keep-alive (as kube-apiserver calls webhooks)
# and HTTP/2, with a 30 KB Deployment UPDATE and a small Pod CREATE: saturated, at a fixed
# rate, and saturated with server and load generator pinned to one core each. Writes
# tests/benches/results/: machine.txt, equivalence.md/.json, summary.md (the tables for
# BENCHMARKS.md), runs.json and the raw oha JSON of every run.
#
# Knobs (environment): LOAD_DURATION seconds per run (10), LOAD_RATE reviews/s for the fixed
# rate runs (2000), LOAD_CONNECTIONS for HTTP/1.1 (32), LOAD_QUIET_WAIT seconds to wait for the
# 1-minute load average to drop below LOAD_QUIET (1.0) before measuring (600; 0 to skip),
# DRIFTGATE_BIN a driftgate binary to measure instead of building one.
set -euo pipefail
cd "$(dirname "$0")/../.."

OHA_VERSION=1.16.0
OPA_VERSION=v1.22.3
TOOLS="${DRIFTGATE_TOOLS:-$HOME/.cache/driftgate/tools}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/driftgate/target}"
DURATION="${LOAD_DURATION:-10}"
RATE="${LOAD_RATE:-2000}"
CONNECTIONS="${LOAD_CONNECTIONS:-32}"
QUIET="${LOAD_QUIET:-1.0}"
QUIET_WAIT="${LOAD_QUIET_WAIT:-600}"
RESULTS=tests/benches/results
LIB="python3 tests/benches/loadlib.py"
OHA="$TOOLS/bin/oha"
OPA="$TOOLS/bin/opa"

WORK="$(mktemp -d)"
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${PIDS[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$WORK"
}
trap cleanup EXIT

step() { echo "== $*"; }

# --- Tools ----------------------------------------------------------------------------------
step "tools"
if ! [ -x "$OHA" ] || [ "$("$OHA" --version 2>/dev/null)" != "oha $OHA_VERSION" ]; then
  # Its own target dir, so that it does not rebuild driftgate's dependencies with other features.
  CARGO_TARGET_DIR="$HOME/.cache/driftgate/target-oha-install" \
    cargo install oha --version "$OHA_VERSION" --locked --root "$TOOLS"
fi
if ! [ -x "$OPA" ] || ! "$OPA" version 2>/dev/null | grep -x "Version: ${OPA_VERSION#v}" >/dev/null; then
  if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
    export PATH="/usr/local/go/bin:$PATH"
  fi
  GOBIN="$TOOLS/bin" go install "github.com/open-policy-agent/opa@$OPA_VERSION"
fi
"$OHA" --version
"$OPA" version | sed -n 1p

if [ -n "${DRIFTGATE_BIN:-}" ]; then
  DRIFTGATE="$DRIFTGATE_BIN"
else
  step "cargo build --release"
  cargo build --release --locked --bin driftgate
  DRIFTGATE="$CARGO_TARGET_DIR/release/driftgate"
fi

# --- Certificates, fixtures, ports ----------------------------------------------------------
CERTS="$WORK/certs"
"$DRIFTGATE" certs dev --out "$CERTS" >/dev/null
read -r DG_PORT ADMIN_PORT OPA_PORT <<<"$($LIB free-ports 3)"

mkdir -p "$RESULTS/oha"
rm -f "$RESULTS"/oha/*.json "$RESULTS/runs.jsonl"
# Everything printed from here on is also kept as the run's record.
exec > >(tee "$RESULTS/output.txt") 2>&1

# --- Machine --------------------------------------------------------------------------------
wait_for_quiet() {
  local waited=0 load
  while :; do
    load="$(cut -d' ' -f1 /proc/loadavg)"
    if [ "$QUIET_WAIT" = 0 ] || awk -v l="$load" -v q="$QUIET" 'BEGIN { exit !(l < q) }'; then
      break
    fi
    if [ "$waited" -ge "$QUIET_WAIT" ]; then
      echo "the machine did not become quiet within ${QUIET_WAIT}s (1-minute load $load); measuring anyway" >&2
      break
    fi
    sleep 15
    waited=$((waited + 15))
  done
  echo "$load"
}
step "waiting for a quiet machine (1-minute load average below $QUIET, at most ${QUIET_WAIT}s)"
START_LOAD="$(wait_for_quiet)"
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "nproc: $(nproc)"
  echo "cpu: $(lscpu | sed -n 's/^Model name: *//p')"
  echo "memory: $(free -g | awk '/^Mem:/ {print $2 " GiB"}')"
  echo "kernel: $(uname -r)"
  echo "uptime at start: $(uptime)"
  echo "git: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (modified)')"
  echo "rustc: $(rustc --version)"
  echo "oha: $("$OHA" --version)"
  echo "opa: $("$OPA" version | sed -n 1p)"
  echo "duration per run: ${DURATION}s; fixed rate: ${RATE}/s; HTTP/1.1 connections: $CONNECTIONS; HTTP/2: 4 connections x 8 streams"
} >"$RESULTS/machine.txt"
cat "$RESULTS/machine.txt"

# --- Servers --------------------------------------------------------------------------------
step "starting driftgate serve (127.0.0.1:$DG_PORT) and OPA (127.0.0.1:$OPA_PORT)"
# Logs go to a file, as a pod's stderr goes to the container runtime: one line per review.
"$DRIFTGATE" serve --policy policies/example.yaml --tls-cert "$CERTS/tls.crt" --tls-key "$CERTS/tls.key" \
  --addr "127.0.0.1:$DG_PORT" --admin-addr "127.0.0.1:$ADMIN_PORT" --no-kube 2>"$WORK/driftgate.log" &
DG_PID=$!
PIDS+=("$DG_PID")
# Decision logging is off by default in OPA; its request log is off at --log-level error. No
# version check: the benchmark sends nothing off this machine.
"$OPA" run --server --skip-version-check --addr "127.0.0.1:$OPA_PORT" \
  --tls-cert-file "$CERTS/tls.crt" --tls-private-key-file "$CERTS/tls.key" \
  --set=default_decision=driftgate/main --log-level error \
  tests/benches/opa/policy 2>"$WORK/opa.log" &
OPA_PID=$!
PIDS+=("$OPA_PID")
for _ in $(seq 100); do
  if curl -sf "http://127.0.0.1:$ADMIN_PORT/readyz" >/dev/null &&
    curl -sf --cacert "$CERTS/ca.crt" "https://127.0.0.1:$OPA_PORT/health" >/dev/null; then
    break
  fi
  sleep 0.2
done
curl -sf "http://127.0.0.1:$ADMIN_PORT/readyz" >/dev/null || { cat "$WORK/driftgate.log"; exit 1; }
curl -sf --cacert "$CERTS/ca.crt" "https://127.0.0.1:$OPA_PORT/health" >/dev/null || { cat "$WORK/opa.log"; exit 1; }

# --- Same decisions first -------------------------------------------------------------------
step "decisions: every fixture through both servers"
$LIB shift-fixtures tests/fixtures "$WORK/fixtures"
EQUIVALENT=yes
$LIB equivalence "$WORK/fixtures" "$DG_PORT" "$OPA_PORT" "$CERTS/ca.crt" \
  "$RESULTS/equivalence.md" "$RESULTS/equivalence.json" || EQUIVALENT=no
if [ "$EQUIVALENT" = no ]; then
  echo "driftgate and OPA decide some fixture differently (see $RESULTS/equivalence.md); the load figures compare unequal policies" >&2
fi

# --- Load -----------------------------------------------------------------------------------
declare -A BODY=(
  [deploy30k]=tests/fixtures/bench-deployment-update-30k.json
  [pod]=tests/fixtures/replicaset-controller-create-pod.json
)
declare -A PID_OF=([driftgate]=$DG_PID [opa]=$OPA_PID)
declare -A URL_OF=(
  [driftgate]="https://localhost:$DG_PORT/validate"
  [opa]="https://localhost:$OPA_PORT/"
)

# oha_args SECONDS BODY PROTO MODE: the load generator's arguments for one run.
oha_args() {
  local seconds=$1 body=$2 proto=$3 mode=$4
  # -w: on HTTP/1.1, let requests in flight at the deadline finish instead of counting them
  # as errors.
  local args=(--no-tui --output-format json -z "${seconds}s" -w -m POST
    -H 'Content-Type: application/json' -D "${BODY[$body]}" --cacert "$CERTS/ca.crt")
  if [ "$proto" = h2 ]; then
    # A few connections with several streams each, as an HTTP/2 client multiplexes.
    args+=(--http2 -c 4 -p 8)
  else
    args+=(-c "$CONNECTIONS")
  fi
  if [ "$mode" = fixed ]; then
    args+=(-q "$RATE" --latency-correction)
  fi
  printf '%s\n' "${args[@]}"
}

# run TARGET BODY PROTO MODE PLACEMENT
run() {
  local target=$1 body=$2 proto=$3 mode=$4 placement=$5
  local pid=${PID_OF[$target]} name="$1-$2-$3-$4-$5"
  local pin=() cores=0,1 warmup=() args=()
  mapfile -t warmup < <(oha_args 1 "$body" "$proto" "$mode")
  mapfile -t args < <(oha_args "$DURATION" "$body" "$proto" "$mode")
  if [ "$placement" = pinned ]; then
    # Every server thread on core 0, the load generator on core 1.
    cores=0
    pin=(taskset -c 1)
  fi
  taskset -a -p -c "$cores" "$pid" >/dev/null
  # Warm up (connections, allocator pools), then reset the peak RSS counter (clear_refs 5) so
  # that each run reports its own peak.
  "${pin[@]}" "$OHA" "${warmup[@]}" "${URL_OF[$target]}" >/dev/null
  echo 5 >"/proc/$pid/clear_refs"
  local before after busy_before busy_after oha_cpu
  busy_before=$($LIB busy-ticks)
  before=$($LIB cpu-ticks "$pid")
  oha_cpu=$($LIB timed "$RESULTS/oha/$name.json" "${pin[@]}" "$OHA" "${args[@]}" "${URL_OF[$target]}")
  after=$($LIB cpu-ticks "$pid")
  busy_after=$($LIB busy-ticks)
  taskset -a -p -c 0,1 "$pid" >/dev/null
  printf '{"target":"%s","body":"%s","proto":"%s","mode":"%s","placement":"%s","rate":%s,"duration_s":%s}\n' \
    "$target" "$body" "$proto" "$mode" "$placement" "$RATE" "$DURATION" >"$WORK/run.json"
  $LIB record "$RESULTS/runs.jsonl" "$WORK/run.json" "$RESULTS/oha/$name.json" \
    "$before" "$after" "$($LIB status-kb "$pid" VmHWM)" "$busy_before" "$busy_after" "$oha_cpu"
}

step "load: ${DURATION}s per run"
for target in driftgate opa; do
  for body in deploy30k pod; do
    for proto in h1 h2; do
      # OPA's TLS listener offers only http/1.1 in ALPN (its --h2c is for cleartext listeners).
      if [ "$target" = opa ] && [ "$proto" = h2 ]; then continue; fi
      run "$target" "$body" "$proto" saturated shared
      run "$target" "$body" "$proto" fixed shared
    done
    run "$target" "$body" h1 saturated pinned
  done
done

# Peak RSS over the whole run (clear_refs resets it per run; this is the last run's window, so
# also record VmHWM-independent current RSS).
{
  echo "driftgate VmRSS after the runs: $($LIB status-kb "$DG_PID" VmRSS) kB"
  echo "opa VmRSS after the runs: $($LIB status-kb "$OPA_PID" VmRSS) kB"
  echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "driftgate log lines (one per review): $(wc -l <"$WORK/driftgate.log")"
  echo "start load average (1 min): $START_LOAD"
} >>"$RESULTS/machine.txt"

$LIB report "$RESULTS/runs.jsonl" "$RESULTS/summary.md" "$RESULTS/runs.json"
rm -f "$RESULTS/runs.jsonl"
step "summary ($RESULTS/summary.md)"
cat "$RESULTS/summary.md"

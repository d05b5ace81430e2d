#!/usr/bin/env bash
# Load benchmark: driftgate binaries side by side, and an OPA peer, under the same HTTPS load
# and reviews, interleaved and repeated.
#
#   bash tests/benches/load.sh                                   # this checkout, built, and OPA
#   bash tests/benches/load.sh old=/tmp/old/driftgate new=target/release/driftgate
#   DRIFTGATE_BINS="old=/tmp/old/driftgate new=target/release/driftgate" bash tests/benches/load.sh
#   LOAD_DURATION=2 LOAD_ROUNDS=2 LOAD_OPA=0 LOAD_QUIET_WAIT=0 bash tests/benches/load.sh a=BIN b=BIN
#
# Installs the load generator oha and OPA when missing (pinned, from crates.io and the Go module
# proxy, into ~/.cache/driftgate/tools), builds driftgate (release) unless binaries are given,
# starts every server on loopback with the development certificates, checks first that they
# decide every fixture alike (a difference not listed in opa/differences.json stops the run),
# then drives each with oha over HTTPS/1.1 keep-alive (as kube-apiserver calls webhooks) and
# HTTP/2, with a 30 KB Deployment UPDATE, a small Pod CREATE and a human's 4 KB edit of a
# ConfigMap (which every engine must diff to refuse): saturated, at a fixed rate, and saturated
# with server and load generator pinned to one core each.
#
# The machine's speed drifts within minutes, so no scenario is measured for one server and then
# for the next: each scenario runs every server back to back (one round), LOAD_ROUNDS times,
# the order rotating each round, and the ratios between servers are taken within a round.
# Writes tests/benches/results/: machine.txt, equivalence.md/.json, summary.md (medians and
# ranges over the rounds, per-round p99 at the fixed rate, ratios), runs.json and the raw oha
# JSON of every run.
#
# Knobs (environment): DRIFTGATE_BINS "NAME=PATH ..." (or NAME=PATH arguments; the first is the
# baseline of the ratios; DRIFTGATE_BIN=PATH is one binary named driftgate; none: build this
# checkout), LOAD_ROUNDS (3), LOAD_DURATION seconds per run (10), LOAD_RATE reviews/s for the
# fixed-rate runs (2000), LOAD_P99_TARGET_MS (2), LOAD_CONNECTIONS for HTTP/1.1 (32), LOAD_OPA
# (1; 0 leaves OPA and the decision check out), LOAD_ONLY (an extended regex over scenario names
# such as deploy30k-h1-fixed-shared), LOAD_EQUIVALENCE (fail; warn measures anyway),
# LOAD_QUIET_WAIT seconds to wait for the 1-minute load average to drop below LOAD_QUIET (1.0)
# before measuring (600; 0 to skip), LOAD_RESULTS the results directory (tests/benches/results;
# another keeps a one-off run from replacing the committed figures), LOAD_STEADY_FROM seconds of
# each fixed-rate run left out of its steady-state percentiles (1; see loadlib.py's `steady`).
set -euo pipefail
cd "$(dirname "$0")/../.."

OHA_VERSION=1.16.0
TOOLS="${DRIFTGATE_TOOLS:-$HOME/.cache/driftgate/tools}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/driftgate/target}"
DURATION="${LOAD_DURATION:-10}"
ROUNDS="${LOAD_ROUNDS:-3}"
RATE="${LOAD_RATE:-2000}"
P99_TARGET_MS="${LOAD_P99_TARGET_MS:-2}"
CONNECTIONS="${LOAD_CONNECTIONS:-32}"
WITH_OPA="${LOAD_OPA:-1}"
ONLY="${LOAD_ONLY:-}"
ON_DIFFERENCE="${LOAD_EQUIVALENCE:-fail}"
QUIET="${LOAD_QUIET:-1.0}"
QUIET_WAIT="${LOAD_QUIET_WAIT:-600}"
RESULTS="${LOAD_RESULTS:-tests/benches/results}"
STEADY_FROM="${LOAD_STEADY_FROM:-1}"
LIB="python3 tests/benches/loadlib.py"
OHA="$TOOLS/bin/oha"
OPA=

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
if [ "$WITH_OPA" != 0 ]; then
  OPA=$(DRIFTGATE_TOOLS="$TOOLS" bash tests/benches/opa/build.sh)
fi
"$OHA" --version
if [ "$WITH_OPA" != 0 ]; then "$OPA" version | sed -n 1p; fi

# --- The driftgate binaries compared ---------------------------------------------------------
TARGETS=()
declare -A BIN_OF=() SOURCE_OF=()
add_target() {
  local name=${1%%=*} path=${1#*=}
  if [[ "$1" != *=* || ! "$name" =~ ^[a-z0-9_]+$ || "$name" = opa || -n "${BIN_OF[$name]:-}" ]]; then
    echo "a driftgate target is NAME=PATH with a new NAME of [a-z0-9_] other than opa, not '$1'" >&2
    exit 2
  fi
  [ -x "$path" ] || { echo "$name: $path is not an executable" >&2; exit 2; }
  TARGETS+=("$name")
  SOURCE_OF[$name]="$(realpath "$path")"
  # Each runs from a fresh copy in the same place: a rebuild during the run cannot swap it, and
  # every binary starts from the page cache alike (a file read long ago and one just written
  # fault in differently, which shows in RSS).
  mkdir -p "$WORK/bin/$name"
  cp "$path" "$WORK/bin/$name/driftgate"
  BIN_OF[$name]="$WORK/bin/$name/driftgate"
}
if [ $# -gt 0 ]; then
  for spec in "$@"; do add_target "$spec"; done
elif [ -n "${DRIFTGATE_BINS:-}" ]; then
  for spec in $DRIFTGATE_BINS; do add_target "$spec"; done
elif [ -n "${DRIFTGATE_BIN:-}" ]; then
  add_target "driftgate=$DRIFTGATE_BIN"
else
  step "cargo build --release"
  cargo build --release --locked --bin driftgate
  add_target "driftgate=$CARGO_TARGET_DIR/release/driftgate"
fi

# --- Certificates, fixtures, ports ----------------------------------------------------------
CERTS="$WORK/certs"
"${BIN_OF[${TARGETS[0]}]}" certs dev --out "$CERTS" >/dev/null
read -r -a PORTS <<<"$($LIB free-ports $((2 * ${#TARGETS[@]} + 1)))"

mkdir -p "$RESULTS/oha"
rm -f "$RESULTS"/oha/*.json "$RESULTS/runs.jsonl"
# Everything printed from here on is also kept as the run's record.
exec > >(tee "$RESULTS/output.txt") 2>&1

# --- Scenarios ------------------------------------------------------------------------------
declare -A BODY=(
  [deploy30k]=tests/fixtures/bench-deployment-update-30k.json
  [pod]=tests/fixtures/replicaset-controller-create-pod.json
  [edit]=tests/fixtures/namespace-window-configmap-edit.json
)
# Each is "review protocol mode placement", named with dashes.
SCENARIOS=()
for body in deploy30k pod edit; do
  for proto in h1 h2; do
    SCENARIOS+=("$body $proto saturated shared" "$body $proto fixed shared")
  done
  SCENARIOS+=("$body h1 saturated pinned")
done
if [ -n "$ONLY" ]; then
  kept=()
  for scenario in "${SCENARIOS[@]}"; do
    if [[ "${scenario// /-}" =~ $ONLY ]]; then kept+=("$scenario"); fi
  done
  SCENARIOS=("${kept[@]}")
  [ ${#SCENARIOS[@]} -gt 0 ] || { echo "LOAD_ONLY='$ONLY' matches no scenario" >&2; exit 2; }
fi

# The servers that take part in a scenario: OPA's TLS listener offers only http/1.1 in ALPN
# (its --h2c is for cleartext listeners), so it has no HTTP/2 runs.
servers_for() {
  local proto=$1
  printf '%s\n' "${TARGETS[@]}"
  if [ "$WITH_OPA" != 0 ] && [ "$proto" = h1 ]; then echo opa; fi
}
TOTAL_RUNS=0
for scenario in "${SCENARIOS[@]}"; do
  read -r _ proto _ _ <<<"$scenario"
  TOTAL_RUNS=$((TOTAL_RUNS + ROUNDS * $(servers_for "$proto" | wc -l)))
done

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
  if [ "$WITH_OPA" != 0 ]; then echo "opa: $("$OPA" version | sed -n 1p)"; else echo "opa: left out (LOAD_OPA=0)"; fi
  for name in "${TARGETS[@]}"; do
    echo "target $name: ${SOURCE_OF[$name]} sha256 $(sha256sum "${BIN_OF[$name]}" | cut -c1-16)"
  done
  echo "rounds: $ROUNDS; duration per run: ${DURATION}s (after a 1 s warm-up); fixed rate: ${RATE}/s; HTTP/1.1 connections: $CONNECTIONS; HTTP/2: 4 connections x 8 streams"
  echo "steady state of a fixed-rate run: requests scheduled from ${STEADY_FROM}s on"
  echo "scenarios: $(printf '%s, ' "${SCENARIOS[@]// /-}" | sed 's/, $//')"
  echo "runs: $TOTAL_RUNS, about $(((TOTAL_RUNS * (DURATION + 4) + 59) / 60)) minutes (each run: a 1 s warm-up, the run, ~3 s of set-up)"
} >"$RESULTS/machine.txt"
cat "$RESULTS/machine.txt"

# --- Servers --------------------------------------------------------------------------------
declare -A PID_OF=() URL_OF=() ADMIN_OF=()
next_port=0
for name in "${TARGETS[@]}"; do
  port=${PORTS[$next_port]} admin=${PORTS[$((next_port + 1))]}
  next_port=$((next_port + 2))
  step "starting $name: driftgate serve (127.0.0.1:$port)"
  # Logs go to a file, as a pod's stderr goes to the container runtime: one line per review.
  "${BIN_OF[$name]}" serve --policy policies/example.yaml --tls-cert "$CERTS/tls.crt" --tls-key "$CERTS/tls.key" \
    --addr "127.0.0.1:$port" --admin-addr "127.0.0.1:$admin" --no-kube 2>"$WORK/$name.log" &
  PID_OF[$name]=$!
  PIDS+=("$!")
  URL_OF[$name]="https://localhost:$port/validate"
  ADMIN_OF[$name]="http://127.0.0.1:$admin/readyz"
done
if [ "$WITH_OPA" != 0 ]; then
  port=${PORTS[$next_port]}
  step "starting OPA (127.0.0.1:$port)"
  # Decision logging is off by default in OPA; its request log is off at --log-level error. No
  # version check: the benchmark sends nothing off this machine.
  "$OPA" run --server --skip-version-check --addr "127.0.0.1:$port" \
    --tls-cert-file "$CERTS/tls.crt" --tls-private-key-file "$CERTS/tls.key" \
    --set=default_decision=driftgate/main --log-level error \
    tests/benches/opa/policy 2>"$WORK/opa.log" &
  PID_OF[opa]=$!
  PIDS+=("$!")
  URL_OF[opa]="https://localhost:$port/"
  ADMIN_OF[opa]="https://127.0.0.1:$port/health"
fi
ready() { curl -sf --cacert "$CERTS/ca.crt" "${ADMIN_OF[$1]}" >/dev/null; }
for name in "${!PID_OF[@]}"; do
  for _ in $(seq 100); do
    if ready "$name"; then break; fi
    sleep 0.2
  done
  ready "$name" || { cat "$WORK/$name.log"; exit 1; }
done

# --- Same decisions first -------------------------------------------------------------------
if [ "$WITH_OPA" != 0 ] || [ ${#TARGETS[@]} -gt 1 ]; then
  step "decisions: every fixture through every server"
  $LIB shift-fixtures tests/fixtures "$WORK/fixtures"
  servers=()
  for name in "${TARGETS[@]}"; do servers+=("$name=${URL_OF[$name]}"); done
  if [ "$WITH_OPA" != 0 ]; then servers+=("opa=${URL_OF[opa]}"); fi
  if ! $LIB equivalence "$WORK/fixtures" "$CERTS/ca.crt" tests/benches/opa/differences.json \
    "$RESULTS/equivalence.md" "$RESULTS/equivalence.json" "${servers[@]}"; then
    echo "the servers decide some fixture differently, and opa/differences.json does not list it (see $RESULTS/equivalence.md)" >&2
    if [ "$ON_DIFFERENCE" != warn ]; then
      echo "stopping: the load figures would compare unequal policies (LOAD_EQUIVALENCE=warn measures anyway)" >&2
      exit 1
    fi
  fi
fi

# --- Load -----------------------------------------------------------------------------------
# oha_args SECONDS BODY PROTO MODE [DB]: the load generator's arguments for one run, keeping
# every request in the sqlite file DB when given.
oha_args() {
  local seconds=$1 body=$2 proto=$3 mode=$4 db=${5:-}
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
  if [ -n "$db" ]; then
    # Every request's scheduled start and end, for the steady-state percentiles.
    args+=(--db-url "$db")
  fi
  printf '%s\n' "${args[@]}"
}

# run ROUND TARGET BODY PROTO MODE PLACEMENT
run() {
  local round=$1 target=$2 body=$3 proto=$4 mode=$5 placement=$6
  local pid=${PID_OF[$target]} name="$2-$3-$4-$5-$6-r$1"
  local pin=() cores=0,1 warmup=() args=() db=
  if [ "$mode" = fixed ]; then db="$WORK/requests.db"; fi
  rm -f "$WORK/requests.db"
  mapfile -t warmup < <(oha_args 1 "$body" "$proto" "$mode")
  mapfile -t args < <(oha_args "$DURATION" "$body" "$proto" "$mode" "$db")
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
  printf '{"round":%s,"target":"%s","body":"%s","proto":"%s","mode":"%s","placement":"%s","rate":%s,"duration_s":%s}\n' \
    "$round" "$target" "$body" "$proto" "$mode" "$placement" "$RATE" "$DURATION" >"$WORK/run.json"
  $LIB record "$RESULTS/runs.jsonl" "$WORK/run.json" "$RESULTS/oha/$name.json" \
    "$before" "$after" "$($LIB status-kb "$pid" VmHWM)" "$busy_before" "$busy_after" "$oha_cpu" \
    "$db" "$STEADY_FROM" "$P99_TARGET_MS"
}

step "load: $TOTAL_RUNS runs of ${DURATION}s, $ROUNDS rounds per scenario, servers back to back within a round"
for scenario in "${SCENARIOS[@]}"; do
  read -r body proto mode placement <<<"$scenario"
  mapfile -t servers < <(servers_for "$proto")
  for round in $(seq "$ROUNDS"); do
    # Rotate who goes first, so that a drift within a round does not always favour the same one.
    for i in $(seq 0 $((${#servers[@]} - 1))); do
      server=${servers[$(((i + round - 1) % ${#servers[@]}))]}
      run "$round" "$server" "$body" "$proto" "$mode" "$placement"
    done
  done
done

{
  for name in "${!PID_OF[@]}"; do
    echo "$name VmRSS after the runs: $($LIB status-kb "${PID_OF[$name]}" VmRSS) kB"
  done
  for name in "${TARGETS[@]}"; do
    echo "$name log lines: $(wc -l <"$WORK/$name.log")"
  done
  echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "start load average (1 min): $START_LOAD"
} >>"$RESULTS/machine.txt"

$LIB report "$RESULTS/runs.jsonl" "$RESULTS/summary.md" "$RESULTS/runs.json" "$P99_TARGET_MS" "${TARGETS[@]}"
rm -f "$RESULTS/runs.jsonl"
step "summary ($RESULTS/summary.md)"
cat "$RESULTS/summary.md"

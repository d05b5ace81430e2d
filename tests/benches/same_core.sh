#!/usr/bin/env bash
# The decide benchmark's cases timed for two checkouts at once, both processes pinned to the
# same core: the scheduler hands the core back and forth every few milliseconds, so both see the
# host at the same moments, and each one's CPU time (user + system, from getrusage) is its own
# work. On a host whose speed drifts by tens of percent within a minute, rounds in turn (ABBA)
# pair runs a minute apart and two cores at once differ by up to 7 %; sharing one core, the same
# build against itself agrees within about 1 %. The second checkout is then run against itself
# the same way, as the control of what the host resolves today: read the comparison beside it.
#
#   bash tests/benches/same_core.sh old=CHECKOUT new=CHECKOUT [ROUNDS=20] [CONTROL=10]
#        [CASES="deploy30k small_edit pod lazy_heads decide decide_human_edit"] [SCALE=1] [OUT=file]
#
# Each checkout's own release build of the decide bench (built like count.sh's, with
# DECIDE_COUNT) and example policy; each case runs a fixed number of iterations (about a second
# on this project's machines; SCALE multiplies them), minus a run that only loads. Rounds
# alternate between core 0 and core 1.
set -euo pipefail
rounds=${ROUNDS:-20}
control=${CONTROL:-10}
cases=${CASES:-deploy30k small_edit pod lazy_heads decide decide_human_edit}
scale=${SCALE:-1}
out=${OUT:-$(mktemp /tmp/same-core.XXXXXX)}
declare -A iterations=([deploy30k]=15000 [small_edit]=30000 [pod]=100000 [lazy_heads]=18000
  [decide]=200000 [decide_human_edit]=20000)
[ $# = 2 ] || { echo "usage: same_core.sh NAME=CHECKOUT NAME=CHECKOUT" >&2; exit 2; }
command -v taskset >/dev/null || { echo "same_core.sh needs taskset (util-linux)" >&2; exit 1; }
for case in $cases; do
  [ -n "${iterations[$case]:-}" ] || { echo "unknown case $case (known: ${!iterations[*]})" >&2; exit 2; }
done
. "$(dirname "$0")/decide_bin.sh"
a_name=${1%%=*}; a_dir=$(cd "${1#*=}" && pwd); a_bin=$(decide_bin "$a_name" "$a_dir")
b_name=${2%%=*}; b_dir=$(cd "${2#*=}" && pwd); b_bin=$(decide_bin "$b_name" "$b_dir")
work=$(mktemp -d /tmp/same-core-runs.XXXXXX)
trap 'rm -rf "$work"' EXIT

cpu_seconds() { # DIR BIN CASE N CORE -> user + system seconds of one run
  local TIMEFORMAT='%3U %3S'
  { time (cd "$1" && DECIDE_COUNT="$3:$4" taskset -c "$5" "$2" >/dev/null 2>&1); } 2>&1 |
    awk '{printf "%.3f", $1 + $2}'
}
# run LABEL A_DIR A_BIN B_DIR B_BIN ROUNDS: appends "=== LABEL round R" and "CASE N A_SECONDS B_SECONDS"
run() {
  local label=$1 adir=$2 abin=$3 bdir=$4 bbin=$5 n=$6 r core case count
  for r in $(seq 1 "$n"); do
    core=$(( (r + 1) % 2 ))
    echo "=== $label round $r $(date -u +%T) core $core" >> "$out"
    for case in setup $cases; do
      count=$(( ${iterations[$case]:-0} * scale ))
      cpu_seconds "$adir" "$abin" "$case" "$count" "$core" > "$work/a" &
      cpu_seconds "$bdir" "$bbin" "$case" "$count" "$core" > "$work/b" &
      wait
      echo "$case $count $(cat "$work/a") $(cat "$work/b")" >> "$out"
    done
  done
}
echo "# same_core.sh $a_name=$a_dir $b_name=$b_dir ROUNDS=$rounds CONTROL=$control SCALE=$scale $(date -u +%FT%TZ)" > "$out"
run compare "$a_dir" "$a_bin" "$b_dir" "$b_bin" "$rounds"
run control "$b_dir" "$b_bin" "$b_dir" "$b_bin" "$control"

python3 - "$out" "$a_name" "$b_name" <<'PY'
import re, statistics, sys
path, a_name, b_name = sys.argv[1:]
runs, label = {'compare': [], 'control': []}, None
for line in open(path):
    m = re.match(r'^=== (\w+) round', line)
    if m:
        label = m.group(1)
        runs[label].append({})
        continue
    m = re.match(r'^(\w+) (\d+) (\S+) (\S+)$', line)
    if m and label:
        runs[label][-1][m.group(1)] = (int(m.group(2)), float(m.group(3)), float(m.group(4)))

def table(rounds, a, b):
    print(f"| case | {a} µs per review, median (range) | {b} µs per review, median (range) "
          f"| {b} ÷ {a} per round, median (range; middle half) | rounds |")
    print("| --- | --- | --- | --- | --- |")
    cases = [c for c in dict.fromkeys(c for r in rounds for c in r) if c != 'setup']
    for case in cases:
        xs, ys = [], []
        for r in rounds:
            n, a_s, b_s = r[case]
            _, a_setup, b_setup = r['setup']
            xs.append((a_s - a_setup) / n * 1e6)
            ys.append((b_s - b_setup) / n * 1e6)
        if len(xs) < 2:
            continue
        ratios = sorted(y / x for x, y in zip(xs, ys))
        q = statistics.quantiles(ratios, n=4)
        print(f"| `{case}` | {statistics.median(xs):.2f} ({min(xs):.2f}–{max(xs):.2f}) "
              f"| {statistics.median(ys):.2f} ({min(ys):.2f}–{max(ys):.2f}) "
              f"| **{statistics.median(ratios):.3f}** ({ratios[0]:.3f}–{ratios[-1]:.3f}; {q[0]:.3f}–{q[2]:.3f}) | {len(xs)} |")

print(f"{b_name} against {a_name}, sharing one core:\n")
table(runs['compare'], a_name, b_name)
print(f"\n{b_name} against itself, the same way (what this host resolves today):\n")
table(runs['control'], b_name, b_name)
print(f"\nraw: {path}")
PY

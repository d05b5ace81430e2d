#!/usr/bin/env bash
# The decide benchmark of two builds run at the same time, one pinned to each core, the cores
# swapped every round: on a host whose speed drifts by tens of percent within a minute, a
# sequential ABBA pairs runs minutes apart, while here both runs of a pair see the same minute.
# After the comparison, the second build is run against itself the same way: the spread of that
# control is what the method can resolve on this host today, so read the comparison beside it.
# On a quiet host, prefer the sequential ABBA (BENCHMARKS.md): it resolves 1 %.
#
#   bash tests/benches/side_by_side.sh old=BIN:CHECKOUT new=BIN:CHECKOUT
#        [ROUNDS=16] [CONTROL=8] [FILTER='lazy|^decide'] [OUT=file] [-- criterion args]
#
# BIN: a decide bench binary (`cargo bench --bench decide --no-run` prints it); CHECKOUT: the
# checkout it runs in (its fixtures and example policy). Needs two cores and `taskset`.
set -euo pipefail
rounds=${ROUNDS:-16}
control=${CONTROL:-8}
filter=${FILTER:-lazy|^decide}
out=${OUT:-$(mktemp /tmp/side-by-side.XXXXXX)}
specs=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do specs+=("$1"); shift; done
[ "${1:-}" = -- ] && shift
[ ${#specs[@]} = 2 ] || { echo "usage: side_by_side.sh NAME=BIN:CHECKOUT NAME=BIN:CHECKOUT [-- criterion args]" >&2; exit 2; }
[ "$(nproc)" -ge 2 ] || { echo "side_by_side.sh runs one build per core: this machine has $(nproc)" >&2; exit 1; }
command -v taskset >/dev/null || { echo "side_by_side.sh needs taskset (util-linux)" >&2; exit 1; }
parse() { # NAME=BIN:CHECKOUT -> "NAME BIN CHECKOUT"
  local name=${1%%=*} rest=${1#*=}
  local bin=${rest%%:*} dir=${rest#*:}
  [ -x "$bin" ] || { echo "$name: $bin is not an executable bench binary" >&2; exit 1; }
  [ -d "$dir" ] || { echo "$name: $dir is not a checkout" >&2; exit 1; }
  echo "$name $bin $dir"
}
read -r a_name a_bin a_dir < <(parse "${specs[0]}")
read -r b_name b_bin b_dir < <(parse "${specs[1]}")
work=$(mktemp -d /tmp/side-by-side-runs.XXXXXX)
trap 'rm -rf "$work"' EXIT

# run LABEL A_BIN A_DIR B_BIN B_DIR ROUNDS: appends "=== LABEL round R" and "a|b bench [low est high]"
run() {
  local label=$1 abin=$2 adir=$3 bbin=$4 bdir=$5 n=$6 r ca cb
  shift 6
  for r in $(seq 1 "$n"); do
    if [ $((r % 2)) = 1 ]; then ca=0; cb=1; else ca=1; cb=0; fi
    echo "=== $label round $r $(date -u +%T) a on cpu$ca" >> "$out"
    (cd "$adir" && taskset -c $ca "$abin" --bench --noplot "$filter" "${criterion[@]}" > "$work/a" 2>&1) &
    (cd "$bdir" && taskset -c $cb "$bbin" --bench --noplot "$filter" "${criterion[@]}" > "$work/b" 2>&1) &
    wait
    for side in a b; do
      awk -v s=$side '/^[a-z_][a-z_\/0-9]*( |$)/ {name = $1}
        /time: +\[/ && !/%/ && name {sub(/.*time: +/, ""); print s, name, $0; name = ""}' "$work/$side" >> "$out"
    done
  done
}
criterion=("$@")
echo "# side_by_side.sh ${specs[*]} ROUNDS=$rounds CONTROL=$control FILTER='$filter' $(date -u +%FT%TZ)" > "$out"
run compare "$a_bin" "$a_dir" "$b_bin" "$b_dir" "$rounds"
run control "$b_bin" "$b_dir" "$b_bin" "$b_dir" "$control"

python3 - "$out" "$a_name" "$b_name" <<'EOF'
import re, statistics, sys
unit = {'ns': 1e-3, 'µs': 1.0, 'ms': 1e3}
path, a_name, b_name = sys.argv[1:]
runs = {'compare': [], 'control': []}
for line in open(path):
    m = re.match(r'^=== (\w+) round', line)
    if m:
        current = runs[m.group(1)]
        current.append({})
        continue
    m = re.match(r'^(a|b) (\S+) \[\S+ \S+ (\S+) (\S+) \S+ \S+\]', line)
    if m:
        current[-1][(m.group(1), m.group(2))] = float(m.group(3)) * unit[m.group(4)]

def table(rounds, a, b):
    print(f"| benchmark | {a} µs, median (range) | {b} µs, median (range) | {b} ÷ {a} per round, median (range; middle half) | rounds |")
    print("| --- | --- | --- | --- | --- |")
    for bench in dict.fromkeys(k[1] for r in rounds for k in r):
        pairs = [(r[('a', bench)], r[('b', bench)]) for r in rounds if ('a', bench) in r and ('b', bench) in r]
        if len(pairs) < 2:
            continue
        ratios = sorted(y / x for x, y in pairs)
        xs, ys = [x for x, _ in pairs], [y for _, y in pairs]
        q = statistics.quantiles(ratios, n=4)
        print(f"| `{bench}` | {statistics.median(xs):.2f} ({min(xs):.2f}–{max(xs):.2f}) "
              f"| {statistics.median(ys):.2f} ({min(ys):.2f}–{max(ys):.2f}) "
              f"| **{statistics.median(ratios):.3f}** ({ratios[0]:.3f}–{ratios[-1]:.3f}; {q[0]:.3f}–{q[2]:.3f}) | {len(pairs)} |")

print(f"{b_name} against {a_name}, side by side:\n")
table(runs['compare'], a_name, b_name)
print(f"\n{b_name} against itself, side by side (what this host can resolve today):\n")
table(runs['control'], b_name, b_name)
print(f"\nraw: {path}")
EOF

#!/usr/bin/env bash
# Instructions per review of the decide benchmark's cases, counted by valgrind (cachegrind), for
# checkouts compared side by side: a count does not drift with the machine's speed as a time
# does, so a difference of 1 % is seen in one run. Each checkout's own release build and example
# policy; the checkout's tests/benches/decide.rs must have DECIDE_COUNT (copy this one's into an
# older checkout whose decide.rs differs only by it: check with git diff first).
#
#   bash tests/benches/count.sh old=/tmp/driftgate-old new=. [CASES="deploy30k decide"] [N=500]
#
# Prints, per checkout and case: instructions per iteration, first-level instruction-cache
# misses and mispredicted branches per iteration (cachegrind's simulated caches and branch
# predictor: they show code-placement effects that the instruction count alone does not).
set -euo pipefail
cases=${CASES:-deploy30k small_edit pod lazy_heads decide decide_human_edit}
n=${N:-500}
command -v valgrind >/dev/null || { echo "count.sh needs valgrind (Debian: apt-get install valgrind)" >&2; exit 1; }
. "$(dirname "$0")/decide_bin.sh"
for spec in "$@"; do
  name=${spec%%=*}
  dir=$(cd "${spec#*=}" && pwd)
  bin=$(decide_bin "$name" "$dir")
  counts() { # case iterations -> "instructions I1-misses mispredicts"
    (cd "$dir" && DECIDE_COUNT="$1:$2" valgrind --tool=cachegrind --cache-sim=yes --branch-sim=yes \
      --cachegrind-out-file=/dev/null "$bin" 2>&1) |
      awk '/ I *refs:/ {gsub(",", "", $4); i = $4} / I1 *misses:/ {gsub(",", "", $4); m = $4}
           / Mispredicts:/ {gsub(",", "", $3); b = $3} END {print i, m, b}'
  }
  read -r base_i base_m base_b < <(counts setup 0)
  for case in $cases; do
    read -r i m b < <(counts "$case" "$n")
    printf '%-6s %-18s instructions %9d  I1 misses %7.1f  mispredicts %8.1f\n' "$name" "$case" \
      $(( (i - base_i) / n )) "$(echo "($m - $base_m) / $n" | bc -l)" "$(echo "($b - $base_b) / $n" | bc -l)"
  done
done

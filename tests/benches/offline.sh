#!/usr/bin/env bash
# Offline benchmark: `driftgate eval` and `driftgate policy test` over many copies of the 30 KB
# Flux UPDATE (tests/fixtures/bench-deployment-update-30k.json), driftgate binaries side by
# side, interleaved and repeated (issue 29, section 3). Users run both in CI over whole
# repositories: what counts is the wall time of one run over all the files, start-up included.
#
#   bash tests/benches/offline.sh old=/tmp/old/driftgate:/tmp/old-checkout new=target/release/driftgate:.
#   OFFLINE_COPIES=500 OFFLINE_ROUNDS=3 bash tests/benches/offline.sh a=BIN:DIR b=BIN:DIR
#
# Each NAME=BIN:CHECKOUT is decided with CHECKOUT's own policies/example.yaml (its commit's
# example policy). The first is the baseline of the ratios. The machine's speed drifts within
# minutes, so every round runs each binary back to back, the order rotating; the ratios are
# taken within a round, and the summary gives medians and ranges over the rounds.
#
# `policy test` runs one suite of OFFLINE_COPIES cases, each a copy of the review expected
# admitted. Every run must exit 0 and print one answer per review (eval) or report
# every case passed (test), or the benchmark stops: a fast wrong answer measures nothing.
#
# Knobs (environment): OFFLINE_COPIES (2000), OFFLINE_ROUNDS (7), OFFLINE_NOW
# (2026-11-30T09:00:00Z), OFFLINE_DIR (a scratch directory, removed afterwards).
set -euo pipefail
cd "$(dirname "$0")/../.."

copies=${OFFLINE_COPIES:-2000}
rounds=${OFFLINE_ROUNDS:-7}
now=${OFFLINE_NOW:-2026-11-30T09:00:00Z}
fixture=tests/fixtures/bench-deployment-update-30k.json
[ "$#" -ge 1 ] || { echo "usage: $0 NAME=BIN:CHECKOUT [NAME=BIN:CHECKOUT ...]" >&2; exit 2; }

scratch=${OFFLINE_DIR:-$(mktemp -d)}
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/reviews"
for i in $(seq -w 1 "$copies"); do cp "$fixture" "$scratch/reviews/review-$i.json"; done

names=()
for spec in "$@"; do
  name=${spec%%=*}
  rest=${spec#*=}
  bin=$(realpath "${rest%%:*}")
  checkout=$(realpath "${rest#*:}")
  policy=$checkout/policies/example.yaml
  [ -x "$bin" ] || { echo "$name: $bin is not an executable" >&2; exit 2; }
  [ -f "$policy" ] || { echo "$name: $policy not found" >&2; exit 2; }
  names+=("$name")
  printf '%s\n' "$bin" > "$scratch/$name.bin"
  printf '%s\n' "$policy" > "$scratch/$name.policy"
  # The suite, with this binary's own example policy.
  {
    printf 'apiVersion: driftgate.dev/v1alpha1\nkind: PolicyTest\nmetadata:\n  name: offline-bench\nspec:\n'
    printf '  policy: %s\n  now: "%s"\n  cases:\n' "$policy" "$now"
    for f in "$scratch"/reviews/*.json; do
      printf '    - name: %s\n      review: %s\n      expect: {allowed: true}\n' "$(basename "$f")" "$f"
    done
  } > "$scratch/$name.test.yaml"
done

python3 - "$scratch" "$rounds" "$now" "${names[@]}" <<'PY'
import glob, os, statistics, subprocess, sys, time

scratch, rounds, now, names = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
reviews = sorted(glob.glob(os.path.join(scratch, "reviews", "*.json")))
read = lambda n, what: open(os.path.join(scratch, f"{n}.{what}")).read().strip()

def run(name, kind):
    binary = read(name, "bin")
    if kind == "eval":
        argv = [binary, "eval", "--policy", read(name, "policy"), "--now", now, *reviews]
    else:
        argv = [binary, "policy", "test", os.path.join(scratch, f"{name}.test.yaml")]
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"{name} {kind} exited {done.returncode}:\n{done.stderr[-2000:]}")
    if kind == "eval":
        answers = [l for l in done.stdout.splitlines() if l.strip()]
        allowed = sum('"allowed":true' in l for l in answers)
        if len(answers) != len(reviews) or allowed != len(reviews):
            sys.exit(f"{name} eval: {len(answers)} answers, {allowed} admitted, for {len(reviews)} reviews")
    return elapsed

times = {(n, k): [] for n in names for k in ("eval", "test")}
for r in range(rounds):
    order = names[r % len(names):] + names[: r % len(names)]
    for kind in ("eval", "test"):
        for name in order:
            times[(name, kind)].append(run(name, kind))

base = names[0]
print(f"{len(reviews)} copies of the 30 KB review, {rounds} interleaved rounds; seconds per run, median (range); ratio to {base} within each round, median (range)")
print("| binary | eval | ratio | policy test | ratio |")
print("| --- | --- | --- | --- | --- |")
for name in names:
    cells = [name]
    for kind in ("eval", "test"):
        t = times[(name, kind)]
        ratios = [b / x for b, x in zip(times[(base, kind)], t)]
        cells.append(f"{statistics.median(t):.3f} ({min(t):.3f}–{max(t):.3f})")
        cells.append(f"{statistics.median(ratios):.2f}× ({min(ratios):.2f}–{max(ratios):.2f})")
    print("| " + " | ".join(cells) + " |")
PY

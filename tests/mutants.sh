#!/usr/bin/env bash
# Mutation testing of the security core with cargo-mutants: each mutant (a comparison flipped, a
# branch deleted, a function returning a default) must make a test fail. The counts, and every
# surviving mutant closed by a test or explained, are in tests/SECURITY.md ("Mutation testing");
# mutants that cannot change behaviour are excluded in tests/mutants.toml, each with its reason.
#
#   bash tests/mutants.sh                       # every file of the security core
#   bash tests/mutants.sh crates/driftgate-core/src/ownership.rs      # some of them
#   bash tests/mutants.sh crates/driftgate-core/src/decision/mod.rs --shard 1/4   # extra options go to cargo-mutants
#   bash tests/mutants.sh crates/driftgate-core/src/ownership.rs --iterate    # only the mutants not caught last time
#   bash tests/mutants.sh crates/driftgate-core/src/decision/window.rs --in-place  # in a worktree of its own: mutates it
#
# Hours, not minutes (~580 mutants; on 2 shared cores a mutant takes 30 s to 3 min), so not part
# of .ci/run. Two passes keep each build small: first every mutant against the tests that cover
# its file (below), then the survivors again with the library's unit tests, tests/decision_rules.rs,
# tests/properties.rs, and tests/events.rs and tests/silence.rs (what a rule's properties do). A mutant only the end-to-end suite would catch is reported missed.
# Exits 1 when a mutant survives. With --iterate the counts are of this run's mutants (the
# earlier catches are in previously_caught.txt). Results: $MUTANTS_OUT/FILE/mutants.out (the second pass) and
# mutants.out.old beside it (the first); default $CARGO_TARGET_DIR/mutants or target/mutants.
set -euo pipefail
cd "$(dirname "$0")/.."

version=27.1.0
tools=${DRIFTGATE_TOOLS:-$HOME/.cache/driftgate/tools}
if [ "$("$tools/bin/cargo-mutants" mutants --version 2>/dev/null)" != "cargo-mutants $version" ]; then
  cargo install --locked cargo-mutants --version "$version" --root "$tools"
fi
export PATH="$tools/bin:$PATH"

files=()
extra=()
for arg in "$@"; do
  if [ ${#extra[@]} -eq 0 ] && [[ $arg != -* ]]; then files+=("$arg"); else extra+=("$arg"); fi
done
if [ ${#files[@]} -eq 0 ]; then
  core=crates/driftgate-core/src
  files=("$core"/ledger/evidence.rs "$core"/ledger/controller.rs "$core"/ownership.rs "$core"/window.rs "$core"/decision/*.rs)
fi
second_extra=()
for arg in ${extra[@]+"${extra[@]}"}; do
  [ "$arg" = --iterate ] || second_extra+=("$arg")
done
out=${MUTANTS_OUT:-${CARGO_TARGET_DIR:-target}/mutants}

# The tests that cover each file: the ledger guard has no unit tests of its own (its table is
# tests/decision_rules.rs). The decision has both, but the first pass runs its unit tests only:
# with tests/decision_rules.rs each mutant compiles the crate twice (for the unit tests and for
# the integration test), and the second pass runs the table for whatever survives.
first_pass_tests() {
  case $1 in
    */decision/ledger_guard.rs) echo --test-workspace=true -C --test=decision_rules ;;
    *) echo -C --lib ;;
  esac
}

# --jobs 1 and nice: the cores are shared. --timeout bounds a mutant that loops (the tests take
# ~3 s). -C goes to the build and the test run alike; no debug info for driftgate itself makes
# each build a fifth cheaper.
# --in-place (mutate this checkout and build in its own target dir, warm: no cold build of the
# dependencies in a scratch copy) runs one mutant at a time by itself, and takes no --jobs.
jobs=(--jobs 1)
for arg in ${extra[@]+"${extra[@]}"}; do
  [ "$arg" = --in-place ] && jobs=()
done
mutants() {
  nice -n 15 cargo mutants --config tests/mutants.toml ${jobs[@]+"${jobs[@]}"} --file "$file" \
    --timeout 60 --build-timeout 900 --output "$out/$name" \
    --cargo-arg=--config=profile.dev.package.driftgate-core.debug=0 "$@"
}

# The mutants of $1 listed in the other files.
count() {
  local file=$1
  shift
  cat "$@" 2>/dev/null | grep -c "^$file:" || true
}

status=0
for file in "${files[@]}"; do
  name=${file#crates/driftgate-core/src/}
  name=${name%.rs}
  name=${name//\//-}
  mkdir -p "$out/$name"
  tests=()
  # The core's files are tested by its unit tests (the core's package) and by the tables of
  # the root package's tests/: a pass that runs those tests the whole workspace.
  for target in $(first_pass_tests "$file"); do tests+=("$target"); done
  # cargo-mutants exits 2 when a mutant survives and 3 when one timed out: the second pass,
  # which tries both again, decides.
  mutants "${tests[@]}" ${extra[@]+"${extra[@]}"} || { rc=$?; [ $rc -eq 2 ] || [ $rc -eq 3 ]; }
  mutants --iterate --baseline skip --test-workspace=true -C --lib -C --test=decision_rules -C --test=properties \
    -C --test=events -C --test=silence \
    ${second_extra[@]+"${second_extra[@]}"} || status=1
  first=$out/$name/mutants.out.old
  second=$out/$name/mutants.out
  echo "$file: $(count "$file" "$first/caught.txt" "$second/caught.txt") caught," \
    "$(count "$file" "$second/missed.txt") missed," \
    "$(count "$file" "$first/unviable.txt" "$second/unviable.txt") unviable," \
    "$(count "$file" "$second/timeout.txt") timeout"
  if [ -s "$second/missed.txt" ]; then
    sed 's/^/  survived: /' "$second/missed.txt"
  fi
done
exit $status

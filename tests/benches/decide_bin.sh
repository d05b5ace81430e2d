# Sourced by count.sh and same_core.sh: decide_bin NAME CHECKOUT prints the path of the
# checkout's decide bench binary, built in release into ${COUNT_TARGET_ROOT:-/tmp/driftgate-count}/NAME,
# and fails with a sentence when the checkout's benchmark has no DECIDE_COUNT or does not build.
decide_bin() {
  local name=$1 dir=$2 target bin
  grep -q DECIDE_COUNT "$dir/tests/benches/decide.rs" || {
    echo "$dir/tests/benches/decide.rs has no DECIDE_COUNT: copy $(pwd)/tests/benches/decide.rs there first" >&2
    return 1
  }
  target=${COUNT_TARGET_ROOT:-/tmp/driftgate-count}/$name
  bin=$(cd "$dir" && CARGO_TARGET_DIR=$target cargo bench --bench decide --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "decide" and m.get("executable"):
        print(m["executable"])')
  [ -n "$bin" ] || {
    echo "$dir: the decide benchmark did not build (run: cargo bench --bench decide --no-run there)" >&2
    return 1
  }
  echo "$bin"
}

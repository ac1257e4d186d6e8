#!/usr/bin/env bash
# The whole test suite: Criterion unit tests, Lua tests run by seer, integration tests with
# real peers. Each suite's own output is shown; the last line sums them all as
# "N passed, N failed", and the exit status is non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/.."
SEER=${SEER:-$PWD/seer}
export SEER SEER_LUA_DIR=${SEER_LUA_DIR:-$PWD/lua}
export SEER_HISTORY=    # tests never touch the user's REPL history
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/lsan.supp:print_suppressions=0}

total_pass=0
total_fail=0
total_skip=0
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT

add() { total_pass=$((total_pass + $1)); total_fail=$((total_fail + $2)); }

# A suite that dies without printing its summary counts as one failure, so a crash is never
# read as success.
echo "== unit (Criterion)"
for bin in ${UNIT_BINS:-}; do
  "$bin" --jobs 2 --verbose >"$log/unit.out" 2>&1
  rc=$?
  # --verbose for the [SKIP] lines (e.g. "skipped: no GPU"); the RUN/PASS lines are noise.
  grep -av '^\[\(RUN \|PASS\)\]' "$log/unit.out"
  total_skip=$((total_skip + $(grep -ac '^\[SKIP\]' "$log/unit.out")))
  line=$(grep -a 'Synthesis:' "$log/unit.out" | tail -n 1)
  if [[ -z "$line" ]]; then
    echo "FAIL $bin: exited $rc without a summary"
    add 0 1
    continue
  fi
  p=$(sed -E 's/.*Passing: ([0-9]+).*/\1/' <<<"$line")
  f=$(sed -E 's/.*Failing: ([0-9]+).*/\1/' <<<"$line")
  c=$(sed -E 's/.*Crashing: ([0-9]+).*/\1/' <<<"$line")
  add "$p" $((f + c))
  if [[ $rc -ne 0 && $((f + c)) -eq 0 ]]; then echo "FAIL $bin: exited $rc"; add 0 1; fi
done

run_suite() {
  local name=$1; shift
  echo "== $name"
  "$@" 2>&1 | tee "$log/$name.out"
  local rc=${PIPESTATUS[0]}
  local line
  line=$(grep -aE "^$name: [0-9]+ passed, [0-9]+ failed" "$log/$name.out" | tail -n 1)
  if [[ -z "$line" ]]; then
    echo "FAIL $name suite: exited $rc without a summary"
    add 0 1
    return
  fi
  local p f s
  p=$(sed -E 's/^[a-z]+: ([0-9]+) passed.*/\1/' <<<"$line")
  f=$(sed -E 's/.* ([0-9]+) failed.*/\1/' <<<"$line")
  s=$(grep -oE '[0-9]+ skipped' <<<"$line" | grep -oE '[0-9]+' || echo 0)
  total_skip=$((total_skip + s))
  add "$p" "$f"
  if [[ $rc -ne 0 && $f -eq 0 ]]; then echo "FAIL $name suite: exited $rc"; add 0 1; fi
}

run_suite lua "$SEER" tests/lua/run.lua
run_suite integration /usr/bin/python3 tests/integration/run.py

echo
if [[ $total_skip -gt 0 ]]; then
  echo "$total_pass passed, $total_fail failed, $total_skip skipped"
else
  echo "$total_pass passed, $total_fail failed"
fi
[[ $total_fail -eq 0 ]]

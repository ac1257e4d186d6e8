#!/usr/bin/env bash
# Runs each libFuzzer target for $1 seconds from its seed corpus (tests/fuzz/seeds/<target>,
# copied into build/fuzz/corpus/<target> which keeps what the fuzzer finds interesting).
# Crashes, leaks and timeouts are written to build/fuzz/findings/<target>/ and fail the run.
set -uo pipefail
cd "$(dirname "$0")/../.."
secs=$1; shift
status=0
for bin in "$@"; do
  name=$(basename "$bin")
  corpus=build/fuzz/corpus/$name findings=build/fuzz/findings/$name
  mkdir -p "$corpus" "$findings"
  [[ -d tests/fuzz/seeds/$name ]] && cp -n tests/fuzz/seeds/$name/* "$corpus"/ 2>/dev/null
  echo "== $name: ${secs}s"
  ASAN_OPTIONS=detect_leaks=1 "$bin" "$corpus" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
    -max_len=65536 -artifact_prefix="$findings/" -print_final_stats=1 >"build/fuzz/$name.log" 2>&1
  rc=$?
  grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb|cov:" "build/fuzz/$name.log" | tail -3
  if [[ $rc -ne 0 ]]; then
    echo "FAIL $name: exit $rc; see build/fuzz/$name.log and $findings/"
    status=1
  else
    echo "ok   $name: no finding"
  fi
done
exit $status

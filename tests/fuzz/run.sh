#!/usr/bin/env bash
# Runs each libFuzzer target for $1 seconds from its seed corpus (tests/fuzz/seeds/<target>,
# copied into build/fuzz/corpus/<target> which keeps what the fuzzer finds interesting).
# Crashes, leaks, timeouts and UndefinedBehaviorSanitizer reports are written to
# build/fuzz/findings/<target>/ and fail the run.
set -uo pipefail
cd "$(dirname "$0")/../.."
secs=$1; shift
status=0
for bin in "$@"; do
  name=$(basename "$bin")
  corpus=build/fuzz/corpus/$name findings=build/fuzz/findings/$name
  mkdir -p "$corpus" "$findings"
  [[ -d tests/fuzz/seeds/$name ]] && cp -n tests/fuzz/seeds/$name/* "$corpus"/ 2>/dev/null
  extra=() ubsan=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
  # fuzz_model_config loads a model folder per input: each load's one-line notes on stderr are
  # dropped (sanitizer reports still come through), an input may take 5 s (a hang past that is a
  # finding) and no single allocation may pass 512 MiB (its models are a few MiB)
  if [[ $name == fuzz_model_config ]]; then
    extra=(-close_fd_mask=2 -timeout=5 -malloc_limit_mb=512)
  fi
  echo "== $name: ${secs}s"
  UBSAN_OPTIONS=$ubsan ASAN_OPTIONS=detect_leaks=1 "$bin" "$corpus" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
    -max_len=65536 -artifact_prefix="$findings/" -print_final_stats=1 "${extra[@]}" >"build/fuzz/$name.log" 2>&1
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

#!/usr/bin/env bash
# Hook overhead in instructions (callgrind), which this VM's noise cannot move: for prefill (10
# forwards of 128 tokens) and decode (4 x 64 tokens), the instructions of the forward with an
# I.add at one layer, and with every hook_resid_post captured, against none; model loading is
# counted once alone and subtracted. One thread. Usage: hooks_instructions.sh SEER MODEL_DIR
set -euo pipefail
seer=$1 model=$2
command -v valgrind >/dev/null || { echo "hooks_instructions: valgrind is not installed"; exit 1; }
count() {
  SEER_THREADS=1 valgrind --tool=callgrind --callgrind-out-file=/dev/null "$seer" "$(dirname "$0")/hooks_count.lua" "$model" "$1" "$2" 2>&1 |
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
load=$(count prefill load)
for phase in prefill decode; do
  none=$(( $(count $phase none) - load ))
  for mode in add capture; do
    n=$(( $(count $phase $mode) - load ))
    awk -v p=$phase -v m=$mode -v n=$n -v b=$none 'BEGIN { printf "  %-8s %-8s %12d instructions against %12d: %+.2f%%\n", p, m, n, b, 100 * (n - b) / b }'
  done
done

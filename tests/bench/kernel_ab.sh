#!/usr/bin/env bash
# `make bench-kernel-ab`: the linear kernel of a git revision (A, default HEAD) against the working
# tree's (B), in one program, calls alternating (tests/bench/kernel_pair.c). Each side is
# engine/model/kernels.c compiled with its own -D flags (A_DEFS, B_DEFS) and its global symbols
# renamed with objcopy. Which of the two objects sits where in the program moved timings by up
# to 5% with identical code here, so the pair runs twice, the second time with the two objects'
# places swapped, and the ratio printed per shape is the geometric mean of the two (B's time
# over A's: below 1, B is faster).
# Environment: A_REF (a git revision, or "." for the working tree), A_DEFS, B_DEFS (e.g.
# "-DSEER_KB=512"), TOKENS (default 16), and kernel_pair's REPS, THREADS, COLD, HUGE, DT.
# Needs CC, CFLAGS_ALL and LIBS_ALL from the Makefile (make bench-kernel-ab sets them).
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${CC:?run through make bench-kernel-ab}" "${CFLAGS_ALL:?}" "${LIBS_ALL:?}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ref=${A_REF:-HEAD}
if [ "$ref" = . ]; then
  cp engine/model/kernels.c "$tmp/ref.c"
elif ! git show "$ref:engine/model/kernels.c" >"$tmp/ref.c" 2>/dev/null; then
  echo "kernel_ab: no engine/model/kernels.c at revision '$ref' (A_REF names a git revision, or . for the working tree)" >&2
  exit 2
fi
cp engine/model/kernels.c "$tmp/tree.c"
# obj SRC DEFS PREFIX: SRC compiled with DEFS, every global symbol it defines renamed PREFIX_name
obj() {
  # shellcheck disable=SC2086 # DEFS and the flags are word lists
  $CC $CFLAGS_ALL -Iengine/model $2 -c "$tmp/$1.c" -o "$tmp/$1.$3.raw.o"
  local args=() s
  for s in $(nm -g --defined-only "$tmp/$1.$3.raw.o" | awk '{print $3}'); do args+=(--redefine-sym "$s=$3_$s"); done
  objcopy "${args[@]}" "$tmp/$1.$3.raw.o" "$tmp/$1.$3.o"
}
obj ref "${A_DEFS:-}" A; obj tree "${B_DEFS:-}" B  # first program: A = the revision
obj tree "${B_DEFS:-}" A; obj ref "${A_DEFS:-}" B  # second: the places swapped
# shellcheck disable=SC2086
$CC $CFLAGS_ALL -o "$tmp/pair1" tests/bench/kernel_pair.c "$tmp/ref.A.o" "$tmp/tree.B.o" $LIBS_ALL
# shellcheck disable=SC2086
$CC $CFLAGS_ALL -o "$tmp/pair2" tests/bench/kernel_pair.c "$tmp/tree.A.o" "$tmp/ref.B.o" $LIBS_ALL
echo "== A: kernels.c at $ref ${A_DEFS:+($A_DEFS)}; B: the working tree ${B_DEFS:+($B_DEFS)}; ${TOKENS:-16} tokens, ${THREADS:-1} thread(s)${COLD:+, COLD=$COLD}${HUGE:+, HUGE=$HUGE}"
rc=0
"$tmp/pair1" "${TOKENS:-16}" >"$tmp/out1" || rc=$?
"$tmp/pair2" "${TOKENS:-16}" >"$tmp/out2" || rc=$?
echo "  A = the revision, B = the working tree:"; sed 's/^/    /' "$tmp/out1"
echo "  places swapped, A = the working tree, B = the revision:"; sed 's/^/    /' "$tmp/out2"
# per shape: sqrt(r1 / r2), r1 = B/A with B the tree, r2 = B/A with B the revision
paste <(awk '{for (i = 1; i <= NF; i++) if ($i == "B/A") print $1, $2, $(i + 1)}' "$tmp/out1") \
      <(awk '{for (i = 1; i <= NF; i++) if ($i == "B/A") print $(i + 1)}' "$tmp/out2") |
  awk '{g = sqrt($3 / $4); s += log(g); n++; printf "  %-4s %-9s tree/revision time %.3f\n", $1, $2, g}
       END {if (n) printf "  geometric mean: %.3f (below 1: the working tree is faster)\n", exp(s / n)}'
[ "$rc" = 0 ] || echo "kernel_ab: the two kernels wrote different bits (RESULTS DIFFER above)" >&2
exit "$rc"

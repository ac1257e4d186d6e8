#!/bin/bash
# The GPU checks in one run, on a machine with an NVIDIA GPU and no build tools of seer's
# (the device machine the sessions borrow): the CUDA kernel tests, the whole-model tests and
# `make bench-gpu`, each under its own time limit, logs under $OUT.
#
# Prepare on the build machine (from the repository root):
#   bash tests/gpu/device_check.sh --pack     # builds and fills .devkit/ (binaries + their libraries)
# and on the GPU machine, with .devkit carried along:
#   bash tests/gpu/device_check.sh [STEPS]    # STEPS: any of smi kernels gpu lua bench2b bench9b peer peer9b memcheck chunks
#                                             (default: smi kernels gpu lua bench2b bench9b peer)
# The shared libraries the binaries need are used from .devkit/lib only where the GPU machine's
# loader does not have them (never the C library or libstdc++).
set -u
K=.devkit
if [ "${1:-}" = --pack ]; then
    make -j2 build/tests/test_cuda_kernels build/tests/test_cuda_gpu build/bench/gpu_bench seer >/dev/null || exit 1
    rm -rf "$K" && mkdir -p "$K/lib" "$K/bin" || exit 1
    for l in $(ldd build/tests/test_cuda_gpu | awk '/=>/{print $3}'); do
        case $(basename "$l") in libc.so* | libm.so* | libpthread* | libdl* | libresolv* | ld-linux* | libstdc++* | libgcc_s*) ;;
        *) cp -L "$l" "$K/lib/" ;; esac
    done
    for b in build/tests/test_cuda_kernels build/tests/test_cuda_gpu build/bench/gpu_bench seer; do
        objcopy --strip-debug "$b" "$K/bin/$(basename "$b")" || exit 1
    done
    du -sh "$K"
    exit 0
fi
OUT=${OUT:-/tmp/seer-gpu-out}
mkdir -p "$OUT"
steps=${*:-smi kernels gpu lua bench2b bench9b peer}
has() { case " $steps " in *" $1 "*) return 0 ;; esac; return 1; }
libdir=$(mktemp -d)
for f in "$K"/lib/*; do
    n=$(basename "$f")
    ldconfig -p | awk '{print $1}' | grep -qx "$n" || ln -s "$PWD/$f" "$libdir/$n"
done
cub=$(find /opt /usr/local /usr/lib -name 'libcublas.so.13' 2>/dev/null | head -1)
export SEER_LUA_DIR=$PWD/lua
run() { # NAME LIMIT CMD...: the command's output in $OUT/NAME.log, its status last
    local name=$1 lim=$2; shift 2
    local t0=$SECONDS
    LD_LIBRARY_PATH=$libdir${cub:+:$(dirname "$cub")} timeout -k 5 "$lim" "$@" >"$OUT/$name.log" 2>&1
    echo "== $name: rc $? in $((SECONDS - t0)) s" | tee -a "$OUT/$name.log"
}
if has smi; then
    { nvidia-smi; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used --format=csv
      echo "cublas: ${cub:-not found}"; echo "libs used from .devkit: $(ls "$libdir" | tr '\n' ' ')"; } >"$OUT/smi.log" 2>&1
    run devices 30 "$K/bin/seer" model info --devices
fi
has kernels && run kernels 120 "$K/bin/test_cuda_kernels" --verbose -j4 &
has gpu && run gpu 120 "$K/bin/test_cuda_gpu" --verbose -j4 &
wait
# the Lua API on the GPU (generate_batch with per-sequence hooks)
has lua && run lua 120 "$K/bin/seer" tests/lua/run.lua tests/lua/test_cuda_batch.lua
has bench2b && run bench2b 100 "$K/bin/gpu_bench" 2b
has bench9b && run bench9b 110 "$K/bin/gpu_bench" 9b
has peer && run peer 100 python3 tests/bench/gpu_transformers.py 2b
has peer9b && run peer9b 150 python3 tests/bench/gpu_transformers.py 9b
# compute-sanitizer's memcheck over the kernel tests (out-of-bounds and misaligned accesses)
# (--report-api-errors no: seer_cuda_fn asks each embedded module in turn for a kernel, and
# the misses are API errors by design)
for t in test_cuda_kernels test_cuda_gpu; do
    has memcheck && run "memcheck-$t" 150 compute-sanitizer --tool memcheck --report-api-errors no \
        --target-processes all --error-exitcode 9 "$K/bin/$t" -j1
done
# the attention form of prefill with other chunk sizes (SEER_ATTN_MAX_CHUNK)
for c in 512 1024 4096; do
    has chunks && run "chunk$c" 60 env SEER_ATTN_MAX_CHUNK=$c "$K/bin/gpu_bench" 2b
done
for f in "$OUT"/*.log; do # tests and the sanitizer: their verdicts; the rest: the end of the log
    echo "######## $(basename "$f")"
    case $(basename "$f") in
    kernels.log | gpu.log | memcheck-*) grep -E 'FAIL|CRASH|Synthesis|ERROR SUMMARY|Invalid|== ' "$f" | head -40 ;;
    smi.log) grep -E 'H200|H100|cublas|libs used' "$f" ;;
    *) tail -c 2500 "$f" ;;
    esac
done
# one archive of the logs (the device tool brings back at most 8 files)
tar -C "$OUT" -czf /tmp/seer-gpu-logs.tgz . && rm -f "$OUT"/*.log && mv /tmp/seer-gpu-logs.tgz "$OUT/logs.tgz"

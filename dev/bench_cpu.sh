#!/usr/bin/env bash
# bench_cpu.sh: step times of the CPU reference trainer, in one run, and the ratios docs/cpu-results.md quotes:
#   no-BLAS / BLAS      the plain-C GEMM build (test/build/train_cpu_noblas) against ./train_cpu with OpenBLAS
#                       (when ./train_cpu has none, the row says so and the ratio is of two plain-C builds);
#   bfloat16 / float32  and  float8 / float32   of ./train_cpu (the storage and FP8 rounding passes).
# The model of issue 13's measurements: L=4, C=128, NH=4 (d4), byte vocabulary, B=4, T=64. Each run trains
# WARMUP + TIMED steps; the figures are the median and 90th percentile of the TIMED steps' times (the log's
# "ms"): a spread far above the median means threads competing for the cores. Not a test: it only measures.
#   bash dev/bench_cpu.sh              (builds ./train_cpu and the plain-C build first)
# Environment: DATA (text file, default ../shared/data/tinyshakespeare.txt; a generated text if absent),
# TIMED (default 40), OMP_NUM_THREADS as usual (default: all cores). OPENBLAS_NUM_THREADS is not needed:
# the trainer runs OpenBLAS single-threaded inside its OpenMP threads itself.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../test/common.sh"
test_init
test_tmpdir TMP bench_cpu
make --no-print-directory train_cpu test/build/train_cpu_noblas >/dev/null # the figures are of this source

test_data_dir "$TMP/data" text >/dev/null # the speed does not depend on the text

WARMUP=5
TIMED=${TIMED:-40}
echo "d4 (L=4 C=128 NH=4), V=256, B=4, T=64; $WARMUP warmup + $TIMED timed steps;" \
    "OMP_NUM_THREADS=${OMP_NUM_THREADS:-unset} on $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg)"

declare -A MEDIAN P90
run() { # NAME BINARY TRAINER-FLAGS...
    local name=$1 binary=$2 log=$TMP/$1.jsonl
    shift 2
    "$binary" --model_size d4 --vocab 256 --batch_size 4 --seq_len 64 --steps $((WARMUP + TIMED)) \
        --train_data "$TMP/data/text_train_000000.bin" --val_data "" --output_dir "" --log_file "$log" \
        "$@" >"$TMP/out.txt"
    [ "$name" = float32 ] || [ "$name" = noblas_float32 ] && # the GEMM the header names, and any note on it
        echo "$binary: $(grep -o 'GEMM [^|]*' "$TMP/out.txt")$(grep '^note: OpenBLAS' "$TMP/out.txt" | sed 's/^/; /')"
    read -r MEDIAN[$name] P90[$name] < <("$PY" - "$log" "$WARMUP" <<'PYEOF'
import json, statistics, sys
ms = sorted(r["ms"] for r in map(json.loads, open(sys.argv[1])) if r["type"] == "step" and r["step"] > int(sys.argv[2]))
print("%.2f %.2f" % (statistics.median(ms), ms[min(len(ms) - 1, int(0.9 * len(ms)))]))
PYEOF
    )
}
NAMES=(float32 bfloat16 float8_delayed float8_current noblas_float32 noblas_float8_delayed)
run float32 ./train_cpu --dtype float32
run bfloat16 ./train_cpu --dtype bfloat16
run float8_delayed ./train_cpu --dtype float8 --fp8_recipe delayed
run float8_current ./train_cpu --dtype float8 --fp8_recipe current
run noblas_float32 test/build/train_cpu_noblas --dtype float32
run noblas_float8_delayed test/build/train_cpu_noblas --dtype float8 --fp8_recipe delayed

printf '\n| build, dtype | median ms/step | p90 ms/step | tokens/s (median) |\n|---|---|---|---|\n'
for name in "${NAMES[@]}"; do
    printf '| %s | %s | %s | %.0f |\n' "$name" "${MEDIAN[$name]}" "${P90[$name]}" \
        "$("$PY" -c "print(256 * 1000 / ${MEDIAN[$name]})")"
done
ratio() { "$PY" -c "print('%.2fx' % ($1 / $2))"; }
printf '\n| ratio (median step times) | value |\n|---|---|\n'
printf '| no-BLAS / BLAS, float32 | %s |\n' "$(ratio "${MEDIAN[noblas_float32]}" "${MEDIAN[float32]}")"
printf '| bfloat16 / float32 | %s |\n' "$(ratio "${MEDIAN[bfloat16]}" "${MEDIAN[float32]}")"
printf '| float8 / float32 (delayed) | %s |\n' "$(ratio "${MEDIAN[float8_delayed]}" "${MEDIAN[float32]}")"
printf '| float8 / float32 (current) | %s |\n' "$(ratio "${MEDIAN[float8_current]}" "${MEDIAN[float32]}")"
printf '| float8 / float32 (plain-C GEMM) | %s |\n' "$(ratio "${MEDIAN[noblas_float8_delayed]}" "${MEDIAN[noblas_float32]}")"

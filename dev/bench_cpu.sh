#!/usr/bin/env bash
# bench_cpu.sh: tokens/s of the CPU reference trainer in float32, bfloat16 and float8, in one run.
#
# One configuration: the d4 preset (L=4, C=128, NH=4), byte vocabulary (V=256), B=4, T=256. Each dtype
# trains 13 steps; the first 3 are warmup, and the reported figure is the median of the per-step
# tokens/s of the other 10 (from the --log_file JSON lines). Not a test: it only measures.
#   bash dev/bench_cpu.sh            (runs make train_cpu first)
# Environment: DATA (text file, default ../shared/data/tinyshakespeare.txt; a generated text if absent),
# OMP_NUM_THREADS / OPENBLAS_NUM_THREADS as usual (default: all cores).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../test/common.sh"
test_init
test_tmpdir TMP bench_cpu
make --no-print-directory train_cpu >/dev/null # always: the figures must be of the current source

test_data_dir "$TMP/data" text # without $DATA a generated text: the speed does not depend on the text

WARMUP=3
TIMED=10
blas=$(ldd ./train_cpu 2>/dev/null | grep -q openblas && echo "OpenBLAS" || echo "plain-C GEMM")
echo "train_cpu: d4 (L=4 C=128 NH=4), V=256, B=4, T=256; $WARMUP warmup + $TIMED timed steps; $blas;" \
    "OMP_NUM_THREADS=${OMP_NUM_THREADS:-unset} on $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg)"
declare -A TPS
NAMES=(float32 bfloat16 "float8 delayed" "float8 current")
declare -A FLAGS=([float32]="--dtype float32" [bfloat16]="--dtype bfloat16"
                  ["float8 delayed"]="--dtype float8 --fp8_recipe delayed"
                  ["float8 current"]="--dtype float8 --fp8_recipe current")
for name in "${NAMES[@]}"; do
    read -r -a flags <<<"${FLAGS[$name]}"
    log=$TMP/${name// /_}.jsonl
    ./train_cpu --model_size d4 --vocab 256 --batch_size 4 --seq_len 256 --steps $((WARMUP + TIMED)) \
        --train_data "$TMP/data/text_train_000000.bin" --val_data "" --output_dir "" --log_file "$log" \
        "${flags[@]}" >"$TMP/out.txt"
    TPS[$name]=$("$PY" - "$log" "$WARMUP" <<'PYEOF'
import json, statistics, sys
rates = [r["tokens_per_second"] for r in map(json.loads, open(sys.argv[1])) if r["type"] == "step"]
print("%.0f" % statistics.median(rates[int(sys.argv[2]):]))
PYEOF
    )
done
printf '\n| dtype | tokens/s (median of %d steps) | vs float32 |\n|---|---|---|\n' "$TIMED"
for name in "${NAMES[@]}"; do
    printf '| %s | %s | %s |\n' "$name" "${TPS[$name]}" "$("$PY" -c "print('%.2fx' % (${TPS[$name]} / ${TPS[float32]}))")"
done

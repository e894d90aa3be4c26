#!/usr/bin/env bash
# test_recompute.sh: --recompute 1 keeps one layer of activations and recomputes each layer's forward in the
# backward. The recomputation is the same arithmetic on the same inputs with the same FP8 scales, so a run
# must be bit-identical to the run without it: final model and state files (cmp) and every logged loss,
# in float32, bfloat16, float8 delayed and float8 current (d2 model, B=2, T=64, 4 steps with an evaluation), and
# for a Llama d2 in bfloat16 and float8 delayed.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
test_init
test_tmpdir TMP test_recompute
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
[ -x ./train_cpu ] || make train_cpu >/dev/null
test_data_dir "$TMP/data" text
COMMON=(--model_size d2 --vocab 256 --train_data "$TMP/data/text_train_*.bin" --val_data "$TMP/data/text_val_*.bin"
    --seq_len 64 --batch_size 2 --steps 4 --val_every 2 --val_batches 2 --lr 1e-3 --fp8_stats_every 1)
TIMING='s/"ms":[^,]*,"tokens_per_second":[^,]*,//' # the only fields that may differ
for case in "float32" "bfloat16" "float8 --fp8_recipe delayed" "float8 --fp8_recipe current" \
    "bfloat16 --arch llama" "float8 --fp8_recipe delayed --arch llama"; do
    read -ra flags <<<"--dtype $case"
    for r in 0 1; do
        ./train_cpu "${COMMON[@]}" "${flags[@]}" --recompute $r --output_dir "$TMP/r$r" \
            --log_file "$TMP/r$r.jsonl" >/dev/null
    done
    status=0
    cmp -s "$TMP/r0/model_00000004.bin" "$TMP/r1/model_00000004.bin" &&
        cmp -s "$TMP/r0/state_00000004_00000.bin" "$TMP/r1/state_00000004_00000.bin" &&
        cmp -s <(sed -E "$TIMING" "$TMP/r0.jsonl") <(sed -E "$TIMING" "$TMP/r1.jsonl") || status=1
    result $status "--dtype $case: --recompute 1 bit-identical to --recompute 0 (files, losses, fp8 telemetry)"
    rm -rf "$TMP/r0" "$TMP/r1"
done
finish

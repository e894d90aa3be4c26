#!/usr/bin/env bash
# perf_model.sh: the expected step of GPT-2 124M (B=16) and 1.5B (B=8) at T=1024 on one H200, before and after
# the GPU-speed work, from --dry_run's time plan (time_plan.h: FLOPs and DRAM bytes per kernel family at
# the H200's data-sheet rates and the calibrated efficiencies, no GPU needed). "before": the exact attention (our CUDA-core kernels, which were the whole
# attention then); "after": cuDNN's fused attention. Both count today's fused casts, epilogues and one-pass
# kernels: the unfused memory traffic of before is not modelled, so "before" is a lower bound of what it
# was. The GPU table of scripts/gpu_check.sh prints the plan beside each measured run.
# The speed-up table adds two bounds at the same rates: the GEMMs' alone, and float8's step were its casts
# free (its GEMMs, the attention, bfloat16's memory-bound work and the launches): no fusion of the casts can pass it, so a
# target above it needs other rates (a GPU's measurement) or less BF16 work (the LM head, the attention).
# Usage: dev/perf_model.sh [extra --dry_run flags, e.g. measured --plan_* rates]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[ -x ./train_cpu ] || make -s train_cpu
echo "| model | dtype | attention | GEMMs ms | attention ms | memory-bound ms | launch and host ms | step ms |" \
    "tokens/s | MFU |"
echo "|---|---|---|---|---|---|---|---|---|---|"
declare -A step gemm memory attn launch
for model in 124M 1.5B; do
    B=16
    [ "$model" = 1.5B ] && B=8
    for dtype in bfloat16 float8; do
        for attention in exact fast; do
            plan=$(./train_cpu --dry_run 1 --model_size "$model" --batch_size $B --seq_len 1024 --dtype "$dtype" \
                --attention "$attention" "$@")
            ms() { sed -n "s/^  $1  *\([0-9.]*\) ms.*/\1/p" <<<"$plan"; }
            total=$(sed -n 's/^plan_step_ms \([0-9.]*\).*/\1/p' <<<"$plan")
            tokens=$(sed -n 's/.*; \([0-9]*\) tokens\/s per process.*/\1/p' <<<"$plan")
            mfu=$(sed -n 's/^  MFU \([0-9.]*%\).*/\1/p' <<<"$plan")
            step["$model $dtype $attention"]=$total
            gemm["$model $dtype"]=$(ms GEMMs) memory["$model $dtype"]=$(ms memory-bound)
            attn["$model $attention"]=$(ms attention) launch["$model"]=$(ms 'launch and host')
            echo "| $model | $dtype | $attention | $(ms GEMMs) | $(ms attention) | $(ms memory-bound) |" \
                "$(ms 'launch and host') | $total |" \
                "$tokens | $mfu |"
        done
    done
done
echo
echo "| model | float8 / bfloat16 speed-up, exact attention | with the fast attention | GEMMs alone |" \
    "bound: fast attention, float8's casts free | the project's target |"
echo "|---|---|---|---|---|---|"
for model in 124M 1.5B; do
    target=1.25
    [ "$model" = 1.5B ] && target=1.5
    ratio() { awk -v b="$1" -v f="$2" 'BEGIN { printf "%.2f", b / f }'; }
    free_casts=$(awk -v g="${gemm["$model float8"]}" -v a="${attn["$model fast"]}" \
        -v m="${memory["$model bfloat16"]}" -v l="${launch["$model"]}" 'BEGIN { print g + a + m + l }')
    echo "| $model | $(ratio "${step["$model bfloat16 exact"]}" "${step["$model float8 exact"]}") |" \
        "$(ratio "${step["$model bfloat16 fast"]}" "${step["$model float8 fast"]}") |" \
        "$(ratio "${gemm["$model bfloat16"]}" "${gemm["$model float8"]}") |" \
        "$(ratio "${step["$model bfloat16 fast"]}" "$free_casts") | >= $target |"
done

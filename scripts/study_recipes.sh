#!/usr/bin/env bash
# study_recipes.sh: the FP8 recipe study of docs/fp8-recipes.md on the CPU trainer. bfloat16 against float8
# delayed, current, blockwise and mxfp8, SEEDS seeds each (default 3), on tinyshakespeare byte-level:
# d6 (L=6, C=384, NH=6), B=8, T=128, STEPS steps (default 500), lr 1e-3 with 30 warmup steps and a cosine to
# 0.1 of it, validation every 100 steps on 20 batches, FP8 telemetry every step. Then
# scripts/study_report.py writes OUT/report.md (the tables) and OUT/recipes.png (the curves).
# Usage: scripts/study_recipes.sh [path/to/tinyshakespeare.txt]   (downloads it when the path does not exist)
# Environment: OUT (default out/study), SEEDS, STEPS, RECIPES (default "bfloat16 delayed current blockwise
# mxfp8"). A run whose log is complete is not run again, so an interrupted study continues where it stopped.
# About 1.8 hours on 2 cores (0.75 s per step with OpenBLAS's AVX-512 kernels).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
data_file="${1:-../shared/data/tinyshakespeare.txt}"
out="${OUT:-out/study}"
seeds="${SEEDS:-3}"
steps="${STEPS:-500}"
read -r -a recipes <<<"${RECIPES:-bfloat16 delayed current blockwise mxfp8}"
mkdir -p "$out/data"
if [ -f "$data_file" ]; then
    python3 scripts/prepare_data.py --input "$data_file" --output_dir "$out/data" --tokenizer byte >/dev/null
else
    echo "$data_file not found: downloading tinyshakespeare"
    python3 scripts/prepare_data.py --output_dir "$out/data" --tokenizer byte >/dev/null
fi
make --no-print-directory train_cpu >/dev/null
common=(--model_size d6 --vocab 256 --seq_len 128 --batch_size 8 --steps "$steps" --lr 1e-3 --warmup_steps 30
        --final_lr_frac 0.1 --val_every 100 --val_batches 20 --output_dir ""
        --train_data "$out/data/tinyshakespeare_train_*.bin" --val_data "$out/data/tinyshakespeare_val_*.bin")
total=$((seeds * ${#recipes[@]})) done_runs=0
for seed in $(seq 1 "$seeds"); do
    for recipe in "${recipes[@]}"; do
        done_runs=$((done_runs + 1))
        log="$out/${recipe}_seed$seed.jsonl"
        if [ -f "$log" ] && grep -q '"type":"energy"' "$log"; then continue; fi # complete
        if [ "$recipe" = bfloat16 ]; then flags=(--dtype bfloat16); else
            flags=(--dtype float8 --fp8_recipe "$recipe" --fp8_stats_every 1)
        fi
        echo "run $done_runs/$total: $recipe, seed $seed ($(date +%H:%M))"
        ./train_cpu "${common[@]}" "${flags[@]}" --seed "$seed" --log_file "$log" >"$out/${recipe}_seed$seed.txt"
        grep '^val ' "$out/${recipe}_seed$seed.txt" | tail -n 1
    done
done
python3 scripts/study_report.py "$out" --recipes "${recipes[@]}" --seeds "$seeds"

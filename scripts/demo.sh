#!/usr/bin/env bash
# demo.sh: prepare tinyshakespeare (byte-level), train a small GPT on the CPU in float32, bfloat16 and
# float8 (both scaling recipes), and print the final validation losses side by side. Each run shows which
# of the four it is and, every PROGRESS_EVERY steps, a progress line with the time left in the run and in
# the demo (estimated from the steps so far). About 3 minutes on 2 cores (README).
# Usage: scripts/demo.sh [path/to/tinyshakespeare.txt]   (downloads it when the path does not exist)
# Environment: STEPS (default 300), PROGRESS_EVERY (default 50).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
data_file="${1:-../shared/data/tinyshakespeare.txt}"
if [ -f "$data_file" ]; then
    python3 scripts/prepare_data.py --input "$data_file" --output_dir data --tokenizer byte
else
    echo "$data_file not found: downloading tinyshakespeare"
    python3 scripts/prepare_data.py --output_dir data --tokenizer byte
fi
steps="${STEPS:-300}"
progress_every="${PROGRESS_EVERY:-50}"
common=(--model_size d4 --vocab 256 --seq_len 128 --batch_size 8 --steps "$steps" --lr 3e-3 --warmup_steps 20
        --final_lr_frac 0.1 --val_every 100 --val_batches 20 --tokenizer data/tinyshakespeare_tokenizer.bin
        --train_data 'data/tinyshakespeare_train_*.bin' --val_data 'data/tinyshakespeare_val_*.bin')
runs=(float32 bfloat16 float8:delayed float8:current)

duration() { # seconds -> "1 min 05 s" or "42 s"
    if [ "$1" -ge 60 ]; then printf '%d min %02d s' $(($1 / 60)) $(($1 % 60)); else printf '%d s' "$1"; fi
}

# The trainer's output, reduced to its validation lines, notes and sample (the generated text, which may
# span lines, runs up to the next line the trainer prints) and a progress line every progress_every steps.
# Reads RUN_INDEX and RUN_NAME; the estimate assumes the runs still to come take as long as this one.
show_progress() {
    local start=$SECONDS line step elapsed left demo_left in_sample=0
    while IFS= read -r line; do
        case "$line" in
        "val "* | note:*) echo "    $line" ;;
        "sample |"*)
            in_sample=1
            echo "    $line"
            ;;
        "energy |"* | "fp8 "* | "checkpoint |"*) in_sample=0 ;;
        step*)
            in_sample=0
            step=${line#step }
            step=${step%%/*}
            step=${step// /}
            if [ $((step % progress_every)) = 0 ] || [ "$step" = "$steps" ]; then
                elapsed=$((SECONDS - start))
                left=$((elapsed * (steps - step) / step))
                demo_left=$((left + (${#runs[@]} - RUN_INDEX) * elapsed * steps / step))
                echo "    run $RUN_INDEX/${#runs[@]} $RUN_NAME | step $step/$steps | $(duration $elapsed) so far" \
                    "| about $(duration $left) left in this run, $(duration $demo_left) in the demo"
            fi
            ;;
        *) [ $in_sample = 1 ] && echo "    $line" ;;
        esac
    done
}

mkdir -p out/demo
demo_start=$SECONDS
RUN_INDEX=0
for run in "${runs[@]}"; do
    RUN_INDEX=$((RUN_INDEX + 1))
    dtype="${run%%:*}"; recipe="${run#*:}"; [ "$recipe" = "$run" ] && recipe=delayed
    RUN_NAME="${run/:/_}"
    echo "== run $RUN_INDEX/${#runs[@]}: $RUN_NAME ($steps steps)"
    ./train_cpu "${common[@]}" --dtype "$dtype" --fp8_recipe "$recipe" --output_dir "out/demo/$RUN_NAME" \
        --overwrite 1 --log_file "out/demo/$RUN_NAME.jsonl" --sample_every "$steps" --sample_len 120 | show_progress
done
python3 - "$(duration $((SECONDS - demo_start)))" <<'PY'
import json, sys
rows = []
for name in ["float32", "bfloat16", "float8_delayed", "float8_current"]:
    recs = [json.loads(l) for l in open(f"out/demo/{name}.jsonl")]
    val = [r for r in recs if r["type"] == "val"][-1]
    steps = [r for r in recs if r["type"] == "step"]
    tps = sorted(r["tokens_per_second"] for r in steps)[len(steps) // 2]
    rows.append((name, val["val_loss"], val["perplexity"], tps))
base = rows[0][1]
print(f"\nthe four runs took {sys.argv[1]}")
print("\n| run | final val loss | perplexity | vs float32 | tokens/s (median) |")
print("|---|---|---|---|---|")
for name, loss, ppl, tps in rows:
    print(f"| {name} | {loss:.4f} | {ppl:.3f} | {100 * (loss - base) / base:+.2f}% | {tps:.0f} |")
PY

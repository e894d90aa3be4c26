#!/usr/bin/env bash
# demo.sh: prepare tinyshakespeare (byte-level), train a small GPT on the CPU in float32, bfloat16 and
# float8 (both scaling recipes), and print the final validation losses side by side.
# Usage: scripts/demo.sh [path/to/tinyshakespeare.txt]   (downloads it when the path does not exist)
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
common=(--model_size d2 --vocab 256 --seq_len 128 --batch_size 16 --steps "$steps" --lr 3e-3 --warmup_steps 20
        --final_lr_frac 0.1 --val_every 100 --val_batches 20 --tokenizer data/tinyshakespeare_tokenizer.bin
        --train_data 'data/tinyshakespeare_train_*.bin' --val_data 'data/tinyshakespeare_val_*.bin')
mkdir -p out/demo
for run in float32 bfloat16 float8:delayed float8:current; do
    dtype="${run%%:*}"; recipe="${run#*:}"; [ "$recipe" = "$run" ] && recipe=delayed
    name="${run/:/_}"
    echo "== $name"
    ./train_cpu "${common[@]}" --dtype "$dtype" --fp8_recipe "$recipe" --output_dir "out/demo/$name" \
        --log_file "out/demo/$name.jsonl" --sample_every "$steps" --sample_len 120 | grep -E "^(val|sample)"
done
python3 - <<'PY'
import json
rows = []
for name in ["float32", "bfloat16", "float8_delayed", "float8_current"]:
    recs = [json.loads(l) for l in open(f"out/demo/{name}.jsonl")]
    val = [r for r in recs if r["type"] == "val"][-1]
    steps = [r for r in recs if r["type"] == "step"]
    tps = sorted(r["tokens_per_second"] for r in steps)[len(steps) // 2]
    rows.append((name, val["val_loss"], val["perplexity"], tps))
base = rows[0][1]
print("\n| run | final val loss | perplexity | vs float32 | tokens/s (median) |")
print("|---|---|---|---|---|")
for name, loss, ppl, tps in rows:
    print(f"| {name} | {loss:.4f} | {ppl:.3f} | {100 * (loss - base) / base:+.2f}% | {tps:.0f} |")
PY

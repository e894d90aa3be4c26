#!/usr/bin/env bash
# study_grad_reduce.sh: --grad_reduce_dtype bfloat16 against float32, measured: train_cpu as 2 MPI processes
# (ZeRO-1) on byte-level tinyshakespeare, a d4 model in float8, each with two seeds. The seeds' spread is the
# bound: a gradient sum in BF16 that changes the training less than another initialisation and data order
# does is not what decides a run. Prints one table row per run and the differences (docs/grad-reduce-bf16.md).
# Usage: dev/study_grad_reduce.sh [TEXT] [STEPS]   (TEXT: default ../shared/data/tinyshakespeare.txt; STEPS 300)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
text=${1:-../shared/data/tinyshakespeare.txt}
steps=${2:-300}
out=${OUT:-out/study_grad_reduce}
mkdir -p "$out/data"
[ -x ./train_cpu ] || make -s train_cpu
python3 scripts/prepare_data.py --input "$text" --output_dir "$out/data" --tokenizer byte >/dev/null
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
mpi=(mpirun --oversubscribe -x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS)
[ "$(id -u)" = 0 ] && mpi+=(--allow-run-as-root)
for seed in 1337 42; do
    for dtype in float32 bfloat16; do
        name="${dtype}_seed$seed"
        "${mpi[@]}" -np 2 ./train_cpu --model_size d4 --vocab 256 --seq_len 128 --batch_size 8 --steps "$steps" \
            --dtype float8 --zero_stage 1 --grad_reduce_dtype "$dtype" --seed "$seed" --shuffle 1 --lr 1e-3 \
            --warmup_steps 20 --val_every "$steps" --val_batches 20 \
            --train_data "$out/data/tinyshakespeare_train_*.bin" --val_data "$out/data/tinyshakespeare_val_*.bin" \
            --output_dir "" --log_file "$out/$name.jsonl" >"$out/$name.txt" 2>&1
    done
done
python3 - "$out" "$steps" <<'PY'
import json, sys
out, steps = sys.argv[1], int(sys.argv[2])
def run(name):
    records = [json.loads(line) for line in open(f"{out}/{name}.jsonl")]
    train = [r["loss"] for r in records if r.get("type") == "step"]
    val = [r["val_loss"] for r in records if r.get("type") == "val"][-1]
    return train, val
tail = 50  # the last 50 steps' mean train loss: one step's loss is one batch's, noisy
print("| run | final val loss | mean train loss, last 50 steps |")
print("|---|---:|---:|")
runs = {}
for seed in (1337, 42):
    for dtype in ("float32", "bfloat16"):
        train, val = run(f"{dtype}_seed{seed}")
        runs[dtype, seed] = (val, sum(train[-tail:]) / tail, train)
        print(f"| {dtype}, seed {seed} | {val:.4f} | {runs[dtype, seed][1]:.4f} |")
for seed in (1337, 42):
    f, b = runs["float32", seed], runs["bfloat16", seed]
    worst = max(abs(x - y) for x, y in zip(f[2], b[2]))
    print(f"seed {seed}: bfloat16 - float32: val {b[0] - f[0]:+.4f}, train (last {tail}) {b[1] - f[1]:+.4f}, "
          f"largest one-step train difference {worst:.4f}")
for dtype in ("float32", "bfloat16"):
    a, b = runs[dtype, 1337], runs[dtype, 42]
    print(f"{dtype}: seed 42 - seed 1337: val {b[0] - a[0]:+.4f}, train (last {tail}) {b[1] - a[1]:+.4f}")
PY

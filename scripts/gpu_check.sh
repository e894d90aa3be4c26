#!/usr/bin/env bash
# gpu_check.sh: everything that needs a GPU, in one run sized for under 8 minutes on one H200:
# build, `make test_gpu` (CUDA trainer vs the CPU reference), the GEMM and kernel benchmarks, and
# 30-step runs of 124M and 1.5B (d48) in bfloat16 and float8; prints a table last.
# Usage: scripts/gpu_check.sh [DATA=path/to/text]   (writes logs under ${OUT:-out/gpu_check})
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="${OUT:-out/gpu_check}"
mkdir -p "$out"
data_file="${DATA:-../shared/data/tinyshakespeare.txt}"
[ -f "$data_file" ] || data_file=data/tinyshakespeare.txt
log() { echo "== $*"; }
jobs_flag="-j$(nproc)"
log "nvidia-smi"; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
log "build"
make $jobs_flag train train_cpu test/build/compare_debug_state build/bench_gemm build/bench_kernels 2>&1 | tail -n 3
log "make test_gpu"
timeout 240 make test_gpu 2>&1 | tee "$out/test_gpu.txt" | tail -n 30
log "GEMM benchmark"
timeout 90 ./build/bench_gemm 8192 2>&1 | tee "$out/bench_gemm.txt"
log "kernel benchmark"
timeout 60 ./build/bench_kernels 2>&1 | tee "$out/bench_kernels.txt" | tail -n 20
log "30-step runs"
python3 scripts/prepare_data.py --input "$data_file" --output_dir "$out/data" --tokenizer byte >/dev/null
summary="$out/summary.md"
echo "| model | dtype | B x T | ms/step | tokens/s | MFU | peak GiB | loss@30 |" >"$summary"
echo "|---|---|---|---|---|---|---|---|" >>"$summary"
for model in 124M 1.5B; do
    for dtype in bfloat16 float8; do
        B=16; [ "$model" = 1.5B ] && B=8
        name="${model}_${dtype}"
        timeout 120 ./train --model_size "$model" --dtype "$dtype" --batch_size $B --seq_len 1024 --steps 30 \
            --train_data "$out/data/tinyshakespeare_train_*.bin" --val_data "" --output_dir "" \
            --lr 3e-4 --warmup_steps 5 --log_file "$out/$name.jsonl" >"$out/$name.txt" 2>&1
        echo "$name: exit $?"; tail -n 3 "$out/$name.txt"
        python3 - "$out/$name.jsonl" "$out/$name.txt" "$model" "$dtype" "$B" >>"$summary" <<'PY'
import json, re, statistics, sys
path, text, model, dtype, B = sys.argv[1:]
try:
    steps = [json.loads(l) for l in open(path) if '"step"' in l and '"type":"step"' in l]
except OSError:
    steps = []
summary = open(text).read()
peak = re.search(r"peak memory ([0-9.]+) GiB", summary)
mfu = re.search(r"MFU ([0-9.]+)%", summary)
if not steps:
    print(f"| {model} | {dtype} | {B}x1024 | failed | | | | |"); sys.exit()
timed = steps[5:] or steps
ms = statistics.median(s["ms"] for s in timed)
tps = statistics.median(s["tokens_per_second"] for s in timed)
print(f"| {model} | {dtype} | {B}x1024 | {ms:.1f} | {tps:.0f} | {mfu.group(1) + '%' if mfu else '?'} | "
      f"{peak.group(1) if peak else '?'} | {steps[-1]['loss']:.4f} |")
PY
    done
done
log "summary"
cat "$summary"

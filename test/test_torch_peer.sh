#!/usr/bin/env bash
# test_torch_peer.sh: dev/train_gpt2_torch.py (the PyTorch peer) on the CPU in float32 against train_cpu.
# About 30 s; skipped when $PYTHON cannot import torch (make clients_deps installs it, and torchao, into
# build/python/; CI does).
#   1. the peer's flag defaults are train_cpu's (both from cli.h);
#   2. from one model file, 8 steps of B=4 x T=64 with 2 accumulation micro-steps, warmup, cosine decay,
#      clipping (the norms are above --grad_clip 1 early on), weight decay and validation: every step's loss
#      and gradient norm, and the final weights, within test/compare_runs.py's float32 bounds. Both compute
#      the same float32 values in other orders (PyTorch's GEMM blocking, fused attention, its own exp and
#      tanh, AdamW's bias corrections in double), so they differ by the float32 summation-order error of the
#      longest sum, K = the 512 rows a weight gradient sums over (the transcendentals' few ulps are below
#      2 K u): loss and norm within 2 K u relative, weights within 2 K u lr steps RMS;
#      Their learning rates are llm.c's get_lr, step for step;
#   3. negative control: the peer with twice the learning rate fails the same comparison; where torchao is
#      installed, --dtype float8 converts every block linear and runs;
#   4. bad inputs: a truncated model file, a shard with another magic, a token id outside the vocabulary,
#      a --total_batch_size that is not a multiple of B*T, a Llama model file: one line "error: ..." naming
#      it, exit status 1.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
test_init
test_tmpdir TMP test_torch_peer
need_python_modules test_torch_peer numpy
if ! "$PY" -c "import torch" 2>/dev/null; then
    echo "SKIPPED test_torch_peer: torch is not importable by $PY (python3 -m pip install torch, or put it on PYTHONPATH)"
    exit 0
fi
export OMP_NUM_THREADS=1 # both trainers on one thread: their float32 sums do not depend on the machine
PEER=("$PY" dev/train_gpt2_torch.py --device cpu --compile 0)

# 1. defaults
"$PY" - <<'EOF' >"$TMP/defaults.txt" 2>&1
import re, subprocess, sys
sys.path.insert(0, "dev")
import train_gpt2_torch as peer
ours = vars(peer.parse_args(["--init_from", "m"]))
help_text = subprocess.run(["./train_cpu", "--help"], capture_output=True, text=True).stdout
theirs = dict(re.findall(r"^  --(\w+) .*\[default: ([^;\]]*)", help_text, re.M))
def same(a, b):
    try:
        return float(a) == float(b)
    except ValueError:
        return str(a) == b.strip('"')
shared = [k for k in ours if k in theirs and k not in ("init_from", "output_dir", "dtype")]
wrong = [f"{k}: {ours[k]} vs {theirs[k]}" for k in shared if not same(ours[k], theirs[k])]
print(f"{len(shared)} shared flags; differ: {wrong}")
sys.exit(1 if wrong or len(shared) < 15 else 0)
EOF
result $? "the peer's defaults are train_cpu's ($(cat "$TMP/defaults.txt"))"

# 2. the same run in both trainers
test_data_dir "$TMP/data" text
data=(--train_data "$TMP/data/text_train_*.bin" --seq_len 64 --batch_size 4)
./train_cpu --model_size d2 --vocab 256 --steps 1 --dtype float32 "${data[@]}" --val_data "" --ckpt_every 1 \
    --output_dir "$TMP/init" >"$TMP/init.txt" 2>&1
init="$TMP/init/model_00000001.bin"
LR=1e-3
run=(--init_from "$init" "${data[@]}" --val_data "$TMP/data/text_val_*.bin" --total_batch_size 512 --steps 8 --lr $LR --warmup_steps 2 --val_every 4
    --val_batches 2)
./train_cpu --dtype float32 "${run[@]}" --output_dir "$TMP/cpu" --log_file "$TMP/cpu.jsonl" >"$TMP/cpu.txt" 2>&1
status=0
"${PEER[@]}" --dtype float32 "${run[@]}" --output_dir "$TMP/torch" --log_file "$TMP/torch.jsonl" >"$TMP/torch.txt" 2>&1 ||
    status=$?
[ $status = 0 ] || tail -n 3 "$TMP/torch.txt"
compare() { # LOG MODEL: against train_cpu's run
    "$PY" test/compare_runs.py --ref "$TMP/cpu.jsonl" "$TMP/cpu/model_00000008.bin" --run "$1" "$2" --dtype float32 \
        --rows 512 --lr $LR
}
out=$(compare "$TMP/torch.jsonl" "$TMP/torch/model_00000008.bin") || status=1
clipped=$(grep -c '"grad_norm":[1-9][0-9]*\.' "$TMP/cpu.jsonl" || true)
vals=$(grep -c '"type":"val"' "$TMP/torch.jsonl" || true)
[ $status = 0 ] && [ "$clipped" -ge 1 ] && [ "$vals" = 2 ] && grep -q "^summary | " "$TMP/torch.txt"
result $? "float32, 8 steps x 2 micro-steps ($clipped clipped, $vals validations): the peer = train_cpu within the float32 bounds: $out"

# the schedule: both logs' learning rates are llm.c's get_lr (train_gpt2.py: warmup lr (step+1)/W, then the cosine
# of progress (step - W) / (steps - W)) step for step, within test_cli's float32 bound of 1e-6 lr
"$PY" - "$TMP/cpu.jsonl" "$TMP/torch.jsonl" $LR 2 8 <<'EOF' >"$TMP/lr.txt" 2>&1
import json, math, sys
cpu, peer = ([json.loads(l)["lr"] for l in open(p) if '"type":"step"' in l] for p in sys.argv[1:3])
lr, warmup, steps = float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])


def get_lr(it):  # llm.c's, with learning_rate_decay_frac 0 (--final_lr_frac's default)
    if it < warmup:
        return lr * (it + 1) / warmup
    return 0.5 * (1.0 + math.cos(math.pi * (it - warmup) / (steps - warmup))) * lr


worst = max(abs(a - get_lr(i)) for log in (cpu, peer) for i, a in enumerate(log)) / lr
print(f"{len(cpu)} and {len(peer)} steps, at most {worst:.1e} lr from llm.c's")
sys.exit(0 if len(cpu) == len(peer) == steps and worst <= 1e-6 else 1)
EOF
result $? "the schedule: both trainers' learning rates are llm.c's get_lr, step for step ($(cat "$TMP/lr.txt"))"

# 3. negative control
status=0
"${PEER[@]}" --dtype float32 "${run[@]}" --lr 2e-3 --output_dir "$TMP/torch2" --log_file "$TMP/torch2.jsonl" >/dev/null 2>&1 &&
    compare "$TMP/torch2.jsonl" "$TMP/torch2/model_00000008.bin" >"$TMP/negative.txt" 2>&1 || status=$?
[ $status = 1 ]
result $? "negative control: the peer at twice the learning rate fails the comparison ($(head -c 100 "$TMP/negative.txt"))"

# float8 where torchao is installed: every block linear (4 a layer) through torchao, the run ends
if "$PY" -c "import torchao.float8" 2>/dev/null; then
    status=0
    "${PEER[@]}" --dtype float8 "${run[@]}" --output_dir "" >"$TMP/fp8.txt" 2>&1 || status=$?
    [ $status = 0 ] && grep -q "torchao float8 linears 8\b" "$TMP/fp8.txt" && grep -q "^step     8/8" "$TMP/fp8.txt"
    result $? "float8 through torchao: the 8 block linears of d2 converted, 8 steps run"
else
    echo "SKIPPED the peer's float8: torchao is not importable by $PY (python3 -m pip install torchao)"
fi

# 4. bad inputs
refused() { # NEEDLE WHAT FLAGS...
    local needle=$1 what=$2 err status=0
    shift 2
    err=$("${PEER[@]}" --dtype float32 "${run[@]}" --steps 1 --output_dir "" "$@" 2>&1 >/dev/null) || status=$?
    [ $status = 1 ] && [ "$(wc -l <<<"$err")" = 1 ] && grep -q -- "^error: .*$needle" <<<"$err"
    result $? "$what: one line, exit 1 ($err)"
}
head -c 5000 "$init" >"$TMP/truncated.bin"
refused "truncated.bin: size" "a truncated model file" --init_from "$TMP/truncated.bin"
cp "$TMP/data/text_train_000000.bin" "$TMP/foreign_train.bin"
printf '\x01\x02\x03\x04' | dd of="$TMP/foreign_train.bin" conv=notrunc status=none
refused "foreign_train.bin: not a token shard" "a shard with another magic" --train_data "$TMP/foreign_train.bin"
"$PY" - "$init" "$TMP/v100.bin" <<'EOF'
import sys
import numpy as np
raw = np.fromfile(sys.argv[1], dtype="<i4")
raw[3] = 100  # V = 100 < the byte tokens' 256 (Vp stays 256)
raw.tofile(sys.argv[2])
EOF
refused "outside the model's vocabulary of 100" "a token id outside the vocabulary" --init_from "$TMP/v100.bin"
refused "--total_batch_size: 300" "--total_batch_size not a multiple of B*T" --total_batch_size 300
./train_cpu --arch llama --model_size d2 --vocab 256 --seq_len 32 --batch_size 2 --steps 1 --train_data "$TMP/data/text_train_*.bin" \
    --val_data "" --output_dir "$TMP/llama" >/dev/null
refused "model_00000001.bin: a llama model file" "a Llama model file (the peer is GPT-2's)" \
    --init_from "$TMP/llama/model_00000001.bin"
finish

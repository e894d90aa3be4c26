#!/usr/bin/env bash
# test_llmc_llama.sh: llm.c's Llama 3 model files, as llm.c's own Python writers produced them (test/llmc_llama:
# master's train_llama3.py write_model in bfloat16, the llama3 branch's in float32 and bfloat16, of one tiny
# model; README.md there says how), both ways. About 2 s; needs train_cpu and python3 (no modules).
#   1. each file loads in train_cpu, and its first float32 loss on the batch llm.c evaluated equals llm.c's
#      (reference.txt) within 1e-5; the negative control, the branch file with every layer's up and gate
#      projections swapped, misses it by more than 10x, so the check sees SwiGLU's order;
#   2. what train_cpu writes from each (--lr 0: the weights unchanged) is llm.c's llama3 branch file, the layout
#      its train_llama3.cu reads, byte for byte but for the two header words of the SwiGLU width (we write
#      multiple_of = F and a multiplier of 1), which give the same F through train_llama3.cu's formula.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
test_init
test_tmpdir TMP test_llmc_llama
FIX=test/llmc_llama
run=(--dtype float32 --train_data "$FIX/batch_train_000000.bin" --val_data "" --batch_size 2 --seq_len 16 --steps 1)

first_loss() { # MODEL: train_cpu's float32 loss of the fixture's batch (test/debug_state.py), printed with every
    # digit of the float
    ./train_cpu --init_from "$1" "${run[@]}" --output_dir "" --debug_state "$TMP/state.bin" >"$TMP/run.txt" 2>&1 ||
        { cat "$TMP/run.txt" >&2; return 1; }
    "$PY" -c 'import sys; sys.path.insert(0, "test"); import debug_state; print(repr(debug_state.read(sys.argv[1]).loss))' \
        "$TMP/state.bin"
}

# Both sides compute the loss in float32 from the same (bfloat16-valued) weights, in other orders: dot products
# of K <= max(C, F, V) = 128 terms differ by about sqrt(K) u = 7e-7 relative (u = 2^-24), through 2L+2 = 6 matmul
# stages, RMSNorm, rotary angles llm.c takes in float32 and we in float64 (a few u), and a softmax over V = 128;
# the loss of about 5 then moves by a few 1e-6 at most: 1e-5, the bound asked for, holds that with room.
TOL=1e-5
reference=$(awk '$1 == "loss_master" { print $2 }' "$FIX/reference.txt")
branch_reference=$(awk '$1 == "loss_llama3_branch" { print $2 }' "$FIX/reference.txt")
within() { "$PY" -c 'import sys; a, b, t = map(float, sys.argv[1:]); sys.exit(0 if abs(a - b) <= t else 1)' "$@"; }
within "$reference" "$branch_reference" 0
result $? "llm.c's master and llama3-branch models computed the same loss ($reference, $branch_reference)"

for file in master_bf16 llama3_branch_fp32 llama3_branch_bf16; do
    loss=$(first_loss "$FIX/$file.bin") || loss=nan
    within "$loss" "$reference" "$TOL"
    result $? "$file.bin (llm.c's writer) loads; train_cpu's first loss $loss = llm.c's $reference within $TOL"
done

# the negative control: in every layer's fc slot (L, 2F, C) the up rows [0, F) and the gate rows [F, 2F) swapped
"$PY" - "$FIX/llama3_branch_fp32.bin" "$TMP/swapped.bin" <<'EOF'
import struct, sys
d = bytearray(open(sys.argv[1], "rb").read())
maxT, V, L, NH, KVH, C = struct.unpack_from("<6i", d, 8)
F, QKV = 128, (NH + 2 * KVH) * (C // NH)
fc = 2048 + 4 * (2 * V * C + 2 * L * C + L * QKV * C + L * QKV + L * C * C + L * C + 2 * L * C)  # after ln2b
for l in range(L):
    up, gate = fc + 4 * 2 * F * C * l, fc + 4 * (2 * F * C * l + F * C)
    d[up:gate], d[gate:gate + 4 * F * C] = d[gate:gate + 4 * F * C], d[up:gate]
open(sys.argv[2], "wb").write(d)
EOF
swapped=$(first_loss "$TMP/swapped.bin") || swapped=nan
! within "$swapped" "$reference" "$("$PY" -c "print(10 * $TOL)")"
result $? "negative control: up and gate swapped, the loss $swapped misses llm.c's by more than 10 x $TOL"

# 2. what train_cpu writes: llm.c's llama3 branch file, but for int [8] and float [0] of the header
for file in master_bf16 llama3_branch_fp32; do
    ./train_cpu --init_from "$FIX/$file.bin" "${run[@]}" --lr 0 --ckpt_every 1 --output_dir "$TMP/out_$file" \
        >"$TMP/run.txt" 2>&1 || cat "$TMP/run.txt"
    "$PY" - "$TMP/out_$file/model_00000001.bin" "$FIX/llama3_branch_fp32.bin" >"$TMP/cmp.txt" <<'EOF' 
import struct, sys
ours, theirs = (open(p, "rb").read() for p in sys.argv[1:3])


def ffn_dim(d):
    """F as llm.c's train_llama3.cu computes it from a header: size_t hidden = 2 * 4C / 3, then
    hidden = ffn_dim_multiplier * hidden (a float product, truncated), then rounded up to multiple_of."""
    C, multiple_of = struct.unpack_from("<i", d, 28)[0], struct.unpack_from("<i", d, 32)[0]
    multiplier = struct.unpack_from("<f", d, 1024)[0]
    hidden = int(struct.unpack("<f", struct.pack("<f", multiplier * float(2 * 4 * C // 3)))[0])
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


differ = [i // 4 for i in range(0, max(len(ours), len(theirs)), 4) if ours[i:i + 4] != theirs[i:i + 4]]
print(f"{len(ours)} bytes against {len(theirs)}; 4-byte words differing: {differ}; F {ffn_dim(ours)} and {ffn_dim(theirs)}")
sys.exit(0 if len(ours) == len(theirs) and set(differ) <= {8, 256} and ffn_dim(ours) == ffn_dim(theirs) else 1)
EOF
    result $? "from $file.bin train_cpu writes llm.c's llama3 branch file: $(cat "$TMP/cmp.txt")"
done
finish

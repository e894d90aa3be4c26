#!/usr/bin/env bash
# test_gpu.sh: the CUDA trainer against the CPU reference (needs a GPU; `make test_gpu`).
#  1. for bfloat16, float8 delayed and float8 current: train_cpu and train write --debug_state for the same
#     small model, seed and data; compare_debug_state checks logits, loss, every gradient tensor and the
#     losses of the following steps within the tolerance argued in test/compare_debug_state.c;
#  2. two GPU runs with the same seed are bitwise identical (with and without CUDA Graphs);
#  3. resume: N steps straight equals N/2 steps + --resume 1 + N/2 steps, model and state files byte for byte;
#  4. a GPU checkpoint continues on the CPU trainer (same file formats).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
test_init
test_tmpdir tmp test_gpu
test_data_dir "$tmp/data" text
# hs = 32 (the attention kernels' minimum), B*T and C multiples of 16 (FP8 GEMMs)
model=(--model_size d2 --channels 128 --heads 4 --vocab 256 --seq_len 64 --batch_size 8
       --train_data "$tmp/data/text_train_*.bin" --val_data "" --lr 1e-3 --warmup_steps 2)
run_pair() { # name, extra flags...
    local name="$1"; shift
    ./train_cpu "${model[@]}" --steps 6 --output_dir "" --debug_state "$tmp/cpu_$name.bin" "$@" >/dev/null
    ./train "${model[@]}" --steps 6 --output_dir "" --debug_state "$tmp/gpu_$name.bin" "$@" >/dev/null
    ./test/build/compare_debug_state "$tmp/gpu_$name.bin" "$tmp/cpu_$name.bin" "$tmp/cpu_float32.bin" \
        >"$tmp/cmp_$name.txt" 2>&1
    result $? "GPU $name matches the CPU reference"; tail -n 1 "$tmp/cmp_$name.txt"
    grep FAIL "$tmp/cmp_$name.txt" || true
}
./train_cpu "${model[@]}" --steps 6 --output_dir "" --dtype float32 --debug_state "$tmp/cpu_float32.bin" >/dev/null
set +e
run_pair bfloat16 --dtype bfloat16
run_pair float8_delayed --dtype float8 --fp8_recipe delayed
run_pair float8_current --dtype float8 --fp8_recipe current
for dtype in bfloat16 float8; do
    ./train "${model[@]}" --steps 6 --output_dir "" --dtype $dtype --debug_state "$tmp/again_$dtype.bin" >/dev/null
    ./test/build/compare_debug_state --exact "$tmp/gpu_$dtype$([ $dtype = float8 ] && echo _delayed).bin" \
        "$tmp/again_$dtype.bin" >/dev/null
    result $? "two GPU runs give bitwise-identical results ($dtype)"
    ./train "${model[@]}" --steps 6 --output_dir "$tmp/graph_$dtype" --dtype $dtype --cuda_graph 1 \
        --log_file "$tmp/graph_$dtype.jsonl" >/dev/null
    ./train "${model[@]}" --steps 6 --output_dir "$tmp/eager_$dtype" --dtype $dtype --cuda_graph 0 \
        --log_file "$tmp/eager_$dtype.jsonl" >/dev/null
    cmp -s "$tmp/graph_$dtype/model_00000006.bin" "$tmp/eager_$dtype/model_00000006.bin"
    result $? "CUDA Graph and op-by-op runs give identical weights ($dtype)"
    ./train "${model[@]}" --steps 6 --output_dir "$tmp/half_$dtype" --dtype $dtype --ckpt_every 3 >/dev/null &&
        rm "$tmp/half_$dtype/model_00000006.bin" && echo 3 >"$tmp/half_$dtype/latest_checkpoint" &&
        ./train "${model[@]}" --steps 6 --output_dir "$tmp/half_$dtype" --dtype $dtype --resume 1 >/dev/null
    cmp -s "$tmp/graph_$dtype/model_00000006.bin" "$tmp/half_$dtype/model_00000006.bin" &&
        cmp -s "$tmp/graph_$dtype/state_00000006_00000.bin" "$tmp/half_$dtype/state_00000006_00000.bin"
    result $? "resume is bit-exact ($dtype)"
    ./train_cpu "${model[@]}" --steps 8 --output_dir "$tmp/graph_$dtype" --dtype $dtype --resume 1 >/dev/null
    result $? "a GPU checkpoint continues on train_cpu ($dtype)"
done
finish

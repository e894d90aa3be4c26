#!/usr/bin/env bash
# test_first_contact.sh: scripts/first_contact.sh, gpu_check.sh's first stage, end to end on the emulation
# (make test_first_contact), and that its checks can fail.
#   1. on the emulated H200 every check passes or is skipped for a stated reason: each GEMM form of the bfloat16,
#      per-tensor float8 and blockwise recipes, the NCCL communicator, the two-step runs (mxfp8's and cuDNN's
#      skipped: Blackwell's, and a build without cuDNN); on the emulated B200 the mxfp8 GEMM forms pass;
#   2. planted faults in the emulated cuBLASLt (CUDA_EMU_CUBLASLT_FAULT) fail the rows of the forms they touch
#      on the comparison, and only those: B's scale read as 1 fails every FP8 GEMM form and every float8
#      two-step run while the bfloat16 ones pass, and the script goes on past the failures and exits 1; a
#      dropped bias fails the bias forms only;
#   3. the GELU epilogues' checks hold against the erf GELU (CUDA_EMU_GELU=erf) and name the form each computes:
#      their bounds cover either form of the GELU cuBLASLt may compute; and test_gpu.sh's bfloat16 comparison
#      (6 steps of its d2 model against train_cpu) fails with the erf form at one rounding site and holds at
#      the two its GPU runs count (test_gpu.sh's gelu_sites).
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
test_init
test_tmpdir tmp test_first_contact
test_text text "$tmp/text.txt"
fc=./test/build/first_contact_emu
run_script() { # OUT-NAME (environment as set by the caller): the table in $tmp/NAME/first_contact.md
    TRAIN=./train_emu FIRST_CONTACT=$fc OUT="$tmp/$1" DATA="$text" bash scripts/first_contact.sh >"$tmp/$1.txt" 2>&1
}
result_of() { # TABLE CHECK: its result column
    awk -F' [|] ' -v name="$2" '$1 == "| " name { print $2 }' "$1"
}
status=0
run_script h200 || status=$?
table="$tmp/h200/first_contact.md"
bad_rows=""
for name in $($fc --list) two_steps_bfloat16 two_steps_float8_delayed two_steps_float8_current \
    two_steps_float8_delayed_fast_accum_0 two_steps_float8_blockwise two_steps_float8_mxfp8; do
    want=PASS
    [[ "$name" == *mxfp8* || "$name" == cudnn_* ]] && want=SKIP
    [ "$(result_of "$table" "$name")" = "$want" ] || bad_rows+=" $name"
done
[ $status = 0 ] && [ -z "$bad_rows" ] && grep -q "^first contact: 21 passed, 0 failed, 6 skipped" "$tmp/h200.txt"
result $? "the emulated H200: $(tail -n 1 "$tmp/h200.txt")${bad_rows:+ (unexpected:$bad_rows)}"
grep -F '| SKIP |' "$table" | sed 's/^/    /'
mx=""
for name in gemm_mxfp8_forward_bias gemm_mxfp8_data_gradient gemm_mxfp8_weight_gradient; do
    mx+="$(CUDA_EMU_DEVICE=b200 $fc "$name" | cut -c1-4) "
done
[ "$mx" = "PASS PASS PASS " ] && [[ "$(CUDA_EMU_DEVICE=b200 $fc gemm_blockwise_forward_bias)" == SKIP* ]]
result $? "the emulated B200: the mxfp8 forms $mx, blockwise skipped"

status=0
CUDA_EMU_CUBLASLT_FAULT=b-scale run_script b_scale || status=$?
table="$tmp/b_scale/first_contact.md"
bad_rows=""
for name in $($fc --list) two_steps_bfloat16 two_steps_float8_delayed two_steps_float8_current \
    two_steps_float8_blockwise; do
    want=PASS
    [[ "$name" == *fp8* || "$name" == *blockwise* || "$name" == *float8* ]] && want=FAIL
    [[ "$name" == *mxfp8* || "$name" == cudnn_* ]] && want=SKIP
    [ "$(result_of "$table" "$name")" = "$want" ] || bad_rows+=" $name"
done
[ $status = 1 ] && [ -z "$bad_rows" ] && grep -q "beyond their bound" "$table"
result $? "B's scale read as 1: every FP8 form and float8 run fails on its comparison, the rest pass: $(tail -n 1 "$tmp/b_scale.txt")${bad_rows:+ (unexpected:$bad_rows)}"
grep -m 2 -F 'gemm_fp8_forward_bias ' "$table" | sed 's/^/    /'

bias=""
for name in gemm_bf16_forward_bias gemm_fp8_forward_bias_fast gemm_blockwise_forward_bias gemm_bf16_data_gradient \
    gemm_fp8_weight_gradient; do
    bias+="$(CUDA_EMU_CUBLASLT_FAULT=bias $fc "$name" | cut -c1-4) "
done
[ "$bias" = "FAIL FAIL FAIL PASS PASS " ]
result $? "the bias dropped: the three bias forms fail, two forms without one pass ($bias)"

gelu=""
for name in gemm_bf16_forward_gelu_bias gemm_bf16_data_gradient_dgelu; do
    gelu+="$(CUDA_EMU_GELU=erf $fc "$name") / "
done
tanh=$($fc gemm_bf16_forward_gelu_bias)
[[ "$gelu" == PASS*"GELU: the erf form"*PASS*"GELU: the erf form"* && "$tanh" == PASS*"GELU: the tanh form"* ]]
result $? "the GELU epilogues computing the erf GELU pass their checks, which name the form ($gelu)"
test_data_dir "$tmp/data" text
pair=(--model_size d2 --channels 128 --heads 4 --vocab 256 --seq_len 64 --batch_size 8 --steps 6 --lr 1e-3
      --warmup_steps 2 --train_data "$tmp/data/text_train_*.bin" --val_data "" --output_dir "" --attention exact)
./train_cpu "${pair[@]}" --dtype float32 --debug_state "$tmp/cpu_float32.bin" >/dev/null &&
    ./train_cpu "${pair[@]}" --dtype bfloat16 --debug_state "$tmp/cpu_bfloat16.bin" >/dev/null &&
    CUDA_EMU_GELU=erf ./train_emu "${pair[@]}" --dtype bfloat16 --debug_state "$tmp/erf_bfloat16.bin" >/dev/null
status=$?
for sites in 1 2; do
    ./test/build/compare_debug_state --rounding_sites $sites "$tmp/erf_bfloat16.bin" "$tmp/cpu_bfloat16.bin" \
        "$tmp/cpu_float32.bin" >"$tmp/erf_$sites.txt" 2>&1
    echo $? >"$tmp/erf_$sites.status"
done
[ $status = 0 ] && [ "$(cat "$tmp/erf_1.status")" = 1 ] && [ "$(cat "$tmp/erf_2.status")" = 0 ]
result $? "bfloat16 with the erf GELU against the reference's tanh: one site $(grep -m1 FAIL "$tmp/erf_1.txt" | tr -s ' '), two sites $(tail -n 1 "$tmp/erf_2.txt")"
finish

#!/usr/bin/env bash
# test_gpu.sh: the CUDA trainer against the CPU reference (needs a GPU; `make test_gpu`).
#  1. for bfloat16 and float8 delayed (also without the forward's fast accumulation), current, blockwise (also with power-of-two scales) and mxfp8 (where
#     the device has it: Blackwell; the emulation as a B200): train_cpu and train write --debug_state for
#     the same small model, seed and data; compare_debug_state checks logits, loss, every gradient tensor
#     and the losses of the following steps within the tolerance argued in test/compare_debug_state.c; the
#     block recipes' block scales against the CPU's;
#  2. two GPU runs with the same seed are bitwise identical (with and without CUDA Graphs);
#  3. resume: N steps straight equals N/2 steps + --resume 1 + N/2 steps, model and state files byte for byte
#     (also in the block recipes, with CUDA Graphs against op-by-op and --recompute 1);
#  4. a GPU checkpoint continues on the CPU trainer (same file formats);
#  5. ZeRO-1, ZeRO-3 and --recompute 1 in one process compute what ZeRO-0 computes, in the same order:
#     identical weights; a ZeRO-3 resume (checkpoint gathered unit by unit, shard read back) is bit-exact;
#  6. GEMM plans serve layers whose biases differ in alignment (C = 96: layer 1's biases lie 64 bytes off
#     the 256-byte alignment of layer 0's, which cuBLASLt's heuristic read): bfloat16 and float8 match
#     the CPU reference as in 1; its vocabulary of 1000 gives the cross-entropy's block reductions 4 warps,
#     the last partial (125 threads, one per 8 logits), and C = 96 rows that are no power of two;
#  7. run health on the GPU: an injected NaN is skipped and leaves the weights untouched; the norm guard,
#     decided on the device, follows its rule step by step and resumes bit-exact; the BF16 shadow
#     check is exactly zero in bfloat16; --eval_only equals the validation loss of learning-rate-0 runs;
#     the cast kernels count saturations where the CPU does (a model with LayerNorm gains of 1000);
#     sampling runs;
#  8. Llama (RMSNorm, rotary embeddings, 4 query heads over 2 key/value heads, SwiGLU, an untied head):
#     bfloat16 and float8 delayed, current, blockwise and mxfp8 (where the device has it) against the CPU
#     reference as in 1; ZeRO-1, ZeRO-3 and --recompute 1 give ZeRO-0's weights; two runs are bitwise
#     identical; a file with Llama 3.1's scaled rotary wavelengths matches the CPU in bfloat16, and its
#     logits differ from the same weights' unscaled;
#  9. the fast attention (cuDNN: builds with it, on a GPU; elsewhere its one-line refusal, GPT-2's and
#     Llama's, itself a failure where it must run: a cuDNN build on Hopper, or on Blackwell with cuDNN 9.18
#     or newer): bfloat16 and float8 against the CPU reference with compare_debug_state --rounding_sites 2
#     (its BF16 probabilities and their gradients are rounding sites the CPU does not have), Llama's
#     grouped-query heads in bfloat16 likewise; two runs, CUDA Graph and op by op, and a resumed run give
#     identical weights (its backward is cuDNN's deterministic one).
# GPT-2's bfloat16 comparisons count one more rounding site where cuBLASLt's GELU may be another form than the
# reference's (gelu_sites below).
# The comparisons of debug states (1, 2, 6, 8 and 9's) are the tables quick_cases, cases and fast_cases below, a
# line each; the checks on logs and files are test/gpu_checks.py's, which reads debug states with
# test/debug_state.py.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
test_init
TRAIN=${TRAIN:-./train} # ./train_emu: the same suite on the CPU emulation of CUDA (make test_gpu_emu)
test_tmpdir tmp test_gpu
test_data_dir "$tmp/data" text
# The models, each a flags array that the table below names. hs = 32 (the attention kernels' minimum), B*T and C
# multiples of 16 (FP8 GEMMs). The exact attention (the CPU's arithmetic) for the comparisons with the CPU
# reference; the fast one is section 9.
common=(--model_size d2 --channels 128 --heads 4 --vocab 256 --seq_len 64 --batch_size 8
        --train_data "$tmp/data/text_train_*.bin" --val_data "" --lr 1e-3 --warmup_steps 2)
model=("${common[@]}" --attention exact)
# C = 96: layer 1's biases lie 64 bytes off the 256-byte alignment of layer 0's (section 6)
model96=(--model_size d2 --channels 96 --heads 3 --vocab 1000 --seq_len 32 --batch_size 2
         --train_data "$tmp/data/text_train_*.bin" --val_data "" --lr 1e-3 --warmup_steps 2 --attention exact)
llama=(--arch llama --model_size d2 --channels 128 --heads 4 --kv_heads 2 --vocab 256 --seq_len 64 --batch_size 8
       --train_data "$tmp/data/text_train_*.bin" --val_data "" --lr 1e-3 --warmup_steps 2 --attention exact)
# Llama 3.1's scaled rotary wavelengths, the flag of an llm.c file (hs = 32, theta 10000: pairs 0-10 keep their
# frequency, 11-12 blend, 13-15 turn 8 times slower): the llama model after one float32 step on the CPU, its
# file's flag set (below)
llama_scaled=("${llama[@]}" --init_from "$tmp/llama_scaled.bin")
fast=("${common[@]}" --attention fast)
mapfile -d '' llama_fast < <(merge_flags "${llama[@]}" -- --attention fast)
# An FP8 GEMM on Hopper sums as its tensor cores do (fp8_scaling.h's model): the CPU reference for a GPU run sums
# the same way (--fp8_accumulation hopper), else its error alone, 4x the bounds' at 128 channels, fails the
# comparison. Blackwell accumulates in FP32, as train_cpu does by default. The device says which: the trainer's
# versions line names its model (cli.h's fp8_accumulation_of_device), asked once per device (CUDA_EMU_DEVICE
# picks the emulated one, h200 unless set; a GPU ignores it).
# cuBLASLt documents no formula for the GELU epilogues GPT-2's bfloat16 runs use (GELU_AUX_BIAS, DGELU); the
# reference computes the tanh form. The tanh and erf forms differ by at most 4.8e-4 (GELU) and 8.7e-4 (its
# derivative), at every x under 5% of one BF16 unit of the GELU's input (max |erf - tanh| / (2^-8 |x|) = 0.046,
# at x = -2.59): less than one more rounding there, so these comparisons count one more rounding site
# (compare_debug_state --rounding_sites) where the device's form is not known to be the reference's: on a GPU
# (first_contact.sh's GELU rows say which form it computes), and on the emulation computing the erf form
# (CUDA_EMU_GELU=erf: its loss is 1.76 times the one-site bound and within the two-site one,
# test_first_contact.sh). Llama (SwiGLU) and float8 (no fused GELU) keep one site.
gelu_sites=1
if [ "$TRAIN" != ./train_emu ] || [ -n "${CUDA_EMU_GELU:-}" ]; then gelu_sites=2; fi
declare -A device_sums=() # CUDA_EMU_DEVICE (h200 unless set) -> the device's FP8 accumulation
device_accumulation() { # sets device_sums for the current CUDA_EMU_DEVICE, from a one-step run's versions line
    local key=${CUDA_EMU_DEVICE:-h200}
    [ -n "${device_sums[$key]:-}" ] && return
    device_sums[$key]=$("$TRAIN" "${model[@]}" --steps 1 --output_dir "" --dtype bfloat16 2>/dev/null |
        sed -n 's/^versions | .* | FP8 accumulation \([a-z0-9]*\)$/\1/p')
    [ -n "${device_sums[$key]}" ] || { bad "the trainer's versions line names no FP8 accumulation"; device_sums[$key]=fp32; }
}
cpu_accumulation() { # VAR, the run's flags...: VAR=(the CPU reference's accumulation flags)
    local -n _out=$1; shift
    _out=()
    device_accumulation
    if [[ " $* " == *" --dtype float8 "* ]]; then _out=(--fp8_accumulation "${device_sums[${CUDA_EMU_DEVICE:-h200}]}"); fi
}

# The comparisons of debug states (core/debug_state.h: a run's first step's logits, loss and every gradient, and
# the loss of each step), one a line: what runs, on which model and device, and what is compared within which
# bound. A new case is a new line.
#   check    pair    the GPU's run of 6 steps against train_cpu's with the same flags (section 1)
#            forced  the steps 2 and 4, teacher-forced, against train_cpu's and AdamW recomputed (case_forced)
#            twice   the GPU's run again, against the pair of the same name's GPU run (section 2)
#   model    the flags array of the model (above); device: CUDA_EMU_DEVICE, h200 or b200 (a GPU ignores it)
#   bound    sites=F: test/compare_debug_state --rounding_sites F (its distances, scaled by F: one rounding site,
#            gelu = gelu_sites above, + 1 for the fast attention's BF16 probabilities and their gradients);
#            exact: compare_debug_state --exact, bit for bit
#   flags    the run's own flags (over the model's); a --fp8_recipe mxfp8 line runs where the device has mxfp8
# make check's quick tier (TEST_GPU_QUICK=1): the first step of the three main paths against the CPU.
quick_cases=(
#  check   name                     model         device  bound        flags
  "pair    bfloat16                 model         h200    sites=gelu   --dtype bfloat16"
  "pair    float8_delayed           model         h200    sites=1      --dtype float8 --fp8_recipe delayed"
  "pair    float8_current           model         h200    sites=1      --dtype float8 --fp8_recipe current"
)
cases=(
#  check   name                     model         device  bound        flags
  "pair    float8_precise_accum     model         h200    sites=1      --dtype float8 --fp8_recipe delayed --fp8_fast_accum 0"
  "pair    float8_fast_all          model         h200    sites=1      --dtype float8 --fp8_recipe delayed --fp8_fast_accum 2"
  # on a Blackwell (emulated: CUDA_EMU_DEVICE), against the reference its accumulation selects
  "pair    float8_delayed_b200      model         b200    sites=1      --dtype float8 --fp8_recipe delayed"
  "pair    float8_blockwise         model         h200    sites=1      --dtype float8 --fp8_recipe blockwise"
  "pair    float8_blockwise_pow2    model         h200    sites=1      --dtype float8 --fp8_recipe blockwise --fp8_pow2_scales 1"
  "pair    float8_mxfp8             model         b200    sites=1      --dtype float8 --fp8_recipe mxfp8"
  "forced  bfloat16                 model         h200    sites=gelu   --dtype bfloat16"
  "forced  float8_delayed           model         h200    sites=1      --dtype float8 --fp8_recipe delayed"
  "forced  float8_current           model         h200    sites=1      --dtype float8 --fp8_recipe current"
  "forced  float8_blockwise         model         h200    sites=1      --dtype float8 --fp8_recipe blockwise"
  # C = 96: biases of layer 1 less aligned than layer 0's (section 6)
  "pair    c96_bfloat16             model96       h200    sites=gelu   --dtype bfloat16 --steps 3"
  "pair    c96_float8               model96       h200    sites=1      --dtype float8 --steps 3"
  "pair    llama_bfloat16           llama         h200    sites=1      --dtype bfloat16"
  "pair    llama_float8_delayed     llama         h200    sites=1      --dtype float8 --fp8_recipe delayed"
  "pair    llama_float8_current     llama         h200    sites=1      --dtype float8 --fp8_recipe current"
  # F = 384: every linear's features (qkv 256 out, fc 768 out, fcproj 384 in) tile the 128-element blocks
  "pair    llama_float8_blockwise   llama         h200    sites=1      --dtype float8 --fp8_recipe blockwise --ffn_dim 384"
  "pair    llama_float8_mxfp8       llama         b200    sites=1      --dtype float8 --fp8_recipe mxfp8 --ffn_dim 384"
  "pair    llama_scaled_bfloat16    llama_scaled  h200    sites=1      --dtype bfloat16"
  "twice   bfloat16                 model         h200    exact        --dtype bfloat16"
  "twice   float8_delayed           model         h200    exact        --dtype float8 --fp8_recipe delayed"
  "twice   llama_bfloat16           llama         h200    exact        --dtype bfloat16"
  "twice   llama_float8_delayed     llama         h200    exact        --dtype float8 --fp8_recipe delayed"
)
# the fast attention's, where it runs (section 9); the CPU's attention is the exact one whatever the flag
fast_cases=(
#  check   name                     model         device  bound        flags
  "pair    fast_llama_bfloat16      llama_fast    h200    sites=2      --dtype bfloat16"
  "pair    fast_bfloat16            fast          h200    sites=gelu+1 --dtype bfloat16"
  "pair    fast_float8              fast          h200    sites=2      --dtype float8 --fp8_recipe delayed"
)
compare_states() { # BOUND CANDIDATE REFERENCE [FLOAT32_REFERENCE]: test/compare_debug_state within a case's bound
    local bound=$1; shift
    if [ "$bound" = exact ]; then
        ./test/build/compare_debug_state --exact "$@"
    else
        local sites=${bound#sites=}
        ./test/build/compare_debug_state --rounding_sites $((${sites//gelu/$gelu_sites})) "$@"
    fi
}
float32_reference() { # MODEL: $tmp/cpu_MODEL_float32.bin, train_cpu's float32 run of the model (once)
    local -n _base=$1
    [ -f "$tmp/cpu_$1_float32.bin" ] ||
        ./train_cpu "${_base[@]}" --steps 6 --output_dir "" --dtype float32 --debug_state "$tmp/cpu_$1_float32.bin" >/dev/null
}
case_pair() { # NAME MODEL BOUND FLAGS...
    local name=$1 of=$2 bound=$3 run accumulation; shift 3
    local -n base=$of
    mapfile -d '' run < <(merge_flags "${base[@]}" --steps 6 --output_dir "" -- "$@")
    cpu_accumulation accumulation "${run[@]}"
    float32_reference "$of"
    ./train_cpu "${run[@]}" --debug_state "$tmp/cpu_$name.bin" "${accumulation[@]}" >/dev/null
    "$TRAIN" "${run[@]}" --debug_state "$tmp/gpu_$name.bin" >/dev/null
    compare_states "$bound" "$tmp/gpu_$name.bin" "$tmp/cpu_$name.bin" "$tmp/cpu_${of}_float32.bin" \
        >"$tmp/cmp_$name.txt" 2>&1
    result $? "GPU $name matches the CPU reference"; tail -n 1 "$tmp/cmp_$name.txt"
    grep FAIL "$tmp/cmp_$name.txt" || true
}
case_twice() { # NAME MODEL BOUND FLAGS...
    local name=$1 of=$2 bound=$3; shift 3
    local -n base=$of
    "$TRAIN" "${base[@]}" --steps 6 --output_dir "" --debug_state "$tmp/again_$name.bin" "$@" >/dev/null
    compare_states "$bound" "$tmp/gpu_$name.bin" "$tmp/again_$name.bin" >/dev/null
    result $? "GPU $name: two runs give bitwise-identical results"
}
# The steps after the first, teacher-forced: train_cpu writes a checkpoint after each of 4 steps, and at steps
# 2 and 4 both trainers resume from the CPU's checkpoint before it for one step, so that the GPU's step
# starts from the reference's weights, moments and FP8 histories and is held to the same bounds as step 1
# (compare_debug_state; the float32 reference starts from the same weights, --init_from, and the shard
# repeats one batch, so that its first batch is theirs). check_state then recomputes AdamW from each
# trainer's gradients bit for bit (weight decay on the 2-D weights only, the moments' bias corrections) and
# holds the GPU's new amax histories against the CPU's; train_cpu's own step is the control.
case_forced() { # NAME MODEL BOUND FLAGS...
    local name=$1 of=$2 bound=$3 k dir who accumulation tf f32; shift 3
    local -n base=$of
    cpu_accumulation accumulation "$@"
    mapfile -d '' tf < <(merge_flags "${base[@]}" -- --train_data "$tmp/repeat_train_000000.bin" --grad_clip 0 "$@")
    ./train_cpu "${tf[@]}" "${accumulation[@]}" --steps 4 --ckpt_every 1 --output_dir "$tmp/tf_$name" >/dev/null
    for k in 2 4; do
        for who in gpu cpu; do
            dir=$tmp/tf_${name}_${who}_$k
            mkdir -p "$dir" && cp "$tmp/tf_$name"/*_0000000$((k - 1))* "$dir" && echo $((k - 1)) >"$dir/latest_checkpoint"
        done
        "$TRAIN" "${tf[@]}" --steps $k --resume 1 --output_dir "$tmp/tf_${name}_gpu_$k" \
            --debug_state "$tmp/tf_${name}_gpu_$k.bin" >/dev/null
        ./train_cpu "${tf[@]}" "${accumulation[@]}" --steps $k --resume 1 --output_dir "$tmp/tf_${name}_cpu_$k" \
            --debug_state "$tmp/tf_${name}_cpu_$k.bin" >/dev/null
        mapfile -d '' f32 < <(merge_flags "${base[@]}" -- --train_data "$tmp/repeat_train_000000.bin" --dtype float32 \
            --init_from "$tmp/tf_$name/model_0000000$((k - 1)).bin" --steps 1 --output_dir "")
        ./train_cpu "${f32[@]}" --debug_state "$tmp/tf_${name}_f32_$k.bin" >/dev/null
        compare_states "$bound" "$tmp/tf_${name}_gpu_$k.bin" \
            "$tmp/tf_${name}_cpu_$k.bin" "$tmp/tf_${name}_f32_$k.bin" >"$tmp/tf_cmp_${name}_$k.txt" 2>&1 &&
            ./test/build/check_state "$tmp/tf_$name" $((k - 1)) "$tmp/tf_${name}_gpu_$k" "$tmp/tf_${name}_gpu_$k.bin" \
                "$tmp/tf_${name}_cpu_$k" -- "${tf[@]}" --steps $k >>"$tmp/tf_cmp_${name}_$k.txt" 2>&1 &&
            ./test/build/check_state "$tmp/tf_$name" $((k - 1)) "$tmp/tf_${name}_cpu_$k" "$tmp/tf_${name}_cpu_$k.bin" \
                -- "${tf[@]}" --steps $k >>"$tmp/tf_cmp_${name}_$k.txt" 2>&1
        result $? "GPU $name at step $k, from the CPU's checkpoint: matches the CPU reference, AdamW bit for bit"
        grep FAIL "$tmp/tf_cmp_${name}_$k.txt" || true
    done
}
run_cases() { # LINE...: each case, in order
    local line check name of device bound rest flags
    for line in "$@"; do
        read -r check name of device bound rest <<<"$line"
        read -r -a flags <<<"$rest"
        if [[ " $rest " == *" --fp8_recipe mxfp8 "* && " ${block_recipes[*]} " != *" mxfp8 "* ]]; then continue; fi
        CUDA_EMU_DEVICE=$device "case_$check" "$name" "$of" "$bound" "${flags[@]}"
    done
}
block_recipes=(blockwise) # and mxfp8 where the device has it (below)
set +e
run_cases "${quick_cases[@]}"
# the model by device: on the emulation an H200 (sm_90) sums as Hopper, a B200 (sm_100) in FP32 (emu/cublaslt.cpp)
if [ "$TRAIN" = ./train_emu ]; then
    CUDA_EMU_DEVICE=b200 device_accumulation
    [ "${device_sums[h200]}" = hopper ] && [ "${device_sums[b200]}" = fp32 ]
    result $? "FP8 accumulation by device: H200 ${device_sums[h200]}, B200 ${device_sums[b200]} (hopper, fp32)"
fi
# make check's quick tier (TEST_GPU_QUICK=1) ends here
if [ "${TEST_GPU_QUICK:-0}" = 1 ]; then finish; exit; fi
# mxfp8 needs Blackwell's cuBLASLt mode: on the emulation a B200 (CUDA_EMU_DEVICE, which a GPU ignores); a
# Hopper GPU refuses it with one line, and the mxfp8 checks are skipped
mx_refusal=$(CUDA_EMU_DEVICE=b200 "$TRAIN" "${model[@]}" --steps 1 --output_dir "" --dtype float8 --fp8_recipe mxfp8 \
    2>&1 >/dev/null | tail -n 1)
if [[ "$mx_refusal" == *"need Blackwell"* ]]; then
    echo "skip: GPU mxfp8 on this device: $mx_refusal"
else
    block_recipes+=(mxfp8)
fi
# the teacher-forced cases' shard (case_forced), and llama_scaled's file
"$PY" test/gpu_checks.py repeat_shard "$tmp"/data/text_train_000000.bin "$tmp/repeat_train_000000.bin" $((8 * 64))
./train_cpu "${llama[@]}" --steps 1 --dtype float32 --output_dir "$tmp/llama_init" >/dev/null
"$PY" test/gpu_checks.py scaled_rope "$tmp/llama_init/model_00000001.bin" "$tmp/llama_scaled.bin"
run_cases "${cases[@]}"
# Which GEMMs accumulate without promotion: --fp8_fast_accum 0 none, 1 the forward's, 2 the gradients' too. Step
# 1's logits come from the forward alone and its gradients from both, so in each trainer 1 and 2 give the same
# logits bit for bit and different gradients, and 0 and 1 different logits: every GEMM here has K > 128 somewhere
# (fcproj's 512 in the forward, N = 512 tokens in the weight gradients), where a truncating, never-promoted sum
# departs from a promoted one. Two runs of one setting are bit-identical (section 2), so equality is exact and
# any difference is the setting's. Against the CPU reference alone this cannot be seen: the E5M2 casts' rounding
# flips (a median 0.6% per gradient element) hide the truncation's few 1e-3. A device that sums FP8 in FP32
# (Blackwell) has no promotion to skip: there the three settings give the same bits.
for who in gpu cpu; do
    "$PY" test/gpu_checks.py fast_accum "${device_sums[h200]}" "$tmp"/${who}_float8_{precise_accum,delayed,fast_all}.bin
    result $? "--fp8_fast_accum 0, 1, 2 ($who, FP8 accumulation ${device_sums[h200]}): the forward's GEMMs fast from 1, the gradients' only at 2 (FP32 sums: no change)"
done
# the scaled rotary wavelengths reach the GPU's table: its logits differ from the GPU run of the same weights
# unflagged
"$TRAIN" "${llama[@]}" --init_from "$tmp/llama_init/model_00000001.bin" --steps 1 --output_dir "" --dtype bfloat16 \
    --debug_state "$tmp/gpu_llama_unscaled_bfloat16.bin" >/dev/null
"$PY" test/gpu_checks.py logits_differ "$tmp/gpu_llama_scaled_bfloat16.bin" "$tmp/gpu_llama_unscaled_bfloat16.bin"
result $? "Llama 3.1 scaled rotary embeddings: the GPU's logits differ from the unscaled file's"
# a block recipe's casts of the same weights give the same block scales, bit for bit (one rule, fp8_scaling.h,
# on identical FP32 masters: --lr 0 keeps them). The other tensors' amaxes and scales, to bounds from what they
# have passed through: layer 0's qkv input only the BF16 LayerNorm of the embeddings (each value to BF16
# rounding, 2^-8 relative in each of the two: 2^-7); every later input at least one FP8 GEMM, whose E4M3
# operands may round a product's factor the other way, one E4M3 spacing (2^-3 relative), which bounds the
# change of a sum dominated by one product: 2^-3; the output gradients the E5M2 casts above (2^-2). The
# smallest block's scale (scale_max) has no such bound (a block near zero); it is checked for order only.
for recipe in "${block_recipes[@]}"; do
    mapfile -d '' still < <(merge_flags "${model[@]}" -- --lr 0 --steps 1 --dtype float8 --fp8_recipe $recipe \
        --fp8_stats_every 1 --output_dir "")
    device=h200; [ $recipe = mxfp8 ] && device=b200
    CUDA_EMU_DEVICE=$device "$TRAIN" "${still[@]}" --log_file "$tmp/blocks_gpu_$recipe.jsonl" >/dev/null
    CUDA_EMU_DEVICE=$device cpu_accumulation accumulation "${still[@]}"
    ./train_cpu "${still[@]}" "${accumulation[@]}" --log_file "$tmp/blocks_cpu_$recipe.jsonl" >/dev/null
    "$PY" test/gpu_checks.py block_scales "$tmp/blocks_gpu_$recipe.jsonl" "$tmp/blocks_cpu_$recipe.jsonl"
    result $? "$recipe block scales: the weights' equal the CPU's bit for bit, the others' within their bounds"
done
# Each step's casts use that step's scale: in the current recipe every cast's scale is the exact scale of the
# amax the same cast recorded (the same tensor, measured twice on the device), and in both recipes every
# weight's; a scale kept from an earlier step (an amax not reset) differs wherever an amax went down, which
# the check requires to happen. train_cpu is the control. The quotient of two floats in double arithmetic,
# rounded to float, is the correctly rounded float quotient (53 >= 2 x 24 + 2 bits), as __fdiv_rn and C's.
for recipe in current delayed; do
    mapfile -d '' stats < <(merge_flags "${model[@]}" -- --steps 6 --dtype float8 --fp8_recipe $recipe \
        --fp8_stats_every 1 --output_dir "")
    for trainer in gpu:"$TRAIN" cpu:./train_cpu; do
        "${trainer#*:}" "${stats[@]}" --log_file "$tmp/stats_${recipe}_${trainer%%:*}.jsonl" >/dev/null
        "$PY" test/gpu_checks.py exact_scales "$tmp/stats_${recipe}_${trainer%%:*}.jsonl" $recipe
        result $? "$recipe recipe (${trainer%%:*}): every step's scales are the exact scales of that step's amaxes"
    done
done
for dtype in bfloat16 float8; do
    "$TRAIN" "${llama[@]}" --steps 6 --output_dir "$tmp/llama_zero_0_0_$dtype" --dtype $dtype >/dev/null
    for run in 1:0 3:0 0:1; do
        IFS=: read -r zero recompute <<<"$run"
        "$TRAIN" "${llama[@]}" --steps 6 --output_dir "$tmp/llama_zero_${zero}_${recompute}_$dtype" --dtype $dtype \
            --zero_stage $zero --recompute $recompute >/dev/null
        cmp -s "$tmp/llama_zero_0_0_$dtype/model_00000006.bin" "$tmp/llama_zero_${zero}_${recompute}_$dtype/model_00000006.bin"
        result $? "Llama: --zero_stage $zero --recompute $recompute in one process gives ZeRO-0's weights ($dtype)"
    done
done
for dtype in bfloat16 float8; do
    "$TRAIN" "${model[@]}" --steps 6 --output_dir "$tmp/graph_$dtype" --dtype $dtype --cuda_graph 1 \
        --log_file "$tmp/graph_$dtype.jsonl" >/dev/null
    "$TRAIN" "${model[@]}" --steps 6 --output_dir "$tmp/eager_$dtype" --dtype $dtype --cuda_graph 0 \
        --log_file "$tmp/eager_$dtype.jsonl" >/dev/null
    cmp -s "$tmp/graph_$dtype/model_00000006.bin" "$tmp/eager_$dtype/model_00000006.bin"
    result $? "CUDA Graph and op-by-op runs give identical weights ($dtype)"
    "$TRAIN" "${model[@]}" --steps 6 --output_dir "$tmp/half_$dtype" --dtype $dtype --ckpt_every 3 >/dev/null &&
        rm "$tmp/half_$dtype/model_00000006.bin" && echo 3 >"$tmp/half_$dtype/latest_checkpoint" &&
        "$TRAIN" "${model[@]}" --steps 6 --output_dir "$tmp/half_$dtype" --dtype $dtype --resume 1 >/dev/null
    cmp -s "$tmp/graph_$dtype/model_00000006.bin" "$tmp/half_$dtype/model_00000006.bin" &&
        cmp -s "$tmp/graph_$dtype/state_00000006_00000.bin" "$tmp/half_$dtype/state_00000006_00000.bin"
    result $? "resume is bit-exact ($dtype)"
    ./train_cpu "${model[@]}" --steps 8 --output_dir "$tmp/graph_$dtype" --dtype $dtype --resume 1 >/dev/null
    result $? "a GPU checkpoint continues on train_cpu ($dtype)"
done
# the block recipes: CUDA Graph against op-by-op, resume, --recompute 1 (their saved inputs' factors are
# recomputed with the inputs), each bit for bit
for recipe in "${block_recipes[@]}"; do
    device=h200; [ $recipe = mxfp8 ] && device=b200
    blocks=("${model[@]}" --steps 4 --dtype float8 --fp8_recipe $recipe)
    for variant in graph:"--cuda_graph 1" eager:"--cuda_graph 0" recompute:"--recompute 1" half:"--ckpt_every 2"; do
        read -r -a extra <<<"${variant#*:}"
        CUDA_EMU_DEVICE=$device "$TRAIN" "${blocks[@]}" --output_dir "$tmp/${recipe}_${variant%%:*}" "${extra[@]}" \
            >/dev/null
    done
    rm -f "$tmp/${recipe}_half/model_00000004.bin" && echo 2 >"$tmp/${recipe}_half/latest_checkpoint" &&
        CUDA_EMU_DEVICE=$device "$TRAIN" "${blocks[@]}" --output_dir "$tmp/${recipe}_half" --resume 1 >/dev/null
    for variant in eager:"op-by-op" recompute:"--recompute 1" half:"resumed at step 2"; do
        cmp -s "$tmp/${recipe}_graph/model_00000004.bin" "$tmp/${recipe}_${variant%%:*}/model_00000004.bin"
        result $? "$recipe: ${variant#*:} gives the CUDA Graph run's weights"
    done
    cmp -s "$tmp/${recipe}_graph/state_00000004_00000.bin" "$tmp/${recipe}_half/state_00000004_00000.bin"
    result $? "$recipe: the resumed run's state file equals the straight run's"
    mapfile -d '' longer < <(merge_flags "${blocks[@]}" -- --steps 6)
    ./train_cpu "${longer[@]}" --output_dir "$tmp/${recipe}_graph" --resume 1 >/dev/null
    result $? "$recipe: a GPU checkpoint continues on train_cpu"
done
for run in 1:0:float8 3:0:float8 0:1:float8 3:1:bfloat16; do
    IFS=: read -r zero recompute dtype <<<"$run"
    "$TRAIN" "${model[@]}" --steps 6 --output_dir "$tmp/zero_${run//:/_}" --dtype $dtype --zero_stage $zero \
        --recompute $recompute >/dev/null
    cmp -s "$tmp/graph_$dtype/model_00000006.bin" "$tmp/zero_${run//:/_}/model_00000006.bin"
    result $? "--zero_stage $zero --recompute $recompute in one process gives ZeRO-0's weights ($dtype)"
done
"$TRAIN" "${model[@]}" --steps 6 --output_dir "$tmp/zero_half" --dtype float8 --zero_stage 3 --ckpt_every 3 \
    >/dev/null && rm "$tmp/zero_half/model_00000006.bin" && echo 3 >"$tmp/zero_half/latest_checkpoint" &&
    "$TRAIN" "${model[@]}" --steps 6 --output_dir "$tmp/zero_half" --dtype float8 --zero_stage 3 --resume 1 >/dev/null
cmp -s "$tmp/zero_3_0_float8/model_00000006.bin" "$tmp/zero_half/model_00000006.bin" &&
    cmp -s "$tmp/zero_3_0_float8/state_00000006_00000.bin" "$tmp/zero_half/state_00000006_00000.bin"
result $? "resume is bit-exact with --zero_stage 3 (float8)"
health=(--model_size d2 --channels 128 --heads 4 --vocab 256 --seq_len 64 --batch_size 8 --val_batches 2
        --train_data "$tmp/data/text_train_*.bin" --val_data "$tmp/data/text_val_*.bin" --attention exact)
"$TRAIN" "${health[@]}" --steps 5 --dtype float8 --inject_nan_step 3 --ckpt_every 1 --output_dir "$tmp/nan" >"$tmp/nan.txt"
grep -q 'skipped (non-finite' "$tmp/nan.txt" && cmp -s "$tmp/nan/model_00000002.bin" "$tmp/nan/model_00000003.bin"
result $? "an injected NaN is skipped and changes no weight"
# the gradient-norm guard, decided on the device from its own copy of the window: every step's decision is
# the guard's rule replayed on the logged losses and norms (%.9g: the float32 values exactly, summed in the
# same double arithmetic), a step is skipped, and a resume with the guard on is bit-exact (the window
# travels through the state file). Constant learning rate: the resumed half must see the same schedule.
# The shard's first 8 batches are random tokens, the rest text: at step 9, the first the guard may judge, the
# norm jumps (about 0.6 to 3.7 in a CPU run), far above the window's mean + 0.1 sd, whatever the text is.
"$PY" test/gpu_checks.py spike_shard "$tmp"/data/text_train_000000.bin "$tmp/spike_train_000000.bin" $((8 * 512))
mapfile -d '' guard < <(merge_flags "${model[@]}" -- --train_data "$tmp/spike_train_000000.bin" --warmup_steps 0 \
    --dtype float8 --skip_norm_z 0.1 --guard_window 8 --lr_schedule constant --steps 16)
"$TRAIN" "${guard[@]}" --ckpt_every 8 --output_dir "$tmp/guard" --log_file "$tmp/guard.jsonl" >"$tmp/guard.txt"
"$PY" test/gpu_checks.py norm_guard "$tmp/guard.jsonl" 8 0.1 8 # --guard_window, --skip_norm_z, health.h's GUARD_MIN_SAMPLES
result $? "the device's norm guard: each step's decision is the guard's rule on the logged norms, and one skips"
cp -r "$tmp/guard" "$tmp/guard_half" && rm "$tmp/guard_half"/*_00000016* && echo 8 >"$tmp/guard_half/latest_checkpoint" &&
    "$TRAIN" "${guard[@]}" --output_dir "$tmp/guard_half" --resume 1 >/dev/null
cmp -s "$tmp/guard/model_00000016.bin" "$tmp/guard_half/model_00000016.bin" &&
    cmp -s "$tmp/guard/state_00000016_00000.bin" "$tmp/guard_half/state_00000016_00000.bin"
result $? "with the device's guard on (a step skipped after the checkpoint), resume is bit-exact"
"$TRAIN" "${health[@]}" --steps 3 --dtype bfloat16 --bf16_check_every 1 --output_dir "" >"$tmp/shadow.txt"
[ "$(grep -c '^bf16 .*difference +0.000000$' "$tmp/shadow.txt")" = 3 ]
result $? "the BF16 shadow check of a bfloat16 run is exactly zero"
"$TRAIN" "${health[@]}" --init_from "$tmp/nan/model_00000005.bin" --eval_only 1 --output_dir "" --log_file "$tmp/eval.jsonl" >/dev/null
for run in bfloat16:delayed float8:current; do
    "$TRAIN" "${health[@]}" --init_from "$tmp/nan/model_00000005.bin" --dtype "${run%%:*}" --fp8_recipe "${run#*:}" \
        --lr 0 --steps 1 --output_dir "" --log_file "$tmp/lr0_${run%%:*}.jsonl" >/dev/null
done
"$PY" test/gpu_checks.py eval_only "$tmp/eval.jsonl" "$tmp/lr0_bfloat16.jsonl" "$tmp/lr0_float8.jsonl"
result $? "--eval_only equals the validation losses of unchanged models"
"$PY" test/gpu_checks.py hot_gains "$tmp/nan/model_00000005.bin" "$tmp/hot.bin"
# each trainer's own checkpoint of an ordinary first step, its weights swapped for the hot ones: at step 2
# the delayed scales (from step 1's history) saturate the qkv input
for trainer in gpu:"$TRAIN" cpu:./train_cpu; do
    "${trainer#*:}" "${health[@]}" --steps 1 --ckpt_every 1 --output_dir "$tmp/warm_${trainer%%:*}" >/dev/null
    cp "$tmp/hot.bin" "$tmp/warm_${trainer%%:*}/model_00000001.bin"
    "$PY" test/checkpoint_manifest.py "$tmp/warm_${trainer%%:*}" 1 # the swap made on purpose: its manifest follows
    "${trainer#*:}" "${health[@]}" --steps 2 --resume 1 --fp8_stats_every 1 --output_dir "$tmp/warm_${trainer%%:*}" \
        --log_file "$tmp/hot_${trainer%%:*}.jsonl" >/dev/null
done
"$PY" test/gpu_checks.py saturation "$tmp/hot_gpu.jsonl" "$tmp/hot_cpu.jsonl"
result $? "the GPU's saturation counts agree with the CPU's"
"$TRAIN" "${health[@]}" --steps 1 --fp8_stats_every 1 --output_dir "" --log_file "$tmp/fresh_gpu.jsonl" >/dev/null
"$PY" test/gpu_checks.py fresh_scales "$tmp/fresh_gpu.jsonl"
result $? "delayed recipe, a fresh run's step 1 on the GPU: every activation and gradient cast measured"
"$TRAIN" "${health[@]}" --steps 2 --dtype float8 --tokenizer "$tmp/data/text_tokenizer.bin" --sample_every 2 \
    --sample_len 16 --output_dir "" >"$tmp/sample.txt"
grep -q '^sample | ' "$tmp/sample.txt"
result $? "the GPU trainer samples text"

mapfile -d '' llama_auto < <(merge_flags "${llama[@]}" -- --attention auto)
fast_refusal=$("$TRAIN" "${fast[@]}" --steps 1 --output_dir "" 2>&1 >/dev/null | tail -n 1)
# Where it must run, a refusal is a failure, not a skip: a build with cuDNN on Hopper, or on Blackwell from
# cuDNN 9.18 (its first deterministic fused backward there), as the run's versions line names them.
versions=$(grep -m1 '^versions |' "$tmp/sample.txt" || true)
fast_expected=$("$PY" test/gpu_checks.py fast_expected "$versions")
if [ "$fast_expected" = 1 ] && [[ "$fast_refusal" == *"--attention fast:"* ]]; then
    bad "the fast attention must run here ($versions) but is refused: $fast_refusal"
elif [[ "$fast_refusal" == *"--attention fast:"* ]]; then
    # where it cannot run (a build without cuDNN, the emulation; a device cuDNN declines), one line says why,
    # and auto names the attention it runs instead in the banner; for Llama's grouped-query heads too
    [[ "$fast_refusal" == "error: --attention fast: "* ]] &&
        "$TRAIN" "${common[@]}" --steps 1 --output_dir "" >"$tmp/auto.txt" && grep -q "| attention exact (" "$tmp/auto.txt" &&
        [[ "$("$TRAIN" "${llama_fast[@]}" --steps 1 --output_dir "" 2>&1 >/dev/null | tail -n 1)" == "error: --attention fast: "* ]] &&
        "$TRAIN" "${llama_auto[@]}" --steps 1 --output_dir "" >"$tmp/llama_auto.txt" && grep -q "| attention exact (" "$tmp/llama_auto.txt"
    result $? "the fast attention is refused with one line where it cannot run, auto says which runs (GPT-2, Llama)"
    echo "skip: the fast attention: $fast_refusal"
else
    run_cases "${fast_cases[@]}"
    for dtype in bfloat16 float8; do
        for variant in graph:"--cuda_graph 1" eager:"--cuda_graph 0" half:"--ckpt_every 2"; do
            read -r -a extra <<<"${variant#*:}"
            "$TRAIN" "${fast[@]}" --steps 4 --dtype $dtype --output_dir "$tmp/fast_${dtype}_${variant%%:*}" \
                "${extra[@]}" >/dev/null
        done
        rm -f "$tmp/fast_${dtype}_half/model_00000004.bin" && echo 2 >"$tmp/fast_${dtype}_half/latest_checkpoint" &&
            "$TRAIN" "${fast[@]}" --steps 4 --dtype $dtype --output_dir "$tmp/fast_${dtype}_half" --resume 1 >/dev/null
        for variant in eager:"op-by-op" half:"resumed at step 2"; do
            cmp -s "$tmp/fast_${dtype}_graph/model_00000004.bin" "$tmp/fast_${dtype}_${variant%%:*}/model_00000004.bin"
            result $? "fast attention, $dtype: ${variant#*:} gives the CUDA Graph run's weights"
        done
    done
fi
finish

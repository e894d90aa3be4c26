#!/usr/bin/env bash
# test_gpu_host.sh: the host side of the CUDA trainer, on a machine with or without a GPU. Both trainers
# include the same CLI, config, data and file code, so for every bad flag or file ./train must fail
# exactly as ./train_cpu does (same single error line, exit 1), before it touches a GPU; and the checks
# only the GPU path has (FP8 GEMM shapes, attention head size, float32, what several processes or ZeRO-3
# cannot do) give their own one-line errors.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
test_init
test_tmpdir tmp test_gpu_host
test_data_dir "$tmp/data" text
printf 'not a shard at all, not even close to 1024 bytes' >"$tmp/bad_magic.bin"
touch "$tmp/a_file"
base=(--model_size d2 --vocab 256 --seq_len 64 --batch_size 4 --steps 1 --dtype bfloat16 --output_dir ""
      --train_data "$tmp/data/text_train_*.bin" --val_data "$tmp/data/text_val_*.bin")
run() { # binary args... -> sets status and err
    set +e; "$@" >/dev/null 2>"$tmp/err"; status=$?; set -e; err="$(cat "$tmp/err")"
}
one_error_line() { [ "$status" = 1 ] && [ "$(wc -l <"$tmp/err")" = 1 ] && [[ "$err" == error:* ]]; }
same_as_cpu() { # description args...
    local what="$1" args; shift
    mapfile -d '' args < <(merge_flags "${base[@]}" -- "$@")
    run ./train_cpu "${args[@]}"; local cpu_status=$status cpu_err="$err"
    run ./train "${args[@]}"
    if one_error_line && [ "$cpu_status" = 1 ] && [ "$err" = "$cpu_err" ]; then
        ok "$what: $err"
    else
        bad "$what: train exit $status '$err' vs train_cpu exit $cpu_status '$cpu_err'"
    fi
}
gpu_error() { # description expected-substring args...
    local what="$1" want="$2" args; shift 2
    mapfile -d '' args < <(merge_flags "${base[@]}" -- "$@")
    run ./train "${args[@]}"
    if one_error_line && [[ "$err" == *"$want"* ]]; then
        ok "$what: $err"
    else
        bad "$what: exit $status '$err' (expected '$want')"
    fi
}
same_as_cpu "unknown flag" --no_such_flag 1
same_as_cpu "flag without value" --lr
same_as_cpu "negative learning rate" --lr -1
same_as_cpu "unknown dtype" --dtype float16
same_as_cpu "unknown recipe" --fp8_recipe foo
same_as_cpu "unknown attention" --attention flash
same_as_cpu "fast accumulation out of range" --fp8_fast_accum 3
same_as_cpu "zero batch" --batch_size 0
same_as_cpu "unknown preset" --model_size 3B
same_as_cpu "sequence longer than the model's" --seq_len 512
same_as_cpu "channels not divisible by heads" --channels 96 --heads 5
same_as_cpu "total batch not a multiple" --total_batch_size 1000
same_as_cpu "missing shard" --train_data "$tmp/none.bin"
same_as_cpu "shard with a bad header" --train_data "$tmp/bad_magic.bin"
same_as_cpu "output dir under a file" --output_dir "$tmp/a_file/out"
same_as_cpu "missing model file" --init_from "$tmp/none_model.bin"
mkfifo "$tmp/fifo.bin"
same_as_cpu "a FIFO as a shard (never opened: it would block)" --train_data "$tmp/fifo.bin"
same_as_cpu "a directory as a model file" --init_from "$tmp"
same_as_cpu "a flag given twice" --lr 0.1 --lr 0.2
same_as_cpu "a learning rate below a float's range" --lr 1e-320
same_as_cpu "checkpoints without an output directory" --ckpt_every 1 --output_dir=
same_as_cpu "resume without an output directory" --resume 1 --output_dir=
gpu_error "float32 is the CPU's" "--dtype: float32" --dtype float32
gpu_error "blockwise weights need ZeRO-0" "--fp8_recipe blockwise: needs --zero_stage 0" --dtype float8 \
    --fp8_recipe blockwise --channels 128 --heads 4 --zero_stage 1
gpu_error "mxfp8 weights need ZeRO-0" "--fp8_recipe mxfp8: needs --zero_stage 0" --dtype float8 --fp8_recipe mxfp8 \
    --zero_stage 3
same_as_cpu "blockwise on channels that are not a multiple of 128" --dtype float8 --fp8_recipe blockwise
gpu_error "FP8 needs B*T multiple of 16" "multiple of 16" --dtype float8 --batch_size 3 --seq_len 5
gpu_error "unsupported attention head size" "head size" --channels 64 --heads 4
gpu_error "ZeRO-3 has no whole gradient for the debug state" "--zero_stage 0 or 1" --zero_stage 3 \
    --debug_state "$tmp/debug.bin"
# several processes, torchrun-style (no MPI): refused before any CUDA call when the setup cannot work
RANK=0 WORLD_SIZE=2 gpu_error "torchrun-style launch without --output_dir" "through a file in --output_dir"
TORCHELASTIC_RUN_ID=launch-1 RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 gpu_error "--debug_state with several processes" \
    "runs one process" --output_dir "$tmp/out2" --debug_state "$tmp/debug.bin"
# the NCCL id file's name must be unique to the launch, or a file left by a killed launch could be read
RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 gpu_error "torchrun-style launch without a per-launch value" \
    "no value unique to this launch" --output_dir "$tmp/out2"
TORCHELASTIC_RUN_ID=none RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 gpu_error "torchrun's run id 'none' is no per-launch value" \
    "no value unique to this launch" --output_dir "$tmp/out2"
# srun torchrun on a PMIx cluster: the workers of a node share one MPI task's variables; torchrun's ranks win
# (MPI would make the 8 workers one rank): the run is seen as 2 processes, not as MPI's 1
PMIX_RANK=0 SLURM_STEP_NUM_TASKS=1 TORCHELASTIC_RUN_ID=launch-1 RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 \
    gpu_error "srun torchrun: torchrun's ranks win over PMIx's" "runs one process; this run has 2" \
    --output_dir "$tmp/out2" --debug_state "$tmp/debug.bin"
PMIX_RANK=0 SLURM_STEP_NUM_TASKS=1 RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 run ./train_cpu "${base[@]}"
if one_error_line && [[ "$err" == *"WORLD_SIZE=2: train_cpu exchanges data through MPI"* ]]; then
    ok "srun torchrun: train_cpu takes torchrun's 2 ranks and refuses them without MPI: $err"
else
    bad "srun torchrun with train_cpu: exit $status '$err'"
fi
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi >/dev/null 2>&1; then
    gpu_error "valid flags on a machine without a GPU" "no CUDA device"
fi
# make train's default build (the Makefile's own defaults, whatever this make was given) is one binary for
# Hopper and Blackwell: an "a" target runs on its architecture alone
nvcc_line=$(env -u MAKEFLAGS -u MAKELEVEL -u GPU_ARCH make -s -n -B train | grep -- '-o train ')
[[ "$nvcc_line" == *"code=sm_90a"* && "$nvcc_line" == *"code=sm_100a"* ]]
result $? "make train's nvcc line has both targets ($(grep -o -- '-gencode [^ ]*' <<<"$nvcc_line" | tr '\n' ' '))"
# scripts/gpu_check.sh stops at a failed build, before any run (a stale or missing ./train must not be measured):
# a compiler that fails (NVCC=false; PYTHON=false keeps cudnn_deps.sh from fetching cuDNN: the exact attention)
status=0
PYTHON=false NVCC=false OUT="$tmp/gpu_check" bash scripts/gpu_check.sh >"$tmp/gpu_check.txt" 2>&1 || status=$?
[ $status = 1 ] && grep -q "^gpu_check: the build failed" "$tmp/gpu_check.txt" && grep -q "^== environment" "$tmp/gpu_check.txt" &&
    ! grep -q "^== kernel benchmark" "$tmp/gpu_check.txt"
result $? "gpu_check.sh with a failing compiler exits $status before any run ($(grep -m1 '^gpu_check' "$tmp/gpu_check.txt"))"
finish

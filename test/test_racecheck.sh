#!/usr/bin/env bash
# test_racecheck.sh: the CUDA trainer under the emulation's race checker (make test_racecheck;
# test/build/train_emu_racecheck: the trainer compiled with -fsanitize=thread against emu/racecheck.cpp, which
# checks every access of its kernels to shared and device memory, as compute-sanitizer's racecheck does).
#   1. every kernel family runs at least once, and none races: GPT-2 and Llama, bfloat16 and float8 in every
#      recipe (delayed over three steps, so that its steady state's fused casts run; current; blockwise;
#      mxfp8 on the emulated B200), ZeRO-1 and ZeRO-3 with recompute and gradient accumulation, CUDA Graphs
#      and op by op, validation, sampling, the BF16 shadow check, the FP8 telemetry and an injected NaN, and
#      (under mpirun, 2 processes) ZeRO-1 and ZeRO-3 with the gradients summed in BF16. The
#      shapes give every reduction several warps and sizes that are not powers of two: a vocabulary of 1000
#      (the cross-entropy's block is 125 threads: 4 warps, the last partial), C = 96 (3 heads) for the
#      per-tensor recipes, the block recipes at C = 128 with Llama's F = 384 (their 128-element blocks), and
#      T = 96, three of the attention's 32-key chunks, so that a chunk is restaged over one other warps may
#      still read (at T = 32, one chunk, a missing barrier there went unseen: dev/mutants.py);
#   2. the kernels the runs executed (the emulator's report) cover every __global__ function of gpu/*.cuh and
#      train_gpt_fp8.cu, so that a kernel no run reaches cannot hide a race.
# That the checker finds races, each kind, is test/test_emu.sh's (its planted race_* faults); races planted in
# the trainer's own kernels are dev/mutants.py's (make mutants).
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
test_init
test_tmpdir tmp test_racecheck
test_data_dir "$tmp/data" text
checked=./test/build/train_emu_racecheck
base=(--model_size d2 --vocab 1000 --seq_len 96 --batch_size 4 --steps 2 --lr 1e-3 --output_dir ""
      --train_data "$tmp/data/text_train_*.bin" --val_data "$tmp/data/text_val_*.bin" --val_every 2 --val_batches 1
      --attention exact)
n=0
race_free() { # NAME [ENV=VALUE...] -- FLAGS...: the run ends with status 0 and the checker reports nothing
    local name=$1 status=0 env=() args
    shift
    while [ "$1" != -- ]; do env+=("$1"); shift; done
    shift
    n=$((n + 1))
    mapfile -d '' args < <(merge_flags "${base[@]}" -- "$@")
    env "${env[@]}" CUDA_EMU_REPORT="$tmp/report_$n.txt" "$checked" "${args[@]}" >"$tmp/run_$n.out" 2>&1 ||
        status=$?
    [ $status = 0 ] && ! grep -q racecheck "$tmp/run_$n.out"
    result $? "race-free: $name (exit $status)"
    [ $status = 0 ] || tail -n 3 "$tmp/run_$n.out"; grep -m4 racecheck "$tmp/run_$n.out"
}
for arch in gpt2 llama; do
    a=(--arch $arch) per_tensor=(--channels 96 --heads 3) block=(--channels 128 --heads 4)
    if [ $arch = llama ]; then # grouped-query heads; the block recipes' qkv has (4 + 2 x 2) x 32 features
        a+=(--ffn_dim 384) per_tensor+=(--kv_heads 1) block+=(--kv_heads 2)
    fi
    race_free "$arch bfloat16, CUDA Graphs, sampling, the BF16 shadow check" -- "${a[@]}" "${per_tensor[@]}" \
        --dtype bfloat16 --cuda_graph 1 --sample_every 2 --sample_len 4 --bf16_check_every 2
    race_free "$arch float8 delayed, three steps op by op, FP8 telemetry, an injected NaN" -- "${a[@]}" \
        "${per_tensor[@]}" --dtype float8 --fp8_recipe delayed --steps 3 --cuda_graph 0 --fp8_stats_every 1 \
        --inject_nan_step 2 --bf16_check_every 3
    race_free "$arch float8 current" -- "${a[@]}" "${per_tensor[@]}" --dtype float8 --fp8_recipe current
    race_free "$arch float8 blockwise" -- "${a[@]}" "${block[@]}" --dtype float8 --fp8_recipe blockwise \
        --fp8_stats_every 1
    race_free "$arch float8 mxfp8 (B200)" CUDA_EMU_DEVICE=b200 -- "${a[@]}" "${block[@]}" --dtype float8 \
        --fp8_recipe mxfp8 --fp8_stats_every 1
    race_free "$arch float8 ZeRO-1" -- "${a[@]}" "${per_tensor[@]}" --dtype float8 --zero_stage 1
    race_free "$arch float8 ZeRO-3, recompute, gradient accumulation" -- "${a[@]}" "${per_tensor[@]}" \
        --dtype float8 --zero_stage 3 --recompute 1 --total_batch_size 768 --cuda_graph 0
done

# the gradients summed in BF16 run their staging kernels only between processes
if command -v mpirun >/dev/null; then
    mpi=(mpirun --oversubscribe -np 2 -x CUDA_EMU_REPORT)
    [ "$(id -u)" != 0 ] || mpi+=(--allow-run-as-root)
    for zero in 1 3; do
        n=$((n + 1))
        mapfile -d '' args < <(merge_flags "${base[@]}" -- --channels 96 --heads 3 --dtype float8 --zero_stage $zero \
            --grad_reduce_dtype bfloat16)
        status=0
        CUDA_EMU_REPORT="$tmp/report_${n}_%p.txt" "${mpi[@]}" "$checked" "${args[@]}" >"$tmp/run_$n.out" 2>&1 ||
            status=$?
        [ $status = 0 ] && ! grep -q racecheck "$tmp/run_$n.out" && verdict=0 || verdict=1
        result $verdict "race-free: gpt2 float8 ZeRO-$zero, 2 processes, gradients summed in BF16 (exit $status)"
        [ $status = 0 ] || tail -n 3 "$tmp/run_$n.out"
    done
else
    echo "note: mpirun not found: the BF16 gradient sum's kernels (2 processes) are not run here"
    unrun_without_mpi="gather_bf16_kernel widen_bf16_kernel"
fi

sources=(gpu/*.cuh train_gpt_fp8.cu)
UNRUN_WITHOUT_MPI=${unrun_without_mpi:-} "$PY" - "${#sources[@]}" "${sources[@]}" "$tmp"/report_*.txt <<'PY'
import os, re, sys
count = int(sys.argv[1])
defined, executed = set(), set()
for path in sys.argv[2:2 + count]:
    text = open(path).read()
    defined |= set(re.findall(r"__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s*)?(\w+)\s*\(", text))
for path in sys.argv[2 + count:]:
    for line in open(path):
        m = re.match(r"kernel (\S+?)(?:<.*)? executed \d+", line)
        if m:
            executed.add(m.group(1).split("::")[-1])
missing = sorted(defined - executed - set(os.environ["UNRUN_WITHOUT_MPI"].split()))
print(f"     {len(defined)} kernels defined, {len(defined & executed)} executed under the race checker")
sys.exit(f"never run under the race checker: {', '.join(missing)}" if missing else 0)
PY
result $? "every kernel of the trainer ran under the race checker"
finish

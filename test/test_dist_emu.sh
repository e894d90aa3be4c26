#!/usr/bin/env bash
# test_dist_emu.sh: the CUDA trainer's several-process paths (NCCL, ZeRO 0/1/3) on the CPU emulation of
# CUDA, under mpirun (make test_dist_emu; skipped without MPI).
#   - 2 processes with ZeRO 0, 1 and 3, and 4 processes with ZeRO 1 and 3, float8 (delayed), a d2 model:
#     ./train_emu against ./train_cpu with the same processes and flags, within the bounds of
#     test/compare_runs.py --float32 (the candidate no farther from the reference than the reference is
#     from float32);
#   - negative control: the comparison fails for runs of another global batch;
#   - with 2 processes every cross-rank sum is x0 + x1, which IEEE addition makes order-independent, so
#     ZeRO 0, 1 and 3 give bit-identical model files, as they do in train_cpu;
#   - a ZeRO-3 run resumed from its step-3 checkpoint ends with the straight run's model and state files;
#   - started torchrun-style by scripts/torchrun_local.sh (no MPI: the NCCL id through a file, the emulated
#     collectives through files), ZeRO-1 and ZeRO-3: mpirun's losses and model file bit for bit;
#   - the emulated NCCL across processes: collectives against their definitions (2 and 4 ranks), and a
#     rank that issues another collective than the others is stopped with one error line;
#   - --keep_gathered (ZeRO-3, each layer gathered once an optimizer step and kept) gives the two-slot
#     run's losses and model file bit for bit, through accumulation, validation and the BF16 shadow check;
#   - a rank that stops answering (--inject_stall_rank; ZeRO-1 and ZeRO-3) makes the other end non-zero on
#     --nccl_timeout_s with one line naming the wait and the last collective;
#   - the bytes of each kind of collective an optimizer step moves (the emulation's count on each rank)
#     equal what --dry_run's time plan predicts for that run (bfloat16 and float8, ZeRO 0, 1 and 3, with and
#     without gradient accumulation, with and without --keep_gathered);
#   - float8 with ZeRO-1/3 gathers the FP8 weights and only the BF16 tensors a float8 pass reads, and the
#     BF16 shadow check (which reads them all) gives ZeRO-0's losses and model file bit for bit;
#   - shard groups (--shard_group_size 2 of 4 processes, ZeRO-1 and ZeRO-3): train_emu = train_cpu within
#     the same bounds, and their bytes per step = the plan's (with the all-reduce across the groups);
#   - Llama: 2 processes, ZeRO-1 and ZeRO-3, float8, train_emu = train_cpu within the same bounds, and the
#     bytes per step = the plan's (float8 ZeRO-3 with accumulation, bfloat16 ZeRO-1).
#   - --grad_reduce_dtype bfloat16 (the gradients summed in BF16): 2 processes ZeRO-3 and 4 in shard groups
#     ZeRO-1, train_emu = train_cpu within the same bounds; with 2 processes ZeRO 0, 1 and 3 bit-identical
#     (bf16(bf16(x0) + bf16(x1)) is order-independent too); the bytes per step = the plan's (ZeRO 0, 1
#     across shard groups, and 3).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
test_init
test_tmpdir TMP test_dist_emu
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 CUDA_EMU_THREADS=1 # several processes share 2 cores
need_python_modules test_dist_emu numpy # compare_runs.py
if ! command -v mpirun >/dev/null; then
    echo "SKIPPED test_dist_emu: mpirun not found (apt-get install libopenmpi-dev openmpi-bin, then make clean)"
    exit 0
fi
MPIRUN=(mpirun --oversubscribe -x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS -x CUDA_EMU_THREADS)
if [ "$(id -u)" = 0 ]; then MPIRUN+=(--allow-run-as-root); fi
if ! grep -q libmpi <<<"$(ldd ./train_emu)"; then
    echo "SKIPPED test_dist_emu: the emulation was built without MPI (install libopenmpi-dev, then make clean)"
    exit 0
fi

test_data_dir "$TMP/data" text
LR=1e-3
STEPS=6
COMMON=(--model_size d2 --vocab 256 --train_data "$TMP/data/text_train_*.bin" --val_data "$TMP/data/text_val_*.bin"
    --seq_len 64 --steps $STEPS --val_every 3 --val_batches 2 --lr $LR --batch_size 2)

run() { # NAME BINARY PROCESSES FLAGS...: out dir, log and stdout under $TMP/NAME
    local name=$1 binary=$2 np=$3
    shift 3
    "${MPIRUN[@]}" -np "$np" "$binary" "${COMMON[@]}" --output_dir "$TMP/$name" --log_file "$TMP/$name.jsonl" "$@" \
        >"$TMP/$name.out" 2>&1
}
model() { echo "$TMP/$1/model_$(printf %08d "${2:-$STEPS}").bin"; }
# emu_vs_cpu NAME FLOAT32 PROCESSES FLAGS...: train_cpu (cpu_NAME) and train_emu (emu_NAME) in float8 with FLAGS,
# then compare_runs.py of the two against the float32 run FLOAT32 (128 rows a process); prints its verdict and
# returns its status. A failed emulated run shows its last lines. The emulated H200's FP8 GEMMs sum as Hopper's
# tensor cores do (the forward's fast, unpromoted), so its reference sums the same way (--fp8_accumulation
# hopper): with FP32 sums the reference's own error moves step 2's gradient norm 1.4x past the bound.
emu_vs_cpu() {
    local name=$1 float32=$2 np=$3 status=0 out
    shift 3
    run "cpu_$name" ./train_cpu "$np" --dtype float8 --fp8_accumulation hopper "$@"
    run "emu_$name" ./train_emu "$np" --dtype float8 "$@" || sed 's/^/     | /' "$TMP/emu_$name.out" | tail -5
    out=$("$PY" test/compare_runs.py --ref "$TMP/cpu_$name.jsonl" "$(model "cpu_$name")" \
        --run "$TMP/emu_$name.jsonl" "$(model "emu_$name")" --float32 "$TMP/$float32.jsonl" "$(model "$float32")" \
        --dtype float8 --rows $((np * 128)) --lr $LR) || status=$?
    echo "     $out" | head -3
    return $status
}

for np in 2 4; do
    run "cpu32_np$np" ./train_cpu "$np" --dtype float32
    for zero in $([ "$np" = 2 ] && echo 0 1 3 || echo 1 3); do
        status=0
        emu_vs_cpu "np${np}_z$zero" "cpu32_np$np" "$np" --zero_stage "$zero" || status=$?
        result $status "train_emu = train_cpu, $np processes, ZeRO-$zero, float8"
    done
done
# shard groups: 4 processes in 2 groups of 2 (the shards over a group, summed across the groups once a step)
for zero in 1 3; do
    status=0
    emu_vs_cpu "hybrid_z$zero" cpu32_np4 4 --zero_stage "$zero" --shard_group_size 2 || status=$?
    grep -q "zero_stage $zero in 2 groups of 2" "$TMP/emu_hybrid_z$zero.out" && [ $status = 0 ]
    result $? "train_emu = train_cpu, 4 processes in 2 shard groups of 2, ZeRO-$zero, float8"
done

# Llama (RMSNorm, rotary embeddings, grouped-query attention, SwiGLU, untied head): 2 processes, ZeRO-1 and 3
run cpu32_llama ./train_cpu 2 --dtype float32 --arch llama
for zero in 1 3; do
    status=0
    emu_vs_cpu "llama_z$zero" cpu32_llama 2 --arch llama --zero_stage "$zero" || status=$?
    result $status "train_emu = train_cpu, 2 processes, ZeRO-$zero, float8, Llama"
done

# --grad_reduce_dtype bfloat16: each rank's gradients and the running sum rounded to BF16 (dist.h's order is
# the emulated NCCL's); the micro-steps' sums stay FP32
for case in "2 3 0" "4 1 2"; do
    read -r np zero group <<<"$case"
    status=0
    emu_vs_cpu "bf16sum_np${np}_z$zero" "cpu32_np$np" "$np" --zero_stage "$zero" --shard_group_size "$group" \
        --grad_reduce_dtype bfloat16 || status=$?
    result $status "train_emu = train_cpu, $np processes, ZeRO-$zero, shard groups of ${group/#0/all}, gradients summed in BF16"
done
for zero in 0 1; do
    run "emu_bf16sum_np2_z$zero" ./train_emu 2 --dtype float8 --zero_stage $zero --grad_reduce_dtype bfloat16 ||
        echo "     the ZeRO-$zero run failed: $(tail -n 2 "$TMP/emu_bf16sum_np2_z$zero.out")"
done
status=0
cmp -s "$(model emu_bf16sum_np2_z0)" "$(model emu_bf16sum_np2_z1)" &&
    cmp -s "$(model emu_bf16sum_np2_z0)" "$(model emu_bf16sum_np2_z3)" || status=1
! cmp -s "$(model emu_bf16sum_np2_z3)" "$(model emu_np2_z3)" || status=1
result $status "train_emu, 2 processes, gradients summed in BF16: ZeRO 0, 1 and 3 bit-identical, and not FP32's"

status=0 # the emulated run of 2 processes against the reference of 4 (twice the global batch): must fail
"$PY" test/compare_runs.py --ref "$TMP/cpu_np4_z1.jsonl" "$(model cpu_np4_z1)" --run "$TMP/emu_np2_z1.jsonl" \
    "$(model emu_np2_z1)" --float32 "$TMP/cpu32_np4.jsonl" "$(model cpu32_np4)" --dtype float8 --rows 512 --lr $LR \
    >"$TMP/negative.txt" || status=$?
[ $status = 1 ]
result $? "negative control: another global batch fails the comparison ($(head -c 120 "$TMP/negative.txt"))"
status=0
cmp -s "$(model emu_np2_z0)" "$(model emu_np2_z1)" && cmp -s "$(model emu_np2_z0)" "$(model emu_np2_z3)" || status=1
result $status "train_emu, 2 processes: ZeRO 0, 1 and 3 bit-identical"

# torchrun-style (scripts/torchrun_local.sh, as scripts/gpu_check.sh starts its two-process row): no MPI, the
# NCCL id through a file in --output_dir named after the launch's run id, the emulated collectives through
# files in $TMPDIR. The same sums in the same order as under mpirun: the same losses and model file bit for
# bit, and nothing left behind (the id file, the emulation's directory).
for zero in 1 3; do
    mkdir -p "$TMP/transport_z$zero"
    status=0
    TMPDIR="$TMP/transport_z$zero" scripts/torchrun_local.sh --nproc_per_node 2 -- ./train_emu "${COMMON[@]}" \
        --output_dir "$TMP/torchrun_z$zero" --log_file "$TMP/torchrun_z$zero.jsonl" --dtype float8 --zero_stage $zero \
        --nccl_timeout_s 60 >"$TMP/torchrun_z$zero.out" 2>&1 || status=$?
    [ $status = 0 ] || sed 's/^/     | /' "$TMP/torchrun_z$zero.out" | tail -n 3
    steps() { grep '"type":"step"' "$TMP/$1.jsonl" | sed -E 's/"(ms|tokens_per_second)":[^,]*,//g' || true; }
    [ $status = 0 ] && [ "$(steps "torchrun_z$zero" | wc -l)" = $STEPS ] &&
        [ "$(steps "torchrun_z$zero")" = "$(steps "emu_np2_z$zero")" ] &&
        cmp -s "$(model "torchrun_z$zero")" "$(model "emu_np2_z$zero")" &&
        [ -z "$(ls "$TMP/transport_z$zero")" ] && ! ls "$TMP/torchrun_z$zero"/nccl_id* >/dev/null 2>&1
    result $? "train_emu, 2 processes torchrun-style (scripts/torchrun_local.sh), ZeRO-$zero: mpirun's losses and model file, nothing left behind"
done

# resume: the checkpoint of step 3 continued to step 6 equals the straight run, model and state files
run ckpt_z3 ./train_emu 2 --dtype float8 --zero_stage 3 --ckpt_every 3
cp -r "$TMP/ckpt_z3" "$TMP/resumed_z3"
rm "$TMP/resumed_z3"/*_00000006*.bin
echo 3 >"$TMP/resumed_z3/latest_checkpoint"
run resumed_z3 ./train_emu 2 --dtype float8 --zero_stage 3 --ckpt_every 3 --resume 1 || true
identical=0
for file in "$TMP/ckpt_z3"/*_00000006*.bin; do
    cmp -s "$file" "$TMP/resumed_z3/$(basename "$file")" || identical=1
done
status=0
grep -q "resumed | step 3" "$TMP/resumed_z3.out" && [ $identical = 0 ] || status=1
result $status "train_emu, 2 processes, ZeRO-3, float8: resumed at step 3, model and both state files of step 6 identical"

for np in 2 4; do
    status=0
    "${MPIRUN[@]}" -np $np ./test/build/test_emu nccl >"$TMP/nccl$np.out" 2>&1 || status=$?
    result $status "emulated NCCL across $np processes: all-reduce, all-gather, reduce-scatter"
done
status=0
"${MPIRUN[@]}" -np 2 ./test/build/test_emu nccl mismatch >"$TMP/mismatch.out" 2>&1 || status=$?
grep -q "cuda-emu: error: (rank [01]) NCCL collective #0 differs across ranks" "$TMP/mismatch.out" && [ $status != 0 ]
result $? "a rank that issues another collective than the others is stopped"

# The bytes of every collective of an optimizer step, counted by the emulation (CUDA_EMU_REPORT, the "step"
# range), equal --dry_run's time plan for the same run, kind by kind. The first step also max-reduces each
# FP8 tensor's amax alone (its history is empty), so a step is the difference of a 3-step and a 1-step run.
step_bytes() { # REPORT KIND: the total of KIND in the step range
    sed -n "s/^range_collective_bytes step count [0-9]* .*\b$2 \([0-9]*\).*/\1/p" "$1"
}
layers4=(--layers 4) # layers 2 and 3 are gathered in each pass (0 and 1 stay in their slots)
for config in "bfloat16 0 0 2 0 0" "float8 1 0 2 0 0" "float8 3 0 2 0 0" "bfloat16 3 512 2 0 0" \
    "float8 3 512 2 0 0" "float8 3 1024 4 2 0" "bfloat16 1 0 4 2 0" "float8 3 512 2 0 1" "bfloat16 3 1024 4 2 1" \
    "float8 3 512 2 0 0 llama" "bfloat16 1 0 2 0 0 llama" "bfloat16 0 0 2 0 0 gpt2 bfloat16" \
    "float8 3 512 2 0 0 gpt2 bfloat16" "bfloat16 1 0 4 2 0 gpt2 bfloat16"; do
    read -r dtype zero total np group keep arch grad <<<"$config"
    flags=(--dtype "$dtype" --zero_stage "$zero" --total_batch_size "$total" --shard_group_size "$group"
           --keep_gathered "$keep" --arch "${arch:-gpt2}" --grad_reduce_dtype "${grad:-float32}" "${layers4[@]}")
    for steps in 1 3; do
        rm -f "$TMP/bytes_$steps"_*.txt
        mapfile -d '' args < <(merge_flags "${COMMON[@]}" -- "${flags[@]}" --steps $steps --output_dir "")
        CUDA_EMU_REPORT="$TMP/bytes_${steps}_%p.txt" "${MPIRUN[@]}" -x CUDA_EMU_REPORT -np "$np" ./train_emu "${args[@]}" \
            >"$TMP/bytes_$steps.out" 2>&1 || echo "     the $steps-step run failed: $(tail -n 2 "$TMP/bytes_$steps.out")"
    done
    mapfile -d '' args < <(merge_flags "${COMMON[@]}" -- "${flags[@]}" --dry_run 1 --world_size "$np")
    ./train_emu "${args[@]}" >"$TMP/bytes_plan.out" 2>&1 || true
    counted="" planned=""
    for kind in all_reduce all_gather reduce_scatter broadcast; do
        per_rank=""
        for report in "$TMP"/bytes_3_*.txt; do
            one=$(ls "$TMP"/bytes_1_*.txt | head -n 1)
            per_rank+=" $(( ($(step_bytes "$report" $kind) - $(step_bytes "$one" $kind)) / 2 ))"
        done
        counted+="$kind$per_rank; "
        plan=$(sed -n "s/^plan_step_ms .* plan_${kind}_bytes \([0-9]*\).*/\1/p" "$TMP/bytes_plan.out")
        planned+="$kind$(printf " %s" $(seq "$np" | sed "s/.*/$plan/")); "
    done
    [ "$counted" = "$planned" ] && verdict=0 || verdict=1 # not `result $?`: set -e would end the script here
    result $verdict "${arch:-gpt2} $dtype, ZeRO-$zero, --total_batch_size $total, $np processes, --shard_group_size $group, --keep_gathered $keep, --grad_reduce_dtype ${grad:-float32}: bytes per step, counted on each rank = planned: $counted"
done

# float8 with ZeRO-1/3 gathers only the BF16 tensors a float8 pass reads (the FP8 weights beside them); the
# BF16 shadow check gathers the whole copy first. With 2 processes (order-independent sums) its losses and
# the model files with ZeRO-1 and ZeRO-3 are ZeRO-0's (which gathers nothing) bit for bit: a shadow pass that
# read BF16 weights float8 left ungathered would differ.
for zero in 0 1 3; do
    run "shadow_z$zero" ./train_emu 2 --dtype float8 --zero_stage $zero "${layers4[@]}" --bf16_check_every 2 ||
        echo "     the ZeRO-$zero run failed: $(tail -n 2 "$TMP/shadow_z$zero.out")"
done
checks() { grep '"type":"bf16_check"' "$TMP/$1.jsonl" || true; }
for zero in 1 3; do
    [ "$(checks shadow_z0 | wc -l)" = 3 ] && [ "$(checks shadow_z0)" = "$(checks "shadow_z$zero")" ] &&
        cmp -s "$(model shadow_z0)" "$(model "shadow_z$zero")"
    result $? "float8, ZeRO-$zero, 2 processes, BF16 shadow check every 2 steps: ZeRO-0's 3 checks and model file ($(checks "shadow_z$zero" | head -n 1 | cut -c1-90))"
done

# --keep_gathered: ZeRO-3 gathers each layer once an optimizer step, in the first micro-step's forward, and
# every later pass reads it there: the second micro-step, the backwards, the validation passes (steps 3 and
# 6), the BF16 shadow check (steps 2, 4, 6; after a validation pass of float8 it must gather the whole BF16
# copy again). The sums are those of ZeRO-3 without it (the same reduce-scatters in the same order; ZeRO-0's
# differ with accumulation, the micro-steps summed before the ranks), so its losses, checks and model file are
# the two-slot run's bit for bit; a pass that read a slot holding another layer, a stale update or the BF16
# tensors float8 leaves out would differ.
for keep in 0 1; do
    run "keep$keep" ./train_emu 2 --dtype float8 --zero_stage 3 --keep_gathered "$keep" "${layers4[@]}" \
        --total_batch_size 512 --bf16_check_every 2 || echo "     the run failed: $(tail -n 2 "$TMP/keep$keep.out")"
done
losses() { # every record of the log but its timings
    grep -E '"type":"(step|val|bf16_check)"' "$TMP/$1.jsonl" | sed -E 's/"(ms|tokens_per_second)":[^,]*,//g' || true
}
[ "$(losses keep0 | wc -l)" = 11 ] && [ "$(losses keep0)" = "$(losses keep1)" ] && cmp -s "$(model keep0)" "$(model keep1)" &&
    grep -q "layers kept gathered" "$TMP/keep1.out"
result $? "float8, ZeRO-3 --keep_gathered 1, 2 processes, 2 micro-steps, validation and shadow check: the losses and model file of two slots ($(losses keep1 | wc -l) records)"

# a rank that stops answering: the others' bounded waits on the stream (the emulated collective waits on its
# peer, as NCCL's kernel spins) end on --nccl_timeout_s, the communicator aborted
stall_ends "$TMP" emu_stall_z1 2 1 ./train_emu "${COMMON[@]}" --dtype float8 --zero_stage 1 --output_dir "$TMP/stall1"
stall_ends "$TMP" emu_stall_z3 2 0 ./train_emu "${COMMON[@]}" --dtype float8 --zero_stage 3 --output_dir "$TMP/stall3"
finish

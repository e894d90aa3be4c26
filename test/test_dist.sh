#!/usr/bin/env bash
# test_dist.sh: the CPU trainer as several MPI processes (mpirun, --oversubscribe on this small machine).
#
# A d2 model (byte vocabulary), T=64, 6 steps, lr 1e-3; each case is N processes with micro-batch B
# against one process with batch N*B, compared by test/compare_runs.py (its header argues the bounds from
# float32 summation order):
#   2 processes, ZeRO 0, 1 and 3, in float32 and float8; a Llama d2 in float8, ZeRO 1 and 3;
#   4 processes (float32 ZeRO-1, float8 ZeRO-3) and 3 processes (float8 ZeRO-3: 3 does not divide the
#   units, so the shards are padded);
#   gradient accumulation: 2 processes x 2 micro-steps of B=1 (float32 ZeRO-3, which reduce-scatters
#   every micro-step) against one process with B=4;
#   --recompute 1 with ZeRO-3 bit-identical to the same run without it;
#   negative control: one process with batch B only (half the global batch) must fail the comparison.
# With 2 processes every cross-rank sum is x0 + x1, which IEEE addition makes order-independent, so
# ZeRO 0, 1 and 3 must give bit-identical model files.
# Also: the amax histories (hence the scales) in every rank's state file are bit-identical; only rank 0
# prints and writes the model file; a run resumed from a checkpoint is bit-identical to the straight run
# (ZeRO-1 and ZeRO-3, float8); another process count or ZeRO stage with the same global batch re-shards the
# checkpoint and continues within the float32 bounds (bit-identically with 2 processes), a different
# global batch is refused with one error line; RANK/WORLD_SIZE without an MPI launcher is refused (the CPU
# collectives need MPI), and so are srun tasks that got no ranks (srun without --mpi=pmix would start lone
# runs sharing one output directory); a rank that stops answering (--inject_stall_rank, 2 and 4
# processes) makes the others exit non-zero on --nccl_timeout_s instead of hanging; --keep_checkpoints
# removes the older steps' files of every rank; shard groups (--shard_group_size 2 of 4 processes, ZeRO-1
# and ZeRO-3) match one process, resume bit-exactly in the same groups and re-shard to flat ZeRO-3, and a
# group size that does not divide the processes is refused.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
test_init
test_tmpdir TMP test_dist
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 # several processes share 2 cores

need_python_modules test_dist numpy # compare_runs.py
if ! command -v mpirun >/dev/null; then
    echo "SKIPPED test_dist: mpirun not found (apt-get install libopenmpi-dev openmpi-bin, then make clean train_cpu)"
    exit 0
fi
[ -x ./train_cpu ] || make train_cpu >/dev/null
MPIRUN=(mpirun --oversubscribe -x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS)
if [ "$(id -u)" = 0 ]; then MPIRUN+=(--allow-run-as-root); fi

test_data_dir "$TMP/data" text
LR=1e-3
STEPS=6
COMMON=(--model_size d2 --vocab 256 --train_data "$TMP/data/text_train_*.bin" --val_data "$TMP/data/text_val_*.bin"
    --seq_len 64 --steps $STEPS --val_every 3 --val_batches 2 --lr $LR)

if ! grep -q libmpi <<<"$(ldd ./train_cpu)"; then
    echo "SKIPPED test_dist: ./train_cpu was built without MPI (install libopenmpi-dev, then make clean train_cpu)"
    exit 0
fi
mapfile -d '' probe < <(merge_flags "${COMMON[@]}" -- --steps 1 --batch_size 1 --output_dir "$TMP/probe")
if ! "${MPIRUN[@]}" -np 2 ./train_cpu "${probe[@]}" >"$TMP/probe.out" 2>&1 || ! grep -q "| 2 processes" "$TMP/probe.out"; then
    bad "a 2-process run under mpirun: $(tail -n 3 "$TMP/probe.out")"
    finish
fi

# run NAME PROCESSES [FLAGS...]: out dir, log and stdout under $TMP/NAME
run() {
    local name=$1 np=$2
    shift 2
    local cmd=(./train_cpu "${COMMON[@]}" --output_dir "$TMP/$name" --log_file "$TMP/$name.jsonl" "$@")
    if [ "$np" = 1 ]; then
        "${cmd[@]}" >"$TMP/$name.out" 2>&1
    else
        "${MPIRUN[@]}" -np "$np" "${cmd[@]}" >"$TMP/$name.out" 2>&1
    fi
}

model() { echo "$TMP/$1/model_$(printf %08d "${2:-$STEPS}").bin"; }

# same NAME REF DTYPE ROWS WHAT: compare_runs.py's verdict as a test result
same() {
    local out status=0
    out=$("$PY" test/compare_runs.py --ref "$TMP/$2.jsonl" "$(model "$2")" --run "$TMP/$1.jsonl" "$(model "$1")" \
        --dtype "$3" --rows "$4" --lr $LR) || status=$?
    echo "     $out" | head -3
    result $status "$5"
}

# ---------------------------------------------------------------------------------------------------
for dtype in float32 float8; do
    run "one_${dtype}_b4" 1 --batch_size 4 --dtype "$dtype"
    for zero in 0 1 3; do
        run "two_${dtype}_z$zero" 2 --batch_size 2 --dtype "$dtype" --zero_stage "$zero"
        same "two_${dtype}_z$zero" "one_${dtype}_b4" "$dtype" 256 "2 processes x B=2 = 1 x B=4 ($dtype, ZeRO-$zero)"
    done
    status=0
    cmp -s "$(model "two_${dtype}_z0")" "$(model "two_${dtype}_z1")" &&
        cmp -s "$(model "two_${dtype}_z0")" "$(model "two_${dtype}_z3")" || status=1
    result $status "2 processes: ZeRO 0, 1 and 3 bit-identical ($dtype)"
done

# Llama (RMSNorm, rotary embeddings, grouped-query attention, SwiGLU, untied head): the same equality
run one_llama_b4 1 --batch_size 4 --dtype float8 --arch llama
for zero in 1 3; do
    run "two_llama_z$zero" 2 --batch_size 2 --dtype float8 --arch llama --zero_stage "$zero"
    same "two_llama_z$zero" one_llama_b4 float8 256 "2 processes x B=2 = 1 x B=4 (Llama, float8, ZeRO-$zero)"
done

run two_float8_z3_recompute 2 --batch_size 2 --dtype float8 --zero_stage 3 --recompute 1
status=0
cmp -s "$(model two_float8_z3)" "$(model two_float8_z3_recompute)" || status=1
result $status "2 processes, ZeRO-3, float8: --recompute 1 bit-identical"

run four_float32_z1 4 --batch_size 1 --dtype float32 --zero_stage 1
same four_float32_z1 one_float32_b4 float32 256 "4 processes x B=1 = 1 x B=4 (float32, ZeRO-1)"
run four_float8_z3 4 --batch_size 1 --dtype float8 --zero_stage 3
same four_float8_z3 one_float8_b4 float8 256 "4 processes x B=1 = 1 x B=4 (float8, ZeRO-3)"
# shard groups: 4 processes in 2 groups of 2 (each group shards, the groups sum their gradient shards once
# a step) = 1 x B=4; resumed from the step-3 checkpoint in the same groups, the step-6 files are the straight
# run's bit for bit; resumed with the shards over all 4 (flat ZeRO-3), it re-shards and stays within bounds
for zero in 1 3; do
    run "hybrid_float8_z$zero" 4 --batch_size 1 --dtype float8 --zero_stage "$zero" --shard_group_size 2 --ckpt_every 3
    same "hybrid_float8_z$zero" one_float8_b4 float8 256 "4 processes in 2 shard groups of 2 x B=1 = 1 x B=4 (float8, ZeRO-$zero)"
done
grep -q "ZeRO-3 in 2 groups of 2" "$TMP/hybrid_float8_z3.out"
result $? "the banner names the shard groups"
for resumed in hybrid_again flat_again; do
    cp -r "$TMP/hybrid_float8_z3" "$TMP/$resumed"
    rm "$TMP/$resumed"/*_00000006*.bin
    echo 3 >"$TMP/$resumed/latest_checkpoint"
done
run hybrid_again 4 --batch_size 1 --dtype float8 --zero_stage 3 --shard_group_size 2 --ckpt_every 3 --resume 1
identical=0
for file in "$TMP/hybrid_float8_z3"/*_00000006*.bin; do
    cmp -s "$file" "$TMP/hybrid_again/$(basename "$file")" || identical=1
done
grep -q "resumed | step 3" "$TMP/hybrid_again.out" && [ $identical = 0 ]
result $? "shard groups, ZeRO-3: resumed at step 3, the model and all 4 state files of step 6 bit-identical"
cp "$TMP/hybrid_float8_z3.jsonl" "$TMP/flat_again.jsonl" # the resumed run keeps its steps 1-3
run flat_again 4 --batch_size 1 --dtype float8 --zero_stage 3 --ckpt_every 3 --resume 1
same flat_again one_float8_b4 float8 256 "a shard-group checkpoint resumed with the shards over all 4 processes (re-sharded)"
status=0
run bad_group 4 --batch_size 1 --dtype float8 --zero_stage 3 --shard_group_size 3 || status=$?
[ $status != 0 ] && grep -q "^error: --shard_group_size: 3 does not divide the 4 processes" "$TMP/bad_group.out"
result $? "--shard_group_size 3 of 4 processes: refused with one error line"

run one_float8_b3 1 --batch_size 3 --dtype float8
run three_float8_z3 3 --batch_size 1 --dtype float8 --zero_stage 3
same three_float8_z3 one_float8_b3 float8 192 "3 processes x B=1 = 1 x B=3 (float8, ZeRO-3, padded shards)"
run accum_float32_z3 2 --batch_size 1 --total_batch_size 256 --dtype float32 --zero_stage 3
status=0
grep -q "accum=2" "$TMP/accum_float32_z3.out" || status=1
result $status "2 processes x B=1 with --total_batch_size 256 accumulate 2 micro-steps"
same accum_float32_z3 one_float32_b4 float32 256 "2 processes x 2 micro-steps of B=1 = 1 x B=4 (float32, ZeRO-3)"

run one_float8_b2 1 --batch_size 2 --dtype float8
status=0
"$PY" test/compare_runs.py --ref "$TMP/one_float8_b2.jsonl" "$(model one_float8_b2)" \
    --run "$TMP/two_float8_z1.jsonl" "$(model two_float8_z1)" --dtype float8 --rows 256 --lr $LR >/dev/null || status=$?
verdict=0
[ $status = 1 ] || verdict=1
result $verdict "negative control: half the global batch fails the comparison"

# ---------------------------------------------------------------------------------------------------
# amax histories (and so the scales) identical on every rank; one printer, one model file
amax_block() { # STATE_FILE: the amax history floats, after the 64-int64 header and the two moment blocks
    "$PY" - "$1" <<'EOF'
import struct, sys
data = open(sys.argv[1], "rb").read()
header = struct.unpack("<64q", data[:512])
moments, history = header[10], header[11]
start = 512 + 8 * moments
sys.stdout.buffer.write(data[start:start + 4 * history])
EOF
}
for name in two_float8_z3 four_float8_z3; do
    ranks=$(grep -c . <<<"$(ls "$TMP/$name"/state_00000006_*.bin)")
    amax_block "$TMP/$name/state_00000006_00000.bin" >"$TMP/amax0"
    same_amax=0
    for state in "$TMP/$name"/state_00000006_*.bin; do
        amax_block "$state" | cmp -s - "$TMP/amax0" || same_amax=1
    done
    status=0
    [ "$ranks" -gt 1 ] && [ -s "$TMP/amax0" ] && [ $same_amax = 0 ] || status=1
    result $status "$name: amax histories bit-identical in all $ranks state files"
done
status=0
[ "$(grep -c '^step' "$TMP/four_float8_z3.out")" = $STEPS ] && [ "$(ls "$TMP/four_float8_z3"/model_*.bin | wc -l)" = 1 ] &&
    [ "$(ls "$TMP/four_float8_z3"/state_*.bin | wc -l)" = 4 ] || status=1
result $status "4 processes: one step line per step on stdout; one model file, a state file per rank"

# ---------------------------------------------------------------------------------------------------
# resume: a run killed after its step-3 checkpoint continues to the straight run's files, bit for bit
for zero in 1 3; do
    run "ckpt_z$zero" 2 --batch_size 2 --dtype float8 --zero_stage "$zero" --ckpt_every 3
    cp -r "$TMP/ckpt_z$zero" "$TMP/resumed_z$zero"
    rm "$TMP/resumed_z$zero"/*_00000006*.bin
    echo 3 >"$TMP/resumed_z$zero/latest_checkpoint"
    run "resumed_z$zero" 2 --batch_size 2 --dtype float8 --zero_stage "$zero" --ckpt_every 3 --resume 1
    identical=0
    for file in "$TMP/ckpt_z$zero"/*_00000006*.bin; do
        cmp -s "$file" "$TMP/resumed_z$zero/$(basename "$file")" || identical=1
    done
    status=0
    grep -q "resumed | step 3" "$TMP/resumed_z$zero.out" && [ $identical = 0 ] || status=1
    result $status "ZeRO-$zero float8, 2 processes: resumed at step 3, model and both state files of step 6 identical"
done

# another process count or ZeRO stage re-shards the checkpoint (state_reshard.h's load_training_state): a
# float32 run of 2 processes x B=2 with ZeRO-3, checkpointed at step 3, continued by 4 processes x B=1
# with ZeRO-1, by 1 process x B=4 and by 2 processes with ZeRO-0, equals the straight run within
# compare_runs' float32 bounds (the same global batch, so the same data; only summation order differs)
run ckpt32 2 --batch_size 2 --dtype float32 --zero_stage 3 --ckpt_every 3
for case in "4 1 1" "1 4 0" "2 2 0"; do
    read -r np b zero <<<"$case"
    name="reshard_np${np}_z$zero"
    cp -r "$TMP/ckpt32" "$TMP/$name"
    rm "$TMP/$name"/*_00000006*.bin
    echo 3 >"$TMP/$name/latest_checkpoint"
    cp "$TMP/ckpt32.jsonl" "$TMP/$name.jsonl" # the resumed run keeps its steps 1-3
    run "$name" "$np" --batch_size "$b" --dtype float32 --zero_stage "$zero" --ckpt_every 3 --resume 1 || true
    if ! grep -q "resumed | step 3" "$TMP/$name.out"; then sed 's/^/     | /' "$TMP/$name.out" | head -5; fi
    same "$name" ckpt32 float32 256 "resumed at step 3 by $np x B=$b with ZeRO-$zero (written by 2 x B=2, ZeRO-3)"
done
# with 2 processes every stage computes the same bits (above), so the re-sharded moments must give them too
status=0
cmp -s "$(model ckpt32)" "$(model reshard_np2_z0)" || status=1
result $status "2 x B=2: resumed with ZeRO-0 from a ZeRO-3 checkpoint, bit-identical to the straight run"

# refused: a different global batch (the data position would not mean the same tokens)
refused_case() { # COPY WHAT NP FLAGS...
    local copy=$1 what=$2 np=$3
    shift 3
    cp -r "$TMP/resumed_z3" "$TMP/$copy"
    local status=0 args
    mapfile -d '' args < <(merge_flags "${COMMON[@]}" -- --steps 9 --output_dir "$TMP/$copy" "$@" --resume 1)
    local cmd=(./train_cpu "${args[@]}") # --steps 9: the checkpoint of step 6 has steps left to train
    if [ "$np" = 1 ]; then "${cmd[@]}" >"$TMP/$copy.out" 2>&1 || status=$?; else
        "${MPIRUN[@]}" -np "$np" "${cmd[@]}" >"$TMP/$copy.out" 2>&1 || status=$?
    fi
    local verdict=0
    [ $status != 0 ] && grep -q "^error: $TMP/$copy/state_00000006_00000.bin: .*--batch_size must be" "$TMP/$copy.out" ||
        verdict=1
    if [ $verdict != 0 ]; then sed 's/^/     | /' "$TMP/$copy.out" | head -8; fi
    result $verdict "resume $what: refused with one error line"
}
refused_case np1 "with 1 process x B=2 instead of 2 x B=2" 1 --batch_size 2 --dtype float8 --zero_stage 3
refused_case np4 "with 4 processes x B=2 instead of 2 x B=2" 4 --batch_size 2 --dtype float8 --zero_stage 3

status=0
RANK=0 WORLD_SIZE=2 ./train_cpu "${COMMON[@]}" --output_dir "$TMP/env" >"$TMP/env.out" 2>&1 || status=$?
verdict=0
[ $status = 1 ] && grep -q "^error: WORLD_SIZE=2: train_cpu exchanges data through MPI" "$TMP/env.out" || verdict=1
result $verdict "RANK/WORLD_SIZE without mpirun: refused with one error line"
status=0
SLURM_STEP_NUM_TASKS=4 ./train_cpu "${COMMON[@]}" --output_dir "$TMP/slurm" >"$TMP/slurm.out" 2>&1 || status=$?
verdict=0
[ $status = 1 ] && grep -q "^error: srun started 4 tasks without MPI ranks" "$TMP/slurm.out" || verdict=1
result $verdict "srun tasks without MPI ranks: refused with one error line (no lone runs sharing an output_dir)"

# --keep_checkpoints with 2 processes: rank 0 removes every rank's files of the older steps, after the new
# checkpoint is named
status=0
run keep_np2 2 --batch_size 1 --ckpt_every 2 --keep_checkpoints 1 || status=$?
listed=$(cd "$TMP/keep_np2" && ls | tr '\n' ' ')
[ $status = 0 ] && [ "$listed" = "latest_checkpoint manifest_00000006.txt model_00000006.bin state_00000006_00000.bin state_00000006_00001.bin " ]
result $? "--keep_checkpoints 1, 2 processes: $listed"

# a rank that stops answering: the others end on --nccl_timeout_s instead of waiting for it forever
stall_ends "$TMP" stall_np2 2 1 ./train_cpu "${COMMON[@]}" --batch_size 1 --output_dir "$TMP/stall2"
stall_ends "$TMP" stall_np4_z3 4 0 ./train_cpu "${COMMON[@]}" --batch_size 1 --zero_stage 3 --output_dir "$TMP/stall4"

finish

#!/usr/bin/env bash
# test_verify_resume.sh: a resume verifies the checkpoint before it trusts it (manifest.h's digests and
# manifests), on ./train_cpu with 1 and 2 processes. A run of 10 steps checkpoints at 5 and 10; then
#  1. a finite value written into model_00000010.bin's weights (a disk's or a copy's damage the value
#     checks cannot see): --resume 1 falls back to step 5 with a line naming the file, and ends with the log,
#     model and state files of a run resumed at step 5 by hand (step 10's files removed); the damaged
#     checkpoint is replaced, and --keep_checkpoints 2 then keeps the two newest, which verify;
#  2. a NaN in state_00000010_00000.bin's moments: the same fall-back;
#  3. the model file of step 5 copied over step 10's, and no older checkpoint: refused in one line;
#  4. latest_checkpoint removed by hand: a fresh run refuses the directory in one line, --overwrite 1 takes it;
#  5. two processes: rank 1's state file of step 10 damaged: every rank falls back to step 5, and the run
#     ends as a 2-process run resumed at step 5 by hand; then the same with ./train_emu (the CUDA trainer on
#     the emulation: its digests summed over NCCL), ZeRO-1, bfloat16.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
test_init
test_tmpdir TMP test_verify_resume
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 CUDA_EMU_THREADS=1
[ -x ./train_cpu ] || make train_cpu >/dev/null
[ -x ./train_emu ] || make train_emu >/dev/null
test_data_dir "$TMP/data" text
BASE=(--model_size d2 --vocab 256 --seq_len 32 --val_every 5 --val_batches 1 --ckpt_every 5
      --keep_checkpoints 2 --train_data "$TMP/data/text_train_000000.bin" --val_data "$TMP/data/text_val_000000.bin")

# poke FILE OFFSET FLOAT: writes one float32 at byte OFFSET, in place
poke() { "$PY" -c 'import struct,sys; f=open(sys.argv[1],"r+b"); f.seek(int(sys.argv[2])); f.write(struct.pack("<f", float(sys.argv[3])))' "$@"; }
# by_hand DIR STEP: the directory as a run that checkpointed at STEP last would leave it
by_hand() {
    rm -f "$1"/*_00000010* && echo "$2" >"$1/latest_checkpoint"
    "$PY" -c 'import re,sys; p=sys.argv[1]; kept=[l for l in open(p) if int((re.search(r"\"step\":(\d+)", l) or [0,0])[1]) <= 5]; open(p,"w").writelines(kept)' "$1/log.jsonl"
}
same_run() { # WHAT DIR_A DIR_B: final model and rank 0's state byte-identical, the logs' records equal
    cmp -s "$2/model_00000015.bin" "$3/model_00000015.bin" && cmp -s "$2/state_00000015_00000.bin" "$3/state_00000015_00000.bin" &&
        diff <(grep -o '"step":[0-9]*,"loss":[^,]*' "$2/log.jsonl") <(grep -o '"step":[0-9]*,"loss":[^,]*' "$3/log.jsonl") >/dev/null &&
        ok || bad "$1: the run that fell back differs from the one resumed at step 5 by hand"
}
falls_back() { # WHAT OUT ERR FILE: exit 0 was checked; a line naming FILE, and the fall-back to step 5
    grep -q "^resume | the checkpoint of step 10 is damaged: falling back to step 5" "$2" && grep -q "^resumed | step 5 " "$2" &&
        [ "$(grep -c "warning: --resume: rank [0-9]: .*$4" "$3")" = 1 ] && ok ||
        bad "$1: no fall-back to step 5 naming $4: $(cat "$2" "$3" | grep -i 'resume' | head -c 400)"
}

./train_cpu "${BASE[@]}" --batch_size 4 --steps 10 --output_dir "$TMP/ten" --log_file "$TMP/ten/log.jsonl" >/dev/null
cp -r "$TMP/ten" "$TMP/by_hand" && by_hand "$TMP/by_hand" 5
./train_cpu "${BASE[@]}" --batch_size 4 --steps 15 --output_dir "$TMP/by_hand" --log_file "$TMP/by_hand/log.jsonl" --resume 1 >/dev/null

# 1. a finite value in the model's weights
cp -r "$TMP/ten" "$TMP/model_damaged"
poke "$TMP/model_damaged/model_00000010.bin" 4096 0.5
if ./train_cpu "${BASE[@]}" --batch_size 4 --steps 15 --output_dir "$TMP/model_damaged" --log_file "$TMP/model_damaged/log.jsonl" --resume 1 \
    >"$TMP/1.out" 2>"$TMP/1.err"; then
    falls_back "damaged model" "$TMP/1.out" "$TMP/1.err" "model_00000010.bin: digest"
    same_run "damaged model" "$TMP/model_damaged" "$TMP/by_hand"
    [ "$(cd "$TMP/model_damaged" && ls manifest_* model_* | tr '\n' ' ')" = "manifest_00000010.txt manifest_00000015.txt model_00000010.bin model_00000015.bin " ] &&
        ! cmp -s "$TMP/model_damaged/model_00000010.bin" "$TMP/ten/model_00000010.bin" && ok ||
        bad "damaged model: --keep_checkpoints 2 left $(ls "$TMP/model_damaged" | tr '\n' ' ')"
else
    bad "damaged model: the resume failed: $(tail -n 2 "$TMP/1.err")"
fi

# 2. a NaN in rank 0's moments
cp -r "$TMP/ten" "$TMP/state_nan"
poke "$TMP/state_nan/state_00000010_00000.bin" 1024 nan
if ./train_cpu "${BASE[@]}" --batch_size 4 --steps 15 --output_dir "$TMP/state_nan" --log_file "$TMP/state_nan/log.jsonl" --resume 1 \
    >"$TMP/2.out" 2>"$TMP/2.err"; then
    falls_back "NaN moment" "$TMP/2.out" "$TMP/2.err" "state_00000010_00000.bin: the value at byte 1024 is nan"
    same_run "NaN moment" "$TMP/state_nan" "$TMP/by_hand"
else
    bad "NaN moment: the resume failed: $(tail -n 2 "$TMP/2.err")"
fi

# 3. the model of another step, nothing older to fall back to
cp -r "$TMP/ten" "$TMP/other_step"
cp "$TMP/other_step/model_00000005.bin" "$TMP/other_step/model_00000010.bin"
rm "$TMP/other_step"/*_00000005*
rc=0
./train_cpu "${BASE[@]}" --batch_size 4 --steps 15 --output_dir "$TMP/other_step" --resume 1 >"$TMP/3.out" 2>"$TMP/3.err" || rc=$?
[ $rc = 1 ] && [ "$(wc -l <"$TMP/3.err")" = 1 ] && grep -q "^error: --resume: .*model_00000010.bin: digest .* (damaged, or a model file of another step): no intact checkpoint at or below step 10" "$TMP/3.err" &&
    ok || bad "model of another step: expected a refusal, got exit $rc: $(head -c 400 "$TMP/3.err")"

# 4. no latest_checkpoint, checkpoint files left
cp -r "$TMP/ten" "$TMP/pointerless"
rm "$TMP/pointerless/latest_checkpoint"
rc=0
./train_cpu "${BASE[@]}" --batch_size 4 --steps 15 --output_dir "$TMP/pointerless" >"$TMP/4.out" 2>"$TMP/4.err" || rc=$?
[ $rc = 1 ] && [ "$(wc -l <"$TMP/4.err")" = 1 ] && grep -q "^error: --output_dir: .*holds checkpoint files of another run (.*) but no latest_checkpoint" "$TMP/4.err" &&
    ./train_cpu "${BASE[@]}" --batch_size 4 --steps 2 --output_dir "$TMP/pointerless" --overwrite 1 >/dev/null &&
    [ "$(cd "$TMP/pointerless" && ls manifest_* | tr '\n' ' ')" = "manifest_00000002.txt " ] && ok ||
    bad "pointerless directory: expected a refusal, then --overwrite 1 to take it (old manifests gone); got exit $rc: $(head -c 300 "$TMP/4.err")"

# 5. two processes, rank 1's state damaged
if command -v mpirun >/dev/null && grep -q libmpi <<<"$(ldd ./train_cpu)" && grep -q libmpi <<<"$(ldd ./train_emu)"; then
    MPIRUN=(mpirun --oversubscribe -np 2 -x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS -x CUDA_EMU_THREADS)
    if [ "$(id -u)" = 0 ]; then MPIRUN+=(--allow-run-as-root); fi
    for bin in cpu emu; do
        run=("${MPIRUN[@]}" ./train_$bin "${BASE[@]}" --batch_size 2)
        [ $bin = emu ] && run+=(--dtype bfloat16 --zero_stage 1)
        "${run[@]}" --steps 10 --output_dir "$TMP/two_$bin" --log_file "$TMP/two_$bin/log.jsonl" >/dev/null
        cp -r "$TMP/two_$bin" "$TMP/two_${bin}_by_hand" && by_hand "$TMP/two_${bin}_by_hand" 5
        "${run[@]}" --steps 15 --output_dir "$TMP/two_${bin}_by_hand" --log_file "$TMP/two_${bin}_by_hand/log.jsonl" --resume 1 >/dev/null
        poke "$TMP/two_$bin/state_00000010_00001.bin" 2048 0.25
        if "${run[@]}" --steps 15 --output_dir "$TMP/two_$bin" --log_file "$TMP/two_$bin/log.jsonl" --resume 1 \
            >"$TMP/5$bin.out" 2>"$TMP/5$bin.err"; then
            falls_back "train_$bin, 2 processes" "$TMP/5$bin.out" "$TMP/5$bin.err" "state_00000010_00001.bin: .* (damaged, or a state file of another step)"
            same_run "train_$bin, 2 processes" "$TMP/two_$bin" "$TMP/two_${bin}_by_hand"
        else
            bad "train_$bin, 2 processes: the resume failed: $(tail -n 2 "$TMP/5$bin.err")"
        fi
    done
else
    echo "SKIPPED test_verify_resume's 2-process cases: no mpirun, or ./train_cpu or ./train_emu without MPI"
fi
finish

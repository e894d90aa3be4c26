#!/usr/bin/env bash
# test_preempt.sh: runs that end early keep their work, on ./train_cpu and ./train_emu (the CUDA trainer on the
# emulation), one process and two (mpirun). A float8 d2 model, B=4, T=32, constant learning rate.
#  1. Stop requests: a SIGTERM the run sends itself at step 5 (--inject_signal_step), a SIGTERM from outside
#     once 3 steps are logged (sent twice, 0.1 s apart, as Slurm's time limit does, while every fsync takes
#     half a second more), and --time_limit_s 1: each exits 75 with a checkpoint before the last step, and
#     `--resume 1` then ends byte-identical (final model and state files, the log's step records) to a run
#     that never stopped. Two processes: the signal reaches rank 1 only, both stop after the same step.
#     A stop signal during set-up (pending as the trainer starts) ends the run with exit 75 before the first
#     step, a fresh one with nothing saved, a resumed one keeping its checkpoint. On train_cpu alone (the
#     trainers share the code): SIGHUP from outside stops as SIGTERM does; stdout's reader gone (`| head`:
#     SIGPIPE) stops the run with a checkpoint, exit 1 and a line; a file-size limit (SIGXFSZ) fails the
#     checkpoint's write with exit 1 and a line, never a kill.
#  2. Two signals back to back: the run ends at once (143), leaves no temp file, and the checkpoint
#     latest_checkpoint names resumes to the same final files.
#     scripts/launch.sh (two processes of train_cpu) stopped by SIGTERM while a checkpoint takes some 6 s
#     (every fsync slowed by test/slow_fsync_shim.c): exit 75, every rank's checkpoint complete, the resume
#     byte-identical.
#  3. Ranks started with different flags (mpirun's MPMD form, one flag changed on rank 1): refused before any
#     step, exit 1, every rank's line naming the flag.
#  4. The guards: a lasting shift of the data (a short shard of text, then a shard of random characters) with
#     --skip_loss_z 3 skips a few steps and trains on (before: 80 of 150 steps skipped, every one after the
#     shift, and exit 0); --lr 10 --grad_clip 0 (non-finite from step 2 or 3) ends with exit 76 after 8 skips in a
#     row, its checkpoint holding the last applied step's weights; with --max_consecutive_skips 1000 the same
#     run ends with exit 76 because most of its steps were skipped.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
test_init
test_tmpdir TMP test_preempt
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 CUDA_EMU_THREADS=1

test_data_dir "$TMP/data" text
# the shifted data: 10,000 characters of text (70 batches of 128 tokens), then 100,000 random characters
head -c 10000 "$TMP/data/text.txt" 2>/dev/null >"$TMP/shift_a.txt" || head -c 10000 "$DATA" >"$TMP/shift_a.txt"
"$PY" -c "
import random
random.seed(1)
print(''.join(random.choice('abcdefghijklmnopqrstuvwxyz ,.;:QWERTYUIOP0123456789') for _ in range(100000)))" \
    >"$TMP/shift_b.txt"
for part in a b; do
    "$PY" scripts/prepare_data.py --input "$TMP/shift_$part.txt" --output_dir "$TMP/shift" --name "s_$part" \
        --tokenizer byte --val_fraction 0.1 >/dev/null
done

MPIRUN=()
if command -v mpirun >/dev/null && grep -q libmpi <<<"$(ldd ./train_cpu)"; then
    MPIRUN=(mpirun --oversubscribe -x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS -x CUDA_EMU_THREADS)
    if [ "$(id -u)" = 0 ]; then MPIRUN+=(--allow-run-as-root); fi
else
    echo "note: mpirun or an MPI build missing: the two-process cases are not run (apt-get install libopenmpi-dev openmpi-bin)"
fi

# stopped_early NAME STATUS DIR STEPS: exit 75 and a checkpoint before the last step
stopped_early() {
    local latest
    latest=$(cat "$3/latest_checkpoint" 2>/dev/null || echo none)
    if [ "$2" = 75 ] && [ "$latest" != none ] && [ "$latest" -lt "$4" ]; then
        ok "$1: exit 75 with a checkpoint of step $latest of $4"
    else
        bad "$1: exit $2, latest_checkpoint $latest (expected 75 and a step below $4)"
    fi
}

for bin in ./train_cpu ./train_emu; do
    [ -x "$bin" ] || { bad "$bin not built (make train_cpu train_emu)"; continue; }
    tag=$(basename "$bin")
    # train_emu's steps take about 30 times train_cpu's: fewer steps, the same kinds of stop
    if [ "$tag" = train_cpu ]; then steps=800; else steps=60; fi
    base=(--model_size d2 --vocab 256 --seq_len 32 --batch_size 4 --dtype float8 --lr_schedule constant
          --train_data "$TMP/data/text_train_*.bin" --val_data "$TMP/data/text_val_*.bin" --val_every 0
          --val_batches 1 --steps "$steps")
    run() { # NAME FLAGS...: base with FLAGS into $TMP/$tag_NAME, its log beside it; sets status
        local name=$1 args
        shift
        mapfile -d '' args < <(merge_flags "${base[@]}" -- "$@")
        status=0
        "$bin" "${args[@]}" --output_dir "$TMP/${tag}_$name" --log_file "$TMP/${tag}_$name.jsonl" \
            >>"$TMP/${tag}_$name.out" 2>&1 || status=$?
    }
    run straight
    result "$status" "$tag: the uninterrupted run ($steps steps)"

    run injected --inject_signal_step 5
    stopped_early "$tag: SIGTERM at step 5" "$status" "$TMP/${tag}_injected" "$steps"
    grep -q "^stopped | step [0-9]* of $steps | SIGTERM" "$TMP/${tag}_injected.out" ||
        bad "$tag: no 'stopped' line naming SIGTERM"
    run injected --resume 1
    same_end "$tag: SIGTERM at step 5" "$TMP/${tag}_injected" "$TMP/${tag}_straight" "$steps" 1

    # during set-up: a stop signal pending as the trainer starts (blocked, raised, then exec: it is
    # delivered once the trainer unblocks it, as its first act) ends the run before its first step, a
    # fresh one with nothing saved, a resumed one with its checkpoint as it was
    run setup --steps 20 --ckpt_every 10
    stop_pending() { # NAME FLAGS...: run NAME with a SIGTERM pending
        local name=$1 args
        shift
        mapfile -d '' args < <(merge_flags "${base[@]}" -- "$@")
        status=0
        "$PY" -c "import os, signal, sys
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])
os.kill(os.getpid(), signal.SIGTERM)
os.execv(sys.argv[1], sys.argv[1:])" "$bin" "${args[@]}" --output_dir "$TMP/${tag}_$name" \
            --log_file "$TMP/${tag}_$name.jsonl" >"$TMP/${tag}_$name.out" 2>&1 || status=$?
    }
    stop_pending setup_fresh --steps 20
    if [ "$status" = 75 ] && [ ! -e "$TMP/${tag}_setup_fresh/latest_checkpoint" ] &&
        [ "$(logged_steps "$TMP/${tag}_setup_fresh.jsonl")" = 0 ] &&
        grep -q "^stopped | during set-up, before the first step | SIGTERM" "$TMP/${tag}_setup_fresh.out"; then
        ok "$tag: a stop signal during a fresh run's set-up: exit 75 before the first step, nothing saved"
    else
        bad "$tag: a stop signal during a fresh run's set-up: exit $status (expected 75, no step, no checkpoint)"
    fi
    stop_pending setup --steps 30 --ckpt_every 10 --resume 1
    if [ "$status" = 75 ] && [ "$(cat "$TMP/${tag}_setup/latest_checkpoint")" = 20 ] &&
        [ "$(logged_steps "$TMP/${tag}_setup.jsonl")" = 20 ]; then
        ok "$tag: a stop signal during a resumed run's set-up: exit 75 before the first step, checkpoint 20 kept"
    else
        bad "$tag: a stop signal during a resumed run's set-up: exit $status (expected 75, checkpoint 20 kept)"
    fi
    run setup --steps "$steps" --ckpt_every 10 --resume 1
    same_end "$tag: a stop during set-up" "$TMP/${tag}_setup" "$TMP/${tag}_straight" "$steps" 1

    # from outside, as a scheduler (SIGTERM) or a closed terminal (SIGHUP) sends it, once three steps are
    # logged. SIGTERM as Slurm sends it at a time limit: SIGTERM, SIGCONT, SIGTERM again (here 0.1 s later,
    # so that the first has surely been taken, while the checkpoint's fsyncs, slowed by half a second each
    # with test/slow_fsync_shim.c, keep the run going): one stop request, not two. The cases from here to the
    # time limit's run the trainers' shared code (run_control.h, checkpoint_io.h, launch.sh): train_cpu alone
    # runs them.
    signals=(TERM)
    [ "$tag" = train_cpu ] && signals+=(HUP)
    for sig in "${signals[@]}"; do
        slow=()
        [ "$sig" = TERM ] && slow=(env LD_PRELOAD="$PWD/test/build/slow_fsync_shim.so" SLOW_FSYNC_S=0.5)
        "${slow[@]}" "$bin" "${base[@]}" --output_dir "$TMP/${tag}_$sig" --log_file "$TMP/${tag}_$sig.jsonl" \
            >"$TMP/${tag}_$sig.out" 2>&1 &
        pid=$!
        for ((i = 0; i < 1200; i++)); do
            [ "$(logged_steps "$TMP/${tag}_$sig.jsonl")" -ge 3 ] && break
            sleep 0.05
        done
        kill -$sig "$pid"
        if [ "$sig" = TERM ]; then
            sleep 0.1
            { kill -CONT "$pid" && kill -TERM "$pid"; } || bad "$tag: the run had ended before the second SIGTERM"
        fi
        status=0
        wait "$pid" || status=$?
        stopped_early "$tag: SIG$sig from outside" "$status" "$TMP/${tag}_$sig" "$steps"
        grep -q "^stopped | step [0-9]* of $steps | SIG$sig" "$TMP/${tag}_$sig.out" ||
            bad "$tag: no 'stopped' line naming SIG$sig"
        run "$sig" --resume 1
        same_end "$tag: SIG$sig from outside" "$TMP/${tag}_$sig" "$TMP/${tag}_straight" "$steps" 1
    done

    if [ "$tag" = train_cpu ]; then
        # stdout's reader gone (`| head`): SIGPIPE is no kill; the failed write stops the run with a checkpoint
        {
            status=0
            "$bin" "${base[@]}" --output_dir "$TMP/${tag}_pipe" --log_file "$TMP/${tag}_pipe.jsonl" \
                2>"$TMP/${tag}_pipe.err" || status=$?
            echo "$status" >"$TMP/${tag}_pipe.status"
        } | head -3 >/dev/null
        status=$(cat "$TMP/${tag}_pipe.status")
        latest=$(cat "$TMP/${tag}_pipe/latest_checkpoint" 2>/dev/null || echo none)
        if [ "$status" = 1 ] && [ "$latest" != none ] && [ "$latest" -lt "$steps" ] &&
            grep -q "^error: stdout: a write failed (Broken pipe" "$TMP/${tag}_pipe.err"; then
            ok "$tag: stdout's reader gone: exit 1 with a checkpoint of step $latest and a line"
        else
            bad "$tag: stdout's reader gone: exit $status, latest_checkpoint $latest (expected 1, a checkpoint, a line)"
        fi
        run pipe --resume 1
        same_end "$tag: stdout's reader gone" "$TMP/${tag}_pipe" "$TMP/${tag}_straight" "$steps" 1

        # a file-size limit below a checkpoint's size: SIGXFSZ is no kill; the write fails with its line
        status=0
        mapfile -d '' args < <(merge_flags "${base[@]}" -- --steps 4)
        (
            ulimit -f 64 # KiB: the model file alone is 520
            "$bin" "${args[@]}" --output_dir "$TMP/${tag}_fsize" --log_file "$TMP/${tag}_fsize.jsonl"
        ) >"$TMP/${tag}_fsize.out" 2>&1 || status=$?
        if [ "$status" = 1 ] && grep -q "^error: .*model_00000004.bin.*File too large" "$TMP/${tag}_fsize.out"; then
            ok "$tag: a file-size limit: exit 1 with a line naming the file and EFBIG"
        else
            bad "$tag: a file-size limit: exit $status (expected 1 and a line saying 'File too large')"
        fi
    fi

    run timed --time_limit_s 1
    stopped_early "$tag: --time_limit_s 1" "$status" "$TMP/${tag}_timed" "$steps"
    grep -q "time_limit_s reached" "$TMP/${tag}_timed.out" || bad "$tag: the stop line does not name --time_limit_s"
    run timed --resume 1
    same_end "$tag: --time_limit_s 1" "$TMP/${tag}_timed" "$TMP/${tag}_straight" "$steps" 1

    # two signals at once (two kinds: a second SIGTERM pending beside the first would merge with it): the
    # second ends the process where it is, checkpointing every step
    "$bin" "${base[@]}" --ckpt_every 1 --output_dir "$TMP/${tag}_twice" --log_file "$TMP/${tag}_twice.jsonl" \
        >"$TMP/${tag}_twice.out" 2>&1 &
    pid=$!
    for ((i = 0; i < 1200; i++)); do
        [ "$(cat "$TMP/${tag}_twice/latest_checkpoint" 2>/dev/null)" -ge 3 ] 2>/dev/null && break
        sleep 0.05
    done
    kill -USR1 "$pid"
    kill -TERM "$pid"
    status=0
    wait "$pid" || status=$?
    leftovers=$(find "$TMP/${tag}_twice" -name '*.tmp*' | wc -l)
    if [[ "$status" = 143 || "$status" = 138 ]] && [ "$leftovers" = 0 ] && grep -q "second stop signal" "$TMP/${tag}_twice.out"; then
        ok "$tag: a second signal ends the run at once ($status), no temp file left"
    else
        bad "$tag: two signals: exit $status (expected 128 + the signal), $leftovers temp files left"
    fi
    run twice --ckpt_every 1 --resume 1
    same_end "$tag: two signals" "$TMP/${tag}_twice" "$TMP/${tag}_straight" "$steps" 1

    # the guards
    guard=(--train_data "$TMP/shift/s_*_train_*.bin" --val_data "")
    run shift "${guard[@]}" --steps 150 --lr 1e-3 --skip_loss_z 3
    skipped=$(grep -c '"skipped":1' "$TMP/${tag}_shift.jsonl") || true
    if [ "$status" = 0 ] && [ "${skipped:-0}" -le 15 ]; then
        ok "$tag: a lasting data shift: $skipped of 150 steps skipped, the run goes on"
    else
        bad "$tag: a lasting data shift: exit $status, $skipped of 150 steps skipped"
    fi
    guard+=(--lr 10 --grad_clip 0)
    run diverge "${guard[@]}" --steps 40
    last_applied=$(grep '"skipped":0' "$TMP/${tag}_diverge.jsonl" | tail -1 | sed -E 's/.*"step":([0-9]+).*/\1/')
    stop=$(cat "$TMP/${tag}_diverge/latest_checkpoint" 2>/dev/null || echo none)
    # the CUDA trainer reads a step's results while the next one runs: it stops one step later
    late=0
    [ "$tag" = train_emu ] && late=1
    if [ "$status" = 76 ] && grep -q "error: the guards skipped 8 steps in a row" "$TMP/${tag}_diverge.out" &&
        [ "$stop" = $((last_applied + 8 + late)) ]; then
        ok "$tag: diverging (--lr 10 --grad_clip 0): exit 76 after 8 skips in a row, checkpoint of step $stop"
    else
        bad "$tag: diverging: exit $status, checkpoint $stop, last applied step $last_applied"
    fi
    run applied "${guard[@]}" --steps "$last_applied"
    if cmp -s "$(step_file "$TMP/${tag}_diverge" model "$stop" .bin)" \
        "$(step_file "$TMP/${tag}_applied" model "$last_applied" .bin)"; then
        ok "$tag: the stop's checkpoint holds the weights of the last applied step ($last_applied)"
    else
        bad "$tag: the stop's checkpoint differs from the weights of the last applied step ($last_applied)"
    fi
    run mostly "${guard[@]}" --steps 40 --max_consecutive_skips 1000
    result $((status != 76)) "$tag: most steps skipped: exit 76 (got $status)"
    grep -q "error: the guards skipped [0-9]* of the run's 40 steps" "$TMP/${tag}_mostly.out" ||
        bad "$tag: no line saying most steps were skipped"

    [ ${#MPIRUN[@]} -gt 0 ] || continue
    mpi() { # NAME FLAGS...: two processes
        local name=$1
        shift
        local args
        mapfile -d '' args < <(merge_flags "${base[@]}" -- "$@")
        status=0
        # ranks that stopped at different steps would wait on each other: --nccl_timeout_s bounds it
        "${MPIRUN[@]}" -np 2 "$bin" "${args[@]}" --zero_stage 1 --nccl_timeout_s 30 --output_dir "$TMP/${tag}_$name" \
            --log_file "$TMP/${tag}_$name.jsonl" >>"$TMP/${tag}_$name.out" 2>&1 || status=$?
    }
    mpi straight2 --steps 12
    result "$status" "$tag: the uninterrupted two-process run"
    mpi signal2 --steps 12 --inject_signal_step 5 --inject_signal_rank 1
    stopped_early "$tag: two processes, SIGTERM to rank 1 only" "$status" "$TMP/${tag}_signal2" 12
    at=$(cat "$TMP/${tag}_signal2/latest_checkpoint" 2>/dev/null) || at=none
    if [ -f "$(step_file "$TMP/${tag}_signal2" state "$at" _00000.bin)" ] &&
        [ -f "$(step_file "$TMP/${tag}_signal2" state "$at" _00001.bin)" ]; then
        ok "$tag: both ranks checkpointed step $at"
    else
        bad "$tag: not every rank checkpointed step $at"
    fi
    mpi signal2 --steps 12 --resume 1
    same_end "$tag: two processes, SIGTERM to rank 1" "$TMP/${tag}_signal2" "$TMP/${tag}_straight2" 12 2

    if [ "$tag" = train_cpu ]; then
        # scripts/launch.sh stopped by SIGTERM while every fsync takes a second (test/slow_fsync_shim.c: a
        # checkpoint of some 6 s, where mpirun alone kills the ranks a second after a SIGTERM): the ranks
        # checkpoint the same step, the job exits 75, and the resume equals an uninterrupted launch (the
        # launcher's part: train_cpu alone)
        launch_steps=300
        launched() { # NAME FLAGS...: two processes under launch.sh, in the background; sets pid
            local name=$1 args
            shift
            mapfile -d '' args < <(merge_flags "${base[@]}" -- --steps "$launch_steps" --zero_stage 1 "$@")
            scripts/launch.sh --nproc_per_node 2 --oversubscribe -- env "${slow[@]}" "$bin" "${args[@]}" \
                --nccl_timeout_s 60 --output_dir "$TMP/${tag}_$name" --log_file "$TMP/${tag}_$name.jsonl" \
                >>"$TMP/${tag}_$name.out" 2>&1 &
            pid=$!
        }
        slow=()
        launched launch_straight
        status=0
        wait "$pid" || status=$?
        result "$status" "$tag: the uninterrupted run under launch.sh"
        slow=(LD_PRELOAD="$PWD/test/build/slow_fsync_shim.so" SLOW_FSYNC_S=1)
        launched launch_stop
        for ((i = 0; i < 1200; i++)); do
            [ "$(logged_steps "$TMP/${tag}_launch_stop.jsonl")" -ge 3 ] && break
            sleep 0.05
        done
        kill -TERM "$pid"
        status=0
        wait "$pid" || status=$?
        stopped_early "$tag: launch.sh stopped by SIGTERM, a slow checkpoint" "$status" "$TMP/${tag}_launch_stop" \
            "$launch_steps"
        at=$(cat "$TMP/${tag}_launch_stop/latest_checkpoint" 2>/dev/null) || at=none
        leftovers=$(find "$TMP/${tag}_launch_stop" -name '*.tmp*' | wc -l)
        if [ -f "$(step_file "$TMP/${tag}_launch_stop" state "$at" _00000.bin)" ] &&
            [ -f "$(step_file "$TMP/${tag}_launch_stop" state "$at" _00001.bin)" ] && [ "$leftovers" = 0 ]; then
            ok "$tag: launch.sh: both ranks checkpointed step $at, no temp file left"
        else
            bad "$tag: launch.sh: not every rank checkpointed step $at ($leftovers temp files left)"
        fi
        slow=()
        launched launch_stop --resume 1
        status=0
        wait "$pid" || status=$?
        same_end "$tag: launch.sh stopped by SIGTERM" "$TMP/${tag}_launch_stop" "$TMP/${tag}_launch_straight" \
            "$launch_steps" 2
    fi

    for change in "--lr 1e-3" "--steps 13" "--channels 64" "--seed 7"; do
        flag=${change%% *}
        mapfile -d '' other < <(merge_flags "${base[@]}" -- $change)
        status=0
        "${MPIRUN[@]}" -np 1 "$bin" "${base[@]}" --output_dir "$TMP/${tag}_disagree" : \
            -np 1 "$bin" "${other[@]}" --output_dir "$TMP/${tag}_disagree" >"$TMP/${tag}_disagree.out" 2>&1 ||
            status=$?
        lines=$(grep -c "^error: $flag: rank [01] has" "$TMP/${tag}_disagree.out" || true)
        if [ "$status" = 1 ] && [ "$lines" = 2 ] && ! grep -q '^step ' "$TMP/${tag}_disagree.out"; then
            ok "$tag: ranks started with different $flag: refused on both ranks before any step"
        else
            bad "$tag: ranks with different $flag: exit $status, $lines error lines naming it"
        fi
    done
done
finish

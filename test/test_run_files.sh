#!/usr/bin/env bash
# test_run_files.sh: an output directory belongs to one run (run_files.h), on ./train_cpu and ./train_emu,
# for the cases test/bad_inputs.tsv cannot hold (they need two processes, MPI, or a file-size limit).
#  1. Two runs on one directory at once: the second (fresh with --overwrite 1, or --resume 1) is refused in
#     one line naming the first's host and pid, and the first ends with the model a run alone ends with.
#     train_emu meets a lock held by flock(1) (a run of the emulation would take minutes to outlast the
#     second's start-up): the same lock, the holder's line as the file says it.
#  2. A killed run's temp files (any run tag) are removed by the next run that takes the directory.
#  3. Node-local output directories: mpirun starts rank 0 and rank 1 in different working directories
#     (-wdir) with one relative --output_dir, so each rank resolves it to its own directory, as ranks on
#     different nodes resolve a node-local path. The product code is unchanged by the test (no hook): every
#     rank must print the same one line naming rank 1, before any step.
#  4. Stale RANK / WORLD_SIZE exported into mpirun's processes: one line naming them.
#  5. A log that cannot grow (ulimit -f with SIGXFSZ ignored: write() then fails with EFBIG mid-record, a
#     full disk's torn write): one error line naming the file, and the log holds whole records only.
#     A log that fails where the checkpoints still fit (/dev/full): the run stops after its step with a
#     checkpoint and exits 1 with one line; --resume 1 continues from that checkpoint.
#  6. A long step (a --total_batch_size of thousands of micro-steps) prints its progress (train_cpu: the
#     emulation would take minutes for a step of 10 s; both call the one helper, train_log.h's).
#  7. The directory by identity (train_cpu): a symbolic link in the lock's place (to a copy of a shard) is
#     refused in one line and the shard is unchanged. A lock file removed mid-run is taken again; a
#     directory renamed (and another made in its place, where a second run then trains) is written under
#     its new name by every rank (1 and 2 processes): the run writes its next checkpoint, stops with exit 1
#     and one line saying where it is, and resumes from it; nothing is written into the new directory. A
#     lock another run holds in its place, or a directory removed, stops the run before that checkpoint.
#  8. The log on --resume (train_cpu; train_log.h is both trainers'): a last line cut mid-record is dropped
#     with a line and the log holds whole records; a symbolic link is followed, not replaced; /dev/stdout or
#     a FIFO is refused in one line (no hang); a log another run writes is refused in one line, and that
#     run's log keeps its whole records.
#  9. Ranks and inputs (train_cpu): OMP_NUM_THREADS=100000 is bounded by the cores with a line; --time_limit_s
#     reserves a checkpoint's time before one is timed; two ranks (mpirun -wdir) whose shard has the same
#     name and size but other content are refused before any step, naming the rank and the file.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
test_init
test_tmpdir TMP test_run_files
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 CUDA_EMU_THREADS=1
[ -x ./train_cpu ] || make train_cpu >/dev/null
[ -x ./train_emu ] || make train_emu >/dev/null
test_data_dir "$TMP/data" text
BASE=(--model_size d2 --vocab 256 --seq_len 32 --batch_size 4 --val_every 0 --val_batches 1
      --train_data "$TMP/data/text_train_000000.bin" --val_data "$TMP/data/text_val_000000.bin")
CPU=(./train_cpu "${BASE[@]}" --dtype float32)
EMU=(./train_emu "${BASE[@]}" --dtype bfloat16)
# Each check ends '&& verdict=0 || verdict=1': a failing check is reported, and set -e does not end the script.
one_line() { # FILE SUBSTRING...: exactly one line, 'error: ', every substring
    local file=$1 s
    shift
    [ "$(wc -l <"$file")" = 1 ] && grep -q '^error: ' "$file" || return 1
    for s in "$@"; do grep -qF -- "$s" "$file" || return 1; done
}

# 1. two runs at once
"${CPU[@]}" --steps 1500 --ckpt_every 500 --output_dir "$TMP/alone" >/dev/null
"${CPU[@]}" --steps 1500 --ckpt_every 500 --output_dir "$TMP/shared" >"$TMP/first.out" 2>&1 &
first=$!
for _ in $(seq 1 500); do [ -s "$TMP/shared/.run_lock" ] && break; sleep 0.01; done
for second in "--overwrite 1" "--resume 1"; do
    read -r -a flags <<<"$second"
    status=0
    "${CPU[@]}" --steps 1500 --output_dir "$TMP/shared" "${flags[@]}" >/dev/null 2>"$TMP/second.err" || status=$?
    [ $status = 1 ] && one_line "$TMP/second.err" "$TMP/shared is in use by another run" "host $(hostname), pid $first" && verdict=0 || verdict=1
    result $verdict "train_cpu: a second run ($second) on a directory in use is refused: $(head -c 300 "$TMP/second.err")"
done
status=0
wait $first || status=$?
[ $status = 0 ] && cmp -s "$TMP/alone/model_00001500.bin" "$TMP/shared/model_00001500.bin" && verdict=0 || verdict=1
result $verdict "train_cpu: the first run ends as a run alone does (exit $status, model_00001500.bin identical)"

mkdir -p "$TMP/held"
echo "host elsewhere, pid 4242" >"$TMP/held/.run_lock"
flock "$TMP/held/.run_lock" sleep 60 &
holder=$!
for _ in $(seq 1 200); do flock -n "$TMP/held/.run_lock" true || break; sleep 0.01; done
status=0
"${EMU[@]}" --steps 1 --output_dir "$TMP/held" >/dev/null 2>"$TMP/emu_held.err" || status=$?
kill "$holder"
wait "$holder" 2>/dev/null || true
[ $status = 1 ] && one_line "$TMP/emu_held.err" "$TMP/held is in use by another run" "host elsewhere, pid 4242" && verdict=0 || verdict=1
result $verdict "train_emu: a directory locked by another process is refused: $(head -c 300 "$TMP/emu_held.err")"

# 2. a killed run's temp files
for bin in cpu emu; do
    D=$TMP/leftover_$bin
    mkdir -p "$D"
    touch "$D/model_00000005.bin.r0123456789abc.tmp" "$D/state_00000005_00000.bin.p77.tmp" \
        "$D/latest_checkpoint.p77.tmp" "$D/notes.tmp"
    if [ $bin = cpu ]; then run=("${CPU[@]}"); else run=("${EMU[@]}"); fi
    "${run[@]}" --steps 1 --output_dir "$D" >/dev/null 2>&1 || true
    [ "$(cd "$D" && ls ./*.tmp | tr '\n' ' ')" = "./notes.tmp " ] && verdict=0 || verdict=1
    result $verdict "train_$bin: a killed run's temp files removed, nothing else ($(cd "$D" && ls | tr '\n' ' '))"
done

# 3. node-local output directories, 4. stale RANK / WORLD_SIZE
if command -v mpirun >/dev/null && grep -q libmpi <<<"$(ldd ./train_emu)"; then
    MPIRUN=(mpirun --oversubscribe -x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS -x CUDA_EMU_THREADS)
    if [ "$(id -u)" = 0 ]; then MPIRUN+=(--allow-run-as-root); fi
    for bin in cpu emu; do
        if [ $bin = cpu ]; then run=("$root/train_cpu" "${BASE[@]}" --dtype float32); else
            run=("$root/train_emu" "${BASE[@]}" --dtype bfloat16); fi
        mkdir -p "$TMP/node0_$bin" "$TMP/node1_$bin"
        status=0
        "${MPIRUN[@]}" -np 1 -wdir "$TMP/node0_$bin" "${run[@]}" --steps 2 --output_dir out : \
            -np 1 -wdir "$TMP/node1_$bin" "${run[@]}" --steps 2 --output_dir out >"$TMP/local_$bin.out" \
            2>"$TMP/local_$bin.err" || status=$?
        grep -v '^error: ' "$TMP/local_$bin.err" >>"$TMP/local_$bin.out" || true
        [ $status != 0 ] && [ "$(grep -c '^error: ' "$TMP/local_$bin.err")" = 2 ] &&
            [ "$(grep '^error: ' "$TMP/local_$bin.err" | sort -u | wc -l)" = 1 ] &&
            grep -q "rank(s) 1 of 2 do not see the directory rank 0 writes" "$TMP/local_$bin.err" &&
            ! grep -q "^step " "$TMP/local_$bin.out" && verdict=0 || verdict=1
        result $verdict "train_$bin: node-local --output_dir: both ranks refuse in one line, before any step: $(head -n 1 "$TMP/local_$bin.err")"

        status=0
        RANK=0 WORLD_SIZE=4 "${MPIRUN[@]}" -x RANK -x WORLD_SIZE -np 2 "${run[@]}" --steps 1 --output_dir "" \
            >/dev/null 2>"$TMP/stale_$bin.err" || status=$?
        [ $status != 0 ] && grep -q "^error: environment RANK=0 WORLD_SIZE=4 disagree with mpirun's rank" "$TMP/stale_$bin.err" && verdict=0 || verdict=1
        result $verdict "train_$bin: stale RANK / WORLD_SIZE under mpirun named: $(grep -m1 '^error' "$TMP/stale_$bin.err")"
    done
else
    echo "SKIPPED the MPI cases: mpirun or an MPI build of train_emu missing"
fi

# 5. a log that cannot grow: torn writes cut back to whole records
for bin in cpu emu; do
    if [ $bin = cpu ]; then run=("${CPU[@]}"); else run=("${EMU[@]}"); fi
    status=0
    (
        trap '' XFSZ
        ulimit -f 1 # 1 KiB: a few records, then a write that stops mid-record
        exec "${run[@]}" --steps 20 --output_dir "" --log_file "$TMP/small_$bin.jsonl"
    ) >/dev/null 2>"$TMP/small_$bin.err" || status=$?
    [ $status = 1 ] && one_line "$TMP/small_$bin.err" "--log_file: $TMP/small_$bin.jsonl: a write failed" \
        "the log ends at its last whole record" &&
        "$PY" -c "
import json, sys
text = open(sys.argv[1]).read()
assert text.endswith('\n') and len(text) > 0
for line in text.splitlines(): json.loads(line)" "$TMP/small_$bin.jsonl" && verdict=0 || verdict=1
    result $verdict "train_$bin: a log that cannot grow: one error line, only whole records ($(wc -l <"$TMP/small_$bin.jsonl") kept): $(head -c 200 "$TMP/small_$bin.err")"
done

# 5b. a log that fails where checkpoints still fit (/dev/full: every write fails): the run stops after its
# step with a checkpoint, exit 1 and one error line; --resume 1 with a writable log goes on from it
for bin in cpu emu; do
    if [ $bin = cpu ]; then run=("${CPU[@]}"); else run=("${EMU[@]}"); fi
    status=0
    "${run[@]}" --steps 20 --output_dir "$TMP/full_$bin" --log_file /dev/full >/dev/null 2>"$TMP/full_$bin.err" ||
        status=$?
    at=$(cat "$TMP/full_$bin/latest_checkpoint" 2>/dev/null) || at=none
    [ $status = 1 ] && one_line "$TMP/full_$bin.err" "--log_file: /dev/full: a write failed" "stops after this step" &&
        [ "$at" != none ] && [ "$at" -lt 20 ] &&
        "${run[@]}" --steps 20 --output_dir "$TMP/full_$bin" --log_file "$TMP/full_$bin.jsonl" --resume 1 \
            >/dev/null 2>&1 && [ "$(cat "$TMP/full_$bin/latest_checkpoint")" = 20 ] && verdict=0 || verdict=1
    result $verdict "train_$bin: a log that fails: exit $status, one error line, a checkpoint of step $at, resumed to 20"
done

# 6. progress of a long step
timeout 30 "${CPU[@]}" --steps 1 --total_batch_size $((128 * 16384)) --output_dir "" >"$TMP/long.out" 2>&1 || true
grep -q "^progress | step 1: micro-step [0-9]*/16384$" "$TMP/long.out" && verdict=0 || verdict=1
result $verdict "train_cpu: a step of 16384 micro-steps prints its progress ($(grep -m1 '^progress' "$TMP/long.out" || echo none))"

# 7. the directory by identity
mkdir -p "$TMP/linked"
cp "$TMP/data/text_train_000000.bin" "$TMP/shard_copy.bin"
ln -s "$TMP/shard_copy.bin" "$TMP/linked/.run_lock"
status=0
"${CPU[@]}" --steps 1 --output_dir "$TMP/linked" >/dev/null 2>"$TMP/linked.err" || status=$?
[ $status = 1 ] && one_line "$TMP/linked.err" "--output_dir: the lock file $TMP/linked/.run_lock is a symbolic link" &&
    cmp -s "$TMP/data/text_train_000000.bin" "$TMP/shard_copy.bin" && verdict=0 || verdict=1
result $verdict "train_cpu: a symbolic link as the lock is refused, its target untouched: $(head -c 300 "$TMP/linked.err")"
taken_away() { # NAME WHAT [LAUNCHER...]: starts a run on $TMP/NAME, takes its directory away by WHAT once it trains
    local name=$1 what=$2
    shift 2
    "$@" "${CPU[@]}" --steps 200 --ckpt_every 200 --output_dir "$TMP/$name" >"$TMP/$name.out" 2>"$TMP/$name.err" &
    local pid=$!
    for _ in $(seq 1 1000); do grep -q "^step" "$TMP/$name.out" && break; sleep 0.01; done
    eval "$what"
    status=0
    wait $pid || status=$?
}
resumes() { "${CPU[@]}" --steps 201 --output_dir "$1" --resume 1 >/dev/null 2>&1 && [ "$(cat "$1/latest_checkpoint")" = 201 ]; }
taken_away lock_removed 'rm "$TMP/lock_removed/.run_lock"'
[ $status = 1 ] && one_line "$TMP/lock_removed.err" "--output_dir: the lock file $TMP/lock_removed/.run_lock was removed" \
    "no other run took the directory, so the lock is taken again, the checkpoint of step 200 is written" &&
    [ "$(cat "$TMP/lock_removed/latest_checkpoint")" = 200 ] && resumes "$TMP/lock_removed" && verdict=0 || verdict=1
result $verdict "train_cpu: a lock removed mid-run is taken again, the checkpoint written, the run stops (exit $status) and resumes: $(head -c 300 "$TMP/lock_removed.err")"
# another run's lock in its place: held by this script (descriptor 8) until the run has stopped
taken_away lock_held 'rm "$TMP/lock_held/.run_lock"; echo "host elsewhere, pid 4242" >"$TMP/lock_held/.run_lock"
    exec 8>>"$TMP/lock_held/.run_lock"; flock 8'
exec 8>&-
[ $status = 1 ] && one_line "$TMP/lock_held.err" "--output_dir: $TMP/lock_held lost its lock file since this run took it" \
    "stopping before the checkpoint of step 200, which is not written" && [ ! -e "$TMP/lock_held/model_00000200.bin" ] &&
    verdict=0 || verdict=1
result $verdict "train_cpu: a lock another run holds in its place stops the run before its checkpoint (exit $status): $(head -c 300 "$TMP/lock_held.err")"
taken_away renamed 'mv "$TMP/renamed" "$TMP/renamed.moved" && "${CPU[@]}" --steps 2 --output_dir "$TMP/renamed" >/dev/null'
[ $status = 1 ] && one_line "$TMP/renamed.err" "--output_dir: $TMP/renamed was renamed to $TMP/renamed.moved" \
    "the checkpoint of step 200 is written there" &&
    [ "$(cd "$TMP/renamed" && ls | tr '\n' ' ')" = "latest_checkpoint manifest_00000002.txt model_00000002.bin state_00000002_00000.bin " ] &&
    resumes "$TMP/renamed.moved" && verdict=0 || verdict=1
result $verdict "train_cpu: a directory renamed and made again mid-run: the first run's checkpoint under the new name, resumed; the second's files alone ($(ls "$TMP/renamed" | tr '\n' ' ')): $(head -c 300 "$TMP/renamed.err")"
taken_away removed 'rm -r "$TMP/removed"'
[ $status = 1 ] && one_line "$TMP/removed.err" "--output_dir: $TMP/removed was removed since this run took it" &&
    [ ! -e "$TMP/removed" ] && verdict=0 || verdict=1
result $verdict "train_cpu: a directory removed mid-run stops the run in one line (exit $status): $(head -c 300 "$TMP/removed.err")"
if command -v mpirun >/dev/null && grep -q libmpi <<<"$(ldd ./train_cpu)"; then # each rank finds it again
    MPIRUN=(mpirun --oversubscribe -x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS)
    if [ "$(id -u)" = 0 ]; then MPIRUN+=(--allow-run-as-root); fi
    taken_away renamed2 'mv "$TMP/renamed2" "$TMP/renamed2.moved"' "${MPIRUN[@]}" -np 2
    [ $status = 1 ] && [ "$(grep -c "was renamed to $TMP/renamed2.moved" "$TMP/renamed2.err")" = 2 ] &&
        [ -e "$TMP/renamed2.moved/state_00000200_00001.bin" ] && [ "$(cat "$TMP/renamed2.moved/latest_checkpoint")" = 200 ] &&
        verdict=0 || verdict=1
    result $verdict "train_cpu, 2 processes: a directory renamed mid-run: both ranks' checkpoint under the new name (exit $status): $(head -n 1 "$TMP/renamed2.err" | head -c 300)"
fi

# 8. the log on resume
"${CPU[@]}" --steps 10 --ckpt_every 5 --output_dir "$TMP/logs" --log_file "$TMP/logs.jsonl" >/dev/null
cp -r "$TMP/logs" "$TMP/logs_linked" && cp -r "$TMP/logs" "$TMP/logs_pipe"
whole_records() { "$PY" -c "
import json, sys
text = open(sys.argv[1]).read()
assert text.endswith('\n')
steps = [r['step'] for r in map(json.loads, text.splitlines()) if r.get('type') == 'step']
assert steps == list(range(1, int(sys.argv[2]) + 1)), steps" "$@"; }
head -c -10 "$TMP/logs.jsonl" >"$TMP/torn.jsonl" # the last record (the run's summary) cut mid-line
cp "$TMP/torn.jsonl" "$TMP/logs.jsonl"
status=0
"${CPU[@]}" --steps 15 --ckpt_every 5 --output_dir "$TMP/logs" --log_file "$TMP/logs.jsonl" --resume 1 >"$TMP/torn.out" 2>&1 || status=$?
[ $status = 0 ] && grep -q "^resume | --log_file: $TMP/logs.jsonl: its last line was cut short" "$TMP/torn.out" &&
    whole_records "$TMP/logs.jsonl" 15 && verdict=0 || verdict=1
result $verdict "train_cpu: a torn last line of the log is cut at the last whole record on --resume (exit $status): $(grep -m1 'cut short' "$TMP/torn.out" | head -c 200)"
"${CPU[@]}" --steps 10 --ckpt_every 5 --output_dir "$TMP/logs_linked" --log_file "$TMP/target.jsonl" --overwrite 1 >/dev/null
ln -s "$TMP/target.jsonl" "$TMP/link.jsonl"
"${CPU[@]}" --steps 15 --ckpt_every 5 --output_dir "$TMP/logs_linked" --log_file "$TMP/link.jsonl" --resume 1 >/dev/null 2>&1 &&
    [ -L "$TMP/link.jsonl" ] && whole_records "$TMP/target.jsonl" 15 && verdict=0 || verdict=1
result $verdict "train_cpu: a symbolic link as --log_file is followed on --resume, not replaced"
for log in /dev/stdout fifo; do
    [ $log = fifo ] && mkfifo "$TMP/log.fifo" && log=$TMP/log.fifo
    status=0
    timeout 60 "${CPU[@]}" --steps 15 --output_dir "$TMP/logs_pipe" --log_file "$log" --resume 1 2>"$TMP/pipe.err" | cat >/dev/null || status=${PIPESTATUS[0]}
    [ $status = 1 ] && one_line "$TMP/pipe.err" "--log_file: $log is not a regular file" "--resume 1 rewrites the log" && verdict=0 || verdict=1
    result $verdict "train_cpu: --resume 1 with --log_file $log is refused in one line (exit $status, no hang): $(head -c 200 "$TMP/pipe.err")"
done
"${CPU[@]}" --steps 200 --output_dir "$TMP/log_a" --log_file "$TMP/shared.jsonl" >/dev/null 2>&1 &
pid=$!
for _ in $(seq 1 500); do [ -s "$TMP/shared.jsonl" ] && break; sleep 0.01; done
status=0
"${CPU[@]}" --steps 2 --output_dir "$TMP/log_b" --log_file "$TMP/shared.jsonl" >/dev/null 2>"$TMP/shared.err" || status=$?
first=0
wait $pid || first=$?
[ $status = 1 ] && one_line "$TMP/shared.err" "--log_file: $TMP/shared.jsonl is in use by another run" && [ $first = 0 ] &&
    whole_records "$TMP/shared.jsonl" 200 && verdict=0 || verdict=1
result $verdict "train_cpu: a log another run writes is refused in one line, and that run's log stays whole: $(head -c 200 "$TMP/shared.err")"

# 9. ranks and inputs
status=0
OMP_NUM_THREADS=100000 "${CPU[@]}" --steps 2 --output_dir "" >"$TMP/threads.out" 2>&1 || status=$?
[ $status = 0 ] && grep -q "^threads | OMP_NUM_THREADS asks for 100000 threads, more than the [0-9]* cores" "$TMP/threads.out" &&
    verdict=0 || verdict=1
result $verdict "train_cpu: OMP_NUM_THREADS=100000 is bounded by the cores with a line, and the run ends (exit $status)"
mapfile -d '' args < <(merge_flags "${BASE[@]}" --dtype float32 -- --steps 50 --channels 384 --layers 6 --heads 4 \
    --batch_size 1 --output_dir "$TMP/limit" --time_limit_s 1)
status=0
./train_cpu "${args[@]}" >"$TMP/limit.out" 2>&1 || status=$?
# 10.6M parameters: 127 MB written and read back at 200 MB/s reserve 1.3 s, more than the limit, so the run
# stops after its first step (without the reserve it would take steps until two of them no longer fit)
[ $status = 75 ] && [ "$(cat "$TMP/limit/latest_checkpoint")" = 1 ] &&
    grep -q "^time limit | 1 s; a checkpoint's 1.3 s reserved until one is timed" "$TMP/limit.out" && verdict=0 || verdict=1
result $verdict "train_cpu: --time_limit_s reserves a checkpoint's time before one is timed (exit $status, stopped at step $(cat "$TMP/limit/latest_checkpoint" 2>/dev/null))"
if command -v mpirun >/dev/null && grep -q libmpi <<<"$(ldd ./train_cpu)"; then
    MPIRUN=(mpirun --oversubscribe -x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS)
    if [ "$(id -u)" = 0 ]; then MPIRUN+=(--allow-run-as-root); fi
    mkdir -p "$TMP/copy0" "$TMP/copy1"
    cp "$TMP/data/text_train_000000.bin" "$TMP/copy0/train.bin"
    "$PY" -c "
import sys
data = bytearray(open(sys.argv[1], 'rb').read())
data[len(data) // 2 & ~1] ^= 1  # one token's low bit: the same name and size, other content
open(sys.argv[2], 'wb').write(data)" "$TMP/copy0/train.bin" "$TMP/copy1/train.bin"
    mapfile -d '' args < <(merge_flags "${BASE[@]}" --dtype float32 -- --train_data train.bin --steps 2 --output_dir "")
    run=("$root/train_cpu" "${args[@]}")
    status=0
    "${MPIRUN[@]}" -np 1 -wdir "$TMP/copy0" "${run[@]}" : -np 1 -wdir "$TMP/copy1" "${run[@]}" >"$TMP/copies.out" \
        2>"$TMP/copies.err" || status=$?
    [ $status != 0 ] && grep -q "^error: --train_data: rank 1: train.bin has other content than rank 0's file of that name" "$TMP/copies.err" &&
        grep -q "^error: --train_data: 1 rank(s) read other content than rank 0's shards" "$TMP/copies.err" &&
        ! grep -q "^step " "$TMP/copies.out" && verdict=0 || verdict=1
    result $verdict "train_cpu: ranks whose shards have the same names and sizes but other content are refused, naming the rank and file: $(grep -m1 'rank 1' "$TMP/copies.err")"
else
    echo "SKIPPED the ranks' data check: mpirun or an MPI build of train_cpu missing"
fi

finish

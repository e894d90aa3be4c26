#!/usr/bin/env bash
# test_resume.sh: a run that is stopped and resumed is bit-identical to a run that never stopped.
#
# For each dtype (float32, bfloat16, float8 delayed, current, blockwise with power-of-two scales (C=128, its
# tiles' multiple), mxfp8), and a Llama d2 model (--arch llama: RMSNorm, rotary embeddings, KVH=1 shared by
# NH=2, SwiGLU, untied head) in float32 and float8 delayed, a d2 model, B=4, T=32, N=20 steps:
#  1. N/2 + resume: N steps straight (--ckpt_every 0) against N/2 steps (--steps 10) then a second
#     invocation with --resume 1 and the same flags for N steps total. The schedule is constant after a
#     4-step warmup, so that the learning rate does not depend on --steps.
#  2. rewind (cosine schedule): a run with --ckpt_every 5 against the straight run (checkpointing must not
#     perturb training); then its directory is put back to the state of a run killed while writing the
#     step-15 checkpoint: latest_checkpoint says 10, step 15/20 files gone, leftover .tmp files of step 15
#     (a truncated state, a complete-looking model, a latest_checkpoint.tmp saying 15), the log cut after
#     step 10; --resume 1 must continue from step 10 and end identical to the straight run.
# Compared: the per-step loss, lr and grad_norm strings and the val losses of the JSON logs (exact string
# equality: %.9g prints a float32 exactly), the final model file and the final state file (cmp).
# Variations: float32 uses --shuffle 1 on a small shard (7 batches) so that the run crosses epochs;
# bfloat16 accumulates 2 micro-batches (--total_batch_size 2*B*T); float8 delayed does both with
# --amax_history 4 (the ring buffer wraps before and after the resume).
# Then: a run killed with SIGKILL at an arbitrary moment while checkpointing every step resumes to the
# same final files; --resume 1 with other flags (dtype, batch_size, fp8_recipe, layers, and the run
# identity: lr, total_batch_size, guard_window, other training data) is refused with one error line
# naming the file and the setting, and so is --steps below the checkpoint's step; with another --seed or
# --shuffle (which define the data order the saved position refers to) the resumed run is either refused
# or identical to the straight run; a resume of a finished run trains nothing, exits 0, leaves the log;
# --keep_checkpoints removes exactly the older checkpoints, and under SIGKILLs never the one
# latest_checkpoint names.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
test_init
test_tmpdir TMP test_resume
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} # one thread: fast under load (see test_train.sh); same for every run
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}

[ -x ./train_cpu ] || make train_cpu >/dev/null

# ---------------------------------------------------------------------------------------------------
# data: the byte-level split, and a small shard of 7 batches of 4*32 (+ 40 spare tokens)
test_data_dir "$TMP/data" text
TRAIN=$TMP/data/text_train_000000.bin
VAL=$TMP/data/text_val_000000.bin
SMALL=$TMP/data/small_train.bin
"$PY" - "$TRAIN" "$SMALL" <<'EOF'
import struct, sys
data = open(sys.argv[1], "rb").read()
n = 7 * 4 * 32 + 1 + 40
header = struct.pack("<3i", 20240520, 1, n) + bytes(1024 - 12)
open(sys.argv[2], "wb").write(header + data[1024:1024 + 2 * n])
EOF

COMMON=(--model_size d2 --vocab 256 --seq_len 32 --batch_size 4 --lr 1e-3 --warmup_steps 4 --val_every 5
        --val_batches 2 --val_data "$VAL")
declare -A EXTRA=(
    [float32]="--dtype float32 --shuffle 1 --train_data $SMALL"
    [bfloat16]="--dtype bfloat16 --total_batch_size 256 --train_data $TRAIN"
    [fp8_delayed]="--dtype float8 --fp8_recipe delayed --amax_history 4 --shuffle 1 --total_batch_size 256 --train_data $TRAIN"
    [fp8_current]="--dtype float8 --fp8_recipe current --train_data $TRAIN"
    [fp8_blockwise]="--dtype float8 --fp8_recipe blockwise --fp8_pow2_scales 1 --channels 128 --heads 4 --train_data $TRAIN"
    [fp8_mxfp8]="--dtype float8 --fp8_recipe mxfp8 --train_data $TRAIN"
    [llama_float32]="--arch llama --dtype float32 --shuffle 1 --train_data $SMALL"
    [llama_fp8_delayed]="--arch llama --dtype float8 --fp8_recipe delayed --amax_history 4 --total_batch_size 256 --train_data $TRAIN"
)
DTYPES=(float32 bfloat16 fp8_delayed fp8_current fp8_blockwise fp8_mxfp8 llama_float32 llama_fp8_delayed)

train() { # LOGNAME ARGS...: runs train_cpu, output to $TMP/LOGNAME.out; fails the check on a non-zero exit
    local out=$TMP/$1.out
    shift
    if ./train_cpu "$@" >"$out" 2>&1; then return 0; fi
    bad "train_cpu $* failed: $(tail -n 2 "$out")"
    return 1
}

# Compares two JSON logs: for every step 1..N the last record of that step (loss, lr, grad_norm as
# printed) and every val record, by exact string equality.
compare_logs() { # WHAT LOG_A LOG_B N
    local msg
    if msg=$("$PY" - "$2" "$3" "$4" <<'EOF'
import re, sys
def records(path):
    steps, vals = {}, {}
    for line in open(path):
        found = re.search(r'"step":(\d+)', line)
        if not found:  # records of the whole run (energy) carry no step
            continue
        step = found.group(1)
        if '"type":"step"' in line:
            steps[int(step)] = tuple(re.search(r'"%s":([^,}]+)' % k, line).group(1) for k in ("loss", "lr", "grad_norm"))
        elif '"type":"val"' in line:
            vals[int(step)] = re.search(r'"val_loss":([^,}]+)', line).group(1)
    return steps, vals
(sa, va), (sb, vb), n = records(sys.argv[1]), records(sys.argv[2]), int(sys.argv[3])
errors = []
for s in range(1, n + 1):
    if sa.get(s) != sb.get(s):
        errors.append("step %d: %s vs %s" % (s, sa.get(s), sb.get(s)))
if va != vb:
    errors.append("val %s vs %s" % (sorted(va.items()), sorted(vb.items())))
if errors:
    print("; ".join(errors[:3]))
    sys.exit(1)
EOF
    ); then ok; else bad "$1: logs differ: $msg"; fi
}

compare_files() { # WHAT FILE_A FILE_B
    if cmp -s "$2" "$3"; then ok; else bad "$1: $(basename "$2") differs ($(cmp "$2" "$3" 2>&1 | head -c 200))"; fi
}

# expect_refusal WHAT NEEDLE ARGS... -- OVERRIDES...: exit status 1, stderr one line 'error: ...' containing NEEDLE
expect_refusal() {
    local what=$1 needle=$2 rc=0 args
    shift 2
    mapfile -d '' args < <(merge_flags "$@")
    ./train_cpu "${args[@]}" >"$TMP/refuse.out" 2>"$TMP/refuse.err" || rc=$?
    local lines first
    lines=$(wc -l <"$TMP/refuse.err")
    first=$(head -n 1 "$TMP/refuse.err")
    if [ "$rc" -eq 1 ] && [ "$lines" -eq 1 ] && [[ "$first" == "error: "* ]] && [[ "$first" == *"$needle"* ]]; then
        ok
    else
        bad "$what: expected exit 1 and one line 'error: ...$needle...', got status $rc, stderr: $(head -c 300 "$TMP/refuse.err")"
    fi
}

N=20
for dt in "${DTYPES[@]}"; do
    read -r -a X <<<"${EXTRA[$dt]}"
    # 1. N/2 + resume, constant schedule
    A=(--lr_schedule constant "${COMMON[@]}" "${X[@]}")
    train "$dt.straight" "${A[@]}" --steps $N --ckpt_every 0 --output_dir "$TMP/$dt.S" --log_file "$TMP/$dt.S.jsonl" &&
        train "$dt.half" "${A[@]}" --steps $((N / 2)) --ckpt_every 0 --output_dir "$TMP/$dt.H" --log_file "$TMP/$dt.H.jsonl" &&
        cp -r "$TMP/$dt.H" "$TMP/$dt.H.copy" &&
        train "$dt.resume" "${A[@]}" --steps $N --ckpt_every 0 --output_dir "$TMP/$dt.H" --log_file "$TMP/$dt.H.jsonl" --resume 1 &&
        {
            compare_logs "$dt N/2+resume" "$TMP/$dt.S.jsonl" "$TMP/$dt.H.jsonl" $N
            compare_files "$dt N/2+resume" "$TMP/$dt.S/model_00000020.bin" "$TMP/$dt.H/model_00000020.bin"
            compare_files "$dt N/2+resume" "$TMP/$dt.S/state_00000020_00000.bin" "$TMP/$dt.H/state_00000020_00000.bin"
            grep -q "^resumed | step 10 " "$TMP/$dt.resume.out" && ok || bad "$dt: the resumed run did not report step 10"
        }
    # 2. rewind to step 10 of a checkpointing run, with the leftovers of a kill while writing step 15
    Bf=(--lr_schedule cosine "${COMMON[@]}" "${X[@]}" --steps "$N")
    D=$TMP/$dt.R
    train "$dt.cos_straight" "${Bf[@]}" --ckpt_every 0 --output_dir "$TMP/$dt.C" --log_file "$TMP/$dt.C.jsonl" &&
        train "$dt.cos_ckpt" "${Bf[@]}" --ckpt_every 5 --output_dir "$D" --log_file "$TMP/$dt.R.jsonl" &&
        {
            compare_files "$dt --ckpt_every 5" "$TMP/$dt.C/model_00000020.bin" "$D/model_00000020.bin"
            compare_logs "$dt --ckpt_every 5" "$TMP/$dt.C.jsonl" "$TMP/$dt.R.jsonl" $N
            rm -f "$D"/model_00000015.bin "$D"/model_00000020.bin "$D"/state_00000015_00000.bin "$D"/state_00000020_00000.bin
            echo 10 >"$D/latest_checkpoint"
            cp "$D/model_00000010.bin" "$D/model_00000015.bin" # renamed before the kill
            head -c 3000 "$D/state_00000010_00000.bin" >"$D/state_00000015_00000.bin.tmp"
            echo 15 >"$D/latest_checkpoint.tmp"
            "$PY" -c "
import re, sys
lines = [l for l in open(sys.argv[1]) if not re.search(r'\"step\":', l) or int(re.search(r'\"step\":(\d+)', l).group(1)) <= 10]
open(sys.argv[1], 'w').writelines(lines)" "$TMP/$dt.R.jsonl"
            if train "$dt.rewind_resume" "${Bf[@]}" --ckpt_every 5 --output_dir "$D" --log_file "$TMP/$dt.R.jsonl" --resume 1; then
                grep -q "^resumed | step 10 " "$TMP/$dt.rewind_resume.out" && ok || bad "$dt: rewound run did not resume at step 10"
                compare_logs "$dt killed at 15, resumed" "$TMP/$dt.C.jsonl" "$TMP/$dt.R.jsonl" $N
                compare_files "$dt killed at 15, resumed" "$TMP/$dt.C/model_00000020.bin" "$D/model_00000020.bin"
                compare_files "$dt killed at 15, resumed" "$TMP/$dt.C/state_00000020_00000.bin" "$D/state_00000020_00000.bin"
            fi
        }
    echo "$dt: done ($passed passed, $failed failed so far)"
done

# ---------------------------------------------------------------------------------------------------
# a real SIGKILL at an arbitrary moment of a run that checkpoints every step (float32, cosine)
read -r -a X <<<"${EXTRA[float32]}"
K=(--lr_schedule cosine "${COMMON[@]}" "${X[@]}" --steps "$N" --ckpt_every 1 --output_dir "$TMP/kill" --log_file "$TMP/kill.jsonl")
./train_cpu "${K[@]}" >"$TMP/kill.out" 2>&1 &
pid=$!
for _ in $(seq 1 2000); do
    [ -f "$TMP/kill/latest_checkpoint" ] && [ "$(cat "$TMP/kill/latest_checkpoint")" -ge 4 ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.005
done
if kill -9 "$pid" 2>/dev/null; then
    wait "$pid" 2>/dev/null || true
    echo "SIGKILL: killed at latest_checkpoint $(cat "$TMP/kill/latest_checkpoint" 2>/dev/null || echo none);" \
        "leftover: $(cd "$TMP/kill" && ls ./*.tmp 2>/dev/null | tr '\n' ' ')"
else
    wait "$pid" || true
    echo "SIGKILL: the run finished before the kill (this check then only repeats the resume of a finished run)"
fi
if [ -f "$TMP/kill/latest_checkpoint" ]; then
    if train kill_resume "${K[@]}" --resume 1; then
        compare_files "SIGKILL + resume" "$TMP/float32.C/model_00000020.bin" "$TMP/kill/model_00000020.bin"
        compare_files "SIGKILL + resume" "$TMP/float32.C/state_00000020_00000.bin" "$TMP/kill/state_00000020_00000.bin"
        compare_logs "SIGKILL + resume" "$TMP/float32.C.jsonl" "$TMP/kill.jsonl" $N
    fi
else
    bad "SIGKILL: no checkpoint was written before the kill"
fi

# ---------------------------------------------------------------------------------------------------
# --keep_checkpoints: every 2 steps keeping 3 leaves steps 16, 18 and 20 (and the files that are not
# checkpoints); with 1, killed with SIGKILL three times at arbitrary moments (a checkpoint and a removal
# every step), the step latest_checkpoint names is complete after every kill, and the run resumed to the
# end has the straight run's files, and only the last step's.
mkdir -p "$TMP/keep3" && touch "$TMP/keep3/notes.txt" "$TMP/keep3/model_old.bin"
mapfile -d '' args < <(merge_flags "${K[@]}" -- --ckpt_every 2 --keep_checkpoints 3 --output_dir "$TMP/keep3" \
    --log_file "")
if train keep3 "${args[@]}"; then
    listed=$(cd "$TMP/keep3" && ls | tr '\n' ' ')
    [ "$listed" = "latest_checkpoint manifest_00000016.txt manifest_00000018.txt manifest_00000020.txt model_00000016.bin model_00000018.bin model_00000020.bin model_old.bin notes.txt state_00000016_00000.bin state_00000018_00000.bin state_00000020_00000.bin " ]
    result $? "--keep_checkpoints 3, every 2 steps: $listed"
    compare_files "--keep_checkpoints 3" "$TMP/float32.C/model_00000020.bin" "$TMP/keep3/model_00000020.bin"
fi
mapfile -d '' KEEP < <(merge_flags "${K[@]}" -- --keep_checkpoints 1 --output_dir "$TMP/keep1" \
    --log_file "$TMP/keep1.jsonl")
resume=()
for target in 3 8 13; do
    ./train_cpu "${KEEP[@]}" "${resume[@]}" >"$TMP/keep1.out" 2>&1 &
    pid=$!
    for _ in $(seq 1 2000); do
        [ -f "$TMP/keep1/latest_checkpoint" ] && [ "$(cat "$TMP/keep1/latest_checkpoint")" -ge $target ] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.002
    done
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    step=$(cat "$TMP/keep1/latest_checkpoint" 2>/dev/null || echo none)
    [ -f "$TMP/keep1/model_$(printf %08d "$step").bin" ] && [ -f "$TMP/keep1/state_$(printf %08d "$step")_00000.bin" ]
    result $? "--keep_checkpoints 1, SIGKILL after step $target: latest_checkpoint $step, its files present ($(cd "$TMP/keep1" && ls | tr '\n' ' '))"
    resume=(--resume 1)
done
if train keep1_end "${KEEP[@]}" --resume 1; then
    compare_files "--keep_checkpoints 1 + SIGKILLs" "$TMP/float32.C/model_00000020.bin" "$TMP/keep1/model_00000020.bin"
    compare_files "--keep_checkpoints 1 + SIGKILLs" "$TMP/float32.C/state_00000020_00000.bin" "$TMP/keep1/state_00000020_00000.bin"
    listed=$(cd "$TMP/keep1" && ls | grep -v '\.tmp$' | tr '\n' ' ')
    [ "$listed" = "latest_checkpoint manifest_00000020.txt model_00000020.bin state_00000020_00000.bin " ]
    result $? "--keep_checkpoints 1: only the last step's files remain ($listed)"
fi

# ---------------------------------------------------------------------------------------------------
# refusals: resuming the float32 and float8 step-10 checkpoints with flags of another run
read -r -a X <<<"${EXTRA[float32]}"
R=(--lr_schedule constant "${COMMON[@]}" --steps "$N" --resume 1 --output_dir "$TMP/float32.H.copy")
F32=("${X[@]}")
STATE=$TMP/float32.H.copy/state_00000010_00000.bin
expect_refusal "resume with --dtype bfloat16" "$STATE" "${R[@]}" "${F32[@]}" -- --dtype bfloat16
expect_refusal "resume with --dtype bfloat16 (names the field)" "dtype" "${R[@]}" "${F32[@]}" -- --dtype bfloat16
expect_refusal "resume with --batch_size 8" "$STATE" "${R[@]}" "${F32[@]}" -- --batch_size 8 --seq_len 16
expect_refusal "resume with --batch_size 8 (names the field)" "batch_size" "${R[@]}" "${F32[@]}" -- --batch_size 8
expect_refusal "resume with --layers 3" "$TMP/float32.H.copy/model_00000010.bin" "${R[@]}" "${F32[@]}" -- --layers 3
expect_refusal "resume a GPT-2 checkpoint with --arch llama" "$TMP/float32.H.copy/model_00000010.bin" "${R[@]}" \
    "${F32[@]}" -- --arch llama
read -r -a XL <<<"${EXTRA[llama_float32]}"
expect_refusal "resume a Llama checkpoint with --kv_heads 2" "$TMP/llama_float32.H.copy/model_00000010.bin" \
    --lr_schedule constant "${COMMON[@]}" --steps "$N" --resume 1 --output_dir "$TMP/llama_float32.H.copy" "${XL[@]}" \
    -- --kv_heads 2
read -r -a X8 <<<"${EXTRA[fp8_delayed]}"
R8=(--lr_schedule constant "${COMMON[@]}" --steps "$N" --resume 1 --output_dir "$TMP/fp8_delayed.H.copy" "${X8[@]}")
expect_refusal "resume float8 delayed with --fp8_recipe current" "$TMP/fp8_delayed.H.copy/state_00000010_00000.bin" \
    "${R8[@]}" -- --fp8_recipe current
expect_refusal "resume float8 with --amax_history 8" "$TMP/fp8_delayed.H.copy/state_00000010_00000.bin" \
    "${R8[@]}" -- --amax_history 8
expect_refusal "resume with another --lr (the run identity)" "checkpoint was written with --lr 0.001 but this run has --lr 0.002" \
    "${R[@]}" "${F32[@]}" -- --lr 2e-3
expect_refusal "resume on other training data" "for other training data than this run's --train_data" \
    "${R[@]}" "${F32[@]}" -- --train_data "$TRAIN"
expect_refusal "resume with another --total_batch_size" "tokens per optimizer step" "${R8[@]}" -- --total_batch_size 512
expect_refusal "resume with another --guard_window" "checkpoint was written with --guard_window 50 but this run has --guard_window 16" \
    "${R[@]}" "${F32[@]}" -- --guard_window 16
expect_refusal "resume with --steps below the checkpoint's" "--steps 5: the latest checkpoint" "${R[@]}" "${F32[@]}" -- --steps 5
mkdir -p "$TMP/empty"
expect_refusal "resume from a directory without checkpoint" "latest_checkpoint" "${R[@]}" "${F32[@]}" -- --output_dir "$TMP/empty"

# Data order: the saved position (epoch, shard, batch) indexes the order drawn from --seed with --shuffle 1.
# A resume under another seed or shuffle setting cannot continue that run: it must be refused, or (if the
# trainer restores the order from the state) produce exactly the straight run.
for change in "--seed 5" "--shuffle 0"; do
    rm -rf "$TMP/order"
    cp -r "$TMP/float32.H.copy" "$TMP/order"
    cp "$TMP/float32.H.jsonl" "$TMP/order.jsonl" 2>/dev/null || true
    read -r -a CH <<<"$change"
    rc=0
    mapfile -d '' args < <(merge_flags --lr_schedule constant "${COMMON[@]}" "${F32[@]}" -- "${CH[@]}")
    ./train_cpu "${args[@]}" --steps $N --resume 1 --ckpt_every 0 \
        --output_dir "$TMP/order" >"$TMP/order.out" 2>"$TMP/order.err" || rc=$?
    if [ "$rc" -eq 1 ] && [ "$(wc -l <"$TMP/order.err")" -eq 1 ] && grep -q "^error: .*state_00000010_00000.bin" "$TMP/order.err"; then
        ok # refused, naming the state file
    elif [ "$rc" -eq 0 ] && cmp -s "$TMP/float32.S/model_00000020.bin" "$TMP/order/model_00000020.bin"; then
        ok # continued the original data order
    else
        bad "resume with $change (the checkpoint was written with --seed 1337 --shuffle 1): exit $rc, and the" \
            "run neither was refused nor continued the saved data order (final model differs from the straight run)"
    fi
done

# A full disk, simulated by a file-size limit (ulimit -f with SIGXFSZ ignored: a write past it fails, as on a
# full disk). (1) the resumed run's rewrite of its log fails: one error line, the log as it was; (2) its
# final checkpoint fails: one error line, latest_checkpoint still names step 10; neither leaves a .tmp file.
full_disk() { # NAME LIMIT_KB: resumes the step-10 float32 checkpoint with writes limited to LIMIT_KB
    rm -rf "$TMP/$1"
    cp -r "$TMP/float32.H.copy" "$TMP/$1"
    cp "$TMP/float32.H.jsonl" "$TMP/$1.jsonl"
    local args
    mapfile -d '' args < <(merge_flags --lr_schedule constant "${COMMON[@]}" "${F32[@]}" -- --steps $N --resume 1 \
        --output_dir "$TMP/$1" --log_file "$TMP/$1.jsonl")
    status=0
    (trap '' XFSZ && ulimit -f "$2" && exec ./train_cpu "${args[@]}") >"$TMP/$1.out" 2>"$TMP/$1.err" || status=$?
}
full_disk full_log 1
[ $status = 1 ] && [ "$(wc -l <"$TMP/full_log.err")" = 1 ] && grep -q "^error: .*full_log.jsonl.*full_log.jsonl is left as it was" "$TMP/full_log.err" &&
    cmp -s "$TMP/float32.H.jsonl" "$TMP/full_log.jsonl" && [ -z "$(ls "$TMP"/*.tmp "$TMP/full_log"/*.tmp 2>/dev/null)" ]
result $? "a disk that fills during the log's rewrite: one error line, the log kept as it was, no .tmp left ($(head -c 160 "$TMP/full_log.err"))"
full_disk full_ckpt 64
[ $status = 1 ] && [ "$(wc -l <"$TMP/full_ckpt.err")" = 1 ] && grep -q "^error: $TMP/full_ckpt/model_00000020\.bin\.r[0-9a-f]*\.tmp" "$TMP/full_ckpt.err" &&
    [ "$(cat "$TMP/full_ckpt/latest_checkpoint")" = 10 ] && [ ! -e "$TMP/full_ckpt/model_00000020.bin" ] &&
    [ -z "$(ls "$TMP/full_ckpt"/*.tmp 2>/dev/null)" ]
result $? "a disk that fills during a checkpoint: one error line, latest_checkpoint still step 10, no .tmp left ($(head -c 160 "$TMP/full_ckpt.err"))"

# a resume of a run that has finished (a requeued job): says so, trains nothing, exits 0, and leaves the
# checkpoint and the log as they were
cp -r "$TMP/float32.S" "$TMP/done"
cp "$TMP/float32.S.jsonl" "$TMP/done.jsonl"
rc=0
mapfile -d '' args < <(merge_flags --lr_schedule constant "${COMMON[@]}" "${F32[@]}" --steps $N -- --resume 1 \
    --output_dir "$TMP/done" --log_file "$TMP/done.jsonl")
./train_cpu "${args[@]}" >"$TMP/done.out" 2>&1 || rc=$?
[ $rc = 0 ] && grep -q "nothing to train: the run in $TMP/done is complete at --steps $N" "$TMP/done.out" &&
    ! grep -q '^step' "$TMP/done.out" && cmp -s "$TMP/float32.S.jsonl" "$TMP/done.jsonl"
result $? "resume of a finished run: nothing to train, exit 0, log unchanged (no second energy record)"

finish

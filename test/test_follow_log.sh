#!/usr/bin/env bash
# test_follow_log.sh: scripts/follow_log.py streams a run's JSON-lines log into TensorBoard and W&B (offline).
#   1. started with --follow before the run (its log does not exist yet), it ends by itself after the run's last
#      record; the TensorBoard event files, read back with tensorboard's own reader, hold every step's loss, lr and
#      grad_norm, the validations and the eval accuracies of the log at their steps (as float32, TensorBoard's);
#   2. the W&B run is written offline (its .wandb file), for `wandb sync`;
#   3. no writer asked for, and a log that is not JSON lines, end with one error line.
# The writers (torch with tensorboard, wandb) are the packages'; follow_log.py installs a missing one into
# build/python/ (a SKIPPED line when it cannot). About 20 s; needs train_cpu and python3.
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
test_init
need_python_modules test_follow_log numpy torch # torch is the clients' (make clients_deps); tensorboard and wandb
test_tmpdir TMP test_follow_log
FIX=test/llmc_hellaswag
"$PY" - "$FIX/hellaswag.jsonl" "$TMP/text_train_000000.bin" <<'PYEOF'
import struct, sys
t = open(sys.argv[1], "rb").read()[:4096]
open(sys.argv[2], "wb").write(struct.pack("<256i", 20240520, 1, len(t), *[0] * 253) + struct.pack(f"<{len(t)}H", *t))
PYEOF

# 1. and 2.: the follower first, then the run
"$PY" scripts/follow_log.py "$TMP/run.jsonl" --follow --tensorboard "$TMP/tb" --wandb --wandb_dir "$TMP" \
    >"$TMP/follow.out" 2>&1 &
follower=$!
./train_cpu --init_from "$FIX/model.bin" --train_data "$TMP/text_train_000000.bin" --val_data "$TMP/text_train_000000.bin" \
    --val_batches 1 --val_every 2 --eval_data "$FIX/hellaswag_val.bin" --eval_every 2 --steps 4 --batch_size 2 \
    --dtype bfloat16 --output_dir "" --log_file "$TMP/run.jsonl" >"$TMP/run.out" 2>&1
result $? "the run (4 steps, validation and eval every 2)"
for _ in $(seq 300); do kill -0 "$follower" 2>/dev/null || break; sleep 0.5; done
if kill -0 "$follower" 2>/dev/null; then
    kill "$follower"
    bad "the follower did not end after the run's last record: $(tail -n 3 "$TMP/follow.out")"
    finish
    exit
fi
wait "$follower"
status=$?
if [ "$status" != 0 ] && grep -q "could not install" "$TMP/follow.out"; then
    echo "SKIPPED test_follow_log: $(tail -n 1 "$TMP/follow.out")"
    exit 0
fi
result "$status" "follow_log.py --follow ended after the run's last record: $(tail -n 1 "$TMP/follow.out")"
while IFS= read -r line; do # the reader's checks, one line each
    case "$line" in "ok   "*) ok "${line#ok   }" ;; *) bad "${line#FAIL: }" ;; esac
done < <("$PY" - "$TMP/run.jsonl" "$TMP/tb" 2>&1 <<'PYEOF'
import json, sys
import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
records = [json.loads(line) for line in open(sys.argv[1])]
acc = EventAccumulator(sys.argv[2], size_guidance={"scalars": 0})
acc.Reload()
def check(what, good):
    print(("ok   " if good else "FAIL: ") + what)
for kind, fields in (("step", ("loss", "lr", "grad_norm")), ("val", ("val_loss", "perplexity")),
                     ("eval", ("accuracy", "correct"))):
    for field in fields:
        want = [(r["step"], np.float32(r[field])) for r in records if r["type"] == kind]
        tag = f"{kind}/{field}"
        got = [(e.step, np.float32(e.value)) for e in acc.Scalars(tag)] if tag in acc.Tags()["scalars"] else []
        check(f"TensorBoard {tag}: {len(got)} values read back, the log's {len(want)} at their steps",
              len(want) > 0 and got == want)
PYEOF
)
ls "$TMP"/wandb/offline-run-*/run-*.wandb >/dev/null 2>&1 && [ -s "$(ls "$TMP"/wandb/offline-run-*/run-*.wandb | head -n 1)" ]
result $? "W&B offline run written for wandb sync"

# 3. refusals
"$PY" scripts/follow_log.py "$TMP/run.jsonl" >/dev/null 2>"$TMP/err"
[ $? = 1 ] && [ "$(wc -l <"$TMP/err")" = 1 ] && grep -q "nothing to write" "$TMP/err"
result $? "no writer: $(cat "$TMP/err")"
echo "not json" >"$TMP/bad.jsonl"
"$PY" scripts/follow_log.py "$TMP/bad.jsonl" --tensorboard "$TMP/tb2" >/dev/null 2>"$TMP/err"
[ $? = 1 ] && [ "$(wc -l <"$TMP/err")" = 1 ] && grep -q "bad.jsonl:1: not a JSON line" "$TMP/err"
result $? "a log that is not JSON lines: $(cat "$TMP/err")"
finish

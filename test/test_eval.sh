#!/usr/bin/env bash
# test_eval.sh: --eval_data, llm.c's multiple-choice eval files (core/eval_data.h) and scripts/prepare_eval.py,
# on the fixtures llm.c's own Python wrote (test/llmc_hellaswag: a tiny GPT-2 by train_gpt2.py's write_model, 24
# HellaSwag-schema examples by data_common.py's write_evalfile, and PyTorch's count under llm.c's rule; its
# README.md says how). About a minute on 2 cores (most of it the emulated trainer); needs train_cpu and python3
# (no modules); train_emu, mpirun when present.
#   1. train_cpu --eval_only 1 --dtype float32 gives PyTorch's count exactly, at B = 4, 3 (an example's rows
#      straddle two batches) and 1; and with every label set to k (k = 0..3) it counts the examples whose
#      choice PyTorch found to be k, so each example's choice is checked, not only their total. Exact, because
#      no example is near a tie: reference.txt's smallest gap between an example's two best mean losses
#      (0.0015) is hundreds of times what float32 summation order moves a mean loss of about 1 (a few 1e-6,
#      test_llmc_llama.sh's bound); the test checks that the gap exceeds 1e-4 first;
#   2. scripts/prepare_eval.py hellaswag --input the jsonl --tokenizer byte writes llm.c's file byte for byte;
#      with a tokenizer.json (--tokenizer hf, when tokenizers is importable) each context and " " + ending as the
#      tokenizers library encodes them; a bad jsonl line is refused with one line naming it;
#   3. --eval_every 2 over 4 steps logs eval records at steps 2 and 4 (line and JSON); a run resumed from its
#      step-2 checkpoint redoes step 2's scoring, which its log then holds once;
#   4. 2 and 5 processes (mpirun) split the examples and sum to the same count (5: 5, 5, 5, 5 and 4 examples);
#   5. the emulated CUDA trainer's bfloat16 count and choices equal train_cpu's bfloat16 ones, and so does its
#      count on 2 processes with ZeRO-1 and ZeRO-3 (mpirun); with --price_gpu_hour it logs the rental of its
#      wall time (within what this script times from outside);
#   6. bad eval files (magic, version, byte count, label, token, length, truncation, trailing bytes,
#      delimiter) and --eval_every without --eval_data end with one error line naming the file and reason.
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
test_init
test_tmpdir TMP test_eval
FIX=test/llmc_hellaswag
ref() { awk -v k="$1" '$1 == k { $1 = ""; print substr($0, 2) }' "$FIX/reference.txt"; }
# a training shard for the flags (--eval_only trains nothing): the jsonl's bytes, every one below V = 128
"$PY" - "$FIX/hellaswag.jsonl" "$TMP/shard_train_000000.bin" <<'PYEOF'
import struct, sys
t = open(sys.argv[1], "rb").read()[:4096]
open(sys.argv[2], "wb").write(struct.pack("<256i", 20240520, 1, len(t), *[0] * 253) + struct.pack(f"<{len(t)}H", *t))
PYEOF
base=(--init_from "$FIX/model.bin" --train_data "$TMP/shard_train_000000.bin" --val_data "" --output_dir "")

LAUNCH=() # what starts the trainer (mpirun)
count() { # TRAINER EVAL_FILE FLAGS...: the count of the eval line ("K/N"), or the output on failure
    local trainer=$1 file=$2
    shift 2
    "${LAUNCH[@]}" "$trainer" "${base[@]}" --eval_data "$file" "$@" >"$TMP/out.txt" 2>&1 || { tail -n 3 "$TMP/out.txt"; return 1; }
    sed -n 's/^eval | step [0-9]* | accuracy \([0-9]*\/[0-9]*\) (.*/\1/p' "$TMP/out.txt"
}
relabel() { # K OUT: llm.c's file with every label set to K (the example's fourth uint16)
    "$PY" - "$FIX/hellaswag_val.bin" "$1" "$2" <<'PYEOF'
import struct, sys
d, k = bytearray(open(sys.argv[1], "rb").read()), int(sys.argv[2])
at = 1024
while at < len(d):
    struct.pack_into("<H", d, at + 6, k)
    at += struct.unpack_from("<H", d, at + 2)[0]
open(sys.argv[3], "wb").write(d)
PYEOF
}

# 1. PyTorch's count and choices
N=$(ref examples)
"$PY" -c 'import sys; sys.exit(0 if float(sys.argv[1]) > 1e-4 else 1)' "$(ref smallest_gap)"
result $? "no example of the fixture is near a tie (smallest gap $(ref smallest_gap) > 1e-4)"
for B in 4 3 1; do
    got=$(count ./train_cpu "$FIX/hellaswag_val.bin" --eval_only 1 --dtype float32 --batch_size "$B") || got="failed: $got"
    [ "$got" = "$(ref correct)/$N" ]
    result $? "train_cpu --eval_only 1 (float32, B=$B) on llm.c's model and file: $got, PyTorch's $(ref correct)/$N"
done
choices_of() { # TRAINER FLAGS...: the counts of the label-k files, k = 0..3
    local k out=""
    for k in 0 1 2 3; do
        relabel "$k" "$TMP/label$k.bin"
        out+="$(count "$1" "$TMP/label$k.bin" --eval_only 1 "${@:2}" | cut -d/ -f1) "
    done
    echo "$out"
}
expected=""
for k in 0 1 2 3; do expected+="$(ref choices | tr ' ' '\n' | grep -c "^$k$") "; done
cpu_choices=$(choices_of ./train_cpu --dtype float32 --batch_size 4)
[ "$cpu_choices" = "$expected" ]
result $? "examples choosing completion 0..3: train_cpu $cpu_choices, PyTorch $expected"

# 2. prepare_eval.py writes llm.c's file
"$PY" scripts/prepare_eval.py hellaswag --input "$FIX/hellaswag.jsonl" --tokenizer byte --output "$TMP/prepared.bin" \
    >"$TMP/prepare.txt" 2>&1 && cmp -s "$TMP/prepared.bin" "$FIX/hellaswag_val.bin"
result $? "prepare_eval.py hellaswag --tokenizer byte: llm.c's write_evalfile's bytes"

# ... with a tokenizer.json (--tokenizer hf): each context and " " + ending as the tokenizers library encodes it
if "$PY" -c "import tokenizers" 2>/dev/null; then
    "$PY" - "$FIX/hellaswag.jsonl" "$TMP/tokenizer.json" <<'PYEOF'
import json, sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
examples = [json.loads(line) for line in open(sys.argv[1])]
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>"],
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
tok.train_from_iterator([e["ctx"] + " " + " ".join(e["endings"]) for e in examples], trainer)
tok.save(sys.argv[2])
PYEOF
    "$PY" scripts/prepare_eval.py hellaswag --input "$FIX/hellaswag.jsonl" --tokenizer hf \
        --tokenizer_file "$TMP/tokenizer.json" --output "$TMP/hf.bin" >"$TMP/prepare.txt" 2>&1 &&
        "$PY" - "$FIX/hellaswag.jsonl" "$TMP/tokenizer.json" "$TMP/hf.bin" <<'PYEOF'
import json, struct, sys
from tokenizers import Tokenizer
examples = [json.loads(line) for line in open(sys.argv[1])]
tok = Tokenizer.from_file(sys.argv[2])
d = open(sys.argv[3], "rb").read()
header = struct.unpack_from("<4i", d, 0)
u = struct.unpack(f"<{(len(d) - 1024) // 2}H", d[1024:])
at, longest = 0, 0
for i, e in enumerate(examples):
    want = [65535, 0, i, e["label"], len(e["endings"])]
    parts = [tok.encode(e["ctx"], add_special_tokens=False).ids]
    parts += [tok.encode(" " + end, add_special_tokens=False).ids for end in e["endings"]]
    for p in parts:
        want += [len(p)] + p
    want[1] = 2 * len(want)
    longest = max(longest, want[1])
    assert list(u[at:at + len(want)]) == want, f"example {i}"
    at += len(want)
assert at == len(u) and header == (20240522, 1, len(examples), longest), header
PYEOF
    result $? "prepare_eval.py --tokenizer hf: the tokenizers library's tokens of each context and ' ' + ending"
else
    echo "SKIPPED prepare_eval.py --tokenizer hf: tokenizers not importable (make clients_deps)"
fi
# ... and its bad inputs: one line naming the file and line
bad_jsonl() { # WHAT EXPECTED LINE
    printf '%s\n' "$3" >"$TMP/bad.jsonl"
    "$PY" scripts/prepare_eval.py hellaswag --input "$TMP/bad.jsonl" --tokenizer byte --output "$TMP/bad_out.bin" \
        >/dev/null 2>"$TMP/bad.err"
    [ $? = 1 ] && [ "$(wc -l <"$TMP/bad.err")" = 1 ] && grep -q "$TMP/bad.jsonl: line 1: .*$2" "$TMP/bad.err" &&
        [ ! -e "$TMP/bad_out.bin" ]
    result $? "prepare_eval.py refuses $1: $(cat "$TMP/bad.err")"
}
bad_jsonl "a label out of range" "label 4 is not the index" '{"ctx": "a", "endings": ["b", "c"], "label": 4}'
bad_jsonl "a line that is not JSON" "not a HellaSwag example" '{"ctx": '
bad_jsonl "a missing field" "not a HellaSwag example" '{"ctx": "a", "label": 0}'

# 3. --eval_every during training
./train_cpu "${base[@]}" --eval_data "$FIX/hellaswag_val.bin" --eval_every 2 --steps 4 --lr 1e-4 --dtype float32 \
    --batch_size 2 --log_file "$TMP/log.jsonl" >"$TMP/train.txt" 2>&1
steps=$(grep '"type":"eval"' "$TMP/log.jsonl" | sed 's/.*"step":\([0-9]*\),"correct":[0-9]*,"examples":24,.*/\1/' | tr '\n' ' ')
lines=$(grep -c "^eval | step [24] | accuracy [0-9]*/24 (0\.[0-9]\{4\})$" "$TMP/train.txt" || true)
[ "$steps" = "2 4 " ] && [ "$lines" = 2 ]
result $? "--eval_every 2 --steps 4: eval records at steps $steps, $lines eval lines"

# ... and a resumed run redoes the scoring of its checkpoint's step, which its log then holds once
shape=(--model_size d2 --layers 2 --channels 32 --heads 1 --vocab 128 --max_seq_len 64) # the fixture's model
resumed=(--train_data "$TMP/shard_train_000000.bin" --val_data "" --eval_data "$FIX/hellaswag_val.bin" --eval_every 2
    --batch_size 2 --dtype float32 --output_dir "$TMP/ckpt" --log_file "$TMP/resumed.jsonl")
./train_cpu --init_from "$FIX/model.bin" "${resumed[@]}" --steps 2 >/dev/null 2>&1 &&
    ./train_cpu "${shape[@]}" "${resumed[@]}" --steps 4 --resume 1 >"$TMP/resumed.txt" 2>&1
steps=$(grep '"type":"eval"' "$TMP/resumed.jsonl" | sed 's/.*"step":\([0-9]*\),.*/\1/' | tr '\n' ' ')
[ "$steps" = "2 4 " ] && grep -q "^eval | step 2 |" "$TMP/resumed.txt"
result $? "a run resumed at step 2 redoes that step's scoring: the log's eval records at steps $steps"

# 4. several processes
if command -v mpirun >/dev/null; then
    for np in 2 5; do
        LAUNCH=(mpirun --oversubscribe -x OMP_NUM_THREADS=1 -np "$np")
        if [ "$(id -u)" = 0 ]; then LAUNCH+=(--allow-run-as-root); fi
        got=$(count ./train_cpu "$FIX/hellaswag_val.bin" --eval_only 1 --dtype float32 --batch_size 3) ||
            got="failed: $got"
        LAUNCH=()
        [ "$got" = "$(ref correct)/$N" ]
        result $? "$np processes split the examples: $got"
    done
else
    echo "SKIPPED the processes' split: mpirun not found"
fi

# 5. the emulated CUDA trainer
if [ -x ./train_emu ]; then
    cpu=$(choices_of ./train_cpu --dtype bfloat16 --batch_size 4)
    emu=$(choices_of ./train_emu --dtype bfloat16 --batch_size 4 --attention exact)
    [ -n "$cpu" ] && [ "$cpu" = "$emu" ]
    result $? "bfloat16 examples choosing 0..3: train_emu $emu, train_cpu $cpu"
    # --price_gpu_hour: the rental line and record, the GPU-hours the process's own wall time (timed here too)
    start=$(date +%s.%N)
    ./train_emu "${base[@]}" --eval_data "$FIX/hellaswag_val.bin" --eval_only 1 --dtype bfloat16 --batch_size 4 \
        --attention exact --price_gpu_hour 3 --log_file "$TMP/rental.jsonl" >"$TMP/rental.txt" 2>&1
    end=$(date +%s.%N)
    "$PY" - "$TMP/rental.jsonl" "$start" "$end" <<'PYEOF'
import json, sys
rental = [json.loads(l) for l in open(sys.argv[1]) if '"type":"rental"' in l]
outside = (float(sys.argv[3]) - float(sys.argv[2])) / 3600
r = rental[0] if len(rental) == 1 else {"gpu_hours": -1, "cost": 0}
sys.exit(0 if 0.5 * outside < r["gpu_hours"] <= outside and abs(r["cost"] - 3 * r["gpu_hours"]) <= 1e-6 * r["cost"] else 1)
PYEOF
    result $? "train_emu --price_gpu_hour 3: $(grep '^rental' "$TMP/rental.txt"), timed from outside $(
        "$PY" -c "print(f'{($end - $start) / 3600:.6g}')") h"
    if command -v mpirun >/dev/null; then # ZeRO ranks split the examples (B=5: the last batch part padding)
        want=$(count ./train_cpu "$FIX/hellaswag_val.bin" --eval_only 1 --dtype bfloat16 --batch_size 5) || want=failed
        for zero in 1 3; do
            LAUNCH=(mpirun --oversubscribe -x OMP_NUM_THREADS=1 -np 2)
            if [ "$(id -u)" = 0 ]; then LAUNCH+=(--allow-run-as-root); fi
            got=$(count ./train_emu "$FIX/hellaswag_val.bin" --eval_only 1 --dtype bfloat16 --batch_size 5 \
                --attention exact --zero_stage "$zero") || got="failed: $got"
            LAUNCH=()
            [ "$got" = "$want" ]
            result $? "train_emu, 2 processes, ZeRO-$zero: $got, train_cpu's bfloat16 $want"
        done
    fi
else
    echo "SKIPPED train_emu's count: no ./train_emu (make train_emu)"
fi

# 6. bad files: one line naming the file and the reason
bad_file() { # NAME EXPECTED_REASON PYTHON_EDIT [FLAGS...]: the edit of llm.c's file d (bytearray) is refused
    local name=$1 reason=$2 edit=$3
    shift 3
    "$PY" - "$FIX/hellaswag_val.bin" "$TMP/$name.bin" "$edit" <<'PYEOF'
import struct, sys
d = bytearray(open(sys.argv[1], "rb").read())
exec(sys.argv[3])
open(sys.argv[2], "wb").write(d)
PYEOF
    local status=0
    ./train_cpu "${base[@]}" --eval_data "$TMP/$name.bin" --eval_only 1 --dtype float32 "$@" >"$TMP/bad.out" \
        2>"$TMP/bad.err" || status=$?
    [ "$status" = 1 ] && [ "$(wc -l <"$TMP/bad.err")" = 1 ] && grep -q "^error: $TMP/$name.bin: .*$reason" "$TMP/bad.err"
    result $? "$name: $(cat "$TMP/bad.err")"
}
bad_file magic "not an eval file" 'struct.pack_into("<i", d, 0, 20240520)'
bad_file version "version 2 is not supported" 'struct.pack_into("<i", d, 4, 2)'
bad_file byte_count "example 0 says it has 128 bytes, but its tokens make 126" \
    'struct.pack_into("<H", d, 1026, struct.unpack_from("<H", d, 1026)[0] + 2)'
bad_file label "label 4 is out of range" 'struct.pack_into("<H", d, 1030, 4)'
bad_file token "token 128 is outside the model's vocabulary of 128" 'struct.pack_into("<H", d, 1036, 128)'
bad_file truncated "file is truncated in example 23" 'del d[-2:]'
bad_file trailing "bytes follow the last of its 24 examples" 'd += b"\0\0"'
bad_file delimiter "does not start with the delimiter" 'struct.pack_into("<H", d, 1024, 7)'
bad_file long_example "more than the sequence length T=16" 'pass' --seq_len 16
status=0
./train_cpu "${base[@]}" --eval_every 5 >"$TMP/bad.out" 2>"$TMP/bad.err" || status=$?
[ "$status" = 1 ] && grep -q "^error: --eval_every: no --eval_data" "$TMP/bad.err"
result $? "--eval_every without --eval_data: $(cat "$TMP/bad.err")"
finish

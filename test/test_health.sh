#!/usr/bin/env bash
# test_health.sh: the run-health features of the trainers, end to end on the CPU trainer.
#  - a NaN injected into a gradient (--inject_nan_step) is skipped and counted: that step leaves the
#    weights bit for bit as they were, the next step moves them again;
#  - the BF16 shadow check reports exactly zero in a bfloat16 run and a nonzero difference in float8;
#    beyond --bf16_check_tolerance it warns, or with --bf16_check_stop ends the run with one error line;
#  - FP8 telemetry: a model whose LayerNorm gains are 1000 saturates the first qkv input cast under the
#    delayed recipe (scale 1 on the first step) and the summary line says so; the current recipe saturates
#    nothing there; each record's element count is the cast's size;
#  - the gradient-norm guard skips steps and a run with it resumes bit-exactly (its window is in the state);
#  - energy is reported as not measured on the CPU.
# (no `set -e`: each check's status goes to `result`, and a failed run shows up in the checks after it)
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
test_init
test_tmpdir tmp test_health
test_data_dir "$tmp/data" text
export OMP_NUM_THREADS=1
base=(--model_size d2 --vocab 256 --seq_len 32 --batch_size 4 --val_every 0 --val_batches 1 --lr 1e-3
      --train_data "$tmp/data/text_train_*.bin" --val_data "$tmp/data/text_val_*.bin")

# NaN injection
./train_cpu "${base[@]}" --steps 5 --dtype float8 --inject_nan_step 3 --ckpt_every 1 --output_dir "$tmp/nan" \
    --log_file "$tmp/nan.jsonl" >"$tmp/nan.txt"
grep -q 'step     3/5 .*skipped (non-finite loss or norm)' "$tmp/nan.txt"; result $? "the NaN step is reported skipped"
grep -q '^skipped steps: 1$' "$tmp/nan.txt"; result $? "and counted"
python3 -c "
import json, sys
recs = [json.loads(l) for l in open('$tmp/nan.jsonl') if '\"type\":\"step\"' in l]
sys.exit(0 if [r['skipped'] for r in recs] == [0, 0, 1, 0, 0] else 1)"; result $? "the JSON log marks exactly step 3"
cmp -s "$tmp/nan/model_00000002.bin" "$tmp/nan/model_00000003.bin"; result $? "the skipped step left the weights untouched"
! cmp -s "$tmp/nan/model_00000003.bin" "$tmp/nan/model_00000004.bin"; result $? "the next step updated them"

# BF16 shadow check
./train_cpu "${base[@]}" --steps 4 --dtype bfloat16 --bf16_check_every 1 --output_dir "" >"$tmp/b.txt"
[ "$(grep -c '^bf16 .*difference +0.000000$' "$tmp/b.txt")" = 4 ]; result $? "bfloat16 against bfloat16: zero difference"
./train_cpu "${base[@]}" --steps 4 --dtype float8 --bf16_check_every 2 --bf16_check_tolerance 1e-9 \
    --output_dir "" --log_file "$tmp/f.jsonl" >"$tmp/f.txt"
python3 -c "
import json, sys
recs = [json.loads(l) for l in open('$tmp/f.jsonl') if '\"bf16_check\"' in l]
sys.exit(0 if [r['step'] for r in recs] == [2, 4] and any(r['diff'] != 0 for r in recs) else 1)"
result $? "float8 against bfloat16: a nonzero difference, logged every 2 steps"
[ "$(grep -c '^warning: step .* beyond --bf16_check_tolerance' "$tmp/f.txt")" -ge 1 ]; result $? "beyond the tolerance: a warning"
./train_cpu "${base[@]}" --steps 4 --dtype float8 --bf16_check_every 2 --bf16_check_tolerance 1e-9 \
    --bf16_check_stop 1 --output_dir "" >/dev/null 2>"$tmp/stop.err"
status=$?
[ $status = 1 ] && [ "$(wc -l <"$tmp/stop.err")" = 1 ] && grep -q '^error: --bf16_check_tolerance: at step 2' "$tmp/stop.err"
result $? "with --bf16_check_stop 1: one error line, exit 1"

# FP8 telemetry on a model built to saturate (every ln1 weight 1000). A fresh delayed run has no amax
# history: its first casts measure, so the hot model saturates nothing at step 1. Swapped into the checkpoint
# of an ordinary first step, it saturates at step 2 under delayed scaling (the scales of that step's history),
# and not under current scaling.
./train_cpu "${base[@]}" --steps 1 --dtype float32 --output_dir "$tmp/init" >/dev/null
make_hot() { # MODEL_IN MODEL_OUT
    python3 - "$1" "$2" <<'PY'
import struct, sys
data = bytearray(open(sys.argv[1], "rb").read())
h = struct.unpack("<256i", data[:1024])
maxT, V, L, NH, C, Vp = h[2], h[3], h[4], h[5], h[6], h[7]
offset = 1024 + 4 * (Vp * C + maxT * C)            # llm.c order: wte, wpe, then ln1w (L, C)
data[offset:offset + 4 * L * C] = struct.pack(f"<{L * C}f", *([1000.0] * (L * C)))
open(sys.argv[2], "wb").write(data)
PY
}
make_hot "$tmp/init/model_00000001.bin" "$tmp/hot.bin"
./train_cpu "${base[@]}" --steps 1 --dtype float8 --init_from "$tmp/hot.bin" --fp8_stats_every 1 --output_dir "" \
    --log_file "$tmp/hot_fresh.jsonl" >"$tmp/hot_fresh.txt"
python3 - "$tmp/hot_fresh.jsonl" <<'PY'
import json, sys
records = [json.loads(l) for l in open(sys.argv[1]) if '"fp8_stats"' in l]
fmax = {"e4m3": 448.0, "e5m2": 57344.0}
# measured: scale = fmax / amax in float32, so amax * scale is fmax within a few float32 ulps
ok = all(abs(r["amax"] * r["scale"] / fmax[r["format"]] - 1) < 1e-6 for r in records if r["amax"] > 0)
ok &= sum(r["saturated"] for r in records if "weight" not in r["tensor"]) == 0 and len(records) > 0
sys.exit(0 if ok else 1)
PY
result $? "delayed recipe, a fresh run's step 1: every activation and gradient cast measured, nothing saturated"
for recipe in delayed current; do
    ./train_cpu "${base[@]}" --steps 1 --dtype float8 --fp8_recipe $recipe --ckpt_every 1 \
        --output_dir "$tmp/warm_$recipe" >/dev/null
    make_hot "$tmp/warm_$recipe/model_00000001.bin" "$tmp/warm_$recipe/model_00000001.bin"
    python3 test/checkpoint_manifest.py "$tmp/warm_$recipe" 1 # the swap made on purpose: its manifest follows
    ./train_cpu "${base[@]}" --steps 2 --dtype float8 --fp8_recipe $recipe --resume 1 --fp8_stats_every 1 \
        --output_dir "$tmp/warm_$recipe" --log_file "$tmp/hot_$recipe.jsonl" >"$tmp/hot_$recipe.txt"
done
grep -qE '^fp8       2 \| [0-9]+ values saturated in .*layer [0-9]+ qkv input' "$tmp/hot_delayed.txt"
result $? "delayed recipe, the hot model at step 2: the summary line names the saturated qkv input"
python3 - "$tmp/hot_delayed.jsonl" "$tmp/hot_current.jsonl" <<'PY'
import json, sys
def records(path):
    return [json.loads(l) for l in open(path) if '"fp8_stats"' in l]
delayed, current = records(sys.argv[1]), records(sys.argv[2])
second = {r["tensor"]: r for r in delayed if r["step"] == 2}
qkv = second["layer 0 qkv input"]
B, T, C = 4, 32, 64
ok = qkv["saturated"] > 0 and qkv["scale"] != 1.0 and qkv["amax"] * qkv["scale"] > 448
ok &= all(r["saturated"] == 0 for r in current if "input" in r["tensor"])
sizes = {"qkv input": B * T * C, "fc grad_output": B * T * 4 * C, "fcproj input": B * T * 4 * C,
         "qkv weight": 3 * C * C, "fcproj weight": 4 * C * C}
for name, n in sizes.items():
    ok &= all(r["elements"] == n for r in delayed if r["tensor"].endswith(name))
sys.exit(0 if ok else 1)
PY
result $? "the records: saturation under delayed scaling only, element counts of each cast"

# the gradient-norm guard, and resume with it
# (a constant learning rate: the first half of the resumed run is a 12-step run, and a decaying schedule would
# differ between 12 and 24 steps)
guard=(--dtype float8 --skip_norm_z 0.3 --guard_window 8 --lr_schedule constant --steps 24 --log_file)
./train_cpu "${base[@]}" "${guard[@]}" "$tmp/g1.jsonl" --output_dir "$tmp/g1" >"$tmp/g1.txt"
grep -q 'skipped (gradient norm spike)' "$tmp/g1.txt"; result $? "the norm guard skips steps"
mapfile -d '' args < <(merge_flags "${base[@]}" "${guard[@]}" "$tmp/g2.jsonl" -- --output_dir "$tmp/g2" --ckpt_every 12 \
    --steps 12)
./train_cpu "${args[@]}" >/dev/null
./train_cpu "${base[@]}" "${guard[@]}" "$tmp/g2.jsonl" --output_dir "$tmp/g2" --resume 1 >/dev/null
cmp -s "$tmp/g1/model_00000024.bin" "$tmp/g2/model_00000024.bin"; result $? "with the guard on, resume is bit-exact"

grep -q '^energy | not measured' "$tmp/g1.txt"; result $? "energy: not measured on the CPU"

# --eval_only: the same model's validation loss through both paths; each must equal what a training run
# of that dtype reports for the unchanged model (one step at learning rate 0 leaves every weight as it is)
model="$tmp/g1/model_00000024.bin"
mapfile -d '' args < <(merge_flags "${base[@]}" -- --init_from "$model" --eval_only 1 --val_batches 3 --output_dir "" \
    --log_file "$tmp/eval.jsonl")
./train_cpu "${args[@]}" >"$tmp/eval.txt"
for run in bfloat16:delayed float8:current; do
    mapfile -d '' args < <(merge_flags "${base[@]}" -- --init_from "$model" --dtype "${run%%:*}" \
        --fp8_recipe "${run#*:}" --lr 0 --steps 1 --val_batches 3 --output_dir "" --log_file "$tmp/lr0_${run%%:*}.jsonl")
    ./train_cpu "${args[@]}" >/dev/null
done
python3 - "$tmp/eval.jsonl" "$tmp/lr0_bfloat16.jsonl" "$tmp/lr0_float8.jsonl" <<'PY'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if '"eval_only"' in l][0]
val = lambda p: [json.loads(l) for l in open(p) if '"type":"val"' in l][-1]["val_loss"]
sys.exit(0 if ev["bf16_val_loss"] == val(sys.argv[2]) and ev["fp8_val_loss"] == val(sys.argv[3]) else 1)
PY
result $? "--eval_only reports the bfloat16 and float8 validation losses of the model exactly"
finish

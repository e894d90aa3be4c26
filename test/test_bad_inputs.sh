#!/usr/bin/env bash
# test_bad_inputs.sh: every bad input in test/bad_inputs.tsv ends the trainer cleanly with one clear line.
#
# Each case appends its arguments to a baseline run that works (checked first: a d2 model, byte vocab,
# B=4, T=32, 1 step, float32) and runs BOTH ./train_cpu and test/build/train_cpu_asan (AddressSanitizer +
# UndefinedBehaviorSanitizer). For each binary: exit status exactly 1 (not 0, not a signal, not a
# sanitizer's own exit code, which is set apart below), stderr exactly one line that starts with 'error: '
# and contains every expected substring (the first names the file or flag at fault), nothing from a
# sanitizer, and for cases marked 'early' no training step printed before the error. The bad files (shards,
# model files, checkpoint directories) are built here in a temporary directory. Rows marked 'emu' run
# ./train_emu (the CUDA trainer on the emulation, --dtype bfloat16) too: the checks both trainers share.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
test_init
TABLE=$root/test/bad_inputs.tsv
test_tmpdir DIR test_bad_inputs
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
# A sanitizer report must not pass for the trainer's own exit status 1.
export ASAN_OPTIONS=${ASAN_OPTIONS:-exitcode=86:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-exitcode=87:print_stacktrace=1:halt_on_error=1}

[ -x ./train_cpu ] || make train_cpu >/dev/null
[ -x test/build/train_cpu_asan ] || make test/build/train_cpu_asan >/dev/null
[ -x ./train_emu ] || make train_emu >/dev/null
BINARIES=(./train_cpu test/build/train_cpu_asan)

# ---------------------------------------------------------------------------------------------------
# good data
test_data_dir "$DIR/data" text
TRAIN=$DIR/data/text_train_000000.bin
VAL=$DIR/data/text_val_000000.bin
BASE=(--model_size d2 --vocab 256 --seq_len 32 --batch_size 4 --steps 1 --val_every 0 --val_batches 1
      --dtype float32 --train_data "$TRAIN" --val_data "$VAL")

# the baseline works with both binaries; a valid checkpoint of it at step 2
# (LeakSanitizer off for this successful run only: main() returns without freeing its buffers, which the
# process exit reclaims; error paths exit from inside main's frame, where everything is still reachable.)
for bin in "${BINARIES[@]}"; do
    if ASAN_OPTIONS=$ASAN_OPTIONS:detect_leaks=0 "$bin" "${BASE[@]}" --output_dir "$DIR/baseline_$(basename "$bin")" \
        >"$DIR/baseline.out" 2>&1; then ok; else
        bad "baseline run of $bin failed: $(tail -n 3 "$DIR/baseline.out")"
    fi
done
mapfile -d '' args < <(merge_flags "${BASE[@]}" -- --steps 2 --output_dir "$DIR/ckpt")
./train_cpu "${args[@]}" >/dev/null
mapfile -d '' args < <(merge_flags "${BASE[@]}" -- --arch llama --output_dir "$DIR/llama")
./train_cpu "${args[@]}" >/dev/null # a Llama model file (llm.c's Llama 3 format) to corrupt
cp "$TRAIN" "$DIR/mid.bin" # a shard changed in its middle after this checkpoint (below)
mapfile -d '' args < <(merge_flags "${BASE[@]}" -- --train_data "$DIR/mid.bin" --output_dir "$DIR/ckpt_mid")
./train_cpu "${args[@]}" >/dev/null

# ---------------------------------------------------------------------------------------------------
# bad files
"$PY" - "$DIR" "$TRAIN" <<'EOF'
import os, shutil, struct, sys
d, train = sys.argv[1], sys.argv[2]
toks = open(train, "rb").read()[1024:1024 + 2 * 5000]  # 5000 good byte tokens

def shard(name, ntokens, data, magic=20240520, version=1):
    with open(os.path.join(d, name), "wb") as f:
        f.write(struct.pack("<3i", magic, version, ntokens) + bytes(1024 - 12) + data)

shard("bad_magic.bin", 5000, toks, magic=20240521)
shard("bad_version.bin", 5000, toks, version=2)
open(os.path.join(d, "truncated_header.bin"), "wb").write(struct.pack("<3i", 20240520, 1, 5000) + bytes(88))
shard("truncated_tokens.bin", 5000, toks[:-3])
shard("claims_more.bin", 6000, toks)
shard("negative_count.bin", -5, toks)
shard("small.bin", 100, toks[:200])  # fewer than B*T+1 = 129 tokens
t300 = bytearray(toks)
t300[10:12] = struct.pack("<H", 300)  # token offset 5, inside the first batch
shard("token_300.bin", 5000, bytes(t300))
shard("glob_0.bin", 5000, toks)
shard("glob_1.bin", 5000, toks, magic=7)
v300 = bytearray(toks)
v300[8000:8002] = struct.pack("<H", 300)  # token offset 4000: past the one batch --val_batches 1 reads
shard("val_token_300.bin", 5000, bytes(v300))
mid = bytearray(open(os.path.join(d, "mid.bin"), "rb").read())
mid[len(mid) // 2 & ~1] ^= 1  # a token's low bit: still a byte token, in neither end's 4 KiB
open(os.path.join(d, "mid.bin"), "wb").write(mid)
for name in ("log_train.bin", "log_val.bin"):
    shutil.copy(train, os.path.join(d, name))
shutil.copy(os.path.join(os.path.dirname(train), "text_tokenizer.bin"), os.path.join(d, "log_tokenizer.bin"))
os.symlink(os.path.join(d, "nowhere", "out"), os.path.join(d, "dangling"))

model = open(os.path.join(d, "ckpt", "model_00000002.bin"), "rb").read()
def model_file(name, data):
    open(os.path.join(d, name), "wb").write(data)
model_file("model_bad_magic.bin", struct.pack("<i", 20240327) + model[4:])
model_file("model_truncated.bin", model[:-100])
model_file("model_short.bin", model[:500])
model_file("model_bad_version.bin", model[:4] + struct.pack("<i", 4) + model[8:])
model_file("model_bad_shape.bin", model[:20] + struct.pack("<i", 0) + model[24:])  # heads = 0
model_file("model_plain.bin", model)
model_file("log_model.bin", model)
model_file("model_zero.bin", model[:1024] + bytes(len(model) - 1024))
model_file("model_ones.bin", model[:1024] + struct.pack("<f", 1.0) * ((len(model) - 1024) // 4))

# A hand-edited checkpoint's manifest made to match its files (test/checkpoint_manifest.py: the digests as
# docs/formats.md describes them)
sys.path.insert(0, "test")
from checkpoint_manifest import remanifest as remanifest_step
def remanifest(p):
    remanifest_step(p, 2)
# A checkpoint with one edit, its manifest made to match (the checks behind the digests: a checkpoint written
# so, by a build with a bug or by hand), or left as it was (damaged=True: what the digests must catch).
def ckpt(name, edit, damaged=False):
    dst = os.path.join(d, name)
    shutil.copytree(os.path.join(d, "ckpt"), dst)
    edit(dst)
    if not damaged:
        remanifest(dst)
state = "state_00000002_00000.bin"
def truncate_state(p):
    s = open(os.path.join(p, state), "rb").read()
    open(os.path.join(p, state), "wb").write(s[:-7])
def foreign_state(p):
    s = open(os.path.join(p, state), "rb").read()
    open(os.path.join(p, state), "wb").write(struct.pack("<q", 20240520) + s[8:])
def short_state(p):
    open(os.path.join(p, state), "wb").write(b"\0" * 100)
ckpt("ckpt_state_truncated", truncate_state)
ckpt("ckpt_state_foreign", foreign_state)
ckpt("ckpt_state_short", short_state)
ckpt("ckpt_no_state", lambda p: os.remove(os.path.join(p, state)))
ckpt("ckpt_model_truncated", lambda p: open(os.path.join(p, "model_00000002.bin"), "r+b").truncate(len(model) - 4))
ckpt("ckpt_bad_latest", lambda p: open(os.path.join(p, "latest_checkpoint"), "w").write("two\n"))
def header_field(index, value):  # one int64 of the state file header (train_state.h's SH_* order)
    def edit(p):
        with open(os.path.join(p, state), "r+b") as f:
            f.seek(8 * index)
            f.write(struct.pack("<q", value))
    return edit
def moment_value(which, index, value):  # which 0: first moment, 1: second
    def edit(p):
        path = os.path.join(p, state)
        moments = struct.unpack("<q", open(path, "rb").read()[80:88])[0]  # SH_MOMENTS
        with open(path, "r+b") as f:
            f.seek(512 + 4 * (which * moments + index))
            f.write(struct.pack("<f", value))
    return edit
def state_directory(p):
    os.remove(os.path.join(p, state))
    os.mkdir(os.path.join(p, state))
ckpt("ckpt_guard_count", header_field(25, -5))
ckpt("ckpt_updates", header_field(5, -1))
ckpt("ckpt_nan_moment", moment_value(0, 3, float("nan")))
ckpt("ckpt_negative_v", moment_value(1, 0, -1.0))
ckpt("ckpt_position", header_field(9, 1000000))
ckpt("ckpt_version1", header_field(1, 1))
ckpt("ckpt_state_dir", state_directory)
ckpt("ckpt_version2", header_field(1, 2))
ckpt("ckpt_fresh", lambda p: None)
ckpt("ckpt_pointerless", lambda p: os.remove(os.path.join(p, "latest_checkpoint")))
def model_value(p):  # a finite value in the model's weights: a disk's or a copy's damage
    with open(os.path.join(p, "model_00000002.bin"), "r+b") as f:
        f.seek(4096)
        f.write(struct.pack("<f", 0.5))
ckpt("ckpt_damaged_model", model_value, damaged=True)
ckpt("ckpt_damaged_state", moment_value(0, 3, 0.5), damaged=True)
ckpt("ckpt_no_manifest", lambda p: os.remove(os.path.join(p, "manifest_00000002.txt")), damaged=True)
def cut_manifest(p):  # its first line whole, rank 0's state line cut short
    path = os.path.join(p, "manifest_00000002.txt")
    open(path, "w").write(open(path).read().split("\n")[0] + "\nstate 0 12")
ckpt("ckpt_manifest_cut", cut_manifest, damaged=True)
ckpt("ckpt_zero_model", lambda p: open(os.path.join(p, "model_00000002.bin"), "wb").write(
    model[:1024] + bytes(len(model) - 1024)))
h = list(struct.unpack("<256i", model[:1024]))
maxT, V, L, NH, C, Vp = h[2], h[3], h[4], h[5], h[6], h[7]
huge = h[:]
huge[4] = huge[6] = 1 << 30  # L = C = 2^30: sizes computed from them would overflow
model_file("model_huge.bin", struct.pack("<256i", *huge) + model[1024:])
qkvw = 1024 + 4 * (Vp * C + maxT * C + 2 * L * C)  # first value of layer 0's qkv weight
model_file("model_nan.bin", model[:qkvw] + struct.pack("<f", float("nan")) + model[qkvw + 4:])
model_file("model_inf.bin", model[:1024] + struct.pack("<f", float("inf")) + model[1028:])
llama = open(os.path.join(d, "llama", "model_00000001.bin"), "rb").read()
def llama_edit(name, offset, fmt, value):  # one value of the Llama header (ints 0-255, floats 256-511)
    model_file(name, llama[:4 * offset] + struct.pack(fmt, value) + llama[4 * offset + 4:])
model_file("llama_truncated.bin", llama[:-100])
model_file("llama_short_header.bin", llama[:1500])
llama_edit("llama_bad_scaled_rope.bin", 9, "<i", 2)  # use_scaled_rope is a flag: 0 or 1
llama_edit("llama_bad_kv_heads.bin", 6, "<i", 3)  # NH = 2
llama_edit("llama_bad_eps.bin", 256 + 1, "<f", 1e-6)
# llm.c's own files (test/llmc_llama: L=2, C=32, V=128, QKV=64): master's cut by one bf16 value, which leaves
# no SwiGLU width; the llama3 branch's with a header slot past its version set, with a bias that is not
# zero (qkvb of layer 1, element 3), and its header over master's tensors (fp8gpt's layout before llm.c's)
master = open("test/llmc_llama/master_bf16.bin", "rb").read()
branch = open("test/llmc_llama/llama3_branch_fp32.bin", "rb").read()
branch16 = open("test/llmc_llama/llama3_branch_bf16.bin", "rb").read()
model_file("llama_master_cut.bin", master[:-2])
model_file("llama_unknown_layout.bin", branch[:48] + struct.pack("<i", 5) + branch[52:])
qkvb = 2048 + 4 * (2 * 128 * 32 + 2 * 2 * 32 + 2 * 64 * 32 + 64 + 3)
model_file("llama_nonzero_bias.bin", branch[:qkvb] + struct.pack("<f", 0.5) + branch[qkvb + 4:])
model_file("llama_old_layout.bin", branch16[:2048] + master[1024:])
# --eval_data: llm.c's eval file of test/llmc_hellaswag (V=128 tokens), edited: its example 0 starts at byte 1024
# (delimiter, bytes, index, label, completions, context length, context tokens)
ev = open("test/llmc_hellaswag/hellaswag_val.bin", "rb").read()
def eval_file(name, edit):
    e = bytearray(ev)
    edit(e)
    open(os.path.join(d, name), "wb").write(e)
eval_file("eval_good.bin", lambda e: None)
eval_file("eval_bad_magic.bin", lambda e: struct.pack_into("<i", e, 0, 20240520))
eval_file("eval_bad_version.bin", lambda e: struct.pack_into("<i", e, 4, 3))
eval_file("eval_byte_count.bin", lambda e: struct.pack_into("<H", e, 1026, struct.unpack_from("<H", e, 1026)[0] + 2))
eval_file("eval_label.bin", lambda e: struct.pack_into("<H", e, 1030, 9))
eval_file("eval_token.bin", lambda e: struct.pack_into("<H", e, 1036, 300))
eval_file("eval_truncated.bin", lambda e: e.__delitem__(slice(len(e) - 2, None)))
eval_file("eval_no_examples.bin", lambda e: e.__delitem__(slice(1024, None)))
os.mkfifo(os.path.join(d, "fifo.bin"))
os.mkdir(os.path.join(d, "empty_dir"))
open(os.path.join(d, "a_file"), "w").write("not a directory\n")
EOF

# ---------------------------------------------------------------------------------------------------
# the table
cases=0
emu_cases=0
while IFS=$'\t' read -r name args expected when emu; do
    [[ -z "$name" || "$name" == \#* ]] && continue
    cases=$((cases + 1))
    subst() { local s=${1//@DIR@/$DIR}; s=${s//@TRAIN@/$TRAIN}; s=${s//@VAL@/$VAL}; echo "${s//@CKPT@/$DIR/ckpt}"; }
    read -r -a extra <<<"$(subst "$args")"
    IFS='|' read -r -a needles <<<"$(subst "$expected")"
    binaries=("${BINARIES[@]}")
    if [ "$emu" = emu ]; then
        binaries+=(./train_emu)
        emu_cases=$((emu_cases + 1))
    fi
    for bin in "${binaries[@]}"; do
        tag="$name [$(basename "$bin")]"
        rc=0
        dtype=()
        [ "$bin" = ./train_emu ] && dtype=(--dtype bfloat16) # float32 is train_cpu's only
        mapfile -d '' args < <(merge_flags "${BASE[@]}" --output_dir "$DIR/out_${name}_$(basename "$bin")" -- "${dtype[@]}" "${extra[@]}")
        "$bin" "${args[@]}" >"$DIR/case.out" 2>"$DIR/case.err" || rc=$?
        err=$(cat "$DIR/case.err")
        lines=$(wc -l <"$DIR/case.err")
        problems=()
        [ "$rc" -eq 1 ] || problems+=("exit status $rc")
        [ "$lines" -eq 1 ] || problems+=("stderr has $lines lines")
        [[ "$err" == "error: "* ]] || problems+=("stderr does not start with 'error: '")
        for needle in "${needles[@]}"; do
            [[ "$err" == *"$needle"* ]] || problems+=("no '$needle' in the error")
        done
        if grep -qE "Sanitizer|runtime error:" "$DIR/case.err"; then problems+=("sanitizer report"); fi
        if [ "$when" = early ] && grep -q "^step " "$DIR/case.out"; then
            problems+=("the error came only after training ($(grep -c "^step " "$DIR/case.out") step(s) ran)")
        fi
        if [ ${#problems[@]} -eq 0 ]; then ok; else
            bad "$tag: $(IFS=';'; echo "${problems[*]}") | stderr: $(head -c 400 "$DIR/case.err")"
        fi
    done
done <"$TABLE"
echo "$cases cases from $(basename "$TABLE"), each with ${#BINARIES[@]} binaries, $emu_cases of them also with ./train_emu"
[ "$cases" -ge 16 ] && ok || bad "only $cases cases in $TABLE"

finish

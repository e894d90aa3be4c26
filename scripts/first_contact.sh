#!/usr/bin/env bash
# first_contact.sh: the first minute on a new GPU machine (scripts/gpu_check.sh's first stage), so that one
# run finds every first-contact failure at once: each check runs in a process of its own, against the CPU
# reference, and the script goes on past failures; it ends with a table of PASS / FAIL / SKIP (with the
# reason) and exits 1 if any check failed.
#   1. every GEMM form the trainer issues, cuDNN's fused-attention plans at the test shapes, an NCCL
#      communicator of one rank: FIRST_CONTACT (test/first_contact.cu), one process a check;
#   2. a two-step run of the trainer in bfloat16 and in each float8 recipe (delayed, current, delayed without
#      fast accumulation, blockwise, mxfp8) against train_cpu's --debug_state, by compare_debug_state's argued
#      bounds (test_gpu.sh's first comparison, at two steps); a recipe the device or the loaded libraries
#      cannot run is refused by the trainer in one line at start, which is the row's SKIP reason.
# Usage: scripts/first_contact.sh        (environment: TRAIN, TRAIN_CPU, FIRST_CONTACT, COMPARE, DATA, OUT,
#        FIRST_CONTACT_TIMEOUT_S: each check's limit, default 60)
# make test runs it on the emulation (test/test_first_contact.sh: TRAIN=./train_emu).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
train=${TRAIN:-./train}
train_cpu=${TRAIN_CPU:-./train_cpu}
first_contact=${FIRST_CONTACT:-./build/first_contact}
compare=${COMPARE:-./test/build/compare_debug_state}
out="${OUT:-out/first_contact}"
limit=${FIRST_CONTACT_TIMEOUT_S:-60}
mkdir -p "$out"
table="$out/first_contact.md"
printf '| check | result | detail |\n|---|---|---|\n' | tee "$table"
row() { # check result detail
    printf '| %s | %s | %s |\n' "$1" "$2" "${3//|/\\|}" | tee -a "$table"
}

# 1. the library calls, each in its own process: a fail() or a poisoned CUDA context ends that check alone
if names=$("$first_contact" --list 2>"$out/list.err"); then
    for name in $names; do
        status=0
        timeout "$limit" "$first_contact" "$name" >"$out/$name.txt" 2>&1 || status=$?
        verdict=$(grep -E '^(PASS|FAIL|SKIP) ' "$out/$name.txt" | tail -n 1)
        if [ -n "$verdict" ] && { [ $status = 0 ] || [ "${verdict%% *}" = FAIL ]; }; then
            row "$name" "${verdict%% *}" "${verdict#* }"
        else
            why=$(grep -v '^cuda-emu: ' "$out/$name.txt" | tail -n 1)
            [ $status = 124 ] && why="no answer in $limit s"
            row "$name" FAIL "exit $status: ${why:-no output}"
        fi
    done
else
    row first_contact FAIL "$first_contact --list: $(tail -n 1 "$out/list.err")"
fi

# 2. two steps of the trainer per dtype and recipe against the CPU reference (test_gpu.sh's model and data)
data_file="${DATA:-../shared/data/tinyshakespeare.txt}"
[ -f "$data_file" ] || data_file=data/tinyshakespeare.txt
python3 scripts/prepare_data.py --input "$data_file" --output_dir "$out/data" --name text --tokenizer byte >/dev/null
model=(--model_size d2 --channels 128 --heads 4 --vocab 256 --seq_len 64 --batch_size 8 --steps 2 --lr 1e-3
       --warmup_steps 2 --train_data "$out/data/text_train_*.bin" --val_data "" --output_dir ""
       --attention exact)
if ! timeout "$limit" "$train_cpu" "${model[@]}" --dtype float32 --debug_state "$out/cpu_float32.bin" \
    >"$out/cpu_float32.txt" 2>&1; then
    row "two steps" FAIL "train_cpu --dtype float32: $(tail -n 1 "$out/cpu_float32.txt")"
else
    # bfloat16's fused GELU may be another form than the reference's tanh: one more rounding site where it is
    # not known to be the reference's (test_gpu.sh's gelu_sites, argued there)
    gelu_sites=1
    if [ "$train" != ./train_emu ] || [ -n "${CUDA_EMU_GELU:-}" ]; then gelu_sites=2; fi
    for run in bfloat16 float8:delayed float8:current float8:delayed:0 float8:blockwise float8:mxfp8; do
        IFS=: read -r dtype recipe fast <<<"$run"
        name="two_steps_$dtype${recipe:+_$recipe}${fast:+_fast_accum_$fast}"
        flags=(--dtype "$dtype")
        [ -n "$recipe" ] && flags+=(--fp8_recipe "$recipe")
        [ -n "$fast" ] && flags+=(--fp8_fast_accum "$fast")
        status=0
        timeout "$limit" "$train" "${model[@]}" "${flags[@]}" --debug_state "$out/gpu_$name.bin" \
            >"$out/$name.txt" 2>"$out/$name.err" || status=$?
        # the reference sums FP8 as the device does: the model its versions line names (test_gpu.sh's
        # cpu_accumulation: Hopper's 13-bit MMA accumulator, or FP32 on Blackwell)
        cpu_flags=()
        sums=$(sed -n 's/^versions | .* | FP8 accumulation \([a-z0-9]*\)$/\1/p' "$out/$name.txt")
        [ "$dtype" = float8 ] && [ -n "$sums" ] && cpu_flags=(--fp8_accumulation "$sums")
        errors=$(grep -v '^cuda-emu: ' "$out/$name.err")
        if [ $status = 1 ] && [ "$(wc -l <<<"$errors")" = 1 ] && ! grep -q '^step' "$out/$name.txt" &&
            [[ "$errors" == "error: --fp8_recipe $recipe: "* ]]; then
            row "$name" SKIP "${errors#error: }" # refused at start: this device or these libraries lack it
            continue
        fi
        if [ $status != 0 ]; then
            row "$name" FAIL "exit $status: $(tail -n 1 <<<"${errors:-$(tail -n 1 "$out/$name.txt")}")"
            continue
        fi
        if ! timeout "$limit" "$train_cpu" "${model[@]}" "${flags[@]}" "${cpu_flags[@]}" \
            --debug_state "$out/cpu_$name.bin" >"$out/cpu_$name.txt" 2>&1; then
            row "$name" FAIL "train_cpu: $(tail -n 1 "$out/cpu_$name.txt")"
            continue
        fi
        sites=1
        [ "$dtype" = bfloat16 ] && sites=$gelu_sites
        if "$compare" --rounding_sites $sites "$out/gpu_$name.bin" "$out/cpu_$name.bin" "$out/cpu_float32.bin" >"$out/cmp_$name.txt" 2>&1; then
            row "$name" PASS "$(tail -n 1 "$out/cmp_$name.txt") (rounding sites $sites)"
        else
            row "$name" FAIL "$(grep -m 3 FAIL "$out/cmp_$name.txt" | tr '\n' ';')"
        fi
    done
fi

passed=$(grep -c '| PASS |' "$table")
failed=$(grep -c '| FAIL |' "$table")
skipped=$(grep -c '| SKIP |' "$table")
echo "first contact: $passed passed, $failed failed, $skipped skipped (table: $table)"
[ "$failed" = 0 ]

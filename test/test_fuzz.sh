#!/usr/bin/env bash
# test_fuzz.sh: every reader under coverage-guided fuzzing (make test_fuzz; make fuzz for long runs).
#   1. a seed corpus from the trainer itself: small token shards (GPT-2's uint16 and Llama 3's uint32 format)
#      and the byte tokenizer (prepare_data.py),
#      a model file and a state file of a 2-step float8 run of the shape test/fuzz/fuzz_state.c expects,
#      and command lines (the bad-input table's and working ones);
#   2. each harness runs FUZZ_SECONDS under libFuzzer with AddressSanitizer and UBSan: a crash, a hang
#      (10 s on one input) or a memory blow-up fails the test and leaves the input in the corpus directory;
#   3. every input of the corpus (the seeds and what the fuzzer kept) is replayed one process each through
#      the harness built without libFuzzer, as a trainer meets it: exit 0 (read) or 1 (refused with its
#      error line) only, nothing from AddressSanitizer, UBSan or LeakSanitizer, within 10 s.
# FUZZ_CORPUS: where the corpus lives (kept and grown across runs); empty: a temporary directory.
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
test_init
test_tmpdir tmp test_fuzz
seconds=${FUZZ_SECONDS:-8}
corpus_root=$(realpath -m "${FUZZ_CORPUS:-$tmp/corpus}") # the fuzzers run in $tmp
export ASAN_OPTIONS=exitcode=86:detect_leaks=1 UBSAN_OPTIONS=exitcode=87:print_stacktrace=1:halt_on_error=1
export OMP_NUM_THREADS=1

# ---------------------------------------------------------------------------------------------------------
# seeds
seeds=$tmp/seeds
for target in shard model state tokenizer cli eval; do mkdir -p "$seeds/$target" "$corpus_root/$target"; done
test_data_dir "$tmp/data" text >/dev/null
"$PY" - "$tmp/data/text_train_000000.bin" "$seeds/shard" <<'EOF'
import struct, sys
tokens = open(sys.argv[1], "rb").read()[1024:1024 + 2 * 200]
wide = b"".join(tokens[i:i + 2] + bytes(2) for i in range(0, len(tokens), 2))  # the same ids as uint32
for n, name in ((200, "small.bin"), (40, "tiny.bin")):
    open(f"{sys.argv[2]}/{name}", "wb").write(struct.pack("<3i", 20240520, 1, n) + bytes(1012) + tokens[:2 * n])
open(f"{sys.argv[2]}/small_llama3.bin", "wb").write(struct.pack("<3i", 20240801, 7, 200) + bytes(1012) + wide)
EOF
cp "$tmp/data/text_tokenizer.bin" "$seeds/tokenizer/byte.bin"
cp test/llmc_hellaswag/hellaswag_val.bin "$seeds/eval/"
./train_cpu --model_size d2 --layers 1 --channels 16 --heads 2 --max_seq_len 16 --vocab 256 --seq_len 16 \
    --batch_size 2 --steps 2 --dtype float8 --val_data "" --train_data "$tmp/data/text_train_000000.bin" \
    --output_dir "$tmp/run" >/dev/null
cp "$tmp/run/model_00000002.bin" "$seeds/model/"
cp "$tmp/run/state_00000002_00000.bin" "$seeds/state/"
n=0
while IFS=$'\t' read -r name args _; do # the bad-input table's command lines, and working ones
    [[ -z "$name" || "$name" == \#* ]] && continue
    n=$((n + 1))
    read -r -a words <<<"--model_size d2 --vocab 256 --seq_len 32 $args"
    printf '%s\0' "${words[@]}" | head -c -1 >"$seeds/cli/$n"
done <test/bad_inputs.tsv
printf '%s\0' --model_size 70B --dtype float8 --zero_stage 3 --dry_run 1 --world_size 32 --batch_size 1 \
    --seq_len 2048 --recompute 1 | head -c -1 >"$seeds/cli/dry_run_70B"
printf '%s\0' --model_size 124M --total_batch_size 524288 --batch_size 16 --seq_len 1024 | head -c -1 >"$seeds/cli/124M"
ok "seeds: $(find "$seeds" -type f | wc -l) files"

# ---------------------------------------------------------------------------------------------------------
# fuzzing, then the replay of the corpus
for target in shard model state tokenizer cli eval; do
    corpus=$corpus_root/$target
    status=0
    (cd "$tmp" && "$root/test/build/fuzz/fuzz_$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 "$corpus" "$seeds/$target") >"$tmp/fuzz_$target.log" 2>&1 ||
        status=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$tmp/fuzz_$target.log")
    if [ $status = 0 ]; then
        ok "fuzz_$target: ${runs:-?} inputs in ${seconds} s, no crash, hang or blow-up; corpus $(ls "$corpus" | wc -l) inputs"
    else
        bad "fuzz_$target: exit $status: $(grep -m2 -E 'ERROR|SUMMARY|runtime error' "$tmp/fuzz_$target.log" | tr '\n' ' ')"
        cp "$tmp"/crash-* "$tmp"/timeout-* "$tmp"/oom-* "$corpus/" 2>/dev/null
    fi
    bad_replays=0 replays=0
    for input in "$corpus"/* "$seeds/$target"/*; do
        [ -f "$input" ] || continue
        replays=$((replays + 1))
        rc=0
        timeout 10 "./test/build/fuzz/replay_$target" "$input" >/dev/null 2>"$tmp/replay.err" || rc=$?
        if { [ $rc != 0 ] && [ $rc != 1 ]; } || grep -qE 'Sanitizer|runtime error' "$tmp/replay.err"; then
            bad_replays=$((bad_replays + 1))
            [ $bad_replays -le 3 ] && echo "     replay_$target $input: exit $rc: $(head -c 300 "$tmp/replay.err")"
        fi
    done
    result $bad_replays "replay_$target: $replays inputs read or refused cleanly under ASan, UBSan and LeakSanitizer"
done
finish

#!/usr/bin/env bash
# test_import.sh: scripts/import_hf.py (Hugging Face checkpoint -> llm.c model file and tokenizer file), checked
# against checkpoints and tokenizers their real producers wrote (test/import_checks.py builds them: transformers'
# GPT2LMHeadModel, a Llama 2 configuration (MHA) and a Llama 3.1 configuration (GQA, rope_scaling llama3,
# rope_theta 500000), random weights of a trained model's scale, saved with save_pretrained in BF16 and sharded
# with an index; a byte-level BPE, Llama 3's kind of it, and a sentencepiece BPE converted by transformers).
#   1. train_cpu's float32 logits and loss of each imported model on tokens its tokenizer gave equal transformers'
#      float32 ones (import_checks.py argues the bounds), and of a Llama with tied embeddings;
#   2. planted mapping bugs (q/k rows left in rotate_half order, Llama 3.1's rope scaling dropped, GPT-2's attention
#      projection not transposed) move the logits more than 10 x that bound;
#   3. --dtype: a BF16 checkpoint gives a version 5 file of its bits, or version 3 of the same values; F32 and F16
#      checkpoints are read exactly; Llama 3.1's config in the hub's form (rope_theta, rope_scaling) gives the file
#      of transformers' newer form (rope_parameters); GPT-2 as the hub names it (no "transformer.", lm_head.weight
#      saved equal to wte) gives the file of save_pretrained's; Llama-2-70b-hf's published config.json gives
#      LLaMA-2 70B's shape: both trainers' dry runs of that file (read as a header only) plan what --model_size 70B
#      plans;
#   4. import then export (scripts/export_hf.py) gives back every tensor of the checkpoint, bit for bit;
#   5. --tokenizer_out: the model's vocabulary, the document token (the BOS), the bytes of every token (an
#      encoding's tokens concatenate to the text), from tokenizer.json and from a tokenizer.model alike;
#   6. export_hf.py --tokenizer: transformers' AutoTokenizer loads the export and encodes as the original;
#   7. the CUDA trainer on the CPU emulation (./train_emu, bfloat16, exact attention) matches train_cpu on each
#      imported model within test/compare_debug_state's bounds;
#   8. refusals: what the trainers would not compute, and broken checkpoints, each one line "error: ..." naming
#      the key, exit status 1, nothing written; an existing output is not replaced; a write that fails midway
#      (files limited to 64 blocks) leaves nothing behind.
# Needs numpy, torch, transformers, tokenizers, sentencepiece and protobuf (make clients_deps; without them one
# SKIPPED line), train_cpu, train_emu and test/build/compare_debug_state. About 65 s of CPU time (3.5 min on 2 busy
# cores).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
test_init
test_tmpdir tmp test_import
need_python_modules test_import numpy
if ! "$PY" -c "import torch, transformers, tokenizers, sentencepiece, google.protobuf" 2>/dev/null; then
    echo "SKIPPED test_import: torch, transformers, tokenizers, sentencepiece or protobuf is not importable by $PY" \
        "(make clients_deps installs them into build/python/)"
    exit 0
fi
export TRANSFORMERS_VERBOSITY=error HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
models=(gpt2 llama2 llama31)

test_text text "$tmp/generated.txt"
cp "$text" "$tmp/text.txt"
"$PY" test/import_checks.py build "$tmp" "$tmp/text.txt" >"$tmp/build.txt" 2>&1 ||
    { cat "$tmp/build.txt"; bad "import_checks.py build: the checkpoints could not be made"; finish; exit 1; }

imported() { # what, import_hf.py args...: an import that must succeed
    local what="$1"; shift
    if "$PY" scripts/import_hf.py "$@" >"$tmp/import.txt" 2>&1; then ok "$what: $(head -n 1 "$tmp/import.txt")"
    else bad "$what"; cat "$tmp/import.txt"; fi
}
for m in "${models[@]}"; do
    imported "import $m" "$tmp/hf_$m" "$tmp/$m.bin" --tokenizer_out "$tmp/${m}_tokenizer.bin"
done
imported "Llama 3.1's config in the hub's form" "$tmp/hf_llama31_hub" "$tmp/llama31_hub.bin"
rc=0; cmp -s "$tmp/llama31_hub.bin" "$tmp/llama31.bin" || rc=$?
result $rc "(3) Llama 3.1: the hub's config form (rope_theta, rope_scaling) gives the file of the newer form"
imported "--dtype float32" "$tmp/hf_llama2" "$tmp/llama2_as_fp32.bin" --dtype float32
imported "an F32 checkpoint" "$tmp/hf_llama2_f32" "$tmp/llama2_f32.bin"
imported "an F32 checkpoint, --dtype bfloat16" "$tmp/hf_llama2_f32" "$tmp/llama2_f32_as_bf16.bin" --dtype bfloat16
imported "an F16 checkpoint" "$tmp/hf_llama2_f16" "$tmp/llama2_f16.bin"
imported "a Llama with tied embeddings" "$tmp/hf_llama2_tied" "$tmp/llama2_tied.bin"
imported "GPT-2 named as on the hub, its tied head saved too" "$tmp/hf_gpt2_hub" "$tmp/gpt2_hub.bin"
rc=0; cmp -s "$tmp/gpt2_hub.bin" "$tmp/gpt2.bin" || rc=$?
result $rc "(3) GPT-2: the hub's names (no transformer.) and a saved tied head give the same file"
# Llama 2's tokenizer.model alone (sentencepiece) gives the tokenizer file its tokenizer.json gives
mkdir "$tmp/sp_only"
cp "$tmp/hf_llama2"/{config.json,tokenizer.model,tokenizer_config.json,*.safetensors*} "$tmp/sp_only/"
imported "Llama 2 with its tokenizer.model only" "$tmp/sp_only" "$tmp/sp_only.bin" \
    --tokenizer_out "$tmp/sp_only_tokenizer.bin"
rc=0; cmp -s "$tmp/sp_only_tokenizer.bin" "$tmp/llama2_tokenizer.bin" || rc=$?
result $rc "(5) Llama 2: tokenizer.model (sentencepiece) and tokenizer.json give the same tokenizer file"

# --- the trainers on the imported models -----------------------------------------------------------------------
"$PY" test/import_checks.py controls "$tmp"
run() { # what, trainer, flags...: a run that must succeed
    local what="$1"; shift
    "$@" >"$tmp/run.txt" 2>&1 || { cat "$tmp/run.txt"; bad "$what failed"; }
}
# the first batch of the model's tokens (B*T+1 of them), one step, the loss of the weights as imported
batch=(--val_data "" --batch_size 4 --seq_len 64 --output_dir "" --steps 1)
for m in "${models[@]}"; do
    run "train_cpu float32 on $m" ./train_cpu --init_from "$tmp/$m.bin" --dtype float32 \
        --train_data "$tmp/tokens_$m.bin" "${batch[@]}" --debug_state "$tmp/dbg_$m.bin"
done
run "train_cpu float32 on llama2_tied" ./train_cpu --init_from "$tmp/llama2_tied.bin" --dtype float32 \
    --train_data "$tmp/tokens_llama2.bin" "${batch[@]}" --debug_state "$tmp/dbg_llama2_tied.bin"
for planted in llama31_no_qk_order llama31_unscaled gpt2_no_transpose; do
    run "train_cpu float32 on $planted" ./train_cpu --init_from "$tmp/${planted}_planted.bin" --dtype float32 \
        --train_data "$tmp/tokens_${planted%%_*}.bin" "${batch[@]}" --debug_state "$tmp/dbg_${planted}_planted.bin"
done
# (7) the CUDA trainer, emulated, against train_cpu in bfloat16 (test_gpu.sh's comparison)
for m in "${models[@]}"; do
    run "train_cpu bfloat16 on $m" ./train_cpu --init_from "$tmp/$m.bin" --dtype bfloat16 \
        --train_data "$tmp/tokens_$m.bin" "${batch[@]}" --debug_state "$tmp/cpu_bf16_$m.bin"
    run "train_emu bfloat16 on $m" ./train_emu --init_from "$tmp/$m.bin" --dtype bfloat16 --attention exact \
        --train_data "$tmp/tokens_$m.bin" "${batch[@]}" --debug_state "$tmp/emu_bf16_$m.bin"
    rc=0
    ./test/build/compare_debug_state "$tmp/emu_bf16_$m.bin" "$tmp/cpu_bf16_$m.bin" "$tmp/dbg_$m.bin" \
        >"$tmp/cmp_$m.txt" 2>&1 || rc=$?
    result $rc "(7) $m: the CUDA trainer (emulated, bfloat16) matches train_cpu on the imported model"
    grep FAIL "$tmp/cmp_$m.txt" || true
done

# (3) Llama-2-70b-hf's config.json imports to LLaMA-2 70B's shape: a dry run of the file (its values left out:
# a sparse file) plans what --model_size 70B plans, reading nothing but the header under 2 GB of address space
"$PY" test/import_checks.py llama2_70b "$tmp"
plan=(--dry_run 1 --world_size 32 --zero_stage 3 --dtype float8 --batch_size 1 --seq_len 4096
      --train_data "$tmp/none_*.bin" --val_data "" --output_dir "$tmp/plan")
for trainer in ./train_cpu ./train_emu; do
    rc=0
    (ulimit -v 2000000; "$trainer" "${plan[@]}" --init_from "$tmp/llama2_70b_shape.bin" >"$tmp/plan_file.txt" 2>&1) &&
        "$trainer" "${plan[@]}" --model_size 70B >"$tmp/plan_preset.txt" 2>&1 &&
        cmp -s "$tmp/plan_file.txt" "$tmp/plan_preset.txt" && grep -q '^fits: ' "$tmp/plan_file.txt" || rc=$?
    result $rc "(3) $trainer --dry_run 1 --init_from Llama-2-70b-hf's import (its header) plans --model_size 70B's plan"
done

# --- (4) and (6): export the imported models, with their tokenizers ---------------------------------------------
exported() { # what, export_hf.py args...
    local what="$1"; shift
    if "$PY" scripts/export_hf.py "$@" >"$tmp/export.txt" 2>&1; then ok "$what"
    else bad "$what"; cat "$tmp/export.txt"; fi
}
for m in "${models[@]}"; do
    exported "export $m with its tokenizer" "$tmp/$m.bin" "$tmp/export_$m" --tokenizer "$tmp/hf_$m"
done
exported "export gpt2 with a bare tokenizer.json" "$tmp/gpt2.bin" "$tmp/export_gpt2_bare" \
    --tokenizer "$tmp/hf_gpt2/tokenizer.json"
rc=0
"$PY" scripts/export_hf.py "$tmp/llama2.bin" "$tmp/export_refused" --tokenizer "$tmp/sp_only" >"$tmp/bad.out" \
    2>"$tmp/bad.err" || rc=$?
status=0
[ "$rc" = 1 ] && [ "$(wc -l <"$tmp/bad.err")" = 1 ] && grep -q "^error: .*sp_only: no tokenizer.json" "$tmp/bad.err" &&
    [ ! -e "$tmp/export_refused" ] || status=1
result $status "(6) export --tokenizer of a directory without tokenizer.json: one line, nothing written ($(
    cat "$tmp/bad.err"))"

checks_rc=0
"$PY" test/import_checks.py check "$tmp" >"$tmp/checks.txt" 2>&1 || checks_rc=$?
while IFS=$'\t' read -r status what; do
    case "$status" in
        PASS) ok "$what" ;;
        FAIL) bad "$what" ;;
        done) ;;
        *) echo "     $status${what:+ $what}" ;;
    esac
done <"$tmp/checks.txt"
if [ "$checks_rc" != 0 ] || ! grep -q '^done' "$tmp/checks.txt"; then
    bad "import_checks.py check stopped before its end (exit $checks_rc; output above)"
fi

# --- (8) refusals: one line naming the key, exit status 1, nothing written -------------------------------------
refused() { # what, pattern, import_hf.py args...: refused, and $tmp/out (where the outputs go) left as it was;
    # file_blocks=N: run with files limited to N blocks (a disk that fills up)
    local what="$1" pattern="$2" rc=0 lines before
    shift 2
    before=$(ls -a "$tmp/out")
    ( [ -z "${file_blocks:-}" ] || ulimit -f "$file_blocks"; exec "$PY" scripts/import_hf.py "$@" ) \
        >"$tmp/bad.out" 2>"$tmp/bad.err" || rc=$?
    lines=$(wc -l <"$tmp/bad.err")
    if [ "$rc" = 1 ] && [ "$lines" = 1 ] && [ ! -s "$tmp/bad.out" ] && grep -q '^error: ' "$tmp/bad.err" &&
        grep -qF -- "$pattern" "$tmp/bad.err" && [ "$(ls -a "$tmp/out")" = "$before" ]; then
        ok "(8) $what: $(cat "$tmp/bad.err")"
    else
        bad "(8) $what: exit $rc, $lines stderr lines, wanted 1 line 'error: ...' naming '$pattern', nothing written"
        cat "$tmp/bad.out" "$tmp/bad.err"
    fi
}
mkdir "$tmp/out"
"$PY" test/import_checks.py refusals "$tmp" >"$tmp/refusals.txt"
while IFS=$'\t' read -r name directory pattern; do
    refused "$name" "$pattern" "$directory" "$tmp/out/$name.bin" --tokenizer_out "$tmp/out/${name}_tokenizer.bin"
done <"$tmp/refusals.txt"
refused "not a directory" "not a directory" "$tmp/missing_dir" "$tmp/out/x.bin"
refused "--doc_token not a token" "--doc_token '<|nope|>'" "$tmp/hf_gpt2" "$tmp/out/x.bin" \
    --tokenizer_out "$tmp/out/x_tokenizer.bin" --doc_token '<|nope|>'
cp "$tmp/gpt2.bin" "$tmp/out/existing.bin"
refused "an existing output file" "exists" "$tmp/hf_gpt2" "$tmp/out/existing.bin"
rc=0; cmp -s "$tmp/gpt2.bin" "$tmp/out/existing.bin" || rc=$?
result $rc "(8) the existing output file is left as it was"
file_blocks=64 refused "a disk that fills up while writing" "File too large; not written" "$tmp/hf_llama2" \
    "$tmp/out/full.bin"
touch "$tmp/out/existing_tokenizer.bin"
refused "an existing --tokenizer_out" "exists" "$tmp/hf_gpt2" "$tmp/out/y.bin" \
    --tokenizer_out "$tmp/out/existing_tokenizer.bin"
finish

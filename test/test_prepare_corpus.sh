#!/usr/bin/env bash
# test_prepare_corpus.sh: scripts/prepare_data.py on a corpus directory of .jsonl, .jsonl.gz, .parquet and .txt
# files with a tokenizer.json (--tokenizer hf), all made here by their real producers (test/corpus_checks.py):
#   - the shards hold exactly the tokens the tokenizers library gives each document, re-encoded one at a time,
#     each after the document token, in the documented shard sizes, and the tokenizer file each token's bytes;
#   - 1 and 2 workers write byte-identical files; the C data loader reads the shards (uint16 and uint32);
#     the reader cuts every input into its records whatever the block size, and results come in order;
#   - a run killed part way, and runs cut back to a shard ending inside each input type, resume to the files
#     of an uninterrupted run; a corrupted shard is written again, changed inputs start over, a complete run
#     is left as it is;
#   - the document token comes from --doc_token, tokenizer_config.json (a transformers checkpoint
#     directory) or <|endoftext|>; a Llama 2-style tokenizer.json (transformers'
#     conversion of a sentencepiece model) gives the files --tokenizer llama2 gives from the model itself;
#   - bad inputs end with one line naming the file (and line or row) and leave no output directory.
# Needs tokenizers, pyarrow, transformers, sentencepiece and protobuf (make clients_deps; CI installs them),
# and a C compiler for the data loader. Run from the repository root.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/common.sh" || exit 1
test_init || exit 1
for module in tokenizers pyarrow transformers sentencepiece google.protobuf; do
    if ! "$PY" -c "import $module" 2>/dev/null; then
        echo "SKIPPED test_prepare_corpus: $module is not importable by $PY; make clients_deps installs it"
        exit 0
    fi
done
SCRIPT=scripts/prepare_data.py
test_tmpdir tmp test_prepare_corpus || exit 1
check() { # check NAME COMMAND...: passes when the command succeeds; its output is left in $tmp/out
    local name=$1
    shift
    if "$@" >"$tmp/out" 2>&1; then ok "$name"; else bad "$name: $(tail -c 1500 "$tmp/out")"; fi
}
said() { # NAME PATTERN: the output of the last check has a line matching PATTERN
    if grep -q -e "$2" "$tmp/out"; then ok "$1"; else bad "$1: no line '$2' in: $(tail -c 1500 "$tmp/out")"; fi
}
checks() { PYTHONPATH="$root/test${PYTHONPATH:+:$PYTHONPATH}" "$PY" test/corpus_checks.py "$@"; }
prepare() { "$PY" $SCRIPT --output_dir "$@"; }
same_files() { # DIR_A DIR_B: the same file names with the same bytes (the .ids files are the checks' own)
    diff -r --exclude='*.ids' "$1" "$2"
}
same_shards() { # DIR_A DIR_B: the same, but for the manifests (whose settings or inputs differ)
    diff -r --exclude='*.ids' --exclude='*_manifest.json' "$1" "$2"
}

test_text text "$tmp/generated.txt" || exit 1
check "make the corpus and train a byte-level BPE tokenizer.json" checks corpus "$tmp" "$text"
corpus=$tmp/corpus
tok=$tmp/tok/tokenizer.json

# 1. the corpus directory with 1 and 2 workers: the re-encoded documents, byte for byte the same files
hf=(--input "$corpus" --tokenizer hf --tokenizer_file "$tok" --shard_tokens 9000)
check "hf tokenizer, 1 worker" prepare "$tmp/w1" "${hf[@]}" --workers 1
said "the directory's other file is skipped with a line" "4 corpus files; 1 other files skipped"
check "hf tokenizer, 2 workers" prepare "$tmp/w2" "${hf[@]}" --workers 2
check "the shards hold each document's tokens after <|endoftext|>, in --val_fraction's shard sizes" \
    checks expect "$tmp/w2" corpus "$tok" "$corpus" "<|endoftext|>" 9000 0.1 uint16
check "1 and 2 workers write the same files" same_files "$tmp/w1" "$tmp/w2"

# 2. --val_tokens and uint32 shards
check "--val_tokens 20000 (3 val shards), uint32" prepare "$tmp/w32" "${hf[@]}" --val_tokens 20000 --shard_format uint32
check "their shards" checks expect "$tmp/w32" corpus "$tok" "$corpus" "<|endoftext|>" 9000 =20000 uint32

# 3. the C data loader reads the shards: the first batch (2x8 and a target) of each split
if command -v "${CC:-gcc}" >/dev/null 2>&1; then
    cat >"$tmp/first_batch.c" <<'EOF'
#include "core/dataloader.h"
int main(int argc, char **argv) { /* GLOB V: the token ids of the first batch's inputs and last target */
    if (argc != 3) fail("usage: first_batch GLOB V");
    DataLoader l;
    dataloader_init(&l, argv[1], 2, 8, 0, 1, 0, 0, atoi(argv[2]));
    dataloader_next_batch(&l);
    for (int i = 0; i < 16; i++) printf("%d\n", l.inputs[i]);
    printf("%d\n", l.targets[15]);
    dataloader_free(&l);
    return 0;
}
EOF
    check "compile the data loader" "${CC:-gcc}" -std=c11 -D_GNU_SOURCE -O1 -I. "$tmp/first_batch.c" -o "$tmp/first_batch"
    for run in w2 w32; do
        for split in val train; do
            check "C data loader, $run $split" cmp <("$tmp/first_batch" "$tmp/$run/corpus_${split}_*.bin" 600) \
                "$tmp/$run/first_$split.ids"
        done
    done
else
    echo "skip: no C compiler (${CC:-gcc}): the C data loader's reading of the shards is not checked"
fi

# 4. resume. A reference run with small shards; runs cut back to a shard that ends inside each input,
# part way through a document (corpus_checks.py rewind), then resumed; a run killed after its fourth shard
small=(--input "$corpus" --tokenizer hf --tokenizer_file "$tok" --shard_tokens 2000 --workers 2)
check "reference run, 2000-token shards" prepare "$tmp/ref" "${small[@]}"
check "250-token shards" prepare "$tmp/tiny" "${small[@]}" --shard_tokens 250
check "the reader resumes at each of their ends" checks positions "$tmp/tiny" corpus "$corpus"
check "the reader's blocks of 1 byte and up, the pool's order" checks blocks "$corpus"
for input in 0 1 2 3; do # a.jsonl, c.parquet, d.txt, sub/b.jsonl.gz
    rm -rf "$tmp/cut" && cp -r "$tmp/ref" "$tmp/cut"
    check "cut back inside input $input" checks rewind "$tmp/cut" corpus $input
    check "resumed from input $input" prepare "$tmp/cut" "${small[@]}"
    said "it says where it resumed" "^resuming after"
    check "resumed from input $input: the reference files" same_files "$tmp/ref" "$tmp/cut"
done
rm -rf "$tmp/kill"
"$PY" $SCRIPT --output_dir "$tmp/kill" "${small[@]}" >"$tmp/kill.out" 2>&1 &
pid=$!
for _ in $(seq 1 3000); do # up to 30 s
    [ -e "$tmp/kill/corpus_train_000003.bin" ] || ! kill -0 $pid 2>/dev/null && break
    sleep 0.01
done
kill -9 $pid 2>/dev/null
wait $pid 2>/dev/null
check "killed part way (an incomplete manifest)" grep -q '"complete": false' "$tmp/kill/corpus_manifest.json"
check "the killed run resumed" prepare "$tmp/kill" "${small[@]}"
said "it resumed after complete shards" "^resuming after [1-9][0-9]* complete shards"
check "killed and resumed: the reference files" same_files "$tmp/ref" "$tmp/kill"
check "a complete run is left as it is" prepare "$tmp/kill" "${small[@]}"
said "it says so" "nothing to do"
printf '\x01' | dd of="$tmp/kill/corpus_train_000005.bin" bs=1 seek=2000 conv=notrunc status=none
check "a corrupted shard is written again" prepare "$tmp/kill" "${small[@]}"
said "it names the shard" "corpus_train_000005.bin: not the shard the manifest recorded"
check "corrupted and rewritten: the reference files" same_files "$tmp/ref" "$tmp/kill"
touch "$corpus/d.txt"
check "changed inputs start over" prepare "$tmp/kill" "${small[@]}"
said "it says why" "the inputs are not the earlier run's"
check "started over: the reference shards" same_shards "$tmp/ref" "$tmp/kill"
check "other settings start over" prepare "$tmp/kill" "${small[@]}" --shard_tokens 3000
said "it names them" "other settings (shard_tokens)"
check "and leave no shard of the earlier run" checks expect "$tmp/kill" corpus "$tok" "$corpus" "<|endoftext|>" 3000 0.1 uint16

# 5. the document token: the module's choices; a transformers checkpoint directory's bos_token. A Llama 2-style
# tokenizer.json (sentencepiece's U+2581 and byte tokens) gives the files of --tokenizer llama2.
check "document token choices" checks doc_tokens "$tok"
head -c 100000 "$text" >"$tmp/sp_text.txt"
check "transformers' checkpoint tokenizer, a sentencepiece model and transformers' tokenizer.json of it" \
    checks transformers "$tok" "$tmp/sp_text.txt" "$tmp/tf"
check "the checkpoint's tokenizer, by the directory" prepare "$tmp/ck" --input "$corpus" --tokenizer hf \
    --tokenizer_file "$tmp/tf/ckpt"
check "its bos_token begins each document" checks expect "$tmp/ck" corpus "$tmp/tf/ckpt" "$corpus" "<|begin_of_text|>" \
    100000000 0.1 uint16
check "--tokenizer llama2" prepare "$tmp/l2" --input "$tmp/sp_text.txt" --tokenizer llama2 \
    --tokenizer_file "$tmp/tf/spm/tokenizer.model"
check "--tokenizer hf" prepare "$tmp/l2hf" --input "$tmp/sp_text.txt" --tokenizer hf --tokenizer_file "$tmp/tf/hf"
check "the same tokenizer file and shards" same_shards "$tmp/l2" "$tmp/l2hf"

# 6. bad inputs: exit 1, one line "error: ..." naming the file, nothing written
expect_error() { # NAME NEEDLE ARGS...
    local name=$1 needle=$2
    shift 2
    "$PY" $SCRIPT --output_dir "$tmp/e" "$@" >"$tmp/err.out" 2>"$tmp/err.err"
    local rc=$?
    if [ $rc -eq 1 ] && [ "$(wc -l <"$tmp/err.err")" -eq 1 ] && grep -qF -e "$needle" "$tmp/err.err" &&
        grep -q "^error: " "$tmp/err.err" && [ ! -e "$tmp/e" ]; then
        ok "$name"
    else
        bad "$name: rc=$rc, stderr: $(head -c 1500 "$tmp/err.err"), output dir $(ls "$tmp/e" 2>&1)"
    fi
}
b=$tmp/bad
t=(--tokenizer hf --tokenizer_file "$tok" --workers 2)
expect_error "missing text field" "$b/no_field.jsonl: line 2 has no field 'text' (--text_field)" --input "$b/no_field.jsonl" "${t[@]}"
expect_error "bad JSON line" "$b/bad_json.jsonl: line 3 is not valid JSON" --input "$b/bad_json.jsonl" "${t[@]}"
expect_error "not a JSON object" "$b/not_object.jsonl: line 1 is not a JSON object" --input "$b/not_object.jsonl" "${t[@]}"
expect_error "unpaired surrogate" "$b/surrogate.jsonl: line 2 holds an unpaired surrogate" --input "$b/surrogate.jsonl" "${t[@]}"
expect_error "not a string" "$b/not_string.jsonl: line 1: field 'text' (--text_field) is int" --input "$b/not_string.jsonl" "${t[@]}"
expect_error "--text_field" "$corpus/a.jsonl: line 1 has no field 'body'" --input "$corpus/a.jsonl" --text_field body "${t[@]}"
expect_error "unknown extension" "$b/table.csv: unknown input type" --input "$b/table.csv" "${t[@]}"
expect_error "empty corpus" "$b/empty/nothing.jsonl: no documents in the inputs" --input "$b/empty" "${t[@]}"
expect_error "directory without corpus files" "$tmp/tok: no .txt, .jsonl, .jsonl.gz, .parquet file" --input "$tmp/tok" "${t[@]}"
expect_error "no match" "$b/*.nothing: no file matches" --input "$b/*.nothing" "${t[@]}"
expect_error "broken gzip" "$b/broken.jsonl.gz: cannot read as gzip" --input "$b/broken.jsonl.gz" "${t[@]}"
expect_error "parquet without the column" "$b/no_column.parquet: no column 'text' (--text_field); its columns: body" \
    --input "$b/no_column.parquet" "${t[@]}"
expect_error "parquet null" "$b/null.parquet: row 1: 'text' (--text_field) is null" --input "$b/null.parquet" "${t[@]}"
expect_error "--name with several inputs" "--name is needed with several inputs" --input "$corpus/a.jsonl" "$corpus/d.txt" "${t[@]}"
expect_error "an input twice" "$corpus/a.jsonl: named twice" --input "$corpus" "$corpus/a.jsonl" --name x "${t[@]}"
expect_error "unknown --doc_token" "--doc_token '<s>': not a token of the hf tokenizer" --input "$corpus" --doc_token "<s>" "${t[@]}"
expect_error "no tokenizer.json" "$corpus: no tokenizer.json" --input "$corpus" --tokenizer hf --tokenizer_file "$corpus"
expect_error "--doc_token with byte" "--doc_token is not for --tokenizer byte" --input "$corpus" --doc_token "<s>"
expect_error "--val_tokens and --val_fraction" "give one of them" --input "$corpus" --val_tokens 5 --val_fraction 0.1

finish

#!/usr/bin/env bash
# test_prepare_data.sh: runs scripts/prepare_data.py on tinyshakespeare (../shared/data, else a generated
# text) and checks the files it writes: headers, sizes, that val + train tokens are the input's bytes,
# shard splitting, stale shard removal, flag errors, the gpt2 path (with a stand-in tiktoken module) and
# its one-line error when tiktoken's vocabulary cannot be loaded. Run from the repository root.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/common.sh" || exit 1
test_init || exit 1
SCRIPT=scripts/prepare_data.py
test_tmpdir tmp test_prepare_data || exit 1
check() { # check NAME COMMAND...: passes when the command succeeds
    local name=$1
    shift
    if "$@" >"$tmp/check.out" 2>&1; then ok; else bad "$name: $(head -c 2000 "$tmp/check.out")"; fi
}

# Without $DATA this test writes its own text rather than common.sh's generated_text: one with non-ASCII
# words (UTF-8 multi-byte characters, so that "tokens == the input's bytes" is checked beyond ASCII) and
# blank-line-separated paragraphs.
utf8_text() { # FILE
    "$PY" -c "
import random
r = random.Random(1)
words = ['to', 'be', 'or', 'not', 'that', 'is', 'the', 'question', 'caf\u00e9', 'na\u00efve']
with open('$1', 'w', encoding='utf-8') as f:
    for para in range(400):
        f.write(' '.join(r.choice(words) for _ in range(r.randint(5, 60))) + '\n\n')
"
}
test_text input "$tmp/generated.txt" utf8_text
name=$(basename "$input")
name=${name%.*} # the prefix prepare_data.py gives the files by default: the input file's stem

# Verifies the files in DIR for NAME: header, size, tokens == the input's bytes, shard sizes.
# verify DIR NAME INPUT SHARD_TOKENS VAL_FRACTION
verify() {
    "$PY" - "$@" <<'EOF'
import glob, os, struct, sys
d, name, src, shard_tokens, val_fraction = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
data = open(src, "rb").read()

def read_shard(path):
    raw = open(path, "rb").read()
    assert len(raw) >= 1024, f"{path}: short header"
    magic, version, n = struct.unpack("<3i", raw[:12])
    assert (magic, version) == (20240520, 1), f"{path}: header {magic} {version}"
    assert len(raw) == 1024 + 2 * n, f"{path}: size {len(raw)} != 1024 + 2*{n}"
    assert n <= shard_tokens, f"{path}: {n} tokens > --shard_tokens {shard_tokens}"
    return list(struct.unpack(f"<{n}H", raw[1024:]))

tok = open(os.path.join(d, f"{name}_tokenizer.bin"), "rb").read()
assert struct.unpack("<4I", tok[:16]) == (20240328, 2, 256, 0), f"tokenizer header {struct.unpack('<4I', tok[:16])}"
assert len(tok) == 1024 + 512 and tok[1024:] == b"".join(bytes([1, i]) for i in range(256)), "tokenizer body"

tokens, counts = [], {}
for split in ("val", "train"):
    paths = sorted(glob.glob(os.path.join(d, f"{name}_{split}_*.bin")))
    names = [os.path.basename(p) for p in paths]
    assert names == [f"{name}_{split}_{k:06d}.bin" for k in range(len(paths))], f"{split} shard names {names}"
    shards = [read_shard(p) for p in paths]
    counts[split] = [len(s) for s in shards]
    for s in shards:
        tokens += s
assert bytes(tokens) == data, "val + train tokens are not the bytes of the input"
n_val = sum(counts["val"])
assert n_val == int(len(data) * val_fraction), f"val has {n_val} tokens, expected {int(len(data) * val_fraction)}"
for split, c in counts.items():
    total = sum(c)
    assert len(c) == -(-total // shard_tokens), f"{split}: {len(c)} shards for {total} tokens of at most {shard_tokens}"
    assert max(c) - min(c) <= 1, f"{split}: uneven shards {c}"
print(counts)
EOF
}

# 1. one shard per split
out=$tmp/one
check "byte tokenizer run" "$PY" $SCRIPT --input "$input" --output_dir "$out" --tokenizer byte
check "byte tokenizer output" verify "$out" "$name" "$input" 100000000 0.1
"$PY" $SCRIPT --input "$input" --output_dir "$out" >"$tmp/run.out" 2>&1
check "prints the files written with token counts" grep -q "wrote $out/${name}_train_000000.bin: [0-9]* tokens" "$tmp/run.out"
check "no temp files left" test -z "$(ls "$out" | grep '\.tmp$')"

# 2. small shards, another name and val fraction
size=$(wc -c <"$input")
st=$((size / 7))
check "sharded run" "$PY" $SCRIPT --input "$input" --output_dir "$out" --name small --val_fraction 0.25 --shard_tokens $st
check "sharded output" verify "$out" small "$input" $st 0.25
check "several train shards" test -f "$out/small_train_000004.bin"

# 3. a rerun with bigger shards removes the shards it no longer writes
check "rerun" "$PY" $SCRIPT --input "$input" --output_dir "$out" --name small --val_fraction 0.25
check "stale shards removed" test ! -e "$out/small_train_000001.bin"
check "rerun output" verify "$out" small "$input" 100000000 0.25

# 4. the C dataloader and tokenizer read what the script wrote
if command -v "${CC:-gcc}" >/dev/null 2>&1; then
    cat >"$tmp/read.c" <<'EOF'
#include "dataloader.h"
#include "tokenizer.h"
int main(int argc, char **argv) {
    DataLoader l;
    Tokenizer t;
    tokenizer_init(&t, argv[2]);
    dataloader_init(&l, argv[1], 2, 8, 0, 1, 0, 0, (int)t.vocab_size);
    dataloader_next_batch(&l);
    for (int i = 0; i < 16; i++) fputs(tokenizer_decode(&t, (uint32_t)l.inputs[i]), stdout);
    dataloader_free(&l);
    tokenizer_free(&t);
    return 0;
}
EOF
    if "${CC:-gcc}" -std=c11 -O1 -I. "$tmp/read.c" -o "$tmp/read" 2>"$tmp/cc.out"; then
        "$tmp/read" "$out/${name}_val_*.bin" "$out/${name}_tokenizer.bin" >"$tmp/read.out" 2>&1
        if [ "$(cat "$tmp/read.out")" = "$(head -c 16 "$input")" ]; then ok; else bad "C reader got '$(cat "$tmp/read.out")'"; fi
    else
        bad "cannot compile the C reader: $(cat "$tmp/cc.out")"
    fi
fi

# 5. flag errors: exit 1, one line "error: ..." naming the flag
expect_error() { # expect_error NAME NEEDLE ARGS...
    local name=$1 needle=$2
    shift 2
    "$PY" $SCRIPT "$@" >"$tmp/err.out" 2>"$tmp/err.err"
    local rc=$?
    local lines
    lines=$(wc -l <"$tmp/err.err")
    if [ $rc -eq 1 ] && [ "$lines" -eq 1 ] && grep -q "^error: .*$needle" "$tmp/err.err"; then
        ok
    else
        bad "$name: rc=$rc, stderr: $(cat "$tmp/err.err")"
    fi
}
expect_error "val_fraction 0" "--val_fraction" --input "$input" --output_dir "$tmp/e" --val_fraction 0
expect_error "val_fraction 1" "--val_fraction" --input "$input" --output_dir "$tmp/e" --val_fraction 1
expect_error "shard_tokens 0" "--shard_tokens" --input "$input" --output_dir "$tmp/e" --shard_tokens 0
expect_error "missing input" "$tmp/nothere.txt" --input "$tmp/nothere.txt" --output_dir "$tmp/e"
expect_error "unknown tokenizer" "--tokenizer" --input "$input" --output_dir "$tmp/e" --tokenizer words
expect_error "unknown flag" "--bogus" --bogus
printf 'ab' >"$tmp/tiny.txt"
expect_error "too few tokens" "tiny.txt" --input "$tmp/tiny.txt" --output_dir "$tmp/e"
check "no output dir for a bad input" test ! -e "$tmp/e"

# 6. gpt2 without a usable tiktoken: the one-line error (skipped where tiktoken really works)
if "$PY" -c "import tiktoken; tiktoken.get_encoding('gpt2')" >/dev/null 2>&1; then
    echo "skip: tiktoken with its gpt2 vocabulary works here; the missing-tiktoken error is not checked"
else
    expect_error "gpt2 without tiktoken" \
        "--tokenizer gpt2 needs tiktoken with its gpt2 vocabulary (pip install tiktoken; needs internet on first use): " \
        --input "$input" --output_dir "$tmp/g" --tokenizer gpt2
fi

# 7. the gpt2 path with a stand-in tiktoken (bytes as tokens, eot 299, V 300): eot before each document
mkdir -p "$tmp/fake"
cat >"$tmp/fake/tiktoken.py" <<'EOF'
class _Enc:
    n_vocab, eot_token = 300, 299
    def encode_ordinary(self, s):
        return list(s.encode("utf-8"))
    def decode_single_token_bytes(self, i):
        return bytes([i]) if i < 256 else f"<|{i}|>".encode()
def get_encoding(name):
    assert name == "gpt2"
    return _Enc()
EOF
printf 'First.\nline\n\nSecond \xc3\xa9\n\n\nThird' >"$tmp/docs.txt"
check "gpt2 run" env PYTHONPATH="$tmp/fake" "$PY" $SCRIPT --input "$tmp/docs.txt" --output_dir "$tmp/g" --tokenizer gpt2 --val_fraction 0.05
check "gpt2 output" "$PY" - "$tmp/g" <<'EOF'
import struct, sys
d = sys.argv[1]
def shard(p):
    raw = open(p, "rb").read()
    magic, version, n = struct.unpack("<3i", raw[:12])
    assert (magic, version) == (20240520, 1) and len(raw) == 1024 + 2 * n
    return list(struct.unpack(f"<{n}H", raw[1024:]))
tokens = shard(f"{d}/docs_val_000000.bin") + shard(f"{d}/docs_train_000000.bin")
docs = ["First.\nline\n\n", "Second \u00e9\n\n", "\nThird"]
expected = []
for doc in docs:
    expected += [299] + list(doc.encode())
assert tokens == expected, f"{tokens} != {expected}"
tok = open(f"{d}/docs_tokenizer.bin", "rb").read()
assert struct.unpack("<4I", tok[:16]) == (20240328, 2, 300, 299)
body, i, entries = tok[1024:], 0, []
while i < len(body):
    entries.append(body[i + 1:i + 1 + body[i]])
    i += 1 + body[i]
assert len(entries) == 300 and entries[65] == b"A" and entries[299] == b"<|299|>"
EOF

finish

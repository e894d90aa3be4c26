#!/usr/bin/env bash
# test_prepare_data.sh: runs scripts/prepare_data.py on tinyshakespeare (../shared/data, else a generated
# text) and checks the files it writes: headers, sizes, that val + train tokens are the input's bytes,
# shard splitting, stale shard removal, flag errors, the gpt2 path (with a stand-in tiktoken module) and
# its one-line error when tiktoken's vocabulary cannot be loaded; 32-bit shards (forced, and for a vocabulary
# over 65536) read by the C dataloader; the llama3 and llama2 tokenizers with a stand-in tiktoken, and with the
# real tiktoken and sentencepiece where they are installed (skipped with a line otherwise), and their one-line
# errors. Nothing is downloaded. Run from the repository root.
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

# The checks below are Python on stdin that imports the readers of test/shard_files.py.
pycheck() { PYTHONPATH="$root/test${PYTHONPATH:+:$PYTHONPATH}" "$PY" - "$@"; }

# Verifies the files in DIR for NAME: header, size, tokens == the input's bytes, shard sizes (the rule of
# scripts/prepare_data.py's docstring, restated in shard_files.expected_sizes).
# verify DIR NAME INPUT SHARD_TOKENS VAL_FRACTION [FORMAT, default uint16]
verify() {
    pycheck "$@" <<'EOF'
import glob, os, sys
from shard_files import expected_sizes, read_shard, read_tokenizer
d, name, src, shard_tokens, val_fraction = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
fmt = sys.argv[6] if len(sys.argv) > 6 else "uint16"
data = open(src, "rb").read()

assert read_tokenizer(os.path.join(d, f"{name}_tokenizer.bin")) == (0, [bytes([i]) for i in range(256)]), \
    "byte tokenizer file"

tokens, counts = [], {}
for split in ("val", "train"):
    paths = sorted(glob.glob(os.path.join(d, f"{name}_{split}_*.bin")))
    names = [os.path.basename(p) for p in paths]
    assert names == [f"{name}_{split}_{k:06d}.bin" for k in range(len(paths))], f"{split} shard names {names}"
    shards = [read_shard(p, fmt) for p in paths]
    counts[split] = [len(s) for s in shards]
    for s in shards:
        tokens += s
assert bytes(tokens) == data, "val + train tokens are not the bytes of the input"
expected = expected_sizes(len(data), shard_tokens, val_fraction=val_fraction)
assert counts == expected, f"shard sizes {counts}, expected {expected}"
print(counts)
EOF
}

# 1. one shard per split
out=$tmp/one
"$PY" $SCRIPT --input "$input" --output_dir "$out" --tokenizer byte >"$tmp/run.out" 2>&1
check "byte tokenizer run" test $? = 0
check "byte tokenizer output" verify "$out" "$name" "$input" 100000000 0.1
check "prints the files written with token counts" grep -q "wrote $out/${name}_train_000000.bin: [0-9]* tokens" "$tmp/run.out"
check "no temp files left" test -z "$(ls "$out" | grep '\.tmp$')"

# 2. small shards, another name and val fraction: val is 0.25 of the first shard's tokens, train shards full
# but for the last two, which share the rest
size=$(wc -c <"$input")
st=$((size / 7))
check "sharded run" "$PY" $SCRIPT --input "$input" --output_dir "$out" --name small --val_fraction 0.25 --shard_tokens $st
check "sharded output" verify "$out" small "$input" $st 0.25
check "several train shards" test -f "$out/small_train_000006.bin"

# 3. a rerun with bigger shards removes the shards it no longer writes
check "rerun" "$PY" $SCRIPT --input "$input" --output_dir "$out" --name small --val_fraction 0.25
check "stale shards removed" test ! -e "$out/small_train_000001.bin"
check "rerun output" verify "$out" small "$input" 100000000 0.25

# 4. the C dataloader and tokenizer read what the script wrote. c_read GLOB TOKENIZER prints the token width
# of the shards, a newline, and the bytes of the first 16 tokens of the first batch, the vocabulary being the
# tokenizer's.
c_reader=0
if command -v "${CC:-gcc}" >/dev/null 2>&1; then
    cat >"$tmp/read.c" <<'EOF'
#include "core/dataloader.h"
#include "core/tokenizer.h"
int main(int argc, char **argv) {
    if (argc != 3) fail("usage: read GLOB TOKENIZER");
    DataLoader l;
    Tokenizer t;
    tokenizer_init(&t, argv[2]);
    dataloader_init(&l, argv[1], 2, 8, 0, 1, 0, 0, (int)t.vocab_size);
    dataloader_next_batch(&l);
    printf("%d\n", l.format->token_bytes);
    for (int i = 0; i < 16; i++) fputs(tokenizer_decode(&t, (uint32_t)l.inputs[i]), stdout);
    dataloader_free(&l);
    tokenizer_free(&t);
    return 0;
}
EOF
    if "${CC:-gcc}" -std=c11 -D_GNU_SOURCE -O1 -I. "$tmp/read.c" -o "$tmp/read" 2>"$tmp/cc.out"; then
        c_reader=1
    else
        bad "cannot compile the C reader: $(cat "$tmp/cc.out")"
    fi
else
    echo "skip: no C compiler (${CC:-gcc}): the C dataloader's reading of the shards is not checked"
fi
c_read_check() { # c_read_check NAME GLOB TOKENIZER WIDTH FILE (FILE: the bytes of the 16 tokens expected)
    [ $c_reader = 1 ] || return 0
    "$tmp/read" "$2" "$3" >"$tmp/read.out" 2>&1
    if cmp -s "$tmp/read.out" <(echo "$4" && cat "$5"); then ok; else bad "$1: C reader got '$(cat "$tmp/read.out")'"; fi
}
head -c 16 "$input" >"$tmp/first16"
c_read_check "C reader, uint16" "$out/${name}_val_*.bin" "$out/${name}_tokenizer.bin" 2 "$tmp/first16"

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

# 7. the gpt2 path with a stand-in tiktoken (bytes as tokens, eot 299, V 300): eot before each document.
# The stand-in's Encoding (sections 9-10) takes tiktoken's constructor arguments and encodes byte by byte.
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
class Encoding:
    def __init__(self, name, *, pat_str, mergeable_ranks, special_tokens):
        self.ranks = mergeable_ranks
        self.bytes_of = {r: b for b, r in mergeable_ranks.items()}
        self.bytes_of.update({r: s.encode() for s, r in special_tokens.items()})
        self.n_vocab = max(self.bytes_of) + 1
    def encode_ordinary(self, s):
        return [self.ranks[bytes([b])] for b in s.encode("utf-8")]
    def decode_single_token_bytes(self, i):
        return self.bytes_of[i]
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

# 8. 32-bit shards forced for the byte tokenizer: the same tokens in the uint32 format, read by the C reader
check "uint32 run" "$PY" $SCRIPT --input "$input" --output_dir "$tmp/w" --shard_format uint32
check "uint32 output" verify "$tmp/w" "$name" "$input" 100000000 0.1 uint32
c_read_check "C reader, uint32" "$tmp/w/${name}_val_*.bin" "$tmp/w/${name}_tokenizer.bin" 4 "$tmp/first16"

# 9. llama3 with a handmade BPE ranks file of 70000 ranks (V = 70256 > 65536 with the 256 special tokens):
# the 256 single bytes in reverse order (rank = 255 - byte, so that ranks are not bytes), merges of common
# English pieces, then filler tokens no text reaches. A second file adds a token of 300 bytes.
"$PY" - "$tmp/ranks.tiktoken" "$tmp/ranks_long.tiktoken" <<'EOF'
import base64, sys
tokens = [bytes([255 - r]) for r in range(256)]
for merge in (b"th", b"the", b" the", b"he", b"in", b"an", b"er", b"ou", b" a", b"\n\n", b"ing", b" and"):
    tokens.append(merge)
tokens += [b"\xff\xfe" + k.to_bytes(3, "big") for k in range(70000 - len(tokens))]
for path, extra in ((sys.argv[1], []), (sys.argv[2], [b"x" * 300])):
    with open(path, "wb") as f:
        for rank, t in enumerate(tokens + extra):
            f.write(base64.b64encode(t) + b" %d\n" % rank)
EOF
l3_expected() { # l3_expected DIR INPUT [EXACT]: the llama3 files for INPUT; EXACT: the stand-in's tokens
    pycheck "$@" <<'EOF'
import glob, sys
from shard_files import read_shard, read_tokenizer
d, src, exact = sys.argv[1], sys.argv[2], len(sys.argv) > 3
text = open(src, "rb").read().decode()
tokens = [t for p in sorted(glob.glob(f"{d}/*_val_*.bin")) + sorted(glob.glob(f"{d}/*_train_*.bin"))
          for t in read_shard(p, "uint32")]
eot, vocab = read_tokenizer(glob.glob(f"{d}/*_tokenizer.bin")[0])
assert len(vocab) == 70256 and eot == 70000, f"V {len(vocab)}, eot {eot}"
assert vocab[70000] == b"<|begin_of_text|>" and vocab[70255] == b"<|reserved_special_token_246|>"
assert vocab[255 - ord("a")] == b"a" and vocab[257] == b"the", "the ranks file's tokens at their ranks"
docs = text.split("\n\n")
docs = [doc + "\n\n" for doc in docs[:-1]] + docs[-1:]
assert tokens.count(70000) == len(docs), "one <|begin_of_text|> a document"
assert b"".join(vocab[t] for t in tokens) == "".join("<|begin_of_text|>" + doc for doc in docs).encode(), \
    "the tokens decode to the documents, each after <|begin_of_text|>"
if exact:
    expected = [t for doc in docs for t in [70000] + [255 - b for b in doc.encode()]]
    assert tokens == expected, "the stand-in's tokens: one a byte, at its rank"
else:
    assert len(tokens) < len(text.encode()), f"{len(tokens)} tokens for {len(text.encode())} bytes: no merge"
EOF
}
{ printf '<|begin_of_text|>' && head -c 15 "$input"; } >"$tmp/l3_first16"
check "llama3 run, stand-in tiktoken" env PYTHONPATH="$tmp/fake" "$PY" $SCRIPT --input "$input" --output_dir "$tmp/l3" \
    --tokenizer llama3 --tokenizer_file "$tmp/ranks.tiktoken"
check "llama3 output: uint32 shards (auto), tokens, tokenizer file" l3_expected "$tmp/l3" "$input" exact
c_read_check "C reader, llama3" "$tmp/l3/${name}_val_*.bin" "$tmp/l3/${name}_tokenizer.bin" 4 "$tmp/l3_first16"
l3_error() { # l3_error NAME NEEDLE ARGS...: expect_error with the stand-in tiktoken
    local what=$1 needle=$2
    shift 2
    PYTHONPATH="$tmp/fake" expect_error "$what" "$needle" --input "$input" --output_dir "$tmp/l3e" "$@"
}
l3_error "llama3 in uint16 shards" \
    "--shard_format uint16 holds token ids below 65536, but the llama3 vocabulary has 70256 tokens" \
    --tokenizer llama3 --tokenizer_file "$tmp/ranks.tiktoken" --shard_format uint16
l3_error "llama3 token over 255 bytes" "ranks_long.tiktoken: token 70000 has 300 bytes" \
    --tokenizer llama3 --tokenizer_file "$tmp/ranks_long.tiktoken"
printf 'dGg= 0\nnot base64 1\n' >"$tmp/bad.tiktoken"
l3_error "llama3 malformed ranks file" "bad.tiktoken: line 2 is not" --tokenizer llama3 --tokenizer_file "$tmp/bad.tiktoken"
head -n 100 "$tmp/ranks.tiktoken" >"$tmp/short.tiktoken"
l3_error "llama3 ranks without every byte" "short.tiktoken: no token for the single byte 0x00 (156 bytes missing)" \
    --tokenizer llama3 --tokenizer_file "$tmp/short.tiktoken"
l3_error "llama3 without --tokenizer_file" "--tokenizer llama3 needs --tokenizer_file" --tokenizer llama3
l3_error "llama3 --tokenizer_file missing" "$tmp/none.model: --tokenizer_file not found" \
    --tokenizer llama3 --tokenizer_file "$tmp/none.model"
l3_error "--tokenizer_file with byte" "--tokenizer_file is for --tokenizer llama3, llama2 or hf, not byte" \
    --tokenizer_file "$tmp/ranks.tiktoken"
check "no output dir for refused tokenizers" test ! -e "$tmp/l3e"

# 10. llama3 with the real tiktoken, where it is installed; its one-line error where it is not
if "$PY" -c "import tiktoken" >/dev/null 2>&1; then
    check "llama3 run, tiktoken" "$PY" $SCRIPT --input "$input" --output_dir "$tmp/l3t" --tokenizer llama3 \
        --tokenizer_file "$tmp/ranks.tiktoken"
    check "llama3 output with tiktoken's merges" l3_expected "$tmp/l3t" "$input"
else
    echo "skip: tiktoken is not installed: --tokenizer llama3 is checked with the stand-in only"
    expect_error "llama3 without tiktoken" \
        "--tokenizer llama3 needs the Python package tiktoken, which is not installed (pip install tiktoken)" \
        --input "$input" --output_dir "$tmp/l3e" --tokenizer llama3 --tokenizer_file "$tmp/ranks.tiktoken"
fi

# 11. llama2 with a sentencepiece model trained here, where sentencepiece is installed; its one-line error
# where it is not
if "$PY" -c "import sentencepiece" >/dev/null 2>&1; then
    # up to 400 pieces: the generated text's few words hold fewer (hard_vocab_limit)
    check "train a small sentencepiece model" "$PY" -c "
import sentencepiece as spm
open('$tmp/sp_text.txt', 'w', encoding='utf-8').write(open('$input', encoding='utf-8').read()[:200000])
spm.SentencePieceTrainer.train(input='$tmp/sp_text.txt', model_prefix='$tmp/sp', vocab_size=400,
                               model_type='bpe', byte_fallback=True, minloglevel=2, hard_vocab_limit=False)"
    check "llama2 run" "$PY" $SCRIPT --input "$tmp/sp_text.txt" --output_dir "$tmp/l2" --tokenizer llama2 \
        --tokenizer_file "$tmp/sp.model"
    check "llama2 output: uint16 shards, <s> before each document, tokens decode as sentencepiece does" \
        pycheck "$tmp/l2" "$tmp/sp_text.txt" "$tmp/sp.model" <<'EOF'
import glob, sys
import sentencepiece as spm
from shard_files import read_shard, read_tokenizer
d, src, model = sys.argv[1:]
sp = spm.SentencePieceProcessor(model_file=model)
tokens = [t for p in sorted(glob.glob(f"{d}/*_val_*.bin")) + sorted(glob.glob(f"{d}/*_train_*.bin"))
          for t in read_shard(p, "uint16")]
eot, vocab = read_tokenizer(f"{d}/sp_text_tokenizer.bin")
assert len(vocab) == sp.get_piece_size() and eot == sp.bos_id(), f"V {len(vocab)}, eot {eot}"
text = open(src).read()
docs = text.split("\n\n")
docs = [doc + "\n\n" for doc in docs[:-1]] + docs[-1:]
expected = [t for doc in docs for t in [sp.bos_id()] + sp.encode(doc)]
assert tokens == expected, "<s>, then sentencepiece's tokens of each document"
doc = sp.encode(docs[1])
assert b"".join(vocab[t] for t in doc).decode().lstrip(" ") == sp.decode(doc), "token bytes"
EOF
else
    echo "skip: sentencepiece is not installed: --tokenizer llama2 is checked for its error line only"
    expect_error "llama2 without sentencepiece" \
        "--tokenizer llama2 needs the Python package sentencepiece, which is not installed (pip install sentencepiece)" \
        --input "$input" --output_dir "$tmp/l2e" --tokenizer llama2 --tokenizer_file "$tmp/ranks.tiktoken"
fi

finish

#!/usr/bin/env python3
"""Tokenize a text file into llm.c token shards and a tokenizer file.

    python3 scripts/prepare_data.py --input PATH_OR_URL --output_dir DIR [--name NAME]
        [--tokenizer byte|gpt2|llama3|llama2] [--tokenizer_file PATH] [--shard_format auto|uint16|uint32]
        [--val_fraction 0.1] [--shard_tokens 100000000]

Without --input it downloads tinyshakespeare. It writes, in DIR:
    NAME_tokenizer.bin            256 uint32 header [20240328, 2, V, eot], then per token a uint8 length
                                  and the token's bytes
    NAME_val_000000.bin ...       the first val_fraction of the tokens
    NAME_train_000000.bin ...     the rest
Each shard: 256 int32 header [magic, version, ntokens], then ntokens tokens, all little-endian, in one of
llm.c's two formats (--shard_format; auto: uint32 when the vocabulary has more than 65536 tokens):
    uint16  magic 20240520, version 1 (GPT-2's format)
    uint32  magic 20240801, version 7 (Llama 3's format)
A split larger than --shard_tokens is cut into ceil(n / shard_tokens) shards of nearly equal size (so no tiny
last shard that a dataloader would reject). Every file is written to NAME.tmp and renamed into place;
shards of an earlier run of the same NAME that this run did not write again are removed.

Tokenizers:
    byte  V=256, token = byte value, the file's bytes unchanged (no separator is inserted). Token 0
          (the NUL byte, absent from text) is declared the eot token in the header; nothing uses it.
    gpt2  tiktoken's "gpt2" encoding, V=50257, eot=50256. As llm.c does for tinyshakespeare, the text is
          cut at blank lines ("\\n\\n") into documents and an eot token precedes each document.
    llama3  --tokenizer_file is Llama 3's tokenizer.model, a tiktoken BPE ranks file (a line "base64 of
          the token's bytes, rank" per token; cl100k_base.tiktoken has the same form), read with Llama 3's
          split pattern and its 256 special tokens after the ranks: V=128256 for Llama 3. Documents as for
          gpt2, each preceded by <|begin_of_text|> (the first special token).
    llama2  --tokenizer_file is Llama 2's sentencepiece tokenizer.model, V=32000; each document is
          preceded by its <s> (bos) token.
The tokenizer file's eot field holds the token that precedes each document, which sampling starts from.
Its format holds tokens of 1 to 255 bytes; a vocabulary with a longer one is refused before anything is
written.

Python standard library only; tiktoken is needed for --tokenizer gpt2 and llama3, sentencepiece for
llama2. Nothing is downloaded for llama3 and llama2: the tokenizer file is given by path.
"""

import argparse
import base64
import os
import struct
import sys
import urllib.parse
import urllib.request
from array import array

TINYSHAKESPEARE_URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
# --shard_format: (magic, version, array typecode of the token width)
SHARD_FORMATS = {"uint16": (20240520, 1, "H"), "uint32": (20240801, 7, "I")}
TOKENIZER_MAGIC, TOKENIZER_VERSION = 20240328, 2
MAX_SHARD_TOKENS = 2**31 - 1  # the header's ntokens is an int32


def die(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(1)


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        die(f"{self.prog}: {message} (see --help)")


def is_url(s):
    return urllib.parse.urlparse(s).scheme in ("http", "https")


def write_atomic(path, chunks):
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.remove(tmp)
        except OSError:
            pass
        die(f"{path}: cannot write: {e.strerror or e}")


def make_dir(path):
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        die(f"{path}: cannot create --output_dir: {e.strerror or e}")


def download(url, path):
    """Fetches url into path (kept as a cache: an existing file is used as it is)."""
    if os.path.exists(path):
        print(f"using {path} (already downloaded from {url})")
        return
    print(f"downloading {url} -> {path}")
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            data = r.read()
    except Exception as e:  # URLError, HTTPError, timeouts, ...
        reason = getattr(e, "reason", None) or e
        die(f"{url}: download failed (offline? pass --input with a local file): {reason}")
    write_atomic(path, [data])


# Llama 3's pre-tokenizer split, and the names of its 256 special tokens, which follow the BPE ranks
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                  "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|step_id|>",
                  "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"]
LLAMA3_SPECIAL += [f"<|reserved_special_token_{i}|>" for i in range(2, 258 - len(LLAMA3_SPECIAL))]


def import_for(module, kind):
    """The module --tokenizer kind needs, or one line saying it is not installed."""
    try:
        return __import__(module)
    except ImportError:
        die(f"--tokenizer {kind} needs the Python package {module}, which is not installed "
            f"(pip install {module})")


def one_line(e):
    return " ".join(str(e).split()) or type(e).__name__


def load_gpt2():
    try:
        import tiktoken

        enc = tiktoken.get_encoding("gpt2")
    except Exception as e:  # ImportError, or the vocabulary download failing
        die("--tokenizer gpt2 needs tiktoken with its gpt2 vocabulary "
            f"(pip install tiktoken; needs internet on first use): {one_line(e)}")
    vocab = [enc.decode_single_token_bytes(i) for i in range(enc.n_vocab)]
    return enc.encode_ordinary, vocab, enc.eot_token


def read_bpe_ranks(path):
    """{token bytes: rank} of a tiktoken BPE ranks file. Read here rather than with tiktoken.load, whose
    cache is keyed by the path alone: it would serve an earlier file's ranks for a new file at that path."""
    try:
        with open(path, "rb") as f:
            lines = f.read().splitlines()
    except OSError as e:
        die(f"{path}: cannot read --tokenizer_file: {e.strerror or e}")
    ranks = {}
    for k, line in enumerate(lines, 1):
        if not line:
            continue
        try:
            token, rank = line.split()
            ranks[base64.b64decode(token, validate=True)] = int(rank)
        except ValueError:  # a field too many or few, bad base64, a rank that is not a number
            die(f"{path}: line {k} is not \"<base64 token> <rank>\" (not a tiktoken BPE ranks file)")
    if sorted(ranks.values()) != list(range(len(ranks))):
        die(f"{path}: the ranks are not 0..{len(ranks) - 1} once each (not a tiktoken BPE ranks file)")
    # BPE starts from single bytes: without one, a text holding that byte could not be encoded
    missing = [b for b in range(256) if bytes([b]) not in ranks]
    if missing:
        die(f"{path}: no token for the single byte 0x{missing[0]:02x} ({len(missing)} bytes missing)")
    return ranks


def load_llama3(path):
    tiktoken = import_for("tiktoken", "llama3")
    ranks = read_bpe_ranks(path)
    special = {name: len(ranks) + i for i, name in enumerate(LLAMA3_SPECIAL)}
    enc = tiktoken.Encoding(name="llama3", pat_str=LLAMA3_PATTERN, mergeable_ranks=ranks,
                            special_tokens=special)
    vocab = [enc.decode_single_token_bytes(i) for i in range(enc.n_vocab)]
    return enc.encode_ordinary, vocab, special["<|begin_of_text|>"]


def load_llama2(path):
    spm = import_for("sentencepiece", "llama2")
    try:
        sp = spm.SentencePieceProcessor(model_file=path)
    except Exception as e:  # sentencepiece raises OSError or RuntimeError on what it cannot parse
        die(f"{path}: not a sentencepiece model: {one_line(e)}")
    if sp.bos_id() < 0:
        die(f"{path}: the sentencepiece model has no bos token (it precedes each document)")
    vocab = []
    for i in range(sp.get_piece_size()):
        piece = sp.id_to_piece(i)
        if sp.is_byte(i):  # a byte-fallback piece, "<0x0A>", stands for that byte
            vocab.append(bytes([int(piece[3:5], 16)]))
        else:  # U+2581 marks a space; control pieces (<s>, </s>, <unk>) are written as their names
            vocab.append(piece.replace("\u2581", " ").encode("utf-8"))
    return sp.encode, vocab, sp.bos_id()


def load_tokenizer(kind, path):
    """(encode, vocabulary as a list of token bytes, delimiter): encode maps a document to token ids
    (None for the byte tokenizer, which does not cut the text into documents), the delimiter precedes
    each document and is the tokenizer file's eot."""
    if kind == "byte":
        encode, vocab, delimiter = None, [bytes([i]) for i in range(256)], 0
    elif kind == "gpt2":
        encode, vocab, delimiter = load_gpt2()
    elif kind == "llama3":
        encode, vocab, delimiter = load_llama3(path)
    else:
        encode, vocab, delimiter = load_llama2(path)
    for i, b in enumerate(vocab):  # refused before anything is written
        if not 1 <= len(b) <= 255:
            die(f"{path or '--tokenizer ' + kind}: token {i} has {len(b)} bytes; the llm.c tokenizer file "
                "holds tokens of 1..255 bytes")
    return encode, vocab, delimiter


def tokenize(data, encode, delimiter, kind, source):
    """The token ids of data, as array('I')."""
    tokens = array("I")
    if encode is None:
        tokens.extend(data)  # one token per byte
        return tokens
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        die(f"{source}: not valid UTF-8 at byte {e.start} (--tokenizer {kind} reads UTF-8 text)")
    docs = text.split("\n\n")
    for i, doc in enumerate(docs):
        if i + 1 < len(docs):
            doc += "\n\n"
        tokens.append(delimiter)
        tokens.extend(encode(doc))
    return tokens


def tokenizer_file(vocab, eot):
    yield struct.pack("<256I", TOKENIZER_MAGIC, TOKENIZER_VERSION, len(vocab), eot, *([0] * 252))
    for b in vocab:
        yield bytes([len(b)]) + b


def shard_file(tokens, shard_format):
    magic, version, typecode = SHARD_FORMATS[shard_format]
    yield struct.pack("<256i", magic, version, len(tokens), *([0] * 253))
    body = array(typecode, tokens)
    if sys.byteorder != "little":
        body.byteswap()
    yield body.tobytes()


def split_evenly(n, max_per_shard):
    """Boundaries of ceil(n / max_per_shard) consecutive pieces of nearly equal size."""
    pieces = max(1, -(-n // max_per_shard))
    return [n * k // pieces for k in range(pieces + 1)]


def main():
    p = OneLineParser(description="Tokenize a text file into llm.c token shards.")
    p.add_argument("--input", help="text file or http(s) URL (default: download tinyshakespeare)")
    p.add_argument("--output_dir", default="data", help="directory for the output files (default: data)")
    p.add_argument("--name", help="file name prefix (default: the input file's stem)")
    p.add_argument("--tokenizer", choices=["byte", "gpt2", "llama3", "llama2"], default="byte", help="default: byte")
    p.add_argument("--tokenizer_file", help="llama3: the tiktoken BPE ranks file (Llama 3's tokenizer.model); "
                   "llama2: the sentencepiece tokenizer.model")
    p.add_argument("--shard_format", choices=["auto", *SHARD_FORMATS], default="auto",
                   help="token width of the shards (default auto: uint32 when the vocabulary exceeds 65536)")
    p.add_argument("--val_fraction", type=float, default=0.1, help="share of tokens for validation (default 0.1)")
    p.add_argument("--shard_tokens", type=int, default=100_000_000, help="most tokens per shard (default 1e8)")
    args = p.parse_args()

    if not 0.0 < args.val_fraction < 1.0:
        die(f"--val_fraction {args.val_fraction} must be in (0, 1)")
    if not 1 <= args.shard_tokens <= MAX_SHARD_TOKENS:
        die(f"--shard_tokens {args.shard_tokens} must be in [1, {MAX_SHARD_TOKENS}]")
    if args.name is not None and (not args.name or "/" in args.name or args.name in (".", "..")):
        die(f"--name {args.name!r} must be a plain file name prefix")
    file_tokenizer = args.tokenizer in ("llama3", "llama2")
    if file_tokenizer and args.tokenizer_file is None:
        die(f"--tokenizer {args.tokenizer} needs --tokenizer_file (its tokenizer.model)")
    if not file_tokenizer and args.tokenizer_file is not None:
        die(f"--tokenizer_file is for --tokenizer llama3 or llama2, not {args.tokenizer}")
    if file_tokenizer and not os.path.isfile(args.tokenizer_file):
        die(f"{args.tokenizer_file}: --tokenizer_file not found")

    download_url = args.input is None or is_url(args.input)
    if not download_url and not os.path.isfile(args.input):
        die(f"{args.input}: --input file not found")

    # the tokenizer, and the shard format its vocabulary needs
    encode, vocab, delimiter = load_tokenizer(args.tokenizer, args.tokenizer_file)
    shard_format = args.shard_format
    if shard_format == "auto":
        shard_format = "uint32" if len(vocab) > 65536 else "uint16"
    if shard_format == "uint16" and len(vocab) > 65536:
        die(f"--shard_format uint16 holds token ids below 65536, but the {args.tokenizer} vocabulary has "
            f"{len(vocab)} tokens (use uint32)")

    # the input text
    if download_url:
        url = args.input or TINYSHAKESPEARE_URL
        stem = "tinyshakespeare" if args.input is None else \
            os.path.splitext(os.path.basename(urllib.parse.urlparse(url).path))[0] or "download"
        name = args.name or stem
        source = os.path.join(args.output_dir, name + ".txt")
        make_dir(args.output_dir)
        download(url, source)
    else:
        source = args.input
        name = args.name or os.path.splitext(os.path.basename(source))[0]
    try:
        with open(source, "rb") as f:
            data = f.read()
    except OSError as e:
        die(f"{source}: cannot read: {e.strerror or e}")

    tokens = tokenize(data, encode, delimiter, args.tokenizer, source)
    n = len(tokens)
    n_val = int(n * args.val_fraction)
    if n_val < 1 or n - n_val < 1:
        die(f"{source}: {n} tokens are too few for a validation split of {args.val_fraction}")

    make_dir(args.output_dir)
    written = []
    path = os.path.join(args.output_dir, f"{name}_tokenizer.bin")
    write_atomic(path, tokenizer_file(vocab, delimiter))
    written.append((path, f"{len(vocab)} tokens in the vocabulary, eot {delimiter}"))
    for split, lo, hi in (("val", 0, n_val), ("train", n_val, n)):
        bounds = split_evenly(hi - lo, args.shard_tokens)
        names = set()
        for k in range(len(bounds) - 1):
            fname = f"{name}_{split}_{k:06d}.bin"
            path = os.path.join(args.output_dir, fname)
            shard = tokens[lo + bounds[k]:lo + bounds[k + 1]]
            write_atomic(path, shard_file(shard, shard_format))
            written.append((path, f"{len(shard)} tokens"))
            names.add(fname)
        # shards of an earlier, larger run would be read with these through a glob
        prefix = f"{name}_{split}_"
        for old in sorted(os.listdir(args.output_dir)):
            rest = old[len(prefix):]
            if old.startswith(prefix) and old.endswith(".bin") and rest[:-4].isdigit() and old not in names:
                os.remove(os.path.join(args.output_dir, old))
                print(f"removed stale {os.path.join(args.output_dir, old)}")

    print(f"{source}: {len(data)} bytes -> {n} tokens ({args.tokenizer} tokenizer, {shard_format} shards)")
    for path, what in written:
        print(f"wrote {path}: {what}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Tokenize a text file into llm.c token shards and a tokenizer file.

    python3 scripts/prepare_data.py --input PATH_OR_URL --output_dir DIR [--name NAME]
        [--tokenizer byte|gpt2] [--val_fraction 0.1] [--shard_tokens 100000000]

Without --input it downloads tinyshakespeare. It writes, in DIR:
    NAME_tokenizer.bin            256 uint32 header [20240328, 2, V, eot], then per token a uint8 length
                                  and the token's bytes
    NAME_val_000000.bin ...       the first val_fraction of the tokens
    NAME_train_000000.bin ...     the rest
Each shard: 256 int32 header [20240520, 1, ntokens], then ntokens uint16, all little-endian. A split
larger than --shard_tokens is cut into ceil(n / shard_tokens) shards of nearly equal size (so no tiny
last shard that a dataloader would reject). Every file is written to NAME.tmp and renamed into place;
shards of an earlier run of the same NAME that this run did not write again are removed.

Tokenizers:
    byte  V=256, token = byte value, the file's bytes unchanged (no separator is inserted). Token 0
          (the NUL byte, absent from text) is declared the eot token in the header; nothing uses it.
    gpt2  tiktoken's "gpt2" encoding, V=50257, eot=50256. As llm.c does for tinyshakespeare, the text is
          cut at blank lines ("\\n\\n") into documents and an eot token precedes each document.

Python standard library only; tiktoken is needed for --tokenizer gpt2 alone.
"""

import argparse
import os
import struct
import sys
import urllib.parse
import urllib.request
from array import array

TINYSHAKESPEARE_URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
SHARD_MAGIC, SHARD_VERSION = 20240520, 1
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


def load_gpt2():
    try:
        import tiktoken

        enc = tiktoken.get_encoding("gpt2")
    except Exception as e:  # ImportError, or the vocabulary download failing
        reason = " ".join(str(e).split()) or type(e).__name__
        die("--tokenizer gpt2 needs tiktoken with its gpt2 vocabulary "
            f"(pip install tiktoken; needs internet on first use): {reason}")
    return enc


def tokenize(data, kind, source):
    """Returns (tokens as array('H'), list of token byte strings, eot id)."""
    if kind == "byte":
        wide = bytearray(2 * len(data))
        wide[0::2] = data  # little-endian uint16 of each byte
        tokens = array("H")
        tokens.frombytes(wide)
        if sys.byteorder != "little":
            tokens.byteswap()
        return tokens, [bytes([i]) for i in range(256)], 0
    enc = load_gpt2()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        die(f"{source}: not valid UTF-8 at byte {e.start} (--tokenizer gpt2 reads UTF-8 text)")
    eot = enc.eot_token
    tokens = array("H")
    docs = text.split("\n\n")
    for i, doc in enumerate(docs):
        if i + 1 < len(docs):
            doc += "\n\n"
        tokens.append(eot)
        tokens.extend(enc.encode_ordinary(doc))
    vocab = [enc.decode_single_token_bytes(i) for i in range(enc.n_vocab)]
    return tokens, vocab, eot


def tokenizer_file(vocab, eot):
    yield struct.pack("<256I", TOKENIZER_MAGIC, TOKENIZER_VERSION, len(vocab), eot, *([0] * 252))
    for i, b in enumerate(vocab):
        if not 1 <= len(b) <= 255:
            die(f"token {i} has {len(b)} bytes; the tokenizer format holds 1..255")
        yield bytes([len(b)]) + b


def shard_file(tokens):
    yield struct.pack("<256i", SHARD_MAGIC, SHARD_VERSION, len(tokens), *([0] * 253))
    if sys.byteorder != "little":
        tokens = array("H", tokens)
        tokens.byteswap()
    yield tokens.tobytes()


def split_evenly(n, max_per_shard):
    """Boundaries of ceil(n / max_per_shard) consecutive pieces of nearly equal size."""
    pieces = max(1, -(-n // max_per_shard))
    return [n * k // pieces for k in range(pieces + 1)]


def main():
    p = OneLineParser(description="Tokenize a text file into llm.c token shards.")
    p.add_argument("--input", help="text file or http(s) URL (default: download tinyshakespeare)")
    p.add_argument("--output_dir", default="data", help="directory for the output files (default: data)")
    p.add_argument("--name", help="file name prefix (default: the input file's stem)")
    p.add_argument("--tokenizer", choices=["byte", "gpt2"], default="byte", help="default: byte")
    p.add_argument("--val_fraction", type=float, default=0.1, help="share of tokens for validation (default 0.1)")
    p.add_argument("--shard_tokens", type=int, default=100_000_000, help="most tokens per shard (default 1e8)")
    args = p.parse_args()

    if not 0.0 < args.val_fraction < 1.0:
        die(f"--val_fraction {args.val_fraction} must be in (0, 1)")
    if not 1 <= args.shard_tokens <= MAX_SHARD_TOKENS:
        die(f"--shard_tokens {args.shard_tokens} must be in [1, {MAX_SHARD_TOKENS}]")
    if args.name is not None and (not args.name or "/" in args.name or args.name in (".", "..")):
        die(f"--name {args.name!r} must be a plain file name prefix")

    # the input text
    download_url = args.input is None or is_url(args.input)
    if not download_url and not os.path.isfile(args.input):
        die(f"{args.input}: --input file not found")
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

    tokens, vocab, eot = tokenize(data, args.tokenizer, source)
    n = len(tokens)
    n_val = int(n * args.val_fraction)
    if n_val < 1 or n - n_val < 1:
        die(f"{source}: {n} tokens are too few for a validation split of {args.val_fraction}")

    make_dir(args.output_dir)
    written = []
    path = os.path.join(args.output_dir, f"{name}_tokenizer.bin")
    write_atomic(path, tokenizer_file(vocab, eot))
    written.append((path, f"{len(vocab)} tokens in the vocabulary, eot {eot}"))
    for split, lo, hi in (("val", 0, n_val), ("train", n_val, n)):
        bounds = split_evenly(hi - lo, args.shard_tokens)
        names = set()
        for k in range(len(bounds) - 1):
            fname = f"{name}_{split}_{k:06d}.bin"
            path = os.path.join(args.output_dir, fname)
            shard = tokens[lo + bounds[k]:lo + bounds[k + 1]]
            write_atomic(path, shard_file(shard))
            written.append((path, f"{len(shard)} tokens"))
            names.add(fname)
        # shards of an earlier, larger run would be read with these through a glob
        prefix = f"{name}_{split}_"
        for old in sorted(os.listdir(args.output_dir)):
            rest = old[len(prefix):]
            if old.startswith(prefix) and old.endswith(".bin") and rest[:-4].isdigit() and old not in names:
                os.remove(os.path.join(args.output_dir, old))
                print(f"removed stale {os.path.join(args.output_dir, old)}")

    print(f"{source}: {len(data)} bytes -> {n} tokens ({args.tokenizer} tokenizer)")
    for path, what in written:
        print(f"wrote {path}: {what}")


if __name__ == "__main__":
    main()

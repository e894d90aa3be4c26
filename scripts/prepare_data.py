#!/usr/bin/env python3
"""Tokenize a corpus into llm.c token shards and a tokenizer file, with a pool of processes.

    python3 scripts/prepare_data.py --input PATH [PATH ...] --output_dir DIR [--name NAME]
        [--tokenizer byte|gpt2|llama3|llama2|hf] [--tokenizer_file PATH] [--doc_token TOKEN]
        [--text_field text] [--workers N] [--shard_format auto|uint16|uint32] [--shard_tokens 100000000]
        [--val_fraction 0.1 | --val_tokens N]

Inputs: each --input is a file, a directory (its .txt, .jsonl, .jsonl.gz and .parquet files, searched
recursively, hidden ones skipped) or a glob; the documents are read in the order the inputs are given, the
files of one directory or glob in name order. Without --input it downloads tinyshakespeare (an http(s) URL
is downloaded likewise, into DIR).
    .txt                  cut at blank lines as text.split("\\n\\n") cuts it: every piece but the last keeps
                          its "\\n\\n"; each piece is a document (so is the last, even when empty)
    .jsonl, .jsonl.gz     one JSON object a line, the document its --text_field (default text) string; a
                          blank line is skipped; gzip is read as a stream
    .parquet              the --text_field column (string), read batch by batch with pyarrow
It writes, in DIR (NAME: --name, by default the stem of a single input file or the name of a single
input directory):
    NAME_tokenizer.bin            256 uint32 header [20240328, 2, V, eot], then per token a uint8 length
                                  and the token's bytes (core/tokenizer.h)
    NAME_val_000000.bin ...       the validation split: the first tokens of the stream
    NAME_train_000000.bin ...     the rest
    NAME_manifest.json            the settings and inputs, and each complete shard's tokens, sha256 and
                                  where in the inputs it ends: what a rerun resumes from
Each shard: 256 int32 header [magic, version, ntokens], then ntokens tokens, all little-endian, in one of
llm.c's two formats (--shard_format; auto: uint32 when the vocabulary has more than 65536 tokens):
    uint16  magic 20240520, version 1 (GPT-2's format)
    uint32  magic 20240801, version 7 (Llama 3's format)

The token stream: each document is its document token (below) and then its tokens, documents in input
order. The split, on that stream:
    --val_fraction F (default 0.1): the first F of the tokens, counting at most the first --shard_tokens:
        a corpus of up to one shard splits as the whole (val int(F*n) tokens, train the rest), a larger one
        gives int(F*shard_tokens) tokens to val. Deciding waits for the first shard's tokens, which are held
        in memory.
    --val_tokens N: the first N tokens (llm.c's fineweb.py makes its first shard of 100M tokens val:
        --val_tokens 100000000).
Validation of more than --shard_tokens tokens is cut into ceil(N / shard_tokens) shards of nearly equal
size. Train shards hold --shard_tokens tokens each (documents run on from one shard into the next), but
the last two, which share the remainder equally, so that no shard is smaller than half a shard (the data
loader refuses a shard shorter than one batch).

Tokenizers, and the document token that begins each document (--doc_token names another by its text):
    byte    V=256, token = byte value, documents concatenated without a token between them (a .txt file's
            bytes unchanged). Token 0 is the eot token in the header; nothing uses it.
    gpt2    tiktoken's "gpt2" encoding, V=50257; <|endoftext|> begins each document.
    llama3  --tokenizer_file is Llama 3's tokenizer.model, a tiktoken BPE ranks file (a line "base64 of the
            token's bytes, rank" per token), read with Llama 3's split pattern and its 256 special tokens
            after the ranks: V=128256 for Llama 3; <|begin_of_text|> begins each document.
    llama2  --tokenizer_file is a sentencepiece tokenizer.model (Llama 2's: V=32000); its <s> (bos) begins
            each document.
    hf      --tokenizer_file is a tokenizer.json (the tokenizers library's format) or a checkpoint
            directory holding one; the document token is the bos_token of its tokenizer_config.json, else
            <|endoftext|> (scripts/hf_tokenizer.py).
Text is tokenized as ordinary text: a special token's text inside a document ("<|endoftext|>") is
tokenized as characters, never as that token, so only this script places document tokens. The tokenizer
file's eot field holds the document token, which sampling starts from. Its format holds tokens of 1 to
255 bytes; a vocabulary with a longer one is refused before anything is written.

Workers: --workers N processes tokenize batches of documents (about 1 MB of text, or 256 parquet rows)
that this process reads and hands out in order; it writes the shards from the results in that order, so
the output is the same for every N. For the tiktoken and sentencepiece tokenizers a worker is one core, and N
is by default the cores this process may run on. An hf worker runs the tokenizers library's own threads on
its share of the cores (one shared copy of the tokenizer's tables tokenized 1.2x to 1.5x more tokens per
CPU second than a process per core: docs/data-preparation.md), one worker for each 8 cores by default, so
that each also reads its batches' JSON in parallel with the others. Memory stays
flat in the corpus size: files are read a block at a time (a document or JSON line is the largest piece
held whole), at most 2N+2 batches are in flight, and the shard being filled is held in memory (the
current shard's tokens, --shard_tokens of 2 or 4 bytes). A line every 10 seconds gives tokens/s and the
time left.

Resume: a shard is written to NAME.tmp and renamed into place complete; then NAME_manifest.json records
it (atomically) with its sha256 and the position in the inputs where it ends (input, document, tokens of
that document already in it). A rerun with the same settings and inputs (the same paths, sizes and
modification times, and the same tokenizer files and library version) checks the recorded shards (size,
header, sha256), keeps those that pass up to the first that does not, and tokenizes from the end of the
last one kept; with other settings or inputs it starts over; a complete earlier run is left as it is.
The last full train shard stays a temporary file until the next one fills, so that the last two can
share the remainder.

Python standard library, plus: tiktoken for gpt2 and llama3, sentencepiece for llama2, tokenizers for hf,
pyarrow for .parquet inputs. Nothing is downloaded for llama3, llama2 and hf.
"""

import argparse
import base64
import bisect
import glob
import gzip
import hashlib
import importlib.metadata
import itertools
import json
import os
import struct
import sys
import threading
import time
import urllib.parse
import urllib.request
import zlib
from array import array
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import hf_tokenizer

TINYSHAKESPEARE_URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
# --shard_format: (magic, version, array typecode of the token width)
SHARD_FORMATS = {"uint16": (20240520, 1, "H"), "uint32": (20240801, 7, "I")}
SHARD_HEADER_BYTES = 1024
MAX_SHARD_TOKENS = 2**31 - 1  # the header's ntokens is an int32
EXTENSIONS = (".txt", ".jsonl", ".jsonl.gz", ".parquet")
READ_BYTES = 1 << 20  # a batch of .txt or .jsonl text: the block read at a time
PARQUET_ROWS = 256  # a batch of parquet rows (FineWeb's documents are 3 to 5 kB)
COPY_BYTES = 16 << 20  # block of a shard copied or hashed at a time
PROGRESS_SECONDS = 10
# An hf worker's share of the cores, which the tokenizers library's threads use (see the docstring's Workers)
HF_CORES_PER_WORKER = 8
# The version of the rules that turn inputs into the token stream (documents, the split, the shards): a
# manifest written under other rules is not resumed.
STREAM_RULES = 1


def die(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(1)


class DataError(Exception):
    """An input that cannot be read as the documents it should hold (a bad JSON line, a missing field);
    raised where it is found, in a worker or in the reader, and reported by main() as one line."""


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        die(f"{self.prog}: {message} (see --help)")


def one_line(e):
    return " ".join(str(e).split()) or type(e).__name__


def is_url(s):
    return urllib.parse.urlparse(s).scheme in ("http", "https")


# ---------------------------------------------------------------------------------------------------
# files: atomic writes, downloads


def write_tmp(path, chunks):
    """Writes the chunks to path.tmp, flushed to disk; returns (the .tmp path, the sha256 of the bytes)."""
    tmp = path + ".tmp"
    digest = hashlib.sha256()
    try:
        with open(tmp, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
                digest.update(chunk)
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        remove_quietly(tmp)
        die(f"{path}: cannot write: {e.strerror or e}")
    return tmp, digest.hexdigest()


def rename(tmp, path):
    try:
        os.replace(tmp, path)
    except OSError as e:
        die(f"{path}: cannot rename {tmp} into place: {e.strerror or e}")


def write_atomic(path, chunks):
    """Writes path whole or not at all (a reader never sees a part of it); returns its sha256."""
    tmp, digest = write_tmp(path, chunks)
    rename(tmp, path)
    return digest


def remove_quietly(path):
    try:
        os.remove(path)
    except OSError:
        pass


def make_dir(path):
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        die(f"{path}: cannot create --output_dir: {e.strerror or e}")


def read_range(path, start, count):
    """count bytes of the file at path from byte start, in blocks."""
    with open(path, "rb") as f:
        f.seek(start)
        while count > 0:
            block = f.read(min(count, COPY_BYTES))
            if not block:
                die(f"{path}: shorter than expected")
            count -= len(block)
            yield block


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


# ---------------------------------------------------------------------------------------------------
# inputs


def input_kind(path):
    """The extension of EXTENSIONS path ends with, or None."""
    return next((ext for ext in EXTENSIONS if path.endswith(ext)), None)


def directory_files(top):
    """The corpus files under a directory (hidden ones left out), in the order of their paths; prints how many
    other files it skipped."""
    found, others = [], 0
    for root, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for f in files:
            if f.startswith("."):
                continue
            if input_kind(f):
                found.append(os.path.join(root, f))
            else:
                others += 1
    if not found:
        die(f"{top}: no {', '.join(EXTENSIONS)} file in this --input directory")
    if others:
        print(f"{top}: {len(found)} corpus files; {others} other files skipped")
    return sorted(found)


def expand_inputs(specs):
    """The input files of the --input arguments, in order; each named once."""
    paths = []
    for spec in specs:
        if any(c in spec for c in "*?["):
            matches = sorted(glob.glob(spec, recursive=True))
            if not matches:
                die(f"{spec}: no file matches this --input pattern")
            for m in matches:
                paths += directory_files(m) if os.path.isdir(m) else [m]
        elif os.path.isdir(spec):
            paths += directory_files(spec)
        elif os.path.isfile(spec):
            paths.append(spec)
        else:
            die(f"{spec}: --input file not found")
    seen = set()
    for p in paths:
        if not input_kind(p):
            die(f"{p}: unknown input type (the inputs are {', '.join(EXTENSIONS)} files)")
        real = os.path.realpath(p)
        if real in seen:
            die(f"{p}: named twice by --input")
        seen.add(real)
    return paths


def input_identity(paths):
    """What a rerun compares to know that the inputs are the ones an earlier run read."""
    out = []
    for p in paths:
        st = os.stat(p)
        out.append([os.path.abspath(p), st.st_size, st.st_mtime_ns])
    return out


def default_name(specs):
    """The stem of a single input file, or the name of a single input directory."""
    if len(specs) != 1 or any(c in specs[0] for c in "*?["):
        die("--name is needed with several inputs or a glob (the files are named NAME_train_000000.bin ...)")
    base = os.path.basename(os.path.normpath(specs[0]))
    return base[:-len(input_kind(base))] if input_kind(base) else base


def check_parquet(path, field):
    """Refuses a parquet file without a string column --text_field before any work is done."""
    pq = import_for("pyarrow.parquet", f"{path}: reading .parquet")
    try:
        schema = pq.ParquetFile(path).schema_arrow
    except Exception as e:  # ArrowInvalid, OSError: not a parquet file
        die(f"{path}: not a readable parquet file: {one_line(e)}")
    if field not in schema.names:
        die(f"{path}: no column {field!r} (--text_field); its columns: {', '.join(schema.names)}")
    kind = str(schema.field(field).type)
    if kind not in ("string", "large_string", "string_view"):
        die(f"{path}: column {field!r} (--text_field) holds {kind}, not strings")


# ---------------------------------------------------------------------------------------------------
# reading: batches of documents, in input order
#
# A batch is (input index, first record, data, offset, final, bytes read): the records of one input from
# `first record` on. A record is a .txt piece, a .jsonl line or a parquet row; each gives one document, but
# a blank JSON line, which gives none. data: .txt and .jsonl: the bytes of whole records; parquet: a
# pyarrow string array. offset: .txt: the byte offset of data in the file (for errors). final: .txt: data
# ends the file (its last piece is a document). bytes read: of all inputs, for the progress line.


def last_blank_line_end(buf, start):
    """The end of the last match of buf.split(b"\\n\\n") that ends after start, or 0 when none. split
    matches "\\n\\n" from left to right, so in a run of k newlines it matches the first k//2 pairs; buf
    starts where a match ended, so a run that starts in buf is matched from its start."""
    p = buf.rfind(b"\n\n", max(0, start - 1))
    if p < 0:
        return 0
    run = p
    while run > 0 and buf[run - 1] == 0x0A:
        run -= 1
    return run + 2 * ((p + 2 - run) // 2)


def last_line_end(buf, start):
    return buf.rfind(b"\n", start) + 1


def blocks(f, cut_at):
    """(bytes, final) of the file f in blocks of about READ_BYTES, each cut after its last record
    (cut_at(buf, start of the bytes just read) says where; a record longer than a block makes a longer
    one); the final block holds the rest."""
    buf = bytearray()
    while True:
        block = f.read(READ_BYTES)
        if not block:
            yield bytes(buf), True
            return
        start = len(buf)
        buf += block
        cut = cut_at(buf, start)
        if cut:
            yield bytes(buf[:cut]), False
            del buf[:cut]


def skip_records(data, count, separator):
    """The byte offset after the first count records of data."""
    pos = 0
    for _ in range(count):
        pos = data.index(separator, pos) + len(separator)
    return pos


def read_text_records(kind, path, skip, read_before):
    """Batches of a .txt or .jsonl(.gz) input, from its record `skip` on."""
    separator = b"\n\n" if kind == ".txt" else b"\n"
    cut_at = last_blank_line_end if kind == ".txt" else last_line_end
    try:
        raw = open(path, "rb")
    except OSError as e:
        raise DataError(f"{path}: cannot read: {e.strerror or e}")
    with raw:
        f = gzip.GzipFile(fileobj=raw, mode="rb") if kind == ".jsonl.gz" else raw
        record, offset = 0, 0
        try:
            for data, final in blocks(f, cut_at):
                # records in data: one per separator, and for a .txt file's final block its last piece; a
                # .jsonl file's last line needs no newline
                count = data.count(separator)
                count += final and (kind == ".txt" or bool(data) and not data.endswith(b"\n"))
                if count and record + count > skip:
                    start = skip_records(data, max(0, skip - record), separator)
                    first = max(record, skip)
                    yield first, data[start:], offset + start, final, read_before + raw.tell()
                record += count
                offset += len(data)
        except (OSError, EOFError, zlib.error) as e:  # gzip.BadGzipFile is an OSError
            raise DataError(f"{path}: cannot read{' as gzip' if kind == '.jsonl.gz' else ''}: {one_line(e)}")


def read_parquet_records(path, skip, field, read_before):
    """Batches of a .parquet input's --text_field column, from its row `skip` on (whole row groups before
    it are not read)."""
    import pyarrow.parquet as pq

    size = os.path.getsize(path)
    try:
        pf = pq.ParquetFile(path)
        rows = pf.metadata.num_rows
        # the first row group that holds row skip, and the row it starts at
        ends = list(itertools.accumulate(pf.metadata.row_group(g).num_rows for g in range(pf.num_row_groups)))
        first_group = bisect.bisect_right(ends, skip)
        row = ends[first_group - 1] if first_group else 0
        groups = list(range(first_group, pf.num_row_groups))
        for batch in pf.iter_batches(batch_size=PARQUET_ROWS, row_groups=groups, columns=[field]):
            column = batch.column(0)
            start = min(len(column), max(0, skip - row))
            if start < len(column):
                yield row + start, column.slice(start), 0, False, read_before + size * (row + len(column)) // rows
            row += len(column)
    except (OSError, ValueError) as e:  # pyarrow's errors derive from these
        raise DataError(f"{path}: cannot read as parquet: {one_line(e)}")


def batches(inputs, start, field):
    """The batches of the inputs from position start = (input index, record, -) on."""
    sizes = [os.path.getsize(p) for p in inputs]
    for i in range(start[0], len(inputs)):
        path, kind = inputs[i], input_kind(inputs[i])
        skip = start[1] if i == start[0] else 0
        before = sum(sizes[:i])
        if kind == ".parquet":
            records = read_parquet_records(path, skip, field, before)
        else:
            records = read_text_records(kind, path, skip, before)
        for first, data, offset, final, read in records:
            yield i, first, data, offset, final, read


# ---------------------------------------------------------------------------------------------------
# tokenizers
#
# A tokenizer is loaded in every process that uses it: main() for the vocabulary and the document token,
# each worker for encode. Tokenizer(encode, vocab, doc_token, lookup): encode maps a list of documents to
# their token id lists (no document token); vocab() lists every token's bytes; doc_token() is the default
# document token (id, why), None for byte; lookup(text) is the id of the token with that text, or None.


class Tokenizer:
    def __init__(self, encode, vocab, doc_token, lookup, identity):
        self.encode, self.vocab, self.doc_token, self.lookup = encode, vocab, doc_token, lookup
        self.identity = identity  # what tokenizes: library version and file bytes, for the manifest


def import_for(module, what):
    """The module, or one line saying it is not installed."""
    try:
        return __import__(module, fromlist=["_"])
    except ImportError:
        package = module.split(".")[0]
        die(f"{what} needs the Python package {package}, which is not installed (pip install {package})")


def library_version(module):
    try:
        return importlib.metadata.version(module.__name__)
    except importlib.metadata.PackageNotFoundError:
        return "of unknown version"


def file_sha256(path):
    digest = hashlib.sha256()
    for block in read_range(path, 0, os.path.getsize(path)):
        digest.update(block)
    return digest.hexdigest()


# Llama 3's pre-tokenizer split, and the names of its 256 special tokens, which follow the BPE ranks
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                  "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|step_id|>",
                  "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"]
LLAMA3_SPECIAL += [f"<|reserved_special_token_{i}|>" for i in range(2, 258 - len(LLAMA3_SPECIAL))]


def tiktoken_tokenizer(enc, doc_token, identity):
    def lookup(text):
        try:
            return enc.encode_single_token(text)
        except KeyError:
            return None

    return Tokenizer(lambda docs: [enc.encode_ordinary(d) for d in docs],
                     lambda: [enc.decode_single_token_bytes(i) for i in range(enc.n_vocab)],
                     lambda: doc_token, lookup, identity)


def load_gpt2():
    try:
        import tiktoken

        enc = tiktoken.get_encoding("gpt2")
    except Exception as e:  # ImportError, or the vocabulary download failing
        die("--tokenizer gpt2 needs tiktoken with its gpt2 vocabulary "
            f"(pip install tiktoken; needs internet on first use): {one_line(e)}")
    return tiktoken_tokenizer(enc, (enc.eot_token, "<|endoftext|>"), f"tiktoken {library_version(tiktoken)} gpt2")


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
    tiktoken = import_for("tiktoken", "--tokenizer llama3")
    ranks = read_bpe_ranks(path)
    special = {name: len(ranks) + i for i, name in enumerate(LLAMA3_SPECIAL)}
    enc = tiktoken.Encoding(name="llama3", pat_str=LLAMA3_PATTERN, mergeable_ranks=ranks,
                            special_tokens=special)
    return tiktoken_tokenizer(enc, (special["<|begin_of_text|>"], "<|begin_of_text|>"),
                              f"tiktoken {library_version(tiktoken)} {file_sha256(path)}")


def load_llama2(path):
    spm = import_for("sentencepiece", "--tokenizer llama2")
    try:
        sp = spm.SentencePieceProcessor(model_file=path)
    except Exception as e:  # sentencepiece raises OSError or RuntimeError on what it cannot parse
        die(f"{path}: not a sentencepiece model: {one_line(e)}")
    if sp.bos_id() < 0:
        die(f"{path}: the sentencepiece model has no bos token (it begins each document)")

    def vocab():
        pieces = []
        for i in range(sp.get_piece_size()):
            piece = sp.id_to_piece(i)
            if sp.is_byte(i):  # a byte-fallback piece, "<0x0A>", stands for that byte
                pieces.append(bytes([int(piece[3:5], 16)]))
            else:  # U+2581 marks a space; control pieces (<s>, </s>, <unk>) are written as their names
                pieces.append(piece.replace("\u2581", " ").encode("utf-8"))
        return pieces

    def lookup(text):
        i = sp.piece_to_id(text)  # the unknown piece's id when text is no piece
        return i if sp.id_to_piece(i) == text else None

    return Tokenizer(lambda docs: sp.encode(docs, num_threads=1), vocab,
                     lambda: (sp.bos_id(), sp.id_to_piece(sp.bos_id())), lookup,
                     f"sentencepiece {library_version(spm)} {file_sha256(path)}")


def hf_or_die(function, *args):
    try:
        return function(*args)
    except hf_tokenizer.TokenizerRefused as e:
        die(str(e))


def hf_encode(tok):
    """encode(documents) with a tokenizers.Tokenizer."""
    tok.encode_special_tokens = True  # a special token's text in a document is tokenized as text
    encode_batch = getattr(tok, "encode_batch_fast", tok.encode_batch)  # _fast: no offsets (tokenizers 0.21)
    return lambda docs: [e.ids for e in encode_batch(docs, add_special_tokens=False)]


def load_hf(path):
    hf = hf_or_die(hf_tokenizer.load, path)
    import tokenizers

    config = file_sha256(hf.config_path) if hf.config else None
    def doc_token():
        i, text, why = hf_or_die(hf_tokenizer.document_token, hf)
        return i, f"{text} ({why})"

    return Tokenizer(hf_encode(hf.tokenizer), lambda: hf_or_die(hf_tokenizer.token_bytes, hf), doc_token,
                     hf.tokenizer.token_to_id,
                     f"tokenizers {library_version(tokenizers)} {file_sha256(hf.path)} {config}")


def load_tokenizer(kind, path):
    if kind == "byte":
        return Tokenizer(lambda docs: [d if isinstance(d, bytes) else d.encode("utf-8") for d in docs],
                         lambda: [bytes([i]) for i in range(256)], lambda: None, lambda text: None, "byte")
    return {"gpt2": lambda _: load_gpt2(), "llama3": load_llama3, "llama2": load_llama2, "hf": load_hf}[kind](path)


# ---------------------------------------------------------------------------------------------------
# the workers: a batch of records to its tokens

worker = None  # this process's Worker, set by start_worker


class Worker:
    def __init__(self, kind, path, inputs, doc_token, typecode, field):
        self.kind, self.inputs, self.doc_token, self.typecode, self.field = kind, inputs, doc_token, typecode, field
        # of an hf tokenizer, only what encodes: its tokenizer.json, not the vocabulary's bytes
        self.encode = hf_encode(hf_or_die(hf_tokenizer.encoder, path)) if kind == "hf" else \
            load_tokenizer(kind, path).encode


def end_with_parent(parent):
    """Ends this worker once its parent is gone (killed: a pool's worker waiting for work would never see
    its queue close, because it holds that queue's write end itself)."""
    while os.getppid() == parent:
        time.sleep(1)
    os._exit(1)


def start_worker(kind, path, inputs, doc_token, typecode, field, pooled, threads):
    """Makes this process a worker (the main process itself where not pooled), with threads of the tokenizers
    library (an hf tokenizer's; set before its first use, which starts them)."""
    global worker
    os.environ["TOKENIZERS_PARALLELISM"] = "true" if threads > 1 else "false"
    os.environ["RAYON_NUM_THREADS"] = str(threads)
    if pooled:
        threading.Thread(target=end_with_parent, args=(os.getppid(),), daemon=True).start()
    worker = Worker(kind, path, inputs, doc_token, typecode, field)


def documents(path, data, offset, final, first_record, field, decode):
    """The documents of a batch's records, one per record (None for a blank JSON line)."""
    kind = input_kind(path)
    if kind == ".parquet":
        if data.null_count:
            row = next(i for i, v in enumerate(data.is_null().to_pylist()) if v)
            raise DataError(f"{path}: row {first_record + row}: {field!r} (--text_field) is null")
        return data.to_pylist()
    if kind == ".txt":
        if decode:
            try:
                data = data.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataError(f"{path}: not valid UTF-8 at byte {offset + e.start} (the tokenizers read "
                                "UTF-8 text)")
        separator = "\n\n" if decode else b"\n\n"
        pieces = data.split(separator)
        docs = [p + separator for p in pieces[:-1]]
        return docs + pieces[-1:] if final else docs
    lines = data.split(b"\n")
    if data.endswith(b"\n"):
        lines.pop()
    docs = []
    for k, line in enumerate(lines):
        where = f"{path}: line {first_record + k + 1}"
        if not line.strip():
            docs.append(None)
            continue
        try:
            record = json.loads(line)
        except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
            raise DataError(f"{where} is not valid JSON: {one_line(e)}")
        if not isinstance(record, dict):
            raise DataError(f"{where} is not a JSON object")
        if field not in record:
            raise DataError(f"{where} has no field {field!r} (--text_field)")
        if not isinstance(record[field], str):
            raise DataError(f"{where}: field {field!r} (--text_field) is {type(record[field]).__name__}, not a string")
        docs.append(record[field])
    return docs


def is_utf8(text):
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def tokenize_batch(batch):
    """(input index, first record, tokens as little-endian bytes, tokens per record) of a batch."""
    i, first, data, offset, final, read = batch
    w = worker
    path = w.inputs[i]
    docs = documents(path, data, offset, final, first, w.field, decode=w.kind != "byte")
    try:
        ids = iter(w.encode([d for d in docs if d is not None]))
    except (TypeError, ValueError):  # the tokenizers' complaint about a text that is not UTF-8 (or another)
        bad = next((k for k, d in enumerate(docs) if isinstance(d, str) and not is_utf8(d)), None)
        if bad is None:
            raise
        raise DataError(f"{path}: line {first + bad + 1} holds an unpaired surrogate (a JSON \\ud800 escape "
                        "that is no character): not text the tokenizer can read")
    tokens, counts = array(w.typecode), array("I")
    for d in docs:
        if d is None:
            counts.append(0)
            continue
        doc = next(ids)
        if w.doc_token is not None:
            tokens.append(w.doc_token)
        tokens.extend(doc)
        counts.append(len(doc) + (w.doc_token is not None))
    if sys.byteorder != "little":
        tokens.byteswap()
    return i, first, tokens.tobytes(), counts, read


def shard_ok(args):
    """Whether the shard file is the one the manifest recorded: size, header, sha256."""
    path, ntokens, sha, fmt = args
    magic, version, typecode = SHARD_FORMATS[fmt]
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            header = struct.unpack("<3i", f.read(12))
    except (OSError, struct.error):
        return False
    if size != SHARD_HEADER_BYTES + array(typecode).itemsize * ntokens or header != (magic, version, ntokens):
        return False
    return file_sha256(path) == sha


# ---------------------------------------------------------------------------------------------------
# the shards


def shard_header(ntokens, fmt):
    magic, version, _ = SHARD_FORMATS[fmt]
    return struct.pack("<256i", magic, version, ntokens, *([0] * 253))


def split_evenly(n, max_per_shard):
    """Boundaries of ceil(n / max_per_shard) consecutive pieces of nearly equal size."""
    pieces = max(1, -(-n // max_per_shard))
    return [n * k // pieces for k in range(pieces + 1)]


class Ledger:
    """Where the tokens of the stream came from, batch by batch, back to the oldest token not yet in a
    complete shard: a shard's end is recorded as a position (input index, record, tokens of that record
    before the end), which a rerun resumes from."""

    def __init__(self):
        self.batches = deque()  # (stream index of the batch's first token, input index, first record,
                                #  cumulative token counts of its records)

    def add(self, start, i, first, counts):
        self.batches.append((start, i, first, list(itertools.accumulate(counts))))

    def position(self, t):
        """The position of the stream's token t (t may be the end of the last batch)."""
        for start, i, first, ends in self.batches:
            if ends and t < start + ends[-1]:
                r = bisect.bisect_right(ends, t - start)
                return [i, first + r, t - start - (ends[r - 1] if r else 0)]
        start, i, first, ends = self.batches[-1]
        return [i, first + len(ends), 0]

    def forget_before(self, t):
        while len(self.batches) > 1 and self.batches[0][0] + (self.batches[0][3] or [0])[-1] <= t:
            self.batches.popleft()


class Manifest:
    """NAME_manifest.json: settings, inputs, the validation split's size once known, each complete shard."""

    def __init__(self, path, settings, inputs):
        self.path = path
        self.data = {"settings": settings, "inputs": inputs, "val_tokens": None, "shards": [], "complete": False}

    def save(self):
        write_atomic(self.path, [json.dumps(self.data, indent=1).encode()])

    def add(self, shard):
        self.data["shards"].append(shard)
        self.save()


class ShardWriter:
    """Cuts the token stream into the val shards, then the train shards, by the rules of the docstring.
    The tokens of the shard being filled are held in memory (buf); a full train shard waits as a .tmp file
    (held) until the next one fills, so that the last two can share the remainder."""

    def __init__(self, out_dir, name, fmt, shard_tokens, val_tokens, val_fraction, manifest, begin):
        self.out_dir, self.name, self.fmt = out_dir, name, fmt
        self.begin = begin  # called once, before the first file is written
        self.width = array(SHARD_FORMATS[fmt][2]).itemsize
        self.shard_tokens, self.val_fraction, self.manifest = shard_tokens, val_fraction, manifest
        shards = manifest.data["shards"]
        self.n_val = val_tokens if val_tokens is not None else manifest.data["val_tokens"]
        self.start = sum(s["tokens"] for s in shards)  # stream index of buf's first token
        self.counts = {"val": sum(s["file"].startswith(f"{name}_val_") for s in shards)}
        self.counts["train"] = len(shards) - self.counts["val"]
        self.buf = bytearray()
        self.held = None  # (.tmp path, shard record) of a full train shard not yet renamed
        self.ledger = Ledger()

    def write_tmp(self, path, chunks):
        if self.begin:
            self.begin()
            self.begin = None
        return write_tmp(path, chunks)

    def tokens(self):
        """The stream's length so far."""
        return self.start + len(self.buf) // self.width

    def add(self, tokens, i, first, counts, skip=0):
        """Appends a batch's tokens, less its first skip (already in a shard), and writes what fills."""
        self.ledger.add(self.tokens() - skip, i, first, counts)
        self.buf += tokens[skip * self.width:]
        while True:
            if self.n_val is None and self.tokens() >= self.shard_tokens:
                self.decide_val(int(self.val_fraction * self.shard_tokens))
            end = self.shard_end()
            if end is None or self.tokens() < end:
                break
            self.cut(end)

    def decide_val(self, n_val):
        self.n_val = n_val
        self.manifest.data["val_tokens"] = n_val

    def shard_end(self):
        """The stream index where the shard being filled ends (None while the split is undecided)."""
        if self.n_val is None:
            return None
        if self.start < self.n_val:
            bounds = split_evenly(self.n_val, self.shard_tokens)
            return bounds[bounds.index(self.start) + 1]
        return self.start + self.shard_tokens

    def shard_record(self, split, ntokens):
        """The manifest's record of the next shard of split, which ends ntokens after start."""
        name = f"{self.name}_{split}_{self.counts[split]:06d}.bin"
        self.counts[split] += 1
        return {"file": name, "tokens": ntokens, "sha256": None,
                "end": self.ledger.position(self.start + ntokens)}

    def cut(self, end):
        """Writes buf's tokens up to stream index end as the next shard."""
        n = end - self.start
        split = "val" if self.start < self.n_val else "train"
        shard = self.shard_record(split, n)
        path = os.path.join(self.out_dir, shard["file"])
        with memoryview(self.buf) as view:  # no copy of the shard's tokens
            tmp, shard["sha256"] = self.write_tmp(path, [shard_header(n, self.fmt), view[:n * self.width]])
        del self.buf[:n * self.width]
        start, self.start = self.start, end
        if split == "val":
            self.complete(tmp, shard)
            self.ledger.forget_before(end)
            return
        if self.held:
            self.complete(*self.held)
        self.held = (tmp, shard)
        self.ledger.forget_before(start)

    def complete(self, tmp, shard):
        path = os.path.join(self.out_dir, shard["file"])
        rename(tmp, path)
        self.manifest.add(shard)
        print(f"wrote {path}: {shard['tokens']} tokens", flush=True)

    def finish(self, source):
        """Writes the rest at the end of the stream: the split if it waited for the total, the last train
        shards."""
        total = self.tokens()
        if total == 0:
            die(f"{source}: no documents in the inputs")
        if self.n_val is None:
            self.decide_val(int(self.val_fraction * total))
        if self.n_val < 1 or total <= self.n_val:
            split = f"--val_fraction {self.val_fraction}" if self.val_fraction is not None else f"--val_tokens {self.n_val}"
            die(f"{source}: {total} tokens are too few for a validation split of {split} and a train split")
        while self.start < self.n_val:
            self.cut(self.shard_end())
        rest = total - self.start
        if self.held and rest:
            self.share_remainder(rest)
        elif self.held:
            self.complete(*self.held)
        elif rest:
            self.cut(total)
            self.complete(*self.held)
        self.manifest.data["complete"] = True
        self.manifest.data["tokens"] = total
        if self.begin:  # a resumed run that had nothing left to write
            self.begin()
        self.manifest.save()

    def share_remainder(self, rest):
        """The held shard and the rest become two shards of nearly equal size."""
        tmp = self.held[0]
        self.counts["train"] -= 1  # the held shard's number is the first of the two
        n = self.shard_tokens + rest
        first = n // 2
        held_start = self.start - self.shard_tokens
        body = SHARD_HEADER_BYTES + first * self.width
        self.start = held_start
        for ntokens, chunks in ((first, read_range(tmp, SHARD_HEADER_BYTES, first * self.width)),
                                (n - first, itertools.chain(read_range(tmp, body, (self.shard_tokens - first) * self.width),
                                                            [bytes(self.buf)]))):
            shard = self.shard_record("train", ntokens)
            path = os.path.join(self.out_dir, shard["file"])
            part, shard["sha256"] = self.write_tmp(path + ".part",
                                                   itertools.chain([shard_header(ntokens, self.fmt)], chunks))
            self.complete(part, shard)
            self.start += ntokens
        remove_quietly(tmp)
        self.buf = bytearray()


# ---------------------------------------------------------------------------------------------------
# resume


SHARD_FILE_PARTS = ("val", "train")


def is_shard_file(fname, name):
    """Whether fname is one of this name's shard files, or a temporary file of one."""
    for split in SHARD_FILE_PARTS:
        prefix = f"{name}_{split}_"
        if fname.startswith(prefix):
            rest = fname[len(prefix):].split(".", 1)
            return len(rest) == 2 and rest[0].isdigit() and rest[1] in ("bin", "bin.tmp", "bin.part.tmp")
    return False


def earlier_run(manifest, fmt, pool_map):
    """The shards of an earlier run with the same settings and inputs that can be kept: the longest prefix
    of the manifest's shards whose files check, less the train shards shorter than a full shard (the
    last two of a complete run). Returns (shards kept, the validation split's size, complete)."""
    path = manifest.path
    try:
        with open(path) as f:
            earlier = json.load(f)
        same = earlier["settings"] == manifest.data["settings"]
        inputs_same = earlier["inputs"] == manifest.data["inputs"]
        shards = earlier["shards"]
    except FileNotFoundError:
        return [], None, False
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"{path}: not a manifest this script wrote ({one_line(e)}): starting over")
        return [], None, False
    if not same:
        changed = [k for k in manifest.data["settings"] if earlier["settings"].get(k) != manifest.data["settings"][k]]
        print(f"{path}: the earlier run had other settings ({', '.join(changed)}): starting over")
        return [], None, False
    if not inputs_same:
        print(f"{path}: the inputs are not the earlier run's (paths, sizes or modification times): starting over")
        return [], None, False
    out_dir = os.path.dirname(path)
    checks = pool_map(shard_ok, [(os.path.join(out_dir, s["file"]), s["tokens"], s["sha256"], fmt) for s in shards])
    kept = []
    for shard, ok in zip(shards, checks):
        if not ok:
            print(f"{os.path.join(out_dir, shard['file'])}: not the shard the manifest recorded: "
                  "writing it and those after it again")
            break
        kept.append(shard)
    if len(kept) == len(shards) and earlier.get("complete"):
        return kept, earlier["val_tokens"], True
    shard_tokens = manifest.data["settings"]["shard_tokens"]
    while kept and "_train_" in kept[-1]["file"] and kept[-1]["tokens"] != shard_tokens:
        kept.pop()
    return kept, earlier["val_tokens"] if kept else None, False


def remove_stale(out_dir, name, keep):
    """Removes this name's shard files and temporary files that are not in keep."""
    removed = 0
    for fname in sorted(os.listdir(out_dir)):
        if is_shard_file(fname, name) and fname not in keep:
            os.remove(os.path.join(out_dir, fname))
            removed += 1
    if removed:
        print(f"removed {removed} shard or temporary files of an earlier run ({os.path.join(out_dir, name)}_*)")


# ---------------------------------------------------------------------------------------------------
# progress


def duration(seconds):
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class Progress:
    """A line every PROGRESS_SECONDS: the share of the input bytes read, tokens, tokens/s, time left."""

    def __init__(self, total_bytes, tokens):
        self.total, self.t0, self.last = max(1, total_bytes), time.monotonic(), time.monotonic()
        self.tokens0, self.read0 = tokens, None

    def update(self, read, tokens, final=False):
        now = time.monotonic()
        if self.read0 is None:
            self.read0 = read  # resumed runs skip the bytes before their start: count from here
        if not final and now - self.last < PROGRESS_SECONDS:
            return
        self.last = now
        elapsed = max(now - self.t0, 1e-9)
        rate = (tokens - self.tokens0) / elapsed
        done = read / self.total
        left = (self.total - read) * elapsed / max(read - self.read0, 1)
        print(f"{100 * done:5.1f}% of {self.total / 1e6:.1f} MB read, {tokens / 1e6:.2f}M tokens, "
              f"{rate / 1e6:.3f}M tokens/s, {duration(elapsed)} elapsed" +
              ("" if final else f", {duration(left)} left"), flush=True)


# ---------------------------------------------------------------------------------------------------


def parse_args():
    p = OneLineParser(description="Tokenize a corpus into llm.c token shards.")
    p.add_argument("--input", nargs="+", help="files, directories or globs of .txt, .jsonl, .jsonl.gz, .parquet, "
                   "or an http(s) URL (default: download tinyshakespeare)")
    p.add_argument("--output_dir", default="data", help="directory for the output files (default: data)")
    p.add_argument("--name", help="file name prefix (default: the single input's stem)")
    p.add_argument("--tokenizer", choices=["byte", "gpt2", "llama3", "llama2", "hf"], default="byte",
                   help="default: byte")
    p.add_argument("--tokenizer_file", help="llama3: the tiktoken BPE ranks file (Llama 3's tokenizer.model); "
                   "llama2: the sentencepiece tokenizer.model; hf: a tokenizer.json or a checkpoint directory")
    p.add_argument("--doc_token", help="the text of the token that begins each document (default: the "
                   "tokenizer's bos token, else <|endoftext|>)")
    p.add_argument("--text_field", default="text", help="the documents' field of .jsonl and .parquet inputs "
                   "(default: text)")
    p.add_argument("--workers", type=int, help="tokenizing processes (default: the cores this process may use; "
                   "hf: one for each 8 of them, each running the tokenizers library's threads on its share)")
    p.add_argument("--shard_format", choices=["auto", *SHARD_FORMATS], default="auto",
                   help="token width of the shards (default auto: uint32 when the vocabulary exceeds 65536)")
    p.add_argument("--val_fraction", type=float, help="share of the tokens, counting at most the first "
                   "--shard_tokens, for validation (default 0.1)")
    p.add_argument("--val_tokens", type=int, help="the first N tokens for validation (instead of --val_fraction)")
    p.add_argument("--shard_tokens", type=int, default=100_000_000, help="tokens per shard (default 1e8)")
    args = p.parse_args()

    if args.val_tokens is not None and args.val_fraction is not None:
        die("--val_tokens and --val_fraction: give one of them")
    if args.val_tokens is None and args.val_fraction is None:
        args.val_fraction = 0.1
    if args.val_fraction is not None and not 0.0 < args.val_fraction < 1.0:
        die(f"--val_fraction {args.val_fraction} must be in (0, 1)")
    if args.val_tokens is not None and args.val_tokens < 1:
        die(f"--val_tokens {args.val_tokens} must be at least 1")
    if not 1 <= args.shard_tokens <= MAX_SHARD_TOKENS:
        die(f"--shard_tokens {args.shard_tokens} must be in [1, {MAX_SHARD_TOKENS}]")
    args.cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if args.workers is None:
        args.workers = -(-args.cores // HF_CORES_PER_WORKER) if args.tokenizer == "hf" else args.cores
    if args.workers < 1:
        die(f"--workers {args.workers} must be at least 1")
    if args.name is not None and (not args.name or "/" in args.name or args.name in (".", "..")):
        die(f"--name {args.name!r} must be a plain file name prefix")
    file_tokenizer = args.tokenizer in ("llama3", "llama2", "hf")
    if file_tokenizer and args.tokenizer_file is None:
        die(f"--tokenizer {args.tokenizer} needs --tokenizer_file")
    if not file_tokenizer and args.tokenizer_file is not None:
        die(f"--tokenizer_file is for --tokenizer llama3, llama2 or hf, not {args.tokenizer}")
    if file_tokenizer and not os.path.exists(args.tokenizer_file):
        die(f"{args.tokenizer_file}: --tokenizer_file not found")
    if args.tokenizer == "byte" and args.doc_token is not None:
        die("--doc_token is not for --tokenizer byte, which puts no token between documents")
    return args


def open_inputs(args):
    """(input files, NAME), downloading a URL input into --output_dir first."""
    specs = args.input
    if specs is None or (len(specs) == 1 and is_url(specs[0])):
        url = specs[0] if specs else TINYSHAKESPEARE_URL
        stem = "tinyshakespeare" if specs is None else \
            os.path.splitext(os.path.basename(urllib.parse.urlparse(url).path))[0] or "download"
        name = args.name or stem
        path = os.path.join(args.output_dir, name + ".txt")
        make_dir(args.output_dir)
        download(url, path)
        return [path], name
    inputs = expand_inputs(specs)
    for p in inputs:
        if input_kind(p) == ".parquet":
            check_parquet(p, args.text_field)
    return inputs, args.name or default_name(specs)


def choose_doc_token(args, tok):
    """(id, why) of the document token, None for the byte tokenizer."""
    if args.doc_token is None:
        return tok.doc_token()
    i = tok.lookup(args.doc_token)
    if i is None:
        die(f"--doc_token {args.doc_token!r}: not a token of the {args.tokenizer} tokenizer")
    return i, f"{args.doc_token} (--doc_token)"


def in_order(pool, work, tasks, window):
    """work(task) for each task on the pool, the results in the tasks' order, with at most window tasks
    read ahead of the result being waited for (so that memory does not grow with the corpus)."""
    pending = deque()
    for task in tasks:
        pending.append(pool.submit(work, task))
        if len(pending) == window:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()


def tokenizer_file(args):
    """(the llm.c tokenizer file's bytes, V, the document token (id, why) or None, what tokenizes) of the
    --tokenizer; what the main process keeps of it (a vocabulary's objects take hundreds of MB)."""
    tok = load_tokenizer(args.tokenizer, args.tokenizer_file)
    vocab = tok.vocab()
    doc = choose_doc_token(args, tok)
    source = args.tokenizer_file or f"--tokenizer {args.tokenizer}"
    try:
        return hf_tokenizer.llmc_tokenizer_bytes(vocab, doc[0] if doc else 0, source), len(vocab), doc, tok.identity
    except hf_tokenizer.TokenizerRefused as e:
        die(str(e))


def main():
    args = parse_args()
    inputs, name = open_inputs(args)
    tokenizer_bytes, vocab_size, doc, identity = tokenizer_file(args)
    fmt = args.shard_format
    if fmt == "auto":
        fmt = "uint32" if vocab_size > 65536 else "uint16"
    if fmt == "uint16" and vocab_size > 65536:
        die(f"--shard_format uint16 holds token ids below 65536, but the {args.tokenizer} vocabulary has "
            f"{vocab_size} tokens (use uint32)")

    settings = {"rules": STREAM_RULES, "tokenizer": args.tokenizer, "tokenizer_identity": identity,
                "tokenizer_file_sha256": hashlib.sha256(tokenizer_bytes).hexdigest(),
                "doc_token": doc[0] if doc else None, "text_field": args.text_field,
                "shard_tokens": args.shard_tokens, "shard_format": fmt, "val_tokens": args.val_tokens,
                "val_fraction": args.val_fraction}
    manifest = Manifest(os.path.join(args.output_dir, f"{name}_manifest.json"), settings, input_identity(inputs))
    threads = max(1, args.cores // args.workers) if args.tokenizer == "hf" else 1
    describe = inputs[0] if len(inputs) == 1 else f"--input {' '.join(args.input)} ({len(inputs)} files)"
    print(f"{describe}: {args.tokenizer} tokenizer, V={vocab_size}, {fmt} shards of {args.shard_tokens} tokens, "
          f"{args.workers} worker{'s' if args.workers > 1 else ''}" +
          (f" of {threads} threads" if threads > 1 else "") +
          (f", documents begin with {doc[1]} = {doc[0]}" if doc else ""))

    pooled = args.workers > 1
    worker_args = (args.tokenizer, args.tokenizer_file, inputs, doc[0] if doc else None, SHARD_FORMATS[fmt][2],
                   args.text_field, pooled, threads)
    # a process pool that notices a worker killed (by the kernel's out-of-memory killer, say), where
    # multiprocessing.Pool would wait for its result for ever
    pool = ProcessPoolExecutor(args.workers, initializer=start_worker, initargs=worker_args) if pooled else None
    try:
        if pool:
            pool_map = lambda f, xs: list(pool.map(f, xs))
            ordered_map = lambda f, tasks: in_order(pool, f, tasks, 2 * args.workers + 2)
        else:
            start_worker(*worker_args)
            pool_map = ordered_map = lambda f, xs: map(f, xs)
        prepare(args, name, inputs, fmt, tokenizer_bytes, manifest, describe, pool_map, ordered_map)
    except DataError as e:
        die(str(e))
    except BrokenProcessPool:
        die("a worker process ended before finishing its batch (killed? out of memory?); a rerun resumes")
    finally:
        if pool:
            pool.shutdown(cancel_futures=True)  # the batches being tokenized end first (a second or so)


def prepare(args, name, inputs, fmt, tokenizer_bytes, manifest, describe, pool_map, ordered_map):
    """Writes the tokenizer file and the shards, resuming an earlier run of the same settings and inputs."""
    kept, val_tokens, complete = earlier_run(manifest, fmt, pool_map)
    tokenizer_path = os.path.join(args.output_dir, f"{name}_tokenizer.bin")
    if complete:
        write_atomic(tokenizer_path, [tokenizer_bytes])
        print(f"{manifest.path}: an earlier run wrote these {len(kept)} shards from these inputs with these "
              "settings, and they check: nothing to do")
        return
    manifest.data["shards"], manifest.data["val_tokens"] = kept, val_tokens

    def begin():
        """Readies the output directory when the first shard is about to be written, so that an input refused
        before then leaves nothing behind (and an earlier run's files stay until then)."""
        make_dir(args.output_dir)
        remove_stale(args.output_dir, name, {s["file"] for s in kept})
        write_atomic(tokenizer_path, [tokenizer_bytes])
        manifest.save()

    writer = ShardWriter(args.output_dir, name, fmt, args.shard_tokens, args.val_tokens, args.val_fraction, manifest,
                         begin)
    start = kept[-1]["end"] if kept else [0, 0, 0]
    if kept:
        print(f"resuming after {len(kept)} complete shards ({writer.tokens()} tokens), at input {start[0]} "
              f"({inputs[start[0]] if start[0] < len(inputs) else 'the end'}), record {start[1]}")
    tasks = batches(inputs, start, args.text_field)
    results = ordered_map(tokenize_batch, tasks)
    progress = Progress(sum(os.path.getsize(p) for p in inputs), writer.tokens())
    skip = start[2]  # tokens of the first record already in a shard
    for i, first, tokens, counts, read in results:
        writer.add(tokens, i, first, counts, skip)
        skip = 0
        progress.update(read, writer.tokens())
    writer.finish(describe)
    progress.update(progress.total, writer.tokens(), final=True)
    shards = manifest.data["shards"]
    print(f"{describe}: {writer.tokens()} tokens -> {len(shards)} shards in {args.output_dir} "
          f"({manifest.data['val_tokens']} val tokens), {name}_tokenizer.bin, {name}_manifest.json")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes a multiple-choice eval file in llm.c's format for the trainers' --eval_data.

    python3 scripts/prepare_eval.py hellaswag [--input FILE.jsonl] [--output FILE]
        [--tokenizer byte|gpt2|llama3|llama2|hf] [--tokenizer_file PATH]

hellaswag: HellaSwag's validation set (10,042 examples), downloaded from its public source
(https://raw.githubusercontent.com/rowanz/hellaswag/master/data/hellaswag_val.jsonl) into the --output's
directory and kept there, or read from --input, a local jsonl in HellaSwag's schema (one JSON object a line
with "ctx", a list "endings" and the integer "label" of the correct one). Each example is tokenized as llm.c's
dev/data/hellaswag.py tokenizes it: the context, and each ending with a space before it (" " + ending),
separately. The tokenizers are scripts/prepare_data.py's (the same --tokenizer and --tokenizer_file): use the
one the model was trained with.

The file (default data/hellaswag_val.bin) is what llm.c's dev/data/data_common.py write_evalfile writes: a
header of 256 int32 (magic 20240522, version 1, the number of examples, the longest example's bytes), then
each example as uint16: 65535, its bytes, its index, its label, its number of endings, the context's token
count and tokens, each ending's token count and tokens (core/eval_data.h reads it). Token ids must fit
uint16 (vocabularies of at most 65535 tokens: Llama 3's 128256 do not), an example 65535 bytes, a file 65535
examples. It is written whole or not at all.

Python standard library, plus the tokenizer's package (prepare_data.py says which).
"""
import argparse
import json
import os
import struct
import sys
from array import array

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import prepare_data  # noqa: E402  (its tokenizers, downloads and atomic writes)

HELLASWAG_VAL_URL = "https://raw.githubusercontent.com/rowanz/hellaswag/master/data/hellaswag_val.jsonl"
EVAL_MAGIC, EVAL_VERSION, START_EXAMPLE = 20240522, 1, 65535
die = prepare_data.die


def read_examples(path):
    """[(context, endings, label)] of a HellaSwag-schema jsonl; a bad line is one error naming it."""
    examples = []
    try:
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    e = json.loads(line)
                    ctx, endings, label = e["ctx"], e["endings"], e["label"]
                except (ValueError, KeyError, TypeError) as err:
                    die(f"{path}: line {number}: not a HellaSwag example ({prepare_data.one_line(err)}; needs ctx, "
                        "endings, label)")
                if not (isinstance(ctx, str) and isinstance(endings, list) and endings
                        and all(isinstance(x, str) for x in endings)):
                    die(f"{path}: line {number}: ctx must be a string and endings a non-empty list of strings")
                if not (isinstance(label, int) and 0 <= label < len(endings)):
                    die(f"{path}: line {number}: label {label!r} is not the index of one of its "
                        f"{len(endings)} endings")
                examples.append((ctx, endings, label))
    except OSError as e:
        die(f"{path}: cannot read --input: {e.strerror or e}")
    except UnicodeDecodeError as e:
        die(f"{path}: not UTF-8 text: {prepare_data.one_line(e)}")
    if not examples:
        die(f"{path}: no examples")
    return examples


def example_stream(index, label, ctx_tokens, ending_tokens, where):
    """One example's uint16s, its byte count in its second field."""
    stream = array("H", [START_EXAMPLE, 0, index, label, len(ending_tokens), len(ctx_tokens)])
    for part in [ctx_tokens] + [[len(e)] + e for e in ending_tokens]:
        bad = next((t for t in part if not 0 <= t < START_EXAMPLE), None)
        if bad is not None:
            die(f"{where}: token id {bad} does not fit llm.c's eval file (uint16 ids below 65535)")
        stream.extend(part)
    if 2 * len(stream) >= 65536:
        die(f"{where}: {2 * len(stream)} bytes, more than an example of llm.c's eval file holds (65535)")
    stream[1] = 2 * len(stream)
    return stream


def eval_file_chunks(examples, tokenizer, source):
    if len(examples) >= 65536:
        die(f"{source}: {len(examples)} examples, more than llm.c's eval file numbers (65535)")
    contexts = tokenizer.encode([ctx for ctx, _, _ in examples])
    endings = tokenizer.encode([" " + end for _, ends, _ in examples for end in ends])
    streams, at = [], 0
    for i, ((_, ends, label), ctx_tokens) in enumerate(zip(examples, contexts)):
        mine, at = [list(e) for e in endings[at:at + len(ends)]], at + len(ends)
        where = f"{source}: example {i}"
        if not ctx_tokens or not all(mine):
            die(f"{where}: its context or an ending tokenizes to no tokens")
        streams.append(example_stream(i, label, list(ctx_tokens), mine, where))
    longest = max(2 * len(s) for s in streams)
    header = struct.pack("<256i", EVAL_MAGIC, EVAL_VERSION, len(examples), longest, *[0] * 252)
    if sys.byteorder != "little":
        for s in streams:
            s.byteswap()
    return [header] + [s.tobytes() for s in streams], longest


def main():
    p = prepare_data.OneLineParser(description="Write an llm.c eval file (HellaSwag) for --eval_data.")
    p.add_argument("dataset", choices=["hellaswag"])
    p.add_argument("--input", help="a local HellaSwag-schema jsonl (default: download the validation set)")
    p.add_argument("--output", default="data/hellaswag_val.bin", help="default: data/hellaswag_val.bin")
    p.add_argument("--tokenizer", choices=["byte", "gpt2", "llama3", "llama2", "hf"], default="gpt2",
                   help="default: gpt2 (as llm.c)")
    p.add_argument("--tokenizer_file", help="as prepare_data.py's: llama3's BPE ranks file, llama2's "
                   "tokenizer.model, hf's tokenizer.json or checkpoint directory")
    args = p.parse_args()
    if args.tokenizer in ("llama3", "llama2", "hf") and not args.tokenizer_file:
        die(f"--tokenizer {args.tokenizer} needs --tokenizer_file")
    out_dir = os.path.dirname(args.output) or "."
    prepare_data.make_dir(out_dir)
    source = args.input
    if source is None:
        source = os.path.join(out_dir, "hellaswag_val.jsonl")
        prepare_data.download(HELLASWAG_VAL_URL, source)
    examples = read_examples(source)
    tokenizer = prepare_data.load_tokenizer(args.tokenizer, args.tokenizer_file)
    chunks, longest = eval_file_chunks(examples, tokenizer, source)
    prepare_data.write_atomic(args.output, chunks)
    print(f"wrote {args.output}: {len(examples)} examples of {source}, tokenizer {args.tokenizer}, longest "
          f"example {longest} bytes")


if __name__ == "__main__":
    main()

"""The Python side of test_prepare_corpus.sh: builds a small corpus of every input type and its tokenizers with
the real producers (pyarrow, gzip, the tokenizers library, transformers, sentencepiece), and checks what
scripts/prepare_data.py wrote against the documents re-read and re-encoded here, one at a time.

    corpus_checks.py corpus DIR TEXT              DIR/corpus/ (a.jsonl, c.parquet, d.txt, sub/b.jsonl.gz and a
                                                  notes.md to skip) from TEXT's paragraphs; DIR/tok/tokenizer.json
                                                  (byte-level BPE trained here); DIR/bad/ (refused inputs)
    corpus_checks.py transformers TOKENIZER_JSON TEXT OUT
                                                  OUT/ckpt/: transformers' save_pretrained of TOKENIZER_JSON with
                                                  a bos token; OUT/spm/tokenizer.model, a Llama 2-like
                                                  sentencepiece model trained on TEXT, and OUT/hf/, transformers'
                                                  conversion of it
    corpus_checks.py doc_tokens TOKENIZER_JSON    hf_tokenizer.document_token's choices and refusals, and
                                                  its refusal of a WordPiece tokenizer
    corpus_checks.py expect OUT NAME TOKENIZER CORPUS DOC_TOKEN SHARD_TOKENS VAL FORMAT
                                                  OUT's shards hold the documents of CORPUS, each DOC_TOKEN then
                                                  its tokens, in the shard sizes of VAL (0.1: --val_fraction,
                                                  =500: --val_tokens); its tokenizer file holds every token's
                                                  bytes; writes OUT/first_{val,train}.ids for the C reader
    corpus_checks.py positions OUT NAME CORPUS    prepare_data.py's reader started at each shard's end in
                                                  OUT's manifest gives the record there first
    corpus_checks.py blocks CORPUS                prepare_data.py's reader with blocks of 1 byte and up gives
                                                  the records read here; its pool's results come in order
    corpus_checks.py rewind OUT NAME INPUT        makes OUT look like a run killed after the first shard that
                                                  ends inside input INPUT part way through a document
"""

import glob
import gzip
import json
import os
import random
import sys
import time

from shard_files import expected_sizes, read_shard, read_tokenizer

EXTENSIONS = (".txt", ".jsonl", ".jsonl.gz", ".parquet")
# A document whose text holds a special token's text, which must be tokenized as text
SPECIAL_TEXT_DOC = "caf\u00e9 \u65e5\u672c \U0001F600 <|endoftext|> and <|begin_of_text|> as text"


def corpus(out, text_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    # documents of 1 to 30 lines of the text (tinyshakespeare, or common.sh's generated text without blank
    # lines), and a few more: special tokens' texts, an empty one, white space, and newlines at their ends
    # (runs of newlines of every length where the .txt file joins them with blank lines)
    lines, r, docs = open(text_path, encoding="utf-8").read()[:120_000].split("\n"), random.Random(1), []
    while lines:
        n = r.randint(1, 30)
        docs.append("\n".join(lines[:n]))
        del lines[:n]
    docs += [SPECIAL_TEXT_DOC, "", " \n ", "\n", "a\n", "\nb\n\n\n", "\n\n\n"]
    r.shuffle(docs)
    q = len(docs) // 4
    os.makedirs(f"{out}/corpus/sub", exist_ok=True)
    with open(f"{out}/corpus/a.jsonl", "w", encoding="utf-8") as f:
        lines = [json.dumps({"id": k, "text": d, "meta": {"n": len(d)}}) for k, d in enumerate(docs[:q])]
        lines.insert(6, "")  # a blank line: no document
        f.write("\n".join(lines))  # and no newline after the last line
    with gzip.open(f"{out}/corpus/sub/b.jsonl.gz", "wt", encoding="utf-8") as f:
        f.writelines(json.dumps({"text": d}, ensure_ascii=False) + "\n" for d in docs[q:2 * q])
    # small row groups (the last one shorter), so that a resumed run starts past some of them
    pq.write_table(pa.table({"url": [str(k) for k in range(q)], "text": docs[2 * q:3 * q]}),
                   f"{out}/corpus/c.parquet", row_group_size=7)
    with open(f"{out}/corpus/d.txt", "w", encoding="utf-8") as f:
        f.write("\n\n".join(docs[3 * q:]))
    with open(f"{out}/corpus/notes.md", "w") as f:
        f.write("not a corpus file\n")

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<|endoftext|>", "<|begin_of_text|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(docs, trainer)
    os.makedirs(f"{out}/tok", exist_ok=True)
    tok.save(f"{out}/tok/tokenizer.json")

    bad = f"{out}/bad"
    os.makedirs(f"{bad}/empty", exist_ok=True)
    open(f"{bad}/empty/nothing.jsonl", "w").close()
    lines = {"no_field.jsonl": ['{"text": "a"}', '{"content": "b"}'],
             "bad_json.jsonl": ['{"text": "a"}', '{"text": "b"}', '{"text": "c'],
             "not_object.jsonl": ['[1, 2]'], "not_string.jsonl": ['{"text": 5}'],
             "surrogate.jsonl": ['{"text": "a"}', '{"text": "b\\ud800"}']}
    for name, content in lines.items():
        with open(f"{bad}/{name}", "w") as f:
            f.write("\n".join(content) + "\n")
    with open(f"{bad}/table.csv", "w") as f:
        f.write("text\na\n")
    with open(f"{bad}/broken.jsonl.gz", "wb") as f:  # cut short
        whole = gzip.compress("".join(json.dumps({"text": d}) + "\n" for d in docs).encode())
        f.write(whole[:len(whole) // 2])
    pq.write_table(pa.table({"body": ["a", "b"]}), f"{bad}/no_column.parquet")
    pq.write_table(pa.table({"text": ["a", None, "c"]}), f"{bad}/null.parquet")


def transformers_tokenizers(tokenizer_json, text_path, out):
    """What transformers writes in checkpoint directories: OUT/ckpt/, tokenizer_json with bos_token
    <|begin_of_text|> in its tokenizer_config.json; OUT/spm/tokenizer.model, a BPE sentencepiece model with
    Llama 2's normalizer settings (identity, spaces kept, digits split, byte fallback) trained on TEXT, and
    OUT/hf/, transformers' conversion of it to tokenizer.json, as Llama 2's checkpoints hold."""
    import sentencepiece as spm
    from tokenizers import Tokenizer
    from transformers import LlamaTokenizer, PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_file(tokenizer_json),
                                   bos_token="<|begin_of_text|>", eos_token="<|endoftext|>")
    fast.save_pretrained(f"{out}/ckpt")
    os.makedirs(f"{out}/spm", exist_ok=True)
    spm.SentencePieceTrainer.train(input=text_path, model_prefix=f"{out}/spm/tokenizer", vocab_size=400,
                                   model_type="bpe", byte_fallback=True, normalization_rule_name="identity",
                                   remove_extra_whitespaces=False, split_digits=True, minloglevel=2)
    LlamaTokenizer.from_pretrained(f"{out}/spm").save_pretrained(f"{out}/hf")


def doc_tokens(tokenizer_json):
    """The document token's sources in order, each where the ones before it are absent; a post-processor's BOS
    is not one (tokenizer_config.json's bos_token is the rule's)."""
    import tempfile

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
    import hf_tokenizer
    from tokenizers import Tokenizer, decoders, models, processors

    tok = Tokenizer.from_file(tokenizer_json)
    eot, bot = tok.token_to_id("<|endoftext|>"), tok.token_to_id("<|begin_of_text|>")
    with tempfile.TemporaryDirectory() as d:
        tok.save(f"{d}/tokenizer.json")
        hf = hf_tokenizer.load(d)
        assert hf_tokenizer.document_token(hf)[0] == eot, "no bos named: <|endoftext|>"
        assert hf_tokenizer.document_token(hf, "<|begin_of_text|>")[0] == bot, "--doc_token"
        tok.post_processor = processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                                           special_tokens=[("<|begin_of_text|>", bot)])
        tok.save(f"{d}/tokenizer.json")
        assert hf_tokenizer.document_token(hf_tokenizer.load(d))[0] == eot, "a post-processor's bos is not the rule's"
        with open(f"{d}/tokenizer_config.json", "w") as f:
            json.dump({"bos_token": {"content": "<|begin_of_text|>", "__type": "AddedToken"}}, f)
        assert hf_tokenizer.document_token(hf_tokenizer.load(d))[0] == bot, "tokenizer_config.json's bos_token"
        try:
            hf_tokenizer.document_token(hf_tokenizer.load(d), "<|nothing|>")
            raise AssertionError("--doc_token <|nothing|> accepted")
        except hf_tokenizer.TokenizerRefused as e:
            assert "--doc_token '<|nothing|>': not a token of" in str(e), str(e)
        # a WordPiece tokenizer's tokens ("##b") do not say their bytes: refused
        wordpiece = Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1, "##b": 2}, unk_token="[UNK]"))
        wordpiece.decoder = decoders.WordPiece()
        wordpiece.save(f"{d}/wordpiece.json")
        try:
            hf_tokenizer.token_bytes(hf_tokenizer.load(f"{d}/wordpiece.json"))
            raise AssertionError("a WordPiece tokenizer's bytes accepted")
        except hf_tokenizer.TokenizerRefused as e:
            assert "decoder WordPiece is neither a byte-level BPE" in str(e), str(e)
    print("document token: --doc_token, tokenizer_config.json, <|endoftext|>: as documented; WordPiece refused")


def corpus_files(path):
    """The corpus files of a directory in the documented order: paths in name order, hidden and other
    files left out."""
    found = [os.path.join(root, f) for root, _, files in os.walk(path) for f in files
             if not f.startswith(".") and f.endswith(EXTENSIONS)]
    return sorted(found)


def records(path):
    """The records of one input file, read with the standard library and pyarrow: its documents, and None
    for each blank JSON line."""
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq

        return pq.read_table(path).column("text").to_pylist()
    if path.endswith(".txt"):
        pieces = open(path, encoding="utf-8", newline="").read().split("\n\n")
        return [p + "\n\n" for p in pieces[:-1]] + pieces[-1:]
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", newline="\n") as f:
        return [json.loads(line)["text"] if line.strip() else None for line in f]


def documents(path):
    return [r for r in records(path) if r is not None]


def expect(out, name, tokenizer_path, corpus_dir, doc_token, shard_tokens, val, fmt):
    from tokenizers import Tokenizer

    json_path = os.path.join(tokenizer_path, "tokenizer.json") if os.path.isdir(tokenizer_path) else tokenizer_path
    tok = Tokenizer.from_file(json_path)
    tok.encode_special_tokens = True  # special tokens' texts are text
    doc = tok.token_to_id(doc_token)
    docs = [d for f in corpus_files(corpus_dir) for d in documents(f)]
    encoded = [tok.encode(d, add_special_tokens=False).ids for d in docs]
    stream = [t for ids in encoded for t in [doc] + ids]
    assert stream.count(doc) == len(docs), "a document token that is not a document's start"

    shards = {split: [read_shard(p, fmt) for p in sorted(glob.glob(f"{out}/{name}_{split}_*.bin"))]
              for split in ("val", "train")}
    got = [t for split in ("val", "train") for s in shards[split] for t in s]
    assert len(got) == len(stream), f"{len(got)} tokens in the shards, {len(stream)} from the documents"
    first_bad = next((k for k, (a, b) in enumerate(zip(got, stream)) if a != b), None)
    assert first_bad is None, f"token {first_bad}: {got[first_bad]} in the shards, {stream[first_bad]} re-encoded"
    if val.startswith("="):
        sizes = expected_sizes(len(stream), shard_tokens, val_tokens=int(val[1:]))
    else:
        sizes = expected_sizes(len(stream), shard_tokens, val_fraction=float(val))
    got_sizes = {split: [len(s) for s in shards[split]] for split in shards}
    assert got_sizes == sizes, f"shard sizes {got_sizes}, expected {sizes}"

    eot, vocab = read_tokenizer(f"{out}/{name}_tokenizer.bin")
    assert eot == doc and len(vocab) == tok.get_vocab_size(), f"eot {eot} V {len(vocab)}"
    for d, ids in zip(docs, encoded):
        assert b"".join(vocab[t] for t in ids) == d.encode("utf-8"), f"token bytes of {d[:40]!r}"
    n_val = sum(sizes["val"])
    for split, start in (("val", 0), ("train", n_val)):
        with open(f"{out}/first_{split}.ids", "w") as f:
            f.write("".join(f"{t}\n" for t in stream[start:start + 17]))
    print(f"{len(docs)} documents, {len(stream)} tokens, shards {sizes}")


def positions(out, name, corpus_dir):
    """prepare_data.py's reader, started at each shard's end position in the manifest, gives first the record
    at that position."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
    import prepare_data

    inputs = corpus_files(corpus_dir)
    recs = [records(p) for p in inputs]
    ends = [s["end"] for s in json.load(open(f"{out}/{name}_manifest.json"))["shards"]]
    for i, r, _ in ends:
        while i < len(inputs) and r == len(recs[i]):  # the end of an input: the next one's first record
            i, r = i + 1, 0
        batch = next(prepare_data.batches(inputs, [i, r, 0], "text"), None)
        if i == len(inputs):
            assert batch is None, f"a batch after the end of the inputs: {batch[:2]}"
            continue
        assert batch[:2] == (i, r), f"started at input {i} record {r}, the reader gave {batch[:2]}"
        first = prepare_data.documents(inputs[i], batch[2], batch[3], batch[4], r, "text", True)[0]
        assert first == recs[i][r], f"input {i} record {r}: the reader gave {first!r:.60}, not {recs[i][r]!r:.60}"
    print(f"{len(ends)} positions: the reader starts at each")


def blocks(corpus_dir):
    """prepare_data.py's reader, with blocks of a few bytes (so that records and runs of newlines straddle
    them), gives each input's records in order, as read here; and its pool gives results in the order of the
    tasks when they finish in another order."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
    import prepare_data

    inputs = corpus_files(corpus_dir)
    expected = [records(p) for p in inputs]
    for size in (1, 2, 3, 5, 64, 4096):
        prepare_data.READ_BYTES = size
        got = [[] for _ in inputs]
        for i, first, data, offset, final, _ in prepare_data.batches(inputs, [0, 0, 0], "text"):
            assert first == len(got[i]), f"block size {size}: input {i}: a batch starts at record {first}"
            got[i] += prepare_data.documents(inputs[i], data, offset, final, first, "text", True)
        for i, path in enumerate(inputs):
            assert got[i] == expected[i], f"block size {size}: {path}: the records differ"
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(2) as pool:
        tasks = [0.2, 0.0, 0.1, 0.0, 0.0, 0.2, 0.0, 0.1]  # seconds each task sleeps
        finished = list(prepare_data.in_order(pool, sleep_and_return, tasks, 3))
        assert finished == tasks, f"results in the order {finished}"
    print("the reader cuts every input into its records at block sizes of 1 byte to 4 kB; results come in order")


def sleep_and_return(seconds):
    time.sleep(seconds)
    return seconds


def rewind(out, name, input_index):
    """Leaves what a run killed after shard K would: the manifest up to K, incomplete, the shards after it
    gone, and the .tmp file a held shard leaves."""
    path = f"{out}/{name}_manifest.json"
    manifest = json.load(open(path))
    shards = manifest["shards"]
    k = next(k for k, s in enumerate(shards)
             if s["end"][0] == input_index and s["end"][2] > 0 and "_train_" in s["file"]
             and k + 2 < len(shards))
    for s in shards[k + 1:]:
        os.remove(f"{out}/{s['file']}")
    with open(f"{out}/{shards[k + 1]['file']}.tmp", "wb") as f:
        f.write(b"a held shard, cut short")
    manifest["shards"], manifest["complete"] = shards[:k + 1], False
    del manifest["tokens"]
    with open(path, "w") as f:
        json.dump(manifest, f)
    print(f"rewound to shard {k}, which ends at input {input_index}, record {shards[k]['end'][1]}, "
          f"token {shards[k]['end'][2]} of that record")


if __name__ == "__main__":
    command, args = sys.argv[1], sys.argv[2:]
    if command == "expect":
        expect(*args[:5], int(args[5]), args[6], args[7])
    elif command == "positions":
        positions(*args)
    elif command == "blocks":
        blocks(*args)
    elif command == "rewind":
        rewind(args[0], args[1], int(args[2]))
    else:
        {"corpus": corpus, "transformers": transformers_tokenizers, "doc_tokens": doc_tokens}[command](*args)

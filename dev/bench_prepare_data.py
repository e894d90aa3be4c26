#!/usr/bin/env python3
"""Tokens/s of scripts/prepare_data.py --workers N against the process-pool way of llm.c's fineweb.py, on the
same corpus, tokenizer and cores, and where the time goes. Not a test: it only measures.

    PYTHONPATH=build/python python3 dev/bench_prepare_data.py [--tokenizer_file tokenizer.json|DIR]
        [--text FILE] [--mb 40] [--workers N] [--repeats 2]

The corpus: --mb MB of JSON lines in 4 files (FineWeb's form: one {"text": ...} object a line), documents of
20 to 200 lines of --text (default tinyshakespeare, else common.sh's generated text), in a shuffled order.
The tokenizer: --tokenizer_file, a tokenizer.json or a directory holding one, or Llama 3's tokenizer.model
(from PyPI's llama-models wheel: pip download --no-deps llama-models, unzip llama_models/llama3/tokenizer.model),
which transformers' TikTokenConverter turns into a tokenizer.json here (prepare_data.py --tokenizer hf and
--tokenizer llama3 give the same files with the two); else a 16384-token byte-level BPE trained on --text.

The ways, each run --repeats times, alternating, each a fresh process (the figure is the best run):
    prepare_data  scripts/prepare_data.py --input CORPUS --tokenizer hf (its default workers, each running the
                  tokenizers library's threads on its share of the cores), and with --workers N (a process per
                  core, one thread each)
    pool          what fineweb.py does (written here, not copied): the main process reads the documents as
                  dicts (as a datasets.Dataset yields them: json.loads of each line), a multiprocessing.Pool(N)
                  imap(tokenize, documents, chunksize=16), where tokenize is the document token and the
                  tokenizer's ids of one document as a numpy array, and the main process fills 100M-token
                  shard buffers (the first shard is val) and writes them.
Both token streams are checked to be the same (sha256 of the concatenated shards). Each way is given in
tokens/s (wall time) and in tokens per CPU second of all its processes, which a machine shared with other
work changes far less; and per CPU second past its start (loading the tokenizer in each process, starting the
pool), measured on a corpus of one document and subtracted, which is what a corpus of hundreds of GB sees.

Where the time goes, in CPU seconds of one process, per stage of prepare_data.py's pipeline (read,
parse JSON, encode, pack, the pickling of tasks and results that the pipes cost, write) and of the pool's
(read and json.loads in the main process, pickling 16 documents a task and an array a document, encode one
document at a time, fill the buffer). Then the largest process's peak memory at --mb and 4x --mb.
"""

import argparse
import glob
import hashlib
import json
import multiprocessing
import os
import pickle
import random
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
SHARD_TOKENS = 100_000_000  # fineweb.py's shard size, and prepare_data.py's default


def make_corpus(out, text_path, mb):
    lines = open(text_path, encoding="utf-8").read().split("\n")
    r, docs, size = random.Random(0), [], 0
    while size < mb * 1e6:
        start, n = r.randrange(len(lines)), r.randint(20, 200)
        docs.append("\n".join(lines[start:start + n]))
        size += len(docs[-1])
    os.makedirs(out, exist_ok=True)
    for k in range(4):
        with open(f"{out}/part_{k}.jsonl", "w", encoding="utf-8") as f:
            f.writelines(json.dumps({"id": f"{k}-{i}", "text": d}) + "\n" for i, d in enumerate(docs[k::4]))
    return sum(os.path.getsize(p) for p in glob.glob(f"{out}/*.jsonl"))


def train_tokenizer(text_path, out):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([open(text_path, encoding="utf-8").read()],
                            trainers.BpeTrainer(vocab_size=16384, special_tokens=["<|endoftext|>"], show_progress=False,
                                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.save(f"{out}/tokenizer.json")
    return f"{out}/tokenizer.json"


def convert_llama3(model, out):
    """Llama 3's tiktoken ranks file as a checkpoint directory's tokenizer.json and tokenizer_config.json."""
    from prepare_data import LLAMA3_PATTERN, LLAMA3_SPECIAL
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    tok = TikTokenConverter(vocab_file=model, pattern=LLAMA3_PATTERN, extra_special_tokens=LLAMA3_SPECIAL).converted()
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|begin_of_text|>").save_pretrained(f"{out}/llama3")
    return f"{out}/llama3/tokenizer.json"


def stream_sha256(out_dir):
    """sha256 of the tokens of all shards, val then train, headers left out."""
    digest = hashlib.sha256()
    for split in ("val", "train"):
        for path in sorted(glob.glob(f"{out_dir}/*_{split}_*.bin")):
            with open(path, "rb") as f:
                f.seek(1024)
                digest.update(f.read())
    return digest.hexdigest()


def timed_run(command, env=None):
    """(seconds, CPU seconds of all its processes, the largest process's peak RSS in MB) of a command, run
    in a fresh wrapper so that its children's figures are its own. CPU seconds per token hardly depend on
    what else the machine runs; seconds do."""
    wrapper = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
               "rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode; "
               "r = resource.getrusage(resource.RUSAGE_CHILDREN); "
               "print(time.perf_counter() - t, r.ru_utime + r.ru_stime, r.ru_maxrss, rc)")
    out = subprocess.run([sys.executable, "-c", wrapper, *command], capture_output=True, text=True, env=env)
    seconds, cpu, rss_kb, rc = out.stdout.split()
    if rc != "0":
        sys.exit(f"failed: {' '.join(command)}: {out.stderr}")
    return float(seconds), float(cpu), int(rss_kb) / 1024


# ---------------------------------------------------------------------------------------------------
# the process-pool way of fineweb.py, with this tokenizer

pool_tokenizer = None


def pool_tokenize(doc):
    """One document: the document token, then its ids, as a numpy array of the shard's width."""
    import numpy as np

    ids = [pool_tokenizer.doc] + pool_tokenizer.encode(doc["text"], add_special_tokens=False).ids
    return np.array(ids, dtype=pool_tokenizer.dtype)


def pool_documents(corpus):
    for path in sorted(glob.glob(f"{corpus}/*.jsonl")):
        with open(path, encoding="utf-8") as f:
            for line in f:
                yield json.loads(line)


def pool_write(path, tokens):
    import numpy as np

    header = np.zeros(256, dtype=np.int32)
    header[:3] = (20240520, 1, len(tokens)) if tokens.dtype == np.uint16 else (20240801, 7, len(tokens))
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.tobytes())


def pool_main(corpus, tokenizer_file, out, workers, doc, wide):
    """fineweb.py's loop: imap with chunksize 16, shard buffers filled in order, the first shard val."""
    import numpy as np
    from tokenizers import Tokenizer

    global pool_tokenizer
    pool_tokenizer = Tokenizer.from_file(tokenizer_file)
    pool_tokenizer.encode_special_tokens = True  # as prepare_data.py: special tokens' texts are text
    pool_tokenizer.doc, pool_tokenizer.dtype = doc, np.uint32 if wide else np.uint16
    os.makedirs(out, exist_ok=True)
    with multiprocessing.Pool(workers) as pool:
        shard, buf, count = 0, np.empty(SHARD_TOKENS, dtype=pool_tokenizer.dtype), 0
        for tokens in pool.imap(pool_tokenize, pool_documents(corpus), chunksize=16):
            while count + len(tokens) >= SHARD_TOKENS:
                room = SHARD_TOKENS - count
                buf[count:] = tokens[:room]
                pool_write(f"{out}/pool_{'val' if shard == 0 else 'train'}_{shard:06d}.bin", buf)
                shard, count, tokens = shard + 1, 0, tokens[room:]
            buf[count:count + len(tokens)] = tokens
            count += len(tokens)
        if count:
            pool_write(f"{out}/pool_{'val' if shard == 0 else 'train'}_{shard:06d}.bin", buf[:count])


# ---------------------------------------------------------------------------------------------------
# where the time goes, in one process


def clock(function, *args):
    """(CPU seconds of this process, result) of a call."""
    t = time.process_time()
    result = function(*args)
    return time.process_time() - t, result


def profile_prepare_data(corpus, tokenizer_file, doc, wide):
    import prepare_data as pd

    inputs = sorted(glob.glob(f"{corpus}/*.jsonl"))
    t_read, tasks = clock(lambda: list(pd.batches(inputs, [0, 0, 0], "text")))
    pd.start_worker("hf", tokenizer_file, inputs, doc, "I" if wide else "H", "text", pooled=False, threads=1)
    w = pd.worker
    t_parse, docs = clock(lambda: [pd.documents(inputs[t[0]], t[2], t[3], t[4], t[1], "text", True) for t in tasks])
    t_encode, ids = clock(lambda: [w.encode([x for x in d if x is not None]) for d in docs])

    def pack():  # tokenize_batch's packing of the documents' ids into one array of the shard's width
        for batch in ids:
            tokens = pd.array("I" if wide else "H")
            for doc_ids in batch:
                tokens.append(doc)
                tokens.extend(doc_ids)
            tokens.tobytes()
    t_pack, _ = clock(pack)
    results = [pd.tokenize_batch(t) for t in tasks]
    t_ipc, _ = clock(lambda: [pickle.loads(pickle.dumps(x, -1)) for x in tasks + results])
    with tempfile.TemporaryDirectory() as d:
        def write():
            manifest = pd.Manifest(f"{d}/m.json", {}, [])
            writer = pd.ShardWriter(d, "p", "uint32" if wide else "uint16", SHARD_TOKENS, None, 0.1, manifest, None)
            for _, first, tokens, counts, _ in results:
                writer.add(tokens, 0, first, counts)
            writer.finish("bench")
        t_write, _ = clock(write)
    tokens = sum(len(r[2]) for r in results) // (4 if wide else 2)
    return tokens, {"read (main)": t_read, "parse JSON (worker)": t_parse, "encode (worker)": t_encode,
                    "pack tokens (worker)": t_pack,
                    "pickle tasks and results (both ends)": t_ipc, "write shards (main)": t_write}


def profile_pool(corpus, tokenizer_file, doc, wide):
    import numpy as np
    from tokenizers import Tokenizer

    global pool_tokenizer
    pool_tokenizer = Tokenizer.from_file(tokenizer_file)
    pool_tokenizer.encode_special_tokens = True
    pool_tokenizer.doc, pool_tokenizer.dtype = doc, np.uint32 if wide else np.uint16
    t_read, docs = clock(lambda: list(pool_documents(corpus)))
    t_encode, arrays = clock(lambda: [pool_tokenize(d) for d in docs])
    chunks = [docs[i:i + 16] for i in range(0, len(docs), 16)]
    t_ipc, _ = clock(lambda: [pickle.loads(pickle.dumps(x, -1)) for x in chunks + arrays])

    def fill():
        buf, count = np.empty(SHARD_TOKENS, dtype=pool_tokenizer.dtype), 0
        for a in arrays:
            if count + len(a) > SHARD_TOKENS:
                count = 0
            buf[count:count + len(a)] = a
            count += len(a)
    t_fill, _ = clock(fill)
    return {"read and json.loads (main)": t_read, "encode a document and make its array (worker)": t_encode,
            "pickle 16 documents a task, an array a document (both ends)": t_ipc,
            "fill the shard buffer (main)": t_fill}


def show(title, parts, tokens):
    total = sum(parts.values())
    print(f"{title}: {total:.2f} CPU seconds in one process, {tokens / total / 1e6:.3f}M tokens per CPU second")
    for name, t in parts.items():
        print(f"    {name:58s} {t:7.2f} s  {100 * t / total:5.1f}%")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokenizer_file", help="a tokenizer.json, a directory holding one, or Llama 3's tokenizer.model "
                   "(default: trained here)")
    p.add_argument("--text", default=os.path.join(ROOT, "..", "shared", "data", "tinyshakespeare.txt"))
    p.add_argument("--mb", type=float, default=40, help="corpus size in MB (default 40)")
    p.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--pool_worker", nargs=6, help=argparse.SUPPRESS)  # runs the pool way (a fresh process)
    args = p.parse_args()
    if args.pool_worker:
        corpus, tok, out, workers, doc, wide = args.pool_worker
        pool_main(corpus, tok, out, int(workers), int(doc), wide == "1")
        return

    tmp = tempfile.mkdtemp(prefix="bench_prepare_data.")
    try:
        if not os.path.isfile(args.text):
            args.text = f"{tmp}/generated.txt"
            subprocess.run(["bash", "-c", f". {ROOT}/test/common.sh && test_init && generated_text {args.text}"],
                           check=True)
        if args.tokenizer_file and args.tokenizer_file.endswith(".model"):
            tokenizer_file = convert_llama3(args.tokenizer_file, tmp)
        elif args.tokenizer_file:
            tokenizer_file = os.path.join(args.tokenizer_file, "tokenizer.json") \
                if os.path.isdir(args.tokenizer_file) else args.tokenizer_file
        else:
            tokenizer_file = train_tokenizer(args.text, tmp)
        size = make_corpus(f"{tmp}/corpus", args.text, args.mb)
        os.makedirs(f"{tmp}/one")
        commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip()
        cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
        print(f"{time.strftime('%Y-%m-%d')}, commit {commit}, {cpu}, {os.cpu_count()} cores, load average "
              f"{open('/proc/loadavg').read().split()[:3]}; corpus {size / 1e6:.1f} MB of JSON lines, "
              f"tokenizer {tokenizer_file}, {args.workers} workers")

        def prepare(out, workers, mb_corpus=f"{tmp}/corpus", extra=()):
            """prepare_data.py with --workers (None: its default)."""
            return timed_run([sys.executable, f"{ROOT}/scripts/prepare_data.py", "--input", mb_corpus, "--output_dir",
                              out, "--name", "bench", "--tokenizer", "hf", "--tokenizer_file", tokenizer_file,
                              *(("--workers", str(workers)) if workers else ()), *extra])

        def pool(out, corpus=f"{tmp}/corpus"):
            return timed_run([sys.executable, __file__, "--pool_worker", corpus, tokenizer_file, out,
                              str(args.workers), str(doc), "1" if wide else "0"])

        # the document token and width prepare_data.py chose, for the pool
        prepare(f"{tmp}/first", None)
        manifest = json.load(open(f"{tmp}/first/bench_manifest.json"))
        doc, wide, tokens = manifest["settings"]["doc_token"], manifest["settings"]["shard_format"] == "uint32", manifest["tokens"]
        ways = {"prepare_data": lambda out, corpus=f"{tmp}/corpus", extra=(): prepare(out, None, corpus, extra),
                f"prepare_data --workers {args.workers}":
                    lambda out, corpus=f"{tmp}/corpus", extra=(): prepare(out, args.workers, corpus, extra),
                "pool": lambda out, corpus=f"{tmp}/corpus", extra=(): pool(out, corpus)}
        times, cpus = {way: [] for way in ways}, {way: [] for way in ways}
        for k in range(args.repeats):
            for n, way in enumerate(ways):
                out = f"{tmp}/run{k}_{n}"
                t, cpu, _ = ways[way](out)
                times[way].append(t)
                cpus[way].append(cpu)
                if stream_sha256(out) != stream_sha256(f"{tmp}/first"):
                    sys.exit(f"{way}: its tokens are not prepare_data.py's")
                subprocess.run(["rm", "-rf", out])
        best, cpu = {way: min(t) for way, t in times.items()}, {way: min(c) for way, c in cpus.items()}
        with open(f"{tmp}/one/doc.jsonl", "w") as f:
            f.write(json.dumps({"text": "One short document."}) + "\n")
        start = {way: run(f"{tmp}/one_{n}", f"{tmp}/one", ("--val_tokens", "1"))[1] for n, (way, run) in enumerate(ways.items())}
        for way in ways:
            print(f"{way:27s} {tokens / best[way] / 1e6:6.3f}M tokens/s, {tokens / cpu[way] / 1e6:.3f}M tokens per CPU "
                  f"second, {tokens / (cpu[way] - start[way]) / 1e6:.3f}M past its start ({start[way]:.1f} CPU s)  "
                  f"(runs {', '.join(f'{x:.1f}' for x in times[way])} s, CPU {', '.join(f'{x:.1f}' for x in cpus[way])} s)")
        for way in list(ways)[:2]:
            print(f"{way} / pool: {best['pool'] / best[way]:.2f}x the tokens/s (best runs), "
                  f"{(cpu['pool'] - start['pool']) / (cpu[way] - start[way]):.2f}x the tokens per CPU second past the start")

        show("prepare_data.py's stages", profile_prepare_data(f"{tmp}/corpus", tokenizer_file, doc, wide)[1], tokens)
        show("the pool's stages", profile_pool(f"{tmp}/corpus", tokenizer_file, doc, wide), tokens)

        size4 = make_corpus(f"{tmp}/corpus4", args.text, 4 * args.mb)
        for corpus, mb in ((f"{tmp}/corpus", size), (f"{tmp}/corpus4", size4)):
            subprocess.run(["rm", "-rf", f"{tmp}/mem"])
            _, _, rss = prepare(f"{tmp}/mem", None, corpus, ("--shard_tokens", "1000000"))
            print(f"peak memory, {mb / 1e6:.0f} MB corpus, 1M-token shards: {rss:.0f} MB (the largest process)")
    finally:
        subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()

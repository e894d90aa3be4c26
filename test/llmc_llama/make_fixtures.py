#!/usr/bin/env python3
"""Writes the fixtures of test/test_llmc_llama.sh with llm.c's own Python writers: one tiny Llama 3 model
saved by llm.c master's train_llama3.py write_model (bfloat16, what its main writes) and by the llama3
branch's (float32 and bfloat16, both of which its main writes), the batch it is evaluated on as an llm.c
token shard, and the first loss llm.c's model computes on that batch (reference.txt).

    python3 test/llmc_llama/make_fixtures.py MASTER/train_llama3.py BRANCH/train_llama3.py OUT_DIR

Needs torch (on the CPU). The two train_llama3.py are llm.c's, taken from its repository (see README.md
beside this file for the commits); they are imported, not run: their main needs CUDA and Hugging Face
weights. Their module-level `import tiktoken` serves only their tokenizer, which is not used here, so a
stand-in module is put in its place.

The model: L=2, C=32, NH=4, KVH=2 (grouped-query attention), V=128 (ASCII bytes), maxT=64,
ffn_dim_multiplier 1.3 with multiple_of 32 (F = 128; master's integer header slot truncates 1.3 to 1),
rope_theta 500000 with Llama 3.1's scaled wavelengths, the usual eps 1e-5. Its weights are torch's default
initialisation of llm.c's modules (seeded), the RMSNorm weights drawn around 1 so that they matter, and
every weight rounded to bfloat16 first, so that the float32 and bfloat16 files hold the same values and
one reference loss fits all three. The loss is llm.c's forward in float32 on the CPU, on the first
B*T+1 = 33 tokens of the shard (x the first 32, y the next), as llm.c's data loader cuts a batch.
"""
import importlib.util
import os
import sys
import types

import torch

B, T = 2, 16
CONFIG = dict(version="3.1", block_size=64, vocab_size=128, n_layer=2, n_head=4, n_kv_head=2, n_embd=32,
              ffn_dim_multiplier=1.3, multiple_of=32, norm_eps=1e-5, rope_theta=500000.0, use_scaled_rope=True,
              max_gen_batch_size=4, use_kv=False, flash=False)
TEXT = (b"A model file is a contract between two programs: the one that writes it and the one that reads it. "
        b"Both must agree on every byte.")


def import_llmc(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_shard(path, tokens):
    """An llm.c token shard: 256 int32 header (magic 20240520, version 1, count), then uint16 tokens."""
    header = [20240520, 1, len(tokens)] + [0] * 253
    with open(path, "wb") as f:
        f.write(b"".join(v.to_bytes(4, "little") for v in header))
        f.write(b"".join(t.to_bytes(2, "little") for t in tokens))


def main():
    master_py, branch_py, out = sys.argv[1:4]
    stand_in = types.ModuleType("tiktoken")
    stand_in.load = types.ModuleType("tiktoken.load")
    stand_in.load.load_tiktoken_bpe = None
    sys.modules.update({"tiktoken": stand_in, "tiktoken.load": stand_in.load})
    master, branch = import_llmc(master_py, "llmc_master"), import_llmc(branch_py, "llmc_branch")

    torch.manual_seed(20240803)
    model = master.LLaMA(master.LlamaConfig(**CONFIG))
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:  # RMSNorm weights
                p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=generator))
            p.copy_(p.to(torch.bfloat16).to(torch.float32))
    twin = branch.LLaMA(branch.LlamaConfig(tied_embeddings=False, **CONFIG))
    twin.load_state_dict(model.state_dict())

    tokens = list(TEXT[:B * T + 1])
    assert max(tokens) < CONFIG["vocab_size"]
    x = torch.tensor(tokens[:-1]).view(B, T)
    y = torch.tensor(tokens[1:]).view(B, T)
    with torch.no_grad():
        losses = [float(m(x, y)[1]) for m in (model, twin)]

    os.makedirs(out, exist_ok=True)
    master.write_model(model, os.path.join(out, "master_bf16.bin"), "bfloat16")
    branch.write_model(twin, os.path.join(out, "llama3_branch_fp32.bin"), "float32")
    branch.write_model(twin, os.path.join(out, "llama3_branch_bf16.bin"), "bfloat16")
    write_shard(os.path.join(out, "batch_train_000000.bin"), tokens)
    with open(os.path.join(out, "reference.txt"), "w") as f:
        f.write(f"# llm.c's first loss (float32, CPU) of its master and llama3-branch models, torch {torch.__version__}\n")
        f.write(f"B {B}\nT {T}\nloss_master {losses[0]!r}\nloss_llama3_branch {losses[1]!r}\n")
    print(f"losses {losses}; wrote {out}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes the fixtures of test/test_eval.sh with llm.c's own Python: a tiny GPT-2 saved by llm.c's
train_gpt2.py write_model, a HellaSwag eval file written by llm.c's dev/data/data_common.py write_evalfile
from a HellaSwag-schema jsonl, and the accuracy PyTorch computes under llm.c's rule on that model.

    python3 test/llmc_hellaswag/make_fixtures.py LLMC/train_gpt2.py LLMC/dev/data/data_common.py OUT_DIR

Needs torch (on the CPU), numpy, requests and tqdm (data_common.py's imports). The two llm.c files are
imported, not run, taken from its repository (README.md beside this file gives the commit).

The examples (hellaswag.jsonl): 24 in HellaSwag's schema (ctx, endings, label, ...), made from 24 facts "NAME
keeps the THING in the PLACE."; the context is "NAME keeps the THING in the", the endings four places, one of
them the fact's. They are tokenized as bytes (V = 128, ASCII), context then " " + ending, as llm.c's
hellaswag.py renders an example with the GPT-2 tokenizer; a byte vocabulary keeps the model file small.

The model: L=2, C=32, NH=1 (the CUDA trainer's attention takes head sizes of 32 and up), maxT=64, V=128, llm.c's GPT with its own initialisation (seed 42), trained with
AdamW for a few hundred steps on the facts so that it knows most of them: its answers are then mostly
right and some wrong, so that a scoring mistake changes the count. llm.c's write_model pads the vocabulary
to a multiple of 128 and asserts V = 50257 (GPT-2's); V = 128 needs no padding, and its pad_vocab is replaced by
the identity for this model (everything else is llm.c's writer).

The reference (reference.txt), llm.c's rule in PyTorch float32: each completion's mean cross-entropy over its
own tokens given the context (summed in float32 in token order as train_gpt2.cu's evalloader_stat_losses
sums, then divided by the count); the lowest wins, the first of equal ones; correct when that is the label.
It records the count, each example's choice, and the smallest gap between an example's best and second-best
mean loss (a gap within float32 rounding, about 1e-6 here, could flip between two implementations).
"""
import importlib.util
import json
import os
import sys

import numpy as np
import torch
from torch.nn import functional as F

NAMES = ["Ada", "Bob", "Cy", "Dee", "Eve", "Fay", "Gus", "Hal", "Ivy", "Jo", "Kai", "Lu"]
THINGS = ["key", "map", "cup", "pen", "hat", "box"]
PLACES = ["shed", "attic", "car", "drawer", "garden", "kitchen", "basement", "hall"]
NUM_EXAMPLES = 24
CONFIG = dict(block_size=64, vocab_size=128, n_layer=2, n_head=1, n_embd=32)


def import_llmc(path, name):
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_examples(rng):
    examples = []
    for i in range(NUM_EXAMPLES):
        name, thing = NAMES[i % len(NAMES)], THINGS[(i * 5) % len(THINGS)]
        places = list(rng.choice(len(PLACES), 4, replace=False))
        label = int(rng.integers(4))
        ctx = f"{name} keeps the {thing} in the"
        examples.append({"ind": i, "activity_label": "Keeping things", "ctx_a": ctx, "ctx_b": "", "ctx": ctx,
                         "split": "val", "split_type": "indomain", "label": label,
                         "endings": [PLACES[p] + "." for p in places], "source_id": f"facts~{i}"})
    return examples


def tokens(text):
    return list(text.encode("ascii"))


def render(example):
    """llm.c's hellaswag.py render_example's data, byte tokens: the context, each " " + ending."""
    return {"label": example["label"], "ctx_tokens": tokens(example["ctx"]),
            "ending_tokens": [tokens(" " + end) for end in example["endings"]]}


def train(model, examples, steps=400):
    text = " ".join(e["ctx"] + " " + e["endings"][e["label"]] for e in examples)
    data = torch.tensor(tokens(text))
    T = 48
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    generator = torch.Generator().manual_seed(1)
    for step in range(steps):
        starts = torch.randint(0, len(data) - T - 1, (16,), generator=generator)
        x = torch.stack([data[s:s + T] for s in starts])
        y = torch.stack([data[s + 1:s + T + 1] for s in starts])
        _, loss = model(x, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return float(loss.detach())


@torch.no_grad()
def completion_losses(model, data):
    """Each completion's mean loss, llm.c's rule in float32."""
    means = []
    for end in data["ending_tokens"]:
        row = data["ctx_tokens"] + end
        x = torch.tensor([row])
        logits, _ = model(x, torch.tensor([row[1:] + [0]]))  # targets: full logits
        losses = F.cross_entropy(logits[0, :-1].float(), torch.tensor(row[1:]), reduction="none").numpy()
        total = np.float32(0.0)
        for t in range(len(data["ctx_tokens"]) - 1, len(row) - 1):
            total = np.float32(total + losses[t])
        means.append(np.float32(total / np.float32(len(end))))
    return means


def main():
    gpt2_py, data_common_py, out = sys.argv[1:4]
    llmc, data_common = import_llmc(gpt2_py, "llmc_train_gpt2"), import_llmc(data_common_py, "llmc_data_common")
    rng = np.random.default_rng(39)
    examples = make_examples(rng)
    torch.manual_seed(0)
    model = llmc.GPT(llmc.GPTConfig(**CONFIG))
    final_loss = train(model, examples)
    model.eval()

    choices, gaps = [], []
    for example in examples:
        means = completion_losses(model, render(example))
        best = min(range(4), key=lambda c: (means[c], c))  # the first of equal ones
        choices.append(best)
        gaps.append(sorted(means)[1] - sorted(means)[0])
    correct = sum(c == e["label"] for c, e in zip(choices, examples))

    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "hellaswag.jsonl"), "w") as f:
        for e in examples:
            f.write(json.dumps(e) + "\n")
    data_common.write_evalfile(os.path.join(out, "hellaswag_val.bin"), [render(e) for e in examples])
    llmc.pad_vocab = lambda tensor, multiple=128, value=0: tensor  # V = 128 is a multiple of 128 already
    llmc.write_model(model, os.path.join(out, "model.bin"), "float32")
    with open(os.path.join(out, "reference.txt"), "w") as f:
        f.write(f"# llm.c's rule on llm.c's model (float32, CPU, torch {torch.__version__}); training loss "
                f"{final_loss:.4f}\n")
        f.write(f"examples {len(examples)}\ncorrect {correct}\n")
        f.write("choices " + " ".join(map(str, choices)) + "\n")
        f.write(f"smallest_gap {float(min(gaps))!r}\n")
    print(f"correct {correct}/{len(examples)}, choices {choices}, smallest gap {min(gaps):.3g}; wrote {out}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The PyTorch peer of train and train_cpu: the same GPT-2, data, schedule and optimizer, written the way a
user would who picked PyTorch instead (llm.c's train_gpt2.py plays this part there).

    python3 dev/train_gpt2_torch.py --init_from MODEL.bin --train_data 'data/x_train_*.bin' [flags]

It starts from a model file our trainers wrote (--ckpt_every; llm.c format, version 3 or 5, read by
scripts/export_hf.py's reader), reads our token shards in train_cpu's order (shards by name, batches in
order, --shuffle 0), and takes our trainers' flags with their defaults, read from cli.h (the one definition
of them): --batch_size, --seq_len, --total_batch_size, --steps, --lr, --lr_schedule, --warmup_steps,
--final_lr_frac, --beta1, --beta2, --eps, --weight_decay, --grad_clip, --val_data, --val_every,
--val_batches, --log_file, --output_dir. Its log lines and JSON-lines records are train_log.h's, so
scripts/plot_compare.py, test/compare_runs.py and scripts/gpu_check.sh read it as one of ours; at the end
it prints our "summary | ms/step | tok/s | MFU | peak memory" line (after the first 3 steps, as ours), and
with --output_dir writes the final weights as a version 3 model file.

The model: token + position embedding, pre-LayerNorm blocks (eps 1e-5) of causal attention (PyTorch's fused
scaled_dot_product_attention) and a tanh-GELU MLP, a final LayerNorm, the LM head tied to wte over the
padded vocabulary, the loss over the first V logits. The step: the mean cross-entropy of each micro-batch,
gradients accumulated over --total_batch_size / (B*T) micro-batches scaled by 1/micro-batches, clipped
to --grad_clip by their global norm (scaled by clip/norm when the norm exceeds it: train_gpt.c's rule,
computed on the device without a host wait), AdamW with decay on the 2-D weights only (gpt_model.h's
param_is_decayed), the learning rate of train_log.h's schedule.

--dtype float32: everything in float32 (the CPU check, test/test_torch_peer.sh: its losses against
train_cpu's); bfloat16: autocast to BF16 (weights and optimizer in float32, as ours); float8: the block
linears through torchao's float8 training (tensorwise dynamic scaling, torchao.float8), BF16 autocast for
the rest, the LM head in BF16 as ours; refused with one line when torchao is not installed. --compile 1
(default on CUDA): torch.compile. --device auto: CUDA when available.

Bad inputs end with one line "error: ..." naming the file or flag, and exit status 1.
Needs torch and numpy.
"""
import argparse
import glob
import json
import math
import os
import re
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

try:
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:
    print(f"error: train_gpt2_torch.py needs torch and numpy ({e.name} is not installed)", file=sys.stderr)
    sys.exit(1)

import export_hf  # noqa: E402  (scripts/: the llm.c model file reader)

# llm.c's two token shard formats, told apart by the magic (dataloader.h's): magic -> version, token dtype, name
SHARD_FORMATS = {20240520: (1, "<u2", "GPT-2 shard (uint16 tokens)"),
                 20240801: (7, "<u4", "Llama 3 shard (uint32 tokens)")}
SHARD_HEADER_BYTES = 1024
MODEL_MAGIC, HEADER_INTS = 20240326, 256
H100_H200_BF16_PEAK_FLOPS = 989.4e12  # dense, as train_gpt_fp8.cu's bf16_peak_flops for sm_90
TIMED_AFTER = 3  # steps of warm-up (and compilation) left out of the summary, as ours


def die(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(1)


# ---------------------------------------------------------------------------------------------------------
# Flags: the names and defaults of cli.h's option table


def cli_defaults():
    """{flag: default string} from cli.h's option table ({"name", OPT_..., OPT_AT(field), "default", ...})."""
    path = os.path.join(ROOT, "core", "cli.h")
    try:
        text = open(path).read()
    except OSError as e:
        die(f"{path}: cannot read the trainers' flags: {e.strerror}")
    return dict(re.findall(r'\{"(\w+)", OPT_\w+, OPT_AT\(\w+\), "([^"]*)"', text))


def parse_args(argv):
    d = cli_defaults()
    p = argparse.ArgumentParser(description="PyTorch peer of train / train_cpu (see the docstring)")
    p.add_argument("--init_from", required=True, help="model file to start from (llm.c format, v3 or v5)")
    p.add_argument("--train_data", default=d["train_data"])
    p.add_argument("--val_data", default=d["val_data"])
    p.add_argument("--log_file", default=d["log_file"])
    p.add_argument("--output_dir", default="", help="where the final model file is written (empty: none)")
    p.add_argument("--dtype", choices=["float32", "bfloat16", "float8"], default="bfloat16")
    for name in ("batch_size", "seq_len", "total_batch_size", "steps", "warmup_steps", "val_every",
                 "val_batches"):
        p.add_argument(f"--{name}", type=int, default=int(d[name]))
    for name in ("lr", "final_lr_frac", "beta1", "beta2", "eps", "weight_decay", "grad_clip"):
        p.add_argument(f"--{name}", type=float, default=float(d[name]))
    p.add_argument("--lr_schedule", choices=["cosine", "linear", "constant"], default=d["lr_schedule"])
    p.add_argument("--compile", type=int, choices=[0, 1], default=None, help="torch.compile (default: on CUDA)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    args = p.parse_args(argv)
    for name in ("batch_size", "steps", "val_batches"):
        if getattr(args, name) < 1:
            die(f"--{name}: {getattr(args, name)} must be at least 1")
    for name in ("seq_len", "total_batch_size", "warmup_steps", "val_every"):
        if getattr(args, name) < 0:
            die(f"--{name}: {getattr(args, name)} must not be negative")
    return args


def learning_rate(args, step):
    """train_log.h's learning_rate, as llm.c's get_lr (train_gpt2.py) computes it: linear warmup, then the decay
    towards lr * final_lr_frac with progress (step - warmup) / (steps - warmup)."""
    lr, min_lr = args.lr, args.lr * args.final_lr_frac
    if step < args.warmup_steps:
        return lr * (step + 1) / args.warmup_steps
    if args.lr_schedule == "constant":
        return lr
    decay_ratio = (step - args.warmup_steps) / (args.steps - args.warmup_steps)
    if args.lr_schedule == "linear":
        return lr - decay_ratio * (lr - min_lr)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * decay_ratio)) * (lr - min_lr)


# ---------------------------------------------------------------------------------------------------------
# Token shards (dataloader.h's format and order, one process, no shuffling)


def read_shard(path, vocab):
    """The tokens of one shard (uint16 or uint32, by its magic), checked as dataloader.h checks them."""
    try:
        size = os.path.getsize(path)
        header = np.fromfile(path, dtype="<i4", count=SHARD_HEADER_BYTES // 4)
    except OSError as e:
        die(f"{path}: cannot read: {e.strerror}")
    if header.size < 3 or int(header[0]) not in SHARD_FORMATS:
        die(f"{path}: not a token shard (magic {header[:1].tolist()}, expected one of {list(SHARD_FORMATS)})")
    version, dtype, _ = SHARD_FORMATS[int(header[0])]
    if header[1] != version:
        die(f"{path}: unsupported token shard version {header[1]}, expected {version} for magic {header[0]}")
    n = int(header[2])
    if n < 1 or size != SHARD_HEADER_BYTES + np.dtype(dtype).itemsize * n:
        die(f"{path}: size {size} does not match its header's {n} tokens: truncated or corrupt")
    tokens = np.memmap(path, dtype=dtype, mode="r", offset=SHARD_HEADER_BYTES, shape=(n,))
    largest = int(tokens.max())
    if largest >= vocab:
        die(f"{path}: token id {largest} is outside the model's vocabulary of {vocab}")
    return tokens


def shard_format_name(tokens):
    return next(name for _, dtype, name in SHARD_FORMATS.values() if np.dtype(dtype) == tokens.dtype)


class Batches:
    """(inputs, targets) of B x T, shard by shard in name order, batch j of a shard at token j*B*T."""

    def __init__(self, pattern, flag, B, T, vocab):
        paths = sorted(glob.glob(pattern))
        if not paths:
            die(f"--{flag}: no files match {pattern}")
        self.B, self.T = B, T
        self.shards = [read_shard(p, vocab) for p in paths]
        for p, s in zip(paths, self.shards):  # one format per pattern: a mix would be two tokenizers' tokens
            if s.dtype != self.shards[0].dtype:
                die(f"{p}: a {shard_format_name(s)}, but {paths[0]} is a {shard_format_name(self.shards[0])}: "
                    "the shards of one data pattern must share a format")
        self.counts = [(len(s) - 1) // (B * T) for s in self.shards]
        if sum(self.counts) == 0:
            die(f"--{flag}: {pattern} holds no batch of {B} x {T} tokens")
        self.reset()

    def reset(self):
        self.shard, self.batch = 0, 0

    def next(self):
        while self.batch >= self.counts[self.shard]:
            self.shard, self.batch = (self.shard + 1) % len(self.shards), 0
        n, start = self.B * self.T, self.batch * self.B * self.T
        chunk = torch.from_numpy(self.shards[self.shard][start:start + n + 1].astype(np.int64))
        self.batch += 1
        return chunk[:n].view(self.B, self.T), chunk[1:].view(self.B, self.T)


# ---------------------------------------------------------------------------------------------------------
# The model


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.ln1, self.ln2 = nn.LayerNorm(C, eps=1e-5), nn.LayerNorm(C, eps=1e-5)
        self.qkv, self.attproj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.fcproj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)  # (B,T,C) -> 3 x (B,T,C)
        q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2) for t in (q, k, v))  # (B,NH,T,hs)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + self.attproj(y)
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.V, C = cfg["V"], cfg["C"]
        self.wte = nn.Parameter(torch.empty(cfg["Vp"], C))
        self.wpe = nn.Parameter(torch.empty(cfg["maxT"], C))
        self.blocks = nn.ModuleList(Block(C, cfg["NH"]) for _ in range(cfg["L"]))
        self.lnf = nn.LayerNorm(C, eps=1e-5)

    def forward(self, idx, targets):  # (B,T) tokens -> mean loss
        T = idx.shape[1]
        x = self.wte[idx] + self.wpe[:T]
        for block in self.blocks:
            x = block(x)
        logits = F.linear(self.lnf(x), self.wte)  # (B,T,C) -> (B,T,Vp), tied to wte
        return F.cross_entropy(logits[..., :self.V].float().flatten(0, 1), targets.flatten())


# llm.c's tensor order (export_hf.read_model's names) and where each lives here
def tensor_map(model):
    per_layer = [("ln1w", "ln1.weight"), ("ln1b", "ln1.bias"), ("qkvw", "qkv.weight"), ("qkvb", "qkv.bias"),
                 ("attprojw", "attproj.weight"), ("attprojb", "attproj.bias"), ("ln2w", "ln2.weight"),
                 ("ln2b", "ln2.bias"), ("fcw", "fc.weight"), ("fcb", "fc.bias"), ("fcprojw", "fcproj.weight"),
                 ("fcprojb", "fcproj.bias")]
    named = dict(model.named_parameters())
    yield "wte", [model.wte]
    yield "wpe", [model.wpe]
    for ours, here in per_layer:
        yield ours, [named[f"blocks.{i}.{here}"] for i in range(len(model.blocks))]
    yield "lnfw", [model.lnf.weight]
    yield "lnfb", [model.lnf.bias]


DECAYED = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"}  # gpt_model.h's param_is_decayed


def load_model(path):
    try:
        cfg, params = export_hf.read_model(path)
    except export_hf.ExportError as e:
        die(str(e))
    if cfg["arch"] != "gpt2":
        die(f"{path}: a {cfg['arch']} model file; this peer trains GPT-2 only")
    model = GPT(cfg)
    with torch.no_grad():
        for name, tensors in tensor_map(model):
            values = params[name].reshape(len(tensors), *tensors[0].shape)
            for tensor, value in zip(tensors, values):
                tensor.copy_(torch.from_numpy(np.array(value, dtype=np.float32)))
    return cfg, model


def write_model(cfg, model, path):
    """A version 3 model file (core/model_file.h's layout), written to a temp name and renamed."""
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[:8] = [MODEL_MAGIC, 3, cfg["maxT"], cfg["V"], cfg["L"], cfg["NH"], cfg["C"], cfg["Vp"]]
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(header.tobytes())
        for _, tensors in tensor_map(model):
            for tensor in tensors:
                f.write(tensor.detach().float().cpu().numpy().astype("<f4").tobytes())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------------------
# Training


def to_float8(model):
    """The block linears as torchao's Float8Linear (the LM head, a plain F.linear on wte, stays BF16);
    returns how many."""
    try:
        from torchao.float8 import convert_to_float8_training
        from torchao.float8.float8_linear import Float8Linear
    except ImportError:
        die("--dtype float8: needs torchao's float8 training (pip install torchao)")
    convert_to_float8_training(model, module_filter_fn=lambda module, name: name.startswith("blocks."))
    return sum(isinstance(m, Float8Linear) for m in model.modules())


def evaluate(model, batches, num_batches, device, autocast):
    batches.reset()
    total = 0.0
    with torch.no_grad():
        for _ in range(num_batches):
            x, y = batches.next()
            with autocast():
                total += model(x.to(device), y.to(device)).item()
    return total / num_batches


def log_record(log, record):
    if log:
        log.write(json.dumps(record, separators=(",", ":")) + "\n")
        log.flush()


def main(argv=None):
    args = parse_args(argv)
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    if device == "cuda" and not torch.cuda.is_available():
        die("--device cuda: PyTorch sees no CUDA device")
    cfg, model = load_model(args.init_from)
    B, T = args.batch_size, args.seq_len or cfg["maxT"]
    if T > cfg["maxT"]:
        die(f"--seq_len: {T} exceeds the model's maximum sequence length {cfg['maxT']}")
    if args.total_batch_size % (B * T):
        die(f"--total_batch_size: {args.total_batch_size} is not a multiple of batch_size*seq_len = {B * T}")
    accum = args.total_batch_size // (B * T) or 1
    train = Batches(args.train_data, "train_data", B, T, cfg["V"])
    val = Batches(args.val_data, "val_data", B, T, cfg["V"]) if args.val_data else None
    model.to(device)
    if args.dtype == "float32":
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    fp8_linears = to_float8(model) if args.dtype == "float8" else 0
    reduced = args.dtype != "float32"

    def autocast():
        return torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=reduced)

    groups = {True: [], False: []}
    for name, tensors in tensor_map(model):
        groups[name in DECAYED] += tensors
    optimizer = torch.optim.AdamW(
        [{"params": groups[True], "weight_decay": args.weight_decay}, {"params": groups[False], "weight_decay": 0.0}],
        lr=args.lr, betas=(args.beta1, args.beta2), eps=args.eps, fused=device == "cuda")
    params = [p for p in model.parameters()]
    step_model = torch.compile(model) if (args.compile if args.compile is not None else device == "cuda") else model
    log = open(args.log_file, "w") if args.log_file else None
    print(f"train_gpt2_torch | model gpt2 L={cfg['L']} C={cfg['C']} NH={cfg['NH']} V={cfg['V']} maxT={cfg['maxT']}"
          f" | {sum(p.numel() for p in params)} parameters | dtype {args.dtype} | B={B} T={T} accum={accum} | "
          f"{device}{' ' + torch.cuda.get_device_name() if device == 'cuda' else ''} | torch {torch.__version__}"
          f" | attention sdpa{f' | torchao float8 linears {fp8_linears}' if fp8_linears else ''}")
    clip = torch.tensor(args.grad_clip, device=device)
    timed_ms, timed_steps = 0.0, 0
    for step in range(args.steps):
        start = time.perf_counter()
        loss_sum = torch.zeros((), device=device)
        for _ in range(accum):
            x, y = train.next()
            with autocast():
                loss = step_model(x.to(device, non_blocking=True), y.to(device, non_blocking=True))
            (loss / accum).backward()
            loss_sum += loss.detach()
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in params]))
        if args.grad_clip > 0:  # clip / norm when the norm exceeds the clip, else exactly 1
            torch._foreach_mul_([p.grad for p in params], torch.clamp(clip / norm, max=1.0))
        lr = learning_rate(args, step)
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        loss_value, norm_value = (loss_sum / accum).item(), norm.item()  # the step's one host wait
        ms = (time.perf_counter() - start) * 1e3
        tokens_per_second = B * T * accum / (ms / 1e3)
        if step >= TIMED_AFTER:
            timed_ms, timed_steps = timed_ms + ms, timed_steps + 1
        print(f"step {step + 1:5d}/{args.steps} | loss {loss_value:.6f} | lr {lr:.3e} | norm {norm_value:.4f} | "
              f"{ms:.1f} ms | {tokens_per_second:.0f} tok/s", flush=True)
        log_record(log, {"type": "step", "step": step + 1, "loss": loss_value, "lr": lr, "grad_norm": norm_value,
                         "ms": round(ms, 3), "tokens_per_second": round(tokens_per_second, 1), "skipped": 0,
                         "skip_reason": "applied"})
        last = step + 1 == args.steps
        if val and (last or (args.val_every > 0 and (step + 1) % args.val_every == 0)):
            val_loss = evaluate(model, val, args.val_batches, device, autocast)
            print(f"val   {step + 1:5d} | loss {val_loss:.6f} | perplexity {math.exp(val_loss):.4f}")
            log_record(log, {"type": "val", "step": step + 1, "val_loss": val_loss, "perplexity": math.exp(val_loss)})
    if timed_steps:
        ms = timed_ms / timed_steps
        tokens_per_second = B * T * accum / (ms / 1e3)
        # time_plan.h's model FLOPs: the tied wte counted once, as the LM head; wpe is a lookup; causal attention
        flops = 6.0 * (sum(p.numel() for p in params) - model.wpe.numel()) + 6.0 * cfg["L"] * cfg["C"] * T
        hopper = device == "cuda" and torch.cuda.get_device_capability()[0] == 9
        mfu = f"{100 * flops * tokens_per_second / H100_H200_BF16_PEAK_FLOPS:.1f}%" if hopper else "?"
        peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else 0.0
        print(f"summary | {ms:.1f} ms/step | {tokens_per_second:.0f} tok/s | MFU {mfu} of the BF16 peak | "
              f"peak memory {peak:.2f} GiB")
    if args.output_dir:
        os.makedirs(args.output_dir, exist_ok=True)
        write_model(cfg, model, os.path.join(args.output_dir, f"model_{args.steps:08d}.bin"))
    if log:
        log.close()


if __name__ == "__main__":
    main()

"""gpu_checks.py: the Python parts of test/test_gpu.sh, one function each: the checks of the trainers' logs
(--log_file's JSON lines) and debug states (debug_state.py), and the input files the suite plants. test_gpu.sh
says what each check shows and why its bound holds; this file says how it is computed.

    python3 test/gpu_checks.py CHECK ARGS...     exit status 0: passed (a file made); else the reason on stderr
"""
import json
import math
import random
import re
import struct
import sys

import debug_state

FMAX = {"e4m3": 448.0, "e5m2": 57344.0}  # --fp8_margin 0


def f32(x):
    """x rounded to float32 (a logged %.9g value: the float, to the nearest float)"""
    return struct.unpack("f", struct.pack("f", x))[0]


def records(log, kind):
    """the records of a JSON-lines log whose text names kind (e.g. '"fp8_stats"')"""
    return [json.loads(line) for line in open(log) if kind in line]


def shard_header(shard, tokens):
    """llm.c's shard header (256 int32: magic, version, tokens) of shard, with its token count set"""
    header = bytearray(shard[:1024])
    struct.pack_into("<i", header, 8, tokens)
    return header


def block_scales(gpu_log, cpu_log):
    """A block recipe's step-1 statistics: the weights' equal the CPU's bit for bit, the others' amaxes and
    scales within 2^-7 (layer 0's qkv input), 2^-3 (every later input), 2^-2 (output gradients)."""
    rec = lambda p: {r["tensor"]: r for r in records(p, '"fp8_stats"')}
    gpu, cpu = rec(gpu_log), rec(cpu_log)
    keys = ("amax", "scale", "scale_min")
    ok = len(gpu) == len(cpu) == 24
    for t, c in cpu.items():
        g = gpu[t]
        if t.endswith("weight"):
            ok &= all(g[k] == c[k] for k in keys + ("scale_max", "saturated", "flushed", "elements"))
        else:
            bound = 2**-2 if t.endswith("grad_output") else 2**-7 if t == "layer 0 qkv input" else 2**-3
            ok &= all(abs(g[k] - c[k]) <= bound * abs(c[k]) for k in keys) and g["elements"] == c["elements"]
        ok &= g["scale_min"] <= g["scale_max"]
    return 0 if ok else 1


def exact_scales(log, recipe):
    """Every step's scales (the current recipe's every cast, both recipes' weights) are the correctly rounded
    fmax / amax of that step's amax, and some amax went down from one step to the next."""
    checked, decreased, last = 0, 0, {}
    for r in records(log, '"fp8_stats"'):
        if recipe == "current" or r["tensor"].endswith("weight"):
            amax = f32(r["amax"])
            exact = f32(FMAX[r["format"]] / amax) if amax > 0 else 1.0
            if f32(r["scale"]) != exact:
                return f"step {r['step']} {r['tensor']}: scale {r['scale']}, its amax {r['amax']} gives {exact}"
            checked += 1
            decreased += r["tensor"] in last and amax < last[r["tensor"]]
            last[r["tensor"]] = amax
    return 0 if checked >= 6 * 8 and decreased > 0 else f"{checked} scales checked, {decreased} amaxes went down"


def repeat_shard(shard_path, out, period):
    """out: the shard's first period tokens repeated 64 times (period = B*T: every batch the same)"""
    shard, period = open(shard_path, "rb").read(), int(period)
    tokens = shard[1024:1024 + 2 * period] * 64
    open(out, "wb").write(shard_header(shard, period * 64) + tokens)
    return 0


def fast_accum(sums, none, forward, every):
    """The debug states of --fp8_fast_accum 0, 1, 2: with FP32 sums (sums = fp32) all the same bits; else 0 and
    1 differ in the logits, 1 and 2 share the logits and differ in the gradients."""
    none, forward, every = (debug_state.read(p) for p in (none, forward, every))
    if sums == "fp32":
        same = none.logits == forward.logits == every.logits and none.grads == forward.grads == every.grads
        problems = [] if same else ["the settings give different bits"]
    else:
        problems = [what for what, wrong in (("0 and 1 give the same logits", none.logits == forward.logits),
                                             ("1 and 2 give different logits", forward.logits != every.logits),
                                             ("1 and 2 give the same gradients", forward.grads == every.grads))
                    if wrong]
    return "; ".join(problems) if problems else 0


def scaled_rope(model, out):
    """out: the model file with its header's use_scaled_rope (word 9) set"""
    data = bytearray(open(model, "rb").read())
    data[4 * 9:4 * 10] = (1).to_bytes(4, "little")
    open(out, "wb").write(data)
    return 0


def logits_differ(a, b):
    """two debug states' logits differ"""
    return 0 if debug_state.read(a).logits != debug_state.read(b).logits else 1


def spike_shard(shard_path, out, n):
    """out: n random tokens (of 256), then the shard's text"""
    shard, n = open(shard_path, "rb").read(), int(n)
    rng = random.Random(1)
    noise = struct.pack(f"<{n}H", *(rng.randrange(256) for _ in range(n)))
    text = shard[1024:1024 + 2 * (n + 1)]
    open(out, "wb").write(shard_header(shard, (len(noise) + len(text)) // 2) + noise + text)
    return 0


def norm_guard(log, window, z, min_samples):
    """Each logged step's skip is the guard's rule (health.h) replayed on the logged norms, and one step skips."""
    window, z, min_samples = int(window), float(z), int(min_samples)
    norms, skipped_any = [0.0] * window, False
    count = 0
    for step in records(log, '"type":"step"'):
        n = min(count, window)
        threshold = math.inf
        if n >= min_samples:
            mean = 0.0
            for v in norms[:n]:
                mean += v
            mean /= n
            var = 0.0
            for v in norms[:n]:
                var += (v - mean) * (v - mean)
            threshold = f32(mean + z * math.sqrt(var / (n - 1)))
        skip = step["grad_norm"] > threshold
        if skip != bool(step["skipped"]):
            return f"step {step['step']}: norm {step['grad_norm']}, threshold {threshold}, skipped {step['skipped']}"
        skipped_any |= skip
        if not skip:
            norms[count % window] = step["grad_norm"]
            count += 1
    return 0 if skipped_any else "no step skipped"


def eval_only(eval_log, bf16_log, fp8_log):
    """--eval_only's two validation losses are those of the learning-rate-0 runs' last validation"""
    ev = records(eval_log, '"eval_only"')[0]
    val = lambda p: records(p, '"type":"val"')[-1]["val_loss"]
    return 0 if ev["bf16_val_loss"] == val(bf16_log) and ev["fp8_val_loss"] == val(fp8_log) else 1


def hot_gains(model, out):
    """out: the model file with every layer's first LayerNorm gain 1000"""
    data = bytearray(open(model, "rb").read())
    h = struct.unpack("<256i", data[:1024])
    maxT, L, C, Vp = h[2], h[4], h[6], h[7]
    offset = 1024 + 4 * (Vp * C + maxT * C)
    data[offset:offset + 4 * L * C] = struct.pack(f"<{L * C}f", *([1000.0] * (L * C)))
    open(out, "wb").write(data)
    return 0


def saturation(gpu_log, cpu_log):
    """Step 2's layer 0 qkv input saturates on the GPU, its count within 1% + 2 of the CPU's; every tensor has
    the CPU's element count."""
    rec = lambda p: {r["tensor"]: r for r in records(p, '"fp8_stats"') if r["step"] == 2}
    gpu, cpu = rec(gpu_log), rec(cpu_log)
    q_gpu, q_cpu = gpu["layer 0 qkv input"], cpu["layer 0 qkv input"]
    # the same cast of nearly the same values at nearly the same scale: the counts may differ only by values
    # that sit within FP32 summation noise of the threshold, a tiny fraction
    ok = q_gpu["saturated"] > 0 and abs(q_gpu["saturated"] - q_cpu["saturated"]) <= 0.01 * q_cpu["saturated"] + 2
    ok &= all(gpu[t]["elements"] == cpu[t]["elements"] for t in cpu)
    return 0 if ok else 1


def fresh_scales(log):
    """A fresh run's step 1, no history yet: every cast measured, scale = fmax / amax in float32 (the max over
    the ranks)"""
    recs = records(log, '"fp8_stats"')
    ok = len(recs) > 0 and all(abs(r["amax"] * r["scale"] / FMAX[r["format"]] - 1) < 1e-6
                               for r in recs if r["amax"] > 0)
    return 0 if ok else 1


def fast_expected(versions):
    """prints 1 where the fast attention must run (the versions line: a cuDNN build on Hopper, or on Blackwell
    with cuDNN 9.18 or newer), else 0"""
    cc = re.search(r"compute capability (\d+)\.(\d+)", versions)
    cudnn = re.search(r"cuDNN (\d+)\.(\d+)", versions)
    major = int(cc.group(1)) if cc else 0
    print(int(bool(cudnn) and (major == 9 or (major >= 10 and tuple(map(int, cudnn.groups())) >= (9, 18)))))
    return 0


CHECKS = {f.__name__: f for f in (block_scales, exact_scales, repeat_shard, fast_accum, scaled_rope, logits_differ,
                                   spike_shard, norm_guard, eval_only, hot_gains, saturation, fresh_scales,
                                   fast_expected)}

if __name__ == "__main__":
    sys.exit(CHECKS[sys.argv[1]](*sys.argv[2:]))

#!/usr/bin/env python3
"""dev/perf_model.py: what a training step of the CUDA trainer should cost on one H200, by kernel family.

For a model and micro-batch it counts the FLOPs of the GEMMs and of the attention, and the DRAM bytes of the
memory-bound kernels (LayerNorm, residual, GELU, the FP8 casts, bias gradients, cross-entropy, AdamW), and
divides them by achieved rates: the assumed fractions of the H200's peaks below, flags so that measured
ones (docs/gpu-results.md, dev/bench_gemm, dev/bench_kernels) replace them. It prints the expected ms/step,
tokens/s and MFU of three states of the trainer, so that the effect of issue 10's work is stated before a
GPU measures it:
  before    the attention on CUDA cores (gpu/attention.cuh's exact kernels, the only attention before), the
            cross-entropy reading each logits row three times (--attention exact runs this attention today)
  now       cuDNN's fused attention (--attention fast, the default where cuDNN is built in), the one-pass
            (online softmax) cross-entropy: a read and a write of the logits (its second read hits L2)
  fused     now, plus the fusions still planned: FP8 casts written by the kernel that produces the tensor
            (no separate read), GELU and bias gradients in GEMM epilogues
The byte counts are per token and layer, in the order the step runs its kernels (comments below); a kernel
is taken to move its bytes at the assumed bandwidth and the GEMMs and attention to run at their assumed
rates, one after the other (the step has no overlap between them). Host waits between steps are not
modelled: the trainer captures the step in a CUDA Graph.

Usage: python3 dev/perf_model.py [--model 124M|1.5B|all] [--dtype bfloat16|float8|all] [rate flags]
"""
import argparse

H200_BF16_PEAK = 989.4e12  # dense tensor-core FLOP/s (the MFU denominator, as the trainer's summary line)
H200_FP8_PEAK = 1978.9e12
H200_HBM_BYTES_PER_S = 4.8e12

MODELS = {  # L, C, NH, padded vocabulary, micro-batch B, T: gpu_check.sh's runs
    "124M": (12, 768, 12, 50304, 16, 1024),
    "1.5B": (48, 1600, 25, 50304, 8, 1024),
}


def attention_flops(L, C, T, tokens):
    """Causal attention: the forward's QK^T and PV (2 T HS each per query and head, halved by the mask),
    the backward 2.5 times that (recomputed S, dV, dP, dQ, dK): FlashAttention's accounting."""
    forward = 2 * 2 * T * C / 2 * tokens * L
    return forward, 2.5 * forward


def gemm_flops(L, C, Vp, tokens):
    """Forward + backward (x3) of the 12 C^2 block weights per layer and the LM head (Vp C)."""
    return 6 * 12 * C * C * L * tokens, 6 * Vp * C * tokens


def memory_bytes(L, C, Vp, tokens, params, dtype, state):
    """DRAM bytes of the memory-bound kernels of one step, per family."""
    b = 2  # BF16 activations
    fused = state == "fused"
    per_layer = {
        # forward: 2 LayerNorms (read x, write y), residual add (2 reads, 1 write), GELU (read 4C, write 4C)
        "layernorm/residual": (2 * 2 * C + 3 * C) * b,
        "gelu": 0 if fused else 2 * 4 * C * b,
        # backward: 2 LayerNorm backwards (read dy, x, write dx), the residual gradient add, GELU backward
        # (read pre-activation and gradient, write it), the bias-gradient reductions (read 3C + C + 4C + C)
        "layernorm/residual bwd": (2 * 3 * C + 3 * C) * b,
        "gelu bwd": 0 if fused else 3 * 4 * C * b,
        "bias gradients": 0 if fused else 9 * C * b,
    }
    if dtype == "float8":
        # the four linears' inputs (C, C, C, 4C elements) and output gradients (3C, C, 4C, C): each read in
        # BF16 and written twice in FP8 (the tensor and its transpose); fused, the producer writes them
        inputs, grads = 7 * C, 9 * C
        read = 0 if fused else b
        per_layer["fp8 casts"] = (inputs + grads) * (read + 2)
    totals = {name: per_token * tokens * L for name, per_token in per_layer.items()}
    # cross-entropy over (tokens, Vp) BF16 logits: three reads and a write before, one read and a write now
    totals["cross-entropy"] = tokens * Vp * b * (4 if state == "before" else 2)
    # AdamW over FP32 masters: read param, grad, m, v; write param, m, v; write the BF16 (and FP8) copies
    totals["adamw"] = params * (7 * 4 + 2 + (1 if dtype == "float8" else 0))
    return totals


def step_model(model, dtype, state, rates):
    L, C, NH, Vp, B, T = MODELS[model]
    tokens = B * T
    params = 12 * C * C * L + Vp * C + T * C + 13 * C * L
    block_flops, head_flops = gemm_flops(L, C, Vp, tokens)
    att_forward, att_backward = attention_flops(L, C, T, tokens)
    block_rate = rates.fp8_tflops if dtype == "float8" else rates.bf16_tflops
    ms = {
        "GEMM (block linears)": block_flops / (block_rate * 1e12) * 1e3,
        "GEMM (LM head, BF16)": head_flops / (rates.bf16_tflops * 1e12) * 1e3,
    }
    attention_rate = rates.exact_attention_tflops if state == "before" else rates.fast_attention_tflops
    ms["attention"] = (att_forward + att_backward) / (attention_rate * 1e12) * 1e3
    for name, nbytes in memory_bytes(L, C, Vp, tokens, params, dtype, state).items():
        ms[name] = nbytes / (rates.bandwidth_gbps * 1e9) * 1e3
    total = sum(ms.values())
    model_flops = (6 * params + 12 * L * C * T) * tokens  # the trainer's MFU accounting
    return ms, total, tokens / (total / 1e3), 100 * model_flops / (total / 1e3) / H200_BF16_PEAK


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="all", choices=["all"] + list(MODELS))
    parser.add_argument("--dtype", default="all", choices=["all", "bfloat16", "float8"])
    # Assumed achieved rates, fractions of the H200's peaks: cuBLASLt's large GEMMs reach 60-70% of the
    # tensor-core peak in BF16 and about 55% in FP8; cuDNN's fused attention about 40% (forward and
    # backward together, head size 64); the exact kernels run FP32 multiply and add as two instructions on
    # CUDA cores (67 TFLOP/s of FMA peak: 33.5 for them), compute q.k twice in the forward and six dot
    # products per pair in the backward (about 1.3 times the counted FLOPs) and reach about half of the
    # instruction rate: some 12 counted TFLOP/s. Memory-bound kernels reach 70% of HBM bandwidth.
    parser.add_argument("--bf16_tflops", type=float, default=0.65 * H200_BF16_PEAK / 1e12)
    parser.add_argument("--fp8_tflops", type=float, default=0.55 * H200_FP8_PEAK / 1e12)
    parser.add_argument("--fast_attention_tflops", type=float, default=0.40 * H200_BF16_PEAK / 1e12)
    parser.add_argument("--exact_attention_tflops", type=float, default=12.0)
    parser.add_argument("--bandwidth_gbps", type=float, default=0.70 * H200_HBM_BYTES_PER_S / 1e9)
    rates = parser.parse_args()
    models = list(MODELS) if rates.model == "all" else [rates.model]
    dtypes = ["bfloat16", "float8"] if rates.dtype == "all" else [rates.dtype]
    print(f"assumed rates: GEMM {rates.bf16_tflops:.0f} (BF16) / {rates.fp8_tflops:.0f} (FP8) TFLOP/s, "
          f"attention {rates.fast_attention_tflops:.0f} (fast) / {rates.exact_attention_tflops:.0f} (exact) "
          f"TFLOP/s, memory {rates.bandwidth_gbps:.0f} GB/s")
    for model in models:
        L, C, NH, Vp, B, T = MODELS[model]
        for dtype in dtypes:
            print(f"\n{model} {dtype}, B={B} T={T}")
            rows = {state: step_model(model, dtype, state, rates) for state in ("before", "now", "fused")}
            print(f"  {'ms per step':24s}" + "".join(f"{state:>10s}" for state in rows))
            for family in rows["before"][0]:
                print(f"  {family:24s}" + "".join(f"{rows[s][0][family]:10.2f}" for s in rows))
            print(f"  {'total':24s}" + "".join(f"{rows[s][1]:10.1f}" for s in rows))
            print(f"  {'tokens/s':24s}" + "".join(f"{rows[s][2]:10.0f}" for s in rows))
            print(f"  {'MFU (BF16 peak) %':24s}" + "".join(f"{rows[s][3]:10.1f}" for s in rows))


if __name__ == "__main__":
    main()

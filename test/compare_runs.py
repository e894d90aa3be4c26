#!/usr/bin/env python3
"""Compares a data-parallel run with the one-process run it must equal: N processes with micro-batch B
against one process with batch N*B. Reads each run's JSON-lines log (per-step loss and gradient norm) and
final model file (llm.c format, version 3: a GPT-2 file's 256 int32 header or a Llama file's 256 int32 and
256 float32 header, then float32 values) and exits 1 when a
difference exceeds the bound below.

Why the bounds. Both runs compute the same per-row values; what differs is the order of float32 sums
over rows: each rank sums its rows of every weight gradient, then the ranks' sums are added (and the
loss mean likewise). Two orders of a K-term float32 sum differ by at most about 2*K*u of the sum of
the terms' magnitudes, u = 2^-24, with K = the rows of a global batch (B*T*N). So:
  float32: every step's loss and gradient norm agree within 2*K*u relative; AdamW moves a weight by at
    most lr per step and a relative change of the gradient changes the update by at most as much, so
    the RMS weight difference is within 2*K*u * lr * steps; single weights whose gradient is at the
    noise floor can differ by up to 2*lr per step (AdamW divides by sqrt(v)), which bounds the maximum.
  float8, step 1: the weights are still identical, so every FP8 operand is bit-identical and step 1
    obeys the float32 bounds.
  float8, later steps: a value that the summation order moves across an FP8 rounding boundary rounds to
    the neighbouring FP8 value, 2^-3 (E4M3) of itself away. That happens with probability about
    2*K*u / 2^-3, so the expected change per step is again about 2*K*u, but it is concentrated in a few
    values and fluctuates far above its mean in a small batch. We allow 1e-3 relative in loss and norm
    (about 30 * 2*K*u per step for the few steps compared) and an RMS weight difference of 2% of
    lr * steps (as if one weight in 10^4 took the full 2*lr update difference every step). The
    negative control in test_dist.sh (a different batch) exceeds these bounds by 10x or more.

With --float32 LOG MODEL the two runs are instead the same processes and flags in two trainers that
round at the same places (the CUDA trainer, here its CPU emulation, against train_cpu), and the third
is train_cpu in float32 with those flags. They differ by the order of float32 sums, which flips a BF16
or FP8 rounding only for values within that difference of a boundary: the same kind of error as the
roundings themselves, in far fewer values. So, as test/compare_debug_state.c argues for one step, the
candidate may be as far from the reference as the reference is from float32 (the whole effect of every
rounding), never farther: every step's loss and gradient norm within the largest loss (norm) gap between
the reference and float32 over the run, and the RMS weight difference within the reference's RMS
distance to float32; with the float32 floors above for runs where the roundings happen to cancel.
"""
import argparse
import json
import sys

import numpy as np

U = 2.0**-24


def steps_of(log_path):
    steps = {}
    with open(log_path) as f:
        for line in f:
            record = json.loads(line)
            if record.get("type") == "step":
                steps[record["step"]] = (record["loss"], record["grad_norm"])
    return steps


def weights_of(model_path):
    values = np.fromfile(model_path, dtype=np.float32)
    header = values[:256].view(np.int32)
    header_floats = {20240326: 256, 20240803: 512}.get(int(header[0]))  # GPT-2, Llama
    if header_floats is None or header[1] != 3:
        sys.exit(f"error: {model_path}: not a version 3 llm.c model file")
    return values[header_floats:].astype(np.float64)


def check_weights(ref_w, run_w, rms_bound, max_bound, failures):
    """The RMS and the largest weight difference against their bounds; returns both."""
    if ref_w.shape != run_w.shape:
        sys.exit("error: the model files hold different shapes")
    diff = np.abs(run_w - ref_w)
    distance, largest = float(np.sqrt(np.mean(diff**2))), float(diff.max())
    if distance > rms_bound:
        failures.append(f"weights: RMS difference {distance:.3g} > {rms_bound:.3g}")
    if largest > max_bound:
        failures.append(f"weights: largest difference {largest:.3g} > {max_bound:.3g}")
    return distance, largest


def compare_process_counts(args, ref_steps, run_steps):
    """N processes against one: the float32 summation-order bounds of the docstring."""
    bound32 = 2 * args.rows * U
    failures, worst = [], 0.0
    for step in sorted(ref_steps):
        bound = bound32 if args.dtype == "float32" or step == 1 else 1e-3
        for name, ref, run in zip(("loss", "grad_norm"), ref_steps[step], run_steps[step]):
            rel = abs(run - ref) / abs(ref)
            worst = max(worst, rel / bound)
            if rel > bound:
                failures.append(f"step {step} {name}: {run} vs {ref} (relative {rel:.3g} > {bound:.3g})")
    steps = len(ref_steps)
    rms_bound = (bound32 if args.dtype == "float32" else 0.02) * args.lr * steps
    max_bound = 2 * args.lr * steps
    distance, largest = check_weights(weights_of(args.ref[1]), weights_of(args.run[1]), rms_bound, max_bound,
                                      failures)
    print(
        f"{args.dtype}: {steps} steps, worst loss/norm difference {worst:.3g} of its bound; "
        f"weights RMS {distance:.3g} (bound {rms_bound:.3g}), max {largest:.3g} (bound {max_bound:.3g})"
    )
    return failures


def compare_to_float32(args, ref_steps, run_steps):
    """Two trainers, same processes and flags: within the reference's distance to float32 (--float32)."""
    f32_steps = steps_of(args.float32[0])
    if sorted(f32_steps) != sorted(ref_steps):
        sys.exit("error: the float32 log holds other steps than the reference's")
    bound32 = 2 * args.rows * U
    failures, worst = [], 0.0
    for i, name in enumerate(("loss", "grad_norm")):
        gap = max(abs(ref_steps[s][i] - f32_steps[s][i]) for s in ref_steps)
        for step in sorted(ref_steps):
            ref, run = ref_steps[step][i], run_steps[step][i]
            bound = max(gap, bound32 * abs(ref))
            worst = max(worst, abs(run - ref) / bound)
            if abs(run - ref) > bound:
                failures.append(f"step {step} {name}: {run} vs {ref} (difference {abs(run - ref):.3g} > {bound:.3g})")
    steps = len(ref_steps)
    ref_w, f32_w = weights_of(args.ref[1]), weights_of(args.float32[1])
    if ref_w.shape != f32_w.shape:
        sys.exit("error: the model files hold different shapes")
    rms_bound = max(float(np.sqrt(np.mean((ref_w - f32_w) ** 2))), bound32 * args.lr * steps)
    max_bound = 2 * args.lr * steps
    distance, largest = check_weights(ref_w, weights_of(args.run[1]), rms_bound, max_bound, failures)
    print(
        f"{args.dtype} vs the reference: {steps} steps, worst loss/norm difference {worst:.3g} of its bound; "
        f"weights RMS {distance:.3g} (bound {rms_bound:.3g}, the reference's distance to float32), "
        f"max {largest:.3g} (bound {max_bound:.3g})"
    )
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ref", nargs=2, metavar=("LOG", "MODEL"), required=True, help="the one-process run")
    parser.add_argument("--run", nargs=2, metavar=("LOG", "MODEL"), required=True, help="the N-process run")
    parser.add_argument("--dtype", choices=["float32", "bfloat16", "float8"], required=True)
    parser.add_argument("--rows", type=int, required=True, help="rows of a global batch: B*T*N")
    parser.add_argument("--lr", type=float, required=True)
    parser.add_argument("--float32", nargs=2, metavar=("LOG", "MODEL"),
                        help="train_cpu in float32 with the reference's flags: compare trainers, not process counts")
    args = parser.parse_args()

    ref_steps, run_steps = steps_of(args.ref[0]), steps_of(args.run[0])
    if sorted(ref_steps) != sorted(run_steps) or not ref_steps:
        sys.exit(f"error: the logs hold different steps: {sorted(ref_steps)} vs {sorted(run_steps)}")
    compare = compare_to_float32 if args.float32 else compare_process_counts
    failures = compare(args, ref_steps, run_steps)
    for failure in failures:
        print("  " + failure)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

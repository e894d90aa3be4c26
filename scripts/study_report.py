#!/usr/bin/env python3
"""The tables and the plot of the FP8 recipe study (scripts/study_recipes.sh) from its JSON-lines logs.

    scripts/study_report.py DIR [--recipes bfloat16 delayed ...] [--seeds 3]

Reads DIR/<recipe>_seed<n>.jsonl and writes DIR/report.md and DIR/recipes.png (the plot needs matplotlib;
without it the report is still written and a line says so).

Per recipe, over the seeds: the final validation loss (mean and sample standard deviation); the gap to
bfloat16, paired by seed (each seed has the same initialisation and data order in every recipe, so the
paired difference cancels most of the seed-to-seed variation): mean relative gap and its standard error
(std of the paired differences / sqrt(seeds)); the steps until the training loss, as a 20-step running mean,
first reaches the target (bfloat16's final running mean, averaged over seeds, plus 2%); and the FP8
telemetry summed over the run: values saturated, values flushed to zero (and their share of all cast
values), and for the block recipes the median over tensors of the spread of block scales at the last step
(log2 of largest / smallest scale)."""
import argparse
import json
import math
import os
import statistics
import sys

WINDOW = 20


def load(path):
    steps, vals, fp8 = [], [], {"saturated": 0, "flushed": 0, "elements": 0, "spread": []}
    last_step = 0
    for line in open(path):
        r = json.loads(line)
        if r["type"] == "step":
            steps.append((r["step"], r["loss"]))
            last_step = r["step"]
        elif r["type"] == "val":
            vals.append((r["step"], r["val_loss"]))
        elif r["type"] == "fp8_stats":
            for key in ("saturated", "flushed", "elements"):
                fp8[key] += r[key]
            if r["step"] == last_step and r.get("scale_min") and r.get("scale_max"):
                fp8["spread"].append((r["step"], math.log2(r["scale_max"] / r["scale_min"])))
    final_step = max((s for s, _ in fp8["spread"]), default=0)
    fp8["spread"] = [v for s, v in fp8["spread"] if s == final_step]
    return {"steps": steps, "vals": vals, "fp8": fp8}


def running_mean(steps):
    out, window = [], []
    for step, loss in steps:
        window.append(loss)
        if len(window) > WINDOW:
            window.pop(0)
        out.append((step, sum(window) / len(window)))
    return out


def mean_std(values):
    return statistics.mean(values), (statistics.stdev(values) if len(values) > 1 else float("nan"))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("dir")
    parser.add_argument("--recipes", nargs="+", default=["bfloat16", "delayed", "current", "blockwise", "mxfp8"])
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    runs = {}
    for recipe in args.recipes:
        for seed in range(1, args.seeds + 1):
            path = os.path.join(args.dir, f"{recipe}_seed{seed}.jsonl")
            if not os.path.exists(path):
                sys.exit(f"study_report.py: {path} is missing (run scripts/study_recipes.sh)")
            runs[recipe, seed] = load(path)
    seeds = range(1, args.seeds + 1)
    base = "bfloat16"
    target = 1.02 * statistics.mean(running_mean(runs[base, s]["steps"])[-1][1] for s in seeds)
    lines = [f"Final validation loss over {args.seeds} seeds; gap to {base} paired by seed; target training loss "
             f"{target:.4f} ({base}'s final {WINDOW}-step running mean + 2%).", "",
             "| recipe | final val loss (mean +- std) | gap to bfloat16 (mean +- s.e.) | steps to target | saturated "
             "| flushed (share) | block scale spread (log2, median) |",
             "|---|---|---|---|---|---|---|"]
    base_final = {s: runs[base, s]["vals"][-1][1] for s in seeds}
    base_mean, base_std = mean_std(list(base_final.values()))
    for recipe in args.recipes:
        finals = [runs[recipe, s]["vals"][-1][1] for s in seeds]
        mean, std = mean_std(finals)
        diffs = [runs[recipe, s]["vals"][-1][1] - base_final[s] for s in seeds]
        d_mean, d_std = mean_std(diffs)
        gap = "" if recipe == base else (
            f"{100 * d_mean / base_mean:+.3f}% +- {100 * d_std / math.sqrt(len(diffs)) / base_mean:.3f}%")
        reach = []
        for s in seeds:
            hit = [step for step, loss in running_mean(runs[recipe, s]["steps"]) if loss <= target]
            reach.append(hit[0] if hit else None)
        reached = [r for r in reach if r is not None]
        steps_text = (f"{statistics.mean(reached):.0f}" if reached else "not reached") + (
            "" if len(reached) == len(reach) else f" ({len(reached)} of {len(reach)} seeds)")
        fp8 = [runs[recipe, s]["fp8"] for s in seeds]
        if recipe == base:
            telemetry = " | | "
        else:
            sat = statistics.mean(f["saturated"] for f in fp8)
            flushed = statistics.mean(f["flushed"] for f in fp8)
            elements = statistics.mean(f["elements"] for f in fp8)
            spreads = [v for f in fp8 for v in f["spread"]]
            spread = f"{statistics.median(spreads):.1f}" if spreads and recipe in ("blockwise", "mxfp8") else ""
            telemetry = f"{sat:.0f} | {flushed:.0f} ({100 * flushed / elements:.3f}%) | {spread}"
        lines.append(f"| {recipe} | {mean:.4f} +- {std:.4f} | {gap} | {steps_text} | {telemetry} |")
    lines += ["", f"bfloat16 seed spread (std of the final validation loss): {base_std:.4f} "
              f"({100 * base_std / base_mean:.3f}% of its mean)."]
    report = "\n".join(lines) + "\n"
    open(os.path.join(args.dir, "report.md"), "w").write(report)
    print(report, end="")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("study_report.py: matplotlib is not installed: no plot (make python_deps)", file=sys.stderr)
        return
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 8), sharex=True)
    for recipe in args.recipes:
        val_steps = [step for step, _ in runs[recipe, 1]["vals"]]
        per_step = list(zip(*[[loss for _, loss in runs[recipe, s]["vals"]] for s in seeds]))
        means = [statistics.mean(v) for v in per_step]
        top.errorbar(val_steps, means, yerr=[[m - min(v) for m, v in zip(means, per_step)],
                                             [max(v) - m for m, v in zip(means, per_step)]],
                     marker="o", capsize=3, label=recipe)
        curves = [running_mean(runs[recipe, s]["steps"]) for s in seeds]
        base_curves = [running_mean(runs[base, s]["steps"]) for s in seeds]
        diff = [statistics.mean(c[i][1] - b[i][1] for c, b in zip(curves, base_curves))
                for i in range(len(curves[0]))]
        bottom.plot([step for step, _ in curves[0]], diff, label=recipe)
    top.set_ylabel("validation loss (mean, min-max over seeds)")
    later = [loss for (recipe, seed), run in runs.items() for _, loss in run["vals"][1:]]  # the curves settle
    if later:
        lo, hi = min(later), max(later)
        top.set_ylim(lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo))
    top.legend()
    bottom.axhline(0, color="gray", linewidth=0.5)
    bottom.set_ylabel(f"training loss - bfloat16's ({WINDOW}-step mean, seed mean)")
    bottom.set_xlabel("step")
    fig.tight_layout()
    fig.savefig(os.path.join(args.dir, "recipes.png"), dpi=110)


if __name__ == "__main__":
    main()

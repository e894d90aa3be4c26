#!/usr/bin/env python3
"""plot_compare.py: the table and the figure of scripts/compare.sh (float8 vs bfloat16).

Usage: python3 scripts/plot_compare.py DIR [--target_loss X] [--trainer NAME] [--flags "TRAINER FLAGS"]

Reads, for DTYPE in bfloat16 and float8, DIR/DTYPE.jsonl (the trainer's --log_file) and DIR/DTYPE.txt (its
stdout). Prints a markdown table and writes it to DIR/compare.md, then draws DIR/compare.png (needs
matplotlib; without it: a one-line error after the table, exit status 1).

The table, one column per dtype:
  ms/step, tokens/s      medians over the steps after the first 3 (all steps when there are 3 or fewer),
                         from the JSON-lines step records; the same for the CPU and the GPU trainer
  MFU, peak memory       from the GPU trainer's final 'summary | ...' line; 'n/a (CPU)' for train_cpu
  final val loss         the last "val" record, and its perplexity
  eval accuracy          the last "eval" record (--eval_data: K of N multiple-choice examples right), as
                         K/N +- its binomial standard error sqrt(p (1 - p) / N); the difference's error is
                         sqrt(se_bf16^2 + se_fp8^2), which treats the two runs as independent samples (the same
                         examples make it an upper bound)
  steps to target        the first step whose training loss is <= the target loss, or 'not reached'.
                         Default target: 1.05 x the mean training loss of the bfloat16 run over its last
                         10% of steps (at least 1): 'how soon does each run get within 5% of where the
                         baseline ends'. A mean, not the last step's loss alone, which is one noisy batch.
  hours to target        those steps x the median ms/step: the time a run of this shape takes to get there
  energy, cost           from an 'energy | ...' line of the trainer's stdout, else 'not measured'
  rental                 the CUDA trainer's 'rental | G GPU-hours ... | cost C' line (--price_gpu_hour), else
                         'not logged'
The last column is float8's difference from bfloat16 (a ratio for times and rates). Then one line: the
relative gap of the final validation loss, 100 * (float8 - bfloat16) / bfloat16, percent.
The figure: the training and validation losses, their difference, and (with eval records) the eval accuracy
with its standard error. Without matplotlib the table is still written and one line says so (exit 0).
"""
import argparse
import json
import math
import os
import re
import sys

DTYPES = ("bfloat16", "float8")
SKIP_FIRST_STEPS = 3  # timing medians leave out the warm-up steps (allocation, caches, graph capture)
DEFAULT_TARGET_FACTOR = 1.05
DEFAULT_TARGET_TAIL = 0.10


# ---------------------------------------------------------------------------------------------------------
# reading the runs

def _json_line(line):
    # the trainers print non-finite numbers with printf ("nan", "-nan", "inf"), which JSON does not allow
    line = re.sub(r'(?<=[:,\[])\s*-?nan\b', 'NaN', line)
    line = re.sub(r'(?<=[:,\[])\s*inf\b', 'Infinity', line)
    line = re.sub(r'(?<=[:,\[])\s*-inf\b', '-Infinity', line)
    return json.loads(line)


def read_log(path):
    steps, vals, evals = [], [], []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                record = _json_line(line)
            except ValueError:
                sys.exit(f"plot_compare.py: {path}:{number}: not a JSON line: {line[:80]}")
            if record.get("type") == "step":
                # a non-finite loss or norm is logged as null (or, by older trainers, as nan)
                for key in ("loss", "grad_norm"):
                    if record.get(key) is None:
                        record[key] = float("nan")
                steps.append(record)
            elif record.get("type") == "val":
                vals.append(record)
            elif record.get("type") == "eval":
                evals.append(record)
    if not steps:
        sys.exit(f"plot_compare.py: {path}: no step records (did the run fail? see the .txt beside it)")
    return steps, vals, evals


def accuracy_error(record):
    """(accuracy, binomial standard error) of an eval record."""
    p, n = record["correct"] / record["examples"], record["examples"]
    return p, math.sqrt(p * (1.0 - p) / n)


def parse_summary(text):
    """The GPU trainer's last 'summary | X ms/step | Y tok/s | MFU Z% of the BF16 peak | peak memory W GiB
    (device in use: V GiB)' line, as {'mfu': 'Z%', 'peak_memory': 'W GiB'}; None when there is none."""
    found = None
    for line in text.splitlines():
        if not line.startswith("summary |"):
            continue
        mfu = re.search(r"MFU\s+([0-9.]+)\s*%", line)
        mem = re.search(r"peak memory\s+([0-9.]+)\s*GiB", line)
        found = {"mfu": f"{mfu.group(1)}%" if mfu else None,
                 "peak_memory": f"{mem.group(1)} GiB" if mem else None}
    return found


def parse_energy(text):
    """The last 'energy | J joules | K kWh | cost C' line, as {'energy': 'J J (K kWh)', 'cost': 'C'}; None
    when there is no such line or it has no number (e.g. 'energy | not measured'). The one place that knows
    the line's format: fields are split on '|' and recognised by their unit, so reordered or added fields
    are tolerated."""
    found = None
    for line in text.splitlines():
        fields = [f.strip() for f in line.split("|")]
        if fields[0].lower() != "energy":
            continue
        joules = kwh = cost = None
        for field in fields[1:]:
            low = field.lower()
            number = re.search(r"[-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?", field)
            if low.startswith("cost"):
                cost = field[4:].strip(" :=") or None
            elif number and "kwh" in low:
                kwh = number.group(0)
            elif number and ("joule" in low or re.search(r"\bJ\b", field)):
                joules = number.group(0)
        if joules is None and kwh is None:
            continue
        parts = [f"{joules} J" if joules is not None else None, f"{kwh} kWh" if kwh is not None else None]
        energy = parts[0] + (f" ({parts[1]})" if parts[1] else "") if parts[0] else parts[1]
        found = {"energy": energy, "cost": cost}
    return found


def parse_rental(text):
    """The last 'rental | G GPU-hours (...) | cost C (...)' line as 'G GPU-hours, cost C'; None without one."""
    found = None
    for line in text.splitlines():
        m = re.match(r"rental \|\s*([0-9.eE+-]+) GPU-hours.*\|\s*cost ([0-9.eE+-]+)", line)
        if m:
            found = f"{m.group(1)} GPU-hours, cost {m.group(2)}"
    return found


def median(values):
    values = sorted(values)
    n = len(values)
    if n == 0:
        return float("nan")
    return values[n // 2] if n % 2 else 0.5 * (values[n // 2 - 1] + values[n // 2])


def timed_steps(steps):
    later = [r for r in steps if r["step"] > SKIP_FIRST_STEPS]
    return later if later else steps


def default_target(steps):
    finite = [r["loss"] for r in steps if math.isfinite(r["loss"])]
    tail = finite[-max(1, int(len(finite) * DEFAULT_TARGET_TAIL)):]
    return DEFAULT_TARGET_FACTOR * sum(tail) / len(tail)


def steps_to(steps, target):
    for r in steps:
        if math.isfinite(r["loss"]) and r["loss"] <= target:
            return r["step"]
    return None


# ---------------------------------------------------------------------------------------------------------
# the table

def build_table(runs, target, target_note, trainer, flags):
    on_cpu = "train_cpu" in trainer
    rows = []

    def row(name, a, b, versus=""):
        rows.append(f"| {name} | {a} | {b} | {versus} |")

    bf, f8 = runs["bfloat16"], runs["float8"]
    ms = {d: median([r["ms"] for r in timed_steps(runs[d]["steps"])]) for d in DTYPES}
    tps = {d: median([r["tokens_per_second"] for r in timed_steps(runs[d]["steps"])]) for d in DTYPES}
    row(f"ms/step (median, steps > {SKIP_FIRST_STEPS})", f"{ms['bfloat16']:.2f}", f"{ms['float8']:.2f}",
        f"{ms['float8'] / ms['bfloat16']:.2f}x" if ms["bfloat16"] > 0 else "")
    row(f"tokens/s (median, steps > {SKIP_FIRST_STEPS})", f"{tps['bfloat16']:.0f}", f"{tps['float8']:.0f}",
        f"{tps['float8'] / tps['bfloat16']:.2f}x" if tps["bfloat16"] > 0 else "")
    for key, name in (("mfu", "MFU (of the BF16 peak)"), ("peak_memory", "peak memory")):
        cells = []
        for d in DTYPES:
            summary = runs[d]["summary"]
            if summary and summary.get(key):
                cells.append(summary[key])
            else:
                cells.append("n/a (CPU)" if on_cpu else "not reported")
        row(name, *cells)
    last_val = {d: runs[d]["vals"][-1] if runs[d]["vals"] else None for d in DTYPES}
    if all(last_val.values()):
        vb, vf = last_val["bfloat16"], last_val["float8"]
        row(f"final val loss (step {vb['step']})", f"{vb['val_loss']:.4f}", f"{vf['val_loss']:.4f}",
            f"{vf['val_loss'] - vb['val_loss']:+.4f}")
        row("final val perplexity", f"{vb['perplexity']:.3f}", f"{vf['perplexity']:.3f}",
            f"{vf['perplexity'] - vb['perplexity']:+.3f}")
    else:
        row("final val loss", *["n/a (no validation)" if v is None else f"{v['val_loss']:.4f}"
                                for v in last_val.values()])
        row("final val perplexity", *["n/a (no validation)" if v is None else f"{v['perplexity']:.3f}"
                                      for v in last_val.values()])
    last_eval = {d: runs[d]["evals"][-1] if runs[d]["evals"] else None for d in DTYPES}
    if all(last_eval.values()):
        (pb, eb), (pf, ef) = accuracy_error(last_eval["bfloat16"]), accuracy_error(last_eval["float8"])
        row(f"eval accuracy ± std. error (step {last_eval['bfloat16']['step']}, "
            f"{last_eval['bfloat16']['examples']} examples)",
            *[f"{accuracy_error(last_eval[d])[0]:.4f} ± {accuracy_error(last_eval[d])[1]:.4f} "
              f"({last_eval[d]['correct']}/{last_eval[d]['examples']})" for d in DTYPES],
            f"{pf - pb:+.4f} ± {math.sqrt(eb * eb + ef * ef):.4f}")
    else:
        row("eval accuracy ± std. error",
            *["n/a (no --eval_data)" if e is None else f"{accuracy_error(e)[0]:.4f} ± {accuracy_error(e)[1]:.4f}"
              for e in last_eval.values()])
    reached = {d: steps_to(runs[d]["steps"], target) for d in DTYPES}
    row(f"steps to train loss <= {target:.4f}",
        *[str(reached[d]) if reached[d] is not None else "not reached" for d in DTYPES])
    hours = {d: reached[d] * ms[d] / 3.6e6 if reached[d] is not None else None for d in DTYPES}
    row("hours to train loss target (steps x median ms/step)",
        *[f"{hours[d]:.3g}" if hours[d] is not None else "not reached" for d in DTYPES],
        f"{hours['float8'] / hours['bfloat16']:.2f}x" if all(hours.values()) and hours["bfloat16"] > 0 else "")
    row("skipped steps", *[str(sum(1 for r in runs[d]["steps"] if r.get("skipped"))) for d in DTYPES])
    for key in ("energy", "cost"):
        cells = []
        for d in DTYPES:
            energy = runs[d]["energy"]
            cells.append(energy[key] if energy and energy.get(key) else "not measured")
        row(key, *cells)
    row("rental", *[runs[d]["rental"] or "not logged (--price_gpu_hour)" for d in DTYPES])

    if all(last_val.values()) and last_val["bfloat16"]["val_loss"] != 0:
        vb, vf = last_val["bfloat16"]["val_loss"], last_val["float8"]["val_loss"]
        gap = f"{100.0 * (vf - vb) / vb:+.3f}% (float8 {vf:.4f}, bfloat16 {vb:.4f})"
    else:
        gap = "n/a (no validation loss)"

    lines = ["# float8 vs bfloat16", ""]
    lines.append(f"trainer: `{trainer}`" + (f"; flags: `{flags}`" if flags else ""))
    lines.append("")
    for d in DTYPES:  # the trainer's first line: model, dtype, batch, threads or device
        first = runs[d]["text"].split("\n", 1)[0].strip()
        if first:
            lines.append(f"- {d} run: `{first}`")
    lines.append("")
    lines.append(f"target loss: {target:.4f} ({target_note})")
    lines.append("")
    lines.append("| | bfloat16 | float8 | float8 - bfloat16 (or float8 / bfloat16) |")
    lines.append("|---|---|---|---|")
    lines.extend(rows)
    lines.append("")
    lines.append(f"relative gap of the final validation loss, float8 vs bfloat16: {gap}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------------------
# the figure

def moving_mean(values, window):
    out, acc, count, queue = [], 0.0, 0, []
    for v in values:
        queue.append(v)
        if math.isfinite(v):
            acc += v
            count += 1
        if len(queue) > window:
            old = queue.pop(0)
            if math.isfinite(old):
                acc -= old
                count -= 1
        out.append(acc / count if count else float("nan"))
    return out


def axis_limits(always, raw, pad=0.05):
    """y limits that show every value of `always` (the smoothed curves, validation points) and the bulk of
    `raw` (2nd to 98th percentile), so that one spike does not flatten the rest; None when there is nothing."""
    raw = sorted(v for v in raw if math.isfinite(v))
    values = [v for v in always if math.isfinite(v)]
    if raw:
        values += [raw[int(0.02 * (len(raw) - 1))], raw[int(0.98 * (len(raw) - 1))]]
    if not values:
        return None
    lo, hi = min(values), max(values)
    margin = pad * (hi - lo) if hi > lo else 0.05 * max(abs(hi), 1e-3)
    return lo - margin, hi + margin


def draw(runs, target, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from matplotlib.ticker import MaxNLocator

    colors = {"bfloat16": "tab:blue", "float8": "tab:orange"}
    markers = {"bfloat16": ("o", 7), "float8": ("s", 5)}
    n = max(len(runs[d]["steps"]) for d in DTYPES)
    window = max(1, n // 50)
    with_eval = any(runs[d]["evals"] for d in DTYPES)
    fig, panels = plt.subplots(3 if with_eval else 2, 1, figsize=(9, 9 if with_eval else 7), sharex=True,
                               gridspec_kw={"height_ratios": [2, 1, 1] if with_eval else [2, 1]})
    top, bottom = panels[0], panels[1]

    always, raw = [target], []
    for d in DTYPES:
        xs = [r["step"] for r in runs[d]["steps"]]
        ys = [r["loss"] for r in runs[d]["steps"]]
        smooth = moving_mean(ys, window)
        if window > 1:
            top.plot(xs, ys, color=colors[d], alpha=0.25, linewidth=0.7)
        label = f"{d} train loss" + (f" ({window}-step mean; light: per step)" if window > 1 else "")
        top.plot(xs, smooth, color=colors[d], linewidth=1.6, label=label)
        always += smooth + [v["val_loss"] for v in runs[d]["vals"]]
        raw += ys
        if runs[d]["vals"]:
            marker, size = markers[d]
            top.plot([v["step"] for v in runs[d]["vals"]], [v["val_loss"] for v in runs[d]["vals"]], marker,
                     color=colors[d], markeredgecolor="black", markersize=size, label=f"{d} val loss")
    top.axhline(target, color="gray", linestyle=":", linewidth=1, label=f"target {target:.3f}")
    limits = axis_limits(always, raw)
    if limits:
        top.set_ylim(*limits)
    top.set_ylabel("loss (nats)")
    top.set_title(title)
    top.grid(alpha=0.3)
    top.legend(loc="best", fontsize=8)

    bf = {r["step"]: r["loss"] for r in runs["bfloat16"]["steps"]}
    common = [r["step"] for r in runs["float8"]["steps"] if r["step"] in bf]
    f8 = {r["step"]: r["loss"] for r in runs["float8"]["steps"]}
    diff = [f8[s] - bf[s] for s in common]
    bottom.axhline(0.0, color="black", linewidth=0.8)
    bottom.plot(common, diff, color="tab:green", alpha=0.3 if window > 1 else 1.0, linewidth=0.7,
                label="train loss, per step")
    always = [0.0]
    if window > 1:
        smooth = moving_mean(diff, window)
        bottom.plot(common, smooth, color="tab:green", linewidth=1.6, label=f"train loss, {window}-step mean")
        always += smooth
    bv = {v["step"]: v["val_loss"] for v in runs["bfloat16"]["vals"]}
    vsteps = [v["step"] for v in runs["float8"]["vals"] if v["step"] in bv]
    if vsteps:
        fv = {v["step"]: v["val_loss"] for v in runs["float8"]["vals"]}
        vdiff = [fv[s] - bv[s] for s in vsteps]
        bottom.plot(vsteps, vdiff, "D", color="tab:red", markeredgecolor="black", markersize=6, label="val loss")
        always += vdiff
    limits = axis_limits(always, diff)
    if limits:
        bottom.set_ylim(*limits)
    bottom.set_ylabel("float8 - bfloat16 (nats)")
    bottom.set_title("difference, float8 minus bfloat16", fontsize=10)
    bottom.grid(alpha=0.3)
    bottom.legend(loc="best", fontsize=8)
    if with_eval:
        accuracy = panels[2]
        for d in DTYPES:
            points = [(e["step"], *accuracy_error(e)) for e in runs[d]["evals"]]
            if points:
                marker, size = markers[d]
                accuracy.errorbar([p[0] for p in points], [p[1] for p in points], yerr=[p[2] for p in points],
                                  fmt=marker + "-", color=colors[d], markersize=size, capsize=3,
                                  label=f"{d} (± binomial std. error)")
        accuracy.set_ylabel("eval accuracy")
        accuracy.set_title("multiple-choice accuracy (--eval_data)", fontsize=10)
        accuracy.grid(alpha=0.3)
        accuracy.legend(loc="best", fontsize=8)
    panels[-1].xaxis.set_major_locator(MaxNLocator(integer=True))
    panels[-1].set_xlabel("step")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def model_description(text):
    m = re.search(r"model (\w+ L=\d+ C=\d+ NH=\d+ V=\d+) maxT=\d+[^|]*\| (\d+) parameters.*?\| (B=\d+ T=\d+)", text)
    return f"{m.group(1)}, {m.group(2)} parameters, {m.group(3)}" if m else ""


def main():
    parser = argparse.ArgumentParser(description="table and figure of a float8 vs bfloat16 comparison")
    parser.add_argument("dir", help="directory with bfloat16.jsonl/.txt and float8.jsonl/.txt")
    parser.add_argument("--target_loss", type=float, default=None,
                        help="training loss to reach (default: 1.05 x the bfloat16 run's mean training loss "
                             "over its last 10%% of steps)")
    parser.add_argument("--trainer", default="", help="the trainer that ran (shown in the table)")
    parser.add_argument("--flags", default="", help="the trainer flags (shown in the table)")
    args = parser.parse_args()

    runs = {}
    for d in DTYPES:
        steps, vals, evals = read_log(os.path.join(args.dir, f"{d}.jsonl"))
        txt_path = os.path.join(args.dir, f"{d}.txt")
        text = open(txt_path, errors="replace").read() if os.path.exists(txt_path) else ""
        runs[d] = {"steps": steps, "vals": vals, "evals": evals, "text": text,
                   "summary": parse_summary(text), "energy": parse_energy(text),
                   "rental": parse_rental(text)}
    trainer = args.trainer
    if not trainer:
        first = runs["bfloat16"]["text"].split(" |", 1)[0].strip()
        trainer = first if first in ("train", "train_cpu") else "unknown trainer"
    if args.target_loss is not None:
        target, note = args.target_loss, "--target_loss"
    else:
        target = default_target(runs["bfloat16"]["steps"])
        note = (f"default: {DEFAULT_TARGET_FACTOR:g} x the bfloat16 run's mean training loss over its last "
                f"{DEFAULT_TARGET_TAIL:.0%} of steps")

    table = build_table(runs, target, note, trainer, args.flags)
    with open(os.path.join(args.dir, "compare.md"), "w") as f:
        f.write(table)
    print(table, end="")
    sys.stdout.flush()

    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("plot_compare.py: no figure: matplotlib is not installed for " + sys.executable + " (the table is "
              "written; for the figure: apt-get install python3-matplotlib, or pip install matplotlib, or make "
              "python_deps, into build/python/, which compare.sh uses)", file=sys.stderr)
        return
    description = model_description(runs["bfloat16"]["text"])
    title = "float8 vs bfloat16" + (f": {description}" if description else "") + f" ({os.path.basename(trainer)})"
    png = os.path.join(args.dir, "compare.png")
    draw(runs, target, png, title)
    print(f"wrote {png} and {os.path.join(args.dir, 'compare.md')}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Streams a trainer's JSON-lines log (--log_file) into TensorBoard and Weights & Biases, during a run or after.

    python3 scripts/follow_log.py LOG.jsonl [--tensorboard DIR] [--wandb] [--wandb_project NAME]
        [--wandb_dir DIR] [--wandb_online] [--follow] [--no_install]

Every record with a "step" becomes scalars at that step, one for each of its numbers, named TYPE/FIELD:
step/loss, step/lr, step/grad_norm, step/ms, step/tokens_per_second, val/val_loss, val/perplexity,
eval/accuracy, eval/correct, bf16_check/diff, fp8 statistics, ... A record without a step (the end-of-run
energy, --eval_only's losses) goes at the last step seen.

--tensorboard DIR   event files in DIR (torch's SummaryWriter; view with `tensorboard --logdir DIR`)
--wandb             a W&B run (offline: files under --wandb_dir, default DIR of the log; `wandb sync` uploads
                    them later; --wandb_online logs in and streams instead)
--follow            keeps reading as the run appends, until the run's last record (the energy record both
                    trainers write at their end) or Ctrl-C; a log that does not exist yet is waited for.
                    Without it the log is read once, as it is.

The writers are the packages' own (torch and tensorboard, wandb). One that is not importable is installed with
pip into the project's build/python/ (the directory make and the scripts put on PYTHONPATH), unless
--no_install: then one line says what to install.
"""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEPS_DIR = os.path.join(ROOT, "build", "python")
POLL_SECONDS = 1.0


def die(msg):
    print(f"follow_log.py: error: {msg}", file=sys.stderr)
    sys.exit(1)


def import_or_install(module, packages, no_install):
    """The module, pip-installing packages into build/python/ first when it is missing."""
    try:
        return __import__(module, fromlist=["_"])
    except ImportError:
        pass
    if no_install:
        die(f"{module} is not importable: pip install {' '.join(packages)} (or make clients_deps), or drop "
            "--no_install to install it into build/python/")
    print(f"follow_log.py: installing {' '.join(packages)} into {DEPS_DIR}", flush=True)
    status = subprocess.call([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                              "--target", DEPS_DIR, *packages])
    if status != 0:
        die(f"pip could not install {' '.join(packages)} into {DEPS_DIR} (no network?)")
    if DEPS_DIR not in sys.path:
        sys.path.insert(0, DEPS_DIR)
    try:
        return __import__(module, fromlist=["_"])
    except ImportError as e:
        die(f"{module} is still not importable after installing {' '.join(packages)}: {e}")


def scalars(record):
    """{TYPE/FIELD: number} of a record's numbers (not its step; booleans and nulls left out)."""
    kind = record.get("type", "record")
    return {f"{kind}/{key}": float(value) for key, value in record.items()
            if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool)}


def lines(path, follow):
    """The log's complete lines; with follow, waits for the file and for more lines (a line is complete once
    its newline is written: the trainers write each record whole)."""
    while follow and not os.path.exists(path):
        time.sleep(POLL_SECONDS)
    try:
        f = open(path, encoding="utf-8")
    except OSError as e:
        die(f"{path}: cannot read the log: {e.strerror or e}")
    with f:
        pending = ""
        while True:
            chunk = f.readline()
            if chunk:
                pending += chunk
                if pending.endswith("\n"):
                    yield pending
                    pending = ""
                continue
            if not follow:
                return
            time.sleep(POLL_SECONDS)


class Writers:
    def __init__(self, args):
        self.tensorboard = self.wandb = None
        if args.tensorboard:
            import_or_install("tensorboard", ["tensorboard"], args.no_install)
            tb = import_or_install("torch.utils.tensorboard", ["torch", "tensorboard"], args.no_install)
            self.tensorboard = tb.SummaryWriter(log_dir=args.tensorboard)
        if args.wandb:
            wandb = import_or_install("wandb", ["wandb"], args.no_install)
            self.wandb = wandb.init(project=args.wandb_project, dir=args.wandb_dir or os.path.dirname(
                os.path.abspath(args.log)), mode="online" if args.wandb_online else "offline",
                name=os.path.splitext(os.path.basename(args.log))[0])

    def write(self, step, values):
        if self.tensorboard:
            for tag, value in values.items():
                self.tensorboard.add_scalar(tag, value, global_step=step)
        if self.wandb:
            self.wandb.log(values, step=step)

    def close(self):
        if self.tensorboard:
            self.tensorboard.close()
        if self.wandb:
            self.wandb.finish()


def main():
    p = argparse.ArgumentParser(description="Stream a trainer's JSON-lines log into TensorBoard and W&B.")
    p.add_argument("log", help="the trainer's --log_file")
    p.add_argument("--tensorboard", metavar="DIR", help="write TensorBoard event files into DIR")
    p.add_argument("--wandb", action="store_true", help="log to a W&B run (offline unless --wandb_online)")
    p.add_argument("--wandb_project", default="fp8-pretraining", help="default: fp8-pretraining")
    p.add_argument("--wandb_dir", help="where W&B keeps the run (default: the log's directory)")
    p.add_argument("--wandb_online", action="store_true", help="stream to W&B's servers (needs wandb login)")
    p.add_argument("--follow", action="store_true", help="keep reading until the run's last record")
    p.add_argument("--no_install", action="store_true", help="never pip-install a missing writer")
    args = p.parse_args()
    if not args.tensorboard and not args.wandb:
        die("nothing to write: give --tensorboard DIR, --wandb, or both")
    writers = Writers(args)
    step, records = 0, 0
    try:
        for number, line in enumerate(lines(args.log, args.follow), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                die(f"{args.log}:{number}: not a JSON line: {line[:80].rstrip()}")
            step = record.get("step", step)
            writers.write(step, scalars(record))
            records += 1
            if args.follow and record.get("type") == "energy":  # the run's last record
                break
    except KeyboardInterrupt:
        pass
    writers.close()
    print(f"follow_log.py: {records} records of {args.log} written"
          + (f"; TensorBoard: {args.tensorboard}" if args.tensorboard else "")
          + ("; W&B: " + ("online" if args.wandb_online else "offline, `wandb sync` uploads it")
             if args.wandb else ""))


if __name__ == "__main__":
    main()

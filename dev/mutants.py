#!/usr/bin/env python3
"""dev/mutants.py: mutation testing of the emulated GPU suite (docs/emulation.md keeps the score).

Each mutant is a realistic GPU bug planted in one place of the CUDA trainer: a missing barrier, a plain
read-modify-write where an atomic belongs, a stale amax, weight decay on every tensor, fast accumulation
where it was not asked for, a dropped stream wait, a mask off by one, a lost division, a shard read at
another rank's offset, a transposed GEMM operand, a wrong or stale scale inverse. For each, in a copy
of the working tree (tracked and untracked files, the build's python packages linked), the mutant is
applied, and the make targets that should catch it run with TEST_FAIL_FAST=1 (a script stops at its first
failed check). A mutant is killed when a target fails; one that does not build is reported, not counted.
The targets' own baseline must pass first (make test): a target failing without a mutant kills every one.

  python3 dev/mutants.py [--list] [NAME...]     (all mutants without names; about 1-8 minutes each)
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

# name, file, the exact text (it must occur exactly `count` times; the first occurrence changes), the bug,
# the targets that should catch it
MUTANTS = [
    ("stop votes not summed over the ranks", "train_gpt_fp8.cu",
     "&model->io.step_results->loss_sum, 2, ncclFloat32", 1,
     "&model->io.step_results->loss_sum, 1, ncclFloat32",
     ["test_preempt"]),
    ("stop vote not written beside the loss sum", "gpu/step_kernels.cuh",
     "    results->stop_votes = (float)params->stop_vote;", 1, "    (void)params, results->stop_votes = 0.0f;",
     ["test_preempt"]),
    ("skipped spikes kept out of the guard's window", "gpu/step_kernels.cuh",
     "    if (results->skipped != SKIP_NONFINITE)\n", 1, "    if (!results->skipped)\n", ["test_preempt"]),
    ("block_max: barrier after the partials", "gpu/layer_common.cuh",
     "    if (lane == 0) red[warp] = v;\n    __syncthreads();\n    v = warp_max(", 1,
     "    if (lane == 0) red[warp] = v;\n    v = warp_max(", ["test_racecheck"]),
    ("block_max: closing barrier (the cross-entropy's block_sum then reuses red)", "gpu/layer_common.cuh",
     "    v = warp_max(lane < nwarps ? red[lane] : -INFINITY);\n    __syncthreads();\n", 1,
     "    v = warp_max(lane < nwarps ? red[lane] : -INFINITY);\n", ["test_racecheck"]),
    ("bias backward: barrier before the column sums", "gpu/reductions.cuh",
     "    red_b[threadIdx.y][threadIdx.x] = b;\n    __syncthreads();\n", 1,
     "    red_b[threadIdx.y][threadIdx.x] = b;\n", ["test_racecheck"]),
    ("atomic_max_nonneg: plain read-compare-write", "gpu/cast_common.cuh",
     "    atomicMax((int *)address, __float_as_int(value));", 1,
     "    if (__float_as_int(value) > *(int *)address) *(int *)address = __float_as_int(value);",
     ["test_racecheck"]),
    ("block record: plain min of scale_min", "gpu/block_cast.cuh",
     "        atomicMin((int *)rec.scale_min, __float_as_int(scale));", 1,
     "        if (__float_as_int(scale) < *(int *)rec.scale_min) *(int *)rec.scale_min = __float_as_int(scale);",
     ["test_racecheck"]),
    ("current recipe: amax not reset before a measurement", "gpu/fp8_cast.cuh",
     "    cuda_check(cudaMemsetAsync(amax, 0, sizeof(float), stream));\n", 1, "", ["test_gpu_emu"]),
    ("current recipe: the step's recorded amax not reset", "gpu/fp8_state.cuh",
     "    if (!delayed || results->skipped) {\n        s.amax_current[i] = 0.0f;\n        return;", 1,
     "    if (!delayed || results->skipped) {\n        return;", ["test_gpu_emu"]),
    ("AdamW: weight decay on every tensor (kernel)", "gpu/adamw.cuh",
     "    const float weight_decay = decayed ? p->weight_decay : 0.0f;", 1,
     "    const float weight_decay = decayed >= 0 ? p->weight_decay : 0.0f;", ["test_gpu_emu"]),
    ("AdamW: weight decay on every tensor (launch)", "train_gpt_fp8.cu",
     "model->weights.v + at, n, decayed,", 1, "model->weights.v + at, n, 1,",
     ["test_gpu_emu"]),
    ("fast accumulation in the forward with --fp8_fast_accum 0", "train_gpt_fp8.cu",
     "fp8_gemm_fast_accum(model->fp8_state.recipe, model->fp8_state.fast_accum, FAST_ACCUM_FORWARD)", 1, "1",
     ["test_gpu_emu"]),
    ("fast accumulation in the gradient GEMMs", "train_gpt_fp8.cu",
     "fp8_gemm_fast_accum(model->fp8_state.recipe, model->fp8_state.fast_accum, FAST_ACCUM_ALL);", 1, "1;",
     ["test_gpu_emu"]),
    ("dropped wait of the compute stream on the communication stream", "train_gpt_fp8.cu",
     "    cuda_check(cudaStreamWaitEvent(model->exec.stream, model->exec.joined, 0));\n", 1, "",
     ["test_emu_trainer"]),
    ("causal mask off by one (attention forward)", "gpu/attention.cuh", "        if (active && c * ATT_CHUNK + lane <= t) {", 2,
     "        if (active && c * ATT_CHUNK + lane <= t + 1) {", ["test_gpu_emu"]),
    ("gradient not divided by the world size", "train_gpt_fp8.cu",
     "    p->inv_micro_batches = 1.0f / (float)(model->accum_steps * model->sharding.comm.world_size);", 1,
     "    p->inv_micro_batches = 1.0f / (float)model->accum_steps;", ["test_dist_emu"]),
    ("attention forward: barrier before a chunk is restaged", "gpu/attention.cuh",
     "        __syncthreads(); // the previous chunk has been read (and q_sh written, the first time)\n", 1, "",
     ["test_racecheck"]),
    ("causal mask off by one (attention backward)", "gpu/attention.cuh",
     "        if (active && c * ATT_CHUNK + lane <= t) {\n            const float p = expf(", 1,
     "        if (active && c * ATT_CHUNK + lane <= t + 1) {\n            const float p = expf(", ["test_gpu_emu"]),
    ("ZeRO-1: the gradient shard copied from rank 0's offset", "train_gpt_fp8.cu",
     "cudaMemcpyAsync(model->gradients.grad_shard,\n" + " " * 35 +
     "model->gradients.grads + (size_t)model->sharding.shards.rank * u.chunk,", 1,
     "cudaMemcpyAsync(model->gradients.grad_shard,\n" + " " * 35 + "model->gradients.grads,", ["test_dist_emu"]),
    ("ZeRO-3: a layer's reduced gradient added from rank 0's offset", "train_gpt_fp8.cu",
     "slot + (size_t)model->sharding.shards.rank * u.chunk, u.chunk);", 1, "slot, u.chunk);",
     ["test_dist_emu"]),
    ("transposed GEMM flag: bfloat16 data gradient", "train_gpt_fp8.cu",
     "gemm(&model->gemm, {.D = dinp, .d_type = CUDA_R_16BF, .A = g, .B = w, .M = N,", 1,
     "gemm(&model->gemm, {.D = dinp, .d_type = CUDA_R_16BF, .A = g, .B = w, .trans_b = 1, .M = N,",
     ["test_gpu_emu"]),
    ("transposed GEMM flag: the LM head's weight gradient", "train_gpt_fp8.cu",
     ".A = bf16_operand(dlogits),\n          .trans_a = 1,", 1,
     ".A = bf16_operand(dlogits),\n          .trans_a = 0,", ["test_gpu_emu"]),
    ("wrong scale inverse: the weight gradient's input read with the output gradient's", "train_gpt_fp8.cu",
     "descale[fp8_tensor_index(layer, linear, FP8_ROLE_INPUT)]);", 1,
     "descale[fp8_tensor_index(layer, linear, FP8_ROLE_GRAD_OUTPUT)]);", ["test_gpu_emu"]),
    ("wrong scale inverse: a delayed scale's inverse not updated", "gpu/fp8_state.cuh",
     "params->fp8_margin);\n    s.descale[i] = 1.0f / s.scale[i];\n", 1, "params->fp8_margin);\n",
     ["test_gpu_emu"]),
    ("dropped wait of the compute stream on the batch's upload", "train_gpt_fp8.cu",
     "    cuda_check(cudaStreamWaitEvent(model->exec.stream, model->io.tokens_uploaded, 0));\n", 1, "",
     ["test_emu_trainer"]),
]


def copy_tree(root, dest):
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=root, check=True,
                           capture_output=True).stdout.decode().split("\0")
    for f in filter(None, files):
        if os.path.isfile(os.path.join(root, f)):
            os.makedirs(os.path.dirname(os.path.join(dest, f)) or dest, exist_ok=True)
            shutil.copy2(os.path.join(root, f), os.path.join(dest, f))
    python = os.path.join(root, "build", "python")
    if os.path.isdir(python):
        os.makedirs(os.path.join(dest, "build"), exist_ok=True)
        os.symlink(python, os.path.join(dest, "build", "python"))


def run_mutant(tree, mutant, log, data):
    name, path, old, count, new, targets = mutant
    source = open(os.path.join(tree, path)).read()
    if source.count(old) != count:
        return "stale", f"{path}: the text occurs {source.count(old)} times, not {count}"
    open(os.path.join(tree, path), "w").write(source.replace(old, new, 1))
    try:
        env = dict(os.environ, TEST_FAIL_FAST="1", DATA=data)
        for target in targets:
            with open(log, "a") as out:
                out.write(f"\n=== {name}: make {target}\n")
                out.flush()
                status = subprocess.run(["make", "-j2", target], cwd=tree, env=env, stdout=out,
                                        stderr=subprocess.STDOUT).returncode
            if status != 0:
                lines = open(log).read().split(f"=== {name}: make {target}\n")[-1].splitlines()
                failed = [l for l in lines if l.startswith("FAIL")]
                if failed:
                    return "killed", f"{target}: {failed[0]}"
                errors = [l for l in lines if "error:" in l]
                if errors:
                    return "no build", errors[0]
                return "killed", f"{target}: exit {status}"
        return "survived", " ".join(targets)
    finally:
        open(os.path.join(tree, path), "w").write(source)


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if "--list" in sys.argv[1:]:
        for m in MUTANTS:
            print(f"{m[0]}  ({m[1]}; {' '.join(m[5])})")
        return 0
    chosen = [m for m in MUTANTS if not sys.argv[1:] or m[0] in sys.argv[1:]]
    if not chosen:
        sys.exit("mutants.py: no mutant of that name (--list shows them)")
    tree = tempfile.mkdtemp(prefix="mutants-")
    log = os.path.join(tree, "mutants.log")
    copy_tree(root, tree)
    # the tests' text, as the Makefile's DATA names it from the root (the copy lies elsewhere)
    data = os.path.abspath(os.path.join(root, os.environ.get("DATA", "../shared/data/tinyshakespeare.txt")))
    print(f"tree {tree}, log {log}")
    rows = []
    for m in chosen:
        start = time.time()
        outcome, detail = run_mutant(tree, m, log, data)
        rows.append((m[0], outcome, detail, time.time() - start))
        print(f"{outcome:9s} {m[0]} ({time.time() - start:.0f} s): {detail}", flush=True)
    killed = sum(r[1] == "killed" for r in rows)
    counted = sum(r[1] in ("killed", "survived") for r in rows)
    print(f"\n{killed} of {counted} mutants killed")
    return 0 if killed == counted else 1


if __name__ == "__main__":
    sys.exit(main())

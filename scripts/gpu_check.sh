#!/usr/bin/env bash
# gpu_check.sh: everything that needs a GPU, in one run that ends within its budget (GPU_CHECK_BUDGET_S,
# default 450 s, the build's time included; every step's timeout is cut to what is left, and a step that
# finds under 10 s left is skipped with a line), on one H200, measurements first:
# build (with cuDNN's fused attention where the machine's Python environment has the nvidia-cudnn wheel and
# build/cudnn_frontend is there: scripts/cudnn_deps.sh), the first-contact stage (scripts/first_contact.sh,
# about a minute: every GEMM form the trainer issues, cuDNN's plans, an NCCL communicator and two-step runs in
# each dtype and recipe, each against the CPU reference in a process of its own, on past failures, a
# PASS/FAIL/SKIP table), the kernel benchmark (the fused kernels and the
# fast attention against the exact ones; the attention's TFLOP/s, exact and fast, T 1024 and 2048, head
# sizes 64 and 128), 30-step runs of 124M and 1.5B (d48) in bfloat16 and float8, 124M float8 with the
# exact attention (the state before the fast one), and 124M in float8 blockwise (with each run's planned
# and really allocated memory), `make test_gpu` (CUDA trainer vs the CPU reference, the fast attention
# included), the GEMM benchmark, the ZeRO stages and --recompute in one process (each must give the ZeRO-0
# run's model file byte for byte, also started by `mpirun -np 1` and torchrun-style), and with two or more
# GPUs, two processes of batch B (mpirun for ZeRO 0, 1, 3; the torchrun-style file bootstrap for ZeRO 3)
# against one process of batch 2B; then, while its time allows, the PyTorch peer (dev/train_gpt2_torch.py) on
# the 124M and 1.5B runs in bfloat16 and float8 (torchao) from the same weights, and ours against it.
# Prints three tables last.
# Usage: scripts/gpu_check.sh [DATA=path/to/text]   (writes logs under ${OUT:-out/gpu_check})
# On a GPU machine without network: run `bash scripts/cudnn_deps.sh --headers-only` on a machine with one and
# copy build/cudnn_frontend over (the GPU machine's Python environment has cuDNN itself, not the frontend's
# headers; do not copy build/cudnn, whose headers-only copy cannot run).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="${OUT:-out/gpu_check}"
mkdir -p "$out"
data_file="${DATA:-../shared/data/tinyshakespeare.txt}"
[ -f "$data_file" ] || data_file=data/tinyshakespeare.txt
log() { echo "== $*"; }
budget=${GPU_CHECK_BUDGET_S:-450}
# limit S: S seconds, or what is left of the budget if less; empty (the caller skips) under 10 s left
limit() {
    local left=$((budget - SECONDS))
    [ $left -lt 10 ] && return 1
    echo $(($1 < left ? $1 : left))
}
jobs_flag="-j$(nproc)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 # GPU machines often run as root
# The environment first, what every failure below is read against: the GPU and its driver, the compiler, and
# the library wheels of the machine's Python environment (each run's `versions |` line then names the versions
# the trainer loaded).
log "environment"
nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader || true
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
"${NVCC:-nvcc}" --version | tail -n 1 || true
python3 - <<'PY' || true
import importlib.metadata as metadata
names = ("nvidia-cudnn-cu13", "nvidia-cudnn-cu12", "nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-cublas",
         "nvidia-cublas-cu12", "nvidia-cudnn-frontend", "torch")
found = []
for name in names:
    try:
        found.append(f"{name} {metadata.version(name)}")
    except metadata.PackageNotFoundError:
        pass
print("wheels: " + (", ".join(found) or "none"))
PY
# NCCL: the CUDA toolkit's or the system's; where neither has one (some machines bring NCCL only as the
# nvidia-nccl wheel PyTorch depends on), the wheel's header and library, linked under build/nccl.
if ! ls "$(dirname "$(command -v nvcc)")/../include/nccl.h" /usr/include/nccl.h >/dev/null 2>&1; then
    wheel=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null)
    if [ -n "$wheel" ] && [ -f "$wheel/include/nccl.h" ]; then
        mkdir -p build/nccl/lib
        ln -sfn "$wheel/include" build/nccl/include
        for name in libnccl.so libnccl.so.2; do ln -sf "$wheel/lib/libnccl.so.2" "build/nccl/lib/$name"; done
        export NCCL_HOME="$root/build/nccl"
        log "NCCL from $wheel"
    fi
fi
# cuDNN: the wheel's library and headers, and the frontend's headers in build/cudnn_frontend (fetched where
# there is network); without them the build has the exact attention only, and says so
bash scripts/cudnn_deps.sh build 2>&1 | tail -n 3 || log "no cuDNN: the exact attention only"
log "build"
if ! make $jobs_flag train train_cpu test/build/compare_debug_state build/first_contact build/bench_gemm build/bench_kernels \
    >"$out/build.txt" 2>&1; then
    tail -n 20 "$out/build.txt"
    echo "gpu_check: the build failed (the whole log: $out/build.txt); nothing was run"
    exit 1
fi
tail -n 3 "$out/build.txt"
# every library call the trainer makes, each against the CPU, before anything is measured: the table tells the
# whole run's first-contact failures at once (its rows go on past each other's failures)
log "first contact"
if t=$(limit 120); then
    OUT="$out/first_contact" DATA="$data_file" FIRST_CONTACT_TIMEOUT_S=$((t / 4)) timeout "$t" bash scripts/first_contact.sh
else log "skipped: the check's budget (${SECONDS} of $budget s used)"; fi
log "kernel benchmark"
if t=$(limit 120); then
    timeout "$t" ./build/bench_kernels 2>&1 | tee "$out/bench_kernels.txt" |
        grep -E "^(attention|attn fast) .* (forward|backward) |FAIL|checks failed"
else log "skipped: the check's budget (${SECONDS} of $budget s used)"; fi
log "30-step runs"
python3 scripts/prepare_data.py --input "$data_file" --output_dir "$out/data" --tokenizer byte >/dev/null
train_data="$out/data/tinyshakespeare_train_*.bin"
summary="$out/summary.md"
echo "| model | dtype | attention | B x T | ms/step | plan ms/step | tokens/s | MFU | peak GiB | planned / allocated GiB | loss@30 |" >"$summary"
echo "|---|---|---|---|---|---|---|---|---|---|---|" >>"$summary"
# summary_row NAME MODEL DTYPE-LABEL B [PLAN-MS]: a row of $summary from $out/NAME.jsonl and the run's output
# NAME.txt, beside the time plan's expected ms/step (dev/perf_model.sh's numbers) where given
summary_row() {
    python3 - "$out/$1.jsonl" "$out/$1.txt" "$2" "$3" "$4" "${5:-}" >>"$summary" <<'PY'
import json, re, statistics, sys
path, text, model, dtype, B, plan = sys.argv[1:]
plan = plan or "-"
try:
    steps = [json.loads(l) for l in open(path) if '"step"' in l and '"type":"step"' in l]
except OSError:
    steps = []
try:
    summary = open(text).read()
except OSError:
    summary = ""
peak = re.search(r"peak memory ([0-9.]+) GiB", summary)
mfu = re.search(r"MFU ([0-9.]+)%", summary)
attention = re.search(r"\| attention (\w+)", summary)
attention = attention.group(1) if attention else "?"
mem = re.search(r"memory \| planned ([0-9]+) bytes .* allocated ([0-9]+) bytes", summary)
memory = f"{int(mem.group(1)) / 2**30:.2f} / {int(mem.group(2)) / 2**30:.2f}" if mem else "?"
if not steps:
    print(f"| {model} | {dtype} | {attention} | {B}x1024 | failed | {plan} | | | | {memory} | |"); sys.exit()
timed = steps[5:] or steps
ms = statistics.median(s["ms"] for s in timed)
tps = statistics.median(s["tokens_per_second"] for s in timed)
print(f"| {model} | {dtype} | {attention} | {B}x1024 | {ms:.1f} | {plan} | {tps:.0f} | {mfu.group(1) + '%' if mfu else '?'} | "
      f"{peak.group(1) if peak else '?'} | {memory} | {steps[-1]['loss']:.4f} |")
PY
}
for run in 124M:bfloat16 124M:float8 124M:float8:::exact 124M:float8::blockwise 1.5B:bfloat16 1.5B:float8 124M:float8:z3; do
    IFS=: read -r model dtype zero recipe attention <<<"$run"
    B=16; [ "$model" = 1.5B ] && B=8
    name="${model}_${dtype}${zero:+_$zero}${recipe:+_$recipe}${attention:+_$attention}"
    extra=(); [ -n "$zero" ] && extra=(--zero_stage 3 --recompute 1)
    [ -n "$recipe" ] && extra+=(--fp8_recipe "$recipe")
    [ -n "$attention" ] && extra+=(--attention "$attention")
    if ! t=$(limit 120); then
        echo "| $model | $dtype | | ${B}x1024 | skipped: the check's budget | | | | | | |" >>"$summary"
        continue
    fi
    flags=(--model_size "$model" --dtype "$dtype" --batch_size $B --seq_len 1024 --steps 30 --train_data "$train_data"
           --val_data "" --output_dir "" --lr 3e-4 --warmup_steps 5 "${extra[@]}")
    timeout "$t" ./train "${flags[@]}" --log_file "$out/$name.jsonl" >"$out/$name.txt" 2>&1
    echo "$name: exit $?"; tail -n 3 "$out/$name.txt"
    # the plan of the attention the run used (auto: fast where cuDNN runs it)
    used=$(sed -n 's/.*| attention \([a-z]*\).*/\1/p' "$out/$name.txt" | head -n 1)
    [ -n "$attention" ] && used="" # already in the flags
    plan_ms=$(./train "${flags[@]}" ${used:+--attention "$used"} --dry_run 1 2>/dev/null |
        sed -n 's/^plan_step_ms \([0-9.]*\).*/\1/p')
    summary_row "$name" "$model" "$dtype${zero:+ zero3+recompute}${recipe:+ $recipe}" "$B" "$plan_ms"
done

log "make test_gpu"
if t=$(limit 330); then
    timeout "$t" make test_gpu 2>&1 | tee "$out/test_gpu.txt" | tail -n 30
else log "skipped: the check's budget (${SECONDS} of $budget s used)"; fi
log "GEMM benchmark"
if t=$(limit 90); then
    timeout "$t" ./build/bench_gemm 8192 2>&1 | tee "$out/bench_gemm.txt"
    # the rates --dry_run's time plan takes in place of the data sheet's (--plan_rates): the fastest BF16 and
    # FP8 GEMMs measured, brought to time_plan.h's asymptote by its K / (K + K0) (K0 256 in BF16, 512 in FP8)
    awk '$6 == "|" && $3 ~ /^[0-9]+$/ {
             b = $7 * ($5 + 256) / $5; f = $8 * ($5 + 512) / $5
             if (b > bf16) bf16 = b; if (f > fp8) fp8 = f }
         END { if (bf16 > 0) printf "# scripts/gpu_check.sh: build/bench_gemm 8192\ngemm_bf16_tflops %.1f\ngemm_fp8_tflops %.1f\n", bf16, fp8 }' \
        "$out/bench_gemm.txt" >"$out/plan_rates.txt"
    [ -s "$out/plan_rates.txt" ] && log "measured GEMM rates for --dry_run --plan_rates $out/plan_rates.txt:" &&
        cat "$out/plan_rates.txt"
else log "skipped: the check's budget (${SECONDS} of $budget s used)"; fi

# ZeRO and recompute. One process: every stage with ways = 1 computes the same numbers as ZeRO-0 in the
# same order (accumulation 1), so the model files must be identical. Several: losses and norms within
# tolerance of one process with the whole batch (only the summation order differs).
log "ZeRO and recompute"
zero_table="$out/zero.md"
echo "| ZeRO check | result | |" >"$zero_table"
echo "|---|---|---|" >>"$zero_table"
zdir="$out/zero"
rm -rf "$zdir"; mkdir -p "$zdir"
small=(--model_size d4 --vocab 256 --seq_len 64 --steps 8 --lr 1e-3 --warmup_steps 2 --train_data "$train_data"
       --val_data "" --dtype float8)
zrun() { # name launcher... -- trainer flags...
    local name="$1"; shift
    local launcher=(); while [ "$1" != -- ]; do launcher+=("$1"); shift; done; shift
    local t
    t=$(limit 60) || { echo "| $name | skipped: the check's budget | |" >>"$zero_table"; return 1; }
    timeout "$t" "${launcher[@]}" ./train "${small[@]}" --output_dir "$zdir/$name" --log_file "$zdir/$name.jsonl" \
        "$@" >"$zdir/$name.txt" 2>&1
    echo "$name: exit $?"; grep -E '^(error|note)' "$zdir/$name.txt" | head -n 3
}
same_model() { # name description
    if cmp -s "$zdir/z0/model_00000008.bin" "$zdir/$1/model_00000008.bin"; then r=ok; else r=FAIL; fi
    echo "| $2 | model file identical to ZeRO-0's | $r |" >>"$zero_table"
}
zrun z0 -- --batch_size 8 --zero_stage 0
zrun z1 -- --batch_size 8 --zero_stage 1 && same_model z1 "zero_stage 1, one process"
zrun z3 -- --batch_size 8 --zero_stage 3 && same_model z3 "zero_stage 3, one process"
zrun z0_rc -- --batch_size 8 --zero_stage 0 --recompute 1 && same_model z0_rc "recompute 1"
zrun z3_rc -- --batch_size 8 --zero_stage 3 --recompute 1 --cuda_graph 0 && same_model z3_rc "zero_stage 3, recompute 1, no graph"
zrun z3_env env RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 -- --batch_size 8 --zero_stage 3 &&
    same_model z3_env "zero_stage 3, RANK=0 WORLD_SIZE=1"
# mpirun only where train was built with MPI (mpicc present at build time)
with_mpi=0
if command -v mpirun >/dev/null && ldd ./train 2>/dev/null | grep -q libmpi; then with_mpi=1; fi
if [ $with_mpi = 1 ]; then
    zrun z1_mpi mpirun -np 1 --bind-to none -- --batch_size 8 --zero_stage 1 && same_model z1_mpi "zero_stage 1, mpirun -np 1"
fi
if [ "$gpus" -ge 2 ]; then
    zrun ref2b -- --batch_size 16 --zero_stage 0
    compare2() { # name description
        python3 - "$zdir/ref2b.jsonl" "$zdir/$1.jsonl" "$2" >>"$zero_table" <<'PY'
import json, sys
steps = lambda p: [json.loads(l) for l in open(p) if '"type":"step"' in l]
try:
    ref, run = steps(sys.argv[1]), steps(sys.argv[2])
except OSError:
    ref, run = [], []
if not ref or len(ref) != len(run):
    print(f"| {sys.argv[3]} | no log or a different number of steps | FAIL |"); sys.exit()
first = abs(ref[0]["loss"] - run[0]["loss"])
loss = max(abs(a["loss"] - b["loss"]) for a, b in zip(ref, run))
norm = max(abs(a["grad_norm"] - b["grad_norm"]) / max(a["grad_norm"], 1e-12) for a, b in zip(ref, run))
# step 1 sees identical weights: only the order of the loss sum differs. Later steps carry FP32 rounding
# differences of the gradient sums, which can flip FP8 roundings: small, far below a wrong reduction.
ok = first <= 1e-4 and loss <= 2e-2 and norm <= 2e-2
print(f"| {sys.argv[3]} | vs one process of 2B: step-1 loss {first:.1e}, max loss {loss:.1e}, max norm "
      f"rel {norm:.1e} (tolerances 1e-4, 2e-2, 2e-2) | {'ok' if ok else 'FAIL'} |")
PY
    }
    for zero in 0 1 3; do
        [ $with_mpi = 1 ] || { echo "| zero_stage $zero, mpirun -np 2 | skipped: train built without MPI | |" >>"$zero_table"; continue; }
        zrun "mpi2_z$zero" mpirun -np 2 --bind-to none -- --batch_size 8 --zero_stage $zero &&
            compare2 "mpi2_z$zero" "zero_stage $zero, mpirun -np 2"
    done
    # torchrun's environment (scripts/torchrun_local.sh: ranks, run id), one set of flags for both ranks
    zrun file2_z3 scripts/torchrun_local.sh --nproc_per_node 2 -- --batch_size 8 --zero_stage 3 &&
        compare2 file2_z3 "zero_stage 3, 2 processes torchrun-style (id through a file)"
    ls "$zdir/file2_z3"/nccl_id* >/dev/null 2>&1 && echo "| NCCL id file | left behind | FAIL |" >>"$zero_table"
else
    echo "| two processes | skipped: $gpus GPU(s) | |" >>"$zero_table"
fi

# The PyTorch peer (dev/train_gpt2_torch.py: torch.compile, fused attention, BF16 autocast, torchao's float8
# where installed) on the same configurations from the same weights (one step of ours, --ckpt_every 1), while
# the check's time allows (the rest of the check comes first); then ours against it.
log "PyTorch peer"
peer_python=$(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null)
peer_fp8=$(python3 -c 'import torchao.float8' 2>/dev/null && echo 1)
ratios="$out/ratios.md"
echo "| model | dtype | ours ms/step | PyTorch ms/step | ours / PyTorch | ours peak GiB | PyTorch peak GiB |" >"$ratios"
echo "|---|---|---|---|---|---|---|" >>"$ratios"
for run in 124M:bfloat16 124M:float8 1.5B:bfloat16 1.5B:float8; do
    IFS=: read -r model dtype <<<"$run"
    B=16; [ "$model" = 1.5B ] && B=8
    name="torch_${model}_${dtype}"
    why=""
    [ -n "$peer_python" ] || why="no torch in python3"
    [ -z "$why" ] && [ "$dtype" = float8 ] && [ -z "$peer_fp8" ] && why="no torchao"
    # torch.compile alone takes a minute: a peer run starts only with that much of the budget left
    [ -z "$why" ] && [ $((budget - SECONDS)) -lt 60 ] && why="the check's budget (${SECONDS} of $budget s used)"
    if [ -n "$why" ]; then
        echo "| $model | PyTorch $dtype | skipped: $why | | | | | | | | |" >>"$summary"
        continue
    fi
    init="$out/init_$model/model_00000001.bin"
    [ -f "$init" ] || timeout "$(limit 60 || echo 1)" ./train --model_size "$model" --dtype bfloat16 --batch_size $B --seq_len 1024 --steps 1 \
        --ckpt_every 1 --train_data "$train_data" --val_data "" --output_dir "$out/init_$model" --overwrite 1 >/dev/null 2>&1
    timeout "$(limit 180 || echo 1)" python3 dev/train_gpt2_torch.py --init_from "$init" --dtype "$dtype" --batch_size $B --seq_len 1024 \
        --steps 30 --train_data "$train_data" --val_data "" --lr 3e-4 --warmup_steps 5 --log_file "$out/$name.jsonl" \
        >"$out/$name.txt" 2>&1
    echo "$name: exit $?"; tail -n 2 "$out/$name.txt"
    summary_row "$name" "$model" "PyTorch $dtype" "$B"
    python3 - "$out/${model}_$dtype" "$out/$name" "$model" "$dtype" >>"$ratios" <<'PY'
import json, re, statistics, sys
def run(prefix):
    try:
        steps = [json.loads(l) for l in open(prefix + ".jsonl") if '"type":"step"' in l]
        peak = re.search(r"peak memory ([0-9.]+) GiB", open(prefix + ".txt").read())
    except OSError:
        return None, None
    return (statistics.median(s["ms"] for s in steps[5:]) if len(steps) > 5 else None), (peak.group(1) if peak else "?")
(ours, ours_peak), (peer, peer_peak) = run(sys.argv[1]), run(sys.argv[2])
ratio = f"{ours / peer:.2f}" if ours and peer else "?"
fmt = lambda ms: f"{ms:.1f}" if ms else "failed"
print(f"| {sys.argv[3]} | {sys.argv[4]} | {fmt(ours)} | {fmt(peer)} | {ratio} | {ours_peak} | {peer_peak} |")
PY
done

log "summary"
cat "$out/first_contact/first_contact.md" 2>/dev/null && echo
cat "$summary"
echo
cat "$ratios"
echo
cat "$zero_table"

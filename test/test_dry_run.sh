#!/usr/bin/env bash
# test_dry_run.sh: `train_cpu --dry_run 1`, the per-process memory plan (dry_run.h), end to end:
#   - 124M bfloat16 on one process fits a 141 GB GPU (exit 0, "fits: ...");
#   - --model_size 70B is LLaMA-2 70B (the header names llama and its shapes), --arch gpt2 --model_size 70B the
#     GPT architecture's gpt-70B;
#   - 70B float8 on 32 processes with ZeRO-3, B=1, T=2048 fits 141 GB;
#   - 70B float8 on one process does not (exit 1) and every suggestion it prints, run again with its
#     flags, fits;
#   - the printed groups add up to the printed plan total, the total is plan + reserve, and the plan
#     total equals the one test/build/test_memory_plan computes for the same configuration;
#   - the dry run allocates nothing large: 70B still plans under `ulimit -v 2000000` (2 GB of address
#     space, against the 1.3 TiB the plan describes);
#   - the time plan: the step is compute + exposed communication; 70B with recompute, 16 micro-steps of B=1
#     or one of B=16, is told that B=2 x 8 without recompute is the fastest that fits; a faster GEMM rate
#     shortens the step; --keep_gathered moves fewer all-gather bytes, plans a shorter step at B=1 x 16 and
#     more memory;
#   - Llama 2 70B on 4 nodes x 8 GPUs, ZeRO-3, B=8 x T=4096 with recompute (1M tokens a step), bfloat16 and
#     float8: the header names the architecture, the plan fits, its groups add up, its total and planned step
#     equal test_memory_plan's (which checks them against arithmetic from the published shapes), float8's
#     step is shorter; in shard groups of 8 it does not fit and sharding over all 32 is suggested;
#   - cuDNN's attention workspace: its own line with --attention fast (llama3-8B T=8192: 4.001 GiB; 124M
#     B=16 T=1024: 0.376 GiB), none with exact, none with auto (train_cpu has no cuDNN), and auto's time is the
#     exact kernels' (70B: over 3x the fused attention's), the plan naming the attention and why;
#   - the cost plan: energy and cost per step and for --steps recomputed from the step line, --pue honoured;
#   - bad values end with one error naming the flag (--gpu_memory_gb -1, --zero_stage 2, float32,
#     float8 with B*T not a multiple of 16, --nodes above the processes, --keep_gathered without ZeRO-3).
# Environment: TRAIN_CPU (default ./train_cpu), TEST_MEMORY_PLAN (default ./test/build/test_memory_plan).
# shellcheck source=test/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
test_init
tmp=
test_tmpdir tmp test_dry_run || exit 1
BIN=${TRAIN_CPU:-./train_cpu}
REF=${TEST_MEMORY_PLAN:-./test/build/test_memory_plan}

# Data flags that cannot be read: a binary that ignored --dry_run would stop at once instead of training.
dry() {
    "$BIN" --dry_run 1 --train_data "$tmp/none_*.bin" --val_data '' --output_dir "$tmp/out" "$@"
}

if ! grep -q '^dry run | model ' <<<"$(dry --model_size d2 2>/dev/null)"; then
    bad "'$BIN --dry_run 1' does not print the memory plan: $(dry --model_size d2 2>&1 | tail -n 2)"
    finish
fi

# The value after KEY on the machine-readable line "plan_total_bytes N reserve_bytes N needed_bytes N gpu_bytes N".
field() { # OUTPUT KEY
    printf '%s\n' "$1" | awk -v key="$2" '$1 == "plan_total_bytes" { for (i = 1; i < NF; i++) if ($i == key) print $(i + 1) }'
}

# --- verdicts
verdict() { # OUTPUT STATUS WANT-STATUS PATTERN WHAT: the exit status and a line matching PATTERN
    [ "$2" = "$3" ] && printf '%s\n' "$1" | grep -q -- "$4"
    result $? "$5"
}
out124=$(dry --model_size 124M --dtype bfloat16)
verdict "$out124" $? 0 '^fits: .* GiB of 141 GB' "124M bfloat16, one process: exit 0 and 'fits ... of 141 GB'"
verdict "$out124" 0 0 '| world size 1 | ZeRO-0 | recompute 0' "--world_size 0 (default) plans for this run's one process"
# --model_size 70B: LLaMA-2 70B, the 70B users pretrain; the GPT architecture's at that width with --arch gpt2
header='^dry run | model llama L=80 C=8192 NH=64 V=32000 maxT=4096 KVH=8 F=28672 theta=10000 | 68976648192 parameters'
grep -q "$header" <<<"$(dry --model_size 70B)" && [ "$(dry --model_size 70B)" = "$(dry --model_size llama2-70B)" ]
result $? "--model_size 70B plans llama2-70B, its header naming the architecture"
grep -q '^dry run | model gpt2 L=80 C=8192 NH=64 V=50257 maxT=2048 | 64861913088 parameters' \
    <<<"$(dry --arch gpt2 --model_size 70B)" && [ "$(dry --arch gpt2 --model_size 70B)" = "$(dry --model_size gpt-70B)" ]
result $? "--arch gpt2 --model_size 70B plans gpt-70B, the GPT architecture at 70B's width"
out70=$(dry --model_size 70B --dtype float8 --world_size 32 --zero_stage 3 --batch_size 1 --seq_len 2048 \
    --gpu_memory_gb 141)
verdict "$out70" $? 0 '^fits: ' "70B float8, 32 processes, ZeRO-3, B=1 T=2048: fits 141 GB"
printf '%s\n' "$out70" | sed -n '/^fits: /p'
out=$(dry --model_size 70B --dtype float8 --batch_size 1 --seq_len 2048)
verdict "$out" $? 1 '^does not fit: needs .* GiB, the GPU has 141 GB' "70B float8, one process: exit 1, 'does not fit'"
mapfile -t suggestions < <(printf '%s\n' "$out" | sed -n '/^to fit/,$p' | grep ' needs ' | sed 's/^ *//; s/ *needs .*//')
if [ "${#suggestions[@]}" -ge 1 ]; then ok "70B float8, one process: ${#suggestions[@]} suggestion(s)"; else
    bad "70B float8, one process: no suggestion"
fi
for flags in "${suggestions[@]}"; do
    # shellcheck disable=SC2086 # the suggestion is a list of flags
    dry --model_size 70B --dtype float8 --batch_size 1 --seq_len 2048 $flags | grep -q '^fits: '
    result $? "suggestion '$flags', planned again, fits"
done

# --- the numbers add up
consistent() { # OUTPUT WHAT: groups sum to the plan (each printed to 0.0005 GiB), total = plan + reserve
    local plan reserve needed
    plan=$(field "$1" plan_total_bytes)
    reserve=$(field "$1" reserve_bytes)
    needed=$(field "$1" needed_bytes)
    [ -n "$plan" ] && [ $((plan + reserve)) = "$needed" ]
    result $? "$2: needed_bytes = plan_total_bytes + reserve_bytes"
    printf '%s\n' "$1" | awk -v plan="$plan" '
        /^per-process device memory/ { on = 1; next }
        /^[^ ]/ { on = 0 }
        on && /^  [^ ]/ && $NF == "GiB" { sum += $(NF - 1); groups++ }
        END { exit !(groups == 8 && (sum - plan / 2^30) ^ 2 < (groups * 0.0005) ^ 2) }'
    result $? "$2: the 8 groups add up to the plan total"
}
consistent "$out124" "124M bfloat16"
consistent "$out70" "70B float8 W=32 ZeRO-3"

reference=$("$REF" | grep '^reference ')
expect_total() { # OUTPUT REFERENCE-PREFIX WHAT
    local want
    want=$(printf '%s\n' "$reference" | grep -F "reference $2:" | awk '{ print $NF }')
    [ -n "$want" ] && [ "$(field "$1" plan_total_bytes)" = "$want" ]
    result $? "$3: plan total equals test_memory_plan's ($want bytes)"
}
expect_total "$out124" "124M bfloat16 B=4 T=1024 W=1 ZeRO-0 recompute 0" "124M bfloat16"
expect_total "$out70" "llama2-70B float8 B=1 T=2048 W=32 ZeRO-3 recompute 0" "70B float8 W=32 ZeRO-3"

# --- nothing large is allocated: 2 GB of address space for a plan of 1.3 TiB
(
    ulimit -v 2000000
    dry --model_size 70B --dtype float8 --batch_size 1 --seq_len 2048 >"$tmp/limited.txt" 2>&1
)
[ $? = 1 ] && grep -q '^does not fit' "$tmp/limited.txt"
result $? "70B dry run under ulimit -v 2000000 (it allocates nothing large)"

# --- the time plan (time_plan.h): its step is compute plus exposed communication; 70B on 4 nodes of 8 with
# recompute, B=1 x 16 or B=16 x 1: NCCL's hierarchical collectives (NVLink inside, 8 NICs across a node) hide
# ZeRO-3's 16 gathers and reduce-scatters a layer behind the compute, so what the fastest setting that fits
# gains is the recompute's third forward: without it only B=2 fits, in 8 micro-steps; a faster FP8 GEMM rate
# shortens the step (the bytes moved are the emulation's count: test_dist_emu)
plan_field() { # OUTPUT KEY: a value of the line "plan_step_ms N plan_all_reduce_bytes N ..."
    printf '%s\n' "$1" | awk -v key="$2" '$1 == "plan_step_ms" { for (i = 1; i < NF; i++) if ($i == key) print $(i + 1) }'
}
big=(--model_size 70B --dtype float8 --world_size 32 --zero_stage 3 --recompute 1 --seq_len 2048 --total_batch_size 1048576)
out=$(dry "${big[@]}" --batch_size 1)
fastest='^fastest that fits .*: --batch_size 2 --recompute 0 --zero_stage 3 (8 micro-step(s))'
verdict "$out" $? 0 "$fastest" "70B float8, 32 processes, B=1 x 16 micro-steps: the fastest that fits is B=2 x 8 without recompute"
printf '%s\n' "$out" | grep -E '^  (step|communication) '
parts=$(printf '%s\n' "$out" | sed -n 's/^  step *\([0-9.]*\) ms *= compute \([0-9.]*\) + exposed communication \([0-9.]*\) .*/\1 \2 \3/p')
awk -v p="$parts" 'BEGIN { split(p, v, " "); exit !(v[1] > 0 && v[1] - v[2] - v[3] < 0.011 && v[2] + v[3] - v[1] < 0.011) }'
result $? "the step is compute + exposed communication ($parts ms)"
out16=$(dry "${big[@]}" --batch_size 16)
verdict "$out16" $? 0 "$fastest" "70B float8, B=16 in one micro-step: the fastest that fits is B=2 x 8 without recompute"
slow=$(plan_field "$out16" plan_step_ms) fast=$(plan_field "$(dry "${big[@]}" --batch_size 16 --plan_gemm_fp8_tflops 2176)" plan_step_ms)
awk -v a="$fast" -v b="$slow" 'BEGIN { exit !(a > 0 && a < b) }'
result $? "twice the FP8 GEMM rate shortens the planned step ($slow -> $fast ms)"

printf '# scripts/gpu_check.sh\ngemm_fp8_tflops 2176\n' >"$tmp/rates.txt"
measured=$(plan_field "$(dry "${big[@]}" --batch_size 16 --plan_rates "$tmp/rates.txt")" plan_step_ms)
[ -n "$measured" ] && [ "$measured" = "$fast" ]
result $? "--plan_rates with gemm_fp8_tflops 2176 plans the step --plan_gemm_fp8_tflops 2176 does ($measured ms)"

# --- the network as NCCL runs it: 7B float8 ZeRO-3 on 4 nodes x 8 GPUs. A reduce-scatter over all 32 ranks
# leaves each node through its 8 NICs at once (8 x 46 = 368 GB/s, above NVLink's 360: the bus runs at 360);
# with one NIC a node it runs at that NIC's 46 GB/s, so the communication takes about 360 / 46 = 7.8 times as
# long (more than 5 times: the latencies and the small collectives do not scale).
net=(--model_size 7B --dtype float8 --world_size 32 --zero_stage 3 --batch_size 1 --seq_len 2048 --recompute 1)
eight=$(dry "${net[@]}") one=$(dry "${net[@]}" --nics_per_node 1)
grep -q '^  reduce-scatter .* 8 NIC(s) x 46 GB/s across, bus 360 GB/s' <<<"$eight" &&
    grep -q '^  reduce-scatter .* 1 NIC(s) x 46 GB/s across, bus 46 GB/s' <<<"$one"
result $? "7B on 4 nodes: the reduce-scatter over 32 ranks runs at 360 GB/s with 8 NICs a node, 46 with one"
wire() { sed -n 's/^  communication *\([0-9.]*\) ms.*/\1/p' <<<"$1"; }
awk -v a="$(wire "$eight")" -v b="$(wire "$one")" 'BEGIN { exit !(a > 0 && b > 5 * a) }'
result $? "one NIC a node instead of 8: communication $(wire "$eight") -> $(wire "$one") ms"

# --keep_gathered: 7B float8 on 4 processes in 4 nodes, B=1 x 16 micro-steps. Each layer is gathered once a
# step instead of twice a micro-step: the all-gathered bytes fall (the layers' share by 32x), the exposed
# communication and the step shrink, and the plan holds every layer's weight copies (more memory).
seven=(--model_size 7B --dtype float8 --world_size 4 --nodes 4 --zero_stage 3 --seq_len 2048 --batch_size 1
    --total_batch_size 131072 --gpu_memory_gb 80)
two=$(dry "${seven[@]}") kept=$(dry "${seven[@]}" --keep_gathered 1)
total() { sed -n 's/^plan_total_bytes \([0-9]*\) .*/\1/p' <<<"$1"; }
awk -v a="$(plan_field "$kept" plan_all_gather_bytes)" -v b="$(plan_field "$two" plan_all_gather_bytes)" \
    -v s="$(plan_field "$kept" plan_step_ms)" -v t="$(plan_field "$two" plan_step_ms)" \
    -v m="$(total "$kept")" -v n="$(total "$two")" 'BEGIN { exit !(a > 0 && a < b / 16 && s < t && m > n) }' &&
    grep -q 'gathered slot a layer (--keep_gathered)' <<<"$kept"
result $? "7B float8 ZeRO-3 B=1 x 16 on 4 nodes, --keep_gathered 1: all-gather $(plan_field "$two" plan_all_gather_bytes) -> $(plan_field "$kept" plan_all_gather_bytes) bytes, step $(plan_field "$two" plan_step_ms) -> $(plan_field "$kept" plan_step_ms) ms, plan $(total "$two") -> $(total "$kept") bytes"

# --- Llama 2 70B as the CUDA trainer would run it (it refuses --arch llama for now, after --dry_run)
llama=(--model_size llama2-70B --world_size 32 --zero_stage 3 --recompute 1 --batch_size 8 --seq_len 4096
    --total_batch_size 1048576)
time_reference() { printf '%s\n' "$reference" | grep -F "reference $1 time:" | awk '{ print $NF }'; }
declare -A llama_step
for dtype in bfloat16 float8; do
    out=$(dry "${llama[@]}" --dtype $dtype)
    verdict "$out" $? 0 '^fits: ' "llama2-70B $dtype, 32 processes, ZeRO-3, B=8 T=4096 recompute: fits 141 GB"
    grep -q "$header" <<<"$out" &&
        grep -q 'wte, lmhead, lnf' <<<"$out" && grep -q 'RMSNorm 1/rms per token' <<<"$out"
    result $? "llama2-70B $dtype: the header names Llama's shapes and 68976648192 parameters"
    printf '%s\n' "$out" | grep -E '^(total per process:|  step )'
    consistent "$out" "llama2-70B $dtype"
    expect_total "$out" "llama2-70B $dtype B=8 T=4096 W=32 ZeRO-3 recompute 1" "llama2-70B $dtype"
    want=$(time_reference "llama2-70B $dtype B=8 T=4096 W=32 ZeRO-3 recompute 1")
    llama_step[$dtype]=$(plan_field "$out" plan_step_ms)
    [ -n "$want" ] && [ "${llama_step[$dtype]}" = "$want" ]
    result $? "llama2-70B $dtype: planned step equals test_memory_plan's ($want ms)"
done
awk -v f="${llama_step[float8]}" -v b="${llama_step[bfloat16]}" 'BEGIN { exit !(f > 0 && f < b) }'
result $? "llama2-70B: float8 plans a shorter step than bfloat16 (${llama_step[float8]} < ${llama_step[bfloat16]} ms)"
out=$(dry "${llama[@]}" --dtype float8 --shard_group_size 8)
verdict "$out" $? 1 '^  --shard_group_size 0 ' "llama2-70B float8 in shard groups of 8: does not fit, sharding over all 32 suggested"

# --- bad values: one error line naming the flag, exit 1
refused() { # NEEDLE WHAT FLAGS...
    local needle=$1 what=$2 err
    shift 2
    err=$(dry "$@" 2>&1 >/dev/null)
    local rc=$?
    [ "$rc" = 1 ] && printf '%s\n' "$err" | grep -q -- "$needle"
    result $? "$what is refused ($needle)"
}
refused "--gpu_memory_gb" "--gpu_memory_gb -1" --model_size 124M --gpu_memory_gb -1
refused "--zero_stage" "--zero_stage 2" --model_size 124M --world_size 8 --zero_stage 2
refused "--dtype" "--dtype float32 (no GPU plan)" --model_size 124M --dtype float32
refused "multiple of 16" "float8 with B*T = 15" --model_size 124M --dtype float8 --batch_size 3 --seq_len 5
refused "--nodes" "--nodes above the processes" --model_size 124M --world_size 8 --nodes 9
refused "--gpu a100: has no FP8" "float8 on an A100" --model_size 124M --gpu a100 --dtype float8
# an A100 has no FP8 tensor cores: the suggestions that switch to float8 on an H200 leave it out there
small=(--model_size 1.5B --dtype bfloat16 --gpu_memory_gb 20 --seq_len 1024 --batch_size 64)
grep -q -- '--dtype float8 --recompute 1 --batch_size 1 --zero_stage 3' <<<"$(dry "${small[@]}")" &&
    ! grep -q -- '--dtype float8' <<<"$(dry "${small[@]}" --gpu a100)"
result $? "1.5B bfloat16 on 20 GB: float8 among the combined changes on an H200, not on an A100"
refused "--plan_rates: cannot open" "--plan_rates of a missing file" --model_size 124M --plan_rates "$tmp/none.txt"
printf 'gemm_fp8_tflops fast\n' >"$tmp/bad_rates.txt"
refused "--plan_rates: $tmp/bad_rates.txt line 1" "--plan_rates with a word for a rate" --model_size 124M \
    --plan_rates "$tmp/bad_rates.txt"
refused "--keep_gathered" "--keep_gathered 1 with ZeRO-1" --model_size 124M --world_size 8 --zero_stage 1 --keep_gathered 1

# cuDNN's attention workspace (memory_plan.h's attention_workspace_bytes: the deterministic backward's dP,
# B x NH x T x T x 2 bytes, plus B x NH x T FP32 softmax sums): its own line with --attention fast, none with
# exact, none with auto in this build (train_cpu has no cuDNN)
ws_line() { # OUTPUT: the attention workspace's line
    printf '%s\n' "$1" | grep -E '^ +attn_workspace +[0-9.]+ GiB +cuDNN attention workspace'
}
out=$(dry --model_size llama3-8B --seq_len 8192 --batch_size 1 --attention fast)
ws_line "$out" | grep -q ' 4\.001 GiB '
result $? "llama3-8B T=8192 B=1 --attention fast: the cuDNN attention workspace, 4.001 GiB (32 heads)"
exact=$(dry --model_size llama3-8B --seq_len 8192 --batch_size 1 --attention exact)
! ws_line "$exact" >/dev/null && [ $(($(field "$out" plan_total_bytes) - $(field "$exact" plan_total_bytes))) = 4296015872 ]
result $? "llama3-8B T=8192 B=1: --attention exact plans no workspace, fast 4296015872 bytes more"
out=$(dry --model_size 124M --batch_size 16 --seq_len 1024 --attention fast)
ws_line "$out" | grep -q ' 0\.376 GiB '
result $? "124M B=16 T=1024 --attention fast: the cuDNN attention workspace, 0.376 GiB (384 MiB of dP)"
! ws_line "$(dry --model_size 124M --batch_size 16 --seq_len 1024)" >/dev/null
result $? "124M --attention auto in a build without cuDNN: no workspace"
# ... and the time of the exact kernels: a build without cuDNN runs them (memory_plan.h's plan_fast_attention,
# the one answer of the memory plan, the time plan and the trainer), and the plan says which and why
attention_ms() { sed -n 's/^  attention  *\([0-9.]*\) ms .*/\1/p' <<<"$1"; }
flags70=(--model_size 70B --world_size 32 --zero_stage 3 --batch_size 8 --seq_len 4096 --recompute 1 --dtype float8)
auto=$(dry "${flags70[@]}") exact=$(dry "${flags70[@]}" --attention exact) fast=$(dry "${flags70[@]}" --attention fast)
[ -n "$(attention_ms "$auto")" ] && [ "$(attention_ms "$auto")" = "$(attention_ms "$exact")" ] &&
    python3 -c "import sys; sys.exit(not float(sys.argv[1]) > 3 * float(sys.argv[2]))" "$(attention_ms "$auto")" "$(attention_ms "$fast")" &&
    grep -q '^attention: exact kernels: --attention auto in a build without cuDNN' <<<"$auto" &&
    grep -q '^  attention .* (the exact kernels)$' <<<"$auto" && grep -q "^attention: cuDNN's fused attention: --attention fast" <<<"$fast"
result $? "llama2-70B T=4096, --attention auto without cuDNN: the exact kernels' $(attention_ms "$auto") ms planned (fast: $(attention_ms "$fast") ms), the plan names them and why"

# the cost plan: energy = GPUs x board power x the compute share of the step x time x --pue, priced by
# --price_kwh, and the rental --price_gpu_hour x GPUs x time; recomputed here from the step line's compute and
# step times (printed to 0.01 ms: the share is good to 1e-5 relative at these steps of seconds)
cost_flags=(--model_size 70B --dtype float8 --zero_stage 3 --world_size 32 --nodes 4 --batch_size 1 --seq_len 4096
    --recompute 1 --steps 10000)
out=$(dry "${cost_flags[@]}" --pue 1.2 --price_kwh 0.15 --price_gpu_hour 2.5)
python3 - "$out" <<'PY'
import re, sys
out = sys.argv[1]
step, compute = map(float, re.search(r"^  step +([0-9.]+) ms += compute ([0-9.]+)", out, re.M).groups())
plan = dict(zip(*[iter(re.search(r"^plan_board_watts .*", out, re.M).group(0).split())] * 2))
kwh = 32 * 700 * (compute / step) / 1e3 * 1.2 * step / 3.6e6
cost = kwh * 0.15 + 32 * 2.5 * step / 3.6e6
ok = abs(float(plan["plan_kwh_per_step"]) / kwh - 1) < 1e-4 and abs(float(plan["plan_cost_per_step"]) / cost - 1) < 1e-4
total = re.search(r"^  for --steps +([0-9.e+]+) h wall +([0-9.e+]+) kWh +electricity +([0-9.e+]+) +rental +([0-9.e+]+) +total +([0-9.e+]+)", out, re.M)
ok &= total is not None and abs(float(total.group(2)) / (1e4 * kwh) - 1) < 1e-3 and abs(float(total.group(5)) / (1e4 * cost) - 1) < 1e-3
print(f"per step {plan['plan_kwh_per_step']} kWh, cost {plan['plan_cost_per_step']}; recomputed {kwh:.6g}, {cost:.6g}")
sys.exit(0 if ok else 1)
PY
result $? "cost plan of 70B float8 on 32 H200s: energy and cost per step and for --steps as recomputed"
kwh_pue() { dry "${cost_flags[@]}" "$@" | awk '$1 == "plan_board_watts" { print $6 }'; }
python3 -c 'import sys; a, b = map(float, sys.argv[1:]); sys.exit(0 if abs(b / a - 1.5) < 1e-6 else 1)' \
    "$(kwh_pue --pue 1.0)" "$(kwh_pue --pue 1.5)"
result $? "--pue 1.5 plans 1.5 x the energy of --pue 1 (no longer ignored by the dry run)"
dry "${cost_flags[@]}" | grep -q "give --price_kwh and --price_gpu_hour"
result $? "without prices the cost plan says which flags give them"

# dev/perf_model.sh: its eight rows (124M and 1.5B x bfloat16 and float8 x exact and fast attention), each
# step the sum of its parts (one process: no communication; four parts printed to 0.01 ms, so within
# 4 x 0.005), and the fast attention faster than the exact one in every configuration
table=$(bash dev/perf_model.sh)
python3 - <<PY
import sys
rows = [l.split("|")[1:-1] for l in """$table""".splitlines() if l.startswith("| 124M") or l.startswith("| 1.5B")]
plans = [r for r in rows if len(r) == 10]
ok = len(plans) == 8
for r in plans:
    gemm, attention, memory, launch, step = (float(r[i]) for i in (3, 4, 5, 6, 7))
    ok &= abs(gemm + attention + memory + launch - step) <= 0.02
steps = {tuple(x.strip() for x in r[:3]): float(r[7]) for r in plans}
ok &= all(steps[(m, d, "fast")] < steps[(m, d, "exact")] for m in ("124M", "1.5B") for d in ("bfloat16", "float8"))
sys.exit(0 if ok else 1)
PY
result $? "dev/perf_model.sh: 8 plans, each step the sum of its kernel families, the fast attention faster"

finish

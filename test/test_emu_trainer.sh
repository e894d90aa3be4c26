#!/usr/bin/env bash
# test_emu_trainer.sh: what the CPU emulation of CUDA shows of the CUDA trainer beyond test_gpu.sh
# (make test_emu_trainer). A d4-shaped model (4 layers, so that ZeRO-3 prefetches and its slots are reused),
# float8, 3 steps.
#   1. ZeRO-3's two-stream schedule is race-free in the orders an adversary picks: one process with ZeRO-3
#      gives ZeRO-0's model file bit for bit whether the communication stream's work runs as late
#      (CUDA_EMU_STREAM_ORDER=first-stream) or as early (last-stream) as its events allow, in random
#      orders, with the threads of every block run last-first, with warps that run ahead and in a random
#      schedule of threads and blocks (CUDA_EMU_SCHEDULE), with CUDA Graphs, and with --recompute 1;
#      --keep_gathered 1 gives it op by op, and is refused at start with CUDA Graphs (a captured micro-step
#      would wait on gathers recorded outside its capture, which CUDA and the emulation refuse:
#      cudaErrorStreamCaptureIsolation);
#   2. every cross-stream wait it makes is needed: with the waits of one call site left out
#      (CUDA_EMU_DROP_WAIT_SITE), some order gives another model file. A site whose every wait the
#      emulator found already implied by others (its vector clocks) is listed, not required to matter;
#   3. the emulator's report: kernel launches (and graph launches) per optimizer step, and the peak of
#      device memory allocated, which must equal the trainer's plan and --dry_run's plan_total_bytes; a plan
#      that fits the free memory only without the runtime reserve is refused at start with one line
#      (bfloat16/float8 x ZeRO 0/1/3 x recompute 0/1); bfloat16's cuBLASLt epilogues: where the heuristic
#      has none (CUDA_EMU_NO_FUSED_EPILOGUES) the separate kernels run instead, 6 launches more per layer
#      and micro-step (the GELU, its backward and four bias gradients of two kernels, less the four adds
#      of the epilogues' bias gradients) and one more per replayed layer with --recompute 1, and the run
#      says one note per epilogue and nothing on stderr (what those kernels compute, the previous
#      commit's bfloat16, train_cpu no longer does: it rounds as the epilogues do);
#   4. the trainer under AddressSanitizer, UBSan and LeakSanitizer (test/build/train_emu_sanitize): a
#      bfloat16 run with CUDA Graphs, validation and sampling, and a float8 ZeRO-3 run with recompute, end
#      with status 0 and no report;
#   5. a torchrun-style rank 1 never reads an NCCL id file an earlier launch left in --output_dir (another
#      torchrun run id, or the same one before a restart): it waits for its own launch's file and ends on
#      --nccl_timeout_s with one line naming that file; the control, the same launch and restart, reads
#      it (and fails to join);
#   6. a GPU the build has no code for (CUDA_EMU_DEVICE=l40s: sm_89, where the emulated program carries
#      sm_90a and sm_100a as make train's default build does) is refused at start with one line naming its
#      compute capability, before any allocation; the B200 runs; the run's versions line names the device,
#      driver, CUDA runtime, cuBLASLt, NCCL and cuDNN; a block recipe on a cuBLASLt older than 12.9
#      (CUDA_EMU_CUBLASLT_VERSION) is refused at start with one line; the trainer built against cuBLAS 12.8's
#      headers, which lack Hopper's block scale modes (test/build/train_emu_cublas12.8), builds, refuses the
#      block recipes at start with one line and runs the per-tensor ones.
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
test_init
test_tmpdir tmp test_emu_trainer
test_data_dir "$tmp/data" text
model=(--model_size d4 --channels 64 --heads 2 --vocab 256 --seq_len 32 --batch_size 4 --steps 3 --lr 1e-3
       --train_data "$tmp/data/text_train_*.bin" --val_data "" --dtype float8)
run() { # NAME FLAGS... (environment as set by the caller): model file at $tmp/NAME/model_00000003.bin
    local name=$1 args
    shift
    mapfile -d '' args < <(merge_flags "${model[@]}" -- --output_dir "$tmp/$name" "$@")
    ./train_emu "${args[@]}" >"$tmp/$name.out" 2>&1
}
same_as_reference() { cmp -s "$tmp/z0/model_00000003.bin" "$tmp/$1/model_00000003.bin"; }

run z0 --zero_stage 0 --cuda_graph 0
for order in issue first-stream last-stream random:1 random:2; do
    for graph in 0 1; do
        CUDA_EMU_STREAM_ORDER=$order run "z3_${order}_$graph" --zero_stage 3 --cuda_graph $graph
        same_as_reference "z3_${order}_$graph"
        result $? "ZeRO-3, stream order $order, CUDA Graphs $graph: ZeRO-0's model file"
    done
done
run z3_keep --zero_stage 3 --keep_gathered 1 --cuda_graph 0
same_as_reference z3_keep
result $? "ZeRO-3 --keep_gathered 1, op by op: ZeRO-0's model file"
status=0
run z3_keep_graph --zero_stage 3 --keep_gathered 1 --cuda_graph 1 || status=$?
[ $status = 1 ] && [ "$(grep -cv '^cuda-emu: ' "$tmp/z3_keep_graph.out")" = 1 ] &&
    grep -q "^error: --keep_gathered 1: a CUDA Graph of a micro-step would wait on gathers recorded outside its capture" \
        "$tmp/z3_keep_graph.out"
result $? "ZeRO-3 --keep_gathered 1 with CUDA Graphs is refused at start ($(head -c 120 "$tmp/z3_keep_graph.out"))"
for schedule in warp-ahead random:11; do
    CUDA_EMU_SCHEDULE=$schedule run "z3_$schedule" --zero_stage 3 --cuda_graph 1
    same_as_reference "z3_$schedule"
    result $? "ZeRO-3 with the threads of every block in the schedule $schedule: ZeRO-0's model file"
done
CUDA_EMU_THREAD_ORDER=reverse CUDA_EMU_STREAM_ORDER=last-stream run z3_reverse --zero_stage 3 --cuda_graph 0
same_as_reference z3_reverse
result $? "ZeRO-3, threads of every block run last-first: ZeRO-0's model file"
CUDA_EMU_STREAM_ORDER=first-stream run z3_recompute --zero_stage 3 --recompute 1 --cuda_graph 0
same_as_reference z3_recompute
result $? "ZeRO-3 with --recompute 1, stream order first-stream: ZeRO-0's model file"

CUDA_EMU_REPORT="$tmp/sites.txt" run sites --zero_stage 3 --cuda_graph 0
sites=$(grep -c '^wait_site ' "$tmp/sites.txt")
[ "$sites" -ge 5 ]
result $? "ZeRO-3 waits between its streams from $sites call sites"
while read -r _ site _ calls _ redundant _ function; do
    detected=""
    for order in first-stream last-stream; do
        status=0
        CUDA_EMU_DROP_WAIT_SITE=$site CUDA_EMU_STREAM_ORDER=$order run "drop_${site}_$order" --zero_stage 3 \
            --cuda_graph 0 || status=$?
        if [ $status != 0 ] || ! same_as_reference "drop_${site}_$order"; then detected="$detected $order"; fi
    done
    if [ "$redundant" = "$calls" ]; then
        ok "wait site $site ($function, $calls calls): every wait already implied by others${detected:+; left out, it changes the result in$detected}"
    else
        [ -n "$detected" ]
        result $? "wait site $site ($function, $calls calls, $redundant implied): left out, the result changes in:${detected:- no order}"
    fi
done < <(grep '^wait_site ' "$tmp/sites.txt")

for config in bfloat16:0:0 float8:0:0 float8:1:0 float8:3:0 bfloat16:3:1 float8:3:1; do
    IFS=: read -r dtype zero recompute <<<"$config"
    flags=(--dtype "$dtype" --zero_stage "$zero" --recompute "$recompute")
    CUDA_EMU_REPORT="$tmp/report_$config.txt" run "memory_$zero" "${flags[@]}" --cuda_graph 0 --steps 1 --overwrite 1 # one directory per ZeRO stage
    peak=$(sed -n 's/^device_memory_peak_bytes //p' "$tmp/report_$config.txt")
    planned=$(sed -n 's/^memory | planned \([0-9]*\) bytes.*/\1/p' "$tmp/memory_$zero.out")
    mapfile -d '' args < <(merge_flags "${model[@]}" -- "${flags[@]}" --dry_run 1)
    dry=$(./train_emu "${args[@]}" | sed -n 's/^plan_total_bytes \([0-9]*\) .*/\1/p')
    [ -n "$peak" ] && [ "$peak" = "$planned" ] && [ "$peak" = "$dry" ]
    result $? "$dtype, ZeRO-$zero, recompute $recompute: peak device memory $peak bytes = the plan ($planned) = --dry_run's ($dry)"
done
# The start-up check keeps memory_plan.h's runtime reserve (NCCL, cuDNN, lazily loaded kernels) free beyond
# the plan: a batch whose plan fits the emulated H200's free memory but not with the reserve (picked with
# --dry_run's plan) is refused with one line before any allocation, instead of running out at its first
# collective.
free_gib=$(sed -n 's/^memory | .* \([0-9.]*\) GiB free before$/\1/p' "$tmp/memory_0.out")
big=(--model_size 124M --vocab 256 --seq_len 1024 --dtype bfloat16 --steps 1 --train_data "$tmp/data/text_train_*.bin"
     --val_data "" --output_dir "")
tight=""
for B in $(seq 400 4 520); do
    read -r plan reserve < <(./train_emu "${big[@]}" --batch_size $B --dry_run 1 |
        sed -n 's/^plan_total_bytes \([0-9]*\) reserve_bytes \([0-9]*\) .*/\1 \2/p')
    if awk -v p="$plan" -v r="$reserve" -v f="$free_gib" 'BEGIN { f *= 2^30; exit !(p < f - 2^25 && p + r > f + 2^25) }'; then
        tight=$B
        break
    fi
done
status=0
[ -n "$tight" ] && ./train_emu "${big[@]}" --batch_size "$tight" >"$tmp/tight.out" 2>"$tmp/tight.err" || status=$?
[ -n "$tight" ] && [ $status = 1 ] && [ "$(wc -l <"$tmp/tight.err")" = 1 ] &&
    grep -q "^error: model does not fit: needs .* (plan .* + runtime reserve 2.00 for NCCL, cuDNN and lazily loaded kernels), $free_gib GiB free" "$tmp/tight.err"
result $? "124M B=${tight:-?} x 1024: the plan fits the ${free_gib:-?} GiB free, not with the reserve: refused ($(head -c 110 "$tmp/tight.err" 2>/dev/null))"
CUDA_EMU_REPORT="$tmp/graphs.txt" run graphs --zero_stage 0 --cuda_graph 1 --steps 6
CUDA_EMU_REPORT="$tmp/eager.txt" run eager --zero_stage 0 --cuda_graph 0 --steps 6
per_step() { sed -n "s/^range step .* $2 \([0-9.]*\) .*/\1/p" "$1"; }
echo "     per optimizer step, op by op: $(per_step "$tmp/eager.txt" kernel_launches_per_range) kernel launches, $(per_step "$tmp/eager.txt" matmuls_per_range) cuBLASLt matmuls; with CUDA Graphs (6 steps, 2 captured and replayed from the third): $(per_step "$tmp/graphs.txt" kernel_launches_per_range) kernel and $(per_step "$tmp/graphs.txt" graph_launches_per_range) graph launches"
awk '/^range step / { ok = $6 > 0 && $12 > 0 } END { exit !ok }' "$tmp/eager.txt"
result $? "the report counts the launches and executed kernels of every optimizer step"

for recompute in 0 1; do
    flags=(--dtype bfloat16 --zero_stage 0 --recompute $recompute --cuda_graph 0 --steps 1)
    CUDA_EMU_REPORT="$tmp/fused_$recompute.txt" run "fused_$recompute" "${flags[@]}"
    CUDA_EMU_NO_FUSED_EPILOGUES=1 CUDA_EMU_REPORT="$tmp/separate_$recompute.txt" run "separate_$recompute" "${flags[@]}"
    fused=$(per_step "$tmp/fused_$recompute.txt" kernel_launches_per_range)
    separate=$(per_step "$tmp/separate_$recompute.txt" kernel_launches_per_range)
    layers=4 notes=$(grep -c '^note | cuBLASLt has no algorithm fusing' "$tmp/separate_$recompute.out")
    want=$((6 * layers + recompute * (layers - 1)))
    [ -n "$fused" ] && [ "${separate%.*}" -eq $((${fused%.*} + want)) ] && [ "$notes" = 3 ] &&
        ! grep -q '^note | cuBLASLt' "$tmp/fused_$recompute.out" &&
        ! grep -qiE 'error|warning|cuda-emu' "$tmp/separate_$recompute.out"
    result $? "bfloat16, recompute $recompute: $fused kernel launches a step with cuBLASLt's epilogues, $separate with the separate kernels where it has none (+$want), $notes notes and no error or warning"
done

sanitized() { # NAME FLAGS...
    local name=$1 status=0
    shift
    ./test/build/train_emu_sanitize "$@" --output_dir "" >"$tmp/$name.out" 2>&1 || status=$?
    [ $status = 0 ] && ! grep -qE 'Sanitizer|runtime error' "$tmp/$name.out"
    result $? "under AddressSanitizer, UBSan and LeakSanitizer: $name (exit $status)"
    grep -m3 -E 'ERROR|runtime error' "$tmp/$name.out"
}
small=(--model_size d2 --channels 96 --heads 3 --vocab 256 --seq_len 32 --batch_size 2 --steps 2
       --train_data "$tmp/data/text_train_*.bin" --val_data "$tmp/data/text_val_*.bin" --val_batches 1)
sanitized "bfloat16, CUDA Graphs, validation, sampling" "${small[@]}" --dtype bfloat16 --cuda_graph 1 \
    --tokenizer "$tmp/data/text_tokenizer.bin" --sample_every 2 --sample_len 4
sanitized "float8, ZeRO-3, recompute" "${small[@]}" --dtype float8 --zero_stage 3 --recompute 1

# A well-formed id file (magic, world size 2, an id) of an earlier launch: read, it would take rank 1 into
# a communicator whose rank 0 is gone (here: the emulation's refusal of an id its ncclGetUniqueId did not make).
stale_id() { # FILE
    "$PY" -c 'import struct, sys; open(sys.argv[1], "wb").write(struct.pack("<ii", 20261202, 2) + bytes(128))' "$1"
}
mkdir -p "$tmp/ids"
stale_id "$tmp/ids/nccl_id_launch-1_0"
for launch in "launch-2 0" "launch-1 1"; do
    read -r run_id restart <<<"$launch"
    status=0
    TORCHELASTIC_RUN_ID=$run_id TORCHELASTIC_RESTART_COUNT=$restart RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 \
        ./train_emu "${small[@]}" --output_dir "$tmp/ids" --nccl_timeout_s 1 >"$tmp/ids.out" 2>"$tmp/ids.err" ||
        status=$?
    want="error: rank 1: no NCCL id from rank 0 in $tmp/ids/nccl_id_${run_id}_$restart after --nccl_timeout_s 1 s"
    [ $status = 1 ] && [ "$(wc -l <"$tmp/ids.err")" = 1 ] && [[ "$(cat "$tmp/ids.err")" == "$want"* ]]
    result $? "run id $run_id, restart $restart: the file of launch-1 restart 0 is not read ($(head -c 150 "$tmp/ids.err"))"
done
status=0
TORCHELASTIC_RUN_ID=launch-1 TORCHELASTIC_RESTART_COUNT=0 RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 \
    ./train_emu "${small[@]}" --output_dir "$tmp/ids" --nccl_timeout_s 1 >"$tmp/ids.out" 2>"$tmp/ids.err" || status=$?
[ $status = 1 ] && grep -q "^error: rank 1: joining the NCCL communicator" "$tmp/ids.err"
result $? "control: the same launch and restart reads that file ($(grep -m1 '^error' "$tmp/ids.err" | head -c 120))"

for device in l40s b200; do
    status=0
    CUDA_EMU_DEVICE=$device ./train_emu "${small[@]}" --dtype bfloat16 --output_dir "" >"$tmp/arch.out" \
        2>"$tmp/arch.err" || status=$?
    errors=$(grep -v '^cuda-emu: ' "$tmp/arch.err") # the emulator's own explanation line aside
    if [ $device = l40s ]; then
        [ $status = 1 ] && [ "$(wc -l <<<"$errors")" = 1 ] && [[ "$errors" == "error: NVIDIA L40S"*"(compute capability 8.9): this build has no code for it"* ]] &&
            ! grep -q "^memory |" "$tmp/arch.out"
        result $? "a GPU without code in the build is refused at start ($errors)"
    else
        [ $status = 0 ] && [ -z "$errors" ] &&
            grep -Eq "^versions \| NVIDIA B200.*, compute capability 10\.0 \| driver [0-9]+\.[0-9]+ \| CUDA runtime [0-9.]+ \| cuBLASLt [0-9.]+ \| NCCL [0-9.]+ \| cuDNN " "$tmp/arch.out"
        result $? "the B200 (sm_100a) runs, its versions line first ($(grep -m1 '^versions' "$tmp/arch.out"))"
    fi
done
status=0
mapfile -d '' blockwise < <(merge_flags "${small[@]}" -- --channels 128 --heads 4 --batch_size 4 --dtype float8 --fp8_recipe blockwise \
    --output_dir "")
CUDA_EMU_CUBLASLT_VERSION=120800 ./train_emu "${blockwise[@]}" >"$tmp/old.out" 2>"$tmp/old.err" || status=$?
[ $status = 1 ] && [ "$(wc -l <"$tmp/old.err")" = 1 ] && grep -q "^error: --fp8_recipe blockwise: the loaded cuBLASLt 12.8.0 has no block-scaled GEMMs" "$tmp/old.err" && ! grep -q "^memory |" "$tmp/old.out"
result $? "a block recipe on cuBLASLt 12.8 is refused at start ($(cat "$tmp/old.err"))"
status=0
./test/build/train_emu_cublas12.8 "${blockwise[@]}" >"$tmp/old_headers.out" 2>"$tmp/old_headers.err" || status=$?
[ $status = 1 ] && [ "$(wc -l <"$tmp/old_headers.err")" = 1 ] &&
    grep -q "^error: --fp8_recipe blockwise: this build's cuBLAS 12.8 headers have no block-scaled GEMMs" "$tmp/old_headers.err" &&
    ! grep -q "^memory |" "$tmp/old_headers.out"
result $? "built against cuBLAS 12.8's headers, a block recipe is refused at start ($(cat "$tmp/old_headers.err"))"
mapfile -d '' delayed < <(merge_flags "${blockwise[@]}" -- --fp8_recipe delayed)
./test/build/train_emu_cublas12.8 "${delayed[@]}" >"$tmp/old_headers.out" 2>"$tmp/old_headers.err"
result $? "built against cuBLAS 12.8's headers, the delayed recipe runs ($(grep -c '^step' "$tmp/old_headers.out") steps)"
finish

#!/usr/bin/env bash
# test_emu.sh: the CPU emulation of CUDA (emu/) itself (make test_emu).
#   1. test/test_emu.cu's checks of CUDA's documented semantics (warp operations, barriers, atomics, launch
#      limits, copies, graphs and capture, the cuBLASLt reference and its constraints, one-rank NCCL), in
#      every stream order and with the threads of each block run last-first: their results must not
#      depend on either; and as a Blackwell (CUDA_EMU_DEVICE=b200: cuBLASLt's MXFP8 mode instead of sm_90's
#      block scaling);
#   2. each planted fault ends its run with the emulator's error line naming it (exit status 3): a
#      __syncthreads in divergent code (two forms), shuffles with a wrong mask (a lane outside it, an
#      exited lane, lanes the block does not have, lanes at different shuffles), a kernel argument that is
#      host memory, a host read of device memory, a write past an allocation's end (past its 256-byte
#      rounding here; one byte past it under the sanitizer build, which AddressSanitizer reports);
#   3. a missing cross-stream wait: a consumer stream that does not wait for its producer reads the
#      producer's value in the issue order, and the stale one when later streams run as early as their
#      dependencies allow (CUDA_EMU_STREAM_ORDER=last-stream): the emulation exposes it;
#   4. the layers' kernels (gpu/), the exact attention and AdamW against the CPU reference trainer's
#      functions (dev/bench_kernels.cu --small on the emulation: the same tolerances as on a GPU; the timings
#      it prints are the emulation's), in each thread schedule (round-robin, warp-ahead, random:SEED);
#   5. the schedules: the semantics hold in each; a block reduction that lacks its closing barrier gives the
#      right sums round-robin and the wrong ones when warps run ahead (CUDA_EMU_SCHEDULE=warp-ahead);
#   6. the race checker (test_emu_racecheck, bench_kernels_racecheck: compiled with -fsanitize=thread against
#      emu/racecheck.cpp): the semantics and every kernel check above without a report (no false race: barriers,
#      __syncwarp, atomics, bytes of one word from several threads), and each planted race reported with its
#      kernel, buffer and both threads' source lines: a missing barrier in static and in dynamic shared memory,
#      a max by plain read-compare-write across blocks, an atomic against a plain read, a write one block makes
#      and another reads.
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
test_init
test_tmpdir tmp test_emu
for order in issue first-stream last-stream random:7; do
    CUDA_EMU_STREAM_ORDER=$order ./test/build/test_emu >"$tmp/semantics.txt" 2>"$tmp/semantics.err"
    result $? "emulator semantics, stream order $order: $(tail -n 1 "$tmp/semantics.txt")"
    grep FAIL "$tmp/semantics.txt"
done
CUDA_EMU_THREAD_ORDER=reverse ./test/build/test_emu >"$tmp/reverse.txt" 2>/dev/null
result $? "emulator semantics, threads of each block run last-first: $(tail -n 1 "$tmp/reverse.txt")"
CUDA_EMU_DEVICE=b200 ./test/build/test_emu >"$tmp/b200.txt" 2>/dev/null
result $? "emulator semantics on a Blackwell (cuBLASLt's MXFP8 mode): $(tail -n 1 "$tmp/b200.txt")"
grep FAIL "$tmp/b200.txt"

planted() { # BINARY FAULT EXPECTED-SUBSTRING
    local binary=$1 fault=$2 want=$3 status=0
    "$binary" "$fault" >"$tmp/$fault.out" 2>"$tmp/$fault.err" || status=$?
    if [ "$status" != 0 ] && grep -q -- "$want" "$tmp/$fault.err"; then
        ok "planted fault $fault caught: $(grep -m1 -- "$want" "$tmp/$fault.err" | cut -c1-160)"
    else
        bad "planted fault $fault: exit $status, expected '$want' ($(head -c 300 "$tmp/$fault.err"))"
    fi
}
emu=./test/build/test_emu
planted $emu divergent_syncthreads "has exited while 16 thread(s) of its block wait at __syncthreads"
planted $emu two_syncthreads "while other threads of its block wait at the one at"
planted $emu shuffle_outside_mask "reads lane 16, which is not in the mask 0x0000ffff"
planted $emu shuffle_exited_lane "has exited, but lanes of its warp wait for it at __shfl_xor_sync"
planted $emu shuffle_missing_lane "names lanes that do not exist: warp 0 of this 8-thread block has 8"
planted $emu shuffle_divergent "every lane a mask names must reach the same warp operation"
planted $emu host_pointer_argument "argument 1 is 0x[0-9a-f]* (host memory, not from cudaMalloc)"
planted $emu host_reads_device "host code touched device memory at"
planted $emu far_out_of_bounds_write "out-of-bounds access at 0x[0-9a-f]*, 8096 bytes from the start of a cudaMalloc allocation of 4000 bytes"
planted ./test/build/test_emu_sanitize out_of_bounds_write "AddressSanitizer: heap-buffer-overflow"
for fault in divergent_syncthreads shuffle_outside_mask; do # the sanitizer build keeps the emulator's checks
    planted ./test/build/test_emu_sanitize $fault "cuda-emu: error: kernel"
done

for schedule in warp-ahead random:5; do
    CUDA_EMU_SCHEDULE=$schedule ./test/build/test_emu >"$tmp/schedule.txt" 2>/dev/null
    result $? "emulator semantics, CUDA_EMU_SCHEDULE=$schedule: $(tail -n 1 "$tmp/schedule.txt")"
    grep FAIL "$tmp/schedule.txt"
done
sums() { CUDA_EMU_SCHEDULE=$1 ./test/build/test_emu schedule 2>/dev/null | sed -n 's/^sums //p'; }
[ "$(sums round-robin)" = "6 6 6 6" ] && [ "$(sums warp-ahead)" != "6 6 6 6" ]
result $? "a reduction without its closing barrier: round-robin hides it ($(sums round-robin)), warp-ahead exposes it ($(sums warp-ahead))"

racecheck=./test/build/test_emu_racecheck
$racecheck >"$tmp/racecheck.txt" 2>"$tmp/racecheck.err"
result $? "emulator semantics under the race checker, no race reported: $(tail -n 1 "$tmp/racecheck.txt")"
grep -m3 racecheck "$tmp/racecheck.err"
planted $racecheck race_shared_missing_barrier "racecheck: race in kernel shared_missing_barrier_kernel on shared memory \`shared_missing_barrier_kernel::partial\`, byte 0: read by block (0,0,0) thread (32,0,0) at test/test_emu.cu"
planted $racecheck race_dynamic_missing_barrier "racecheck: race in kernel dynamic_missing_barrier_kernel on dynamic shared memory"
planted $racecheck race_plain_max "racecheck: race in kernel plain_max_kernel on global memory.*different blocks of one launch are not ordered"
planted $racecheck race_atomic_and_plain "racecheck: race in kernel atomic_and_plain_kernel.*an atomic and a plain access"
planted $racecheck race_cross_block "racecheck: race in kernel cross_block_kernel on global memory.*read by block (1,0,0) thread (0,0,0)"

read_value() { CUDA_EMU_STREAM_ORDER=$1 ./test/build/test_emu streams ${2:-} 2>/dev/null | sed -n 's/^consumer read //p'; }
good=1
for order in issue first-stream last-stream random:1; do [ "$(read_value $order)" = 42 ] || good=0; done
result $((1 - good)) "with its cudaStreamWaitEvent, the consumer stream reads the producer's value in every order"
[ "$(read_value issue nowait)" = 42 ] && [ "$(read_value last-stream nowait)" = 1 ]
result $? "without it: the issue order hides the race, last-stream (later streams as early as allowed) exposes it"

for schedule in round-robin warp-ahead random:3; do
    CUDA_EMU_SCHEDULE=$schedule ./test/build/bench_kernels_emu --small --reps 1 >"$tmp/bench.txt" 2>&1
    result $? "the layer, attention and AdamW kernels against the CPU reference on the emulation, schedule $schedule: $(grep 'checks failed' "$tmp/bench.txt")"
    grep -E 'FAIL|cuda-emu' "$tmp/bench.txt"
done
./test/build/bench_kernels_racecheck --small --reps 1 >"$tmp/bench_racecheck.txt" 2>&1
result $? "the same kernels under the race checker, no race reported: $(grep 'checks failed' "$tmp/bench_racecheck.txt")"
grep -m3 racecheck "$tmp/bench_racecheck.txt"
finish

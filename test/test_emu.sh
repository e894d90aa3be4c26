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
#   4. the kernels of gpu/layers.cuh, the exact attention and AdamW against the CPU reference trainer's
#      functions (dev/bench_kernels.cu --small on the emulation: the same tolerances as on a GPU; the timings it prints are the emulation's).
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

read_value() { CUDA_EMU_STREAM_ORDER=$1 ./test/build/test_emu streams ${2:-} 2>/dev/null | sed -n 's/^consumer read //p'; }
good=1
for order in issue first-stream last-stream random:1; do [ "$(read_value $order)" = 42 ] || good=0; done
result $((1 - good)) "with its cudaStreamWaitEvent, the consumer stream reads the producer's value in every order"
[ "$(read_value issue nowait)" = 42 ] && [ "$(read_value last-stream nowait)" = 1 ]
result $? "without it: the issue order hides the race, last-stream (later streams as early as allowed) exposes it"

./test/build/bench_kernels_emu --small --reps 1 >"$tmp/bench.txt" 2>&1
result $? "the layer, attention and AdamW kernels against the CPU reference on the emulation: $(grep 'checks failed' "$tmp/bench.txt")"
grep FAIL "$tmp/bench.txt"
finish

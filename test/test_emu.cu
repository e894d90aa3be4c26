// test/test_emu.cu: the CPU emulation of CUDA (emu/) against what CUDA documents, and the faults it must
// catch. Built only for the emulation (make test_emu); test/test_emu.sh runs it.
//   test_emu             the semantics: warp shuffles and votes, barriers and shared memory, atomics from
//                        blocks on several host threads, launch limits, copies and their directions,
//                        stream order and events, CUDA Graph capture and replay, what capture refuses,
//                        the cuBLASLt reference (values against a double-precision product, its fused
//                        epilogues against references computed here, and every documented constraint it
//                        enforces), one-rank NCCL and its in-place rules;
//   test_emu FAULT       one planted fault (the names in FAULTS below): each must end the process with a
//                        "cuda-emu: error:" line (exit 3), or under the sanitizer build an ASan report;
//   test_emu schedule    a block reduction that lacks its closing barrier: prints the sums its warps
//                        computed (right round-robin, wrong when a warp runs ahead: CUDA_EMU_SCHEDULE);
//   test_emu streams     a producer on one stream and a consumer on another, with the event wait
//                        (default) or without (argument "nowait"): prints the value the consumer read,
//                        so that the script shows which stream orders expose the missing wait;
//   test_emu nccl        under mpirun: all-reduce, in-place all-gather and reduce-scatter across the ranks
//                        against their definitions; "nccl mismatch": rank 0 all-reduces while the others
//                        all-gather, which the emulation must stop.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include <errno.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../gpu/common.cuh"
#include "../core/fp8_scaling.h"
#include "../gpu/gemm.cuh"
#include "test_util.h"
#include <nccl.h>

#ifdef USE_MPI
#include <mpi.h>
#endif

// ---------------------------------------------------------------------------------------------------------
// Kernels

// out[t] = the value of each warp operation for thread t (32 per warp, one block).
__global__ void warp_ops_kernel(int *out) {
    const int lane = threadIdx.x % 32, t = threadIdx.x;
    int *o = out + t * 8;
    o[0] = __shfl_sync(0xffffffffu, lane * 10, (lane + 3) % 32);
    o[1] = __shfl_xor_sync(0xffffffffu, lane * 10, 5);
    o[2] = __shfl_up_sync(0xffffffffu, lane * 10, 2, 8);    // within segments of 8
    o[3] = __shfl_down_sync(0xffffffffu, lane * 10, 3, 16); // within segments of 16
    o[4] = (int)__reduce_add_sync(0xffffffffu, (unsigned)lane);
    o[5] = (int)__ballot_sync(0xffffffffu, lane % 3 == 0);
    o[6] = __any_sync(0xffffffffu, lane == 7) + 2 * __all_sync(0xffffffffu, lane < 40);
    // two halves of the warp in disjoint masks at the same time
    o[7] = lane < 16 ? __shfl_xor_sync(0x0000ffffu, lane, 1) : __shfl_xor_sync(0xffff0000u, lane, 2);
}

// out[block] = the sum of in[block * n .. + n), through shared memory and barriers (n = blockDim.x).
__global__ void block_sum_kernel(float *out, const float *in) {
    __shared__ float partial[256];
    partial[threadIdx.x] = in[blockIdx.x * blockDim.x + threadIdx.x];
    __syncthreads();
    for (unsigned stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}

__global__ void count_kernel(unsigned long long *counter) {
    atomicAdd(counter, 1ull);
}

__global__ void add_value_kernel(float *x, float value, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += value;
}

__global__ void copy_kernel(float *dst, const float *src, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = src[i];
}

// Dynamic shared memory: reverses x within the block.
__global__ void reverse_kernel(float *x) {
    float *tile = (float *)emu::dynamic_shared_memory();
    tile[threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    x[threadIdx.x] = tile[blockDim.x - 1 - threadIdx.x];
}

// The planted faults.
__global__ void divergent_barrier_kernel(int *x) {
    if (threadIdx.x < 16) __syncthreads();
    x[threadIdx.x] = 1;
}

__global__ void two_barriers_kernel(int *x) {
    if (threadIdx.x % 2)
        __syncthreads();
    else
        __syncthreads();
    x[threadIdx.x] = 1;
}

__global__ void shuffle_outside_mask_kernel(int *x) {
    if (threadIdx.x < 16) x[threadIdx.x] = __shfl_xor_sync(0x0000ffffu, (int)threadIdx.x, 16);
}

__global__ void shuffle_exited_lane_kernel(int *x) {
    if (threadIdx.x >= 16) return;
    x[threadIdx.x] = __shfl_xor_sync(0xffffffffu, (int)threadIdx.x, 1);
}

__global__ void shuffle_missing_lane_kernel(int *x) {
    x[threadIdx.x] = __shfl_xor_sync(0xffffffffu, (int)threadIdx.x, 1);
}

__global__ void shuffle_divergent_kernel(int *x) {
    if (threadIdx.x % 2)
        x[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1, 1);
    else
        x[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 2, 1);
}

__global__ void out_of_bounds_kernel(float *x, int n) {
    if (threadIdx.x == 0) x[n] = 1.0f;
}

__global__ void far_out_of_bounds_kernel(float *x, int n) {
    if (threadIdx.x == 0) x[n + 1024] = 1.0f;
}

// Races, for the race checker (test_emu_racecheck): a block reduction whose partials are overwritten by the
// next reduction while other warps still read them (the second barrier missing), in static shared memory...
__global__ void shared_missing_barrier_kernel(float *out) {
    __shared__ float partial[32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    if (lane == 0) partial[warp] = (float)warp;
    __syncthreads();
    float first = lane < warps ? partial[lane] : 0.0f;
    if (lane == 0) partial[warp] = first + 1.0f; // the next reduction's partials, without a barrier between
    __syncthreads();
    out[threadIdx.x] = first + partial[0];
}

// The same bug as test_emu schedule shows it in results: each warp sums the warps' partials (0 + 1 + 2 + 3),
// then overwrites its own with the next reduction's value before the barrier that should come first. Run
// round-robin, every warp reads before any writes (they take turns at each shuffle); a warp that runs ahead
// overwrites a partial another has yet to read.
__global__ void unclosed_reduction_kernel(float *sums) {
    __shared__ float partial[32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    if (lane == 0) partial[warp] = (float)warp;
    __syncthreads();
    float v = lane < warps ? partial[lane] : 0.0f;
    for (int k = 16; k > 0; k >>= 1) v += __shfl_xor_sync(0xffffffffu, v, k);
    if (lane == 0) partial[warp] = 100.0f;
    __syncthreads();
    if (lane == 0) sums[warp] = v;
}

// ... and in dynamic shared memory (reverse_kernel without its barrier)
__global__ void dynamic_missing_barrier_kernel(float *x) {
    float *tile = (float *)emu::dynamic_shared_memory();
    tile[threadIdx.x] = x[threadIdx.x];
    x[threadIdx.x] = tile[blockDim.x - 1 - threadIdx.x];
}

// A max by plain read-compare-write from every block (atomicMax replaced): blocks race on *m.
__global__ void plain_max_kernel(float *m, const float *x) {
    const float v = x[blockIdx.x * blockDim.x + threadIdx.x];
    if (threadIdx.x == 0 && *m < v) *m = v;
}

// One thread's atomic against another thread's plain read of the same word, no barrier between.
__global__ void atomic_and_plain_kernel(int *x) {
    if (threadIdx.x == 0) atomicAdd(&x[0], 1);
    if (threadIdx.x == 1) x[1] = x[0];
}

// Block 1 reads what block 0 writes in the same launch.
__global__ void cross_block_kernel(float *x) {
    if (blockIdx.x == 0 && threadIdx.x == 0) x[0] = 1.0f;
    if (blockIdx.x == 1 && threadIdx.x == 0) x[1] = x[0];
}

// No race, for the race checker to accept: adjacent bytes of one word written by different threads (FP8
// codes), each lane's shared write ordered before other lanes' reads by a full __syncwarp, and atomics from
// every block on one word. out: blockDim.x bytes; sums: blockDim.x floats.
__global__ void ordered_accesses_kernel(uint8_t *out, float *sums, int *count) {
    __shared__ float lanes[32];
    const int lane = threadIdx.x % 32;
    out[blockIdx.x * blockDim.x + threadIdx.x] = (uint8_t)threadIdx.x;
    if (threadIdx.x < 32) {
        lanes[lane] = (float)lane;
        __syncwarp();
        sums[blockIdx.x * blockDim.x + threadIdx.x] = lanes[(lane + 1) % 32];
    }
    atomicAdd(count, 1);
}

// ---------------------------------------------------------------------------------------------------------
// Helpers

static float *device_floats(const std::vector<float> &host) {
    float *d = NULL;
    cuda_check(cudaMalloc((void **)&d, host.size() * sizeof(float)));
    cuda_check(cudaMemcpy(d, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
    return d;
}

static std::vector<float> host_floats(const float *d, size_t n) {
    std::vector<float> h(n);
    cuda_check(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
}

template <auto kernel, typename... Args> static cudaError_t try_launch(LaunchShape shape, Args... args) {
    return launch_with(kernel, shape, std::index_sequence_for<Args...>(), args...);
}

// ---------------------------------------------------------------------------------------------------------
// Semantics

static void test_warp_ops(void) {
    int *d = NULL;
    cuda_check(cudaMalloc((void **)&d, 64 * 8 * sizeof(int)));
    launch<warp_ops_kernel>({1, 64, 0, 0}, d);
    std::vector<int> h(64 * 8);
    cuda_check(cudaMemcpy(h.data(), d, h.size() * sizeof(int), cudaMemcpyDeviceToHost));
    int ballot = 0;
    for (int l = 0; l < 32; l++) ballot |= (l % 3 == 0) << l;
    int bad = 0;
    for (int t = 0; t < 64; t++) {
        const int lane = t % 32, *o = &h[t * 8];
        const int up = lane % 8 >= 2 ? (lane - 2) * 10 : lane * 10,
                  down = lane % 16 + 3 < 16 ? (lane + 3) * 10 : lane * 10;
        const int halves = lane < 16 ? lane ^ 1 : lane ^ 2;
        bad += o[0] != (lane + 3) % 32 * 10 || o[1] != (lane ^ 5) * 10 || o[2] != up || o[3] != down ||
               o[4] != 496 || o[5] != ballot || o[6] != 3 || o[7] != halves;
    }
    expect(bad == 0, "warp shuffles, reductions and votes as CUDA defines them (%d threads wrong)", bad);
    cuda_check(cudaFree(d));
}

static void test_block_sum(void) {
    const int blocks = 37, threads = 256;
    std::vector<float> in(blocks * threads);
    for (size_t i = 0; i < in.size(); i++) in[i] = (float)(i % 7) - 3.0f; // small integers: exact sums
    float *d_in = device_floats(in), *d_out = NULL;
    cuda_check(cudaMalloc((void **)&d_out, blocks * sizeof(float)));
    launch<block_sum_kernel>({blocks, threads, 0, 0}, d_out, d_in);
    std::vector<float> out = host_floats(d_out, blocks);
    int bad = 0;
    for (int b = 0; b < blocks; b++) {
        float sum = 0;
        for (int t = 0; t < threads; t++) sum += in[b * threads + t];
        bad += out[b] != sum;
    }
    expect(bad == 0, "a shared-memory reduction with barriers in %d blocks (%d wrong)", blocks, bad);
    cuda_check(cudaFree(d_in));
    cuda_check(cudaFree(d_out));
}

static void test_atomics(void) {
    unsigned long long *d = NULL, h = 0;
    cuda_check(cudaMalloc((void **)&d, sizeof(h)));
    cuda_check(cudaMemset(d, 0, sizeof(h)));
    launch<count_kernel>({dim3(64, 8), dim3(32, 4), 0, 0}, d);
    cuda_check(cudaMemcpy(&h, d, sizeof(h), cudaMemcpyDeviceToHost));
    expect(h == 64 * 8 * 32 * 4, "atomicAdd from 512 blocks (on several host threads) counts %llu of %d", h,
           64 * 8 * 32 * 4);
    cuda_check(cudaFree(d));
}

// Under the race checker (test_emu_racecheck) also: none of these is a race.
static void test_ordered_accesses(void) {
    const int blocks = 8, threads = 64;
    uint8_t *bytes = NULL;
    float *sums = NULL;
    int *count = NULL;
    cuda_check(cudaMalloc((void **)&bytes, blocks * threads));
    cuda_check(cudaMalloc((void **)&sums, blocks * threads * sizeof(float)));
    cuda_check(cudaMalloc((void **)&count, sizeof(int)));
    cuda_check(cudaMemset(count, 0, sizeof(int)));
    launch<ordered_accesses_kernel>({blocks, threads, 0, 0}, bytes, sums, count);
    std::vector<uint8_t> b(blocks * threads);
    std::vector<float> f(blocks * threads);
    int c = 0;
    cuda_check(cudaMemcpy(b.data(), bytes, b.size(), cudaMemcpyDeviceToHost));
    cuda_check(cudaMemcpy(f.data(), sums, f.size() * sizeof(float), cudaMemcpyDeviceToHost));
    cuda_check(cudaMemcpy(&c, count, sizeof(int), cudaMemcpyDeviceToHost));
    int bad = c != blocks * threads;
    for (int i = 0; i < blocks * threads; i++) {
        bad += b[i] != (uint8_t)(i % threads);
        if (i % threads < 32) bad += f[i] != (float)((i % threads + 1) % 32);
    }
    expect(bad == 0,
           "bytes of one word from several threads, a __syncwarp-ordered exchange, atomics (%d wrong)", bad);
    cuda_check(cudaFree(bytes));
    cuda_check(cudaFree(sums));
    cuda_check(cudaFree(count));
}

static void test_launch_limits(void) {
    float *d = NULL;
    cuda_check(cudaMalloc((void **)&d, 1024 * sizeof(float)));
    expect(try_launch<add_value_kernel>({1, 1025, 0, 0}, d, 1.0f, 1) == cudaErrorInvalidConfiguration,
           "1025 threads per block refused");
    expect(try_launch<add_value_kernel>({1, dim3(1, 1, 65), 0, 0}, d, 1.0f, 1) ==
               cudaErrorInvalidConfiguration,
           "a block z dimension of 65 refused");
    expect(try_launch<add_value_kernel>({dim3(1, 65536), 1, 0, 0}, d, 1.0f, 1) ==
               cudaErrorInvalidConfiguration,
           "a grid y dimension of 65536 refused");
    expect(try_launch<add_value_kernel>({0, 1, 0, 0}, d, 1.0f, 1) == cudaErrorInvalidConfiguration,
           "an empty grid refused");
    expect(try_launch<reverse_kernel>({1, 256, 64 * 1024, 0}, d) == cudaErrorInvalidValue,
           "64 KiB of dynamic shared memory refused without cudaFuncSetAttribute");
    cudaGetLastError();
    cuda_check(cudaFuncSetAttribute(reverse_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024));
    std::vector<float> x(256);
    for (int i = 0; i < 256; i++) x[i] = (float)i;
    cuda_check(cudaMemcpy(d, x.data(), 256 * sizeof(float), cudaMemcpyHostToDevice));
    expect(try_launch<reverse_kernel>({1, 256, 64 * 1024, 0}, d) == cudaSuccess,
           "64 KiB of dynamic shared memory after cudaFuncSetAttribute");
    std::vector<float> r = host_floats(d, 256);
    expect(r[0] == 255.0f && r[255] == 0.0f, "dynamic shared memory holds the block's values (%g %g)", r[0],
           r[255]);
    expect(cudaFuncSetAttribute(reverse_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 300 * 1024) ==
               cudaErrorInvalidValue,
           "more dynamic shared memory than Hopper's 227 KiB refused");
    cuda_check(cudaFree(d));
}

static void test_copies(void) {
    float *d = NULL, host[4] = {1, 2, 3, 4};
    cuda_check(cudaMalloc((void **)&d, 4 * sizeof(float)));
    expect(cudaMemcpy(host, d, sizeof(host), cudaMemcpyHostToDevice) == cudaErrorInvalidValue,
           "cudaMemcpyHostToDevice with the device pointer as source refused");
    expect(cudaMemcpy(d, host, 8 * sizeof(float), cudaMemcpyHostToDevice) == cudaErrorInvalidValue,
           "a copy past the end of the allocation refused");
    expect(cudaMemset(host, 0, sizeof(host)) == cudaErrorInvalidValue, "cudaMemset of host memory refused");
    cudaGetLastError();
    // pinned memory is read when the copy runs; pageable memory when the call is made (CUDA stages it)
    float *pinned = NULL;
    cuda_check(cudaMallocHost((void **)&pinned, 4 * sizeof(float)));
    cudaStream_t s;
    cuda_check(cudaStreamCreate(&s));
    pinned[0] = 1.0f;
    cuda_check(cudaMemcpyAsync(d, pinned, sizeof(float), cudaMemcpyHostToDevice, s));
    pinned[0] = 2.0f; // a race on a GPU: the emulation makes the copy see the later value
    float pageable = 5.0f;
    cuda_check(cudaMemcpyAsync(d + 1, &pageable, sizeof(float), cudaMemcpyHostToDevice, s));
    pageable = 6.0f;
    cuda_check(cudaStreamSynchronize(s));
    std::vector<float> got = host_floats(d, 2);
    expect(got[0] == 2.0f && got[1] == 5.0f,
           "an asynchronous copy reads pinned memory when it runs (%g) and pageable memory when issued (%g)",
           got[0], got[1]);
    cuda_check(cudaStreamDestroy(s));
    cuda_check(cudaFreeHost(pinned));
    cuda_check(cudaFree(d));
}

// The rest of CUDA's capture rules (cudaStreamBeginCapture, cudaStreamEndCapture, cudaStreamWaitEvent and the
// stream-capture error codes of the runtime API), each broken once after a capture that keeps it:
// work on a stream that has not joined the capture is not captured (it runs now, once, and no replay repeats
// it); the legacy stream's work would synchronise with the capture (cudaErrorStreamCaptureImplicit); a
// capturing stream cannot be queried or synchronised, nor the device (cudaErrorStreamCaptureUnsupported), nor
// an event recorded in the capture (cudaErrorCapturedEvent); only the origin stream ends the capture
// (cudaErrorStreamCaptureUnmatched); two captures cannot merge (cudaErrorStreamCaptureMerge).
static void test_capture_rules(cudaStream_t s, cudaStream_t side, float *d, int n) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    cudaEvent_t in_capture, other;
    cuda_check(cudaEventCreateWithFlags(&in_capture, cudaEventDisableTiming));
    cuda_check(cudaEventCreateWithFlags(&other, cudaEventDisableTiming));
    cuda_check(cudaMemset(d, 0, n * sizeof(float)));
    cuda_check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    launch<add_value_kernel>({1, 1, 0, s}, d, 1.0f, 1);
    launch<add_value_kernel>({1, 1, 0, side}, d + 1, 1.0f, 1); // side never waited on the capture
    cuda_check(cudaStreamEndCapture(s, &graph));
    cuda_check(cudaGraphInstantiate(&exec, graph, 0));
    cuda_check(cudaGraphDestroy(graph));
    cuda_check(cudaGraphLaunch(exec, s));
    cuda_check(cudaGraphLaunch(exec, s));
    cuda_check(cudaGraphExecDestroy(exec));
    std::vector<float> got = host_floats(d, 2);
    expect(
        got[0] == 2.0f && got[1] == 1.0f,
        "work on a stream that never joined the capture is not in the graph: it ran once (%g), the captured "
        "work once a replay (%g)",
        got[1], got[0]);

    cuda_check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    expect(cudaMemsetAsync(d, 0, sizeof(float), 0) == cudaErrorStreamCaptureImplicit,
           "work on the legacy stream during a capture refused (cudaErrorStreamCaptureImplicit)");
    expect(cudaStreamEndCapture(s, &graph) == cudaErrorStreamCaptureInvalidated,
           "and the capture invalidated");
    cudaGetLastError();

    cuda_check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    expect(cudaStreamQuery(s) == cudaErrorStreamCaptureUnsupported,
           "cudaStreamQuery of a capturing stream refused");
    expect(cudaStreamSynchronize(s) == cudaErrorStreamCaptureUnsupported,
           "cudaStreamSynchronize of a capturing stream refused");
    expect(cudaStreamEndCapture(s, &graph) == cudaErrorStreamCaptureInvalidated,
           "and the capture invalidated");
    cuda_check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    expect(cudaDeviceSynchronize() == cudaErrorStreamCaptureUnsupported,
           "cudaDeviceSynchronize during a capture refused");
    expect(cudaStreamEndCapture(s, &graph) == cudaErrorStreamCaptureInvalidated,
           "and the capture invalidated");
    cudaGetLastError();

    cuda_check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    cuda_check(cudaEventRecord(in_capture, s));
    expect(cudaEventQuery(in_capture) == cudaErrorCapturedEvent,
           "cudaEventQuery of an event recorded in the capture refused (cudaErrorCapturedEvent)");
    expect(cudaEventSynchronize(in_capture) == cudaErrorCapturedEvent,
           "cudaEventSynchronize of an event recorded in the capture refused");
    cuda_check(cudaStreamWaitEvent(side, in_capture, 0)); // side joins
    expect(
        cudaStreamEndCapture(side, &graph) == cudaErrorStreamCaptureUnmatched,
        "cudaStreamEndCapture on a joined stream, not the origin, refused (cudaErrorStreamCaptureUnmatched)");
    cuda_check(cudaEventRecord(other, side));
    cuda_check(cudaStreamWaitEvent(s, other, 0));
    cuda_check(cudaStreamEndCapture(s, &graph));
    cuda_check(cudaGraphDestroy(graph));
    cudaGetLastError();

    cuda_check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    cuda_check(cudaStreamBeginCapture(side, cudaStreamCaptureModeThreadLocal));
    cuda_check(cudaEventRecord(other, side));
    expect(cudaStreamWaitEvent(s, other, 0) == cudaErrorStreamCaptureMerge,
           "a capture waiting on another capture's event refused (cudaErrorStreamCaptureMerge)");
    cuda_check(cudaStreamEndCapture(side, &graph));
    cuda_check(cudaGraphDestroy(graph));
    cudaStreamEndCapture(s, &graph);
    if (graph) cuda_check(cudaGraphDestroy(graph));
    cudaGetLastError();
    cuda_check(cudaEventDestroy(in_capture));
    cuda_check(cudaEventDestroy(other));
}

static void test_graphs(void) {
    const int n = 64;
    float *d = device_floats(std::vector<float>(n, 0.0f));
    cudaStream_t s, side;
    cuda_check(cudaStreamCreate(&s));
    cuda_check(cudaStreamCreate(&side));
    cudaEvent_t fork, join, outside;
    cuda_check(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    cuda_check(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    cuda_check(cudaEventCreateWithFlags(&outside, cudaEventDisableTiming));
    float value = 1.0f;
    cudaGraph_t graph;
    cuda_check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    launch<add_value_kernel>({1, n, 0, s}, d, value, n);
    cuda_check(cudaEventRecord(fork, s)); // the side stream joins the capture
    cuda_check(cudaStreamWaitEvent(side, fork, 0));
    launch<add_value_kernel>({1, n, 0, side}, d + n / 2, 10.0f, n / 2);
    cuda_check(cudaEventRecord(join, side));
    cuda_check(cudaStreamWaitEvent(s, join, 0));
    cuda_check(cudaStreamEndCapture(s, &graph));
    value = 100.0f; // the graph keeps the arguments of the capture
    cudaGraphExec_t exec;
    cuda_check(cudaGraphInstantiate(&exec, graph, 0));
    cuda_check(cudaGraphDestroy(graph));
    std::vector<float> before = host_floats(d, n);
    cuda_check(cudaGraphLaunch(exec, s));
    cuda_check(cudaGraphLaunch(exec, s));
    std::vector<float> after = host_floats(d, n);
    expect(before[0] == 0.0f && after[0] == 2.0f && after[n - 1] == 22.0f,
           "capture runs nothing; each replay runs the captured launches with their arguments (%g %g %g)",
           before[0], after[0], after[n - 1]);
    cuda_check(cudaGraphExecDestroy(exec));

    cuda_check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    void *p = NULL;
    expect(cudaMalloc(&p, 16) == cudaErrorStreamCaptureUnsupported, "cudaMalloc during capture refused");
    expect(cudaStreamEndCapture(s, &graph) == cudaErrorStreamCaptureInvalidated,
           "and the capture invalidated");
    cuda_check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    float h = 0;
    expect(cudaMemcpy(&h, d, sizeof(h), cudaMemcpyDeviceToHost) == cudaErrorStreamCaptureUnsupported,
           "a synchronous host read during capture refused");
    expect(cudaStreamEndCapture(s, &graph) == cudaErrorStreamCaptureInvalidated,
           "and the capture invalidated");
    cuda_check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    expect(cudaMemcpyAsync(&h, d, sizeof(h), cudaMemcpyDeviceToHost, s) == cudaErrorStreamCaptureUnsupported,
           "an asynchronous copy to pageable memory during capture refused");
    expect(cudaStreamEndCapture(s, &graph) == cudaErrorStreamCaptureInvalidated,
           "and the capture invalidated");
    cuda_check(cudaEventRecord(outside, side));
    cuda_check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    expect(cudaStreamWaitEvent(s, outside, 0) == cudaErrorStreamCaptureIsolation,
           "a wait in the capture on an event recorded outside it refused");
    cudaStreamEndCapture(s, &graph);
    cuda_check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    cuda_check(cudaEventRecord(fork, s));
    cuda_check(cudaStreamWaitEvent(side, fork, 0));
    launch<add_value_kernel>({1, n, 0, side}, d, 1.0f, n);
    expect(cudaStreamEndCapture(s, &graph) == cudaErrorStreamCaptureUnjoined,
           "a capture whose forked stream never joins back refused");
    expect(cudaStreamWaitEvent(s, fork, 0) == cudaErrorCapturedEvent,
           "a wait outside on an event last recorded inside a capture refused");
    cudaGetLastError();
    test_capture_rules(s, side, d, n);
    cuda_check(cudaStreamDestroy(side));
    cuda_check(cudaStreamDestroy(s));
    cuda_check(cudaEventDestroy(fork));
    cuda_check(cudaEventDestroy(join));
    cuda_check(cudaEventDestroy(outside));
    cuda_check(cudaFree(d));
}

// ---------------------------------------------------------------------------------------------------------
// cuBLASLt

// A small deterministic pseudo-random value in [-1, 1).
static float noise(int i, int seed) {
    unsigned h = (unsigned)i * 2654435761u ^ (unsigned)seed * 40503u;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    return (float)(h & 0xFFFF) / 32768.0f - 1.0f;
}

struct GemmCase {
    cudaDataType_t a_type, b_type, d_type;
    int trans_a, trans_b, bias, accumulate;
    int a_mode, b_mode; // block scaling (cublasLtMatmulMatrixScale_t), FP8 TN only
};

// A block-scaled operand's cast scale for (row, k): it varies from tile to tile (over five binades and
// between rows or row blocks), so that a factor read from the wrong place shows.
static float block_cast_scale(int mode, int row, int k) {
    if (mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0) // E8M0: powers of two only
        return ldexpf(1.0f, (row * 7 + k / FP8_MX_BLOCK * 3) % 9 - 4);
    int t = k / FP8_BLOCKWISE_TILE, r = mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F ? row : row / 128;
    return ldexpf(1.0f + 0.25f * (float)((r + 2 * t) % 3), (r * 7 + t * 3) % 5);
}

// Its factors, 1/scale, in fp8_scaling.h's layout of the operand (rows, K).
static std::vector<uint8_t> block_factors(int mode, int rows, int K) {
    if (mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0) {
        std::vector<uint8_t> codes(fp8_mx_factors(rows, K), 0);
        for (int r = 0; r < rows; r++)
            for (int t = 0; t < K / FP8_MX_BLOCK; t++)
                codes[fp8_mx_factor_index(K, r, t)] =
                    fp8_e8m0_from_pow2(1.0f / block_cast_scale(mode, r, t * FP8_MX_BLOCK));
        return codes;
    }
    bool vec = mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    std::vector<float> f(vec ? fp8_tile_factors(rows, K) : fp8_square_factors(rows, K), 0.0f);
    for (int r = 0; r < rows; r++)
        for (int t = 0; t < K / FP8_BLOCKWISE_TILE; t++)
            f[vec ? fp8_tile_factor_index(rows, r, t) : fp8_square_factor_index(K, r, t)] =
                1.0f / block_cast_scale(mode, r, t * FP8_BLOCKWISE_TILE);
    std::vector<uint8_t> bytes(f.size() * sizeof(float));
    memcpy(bytes.data(), f.data(), bytes.size());
    return bytes;
}

// The trainer's gemm() (gpu/gemm.cuh: row-major D (M,N) = op(A) op(B) [+ bias] [+ D]) on small values,
// against a double-precision product of the same (quantized) values. Bound: an FP32 sum of K products
// exact in FP32 (BF16 x BF16, FP8 x FP8 are) is within K * 2^-24 * sum |a b| of the exact one; the
// result is then rounded once to D's type (2^-9 relative for BF16), after scaling by the inverse scales.
// Block-scaled: 128-element FP32 block sums (each within 128 u of sum |a b| over the block), each times a
// factor product (two roundings) added to an FP32 accumulator (K/128 more): (128 + K/128 + 2) u <= 2 K u
// for K >= 128, the same bound. FP8 on Hopper (compute capability 9) also passes through the tensor cores'
// partial sum, truncated to 13 fraction bits after each 32 products and promoted every 128 (fp8_scaling.h):
// at most 4 truncations per promotion, each by less than 2^-13 of the partial, which is at most sum |a b|
// over its 128 products: 4 * 2^-13 * sum |a b| more.
static void check_gemm(GemmContext *ctx, GemmCase c, int M, int N, int K, bool hopper) {
    const bool fp8 = is_fp8_type(c.a_type);
    const size_t a_n = (size_t)M * K, b_n = (size_t)K * N;
    std::vector<uint8_t> a_bytes(a_n * 2), b_bytes(b_n * 2);
    std::vector<double> a_val(a_n), b_val(b_n), bias_val(N);
    const float a_scale = 8.0f, b_scale = 32.0f; // the cast's scales: the GEMM divides them out
    auto fill = [&](std::vector<uint8_t> &bytes, std::vector<double> &val, cudaDataType_t t,
                    float tensor_scale, int seed, int mode) {
        for (size_t i = 0; i < val.size(); i++) {
            float x = noise((int)i, seed);
            float scale = mode ? block_cast_scale(mode, (int)(i / K), (int)(i % K)) : tensor_scale;
            if (t == CUDA_R_16BF) {
                bf16 h = __float2bfloat16_rn(x);
                memcpy(&bytes[2 * i], &h, 2);
                val[i] = __bfloat162float(h);
            } else {
                Fp8Format f = t == CUDA_R_8F_E4M3 ? FP8_E4M3 : FP8_E5M2;
                bytes[i] = fp8_quantize(x, scale, f);
                val[i] = fp8_to_float(bytes[i], f) / scale;
            }
        }
    };
    fill(a_bytes, a_val, c.a_type, a_scale, 1, c.a_mode);
    fill(b_bytes, b_val, c.b_type, b_scale, 2, c.b_mode);
    std::vector<uint16_t> bias_bits(N);
    for (int j = 0; j < N; j++) {
        bf16 h = __float2bfloat16_rn(noise(j, 3));
        memcpy(&bias_bits[j], &h, 2);
        bias_val[j] = __bfloat162float(h);
    }
    const size_t d_bytes = (size_t)M * N * (c.d_type == CUDA_R_32F ? 4 : 2);
    std::vector<float> d_init(M * N);
    for (int i = 0; i < M * N; i++) d_init[i] = c.accumulate ? noise(i, 4) : 0.0f;
    char *mem = NULL;
    cuda_check(cudaMalloc((void **)&mem, 1 << 20));
    char *dA = mem, *dB = mem + 65536, *dD = mem + 131072, *dbias = mem + 393216;
    float *scales = (float *)(mem + 400000);
    cuda_check(cudaMemcpy(dA, a_bytes.data(), a_n * (fp8 ? 1 : 2), cudaMemcpyHostToDevice));
    cuda_check(cudaMemcpy(dB, b_bytes.data(), b_n * (fp8 ? 1 : 2), cudaMemcpyHostToDevice));
    cuda_check(cudaMemcpy(dbias, bias_bits.data(), N * 2, cudaMemcpyHostToDevice));
    float descales[2] = {1.0f / a_scale, 1.0f / b_scale};
    cuda_check(cudaMemcpy(scales, descales, sizeof(descales), cudaMemcpyHostToDevice));
    float *a_factors = scales + 4, *b_factors = scales + 4 + 4096;
    if (c.a_mode) {
        std::vector<uint8_t> fa = block_factors(c.a_mode, M, K), fb = block_factors(c.b_mode, N, K);
        cuda_check(cudaMemcpy(a_factors, fa.data(), fa.size(), cudaMemcpyHostToDevice));
        cuda_check(cudaMemcpy(b_factors, fb.data(), fb.size(), cudaMemcpyHostToDevice));
    }
    if (c.d_type == CUDA_R_32F) cuda_check(cudaMemcpy(dD, d_init.data(), d_bytes, cudaMemcpyHostToDevice));
    GemmOperand A = {dA, c.a_type,
                     c.a_mode ? a_factors
                     : fp8    ? &scales[0]
                              : NULL,
                     c.a_mode},
                B = {dB, c.b_type,
                     c.b_mode ? b_factors
                     : fp8    ? &scales[1]
                              : NULL,
                     c.b_mode};
    gemm(ctx,
         {.D = dD,
          .d_type = c.d_type,
          .A = A,
          .trans_a = c.trans_a,
          .B = B,
          .trans_b = c.trans_b,
          .M = M,
          .N = N,
          .K = K,
          .epilogue = gemm_bias(c.bias ? (const bf16 *)dbias : NULL),
          .accumulate = c.accumulate},
         0);
    std::vector<float> d(M * N);
    if (c.d_type == CUDA_R_32F) {
        d = host_floats((float *)dD, (size_t)M * N);
    } else {
        std::vector<bf16> h(M * N);
        cuda_check(cudaMemcpy(h.data(), dD, d_bytes, cudaMemcpyDeviceToHost));
        for (int i = 0; i < M * N; i++) d[i] = __bfloat162float(h[i]);
    }
    double worst = 0.0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double exact = 0.0, magnitude = 0.0;
            for (int k = 0; k < K; k++) {
                double a = c.trans_a ? a_val[(size_t)k * M + i] : a_val[(size_t)i * K + k];
                double b = c.trans_b ? b_val[(size_t)j * K + k] : b_val[(size_t)k * N + j];
                exact += a * b;
                magnitude += fabs(a * b);
            }
            if (c.bias) exact += bias_val[j];
            if (c.accumulate) exact += d_init[i * N + j];
            double bound = 2 * K * 0x1p-24 * magnitude + (fp8 && hopper ? 4 * 0x1p-13 * magnitude : 0.0) +
                           (c.d_type == CUDA_R_32F ? 0x1p-23 : 0x1p-8) * fabs(exact) + 1e-30;
            worst = fmax(worst, fabs(d[i * N + j] - exact) / bound);
        }
    expect(
        worst <= 1.0,
        "cuBLASLt reference %s x %s -> %s (trans_a %d, trans_b %d%s%s, scale modes %d x %d) within its bound "
        "(%.2f of it)",
        gemm_type_name(c.a_type), gemm_type_name(c.b_type), gemm_type_name(c.d_type), c.trans_a, c.trans_b,
        c.bias ? ", bias" : "", c.accumulate ? ", accumulate" : "", c.a_mode, c.b_mode, worst);
    cuda_check(cudaFree(mem));
}

// Hopper's FP8 accumulation as fp8_scaling.h documents it (truncation to 13 fraction bits after every 32
// products, promotion to FP32 every 128 unless fast accumulation), on products chosen so that the result
// shows each rule: K = 1024; product 0 is 1 (1 x 1), then in every MMA of 32 products the first 16 (the
// first MMA: 15 more) are 2^-18 (2^-9 x 2^-9, E4M3's smallest subnormal) and the rest 0. An MMA's 16
// products add 2^-14, below the 2^-13 resolution of a partial sum near 1:
//   fast accumulation: the partial sum stays 1 through all 32 MMAs: exactly 1;
//   promoted: the first 128 products give 1; each later 128 start from 0, keep their 4 x 2^-14 = 2^-12
//     exactly and add it in FP32: 1 + 7 x 2^-12;
//   FP32 sums (BF16, or FP8 on the emulated B200): the exact 1 + 511 x 2^-18.
static void test_tensor_core_accumulation(void) {
    cudaDeviceProp props;
    cuda_check(cudaGetDeviceProperties(&props, 0));
    const bool hopper = props.major == 9;
    const int M = 16, N = 16, K = 1024;
    std::vector<uint8_t> a(M * K), b(N * K);
    for (int r = 0; r < M; r++)
        for (int k = 0; k < K; k++) {
            uint8_t code = k == 0 ? fp8_from_float(1.0f, FP8_E4M3) : k % 32 < 16 ? 0x01 : 0x00;
            a[r * K + k] = code; // A (M,K) and B (N,K), row-major: op(B) = B^T
            b[r * K + k] = code;
        }
    char *mem = NULL, *workspace = NULL;
    cuda_check(cudaMalloc((void **)&mem, 1 << 16));
    cuda_check(cudaMalloc((void **)&workspace, 1 << 20));
    char *dA = mem, *dB = mem + M * K;
    float *dD = (float *)(mem + (M + N) * K), *one = dD + M * N;
    const float host_one = 1.0f;
    cuda_check(cudaMemcpy(dA, a.data(), a.size(), cudaMemcpyHostToDevice));
    cuda_check(cudaMemcpy(dB, b.data(), b.size(), cudaMemcpyHostToDevice));
    cuda_check(cudaMemcpy(one, &host_one, sizeof(float), cudaMemcpyHostToDevice));
    GemmContext ctx;
    gemm_init(&ctx, workspace, 1 << 20);
    const GemmOperand A = {dA, CUDA_R_8F_E4M3, one, 0}, B = {dB, CUDA_R_8F_E4M3, one, 0};
    const float exact = 1.0f + 511.0f * 0x1p-18f;
    for (int fast = 0; fast <= 1; fast++) {
        gemm(&ctx,
             {.D = dD,
              .d_type = CUDA_R_32F,
              .A = A,
              .B = B,
              .trans_b = 1,
              .M = M,
              .N = N,
              .K = K,
              .fast_accum = fast},
             0);
        std::vector<float> d = host_floats(dD, M * N);
        const float want = !hopper ? exact : fast ? 1.0f : 1.0f + 7.0f * 0x1p-12f;
        int bad = 0;
        for (float v : d) bad += v != want;
        expect(bad == 0, "FP8 GEMM, K = 1024, %s accumulation on %s: %.9g (want %.9g, exact %.9g)",
               fast ? "fast" : "promoted", hopper ? "Hopper" : "Blackwell", d[0], want, exact);
    }
    gemm_destroy(&ctx);
    cuda_check(cudaFree(workspace));
    cuda_check(cudaFree(mem));
}

// One raw cuBLASLt matmul (column-major, D = op(A) op(B), m = n = k = 32) with the given types, transposes,
// bias, pointers and workspace: the status of the heuristic if it fails, else of the matmul.
struct RawGemm {
    cudaDataType_t a_type = CUDA_R_8F_E4M3, b_type = CUDA_R_8F_E4M3, d_type = CUDA_R_16BF;
    cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
    int64_t ld = 32;
    size_t a_offset = 0, workspace = 1 << 16, max_workspace = 1 << 16;
    const void *bias_at_heuristic = NULL, *bias_at_matmul = NULL;
    int bias_type = -1;
    uint32_t alignment = 16;
    uint64_t k = 32;                // m = n = 32
    int32_t a_mode = 0, b_mode = 0; // block scaling
    int8_t fast_accum = 0;
    size_t scale_offset = 131072; // of both scale tensors in mem
};

// A raw matmul's descriptor (CUBLAS_COMPUTE_32F) with its transposes.
static cublasLtMatmulDesc_t raw_desc(cublasOperation_t trans_a, cublasOperation_t trans_b) {
    cublasLtMatmulDesc_t desc;
    cublas_check(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublas_check(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)));
    cublas_check(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)));
    return desc;
}

// The rest of a raw matmul: a preference of max_workspace and the minimum alignment of A, B, C and D, the
// heuristic (C's layout D's), then matmul(algo) (which sets what the matmul's descriptor holds and calls
// cublasLtMatmul); the heuristic's status if it fails, else the matmul's. Destroys the descriptor and
// layouts.
template <typename Matmul>
static cublasStatus_t raw_run(cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                              cublasLtMatrixLayout_t d, uint64_t max_workspace, uint32_t alignment,
                              Matmul matmul) {
    cublasLtHandle_t handle;
    cublas_check(cublasLtCreate(&handle));
    cublasLtMatmulPreference_t pref;
    cublas_check(cublasLtMatmulPreferenceCreate(&pref));
    cublas_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                      &max_workspace, sizeof(max_workspace)));
    const cublasLtMatmulPreferenceAttributes_t aligns[] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (auto attr : aligns)
        cublas_check(cublasLtMatmulPreferenceSetAttribute(pref, attr, &alignment, sizeof(alignment)));
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    cublasStatus_t status =
        cublasLtMatmulAlgoGetHeuristic(handle, desc, a, b, d, d, pref, 1, &result, &found);
    if (status == CUBLAS_STATUS_SUCCESS) status = matmul(handle, &result.algo);
    cuda_check(cudaDeviceSynchronize());
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(a);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(d);
    cublasLtMatmulDescDestroy(desc);
    cublasLtDestroy(handle);
    return status;
}

static cublasStatus_t raw_gemm(const RawGemm &r, char *mem) {
    cublasLtMatmulDesc_t desc = raw_desc(r.trans_a, r.trans_b);
    if (r.bias_at_heuristic) {
        cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
        cublas_check(
            cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
        cublas_check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                    &r.bias_at_heuristic, sizeof(void *)));
        if (r.bias_type >= 0)
            cublas_check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                        &r.bias_type, sizeof(r.bias_type)));
    }
    cublasLtMatrixLayout_t a, b, d;
    if (r.a_mode || r.b_mode) {
        const void *scale = mem + r.scale_offset;
        cublas_check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &r.a_mode, 4));
        cublas_check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &r.b_mode, 4));
        cublas_check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scale, 8));
        cublas_check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &scale, 8));
        cublas_check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &r.fast_accum, 1));
    }
    const bool a_t = r.trans_a == CUBLAS_OP_T;
    cublas_check(cublasLtMatrixLayoutCreate(&a, r.a_type, a_t ? r.k : 32, a_t ? 32 : r.k, r.ld));
    cublas_check(cublasLtMatrixLayoutCreate(&b, r.b_type, r.k, 32, r.ld));
    cublas_check(cublasLtMatrixLayoutCreate(&d, r.d_type, 32, 32, 32));
    return raw_run(desc, a, b, d, r.max_workspace, r.alignment,
                   [&](cublasLtHandle_t handle, const cublasLtMatmulAlgo_t *algo) {
                       if (r.bias_at_heuristic)
                           cublas_check(cublasLtMatmulDescSetAttribute(
                               desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &r.bias_at_matmul, sizeof(void *)));
                       const float alpha = 1.0f, beta = 0.0f;
                       return cublasLtMatmul(handle, desc, &alpha, mem + r.a_offset, a, mem + 8192, b, &beta,
                                             mem + 16384, d, mem + 16384, d, algo, mem + 65536, r.workspace,
                                             0);
                   });
}

// Runs fn in a child process: it must exit 1 with a one-line error containing want (gpu/gemm.cuh's
// refusals end the process, as every fail() does). The child refuses before any device work, so the
// emulator's worker threads, which a fork does not copy, are never needed there.
template <typename F> static void expect_refusal(const char *what, const char *want, F fn) {
    int pipe_fds[2];
    if (pipe(pipe_fds) != 0) fail("pipe: %s", strerror(errno));
    fflush(stdout);
    fflush(stderr);
    pid_t child = fork();
    if (child == 0) {
        dup2(pipe_fds[1], 2);
        close(pipe_fds[0]);
        fn();
        _exit(0);
    }
    close(pipe_fds[1]);
    char message[512] = {0};
    size_t length = 0;
    ssize_t got;
    while (length < sizeof message - 1 &&
           (got = read(pipe_fds[0], message + length, sizeof message - 1 - length)) > 0)
        length += (size_t)got;
    close(pipe_fds[0]);
    int status = 0;
    waitpid(child, &status, 0);
    const char *newline = strchr(message, '\n');
    const bool one_line = newline && newline[1] == '\0';
    expect(WIFEXITED(status) && WEXITSTATUS(status) == 1 && one_line && strstr(message, want), "%s: %s", what,
           message);
}

// A GemmContext with a 1 MiB workspace, and 1 MiB of device memory for the operands.
struct GemmSetup {
    GemmContext ctx;
    void *workspace = NULL;
    char *mem = NULL;
    GemmSetup() {
        cuda_check(cudaMalloc(&workspace, 1 << 20));
        cuda_check(cudaMalloc((void **)&mem, 1 << 20));
        gemm_init(&ctx, workspace, 1 << 20);
    }
    ~GemmSetup() {
        gemm_destroy(&ctx);
        cuda_check(cudaFree(mem));
        cuda_check(cudaFree(workspace));
    }
};

// gpu/gemm.cuh's plan cache: one plan per shape, types, scale modes, epilogue and bias and aux alignments
// (the heuristic reads those pointers' alignments and may pick a kernel that needs them), reused across
// calls; the operand combinations it refuses with their own messages, and gemm() with a fused epilogue.
static void test_gemm_plans(void) {
    GemmSetup setup;
    GemmContext &ctx = setup.ctx;
    char *mem = setup.mem;
    const int M = 32, N = 64, K = 48;
    bf16 *a = (bf16 *)mem, *b = (bf16 *)(mem + 65536), *d = (bf16 *)(mem + 131072);
    const bf16 *bias256 = (const bf16 *)(mem + 196608), *bias64 = (const bf16 *)(mem + 196608 + 64),
               *bias256_again = (const bf16 *)(mem + 196608 + 512);
    GemmOperand A = {a, CUDA_R_16BF, NULL, 0}, B = {b, CUDA_R_16BF, NULL, 0};
    // the plan of D (M,N) = A . B^T in BF16 with epilogue e, not accumulated
    auto plan = [&](GemmEpilogue e) {
        return gemm_plan(&ctx, {.D = d,
                                .d_type = CUDA_R_16BF,
                                .A = A,
                                .B = B,
                                .trans_b = 1,
                                .M = M,
                                .N = N,
                                .K = K,
                                .epilogue = e});
    };
    GemmPlan *first = plan(gemm_bias(bias256)), *again = plan(gemm_bias(bias256_again)),
             *other = plan(gemm_bias(bias64));
    expect(first == again && ctx.num_plans == 2 && other != first && other->bias_alignment == 64 &&
               first->bias_alignment == 256,
           "GEMM plans: a bias of the same alignment reuses the plan, a 64-byte aligned one gets its own");
    GemmPlan *no_bias = plan(gemm_bias(NULL));
    GemmPlan *accumulate = gemm_plan(&ctx, {.D = d,
                                            .d_type = CUDA_R_16BF,
                                            .A = A,
                                            .B = B,
                                            .trans_b = 1,
                                            .M = M,
                                            .N = N,
                                            .K = K,
                                            .accumulate = 1});
    expect(no_bias != first && accumulate != no_bias && ctx.num_plans == 4,
           "GEMM plans: with and without a bias, with and without accumulation, are distinct");
    gemm(&ctx,
         {.D = d,
          .d_type = CUDA_R_16BF,
          .A = A,
          .B = B,
          .trans_b = 1,
          .M = M,
          .N = N,
          .K = K,
          .epilogue = gemm_bias(bias64)},
         0);
    cuda_check(cudaDeviceSynchronize());
    expect(ctx.num_plans == 4, "GEMM plans: a call finds its plan instead of making another");
    bf16 *aux256 = (bf16 *)(mem + 327680), *aux64 = (bf16 *)(mem + 327680 + 64),
         *aux256_again = (bf16 *)(mem + 327680 + 4096);
    GemmPlan *gelu = plan(gemm_gelu_bias(bias256, aux256)),
             *gelu_again = plan(gemm_gelu_bias(bias256, aux256_again)),
             *gelu64 = plan(gemm_gelu_bias(bias256, aux64)), *dgelu = plan(gemm_dgelu(aux256));
    expect(gelu != first && gelu == gelu_again && gelu64 != gelu && gelu64->aux_alignment == 64 &&
               gelu->aux_alignment == 256 && dgelu != gelu && ctx.num_plans == 7 && gelu->has_algo,
           "GEMM plans: the epilogue and the aux pointer's alignment (which the heuristic reads) are keys");
    const float *descale = (const float *)(mem + 262144);
    GemmOperand e5m2_a = {a, CUDA_R_8F_E5M2, descale, 0}, e5m2_b = {b, CUDA_R_8F_E5M2, descale, 0},
                e4m3_b = {b, CUDA_R_8F_E4M3, descale, 0};
    expect_refusal("E5M2 x E5M2 refused with its own message", "E5M2 x E5M2", [&] {
        gemm_plan(
            &ctx,
            {.D = d, .d_type = CUDA_R_16BF, .A = e5m2_a, .B = e5m2_b, .trans_b = 1, .M = M, .N = N, .K = K});
    });
    expect_refusal("FP8 x BF16 refused", "needs both operands in FP8", [&] {
        gemm_plan(&ctx,
                  {.D = d, .d_type = CUDA_R_16BF, .A = e5m2_a, .B = B, .trans_b = 1, .M = M, .N = N, .K = K});
    });
    expect_refusal("an FP8 GEMM not in TN form refused", "K-major", [&] {
        gemm_plan(&ctx, {.D = d, .d_type = CUDA_R_16BF, .A = e5m2_a, .B = e4m3_b, .M = M, .N = N, .K = K});
    });
    expect_refusal("gemm() with a fused epilogue refused", "gemm_fused", [&] {
        gemm(&ctx,
             {.D = d,
              .d_type = CUDA_R_16BF,
              .A = A,
              .B = B,
              .trans_b = 1,
              .M = M,
              .N = N,
              .K = K,
              .epilogue = gemm_dgelu(aux256)},
             0);
    });
}

static void test_cublaslt(void) {
    cudaDeviceProp props;
    cuda_check(cudaGetDeviceProperties(&props, 0));
    GemmContext ctx;
    void *workspace = NULL;
    cuda_check(cudaMalloc(&workspace, 1 << 20));
    gemm_init(&ctx, workspace, 1 << 20);
    const GemmCase cases[] = {
        {CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF, 0, 1, 1, 0, 0, 0},
        {CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF, 0, 0, 0, 0, 0, 0},
        {CUDA_R_16BF, CUDA_R_16BF, CUDA_R_32F, 1, 0, 0, 1, 0, 0},
        {CUDA_R_16BF, CUDA_R_16BF, CUDA_R_32F, 1, 1, 0, 0, 0, 0},
        {CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUDA_R_16BF, 0, 1, 1, 0, 0, 0},
        {CUDA_R_8F_E5M2, CUDA_R_8F_E4M3, CUDA_R_16BF, 0, 1, 0, 0, 0, 0},
        {CUDA_R_8F_E5M2, CUDA_R_8F_E4M3, CUDA_R_32F, 0, 1, 0, 1, 0, 0},
        {CUDA_R_8F_E4M3, CUDA_R_8F_E5M2, CUDA_R_32F, 0, 1, 0, 0, 0, 0},
    };
    const bool hopper = props.major == 9;
    for (const GemmCase &c : cases) check_gemm(&ctx, c, 48, 32, 80, hopper);
    // the blockwise recipe's three GEMMs: x (1x128) . W (128x128) + bias, dout (1x128) . W^T (128x128),
    // dout^T (1x128 along the tokens) . x^T (the same), accumulated in FP32
    const int VEC = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F,
              BLK = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    const GemmCase block_cases[] = {
        {CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUDA_R_16BF, 0, 1, 1, 0, VEC, BLK},
        {CUDA_R_8F_E5M2, CUDA_R_8F_E4M3, CUDA_R_16BF, 0, 1, 0, 0, VEC, BLK},
        {CUDA_R_8F_E5M2, CUDA_R_8F_E4M3, CUDA_R_32F, 0, 1, 0, 1, VEC, VEC},
        {CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUDA_R_32F, 0, 1, 0, 0, BLK, VEC},
    };
    // mxfp8's, on a Blackwell (CUDA_EMU_DEVICE=b200): 1x32 E8M0 blocks of every operand
    const int MX = CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0;
    const GemmCase mx_cases[] = {
        {CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUDA_R_16BF, 0, 1, 1, 0, MX, MX},
        {CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUDA_R_32F, 0, 1, 0, 1, MX, MX},
    };
    if (props.major >= 10)
        for (const GemmCase &c : mx_cases) check_gemm(&ctx, c, 200, 136, 224, hopper);
    else
        for (const GemmCase &c : block_cases) check_gemm(&ctx, c, 252, 136, 256, hopper);
    gemm_destroy(&ctx);
    cuda_check(cudaFree(workspace));

    char *mem = NULL;
    cuda_check(cudaMalloc((void **)&mem, 1 << 20));
    RawGemm ok;
    expect(raw_gemm(ok, mem) == CUBLAS_STATUS_SUCCESS, "an FP8 TN matmul runs");
    RawGemm nn = ok;
    nn.trans_a = CUBLAS_OP_N;
    expect(raw_gemm(nn, mem) == CUBLAS_STATUS_NOT_SUPPORTED,
           "an FP8 matmul in NN form refused (TN only on sm_90)");
    RawGemm e5m2 = ok;
    e5m2.a_type = e5m2.b_type = CUDA_R_8F_E5M2;
    expect(raw_gemm(e5m2, mem) == CUBLAS_STATUS_NOT_SUPPORTED, "E5M2 x E5M2 refused");
    RawGemm mixed = ok;
    mixed.b_type = CUDA_R_16BF;
    expect(raw_gemm(mixed, mem) == CUBLAS_STATUS_NOT_SUPPORTED, "FP8 x BF16 refused");
    RawGemm misaligned = ok;
    misaligned.a_offset = 8;
    misaligned.alignment = 8;
    expect(raw_gemm(misaligned, mem) == CUBLAS_STATUS_INVALID_VALUE, "an FP8 operand 8-byte aligned refused");
    RawGemm assumed = ok;
    assumed.a_offset = 16;
    assumed.alignment = 256; // cuBLASLt's default preference
    expect(raw_gemm(assumed, mem) == CUBLAS_STATUS_INVALID_VALUE,
           "a pointer less aligned than the preference promised the heuristic refused");
    RawGemm ld = ok;
    ld.ld = 40; // 40 bytes: not a multiple of 16
    expect(raw_gemm(ld, mem) == CUBLAS_STATUS_NOT_SUPPORTED, "an FP8 leading dimension of 40 bytes refused");
    RawGemm bias = ok;
    bias.bias_at_heuristic = mem + 32768;
    bias.bias_at_matmul = mem + 32768 + 64;
    expect(raw_gemm(bias, mem) == CUBLAS_STATUS_INVALID_VALUE,
           "a bias pointer less aligned than the one the heuristic saw refused");
    bias.bias_at_matmul = bias.bias_at_heuristic;
    expect(raw_gemm(bias, mem) == CUBLAS_STATUS_SUCCESS, "the same bias pointer runs");
    RawGemm bias32 = bias;
    bias32.a_type = bias32.b_type = CUDA_R_16BF;
    bias32.trans_a = CUBLAS_OP_N;
    bias32.d_type = CUDA_R_32F;
    bias32.bias_type = CUDA_R_16BF;
    expect(raw_gemm(bias32, mem) == CUBLAS_STATUS_NOT_SUPPORTED,
           "a BF16 bias with BF16 x BF16 -> FP32 refused");
    // block scaling: sm_90's modes (VEC128_32F, BLK128x128_32F) or, on a Blackwell, MXFP8's VEC32_UE8M0
    const int VEC128 = VEC, MX32 = MX;
    const bool blackwell = props.major >= 10;
    RawGemm blocks = ok; // the scale tensors: VEC128 32 floats, BLK128x128 4, VEC32 512 bytes
    blocks.k = blocks.ld = 128;
    blocks.a_mode = blackwell ? MX32 : BLK;
    blocks.b_mode = blackwell ? MX32 : VEC128;
    expect(raw_gemm(blocks, mem) == CUBLAS_STATUS_SUCCESS,
           blackwell ? "an MXFP8 matmul runs on sm_100"
                     : "a 2-D x 1-D block-scaled FP8 matmul runs on sm_90");
    if (!blackwell) {
        RawGemm blocks_2d = blocks;
        blocks_2d.b_mode = blocks_2d.a_mode;
        expect(raw_gemm(blocks_2d, mem) == CUBLAS_STATUS_NOT_SUPPORTED, "2-D x 2-D block scaling refused");
    }
    RawGemm blocks_mixed = blocks;
    blocks_mixed.b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    expect(raw_gemm(blocks_mixed, mem) == CUBLAS_STATUS_NOT_SUPPORTED, "block x scalar scaling refused");
    RawGemm other_arch = blocks;
    other_arch.a_mode = other_arch.b_mode = blackwell ? VEC128 : MX32;
    expect(raw_gemm(other_arch, mem) == CUBLAS_STATUS_NOT_SUPPORTED,
           blackwell ? "sm_90's VEC128_32F refused on sm_100" : "MXFP8 scaling refused on sm_90");
    RawGemm blocks_k = blocks;
    blocks_k.k = blocks_k.ld = blackwell ? 48 : 96;
    expect(raw_gemm(blocks_k, mem) == CUBLAS_STATUS_NOT_SUPPORTED,
           "block scaling with k not a multiple of the block refused");
    RawGemm blocks_fast = blocks;
    blocks_fast.fast_accum = 1;
    expect(raw_gemm(blocks_fast, mem) == CUBLAS_STATUS_NOT_SUPPORTED,
           "block scaling with fast accumulation refused");
    RawGemm blocks_bf16 = blocks;
    blocks_bf16.a_type = blocks_bf16.b_type = CUDA_R_16BF;
    blocks_bf16.trans_a = CUBLAS_OP_N;
    expect(raw_gemm(blocks_bf16, mem) == CUBLAS_STATUS_NOT_SUPPORTED,
           "block scaling of BF16 operands refused");
    RawGemm blocks_short = blocks;
    blocks_short.scale_offset = (1 << 20) - 64; // 64 bytes left: B's 128 (VEC128) or 512 (VEC32) do not fit
    expect(raw_gemm(blocks_short, mem) == CUBLAS_STATUS_INVALID_VALUE,
           "a scale tensor running past its allocation refused");
    RawGemm workspace_short = ok;
    workspace_short.workspace = 1024;
    expect(raw_gemm(workspace_short, mem) == CUBLAS_STATUS_INVALID_VALUE,
           "less workspace than the heuristic's algorithm needs refused");
    RawGemm no_workspace = ok;
    no_workspace.workspace = no_workspace.max_workspace = 0;
    expect(raw_gemm(no_workspace, mem) == CUBLAS_STATUS_SUCCESS,
           "no workspace with a preference of none runs");
    cuda_check(cudaFree(mem));
}

// ---------------------------------------------------------------------------------------------------------
// cuBLASLt's fused epilogues (GELU_AUX_BIAS, DGELU, BGRADB) against references computed here in double, raw
// (column-major, an aux whose leading dimension is not D's rows) and through gpu/gemm.cuh in the trainer's
// three uses (row-major); the emulator's refusals of what cuBLASLt documents as invalid or it does not
// emulate.

// The tanh GELU and its derivative in double, written from the formula (not gpu/gelu.cuh's code).
static double gelu_ref(double x) {
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
static double gelu_grad_ref(double x) {
    const double u = sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x), th = tanh(u);
    return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * sqrt(2.0 / M_PI) * (1.0 + 3.0 * 0.044715 * x * x);
}

static bf16 to_bf16(double x) {
    return __float2bfloat16_rn((float)x);
}

// BF16 values of noise(i, seed) * scale, and their doubles.
static std::vector<bf16> bf16_noise(size_t n, int seed, double scale, std::vector<double> *values) {
    std::vector<bf16> h(n);
    values->resize(n);
    for (size_t i = 0; i < n; i++) {
        h[i] = to_bf16(noise((int)i, seed) * scale);
        (*values)[i] = __bfloat162float(h[i]);
    }
    return h;
}

static void *device_copy(char *at, const void *host, size_t bytes) {
    cuda_check(cudaMemcpy(at, host, bytes, cudaMemcpyHostToDevice));
    return at;
}

template <typename T> static std::vector<T> device_read(const void *d, size_t n) {
    std::vector<T> h(n);
    cuda_check(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}

static double as_double(bf16 x) {
    return __bfloat162float(x);
}

// One raw matmul with an epilogue: column-major D (m,n) = op(A) op(B) [+ beta D], BF16 operands (A stored
// m x k, or k x m when transposed; B k x n, or n x k), D of d_type, ld m; the bias, aux and their
// settings as given; pointers at the matmul may differ from those the heuristic saw. The status of the
// heuristic if it fails, else of the matmul.
struct EpilogueCall {
    cublasLtEpilogue_t epilogue;
    cublasOperation_t trans_a, trans_b;
    uint64_t m = 24, n = 20, k = 40;
    cudaDataType_t ab_type = CUDA_R_16BF, d_type = CUDA_R_16BF;
    int64_t aux_ld = 32; // not m: rows m..31 of each of the aux's columns are the aux's own padding
    int32_t aux_type = -1, bias_type = -1;
    float beta = 0.0f;
    const void *A = NULL, *B = NULL;
    void *D = NULL, *bias = NULL, *aux = NULL;
    void *bias_at_heuristic = NULL, *aux_at_heuristic = NULL; // NULL: the matmul's
};

static cublasStatus_t epilogue_matmul(const EpilogueCall &c, void *workspace) {
    cublasLtMatmulDesc_t desc = raw_desc(c.trans_a, c.trans_b);
    cublas_check(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &c.epilogue, sizeof(c.epilogue)));
    cublas_check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &c.aux_ld,
                                                sizeof(c.aux_ld)));
    if (c.aux_type >= 0)
        cublas_check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE,
                                                    &c.aux_type, sizeof(c.aux_type)));
    if (c.bias_type >= 0)
        cublas_check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &c.bias_type,
                                                    sizeof(c.bias_type)));
    auto set_pointers = [&](void *bias, void *aux) {
        cublas_check(
            cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
        cublas_check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                                    sizeof(aux)));
    };
    set_pointers(c.bias_at_heuristic ? c.bias_at_heuristic : c.bias,
                 c.aux_at_heuristic ? c.aux_at_heuristic : c.aux);
    const bool a_t = c.trans_a == CUBLAS_OP_T, b_t = c.trans_b == CUBLAS_OP_T;
    cublasLtMatrixLayout_t a, b, d;
    cublas_check(
        cublasLtMatrixLayoutCreate(&a, c.ab_type, a_t ? c.k : c.m, a_t ? c.m : c.k, a_t ? c.k : c.m));
    cublas_check(
        cublasLtMatrixLayoutCreate(&b, c.ab_type, b_t ? c.n : c.k, b_t ? c.k : c.n, b_t ? c.n : c.k));
    cublas_check(cublasLtMatrixLayoutCreate(&d, c.d_type, c.m, c.n, c.m));
    return raw_run(desc, a, b, d, 1 << 16, 16,
                   [&](cublasLtHandle_t handle, const cublasLtMatmulAlgo_t *algo) {
                       set_pointers(c.bias, c.aux);
                       const float alpha = 1.0f;
                       return cublasLtMatmul(handle, desc, &alpha, c.A, a, c.B, b, &c.beta, c.D, d, c.D, d,
                                             algo, workspace, 1 << 16, 0);
                   });
}

// The exact product of stored operands (row-major here: element (i, j) of op(A) op(B) for an m x k op(A)
// read through a(i, kk) and k x n op(B) through b(kk, j)), and the bound of an FP32 sum of its K terms.
template <typename FA, typename FB>
static void exact_product(int m, int n, int k, FA a, FB b, std::vector<double> *exact,
                          std::vector<double> *bound) {
    exact->assign((size_t)m * n, 0.0);
    bound->assign((size_t)m * n, 0.0);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double sum = 0.0, magnitude = 0.0;
            for (int kk = 0; kk < k; kk++) {
                sum += a(i, kk) * b(kk, j);
                magnitude += fabs(a(i, kk) * b(kk, j));
            }
            (*exact)[(size_t)i * n + j] = sum;
            (*bound)[(size_t)i * n + j] = 2 * k * 0x1p-24 * magnitude + 1e-30;
        }
}

static void test_cublaslt_epilogues(void) {
    GemmSetup setup; // its memory and workspace: the raw matmuls make their own handles
    char *mem = setup.mem;
    void *workspace = setup.workspace;
    const int m = 24, n = 20, k = 40, ld = 32;
    char *dA = mem, *dB = mem + 8192, *dD = mem + 16384, *dbias = mem + 32768, *daux = mem + 36864;
    std::vector<double> a, b, bias;
    std::vector<bf16> ha = bf16_noise((size_t)m * k, 11, 1.0, &a),
                      hb = bf16_noise((size_t)k * n, 12, 1.0, &b), hbias = bf16_noise(m, 13, 1.0, &bias);
    device_copy(dA, ha.data(), ha.size() * 2);
    device_copy(dB, hb.data(), hb.size() * 2);
    device_copy(dbias, hbias.data(), hbias.size() * 2);
    const bf16 sentinel = to_bf16(-77.0);

    // GELU_AUX_BIAS, the forward's form: A transposed (stored k x m), B not
    std::vector<bf16> aux_init((size_t)ld * n, sentinel);
    device_copy(daux, aux_init.data(), aux_init.size() * 2);
    EpilogueCall gelu;
    gelu.epilogue = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    gelu.trans_a = CUBLAS_OP_T, gelu.trans_b = CUBLAS_OP_N;
    gelu.A = dA, gelu.B = dB, gelu.D = dD, gelu.bias = dbias, gelu.aux = daux;
    std::vector<double> exact, bound;
    exact_product(
        m, n, k, [&](int i, int kk) { return a[(size_t)i * k + kk]; },
        [&](int kk, int j) { return b[(size_t)j * k + kk]; }, &exact, &bound);
    expect(epilogue_matmul(gelu, workspace) == CUBLAS_STATUS_SUCCESS, "GELU_AUX_BIAS runs");
    std::vector<bf16> d = device_read<bf16>(dD, (size_t)m * n), aux = device_read<bf16>(daux, (size_t)ld * n);
    double worst_aux = 0, worst_d = 0;
    int padding_kept = 1;
    for (int j = 0; j < n; j++) {
        for (int i = 0; i < m; i++) {
            const double v = exact[(size_t)i * n + j] + bias[i], e = bound[(size_t)i * n + j];
            worst_aux =
                fmax(worst_aux, fabs(as_double(aux[(size_t)j * ld + i]) - v) / (e + 0x1p-8 * fabs(v)));
            worst_d = fmax(worst_d, fabs(as_double(d[(size_t)j * m + i]) - gelu_ref(v)) /
                                        (1.2 * e + 0x1p-8 * fabs(gelu_ref(v)) + 1e-6));
        }
        for (int i = m; i < ld; i++) padding_kept &= as_double(aux[(size_t)j * ld + i]) == -77.0;
    }
    expect(worst_aux <= 1 && worst_d <= 1 && padding_kept,
           "GELU_AUX_BIAS: the aux (ld %d, %d rows) holds the pre-activation (%.2f of its bound), D its GELU "
           "(%.2f), the aux's rows past D's untouched (%d)",
           ld, m, worst_aux, worst_d, padding_kept);

    // DGELU, the data gradient's form: neither transposed; the aux read at its leading dimension, its
    // padding NaN (read by mistake, it would show)
    std::vector<bf16> aux_in((size_t)ld * n, to_bf16(NAN));
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) aux_in[(size_t)j * ld + i] = to_bf16(3.0 * noise(j * m + i, 14));
    device_copy(daux, aux_in.data(), aux_in.size() * 2);
    EpilogueCall dgelu = gelu;
    dgelu.epilogue = CUBLASLT_EPILOGUE_DGELU;
    dgelu.trans_a = CUBLAS_OP_N;
    dgelu.bias = NULL;
    exact_product(
        m, n, k, [&](int i, int kk) { return a[(size_t)kk * m + i]; },
        [&](int kk, int j) { return b[(size_t)j * k + kk]; }, &exact, &bound);
    expect(epilogue_matmul(dgelu, workspace) == CUBLAS_STATUS_SUCCESS, "DGELU runs");
    d = device_read<bf16>(dD, (size_t)m * n);
    worst_d = 0;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            const double g = gelu_grad_ref(as_double(aux_in[(size_t)j * ld + i])),
                         v = exact[(size_t)i * n + j] * g;
            worst_d = fmax(worst_d, fabs(as_double(d[(size_t)j * m + i]) - v) /
                                        (1.2 * bound[(size_t)i * n + j] + 0x1p-8 * fabs(v) + 1e-6));
        }
    expect(worst_d <= 1, "DGELU: D = (A B) * GELU'(aux) with the aux at ld %d (%.2f of its bound)", ld,
           worst_d);

    // BGRADB, the weight gradient's form: B transposed (stored n x k), D FP32 accumulated (beta 1), the
    // bias gradient overwritten: one FP32 value per column of D, the sum over k of op(B)
    std::vector<double> bt;
    std::vector<bf16> hbt = bf16_noise((size_t)n * k, 15, 1.0, &bt);
    device_copy(dB, hbt.data(), hbt.size() * 2);
    std::vector<float> d0((size_t)m * n), grad_init(n, 1e30f);
    for (size_t i = 0; i < d0.size(); i++) d0[i] = noise((int)i, 16);
    device_copy(dD, d0.data(), d0.size() * 4);
    device_copy(dbias, grad_init.data(), grad_init.size() * 4);
    EpilogueCall bgrad = dgelu;
    bgrad.epilogue = CUBLASLT_EPILOGUE_BGRADB;
    bgrad.trans_b = CUBLAS_OP_T;
    bgrad.d_type = CUDA_R_32F;
    bgrad.beta = 1.0f;
    bgrad.bias = dbias;
    bgrad.aux = NULL;
    exact_product(
        m, n, k, [&](int i, int kk) { return a[(size_t)kk * m + i]; },
        [&](int kk, int j) { return bt[(size_t)kk * n + j]; }, &exact, &bound);
    expect(epilogue_matmul(bgrad, workspace) == CUBLAS_STATUS_SUCCESS, "BGRADB runs");
    std::vector<float> df = device_read<float>(dD, (size_t)m * n), grad = device_read<float>(dbias, n);
    worst_d = 0;
    double worst_grad = 0;
    for (int j = 0; j < n; j++) {
        double sum = 0, magnitude = 0;
        for (int kk = 0; kk < k; kk++)
            sum += bt[(size_t)kk * n + j], magnitude += fabs(bt[(size_t)kk * n + j]);
        worst_grad = fmax(worst_grad, fabs(grad[j] - sum) / (k * 0x1p-24 * magnitude + 1e-30));
        for (int i = 0; i < m; i++) {
            const double v = d0[(size_t)j * m + i] + exact[(size_t)i * n + j];
            worst_d = fmax(worst_d,
                           fabs(df[(size_t)j * m + i] - v) / (bound[(size_t)i * n + j] + 0x1p-23 * fabs(v)));
        }
    }
    expect(
        worst_grad <= 1 && worst_d <= 1,
        "BGRADB: the bias gradient (%d, one per column of D) overwritten with the sums of op(B) over k (%.2f "
        "of the bound), D accumulated (%.2f)",
        n, worst_grad, worst_d);

    // refusals
    EpilogueCall odd_ld = gelu;
    odd_ld.aux_ld = 28;
    expect(epilogue_matmul(odd_ld, workspace) == CUBLAS_STATUS_INVALID_VALUE,
           "an aux leading dimension not divisible by 8 refused");
    EpilogueCall short_ld = gelu;
    short_ld.aux_ld = 16;
    expect(epilogue_matmul(short_ld, workspace) == CUBLAS_STATUS_INVALID_VALUE,
           "an aux leading dimension below D's rows refused");
    EpilogueCall moved = gelu;
    moved.aux_at_heuristic = daux;
    moved.aux = daux + 32;
    expect(epilogue_matmul(moved, workspace) == CUBLAS_STATUS_INVALID_VALUE,
           "an aux pointer less aligned than the one the heuristic saw refused");
    EpilogueCall past = gelu;
    past.aux = mem + (1 << 20) - 512;
    past.aux_at_heuristic = NULL;
    expect(epilogue_matmul(past, workspace) == CUBLAS_STATUS_INVALID_VALUE,
           "an aux running past its allocation refused");
    EpilogueCall aux32 = gelu;
    aux32.aux_type = CUDA_R_32F;
    expect(epilogue_matmul(aux32, workspace) == CUBLAS_STATUS_NOT_SUPPORTED,
           "an FP32 aux with a BF16 D refused");
    EpilogueCall grad16 = bgrad;
    grad16.bias_type = CUDA_R_16BF;
    expect(epilogue_matmul(grad16, workspace) == CUBLAS_STATUS_NOT_SUPPORTED,
           "a BF16 bias gradient with an FP32 D refused");
    EpilogueCall dgelu_bgrad = dgelu, bgrada = bgrad;
    dgelu_bgrad.epilogue = CUBLASLT_EPILOGUE_DGELU_BGRAD;
    bgrada.epilogue = CUBLASLT_EPILOGUE_BGRADA;
    expect(epilogue_matmul(dgelu_bgrad, workspace) == CUBLAS_STATUS_NOT_SUPPORTED &&
               epilogue_matmul(bgrada, workspace) == CUBLAS_STATUS_NOT_SUPPORTED,
           "DGELU_BGRAD and BGRADA (not emulated) refused");
    EpilogueCall fp8 = gelu;
    fp8.ab_type = CUDA_R_8F_E4M3;
    expect(epilogue_matmul(fp8, workspace) == CUBLAS_STATUS_NOT_SUPPORTED,
           "GELU_AUX_BIAS with FP8 operands (not emulated) refused");
    setenv("CUDA_EMU_NO_FUSED_EPILOGUES", "1", 1);
    expect(epilogue_matmul(gelu, workspace) == CUBLAS_STATUS_NOT_SUPPORTED,
           "CUDA_EMU_NO_FUSED_EPILOGUES: the heuristic has no algorithm for GELU_AUX_BIAS");
    unsetenv("CUDA_EMU_NO_FUSED_EPILOGUES");
}

// gpu/gemm.cuh's gemm_fused in the trainer's three uses, row-major: fc's forward (x (M,K) . W^T (N,K) + bias,
// the GELU in D and the pre-activation in the aux, one value of the bias per column), fcproj's data gradient
// (dout (M,K) . W (K,N), times GELU' of the aux), a weight gradient (dout^T (M,K) from dout stored (K,M),
// times inp (K,N), accumulated, and the bias gradient: dout's column sums, M of them, overwritten); then,
// where the heuristic has no algorithm (CUDA_EMU_NO_FUSED_EPILOGUES), the calls decline and leave D alone.
static void test_gemm_fused(void) {
    GemmSetup setup;
    GemmContext &ctx = setup.ctx;
    char *mem = setup.mem;
    const int M = 40, N = 48, K = 32;
    char *dA = mem, *dB = mem + 16384, *dD = mem + 32768, *dbias = mem + 49152, *daux = mem + 65536,
         *dgrad = mem + 81920;
    std::vector<double> x, w, bias, exact, bound;
    std::vector<bf16> hx = bf16_noise((size_t)M * K, 21, 1.0, &x),
                      hw = bf16_noise((size_t)N * K, 22, 1.0, &w), hbias = bf16_noise(N, 23, 1.0, &bias);
    device_copy(dA, hx.data(), hx.size() * 2);
    device_copy(dB, hw.data(), hw.size() * 2);
    device_copy(dbias, hbias.data(), hbias.size() * 2);
    GemmOperand A = {dA, CUDA_R_16BF, NULL, 0}, B = {dB, CUDA_R_16BF, NULL, 0};
    int fused = gemm_fused(&ctx,
                           {.D = dD,
                            .d_type = CUDA_R_16BF,
                            .A = A,
                            .B = B,
                            .trans_b = 1,
                            .M = M,
                            .N = N,
                            .K = K,
                            .epilogue = gemm_gelu_bias((const bf16 *)dbias, (bf16 *)daux)},
                           0);
    cuda_check(cudaDeviceSynchronize());
    exact_product(
        M, N, K, [&](int i, int kk) { return x[(size_t)i * K + kk]; },
        [&](int kk, int j) { return w[(size_t)j * K + kk]; }, &exact, &bound);
    std::vector<bf16> d = device_read<bf16>(dD, (size_t)M * N), pre = device_read<bf16>(daux, (size_t)M * N);
    double worst_pre = 0, worst = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            const size_t e = (size_t)i * N + j;
            const double v = exact[e] + bias[j];
            worst_pre = fmax(worst_pre, fabs(as_double(pre[e]) - v) / (bound[e] + 0x1p-8 * fabs(v)));
            worst = fmax(worst, fabs(as_double(d[e]) - gelu_ref(v)) /
                                    (1.2 * bound[e] + 0x1p-8 * fabs(gelu_ref(v)) + 1e-6));
        }
    expect(fused && worst_pre <= 1 && worst <= 1,
           "gemm_fused, GELU and bias: D (M,N) = GELU(x . W^T + bias) (%.2f of its bound), the aux the "
           "pre-activation (%.2f)",
           worst, worst_pre);

    // fcproj's data gradient: W stored (K,N) here, the aux the pre-activation just written
    std::vector<double> g, w2;
    std::vector<bf16> hg = bf16_noise((size_t)M * K, 24, 1.0, &g),
                      hw2 = bf16_noise((size_t)K * N, 25, 1.0, &w2);
    device_copy(dA, hg.data(), hg.size() * 2);
    device_copy(dB, hw2.data(), hw2.size() * 2);
    fused = gemm_fused(&ctx,
                       {.D = dD,
                        .d_type = CUDA_R_16BF,
                        .A = A,
                        .B = B,
                        .M = M,
                        .N = N,
                        .K = K,
                        .epilogue = gemm_dgelu((const bf16 *)daux)},
                       0);
    cuda_check(cudaDeviceSynchronize());
    exact_product(
        M, N, K, [&](int i, int kk) { return g[(size_t)i * K + kk]; },
        [&](int kk, int j) { return w2[(size_t)kk * N + j]; }, &exact, &bound);
    d = device_read<bf16>(dD, (size_t)M * N);
    worst = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            const size_t e = (size_t)i * N + j;
            const double v = exact[e] * gelu_grad_ref(as_double(pre[e]));
            worst = fmax(worst, fabs(as_double(d[e]) - v) / (1.2 * bound[e] + 0x1p-8 * fabs(v) + 1e-6));
        }
    expect(fused && worst <= 1,
           "gemm_fused, GELU backward: D (M,N) = (dout . W) * GELU'(aux) (%.2f of its bound)", worst);

    // a weight gradient: A = dout stored (K,M) (K tokens), B = inp (K,N); the bias gradient of the M outputs
    std::vector<double> dout, inp;
    std::vector<bf16> hdout = bf16_noise((size_t)K * M, 26, 1.0, &dout),
                      hinp = bf16_noise((size_t)K * N, 27, 1.0, &inp);
    device_copy(dA, hdout.data(), hdout.size() * 2);
    device_copy(dB, hinp.data(), hinp.size() * 2);
    std::vector<float> d0((size_t)M * N), grad_init(M, 1e30f);
    for (size_t i = 0; i < d0.size(); i++) d0[i] = noise((int)i, 28);
    device_copy(dD, d0.data(), d0.size() * 4);
    device_copy(dgrad, grad_init.data(), grad_init.size() * 4);
    const GemmCall weight_gradient = {.D = dD,
                                      .d_type = CUDA_R_32F,
                                      .A = A,
                                      .trans_a = 1,
                                      .B = B,
                                      .M = M,
                                      .N = N,
                                      .K = K,
                                      .epilogue = gemm_bias_grad((float *)dgrad),
                                      .accumulate = 1};
    fused = gemm_fused(&ctx, weight_gradient, 0);
    cuda_check(cudaDeviceSynchronize());
    exact_product(
        M, N, K, [&](int i, int kk) { return dout[(size_t)kk * M + i]; },
        [&](int kk, int j) { return inp[(size_t)kk * N + j]; }, &exact, &bound);
    std::vector<float> df = device_read<float>(dD, (size_t)M * N), grad = device_read<float>(dgrad, M);
    double worst_grad = 0;
    worst = 0;
    for (int i = 0; i < M; i++) {
        double sum = 0, magnitude = 0;
        for (int kk = 0; kk < K; kk++)
            sum += dout[(size_t)kk * M + i], magnitude += fabs(dout[(size_t)kk * M + i]);
        worst_grad = fmax(worst_grad, fabs(grad[i] - sum) / (K * 0x1p-24 * magnitude + 1e-30));
        for (int j = 0; j < N; j++) {
            const size_t e = (size_t)i * N + j;
            const double v = d0[e] + exact[e];
            worst = fmax(worst, fabs(df[e] - v) / (bound[e] + 0x1p-23 * fabs(v)));
        }
    }
    expect(fused && worst_grad <= 1 && worst <= 1,
           "gemm_fused, bias gradient: the %d column sums of dout, overwritten (%.2f of the bound), dW += "
           "dout^T . inp (%.2f)",
           M, worst_grad, worst);
    gemm_destroy(&ctx);

    // no algorithm: the calls decline, every time, queuing nothing
    setenv("CUDA_EMU_NO_FUSED_EPILOGUES", "1", 1);
    gemm_init(&ctx, setup.workspace, 1 << 20);
    device_copy(dD, d0.data(), d0.size() * 4);
    int declined = !gemm_fused(&ctx, weight_gradient, 0) && !gemm_fused(&ctx, weight_gradient, 0);
    cuda_check(cudaDeviceSynchronize());
    expect(declined && ctx.num_plans == 1 && !ctx.plans[0].has_algo && ctx.declined == 1u << GEMM_BIAS_GRAD &&
               device_read<float>(dD, (size_t)M * N) == d0,
           "gemm_fused without an algorithm: declines (one plan, asked once), D untouched");
    unsetenv("CUDA_EMU_NO_FUSED_EPILOGUES");
}

// ---------------------------------------------------------------------------------------------------------
// NCCL, one rank

static void test_nccl(void) {
    ncclUniqueId id;
    ncclComm_t comm;
    expect(ncclGetUniqueId(&id) == ncclSuccess && ncclCommInitRank(&comm, 1, id, 0) == ncclSuccess,
           "a one-rank communicator");
    float *d = device_floats({1.0f, 2.0f, 3.0f, 4.0f});
    expect(ncclAllReduce(d, d, 4, ncclFloat32, ncclSum, comm, 0) == ncclSuccess &&
               ncclAllGather(d, d, 4, ncclFloat32, comm, 0) == ncclSuccess &&
               ncclReduceScatter(d, d, 4, ncclFloat32, ncclSum, comm, 0) == ncclSuccess,
           "in-place collectives of one rank");
    std::vector<float> h = host_floats(d, 4);
    expect(h[0] == 1.0f && h[3] == 4.0f, "one rank's collectives leave the values (%g %g)", h[0], h[3]);
    expect(ncclAllReduce(d, d + 1, 2, ncclFloat32, ncclSum, comm, 0) == ncclInvalidArgument,
           "overlapping buffers not in NCCL's in-place form refused");
    float host[4];
    expect(ncclAllReduce(host, host, 4, ncclFloat32, ncclSum, comm, 0) == ncclInvalidArgument,
           "host buffers refused");
    expect(ncclCommDestroy(comm) == ncclSuccess, "communicator destroyed");
    cuda_check(cudaFree(d));
}

// ---------------------------------------------------------------------------------------------------------
// Stream order: producer on one stream, consumer on another

static int streams_demo(bool wait) {
    const int n = 256;
    float *src = device_floats(std::vector<float>(n, 1.0f)),
          *dst = device_floats(std::vector<float>(n, 0.0f));
    cudaStream_t producer, consumer;
    cuda_check(cudaStreamCreate(&producer));
    cuda_check(cudaStreamCreate(&consumer));
    cudaEvent_t produced;
    cuda_check(cudaEventCreateWithFlags(&produced, cudaEventDisableTiming));
    launch<add_value_kernel>({1, n, 0, producer}, src, 41.0f, n); // src = 42
    cuda_check(cudaEventRecord(produced, producer));
    if (wait) cuda_check(cudaStreamWaitEvent(consumer, produced, 0));
    launch<copy_kernel>({1, n, 0, consumer}, dst, src, n);
    cuda_check(cudaDeviceSynchronize());
    printf("consumer read %g\n", host_floats(dst, 1)[0]);
    return 0;
}

// test_emu schedule: the sums unclosed_reduction_kernel's four warps computed, as "sums 6 6 6 6".
static int schedule_demo(void) {
    float *sums = NULL;
    cuda_check(cudaMalloc((void **)&sums, 4 * sizeof(float)));
    launch<unclosed_reduction_kernel>({1, 128, 0, 0}, sums);
    std::vector<float> h = host_floats(sums, 4);
    printf("sums %g %g %g %g\n", h[0], h[1], h[2], h[3]);
    cuda_check(cudaFree(sums));
    return 0;
}

// ---------------------------------------------------------------------------------------------------------
// Planted faults: each must end the run with the emulator's error (or the sanitizer's report)

static int planted(const char *name) {
    int *ints = NULL;
    float *floats = NULL;
    cuda_check(cudaMalloc((void **)&ints, 256 * sizeof(int)));
    cuda_check(cudaMalloc((void **)&floats, 1000 * sizeof(float)));
    if (!strcmp(name, "divergent_syncthreads"))
        launch<divergent_barrier_kernel>({1, 64, 0, 0}, ints);
    else if (!strcmp(name, "two_syncthreads"))
        launch<two_barriers_kernel>({1, 64, 0, 0}, ints);
    else if (!strcmp(name, "shuffle_outside_mask"))
        launch<shuffle_outside_mask_kernel>({1, 32, 0, 0}, ints);
    else if (!strcmp(name, "shuffle_exited_lane"))
        launch<shuffle_exited_lane_kernel>({1, 32, 0, 0}, ints);
    else if (!strcmp(name, "shuffle_missing_lane"))
        launch<shuffle_missing_lane_kernel>({1, 8, 0, 0}, ints);
    else if (!strcmp(name, "shuffle_divergent"))
        launch<shuffle_divergent_kernel>({1, 32, 0, 0}, ints);
    else if (!strcmp(name, "out_of_bounds_write"))
        launch<out_of_bounds_kernel>({1, 32, 0, 0}, floats, 1000);
    else if (!strcmp(name, "far_out_of_bounds_write"))
        launch<far_out_of_bounds_kernel>({1, 32, 0, 0}, floats, 1000);
    else if (!strcmp(name, "host_pointer_argument")) {
        static float host[1000];
        launch<out_of_bounds_kernel>({1, 32, 0, 0}, host, 0);
    } else if (!strcmp(name, "race_shared_missing_barrier")) {
        launch<shared_missing_barrier_kernel>({1, 128, 0, 0}, floats);
    } else if (!strcmp(name, "race_dynamic_missing_barrier")) {
        launch<dynamic_missing_barrier_kernel>({1, 64, 64 * sizeof(float), 0}, floats);
    } else if (!strcmp(name, "race_plain_max")) {
        std::vector<float> values(256);
        for (int i = 0; i < 256; i++) values[i] = (float)(i + 1); // every block's value beats the last
        float *x = device_floats(values);
        launch<plain_max_kernel>({4, 64, 0, 0}, floats, x);
    } else if (!strcmp(name, "race_atomic_and_plain")) {
        launch<atomic_and_plain_kernel>({1, 32, 0, 0}, ints);
    } else if (!strcmp(name, "race_cross_block")) {
        launch<cross_block_kernel>({2, 32, 0, 0}, floats);
    } else if (!strcmp(name, "host_reads_device")) {
        cuda_check(cudaDeviceSynchronize());
        printf("%g\n", floats[0]); // a device pointer dereferenced on the host
    } else {
        fail("test_emu: no planted fault %s", name);
    }
    cuda_check(cudaDeviceSynchronize());
    printf("the planted fault %s was not caught\n", name);
    return 0;
}

// ---------------------------------------------------------------------------------------------------------
// NCCL across the processes of mpirun

#define nccl_check(call)                                                                                     \
    do {                                                                                                     \
        ncclResult_t result = (call);                                                                        \
        if (result != ncclSuccess) fail("NCCL: %s: %s", #call, ncclGetErrorString(result));                  \
    } while (0)

static int nccl_ranks(bool mismatch) {
#ifdef USE_MPI
    MPI_Init(NULL, NULL);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    ncclUniqueId id;
    if (rank == 0) ncclGetUniqueId(&id);
    MPI_Bcast(&id, (int)sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclComm_t comm;
    nccl_check(ncclCommInitRank(&comm, size, id, rank));
    const int n = 4;
    std::vector<float> mine(n * size), all(n * size);
    for (int i = 0; i < n * size; i++) mine[i] = (float)(rank * 100 + i);
    float *reduced = device_floats(std::vector<float>(mine.begin(), mine.begin() + n));
    float *gathered = device_floats(std::vector<float>(n * size, -1.0f));
    float *scattered = device_floats(mine);
    cuda_check(cudaMemcpy(gathered + rank * n, mine.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    if (mismatch && rank == 0)
        nccl_check(ncclAllReduce(reduced, reduced, n, ncclFloat32, ncclSum, comm, 0));
    else if (mismatch)
        nccl_check(ncclAllGather(gathered + rank * n, gathered, n, ncclFloat32, comm, 0));
    if (mismatch) cuda_check(cudaDeviceSynchronize());
    nccl_check(ncclAllReduce(reduced, reduced, n, ncclFloat32, ncclSum, comm, 0));
    nccl_check(ncclAllGather(gathered + rank * n, gathered, n, ncclFloat32, comm, 0));
    nccl_check(ncclReduceScatter(scattered, scattered + rank * n, n, ncclFloat32, ncclSum, comm, 0));
    std::vector<float> r = host_floats(reduced, n), g = host_floats(gathered, n * size),
                       sc = host_floats(scattered + rank * n, n);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        float sum = 0, chunk_sum = 0;
        for (int q = 0; q < size; q++)
            sum += (float)(q * 100 + i), chunk_sum += (float)(q * 100 + rank * n + i);
        bad += r[i] != sum || sc[i] != chunk_sum;
    }
    for (int q = 0; q < size; q++)
        for (int i = 0; i < n; i++) bad += g[q * n + i] != (float)(q * 100 + i);
    expect(bad == 0,
           "rank %d of %d: all-reduce, all-gather and reduce-scatter as NCCL defines them (%d wrong)", rank,
           size, bad);
    nccl_check(ncclCommDestroy(comm));
    int status = test_summary(), worst = 0;
    MPI_Allreduce(&status, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return worst;
#else
    (void)mismatch;
    printf("SKIPPED: test_emu was built without MPI\n");
    return 0;
#endif
}

int main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "nccl")) return nccl_ranks(argc == 3 && !strcmp(argv[2], "mismatch"));
    if (argc == 2 && !strcmp(argv[1], "streams")) return streams_demo(true);
    if (argc == 3 && !strcmp(argv[1], "streams") && !strcmp(argv[2], "nowait")) return streams_demo(false);
    if (argc == 2 && !strcmp(argv[1], "schedule")) return schedule_demo();
    if (argc == 2) return planted(argv[1]);
    test_warp_ops();
    test_block_sum();
    test_atomics();
    test_ordered_accesses();
    test_launch_limits();
    test_copies();
    test_graphs();
    test_cublaslt();
    test_tensor_core_accumulation();
    test_gemm_plans();
    test_cublaslt_epilogues();
    test_gemm_fused();
    test_nccl();
    return test_summary();
}

// emu/cuda_runtime.h: the CUDA runtime as the CPU emulation build sees it (make train_emu). The trainer's
// .cu files are compiled as C++ by the host compiler with emu/ first on the include path, so this file
// stands in for CUDA's own, under CUDA's names, for the subset the project uses:
//   - kernels: __global__ functions are plain functions; cudaLaunchKernel runs every block as a group of
//     cooperative threads (emu/threads.cpp: one fiber per CUDA thread) with real barriers, warp
//     shuffles and votes, and the built-ins threadIdx, blockIdx, blockDim, gridDim of the running thread;
//   - memory: device allocations are host memory, tracked, and unreadable by host code between device
//     operations (as on a GPU); copies, kernel arguments and atomics are checked against them;
//   - streams, events and CUDA Graphs: work is queued and runs only when the host synchronises, in an
//     order the dependencies allow and CUDA_EMU_STREAM_ORDER chooses (docs/emulation.md).
// What is undefined or hangs on a GPU ends the run with one "cuda-emu: error:" line naming the kernel,
// block, thread and source line. Nothing here is compiled by nvcc.
#ifndef EMU_CUDA_RUNTIME_H
#define EMU_CUDA_RUNTIME_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

#define CUDA_EMULATION 1

// ---------------------------------------------------------------------------------------------------------
// Qualifiers. A __shared__ variable is one per block: the threads of a block run on one host thread, and
// each host thread runs one block at a time, so thread_local storage is exactly the block's.

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __shared__ thread_local
#define __constant__
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __restrict__ __restrict

// ---------------------------------------------------------------------------------------------------------
// Types

struct uint3 {
    unsigned int x, y, z;
};

struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const {
        return uint3{x, y, z};
    }
};

struct __align__(8) float2 {
    float x, y;
};
struct __align__(16) float4 {
    float x, y, z, w;
};
struct __align__(8) int2 {
    int x, y;
};
struct __align__(16) int4 {
    int x, y, z, w;
};
static inline float2 make_float2(float x, float y) {
    return float2{x, y};
}
static inline float4 make_float4(float x, float y, float z, float w) {
    return float4{x, y, z, w};
}

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorInvalidDeviceFunction = 98,
    cudaErrorNoKernelImageForDevice = 209,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorIllegalState = 401,
    cudaErrorNotReady = 600,
    cudaErrorIllegalAddress = 700,
    cudaErrorLaunchOutOfResources = 701,
    cudaErrorLaunchFailure = 719,
    cudaErrorNotSupported = 801,
    cudaErrorStreamCaptureUnsupported = 900,
    cudaErrorStreamCaptureInvalidated = 901,
    cudaErrorStreamCaptureMerge = 902,
    cudaErrorStreamCaptureUnmatched = 903,
    cudaErrorStreamCaptureUnjoined = 904,
    cudaErrorStreamCaptureIsolation = 905,
    cudaErrorStreamCaptureImplicit = 906,
    cudaErrorCapturedEvent = 907,
    cudaErrorStreamCaptureWrongThread = 908,
} cudaError_t;

typedef enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
} cudaMemcpyKind;

typedef enum cudaStreamCaptureMode {
    cudaStreamCaptureModeGlobal = 0,
    cudaStreamCaptureModeThreadLocal = 1,
    cudaStreamCaptureModeRelaxed = 2,
} cudaStreamCaptureMode;

typedef enum cudaStreamCaptureStatus {
    cudaStreamCaptureStatusNone = 0,
    cudaStreamCaptureStatusActive = 1,
    cudaStreamCaptureStatusInvalidated = 2,
} cudaStreamCaptureStatus;

typedef enum cudaFuncAttribute {
    cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
} cudaFuncAttribute;

#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventBlockingSync 0x01
#define cudaEventDisableTiming 0x02
#define cudaHostAllocDefault 0x00

struct CUstream_st;
struct CUevent_st;
struct CUgraph_st;
struct CUgraphExec_st;
typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
typedef struct CUgraph_st *cudaGraph_t;
typedef struct CUgraphExec_st *cudaGraphExec_t;

// The fields of CUDA's cudaDeviceProp that the project reads, with an H200's values.
struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;
    size_t sharedMemPerBlockOptin;
    size_t sharedMemPerMultiprocessor;
    int regsPerBlock;
    int warpSize;
    int maxThreadsPerBlock;
    int maxThreadsDim[3];
    int maxGridSize[3];
    int major, minor;
    int multiProcessorCount;
    int maxThreadsPerMultiProcessor;
    int l2CacheSize;
    int memoryBusWidth;
    int pciBusID, pciDeviceID, pciDomainID;
};

// ---------------------------------------------------------------------------------------------------------
// Runtime API (emu/launch.cpp: errors and the device; emu/memory.cpp: allocations; emu/streams.cpp: copies,
// streams, events, graphs)

const char *cudaGetErrorString(cudaError_t error);
const char *cudaGetErrorName(cudaError_t error);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);

cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaDriverGetVersion(int *version);  // 13000: the CUDA 13.0 this emulation follows
cudaError_t cudaRuntimeGetVersion(int *version); // likewise
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device);
cudaError_t cudaDeviceGetPCIBusId(char *bus_id, int len, int device);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest);
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);

cudaError_t cudaMalloc(void **ptr, size_t bytes);
cudaError_t cudaFree(void *ptr);
cudaError_t cudaMallocHost(void **ptr, size_t bytes);
cudaError_t cudaFreeHost(void *ptr);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream = 0);
cudaError_t cudaMemset(void *ptr, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void *ptr, int value, size_t bytes, cudaStream_t stream = 0);

cudaError_t cudaStreamCreate(cudaStream_t *stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags);
cudaError_t cudaStreamCreateWithPriority(cudaStream_t *stream, unsigned int flags, int priority);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamQuery(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags = 0);
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *graph);
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus *status);

cudaError_t cudaEventCreate(cudaEvent_t *event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = 0);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags = 0);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------------------
// The emulator's side of kernels (emu/launch.cpp: launches; emu/threads.cpp: blocks, barriers, warp
// operations; emu/memory.cpp: check_device_range)

namespace emu {

// The CUDA thread a host thread is running, or NULL outside kernels.
struct ThreadContext {
    uint3 thread_idx, block_idx;
    dim3 block_dim, grid_dim;
};
extern __thread ThreadContext *current_thread;

// One kernel launch, its arguments copied at launch time (so a captured graph replays exactly them).
struct KernelLaunch {
    const void *function;
    void (*invoke)(const void *function, const void *params); // calls function with the copied params
    std::shared_ptr<const void> params;
    dim3 grid, block;
    size_t shared_bytes;
    int num_pointers; // pointer arguments, checked against device memory at launch
    const void *pointer_values[32];
    int pointer_positions[32];
};

cudaError_t launch_kernel(const KernelLaunch &launch, cudaStream_t stream);
cudaError_t set_max_dynamic_shared(const void *function, int bytes);
cudaError_t
kernel_image(const void *function); // cudaErrorNoKernelImageForDevice where the device has no code

// Device memory: every access the emulator makes for a device operation is checked against it.
void check_device_range(const void *p, size_t bytes, const char *what);

enum WarpOpKind {
    WARP_SHFL,
    WARP_SHFL_XOR,
    WARP_SHFL_UP,
    WARP_SHFL_DOWN,
    WARP_REDUCE_ADD,
    WARP_REDUCE_MIN,
    WARP_REDUCE_MAX,
    WARP_BALLOT,
    WARP_ANY,
    WARP_ALL,
    WARP_SYNC
};
// Lane `lane`'s share of a warp-wide operation: waits until every lane of mask has reached the same one.
uint64_t warp_op(WarpOpKind kind, unsigned mask, uint64_t value, int arg, int width, const char *file,
                 int line);
void block_barrier(const char *file, int line);
// The launch's dynamic shared memory (extern __shared__ on a GPU), for this block.
void *dynamic_shared_memory(void);

template <typename T> static inline uint64_t to_bits(T v) {
    static_assert(sizeof(T) <= 8, "warp operations move at most 8 bytes");
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof(T));
    return bits;
}

template <typename T> static inline T from_bits(uint64_t bits) {
    T v;
    memcpy(&v, &bits, sizeof(T));
    return v;
}

template <typename P> static inline void note_pointer(KernelLaunch &launch, int position, const P &value) {
    if constexpr (std::is_pointer<P>::value) {
        if (launch.num_pointers < 32) {
            launch.pointer_values[launch.num_pointers] = (const void *)value;
            launch.pointer_positions[launch.num_pointers++] = position;
        }
    }
}

template <typename... P, size_t... I>
static inline cudaError_t launch_typed(void (*function)(P...), dim3 grid, dim3 block, void **args,
                                       size_t shared_bytes, cudaStream_t stream, std::index_sequence<I...>) {
    typedef std::tuple<P...> Params;
    std::shared_ptr<Params> params = std::make_shared<Params>(*static_cast<P *>(args[I])...);
    KernelLaunch launch;
    launch.function = (const void *)function;
    launch.invoke = [](const void *f, const void *p) { std::apply((void (*)(P...))f, *(const Params *)p); };
    launch.grid = grid;
    launch.block = block;
    launch.shared_bytes = shared_bytes;
    launch.num_pointers = 0;
    (note_pointer(launch, (int)I, std::get<I>(*params)), ...);
    launch.params = params;
    return launch_kernel(launch, stream);
}

} // namespace emu

template <typename... P>
static inline cudaError_t cudaLaunchKernel(void (*function)(P...), dim3 grid, dim3 block, void **args,
                                           size_t shared_bytes = 0, cudaStream_t stream = 0) {
    return emu::launch_typed(function, grid, block, args, shared_bytes, stream,
                             std::index_sequence_for<P...>());
}

// What the trainer asks of a kernel's attributes: whether the device has code for it (the rest is zero).
struct cudaFuncAttributes {
    int binaryVersion, ptxVersion, maxThreadsPerBlock, numRegs;
    size_t sharedSizeBytes;
};
template <typename... P>
static inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes *attributes, void (*function)(P...)) {
    *attributes = cudaFuncAttributes{};
    return emu::kernel_image((const void *)function);
}

template <typename... P>
static inline cudaError_t cudaFuncSetAttribute(void (*function)(P...), cudaFuncAttribute attribute,
                                               int value) {
    if (attribute != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaErrorInvalidValue;
    return emu::set_max_dynamic_shared((const void *)function, value);
}

// ---------------------------------------------------------------------------------------------------------
// Built-ins of device code

#define threadIdx (::emu::current_thread->thread_idx)
#define blockIdx (::emu::current_thread->block_idx)
#define blockDim (::emu::current_thread->block_dim)
#define gridDim (::emu::current_thread->grid_dim)
static constexpr int warpSize = 32;

static inline void __syncthreads(const char *file = __builtin_FILE(), int line = __builtin_LINE()) {
    emu::block_barrier(file, line);
}

static inline void __syncwarp(unsigned mask = 0xffffffffu, const char *file = __builtin_FILE(),
                              int line = __builtin_LINE()) {
    emu::warp_op(emu::WARP_SYNC, mask, 0, 0, 32, file, line);
}

template <typename T>
static inline T __shfl_sync(unsigned mask, T value, int src_lane, int width = 32,
                            const char *file = __builtin_FILE(), int line = __builtin_LINE()) {
    return emu::from_bits<T>(
        emu::warp_op(emu::WARP_SHFL, mask, emu::to_bits(value), src_lane, width, file, line));
}

template <typename T>
static inline T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = 32,
                                const char *file = __builtin_FILE(), int line = __builtin_LINE()) {
    return emu::from_bits<T>(
        emu::warp_op(emu::WARP_SHFL_XOR, mask, emu::to_bits(value), lane_mask, width, file, line));
}

template <typename T>
static inline T __shfl_up_sync(unsigned mask, T value, unsigned delta, int width = 32,
                               const char *file = __builtin_FILE(), int line = __builtin_LINE()) {
    return emu::from_bits<T>(
        emu::warp_op(emu::WARP_SHFL_UP, mask, emu::to_bits(value), (int)delta, width, file, line));
}

template <typename T>
static inline T __shfl_down_sync(unsigned mask, T value, unsigned delta, int width = 32,
                                 const char *file = __builtin_FILE(), int line = __builtin_LINE()) {
    return emu::from_bits<T>(
        emu::warp_op(emu::WARP_SHFL_DOWN, mask, emu::to_bits(value), (int)delta, width, file, line));
}

static inline unsigned __reduce_add_sync(unsigned mask, unsigned value, const char *file = __builtin_FILE(),
                                         int line = __builtin_LINE()) {
    return (unsigned)emu::warp_op(emu::WARP_REDUCE_ADD, mask, value, 0, 32, file, line);
}

static inline unsigned __reduce_max_sync(unsigned mask, unsigned value, const char *file = __builtin_FILE(),
                                         int line = __builtin_LINE()) {
    return (unsigned)emu::warp_op(emu::WARP_REDUCE_MAX, mask, value, 0, 32, file, line);
}

static inline unsigned __reduce_min_sync(unsigned mask, unsigned value, const char *file = __builtin_FILE(),
                                         int line = __builtin_LINE()) {
    return (unsigned)emu::warp_op(emu::WARP_REDUCE_MIN, mask, value, 0, 32, file, line);
}

static inline unsigned __ballot_sync(unsigned mask, int predicate, const char *file = __builtin_FILE(),
                                     int line = __builtin_LINE()) {
    return (unsigned)emu::warp_op(emu::WARP_BALLOT, mask, predicate != 0, 0, 32, file, line);
}

static inline int __any_sync(unsigned mask, int predicate, const char *file = __builtin_FILE(),
                             int line = __builtin_LINE()) {
    return (int)emu::warp_op(emu::WARP_ANY, mask, predicate != 0, 0, 32, file, line);
}

static inline int __all_sync(unsigned mask, int predicate, const char *file = __builtin_FILE(),
                             int line = __builtin_LINE()) {
    return (int)emu::warp_op(emu::WARP_ALL, mask, predicate != 0, 0, 32, file, line);
}

// IEEE operations in round-to-nearest-even, never fused: the build passes -ffp-contract=off, so that
// a product and a sum written apart stay apart, as the _rn intrinsics promise on the GPU.
static inline float __fadd_rn(float a, float b) {
    return a + b;
}
static inline float __fsub_rn(float a, float b) {
    return a - b;
}
static inline float __fmul_rn(float a, float b) {
    return a * b;
}
static inline float __fdiv_rn(float a, float b) {
    return a / b;
}
static inline float __frcp_rn(float a) {
    return 1.0f / a;
}
static inline float __fsqrt_rn(float a) {
    return sqrtf(a);
}
static inline float __fmaf_rn(float a, float b, float c) {
    return fmaf(a, b, c);
}
static inline double __dadd_rn(double a, double b) {
    return a + b;
}
static inline double __dsub_rn(double a, double b) {
    return a - b;
}
static inline double __dmul_rn(double a, double b) {
    return a * b;
}
static inline int __float_as_int(float x) {
    return emu::from_bits<int>(emu::to_bits(x));
}
static inline unsigned __float_as_uint(float x) {
    return emu::from_bits<unsigned>(emu::to_bits(x));
}
static inline float __int_as_float(int x) {
    return emu::from_bits<float>(emu::to_bits(x));
}
static inline float __uint_as_float(unsigned x) {
    return emu::from_bits<float>(emu::to_bits(x));
}

// CUDA's min and max overloads, which device code calls unqualified.
#define EMU_MIN_MAX(T)                                                                                       \
    static inline T min(T a, T b) {                                                                          \
        return a < b ? a : b;                                                                                \
    }                                                                                                        \
    static inline T max(T a, T b) {                                                                          \
        return a > b ? a : b;                                                                                \
    }
EMU_MIN_MAX(int)
EMU_MIN_MAX(unsigned int)
EMU_MIN_MAX(long)
EMU_MIN_MAX(unsigned long)
EMU_MIN_MAX(long long)
EMU_MIN_MAX(unsigned long long)
#undef EMU_MIN_MAX
static inline float min(float a, float b) {
    return fminf(a, b);
}
static inline float max(float a, float b) {
    return fmaxf(a, b);
}
static inline double min(double a, double b) {
    return fmin(a, b);
}
static inline double max(double a, double b) {
    return fmax(a, b);
}

// Atomics on device memory: real atomics, since blocks run on several host threads at once.
template <typename T> static inline T *emu_atomic_target(T *address) {
    emu::check_device_range(address, sizeof(T), "atomic operation");
    return address;
}
static inline int atomicAdd(int *address, int value) {
    return __atomic_fetch_add(emu_atomic_target(address), value, __ATOMIC_RELAXED);
}
static inline unsigned atomicAdd(unsigned *address, unsigned value) {
    return __atomic_fetch_add(emu_atomic_target(address), value, __ATOMIC_RELAXED);
}
static inline unsigned long long atomicAdd(unsigned long long *address, unsigned long long value) {
    return __atomic_fetch_add(emu_atomic_target(address), value, __ATOMIC_RELAXED);
}
template <typename T, typename F> static inline T emu_atomic_update(T *address, F update) {
    T old = __atomic_load_n(emu_atomic_target(address), __ATOMIC_RELAXED);
    while (
        !__atomic_compare_exchange_n(address, &old, update(old), true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    return old;
}
static inline float atomicAdd(float *address, float value) {
    unsigned old = emu_atomic_update((unsigned *)address, [value](unsigned bits) {
        return __float_as_uint(__uint_as_float(bits) + value);
    });
    return __uint_as_float(old);
}
static inline int atomicMax(int *address, int value) {
    return emu_atomic_update(address, [value](int old) { return old > value ? old : value; });
}
static inline unsigned atomicMax(unsigned *address, unsigned value) {
    return emu_atomic_update(address, [value](unsigned old) { return old > value ? old : value; });
}
static inline int atomicMin(int *address, int value) {
    return emu_atomic_update(address, [value](int old) { return old < value ? old : value; });
}
static inline int atomicExch(int *address, int value) {
    return __atomic_exchange_n(emu_atomic_target(address), value, __ATOMIC_RELAXED);
}
static inline int atomicCAS(int *address, int compare, int value) {
    __atomic_compare_exchange_n(emu_atomic_target(address), &compare, value, false, __ATOMIC_RELAXED,
                                __ATOMIC_RELAXED);
    return compare;
}

#endif // EMU_CUDA_RUNTIME_H

// gpu/layer_common.cuh: what the kernels of the layers share: their contract with the CPU reference (below),
// the unfused FP32 arithmetic, BF16 packs, warp and block reductions, and the pack width a launcher picks.
//
// Every kernel computes what the function of the same name in train_gpt.c computes, with the same
// rounding points: inputs are BF16, arithmetic is FP32, each output is rounded once to BF16
// (round to nearest even) where the CPU calls round_to_storage. Elementwise arithmetic is spelled with
// the _rn intrinsics, in the CPU's operation order, so that nvcc cannot fuse a multiply and an add
// into an FMA the CPU does not do: given the same inputs, an elementwise result is the CPU's bit for
// bit, except where a libm function (expf, logf, tanhf) differs from glibc in the last place.
// Reductions (row sums, softmax sums) run in a different order than the CPU's serial loops and so
// agree with it up to FP32 rounding.
//
// Determinism: no floating-point atomics. Sums across rows go through per-block partial sums in a
// scratch buffer that a second kernel adds up in a fixed order, so two runs give identical bits.
// CUDA Graphs: no allocation, no host synchronisation; each launcher takes its scratch from the
// caller, sized by the matching *_scratch_floats function. Launch configurations depend only on the
// shapes passed in, never on the device.
//
// Host API. Every launcher takes its stream last, enqueues its kernels and returns: no synchronisation.
#ifndef GPU_LAYER_COMMON_CUH
#define GPU_LAYER_COMMON_CUH

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "common.cuh"

namespace layers_impl {

// ---------------------------------------------------------------------------------------------------------
// Device helpers

constexpr unsigned FULL_MASK = 0xffffffffu;

__device__ __forceinline__ float bf2f(bf16 x) {
    return __bfloat162float(x);
}

__device__ __forceinline__ bf16 f2bf(float x) {
    return __float2bfloat16_rn(x);
}

// Shorter names for the unfused IEEE operations.
__device__ __forceinline__ float fadd(float a, float b) {
    return __fadd_rn(a, b);
}
__device__ __forceinline__ float fsub(float a, float b) {
    return __fsub_rn(a, b);
}
__device__ __forceinline__ float fmul(float a, float b) {
    return __fmul_rn(a, b);
}
__device__ __forceinline__ float fdiv(float a, float b) {
    return __fdiv_rn(a, b);
}

// W consecutive BF16 values moved as one access: W = 8 is one 16-byte load or store, W = 1 the
// fallback for shapes or pointers that are not 16-byte aligned.
template <int W> struct alignas(2 * W) Bf16Pack { bf16 v[W]; };

template <int W> __device__ __forceinline__ Bf16Pack<W> load_pack(const bf16 *p) {
    return *reinterpret_cast<const Bf16Pack<W> *>(p);
}

template <int W> __device__ __forceinline__ void store_pack(bf16 *p, const Bf16Pack<W> &v) {
    *reinterpret_cast<Bf16Pack<W> *>(p) = v;
}

// Butterfly reductions: every lane ends with the same value (IEEE addition is commutative, so lanes
// i and i^k add the same two numbers at every level), and the order is fixed, so it is deterministic.
__device__ __forceinline__ float warp_sum(float v) {
    for (int k = 16; k > 0; k >>= 1) v = fadd(v, __shfl_xor_sync(FULL_MASK, v, k));
    return v;
}

__device__ __forceinline__ double warp_sum(double v) {
    for (int k = 16; k > 0; k >>= 1) v = __dadd_rn(v, __shfl_xor_sync(FULL_MASK, v, k));
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int k = 16; k > 0; k >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, k));
    return v;
}

// Sum over a 1-D block (blockDim.x a multiple of 32, at most 1024) that every thread receives. red
// holds 32 values in shared memory; the closing barrier lets the caller reuse it at once.
template <typename F> __device__ __forceinline__ F block_sum(F v, F *red) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    v = warp_sum(v);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = warp_sum(lane < nwarps ? red[lane] : (F)0);
    __syncthreads();
    return v;
}

__device__ __forceinline__ float block_max(float v, float *red) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    v = warp_max(v);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = warp_max(lane < nwarps ? red[lane] : -INFINITY);
    __syncthreads();
    return v;
}

// ---------------------------------------------------------------------------------------------------------
// Host helpers

inline bool aligned16(const void *p) {
    return ((uintptr_t)p & 15u) == 0;
}

// 8 when every pointer is 16-byte aligned and `multiple` (a row length or an element count) is a
// multiple of 8, so that every pack stays inside its row and aligned; 1 otherwise.
inline int pack_width(int64_t multiple, const void *p0, const void *p1 = nullptr, const void *p2 = nullptr,
                      const void *p3 = nullptr) {
    if (multiple % 8 != 0) return 1;
    return aligned16(p0) && aligned16(p1) && aligned16(p2) && aligned16(p3) ? 8 : 1;
}

} // namespace layers_impl

#endif // GPU_LAYER_COMMON_CUH

// gpu/cast_common.cuh: what the FP8 casts share (gpu/fp8_cast.cuh, gpu/block_cast.cuh, gpu/zero.cuh's shard
// amax and transpose): the exact atomic max of non-negative floats, the max over a block, an element read as
// a float, and the 32 x 32 tile of the transposing casts.
#ifndef GPU_CAST_COMMON_CUH
#define GPU_CAST_COMMON_CUH

#include "common.cuh"

// |x| >= 0, so the IEEE order of non-negative floats is the order of their bit patterns: an integer
// atomicMax is an exact, order-independent float max.
__device__ static inline void atomic_max_nonneg(float *address, float value) {
    atomicMax((int *)address, __float_as_int(value));
}

// Max over the block (1-D or 2-D, up to 1024 threads); the result is valid in thread (0,0).
__device__ static inline float block_max(float value) {
    __shared__ float warp_max[32];
    int thread = threadIdx.y * blockDim.x + threadIdx.x, warps = (blockDim.x * blockDim.y + 31) / 32;
    for (int offset = 16; offset > 0; offset >>= 1)
        value = fmaxf(value, __shfl_xor_sync(0xffffffff, value, offset));
    if (thread % 32 == 0) warp_max[thread / 32] = value;
    __syncthreads();
    if (thread >= 32) return value;
    value = thread < warps ? warp_max[thread] : 0.0f;
    for (int offset = 16; offset > 0; offset >>= 1)
        value = fmaxf(value, __shfl_xor_sync(0xffffffff, value, offset));
    return value;
}

template <typename T> __device__ static inline float to_float(T x);
template <> __device__ inline float to_float<float>(float x) {
    return x;
}
template <> __device__ inline float to_float<bf16>(bf16 x) {
    return __bfloat162float(x);
}

#define CAST_TILE 32

#endif // GPU_CAST_COMMON_CUH

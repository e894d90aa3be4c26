// gpu/fp8_cast.cuh: the per-tensor FP8 casts: a BF16 tensor cast (and transposed) to FP8 with one scale,
// recording its amax as it goes, and the amax measurement and exact scale of the current recipe and of the
// weights' casts. The scalar rules (conversion, scale from amax) are fp8_scaling.h's, the same code the CPU
// reference runs, so both quantize to the same bits given the same inputs.
#ifndef GPU_FP8_CAST_CUH
#define GPU_FP8_CAST_CUH

#include "../core/fp8_scaling.h"
#include "cast_common.cuh"
#include "common.cuh"

// What a cast reads at element i = row * cols + col: a stored tensor's value, or (Load types elsewhere:
// gpu/activations.cuh's GeluValues and SwigluValues, gpu/norms.cuh's LayerNormValues and RmsNormValues) the
// value its producing kernel would have stored, computed on the way instead, so that the tensor is never
// written and read back.
template <typename T> struct StoredValues {
    const T *in;
    __device__ float operator()(size_t i, int, int) const {
        return to_float(in[i]);
    }
};

// (rows, cols) -> out (rows, cols) and/or out_t (cols, rows), FP8 codes of x * scale, x = load(row * cols +
// col). A block casts CAST_ROWS rows of 32 columns, one 32x32 tile at a time staged in shared memory so that
// both the row-major and the transposed writes are coalesced. amax (optional): max |x| of the tensor, the
// step's record of this cast. counts (optional): the values this cast saturated and flushed to zero are
// added to counts[0] and counts[1] (integer atomics: order-independent, so deterministic). column_partials
// (optional, (rows / CAST_ROWS rounded up, cols)): each block's column sums of x, added in the order of
// gpu/reductions.cuh's column sums (each of the CAST_WARPS row threads every CAST_WARPS-th row, then the
// threads in order), whose second stage (bias_backward_from_partials) makes them a bias gradient.
#define CAST_ROWS 128
#define CAST_WARPS 8
template <typename Load>
__global__ void __launch_bounds__(32 * CAST_WARPS)
    cast_transpose_kernel(fp8 *out, fp8 *out_t, float *amax, unsigned long long *counts,
                          float *column_partials, Load load, int rows, int cols, const float *scale,
                          Fp8Format format) {
    __shared__ fp8 tile[CAST_TILE][CAST_TILE + 4];
    __shared__ float column_sum[CAST_WARPS][CAST_TILE];
    const int tile_col = blockIdx.x * CAST_TILE, col = tile_col + threadIdx.x;
    const float s = *scale;
    float local_amax = 0.0f, sum = 0.0f;
    unsigned saturated = 0, flushed = 0;
    for (int tile_row = blockIdx.y * CAST_ROWS; tile_row < min((int)(blockIdx.y + 1) * CAST_ROWS, rows);
         tile_row += CAST_TILE) {
        for (int r = threadIdx.y; r < CAST_TILE; r += CAST_WARPS) {
            int row = tile_row + r;
            if (row < rows && col < cols) {
                float x = load((size_t)row * cols + col, row, col);
                local_amax = fmaxf(local_amax, fabsf(x));
                sum = __fadd_rn(sum, x);
                fp8 q = fp8_quantize(x, s, format);
                saturated += fp8_is_saturated(x * s, format);
                flushed += fp8_is_flushed(x * s, format);
                tile[r][threadIdx.x] = q;
                if (out) out[(size_t)row * cols + col] = q;
            }
        }
        if (!out_t) continue;
        __syncthreads();
        for (int c = threadIdx.y; c < CAST_TILE; c += CAST_WARPS) {
            int tcol = tile_col + c, row = tile_row + threadIdx.x;
            if (row < rows && tcol < cols) out_t[(size_t)tcol * rows + row] = tile[threadIdx.x][c];
        }
        __syncthreads(); // the tile is read before the next one overwrites it
    }
    if (counts) {
        saturated = __reduce_add_sync(0xffffffff, saturated);
        flushed = __reduce_add_sync(0xffffffff, flushed);
        if (threadIdx.x == 0 && saturated) atomicAdd(&counts[0], (unsigned long long)saturated);
        if (threadIdx.x == 0 && flushed) atomicAdd(&counts[1], (unsigned long long)flushed);
    }
    if (amax) {
        float block_amax = block_max(local_amax);
        if (threadIdx.x == 0 && threadIdx.y == 0) atomic_max_nonneg(amax, block_amax);
    }
    if (!column_partials) return;
    column_sum[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y != 0 || col >= cols) return;
    sum = 0.0f;
    for (int y = 0; y < CAST_WARPS; y++) sum = __fadd_rn(sum, column_sum[y][threadIdx.x]);
    column_partials[(size_t)blockIdx.y * cols + col] = sum;
}

// max |x| into *amax (atomically). With a history given, only while that history is empty (the delayed
// recipe's measurement of a tensor no applied step has recorded yet); otherwise it returns at once.
template <typename T>
__global__ void amax_kernel(float *amax, const float *history, int history_len, const T *in, size_t n) {
    if (history && !fp8_history_empty(history, history_len)) return;
    float local = 0.0f;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        local = fmaxf(local, fabsf(to_float(in[i])));
    float block = block_max(local);
    if (threadIdx.x == 0) atomic_max_nonneg(amax, block);
}

// The exact scale (and its inverse) of n freshly measured amaxes. With histories (n of history_len), only
// the tensors whose history is empty: the others keep the delayed recipe's scale.
__global__ void scale_from_amax_kernel(float *scale, float *descale, const float *amax, const float *history,
                                       int history_len, int n, Fp8Format format, int margin) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    if (history && !fp8_history_empty(history + (size_t)i * history_len, history_len)) return;
    scale[i] = fp8_compute_scale(amax[i], format, margin);
    descale[i] = 1.0f / scale[i];
}

template <typename Load>
static inline void cast_transpose_values(fp8 *out, fp8 *out_t, float *amax, unsigned long long *counts,
                                         float *column_partials, Load load, int rows, int cols,
                                         const float *scale, Fp8Format format, cudaStream_t stream) {
    if (ceil_div(rows, CAST_ROWS) > 65535)
        fail("cast_transpose: %d rows exceed the grid limit (%d)", rows, 65535 * CAST_ROWS);
    dim3 grid(ceil_div(cols, CAST_TILE), ceil_div(rows, CAST_ROWS)), block(CAST_TILE, CAST_WARPS);
    launch<cast_transpose_kernel<Load>>({grid, block, 0, stream}, out, out_t, amax, counts, column_partials,
                                        load, rows, cols, scale, format);
}

template <typename T>
static inline void cast_transpose(fp8 *out, fp8 *out_t, float *amax, unsigned long long *counts, const T *in,
                                  int rows, int cols, const float *scale, Fp8Format format,
                                  cudaStream_t stream) {
    cast_transpose_values(out, out_t, amax, counts, (float *)NULL, StoredValues<T>{in}, rows, cols, scale,
                          format, stream);
}

// Measures max |x| into *amax (overwritten); with a history, only while it is empty (amax_kernel).
template <typename T>
static inline void measure_amax(float *amax, const float *history, int history_len, const T *in, size_t n,
                                cudaStream_t stream) {
    cuda_check(cudaMemsetAsync(amax, 0, sizeof(float), stream));
    int blocks = (int)(n / 4096 + 1 < 1024 ? n / 4096 + 1 : 1024);
    launch<amax_kernel<T>>({blocks, 256, 0, stream}, amax, history, history_len, in, n);
}

// Measures max |x| into *amax and derives the exact scale: the current recipe, and the weights' casts in
// both recipes.
template <typename T>
static inline void measure_scale(float *amax, float *scale, float *descale, const T *in, size_t n,
                                 Fp8Format format, int margin, cudaStream_t stream) {
    measure_amax<T>(amax, NULL, 0, in, n, stream);
    launch<scale_from_amax_kernel>({1, 32, 0, stream}, scale, descale, amax, (const float *)NULL, 0, 1,
                                   format, margin);
}

#endif // GPU_FP8_CAST_CUH

// gpu/block_cast.cuh: the FP8 casts of the block recipes (fp8_scaling.h's block scaling, blockwise and
// MXFP8): every block is measured and cast with its own scale; the GEMM reads each block's factor 1/scale
// from fp8_scaling.h's layouts.
#ifndef GPU_BLOCK_CAST_CUH
#define GPU_BLOCK_CAST_CUH

#include <float.h>

#include "../core/fp8_scaling.h"
#include "cast_common.cuh"
#include "common.cuh"

// Where a block cast records, in training: the tensor's amax, its saturated and flushed counts, and the
// smallest and largest scale of its blocks that are not all zero (the telemetry's spread). All optional.
typedef struct {
    float *amax;
    unsigned long long *counts;
    float *scale_min, *scale_max;
} BlockRecord;

// One block's measured amax into the record (thread-level: the caller picks one thread per block).
__device__ static inline void record_block(BlockRecord rec, float amax, float scale) {
    if (rec.amax) atomic_max_nonneg(rec.amax, amax);
    if (rec.scale_min && amax > 0.0f && amax <= FLT_MAX) { // an all-zero block's scale says nothing
        atomicMin((int *)rec.scale_min, __float_as_int(scale));
        atomic_max_nonneg(rec.scale_max, scale);
    }
}

// The warp's saturated and flushed counts into the record: one atomic per warp.
__device__ static inline void record_counts(BlockRecord rec, unsigned saturated, unsigned flushed) {
    if (!rec.counts) return;
    saturated = __reduce_add_sync(0xffffffff, saturated);
    flushed = __reduce_add_sync(0xffffffff, flushed);
    if (threadIdx.x % 32 == 0 && saturated) atomicAdd(&rec.counts[0], (unsigned long long)saturated);
    if (threadIdx.x % 32 == 0 && flushed) atomicAdd(&rec.counts[1], (unsigned long long)flushed);
}

// A block's dequantization factor 1/scale into the factors of the operand (rows, K), where the GEMM reads
// it: an FP32 in the VEC128 layout (BLOCKWISE) or an E8M0 byte in the VEC32_UE8M0 layout (MXFP8).
template <int RECIPE>
__device__ static inline void store_factor(void *factors, size_t rows, size_t K, size_t row, size_t k_tile,
                                           float scale) {
    float descale = fp8_block_descale(scale);
    if (fp8_recipe(RECIPE).scale_format == FP8_SCALE_E8M0)
        ((uint8_t *)factors)[fp8_mx_factor_index(K, row, k_tile)] = fp8_e8m0_from_pow2(descale);
    else
        ((float *)factors)[fp8_tile_factor_index(rows, row, k_tile)] = descale;
}

// x (rows, cols) in the recipe's 1 x b tiles along cols -> out (rows, cols), its factors for the operand
// (rows, K = cols). One warp per tile, b/32 values per lane.
template <typename T, int RECIPE>
__global__ void block_cast_rows_kernel(fp8 *out, void *factors, BlockRecord rec, const T *in, int rows,
                                       int cols, Fp8Format format, int margin, int pow2) {
    constexpr int TILE = fp8_block_size(RECIPE);
    int tile = (int)((blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32), lane = threadIdx.x % 32;
    int tiles_per_row = cols / TILE;
    if (tile >= rows * tiles_per_row) return; // the whole warp
    int row = tile / tiles_per_row, k_tile = tile % tiles_per_row;
    size_t base = (size_t)row * cols + (size_t)k_tile * TILE;
    float v[TILE / 32], amax = 0.0f;
    for (int i = 0; i < TILE / 32; i++) {
        v[i] = to_float(in[base + lane + 32 * i]);
        amax = fmaxf(amax, fabsf(v[i]));
    }
    for (int offset = 16; offset > 0; offset >>= 1)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffff, amax, offset));
    float scale = fp8_block_scale(amax, RECIPE, format, margin, pow2);
    unsigned saturated = 0, flushed = 0;
    for (int i = 0; i < TILE / 32; i++) {
        out[base + lane + 32 * i] = fp8_quantize(v[i], scale, format);
        saturated += fp8_is_saturated(v[i] * scale, format);
        flushed += fp8_is_flushed(v[i] * scale, format);
    }
    record_counts(rec, saturated, flushed);
    if (lane != 0) return;
    store_factor<RECIPE>(factors, rows, cols, row, k_tile, scale);
    record_block(rec, amax, scale);
}

#define BLOCK_CAST_COLS 32

// x (rows, cols) in the recipe's b x 1 tiles down the rows -> out_t (cols, rows), its transpose, whose rows
// are then 1 x b tiles along K = rows: factors for the operand (cols, K = rows). One block per b rows x 32
// columns (32 x 8 threads), staged in shared memory so that the transposed writes are coalesced.
template <typename T, int RECIPE>
__global__ void block_cast_cols_t_kernel(fp8 *out_t, void *factors, BlockRecord rec, const T *in, int rows,
                                         int cols, Fp8Format format, int margin, int pow2) {
    constexpr int TILE = fp8_block_size(RECIPE);
    __shared__ float column_amax[8][BLOCK_CAST_COLS];
    __shared__ fp8 tile[TILE][BLOCK_CAST_COLS + 4];
    int col = blockIdx.x * BLOCK_CAST_COLS + threadIdx.x, row0 = blockIdx.y * TILE;
    float amax = 0.0f;
    for (int r = threadIdx.y; r < TILE; r += blockDim.y)
        amax = fmaxf(amax, fabsf(to_float(in[(size_t)(row0 + r) * cols + col])));
    column_amax[threadIdx.y][threadIdx.x] = amax;
    __syncthreads();
    for (int y = 0; y < 8; y++) amax = fmaxf(amax, column_amax[y][threadIdx.x]);
    float scale = fp8_block_scale(amax, RECIPE, format, margin, pow2);
    unsigned saturated = 0, flushed = 0;
    for (int r = threadIdx.y; r < TILE; r += blockDim.y) {
        float x = to_float(in[(size_t)(row0 + r) * cols + col]);
        tile[r][threadIdx.x] = fp8_quantize(x, scale, format);
        saturated += fp8_is_saturated(x * scale, format);
        flushed += fp8_is_flushed(x * scale, format);
    }
    record_counts(rec, saturated, flushed);
    if (threadIdx.y == 0) {
        store_factor<RECIPE>(factors, cols, rows, col, blockIdx.y, scale);
        record_block(rec, amax, scale);
    }
    __syncthreads();
    int col0 = blockIdx.x * BLOCK_CAST_COLS;
    for (int c = threadIdx.y; c < BLOCK_CAST_COLS; c += blockDim.y)
        for (int r = threadIdx.x; r < TILE; r += 32) out_t[(size_t)(col0 + c) * rows + row0 + r] = tile[r][c];
}

// W (rows, cols) FP32 in 128 x 128 blocks -> out (rows, cols) in E4M3, its factors in the BLK128x128 layout
// of the operand (rows, K = cols) and of its transpose (cols, K = rows), which reads the same blocks. One
// block of 32 x 8 threads per 128 x 128 block.
template <typename T>
__global__ void block_cast_square_kernel(fp8 *out, float *factors, float *factors_t, BlockRecord rec,
                                         const T *in, int rows, int cols, int margin, int pow2) {
    __shared__ float block_scale;
    int row0 = blockIdx.y * FP8_BLOCKWISE_TILE, col0 = blockIdx.x * FP8_BLOCKWISE_TILE;
    float amax = 0.0f;
    for (int r = threadIdx.y; r < FP8_BLOCKWISE_TILE; r += blockDim.y)
        for (int c = threadIdx.x; c < FP8_BLOCKWISE_TILE; c += blockDim.x)
            amax = fmaxf(amax, fabsf(to_float(in[(size_t)(row0 + r) * cols + col0 + c])));
    amax = block_max(amax);
    if (threadIdx.x == 0 && threadIdx.y == 0) {
        float scale = fp8_block_scale(amax, FP8_RECIPE_BLOCKWISE, FP8_E4M3, margin, pow2);
        factors[fp8_square_factor_index(cols, row0, blockIdx.x)] = fp8_block_descale(scale);
        factors_t[fp8_square_factor_index(rows, col0, blockIdx.y)] = fp8_block_descale(scale);
        record_block(rec, amax, scale);
        block_scale = scale;
    }
    __syncthreads();
    float scale = block_scale;
    unsigned saturated = 0, flushed = 0;
    for (int r = threadIdx.y; r < FP8_BLOCKWISE_TILE; r += blockDim.y)
        for (int c = threadIdx.x; c < FP8_BLOCKWISE_TILE; c += blockDim.x) {
            size_t i = (size_t)(row0 + r) * cols + col0 + c;
            float x = to_float(in[i]);
            out[i] = fp8_quantize(x, scale, FP8_E4M3);
            saturated += fp8_is_saturated(x * scale, FP8_E4M3);
            flushed += fp8_is_flushed(x * scale, FP8_E4M3);
        }
    record_counts(rec, saturated, flushed);
}

// Sets n floats to value (the telemetry's fresh smallest scale is +inf, which no memset writes).
__global__ void fill_floats_kernel(float *out, float value, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = value;
}

// W (rows, cols), both multiples of 128, in 128 x 128 blocks (block_cast_square_kernel).
template <typename T>
static inline void block_cast_square(fp8 *out, float *factors, float *factors_t, BlockRecord rec, const T *in,
                                     int rows, int cols, int margin, int pow2, cudaStream_t stream) {
    dim3 grid(cols / FP8_BLOCKWISE_TILE, rows / FP8_BLOCKWISE_TILE), block(32, 8);
    launch<block_cast_square_kernel<T>>({grid, block, 0, stream}, out, factors, factors_t, rec, in, rows,
                                        cols, margin, pow2);
}

template <typename T, int RECIPE>
static inline void block_cast_recipe(fp8 *out, void *factors, fp8 *out_t, void *factors_t, BlockRecord rec,
                                     const T *in, int rows, int cols, Fp8Format format, int margin, int pow2,
                                     cudaStream_t stream) {
    constexpr int TILE = fp8_block_size(RECIPE);
    if (out) {
        size_t threads = (size_t)rows * (cols / TILE) * 32;
        launch<block_cast_rows_kernel<T, RECIPE>>({(int)((threads + 255) / 256), 256, 0, stream}, out,
                                                  factors, rec, in, rows, cols, format, margin, pow2);
    }
    if (out_t) {
        if (rows / TILE > 65535) fail("block_cast: %d rows exceed the grid limit (%d)", rows, 65535 * TILE);
        dim3 grid(cols / BLOCK_CAST_COLS, rows / TILE), block(BLOCK_CAST_COLS, 8);
        launch<block_cast_cols_t_kernel<T, RECIPE>>({grid, block, 0, stream}, out_t, factors_t, rec, in, rows,
                                                    cols, format, margin, pow2);
    }
}

// A block recipe's casts of x (rows, cols), both multiples of the block (and cols of 32): into out (tiles
// along cols) and/or into out_t (tiles along rows, transposed), each with its factors.
template <typename T>
static inline void block_cast(int recipe, fp8 *out, void *factors, fp8 *out_t, void *factors_t,
                              BlockRecord rec, const T *in, int rows, int cols, Fp8Format format, int margin,
                              int pow2, cudaStream_t stream) {
    if (recipe == FP8_RECIPE_MXFP8)
        block_cast_recipe<T, FP8_RECIPE_MXFP8>(out, factors, out_t, factors_t, rec, in, rows, cols, format,
                                               margin, pow2, stream);
    else
        block_cast_recipe<T, FP8_RECIPE_BLOCKWISE>(out, factors, out_t, factors_t, rec, in, rows, cols,
                                                   format, margin, pow2, stream);
}

#endif // GPU_BLOCK_CAST_CUH

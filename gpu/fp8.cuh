// gpu/fp8.cuh: the FP8 recipe on the device, and the optimizer step that feeds it.
//  - cast (+ transpose) of a BF16 tensor to FP8 with a per-tensor scale, recording its amax as it goes;
//  - the delayed-scaling update of the amax histories and scales, once per step, on the device;
//  - AdamW on the FP32 master weights, writing the BF16 copy; the exact-amax FP8 weight casts.
// The scalar rules (conversion, scale from amax, ring update) are fp8_scaling.h's, the same code the
// CPU reference runs, so both quantize to the same bits given the same inputs.
#ifndef GPU_FP8_CUH
#define GPU_FP8_CUH

#include <float.h>

#include "../core/fp8_scaling.h"
#include "../core/gpt_model.h"
#include "../core/health.h"
#include "common.cuh"

// Per-step values the host sets before the step (copied from pinned memory, so a captured graph sees the
// new values each replay) and the results it reads back after it. The host sets a step's values before it
// has read the previous step's results: what depends on them (the guard's window, the AdamW step count) is
// kept and updated on the device.
typedef struct {
    float lr, beta1, beta2, eps, weight_decay, grad_clip;
    // 1 - beta^t of this update: step_decide_kernel picks it from the candidates, those for t =
    // updates_known + 1 and + 2 (the previous step, unread by the host, may have been an update)
    float beta1_correction, beta2_correction;
    float beta1_candidates[2], beta2_candidates[2];
    long long updates_known;
    float inv_micro_batches; // 1 / (accumulation steps x ranks): the step's loss is the mean over all of them
    int fp8_margin, history_len;
    long long step;                 // optimizer step index: the slot of the amax ring buffers
    float skip_loss_z, skip_norm_z; // the step guard (health.h), 0 when off
    int guard_window;
    int keep_fp8_counts; // the host reads this step's FP8 telemetry: leave the counts for it to copy and
                         // reset
    int inject_nan;      // test: make this step's gradient NaN
    int stop_vote;       // this rank asks to stop after this step (run_control.h)
} StepParams;

typedef struct {
    float loss_sum;      // sum of the micro-batch mean losses of this step (over all ranks once reduced)
    float stop_votes;    // ranks that asked to stop after this step (run_control.h): reduced with loss_sum
    float val_loss_sum;  // sum of the mean losses of evaluated batches (validation, BF16 shadow check)
    double norm_squared; // of the accumulated FP32 gradients (all of them, over all ranks)
    float loss, grad_norm;
    int skipped;                  // SKIP_* (train_log.h): why the update was not applied, 0 when it was
    long long updates_applied;    // AdamW updates so far, skipped steps not counted
    long long guard_count;        // finite steps recorded in the guard's window so far (health.h)
    SaturationSummary saturation; // float8: this step's saturated values over every FP8 tensor
    double host_values[4]; // host values on their way through a collective (NCCL reduces device memory)
} StepResults;

// Device views of the FP8 scaling state (one allocation, see memory_plan.h's fp8_state_floats). The step's
// measured amaxes (amax_current, then weight_amax) are adjacent: with several ranks one max-all-reduce of
// num_tensors + num_weights floats makes every rank's scales identical.
typedef struct {
    int num_tensors, num_weights, history_len;
    float *amax_history;                  // (num_tensors, history_len)
    float *amax_current;                  // (num_tensors) this step's, recorded by the casts
    float *weight_amax;                   // (num_weights) follows amax_current
    float *scale;                         // (num_tensors)
    float *descale;                       // (num_tensors) 1/scale, what cuBLASLt multiplies by
    float *weight_scale, *weight_descale; // (num_weights)
    float *amax_measure;                  // (num_tensors) current recipe: the amax of the cast about to run
    float *amax_last;                     // (num_tensors) the last step's amax, for telemetry
    float *scale_last;                    // (num_tensors) the scale the last step's casts used, for telemetry
    unsigned long long *counts; // (num_tensors + num_weights, 2) saturated and flushed values this step
} Fp8DeviceState;

static inline void fp8_state_views(Fp8DeviceState *s, float *base, int num_layers, int history_len) {
    s->num_tensors = num_layers * NUM_BLOCK_LINEARS * 2;
    s->num_weights = num_layers * NUM_BLOCK_LINEARS;
    s->history_len = history_len;
    s->amax_history = base;
    s->amax_current = s->amax_history + (size_t)s->num_tensors * history_len;
    s->weight_amax = s->amax_current + s->num_tensors;
    s->scale = s->weight_amax + s->num_weights;
    s->descale = s->scale + s->num_tensors;
    s->weight_scale = s->descale + s->num_tensors;
    s->weight_descale = s->weight_scale + s->num_weights;
    s->amax_measure = s->weight_descale + s->num_weights;
    s->amax_last = s->amax_measure + s->num_tensors;
    s->scale_last = s->amax_last + s->num_tensors;
    s->counts =
        (unsigned long long *)(s->scale_last + s->num_tensors + (s->num_tensors % 2)); // 8-byte aligned
}

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

// What a cast reads at element i = row * cols + col: a stored tensor's value, or (Load types elsewhere:
// gpu/layers.cuh's GeluValues, LayerNormValues, RmsNormValues, SwigluValues) the value its producing kernel
// would have stored, computed
// on the way instead, so that the tensor is never written and read back.
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
// gpu/layers.cuh's column sums (each of the CAST_WARPS row threads every CAST_WARPS-th row, then the
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

// ----------------------------------------------------------------------------
// The block recipes (fp8_scaling.h's block scaling): every block is measured and cast with its own scale;
// the GEMM reads each block's factor 1/scale from fp8_scaling.h's layouts.

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

// Scales of every delayed tensor from its history (a fresh run: all 1, unused while the history is empty:
// the casts measure), as after a resume.
__global__ void scales_from_history_kernel(Fp8DeviceState s, int margin) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= s.num_tensors) return;
    Fp8Format format = (i % 2) ? FP8_E5M2 : FP8_E4M3;
    s.scale[i] = fp8_compute_scale(fp8_history_max(s.amax_history + (size_t)i * s.history_len, s.history_len),
                                   format, margin);
    s.descale[i] = 1.0f / s.scale[i];
}

// Once per step, after the update decision: the step's amaxes are kept for telemetry and, with the
// delayed recipe, enter the histories (a skipped step's are dropped), and the next step's scales follow.
__global__ void fp8_end_step_kernel(Fp8DeviceState s, int delayed, const StepParams *params,
                                    const StepResults *results) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= s.num_tensors) return;
    s.amax_last[i] = s.amax_current[i];
    s.scale_last[i] = s.scale[i];
    if (!delayed || results->skipped) {
        s.amax_current[i] = 0.0f;
        return;
    }
    Fp8Format format = (i % 2) ? FP8_E5M2 : FP8_E4M3;
    fp8_delayed_update(s.amax_history + (size_t)i * s.history_len, s.history_len, (long)params->step,
                       &s.amax_current[i], &s.scale[i], format, params->fp8_margin);
    s.descale[i] = 1.0f / s.scale[i];
}

// ----------------------------------------------------------------------------
// The optimizer step

// Adds the mean of losses (N) to *sum, in a fixed order (one block): deterministic.
__global__ void accumulate_mean_kernel(float *sum, const float *losses, int N) {
    __shared__ double partial[256];
    double local = 0.0;
    for (int i = threadIdx.x; i < N; i += blockDim.x) local += losses[i];
    partial[threadIdx.x] = local;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if ((int)threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) *sum += (float)(partial[0] / N);
}

// The step's loss and gradient norm, and whether to apply it: health.h's guard, as on the CPU, on the
// device's copy of its window (2, window) (losses, then norms). A finite step enters the window; an update
// takes this update's bias corrections and counts itself.
__global__ void step_decide_kernel(StepResults *results, StepParams *params, float *guard_history) {
    const float loss = results->loss_sum * params->inv_micro_batches,
                norm = (float)sqrt(results->norm_squared);
    const int window = params->guard_window;
    results->loss = loss;
    results->loss_sum = 0.0f;
    results->grad_norm = norm;
    results->skipped = step_skip_reason(
        loss, norm, guard_threshold(guard_history, results->guard_count, window, params->skip_loss_z),
        guard_threshold(guard_history + window, results->guard_count, window, params->skip_norm_z));
    if (results->skipped != SKIP_NONFINITE)
        guard_record(guard_history, window, &results->guard_count, loss, norm);
    if (results->skipped) return;
    const long long pick = results->updates_applied - params->updates_known; // 0 or 1
    params->beta1_correction = params->beta1_candidates[pick];
    params->beta2_correction = params->beta2_candidates[pick];
    results->updates_applied++;
}

// float8, once a step: the step's saturated values summed up for the host's per-step line, then, unless
// the host reads this step's telemetry whole (it resets what it copied), fresh counts and block-scale
// spreads for the next step. counts: (num_counted, 2) saturated and flushed; block_min/max NULL without
// a block recipe. One block.
__global__ void fp8_step_telemetry_kernel(StepResults *results, unsigned long long *counts, float *block_min,
                                          float *block_max, int num_counted, const StepParams *params) {
    if (threadIdx.x == 0) results->saturation = saturation_summary(counts, 2, num_counted);
    __syncthreads();
    if (params->keep_fp8_counts) return;
    for (int i = threadIdx.x; i < 2 * num_counted; i += blockDim.x) counts[i] = 0;
    if (!block_min) return;
    for (int i = threadIdx.x; i < num_counted; i += blockDim.x) block_min[i] = INFINITY, block_max[i] = 0.0f;
}

// This rank's vote to stop after the step, into the results beside the loss sum, whose all-reduce sums the
// votes of every rank.
__global__ void stop_vote_kernel(StepResults *results, const StepParams *params) {
    results->stop_votes = (float)params->stop_vote;
}

// Test hook (--inject_nan_step): a NaN in the gradient, which the guard must catch.
__global__ void inject_nan_kernel(float *grads, const StepParams *params) {
    if (params->inject_nan) grads[0] = NAN;
}

// One parameter's AdamW step: the formula of the CPU's adamw_update, spelled with the _rn intrinsics in its
// order of operations. nvcc would otherwise fuse the products and sums into FMAs, which the CPU (ISO C, no
// contraction) does not do, and every step would move the weights by a last-bit different amount.
__device__ __forceinline__ float adamw_param_step(float param, float grad, float &m, float &v,
                                                  float weight_decay, float grad_scale, const StepParams *p) {
    grad = __fmul_rn(grad, grad_scale);
    m = __fadd_rn(__fmul_rn(p->beta1, m), __fmul_rn(1.0f - p->beta1, grad));
    v = __fadd_rn(__fmul_rn(p->beta2, v), __fmul_rn(__fmul_rn(1.0f - p->beta2, grad), grad));
    float m_hat = __fdiv_rn(m, p->beta1_correction), v_hat = __fdiv_rn(v, p->beta2_correction);
    float step =
        __fadd_rn(__fdiv_rn(m_hat, __fadd_rn(__fsqrt_rn(v_hat), p->eps)), __fmul_rn(weight_decay, param));
    return __fsub_rn(param, __fmul_rn(p->lr, step));
}

__device__ __forceinline__ void adamw_scalar(float *params, bf16 *params_bf16, const float *grads, float *m,
                                             float *v, size_t i, float weight_decay, float grad_scale,
                                             const StepParams *p) {
    params[i] = adamw_param_step(params[i], grads[i], m[i], v[i], weight_decay, grad_scale, p);
    if (params_bf16) params_bf16[i] = __float2bfloat16_rn(params[i]);
}

// AdamW on n consecutive parameters that share their weight decay (a run of tensors that all decay, or of
// tensors that none do: the host launches one per run, so no element looks up its tensor). decayed: apply
// the step's weight decay. Four elements per thread with 16-byte loads and stores from the first 16-byte
// boundary of params on, when grads, m and v share its alignment (element offsets into 256-byte aligned
// buffers: they do); the elements before and after, one at a time. The BF16 copy is written per element
// (its offset into the copy need not be 8-byte aligned).
__global__ void adamw_kernel(float *params, bf16 *params_bf16, const float *grads, float *m, float *v,
                             size_t n, int decayed, const StepParams *p, const StepResults *results) {
    if (results->skipped) return;
    const StepParams step = *p; // in registers: the stores below could alias it as far as nvcc knows
    p = &step;
    const float norm = results->grad_norm;
    const float grad_scale =
        (p->grad_clip > 0.0f && norm > p->grad_clip) ? __fdiv_rn(p->grad_clip, norm) : 1.0f;
    const float weight_decay = decayed ? p->weight_decay : 0.0f;
    const uintptr_t misalignment = (uintptr_t)params % 16;
    const bool vectors = (uintptr_t)grads % 16 == misalignment && (uintptr_t)m % 16 == misalignment &&
                         (uintptr_t)v % 16 == misalignment && misalignment % 4 == 0;
    const size_t head = vectors ? (size_t)min((uintptr_t)n, (16 - misalignment) % 16 / 4) : n;
    const size_t quads = (n - head) / 4, thread = (size_t)blockIdx.x * blockDim.x + threadIdx.x,
                 threads = (size_t)gridDim.x * blockDim.x;
    for (size_t i = thread; i < head; i += threads)
        adamw_scalar(params, params_bf16, grads, m, v, i, weight_decay, grad_scale, p);
    for (size_t q = thread; q < quads; q += threads) {
        const size_t i = head + 4 * q;
        float4 pw = *reinterpret_cast<const float4 *>(params + i),
               mw = *reinterpret_cast<const float4 *>(m + i), vw = *reinterpret_cast<const float4 *>(v + i);
        const float4 gw = *reinterpret_cast<const float4 *>(grads + i);
        pw.x = adamw_param_step(pw.x, gw.x, mw.x, vw.x, weight_decay, grad_scale, p);
        pw.y = adamw_param_step(pw.y, gw.y, mw.y, vw.y, weight_decay, grad_scale, p);
        pw.z = adamw_param_step(pw.z, gw.z, mw.z, vw.z, weight_decay, grad_scale, p);
        pw.w = adamw_param_step(pw.w, gw.w, mw.w, vw.w, weight_decay, grad_scale, p);
        *reinterpret_cast<float4 *>(params + i) = pw;
        *reinterpret_cast<float4 *>(m + i) = mw;
        *reinterpret_cast<float4 *>(v + i) = vw;
        if (params_bf16) {
            params_bf16[i] = __float2bfloat16_rn(pw.x);
            params_bf16[i + 1] = __float2bfloat16_rn(pw.y);
            params_bf16[i + 2] = __float2bfloat16_rn(pw.z);
            params_bf16[i + 3] = __float2bfloat16_rn(pw.w);
        }
    }
    for (size_t i = head + 4 * quads + thread; i < n; i += threads)
        adamw_scalar(params, params_bf16, grads, m, v, i, weight_decay, grad_scale, p);
}

__global__ void to_bf16_kernel(bf16 *out, const float *in, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = __float2bfloat16_rn(in[i]);
}

#endif // GPU_FP8_CUH

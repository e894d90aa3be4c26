// gpu/reductions.cuh: the deterministic sums across rows, each in two stages through the caller's scratch:
// column sums (bias gradients, the norms' weight gradients) and the gradient's sum of squares.
#ifndef GPU_REDUCTIONS_CUH
#define GPU_REDUCTIONS_CUH

#include "layer_common.cuh"

namespace layers_impl {

// ---------------------------------------------------------------------------------------------------------
// Column sums over rows (bias gradients, LayerNorm weight and bias gradients, RMSNorm weight gradients),
// deterministic in two
// stages. Stage 1: a block of 32 columns x 8 warps sums one chunk of COLSUM_ROWS rows (warp y takes
// rows y, y+8, ...; the 8 warp sums are then added in order y = 0..7) into partial[chunk][col].
// Stage 2: one thread per column adds the chunks in order and adds the total to the gradient.

constexpr int COLSUM_ROWS = 128;
constexpr int COLSUM_WARPS = 8;

enum ColumnSum { COLSUM_BIAS, COLSUM_LAYERNORM, COLSUM_RMSNORM };

// LAYERNORM: partial_a gets sum dout * norm (dweight) and partial_b sum dout (dbias); RMSNORM: partial_a
// gets sum dout * inp * rstd (dweight, the CPU's order), mean and partial_b unused; BIAS: partial_a gets
// sum dout and inp, mean, rstd, partial_b are unused.
template <ColumnSum MODE>
static __global__ void __launch_bounds__(32 * COLSUM_WARPS)
    column_partials_kernel(float *partial_a, float *partial_b, const bf16 *dout, const bf16 *inp,
                           const float *mean, const float *rstd, int N, int OC) {
    __shared__ float red_a[COLSUM_WARPS][32], red_b[COLSUM_WARPS][32];
    const int col = blockIdx.x * 32 + threadIdx.x, chunk = blockIdx.y;
    const int row_end = min((chunk + 1) * COLSUM_ROWS, N);
    float a = 0.0f, b = 0.0f;
    if (col < OC) {
        for (int r = chunk * COLSUM_ROWS + threadIdx.y; r < row_end; r += COLSUM_WARPS) {
            const float dy = bf2f(dout[(size_t)r * OC + col]);
            if (MODE == COLSUM_RMSNORM) {
                a = fadd(a, fmul(fmul(dy, bf2f(inp[(size_t)r * OC + col])), rstd[r]));
            } else if (MODE == COLSUM_LAYERNORM) {
                const float norm = fmul(fsub(bf2f(inp[(size_t)r * OC + col]), mean[r]), rstd[r]);
                a = fadd(a, fmul(dy, norm));
                b = fadd(b, dy);
            } else {
                a = fadd(a, dy);
            }
        }
    }
    red_a[threadIdx.y][threadIdx.x] = a;
    red_b[threadIdx.y][threadIdx.x] = b;
    __syncthreads();
    if (threadIdx.y != 0 || col >= OC) return;
    a = 0.0f;
    b = 0.0f;
    for (int y = 0; y < COLSUM_WARPS; y++) {
        a = fadd(a, red_a[y][threadIdx.x]);
        b = fadd(b, red_b[y][threadIdx.x]);
    }
    partial_a[(size_t)chunk * OC + col] = a;
    if (MODE == COLSUM_LAYERNORM) partial_b[(size_t)chunk * OC + col] = b;
}

static __global__ void column_partials_finish_kernel(float *dst, const float *partial, int nchunks, int OC) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= OC) return;
    float acc = 0.0f;
    for (int k = 0; k < nchunks; k++) acc = fadd(acc, partial[(size_t)k * OC + col]);
    dst[col] = fadd(dst[col], acc);
}

// ---------------------------------------------------------------------------------------------------------
// Sum of squares in double: per-block partials over a grid-stride range, then one block adds them.

constexpr int NORM_THREADS = 256;
constexpr int NORM_MAX_BLOCKS = 1024;

static __global__ void __launch_bounds__(NORM_THREADS)
    norm_partials_kernel(double *partial, const float *x, size_t n) {
    __shared__ double red[32];
    double acc = 0.0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const double v = x[i];
        acc = __dadd_rn(acc, __dmul_rn(v, v)); // exact square: a float times a float fits a double
    }
    acc = block_sum(acc, red);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

static __global__ void __launch_bounds__(NORM_MAX_BLOCKS)
    norm_finish_kernel(double *out, const double *partial, int nblocks) {
    __shared__ double red[32];
    const double v = block_sum((int)threadIdx.x < nblocks ? partial[threadIdx.x] : 0.0, red);
    if (threadIdx.x == 0) out[0] = v;
}

inline int colsum_chunks(int N) {
    return ceil_div(N, COLSUM_ROWS);
}

inline int norm_blocks(size_t n) {
    const size_t per_block = (size_t)NORM_THREADS * 8;
    const size_t blocks = (n + per_block - 1) / per_block;
    return blocks < 1 ? 1 : blocks > (size_t)NORM_MAX_BLOCKS ? NORM_MAX_BLOCKS : (int)blocks;
}

// The second stage of a column sum: dst (OC) += the nchunks partial sums of each column, in order.
inline void finish_column_sums(float *dst, const float *partial, int nchunks, int OC, cudaStream_t stream) {
    launch<column_partials_finish_kernel>({ceil_div(OC, 256), 256, 0, stream}, dst, partial, nchunks, OC);
}

// Both stages of a column sum (bias_backward, layernorm_backward's parameter gradients: with dst_b;
// rmsnorm_backward's: inp and no dst_b).
inline void column_sums(float *dst_a, float *dst_b, const bf16 *dout, const bf16 *inp, const float *mean,
                        const float *rstd, int N, int OC, float *scratch, cudaStream_t stream) {
    const int nchunks = colsum_chunks(N);
    if (nchunks > 65535) fail("column sums: %d rows exceed the grid limit (%d)", N, 65535 * COLSUM_ROWS);
    float *partial_a = scratch, *partial_b = scratch + (size_t)nchunks * OC;
    const dim3 grid(ceil_div(OC, 32), nchunks), block(32, COLSUM_WARPS);
    if (dst_b)
        launch<column_partials_kernel<COLSUM_LAYERNORM>>({grid, block, 0, stream}, partial_a, partial_b, dout,
                                                         inp, mean, rstd, N, OC);
    else if (inp)
        launch<column_partials_kernel<COLSUM_RMSNORM>>({grid, block, 0, stream}, partial_a, nullptr, dout,
                                                       inp, nullptr, rstd, N, OC);
    else
        launch<column_partials_kernel<COLSUM_BIAS>>({grid, block, 0, stream}, partial_a, nullptr, dout,
                                                    nullptr, nullptr, nullptr, N, OC);
    finish_column_sums(dst_a, partial_a, nchunks, OC, stream);
    if (dst_b) finish_column_sums(dst_b, partial_b, nchunks, OC, stream);
}

} // namespace layers_impl

// ---------------------------------------------------------------------------------------------------------
// Reductions

inline size_t bias_backward_scratch_floats(int N, int OC) {
    return (size_t)layers_impl::colsum_chunks(N) * (size_t)OC;
}

// dbias (OC) += sum over the N rows of dout (N,OC). scratch: bias_backward_scratch_floats(N, OC).
inline void bias_backward(float *dbias, const bf16 *dout, int N, int OC, float *scratch,
                          cudaStream_t stream) {
    if (N <= 0 || OC <= 0) return;
    layers_impl::column_sums(dbias, nullptr, dout, nullptr, nullptr, nullptr, N, OC, scratch, stream);
}

// The rows of each partial sum of the column sums (bias_backward's first stage), and the threads that add
// them: what a producer that sums columns on the way must match (gpu/fp8_cast.cuh's cast_transpose_kernel).
constexpr int COLUMN_SUM_ROWS = layers_impl::COLSUM_ROWS, COLUMN_SUM_THREADS_Y = layers_impl::COLSUM_WARPS;

// dbias (OC) += the column sums of partials ((N / COLUMN_SUM_ROWS rounded up, OC), in bias_backward's
// order): bias_backward's second stage, for partial sums a producer wrote on the way.
inline void bias_backward_from_partials(float *dbias, const float *partials, int N, int OC,
                                        cudaStream_t stream) {
    if (N <= 0 || OC <= 0) return;
    layers_impl::finish_column_sums(dbias, partials, layers_impl::colsum_chunks(N), OC, stream);
}

inline size_t global_norm_squared_scratch_floats(size_t n) {
    return 2 * (size_t)layers_impl::norm_blocks(n); // one double per block
}

// out[0] = (float) sum of x[i]^2 (overwritten), accumulated in double. scratch (8-byte aligned):
// global_norm_squared_scratch_floats(n).
// out: the sum of squares in double, so that the caller takes (float)sqrt(sum) as the CPU reference does.
inline void global_norm_squared(double *out, const float *x, size_t n, float *scratch, cudaStream_t stream) {
    using namespace layers_impl;
    if (((uintptr_t)scratch & 7u) != 0) fail("global_norm_squared: scratch must be 8-byte aligned (doubles)");
    const int blocks = norm_blocks(n);
    double *partial = reinterpret_cast<double *>(scratch);
    launch<norm_partials_kernel>({blocks, NORM_THREADS, 0, stream}, partial, x, n);
    launch<norm_finish_kernel>({1, NORM_MAX_BLOCKS, 0, stream}, out, partial, blocks);
}

#endif // GPU_REDUCTIONS_CUH

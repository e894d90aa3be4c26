// gpu/norms.cuh: the residual add and the norms that read it, LayerNorm and Llama's RMSNorm (each fused
// with the add before it), forward and backward, and the values an FP8 cast computes in place of a norm's
// stored output.
#ifndef GPU_NORMS_CUH
#define GPU_NORMS_CUH

#include "layer_common.cuh"
#include "reductions.cuh"

namespace layers_impl {

// ---------------------------------------------------------------------------------------------------------
// LayerNorm and RMSNorm (Llama): (N,C) -> (N,C). One warp per row; the row is read once per pass (the later
// passes hit in L1/L2) rather than held in registers, which would not fit for C = 8192.

constexpr int LN_WARPS = 8;          // rows per block
constexpr float RMSNORM_EPS = 1e-5f; // model_file.h's LLAMA_NORM_EPS (train_gpt_fp8.cu checks)

// y = x * rstd * weight, in the CPU's order
__device__ __forceinline__ float rmsnorm_value(float x, float rstd, bf16 weight) {
    return fmul(fmul(x, rstd), bf2f(weight));
}

// y = (x - mean) * rstd * weight + bias, in the CPU's order
__device__ __forceinline__ float layernorm_value(float x, float mean, float rstd, bf16 weight, bf16 bias) {
    return fadd(fmul(fmul(fsub(x, mean), rstd), bf2f(weight)), bf2f(bias));
}

// add (optional): the norm of inp + add, that sum written to sum_out first (residual_forward's bits),
// its first pass adding up the row (RMS: its squares) from registers and the later ones reading it back
// (this thread's own writes). RMS: Llama's RMSNorm, no mean (NULL) and no bias.
template <int W, bool RMS>
static __global__ void __launch_bounds__(32 * LN_WARPS)
    layernorm_forward_kernel(bf16 *out, float *mean, float *rstd, bf16 *sum_out, const bf16 *inp,
                             const bf16 *add, const bf16 *weight, const bf16 *bias, int N, int C) {
    const int lane = threadIdx.x % 32, row = blockIdx.x * LN_WARPS + threadIdx.x / 32;
    if (row >= N) return; // the whole warp leaves: no block-level barrier below
    const bf16 *x = (add ? sum_out : inp) + (size_t)row * C;
    float sum = 0.0f;
    for (int c = lane * W; c < C; c += 32 * W) {
        Bf16Pack<W> xp = load_pack<W>(inp + (size_t)row * C + c);
        if (add) {
            const Bf16Pack<W> ap = load_pack<W>(add + (size_t)row * C + c);
#pragma unroll
            for (int k = 0; k < W; k++) xp.v[k] = f2bf(fadd(bf2f(xp.v[k]), bf2f(ap.v[k])));
            store_pack<W>(sum_out + (size_t)row * C + c, xp);
        }
#pragma unroll
        for (int k = 0; k < W; k++) sum = fadd(sum, RMS ? fmul(bf2f(xp.v[k]), bf2f(xp.v[k])) : bf2f(xp.v[k]));
    }
    if (RMS) {
        const float s = fdiv(1.0f, __fsqrt_rn(fadd(fdiv(warp_sum(sum), (float)C), RMSNORM_EPS)));
        if (lane == 0) rstd[row] = s;
        if (!out) return;
        for (int c = lane * W; c < C; c += 32 * W) {
            const Bf16Pack<W> xp = load_pack<W>(x + c), wp = load_pack<W>(weight + c);
            Bf16Pack<W> o;
#pragma unroll
            for (int k = 0; k < W; k++) o.v[k] = f2bf(rmsnorm_value(bf2f(xp.v[k]), s, wp.v[k]));
            store_pack<W>(out + (size_t)row * C + c, o);
        }
        return;
    }
    const float m = fdiv(warp_sum(sum), (float)C);
    // Two passes, as the CPU: the variance of the centred values, not E[x^2] - m^2.
    float var = 0.0f;
    for (int c = lane * W; c < C; c += 32 * W) {
        const Bf16Pack<W> xp = load_pack<W>(x + c);
#pragma unroll
        for (int k = 0; k < W; k++) {
            const float d = fsub(bf2f(xp.v[k]), m);
            var = fadd(var, fmul(d, d));
        }
    }
    const float s = fdiv(1.0f, __fsqrt_rn(fadd(fdiv(warp_sum(var), (float)C), 1e-5f)));
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
    if (!out) return; // the statistics only: an FP8 cast computes the output (LayerNormValues)
    for (int c = lane * W; c < C; c += 32 * W) {
        const Bf16Pack<W> xp = load_pack<W>(x + c), wp = load_pack<W>(weight + c),
                          bp = load_pack<W>(bias + c);
        Bf16Pack<W> o;
#pragma unroll
        for (int k = 0; k < W; k++) o.v[k] = f2bf(layernorm_value(bf2f(xp.v[k]), m, s, wp.v[k], bp.v[k]));
        store_pack<W>(out + (size_t)row * C + c, o);
    }
}

// The input gradient, added to dresidual with one rounding: one warp per row.
template <int W>
static __global__ void __launch_bounds__(32 * LN_WARPS)
    layernorm_backward_dinp_kernel(bf16 *dresidual, const bf16 *dout, const bf16 *inp, const bf16 *weight,
                                   const float *mean, const float *rstd, int N, int C) {
    const int lane = threadIdx.x % 32, row = blockIdx.x * LN_WARPS + threadIdx.x / 32;
    if (row >= N) return;
    const bf16 *dy = dout + (size_t)row * C, *x = inp + (size_t)row * C;
    bf16 *dres = dresidual + (size_t)row * C;
    const float mu = mean[row], rs = rstd[row];
    float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
    for (int c = lane * W; c < C; c += 32 * W) {
        const Bf16Pack<W> dp = load_pack<W>(dy + c), xp = load_pack<W>(x + c), wp = load_pack<W>(weight + c);
#pragma unroll
        for (int k = 0; k < W; k++) {
            const float wdy = fmul(bf2f(wp.v[k]), bf2f(dp.v[k]));
            const float norm = fmul(fsub(bf2f(xp.v[k]), mu), rs);
            dnorm_sum = fadd(dnorm_sum, wdy);
            dnorm_norm_sum = fadd(dnorm_norm_sum, fmul(wdy, norm));
        }
    }
    const float dnorm_mean = fdiv(warp_sum(dnorm_sum), (float)C);
    const float dnorm_norm_mean = fdiv(warp_sum(dnorm_norm_sum), (float)C);
    for (int c = lane * W; c < C; c += 32 * W) {
        const Bf16Pack<W> dp = load_pack<W>(dy + c), xp = load_pack<W>(x + c), wp = load_pack<W>(weight + c);
        Bf16Pack<W> rp = load_pack<W>(dres + c);
#pragma unroll
        for (int k = 0; k < W; k++) {
            const float wdy = fmul(bf2f(wp.v[k]), bf2f(dp.v[k]));
            const float norm = fmul(fsub(bf2f(xp.v[k]), mu), rs);
            const float dinp = fmul(fsub(fsub(wdy, dnorm_mean), fmul(norm, dnorm_norm_mean)), rs);
            rp.v[k] = f2bf(fadd(bf2f(rp.v[k]), dinp));
        }
        store_pack<W>(dres + c, rp);
    }
}

// RMSNorm's input gradient, added to dresidual with one rounding: one warp per row. The CPU's
// dx = s * (w * dy - x * (s * s * sum(w * dy * x) / C)).
template <int W>
static __global__ void __launch_bounds__(32 * LN_WARPS)
    rmsnorm_backward_dinp_kernel(bf16 *dresidual, const bf16 *dout, const bf16 *inp, const bf16 *weight,
                                 const float *rstd, int N, int C) {
    const int lane = threadIdx.x % 32, row = blockIdx.x * LN_WARPS + threadIdx.x / 32;
    if (row >= N) return;
    const bf16 *dy = dout + (size_t)row * C, *x = inp + (size_t)row * C;
    bf16 *dres = dresidual + (size_t)row * C;
    const float rs = rstd[row];
    float dot = 0.0f;
    for (int c = lane * W; c < C; c += 32 * W) {
        const Bf16Pack<W> dp = load_pack<W>(dy + c), xp = load_pack<W>(x + c), wp = load_pack<W>(weight + c);
#pragma unroll
        for (int k = 0; k < W; k++) dot = fadd(dot, fmul(fmul(bf2f(wp.v[k]), bf2f(dp.v[k])), bf2f(xp.v[k])));
    }
    const float coefficient = fdiv(fmul(fmul(rs, rs), warp_sum(dot)), (float)C);
    for (int c = lane * W; c < C; c += 32 * W) {
        const Bf16Pack<W> dp = load_pack<W>(dy + c), xp = load_pack<W>(x + c), wp = load_pack<W>(weight + c);
        Bf16Pack<W> rp = load_pack<W>(dres + c);
#pragma unroll
        for (int k = 0; k < W; k++) {
            const float wdy = fmul(bf2f(wp.v[k]), bf2f(dp.v[k]));
            const float dinp = fmul(rs, fsub(wdy, fmul(bf2f(xp.v[k]), coefficient)));
            rp.v[k] = f2bf(fadd(bf2f(rp.v[k]), dinp));
        }
        store_pack<W>(dres + c, rp);
    }
}

// ---------------------------------------------------------------------------------------------------------
// Residual, elementwise: one thread per W elements.

template <int W>
static __global__ void residual_forward_kernel(bf16 *out, const bf16 *a, const bf16 *b, size_t n) {
    const size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * W;
    if (i >= n) return;
    const Bf16Pack<W> ap = load_pack<W>(a + i), bp = load_pack<W>(b + i);
    Bf16Pack<W> o;
#pragma unroll
    for (int k = 0; k < W; k++) o.v[k] = f2bf(fadd(bf2f(ap.v[k]), bf2f(bp.v[k])));
    store_pack<W>(out + i, o);
}

// The forward launch both norms share (RMS: Llama's RMSNorm, no mean and no bias): one pack width for the sum
// and the rows read back, layernorm_forward's on sum_out, so that the sums run in the same order either way.
template <bool RMS>
inline void residual_norm_forward(bf16 *out, float *mean, float *rstd, bf16 *sum_out, const bf16 *inp,
                                  const bf16 *add, const bf16 *weight, const bf16 *bias, int N, int C,
                                  cudaStream_t stream) {
    if (N <= 0 || C <= 0) return;
    const int grid = ceil_div(N, LN_WARPS);
    if (pack_width(C, out, sum_out, weight, bias) == 8 && pack_width(C, inp, add) == 8)
        launch<layernorm_forward_kernel<8, RMS>>({grid, 32 * LN_WARPS, 0, stream}, out, mean, rstd, sum_out,
                                                 inp, add, weight, bias, N, C);
    else
        launch<layernorm_forward_kernel<1, RMS>>({grid, 32 * LN_WARPS, 0, stream}, out, mean, rstd, sum_out,
                                                 inp, add, weight, bias, N, C);
}
} // namespace layers_impl

// ---------------------------------------------------------------------------------------------------------
// LayerNorm

// residual_forward then layernorm_forward of its output in one pass: sum_out (N,C) = bf16(inp + add), then
// out, mean, rstd of sum_out as layernorm_forward computes them (the same bits; out NULL: the statistics
// only).
inline void residual_layernorm_forward(bf16 *out, float *mean, float *rstd, bf16 *sum_out, const bf16 *inp,
                                       const bf16 *add, const bf16 *weight, const bf16 *bias, int N, int C,
                                       cudaStream_t stream) {
    layers_impl::residual_norm_forward<false>(out, mean, rstd, sum_out, inp, add, weight, bias, N, C, stream);
}

// out (N,C) = bf16((inp - mean) * rstd * weight + bias); mean, rstd (N) FP32 for the backward. out NULL:
// the statistics only.
inline void layernorm_forward(bf16 *out, float *mean, float *rstd, const bf16 *inp, const bf16 *weight,
                              const bf16 *bias, int N, int C, cudaStream_t stream) {
    residual_layernorm_forward(out, mean, rstd, nullptr, inp, nullptr, weight, bias, N, C, stream);
}

inline size_t layernorm_backward_scratch_floats(int N, int C) {
    return 2 * (size_t)layers_impl::colsum_chunks(N) * (size_t)C;
}

// dresidual (N,C) = bf16(dresidual + dinp), one rounding; dweight, dbias (C) += their gradients (FP32).
// dout, inp (N,C); mean, rstd (N) from the forward. scratch: layernorm_backward_scratch_floats(N, C).
inline void layernorm_backward(bf16 *dresidual, float *dweight, float *dbias, const bf16 *dout,
                               const bf16 *inp, const bf16 *weight, const float *mean, const float *rstd,
                               int N, int C, float *scratch, cudaStream_t stream) {
    if (N <= 0 || C <= 0) return;
    const int W = layers_impl::pack_width(C, dresidual, dout, inp, weight),
              grid = ceil_div(N, layers_impl::LN_WARPS);
    if (W == 8)
        launch<layers_impl::layernorm_backward_dinp_kernel<8>>(
            {grid, 32 * layers_impl::LN_WARPS, 0, stream}, dresidual, dout, inp, weight, mean, rstd, N, C);
    else
        launch<layers_impl::layernorm_backward_dinp_kernel<1>>(
            {grid, 32 * layers_impl::LN_WARPS, 0, stream}, dresidual, dout, inp, weight, mean, rstd, N, C);
    layers_impl::column_sums(dweight, dbias, dout, inp, mean, rstd, N, C, scratch, stream);
}

// ---------------------------------------------------------------------------------------------------------
// RMSNorm (Llama)

// residual_forward then rmsnorm_forward of its output in one pass (add NULL: of inp alone): sum_out (N,C) =
// bf16(inp + add), out (N,C) = bf16(x * rstd * weight), rstd (N) = 1 / sqrt(mean(x^2) + eps) FP32 for the
// backward, x the input or the sum. out NULL: rstd only (an FP8 cast computes the output: RmsNormValues).
inline void residual_rmsnorm_forward(bf16 *out, float *rstd, bf16 *sum_out, const bf16 *inp, const bf16 *add,
                                     const bf16 *weight, int N, int C, cudaStream_t stream) {
    layers_impl::residual_norm_forward<true>(out, nullptr, rstd, sum_out, inp, add, weight, nullptr, N, C,
                                             stream);
}

inline size_t rmsnorm_backward_scratch_floats(int N, int C) {
    return (size_t)layers_impl::colsum_chunks(N) * (size_t)C;
}

// dresidual (N,C) = bf16(dresidual + dinp), one rounding; dweight (C) += its gradient (FP32, column sums in
// bias_backward's deterministic order). dout, inp (N,C); rstd (N) from the forward. scratch:
// rmsnorm_backward_scratch_floats(N, C).
inline void rmsnorm_backward(bf16 *dresidual, float *dweight, const bf16 *dout, const bf16 *inp,
                             const bf16 *weight, const float *rstd, int N, int C, float *scratch,
                             cudaStream_t stream) {
    if (N <= 0 || C <= 0) return;
    const int W = layers_impl::pack_width(C, dresidual, dout, inp, weight),
              grid = ceil_div(N, layers_impl::LN_WARPS);
    if (W == 8)
        launch<layers_impl::rmsnorm_backward_dinp_kernel<8>>({grid, 32 * layers_impl::LN_WARPS, 0, stream},
                                                             dresidual, dout, inp, weight, rstd, N, C);
    else
        launch<layers_impl::rmsnorm_backward_dinp_kernel<1>>({grid, 32 * layers_impl::LN_WARPS, 0, stream},
                                                             dresidual, dout, inp, weight, rstd, N, C);
    layers_impl::column_sums(dweight, nullptr, dout, inp, nullptr, rstd, N, C, scratch, stream);
}

// ---------------------------------------------------------------------------------------------------------
// Residual (elementwise over n)

// out = bf16(a + b)
inline void residual_forward(bf16 *out, const bf16 *a, const bf16 *b, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    const int W = layers_impl::pack_width((int64_t)n, out, a, b), grid = ceil_div((long)(n / W), 256);
    if (W == 8)
        launch<layers_impl::residual_forward_kernel<8>>({grid, 256, 0, stream}, out, a, b, n);
    else
        launch<layers_impl::residual_forward_kernel<1>>({grid, 256, 0, stream}, out, a, b, n);
}

// layernorm_forward's output at element (row, col) from its statistics, computed where an FP8 cast reads
// it instead of stored and read back: the same bits.
struct LayerNormValues {
    const bf16 *inp;           // (N,C)
    const float *mean, *rstd;  // (N), as layernorm_forward wrote them
    const bf16 *weight, *bias; // (C)
    __device__ float operator()(size_t i, int row, int col) const {
        using namespace layers_impl;
        return bf2f(f2bf(layernorm_value(bf2f(inp[i]), mean[row], rstd[row], weight[col], bias[col])));
    }
};

// residual_rmsnorm_forward's output at element (row, col) from its rstd, computed where an FP8 cast reads it
// instead of stored and read back: the same bits.
struct RmsNormValues {
    const bf16 *inp;    // (N,C): the norm's input (with the residual add, the sum it wrote)
    const float *rstd;  // (N), as residual_rmsnorm_forward wrote it
    const bf16 *weight; // (C)
    __device__ float operator()(size_t i, int row, int col) const {
        using namespace layers_impl;
        return bf2f(f2bf(rmsnorm_value(bf2f(inp[i]), rstd[row], weight[col])));
    }
};

#endif // GPU_NORMS_CUH

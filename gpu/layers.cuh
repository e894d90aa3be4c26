// gpu/layers.cuh: the non-GEMM layers of the CUDA trainer (embeddings, LayerNorm and Llama's RMSNorm,
// residual, GELU and Llama's SwiGLU, cross-entropy; the attention is gpu/attention.cuh's, the rotary
// embeddings gpu/rope.cuh's) and the deterministic reductions (bias gradients,
// gradient norm).
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
#ifndef GPU_LAYERS_CUH
#define GPU_LAYERS_CUH

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <type_traits>

#include "common.cuh"
#include "gelu.cuh"

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
// Encoder: out (B,T,C) = wte[token] + wpe[t] (Llama: wpe NULL, out = wte[token])

// One thread per W channels of one row.
template <int W>
static __global__ void encoder_forward_kernel(bf16 *out, const int *tokens, const bf16 *wte, const bf16 *wpe,
                                              int N, int T, int C) {
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int packs_per_row = C / W;
    if (idx >= (size_t)N * packs_per_row) return;
    const int bt = (int)(idx / packs_per_row), c = (int)(idx % packs_per_row) * W;
    const Bf16Pack<W> te = load_pack<W>(wte + (size_t)tokens[bt] * C + c);
    if (!wpe) {
        store_pack<W>(out + (size_t)bt * C + c, te);
        return;
    }
    const Bf16Pack<W> pe = load_pack<W>(wpe + (size_t)(bt % T) * C + c);
    Bf16Pack<W> o;
#pragma unroll
    for (int k = 0; k < W; k++) o.v[k] = f2bf(fadd(bf2f(te.v[k]), bf2f(pe.v[k])));
    store_pack<W>(out + (size_t)bt * C + c, o);
}

// dwte[token] += the dout rows of that token. A block per (bucket, 256 channels): a bucket holds the
// rows of one token in increasing order and no two buckets share a token, so each output element has
// one owner, which adds the rows serially in the CPU's order: the result is the CPU's bit for bit.
static __global__ void encoder_backward_wte_kernel(float *dwte, const bf16 *dout, const int *bucket_positions,
                                                   const int *bucket_starts, const int *bucket_tokens,
                                                   int C) {
    const int bucket = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const int start = bucket_starts[bucket], end = bucket_starts[bucket + 1];
    if (start >= end) return; // padding bucket past the real count (see encoder_buckets_host)
    float *dst = dwte + (size_t)bucket_tokens[bucket] * C + c;
    float acc = *dst;
    for (int i = start; i < end; i++) acc = fadd(acc, bf2f(dout[(size_t)bucket_positions[i] * C + c]));
    *dst = acc;
}

// dwpe[t] += dout[b,t] for b = 0..B-1 in that order (the CPU's order): one thread per (t, c).
static __global__ void encoder_backward_wpe_kernel(float *dwpe, const bf16 *dout, int B, int T, int C) {
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)T * C) return;
    const size_t t = idx / C, c = idx % C;
    float acc = dwpe[idx];
    for (int b = 0; b < B; b++) acc = fadd(acc, bf2f(dout[((size_t)b * T + t) * C + c]));
    dwpe[idx] = acc;
}

// ---------------------------------------------------------------------------------------------------------
// LayerNorm and RMSNorm (Llama): (N,C) -> (N,C). One warp per row; the row is read once per pass (the later
// passes hit in L1/L2) rather than held in registers, which would not fit for C = 8192.

constexpr int LN_WARPS = 8;          // rows per block
constexpr float RMSNORM_EPS = 1e-5f; // checkpoint.h's LLAMA_NORM_EPS (train_gpt_fp8.cu checks)

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
// Residual and GELU, elementwise: one thread per W elements.

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

template <int W> static __global__ void gelu_forward_kernel(bf16 *out, const bf16 *inp, size_t n) {
    const size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * W;
    if (i >= n) return;
    const Bf16Pack<W> xp = load_pack<W>(inp + i);
    Bf16Pack<W> o;
#pragma unroll
    for (int k = 0; k < W; k++) o.v[k] = f2bf(gelu_value(bf2f(xp.v[k])));
    store_pack<W>(out + i, o);
}

template <int W> static __global__ void gelu_backward_kernel(bf16 *dinout, const bf16 *inp, size_t n) {
    const size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * W;
    if (i >= n) return;
    const Bf16Pack<W> xp = load_pack<W>(inp + i);
    Bf16Pack<W> d = load_pack<W>(dinout + i);
#pragma unroll
    for (int k = 0; k < W; k++) d.v[k] = f2bf(gelu_backward_value(bf2f(d.v[k]), bf2f(xp.v[k])));
    store_pack<W>(dinout + i, d);
}

// ---------------------------------------------------------------------------------------------------------
// SwiGLU (Llama): fch (N,2F) rows [up u | gate g] -> (N,F). One thread per W elements of the output.

__device__ __forceinline__ float sigmoid_value(float g) {
    return fdiv(1.0f, fadd(1.0f, expf(-g)));
}

// silu(g) * u = g / (1 + exp(-g)) * u, in the CPU's order
__device__ __forceinline__ float swiglu_value(float u, float g) {
    return fmul(fdiv(g, fadd(1.0f, expf(-g))), u);
}

// The up gradient dout * g * sigmoid(g), in the CPU's order
__device__ __forceinline__ float swiglu_backward_up(float dout, float g) {
    return fmul(fmul(dout, g), sigmoid_value(g));
}

// The gate gradient dout * u * sigmoid(g) * (1 + g * (1 - sigmoid(g))), in the CPU's order
__device__ __forceinline__ float swiglu_backward_gate(float dout, float u, float g) {
    const float sigmoid = sigmoid_value(g);
    return fmul(fmul(fmul(dout, u), sigmoid), fadd(1.0f, fmul(g, fsub(1.0f, sigmoid))));
}

template <int W> static __global__ void swiglu_forward_kernel(bf16 *out, const bf16 *fch, int N, int F) {
    const size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * W;
    if (i >= (size_t)N * F) return;
    const bf16 *up = fch + i / F * 2 * F + i % F;
    const Bf16Pack<W> u = load_pack<W>(up), g = load_pack<W>(up + F);
    Bf16Pack<W> o;
#pragma unroll
    for (int k = 0; k < W; k++) o.v[k] = f2bf(swiglu_value(bf2f(u.v[k]), bf2f(g.v[k])));
    store_pack<W>(out + i, o);
}

// dfch (N,2F) = [du | dg] given dout (N,F)
template <int W>
static __global__ void swiglu_backward_kernel(bf16 *dfch, const bf16 *dout, const bf16 *fch, int N, int F) {
    const size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * W;
    if (i >= (size_t)N * F) return;
    const size_t at = i / F * 2 * F + i % F;
    const Bf16Pack<W> u = load_pack<W>(fch + at), g = load_pack<W>(fch + at + F), dy = load_pack<W>(dout + i);
    Bf16Pack<W> du, dg;
#pragma unroll
    for (int k = 0; k < W; k++) {
        du.v[k] = f2bf(swiglu_backward_up(bf2f(dy.v[k]), bf2f(g.v[k])));
        dg.v[k] = f2bf(swiglu_backward_gate(bf2f(dy.v[k]), bf2f(u.v[k]), bf2f(g.v[k])));
    }
    store_pack<W>(dfch + at, du);
    store_pack<W>(dfch + at + F, dg);
}

// ---------------------------------------------------------------------------------------------------------
// Cross-entropy with the logits gradient, one block per row. Each thread owns the same 8-column packs
// in every pass, so the in-place write of pass 2 never overwrites a value another thread still reads.
// Pass 1 is an online softmax: each thread keeps the running max of its values and the sum of exp(z - max),
// rescaled when the max grows, so the row is read once for both (the CPU's max pass then sum pass, in one;
// the sum differs from the CPU's by FP32 rounding, as any reordered sum does). Pass 2 writes the gradient;
// its read of the row mostly hits L2 (GPT-2's rows are 100 KB; the rows of the blocks in flight on an H100
// or H200 fit its 50 MB), so DRAM sees the row read once and written once.

constexpr int CE_THREADS = 1024;

static __global__ void __launch_bounds__(CE_THREADS)
    crossentropy_kernel(bf16 *logits, float *losses, const int *targets, float dloss, int V, int Vp,
                        int write_dlogits) {
    __shared__ float red[32];
    bf16 *row = logits + (size_t)blockIdx.x * Vp;
    const int target = targets[blockIdx.x];
    const float z_target = bf2f(row[target]);        // read by all threads before any write
    const int real_packs = (V + 7) / 8;              // packs holding the V real columns (Vp % 8 == 0)
    float thread_max = -INFINITY, thread_sum = 0.0f; // sum of exp(z - thread_max) over this thread's values
    for (int p = threadIdx.x; p < real_packs; p += blockDim.x) {
        const Bf16Pack<8> zp = load_pack<8>(row + p * 8);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            if (p * 8 + k >= V) continue;
            const float z = bf2f(zp.v[k]);
            if (z > thread_max) {
                thread_sum = fadd(fmul(thread_sum, expf(fsub(thread_max, z))), 1.0f);
                thread_max = z;
            } else {
                thread_sum = fadd(thread_sum, expf(fsub(z, thread_max)));
            }
        }
    }
    const float mx = block_max(thread_max, red);
    // each thread's sum rescaled to the row's max; a thread without values (V below the threads) adds 0
    float sum = thread_max == -INFINITY ? 0.0f : fmul(thread_sum, expf(fsub(thread_max, mx)));
    sum = block_sum(sum, red); // its barriers also order every read above before the writes below
    if (threadIdx.x == 0) losses[blockIdx.x] = -logf(fdiv(expf(fsub(z_target, mx)), sum));
    if (!write_dlogits) return;
    for (int p = threadIdx.x; p < Vp / 8; p += blockDim.x) {
        const Bf16Pack<8> zp = load_pack<8>(row + p * 8);
        Bf16Pack<8> g;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const int v = p * 8 + k;
            float d = 0.0f; // padded columns: the CPU's probability there is 0, times dloss
            if (v < V) {
                d = fdiv(expf(fsub(bf2f(zp.v[k]), mx)), sum);
                if (v == target) d = fsub(d, 1.0f);
                d = fmul(d, dloss);
            }
            g.v[k] = f2bf(d);
        }
        store_pack<8>(row + p * 8, g);
    }
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

// =========================================================================================================
// Host API. Every launcher takes its stream last, enqueues its kernels and returns: no synchronisation.

// ---------------------------------------------------------------------------------------------------------
// Encoder

// out (B,T,C) = bf16(wte[tokens[b,t]] + wpe[t]) (wpe NULL: wte[tokens[b,t]]). tokens (B,T) must lie in
// [0, rows of wte).
inline void encoder_forward(bf16 *out, const int *tokens, const bf16 *wte, const bf16 *wpe, int B, int T,
                            int C, cudaStream_t stream) {
    const int N = B * T;
    if (N <= 0 || C <= 0) return;
    const int W = layers_impl::pack_width(C, out, wte, wpe);
    const int grid = ceil_div((long)N * (C / W), 256);
    if (W == 8)
        launch<layers_impl::encoder_forward_kernel<8>>({grid, 256, 0, stream}, out, tokens, wte, wpe, N, T,
                                                       C);
    else
        launch<layers_impl::encoder_forward_kernel<1>>({grid, 256, 0, stream}, out, tokens, wte, wpe, N, T,
                                                       C);
}

// Groups the positions 0..N-1 by token (a counting sort), for encoder_backward:
//   bucket_tokens[k]  (num_buckets)    the k-th distinct token, in increasing token order
//   bucket_starts[k]  (N + 1 entries)  bucket k is bucket_positions[bucket_starts[k] .. bucket_starts[k+1]);
//                                      entries num_buckets .. N are all N (empty buckets, see below)
//   bucket_positions  (N)              positions in increasing order within each bucket
// The caller sizes bucket_starts N + 1 and bucket_tokens N. Tokens must be >= 0.
inline void encoder_buckets_host(const int *tokens, int N, int *bucket_positions, int *bucket_starts,
                                 int *bucket_tokens, int *num_buckets) {
    int max_token = -1;
    for (int i = 0; i < N; i++) {
        if (tokens[i] < 0) fail("encoder_buckets_host: token %d at position %d is negative", tokens[i], i);
        if (tokens[i] > max_token) max_token = tokens[i];
    }
    // offset[v] = first slot of token v once the counts are prefix-summed
    int *offset = (int *)calloc_check((size_t)max_token + 2, sizeof(int), "encoder buckets");
    for (int i = 0; i < N; i++) offset[tokens[i] + 1]++;
    int nb = 0;
    for (int v = 0; v <= max_token; v++) {
        if (offset[v + 1] > 0) {
            bucket_tokens[nb] = v;
            bucket_starts[nb] = offset[v];
            nb++;
        }
        offset[v + 1] += offset[v];
    }
    for (int k = nb; k <= N; k++) bucket_starts[k] = N;
    // Visiting positions in increasing order keeps each bucket sorted.
    for (int i = 0; i < N; i++) bucket_positions[offset[tokens[i]]++] = i;
    free(offset);
    *num_buckets = nb;
}

inline size_t encoder_backward_scratch_floats(int B, int T, int C) {
    (void)B, (void)T, (void)C;
    return 0; // the buckets make every output element single-owner: nothing to combine
}

// dwte (Vp,C) += dout rows grouped by token, dwpe (maxT,C) rows 0..T-1 += dout summed over b (dwpe NULL:
// none), both in the CPU's order (bitwise equal). dout (B,T,C). The buckets come from encoder_buckets_host on
// the host (copied to the device). num_buckets may be anything from the real count up to N: the buckets past
// the real count are empty. Pass N when capturing a CUDA graph, so that the launch does not depend on the
// batch. scratch is unused (encoder_backward_scratch_floats is 0) and may be NULL.
inline void encoder_backward(float *dwte, float *dwpe, const bf16 *dout, const int *tokens,
                             const int *bucket_positions, const int *bucket_starts, const int *bucket_tokens,
                             int num_buckets, int B, int T, int C, float *scratch, cudaStream_t stream) {
    (void)tokens, (void)scratch; // the buckets carry the tokens
    if (B <= 0 || T <= 0 || C <= 0) return;
    if (num_buckets > B * T) fail("encoder_backward: %d buckets for %d positions", num_buckets, B * T);
    if (num_buckets > 0) {
        const dim3 grid(num_buckets, ceil_div(C, 256));
        launch<layers_impl::encoder_backward_wte_kernel>({grid, 256, 0, stream}, dwte, dout, bucket_positions,
                                                         bucket_starts, bucket_tokens, C);
    }
    if (dwpe)
        launch<layers_impl::encoder_backward_wpe_kernel>({ceil_div((long)T * C, 256), 256, 0, stream}, dwpe,
                                                         dout, B, T, C);
}

namespace layers_impl {
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
// Residual and GELU (elementwise over n)

// out = bf16(a + b)
inline void residual_forward(bf16 *out, const bf16 *a, const bf16 *b, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    const int W = layers_impl::pack_width((int64_t)n, out, a, b), grid = ceil_div((long)(n / W), 256);
    if (W == 8)
        launch<layers_impl::residual_forward_kernel<8>>({grid, 256, 0, stream}, out, a, b, n);
    else
        launch<layers_impl::residual_forward_kernel<1>>({grid, 256, 0, stream}, out, a, b, n);
}

// out = bf16(gelu(inp)), tanh approximation
inline void gelu_forward(bf16 *out, const bf16 *inp, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    const int W = layers_impl::pack_width((int64_t)n, out, inp), grid = ceil_div((long)(n / W), 256);
    if (W == 8)
        launch<layers_impl::gelu_forward_kernel<8>>({grid, 256, 0, stream}, out, inp, n);
    else
        launch<layers_impl::gelu_forward_kernel<1>>({grid, 256, 0, stream}, out, inp, n);
}

// gelu_forward's output at element i, computed where an FP8 cast reads it (gpu/fp8.cuh's
// cast_transpose_values) instead of stored and read back: the same bits.
struct GeluValues {
    const bf16 *pre; // the pre-activation
    __device__ float operator()(size_t i, int, int) const {
        using namespace layers_impl;
        return bf2f(f2bf(gelu_value(bf2f(pre[i]))));
    }
};

// gelu_backward's output at element i, computed where an FP8 cast reads it instead of stored: the same bits.
struct GeluBackwardValues {
    const bf16 *dout, *pre; // the GELU's output gradient and its input
    __device__ float operator()(size_t i, int, int) const {
        using namespace layers_impl;
        return bf2f(f2bf(gelu_backward_value(bf2f(dout[i]), bf2f(pre[i]))));
    }
};

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

// dinout: the output gradient in, bf16(output gradient * gelu'(inp)) out
inline void gelu_backward(bf16 *dinout, const bf16 *inp, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    const int W = layers_impl::pack_width((int64_t)n, dinout, inp), grid = ceil_div((long)(n / W), 256);
    if (W == 8)
        launch<layers_impl::gelu_backward_kernel<8>>({grid, 256, 0, stream}, dinout, inp, n);
    else
        launch<layers_impl::gelu_backward_kernel<1>>({grid, 256, 0, stream}, dinout, inp, n);
}

// ---------------------------------------------------------------------------------------------------------
// SwiGLU (Llama)

// out (N,F) = bf16(silu(gate) * up) of fch (N,2F), each row [up | gate]
inline void swiglu_forward(bf16 *out, const bf16 *fch, int N, int F, cudaStream_t stream) {
    if (N <= 0 || F <= 0) return;
    const int W = layers_impl::pack_width(F, out, fch), grid = ceil_div((long)N * (F / W), 256);
    if (W == 8)
        launch<layers_impl::swiglu_forward_kernel<8>>({grid, 256, 0, stream}, out, fch, N, F);
    else
        launch<layers_impl::swiglu_forward_kernel<1>>({grid, 256, 0, stream}, out, fch, N, F);
}

// dfch (N,2F) = bf16 of the up and gate gradients given dout (N,F), the gradient of swiglu_forward's output.
inline void swiglu_backward(bf16 *dfch, const bf16 *dout, const bf16 *fch, int N, int F,
                            cudaStream_t stream) {
    if (N <= 0 || F <= 0) return;
    const int W = layers_impl::pack_width(F, dfch, dout, fch), grid = ceil_div((long)N * (F / W), 256);
    if (W == 8)
        launch<layers_impl::swiglu_backward_kernel<8>>({grid, 256, 0, stream}, dfch, dout, fch, N, F);
    else
        launch<layers_impl::swiglu_backward_kernel<1>>({grid, 256, 0, stream}, dfch, dout, fch, N, F);
}

// swiglu_forward's output at element (row, col) of (N,F), computed where an FP8 cast reads it instead of
// stored and read back: the same bits.
struct SwigluValues {
    const bf16 *fch; // (N,2F), each row [up | gate]
    int F;
    __device__ float operator()(size_t, int row, int col) const {
        using namespace layers_impl;
        const bf16 *up = fch + (size_t)row * 2 * F + col;
        return bf2f(f2bf(swiglu_value(bf2f(up[0]), bf2f(up[F]))));
    }
};

// swiglu_backward's output at element (row, col) of (N,2F) ([du | dg]), computed where an FP8 cast reads it
// instead of stored: the same bits.
struct SwigluBackwardValues {
    const bf16 *dout, *fch; // (N,F) the gradient of SwiGLU's output, (N,2F) its input
    int F;
    __device__ float operator()(size_t, int row, int col) const {
        using namespace layers_impl;
        const int c = col < F ? col : col - F;
        const bf16 *up = fch + (size_t)row * 2 * F + c;
        const float dy = bf2f(dout[(size_t)row * F + c]), u = bf2f(up[0]), g = bf2f(up[F]);
        return bf2f(f2bf(col < F ? swiglu_backward_up(dy, g) : swiglu_backward_gate(dy, u, g)));
    }
};

// ---------------------------------------------------------------------------------------------------------
// Cross-entropy

// Per row n of logits_inout (N,Vp), BF16, of which the first V columns are real: losses[n] =
// -log softmax(row)[targets[n]] (FP32). With write_dlogits the row is overwritten with
// bf16((softmax - onehot(target)) * dloss) in its first V columns and 0 in the padding.
// Vp must be a multiple of 8 and logits_inout 16-byte aligned; targets in [0, V).
inline void crossentropy_forward_backward(bf16 *logits_inout, float *losses, const int *targets, float dloss,
                                          int N, int V, int Vp, int write_dlogits, cudaStream_t stream) {
    if (N <= 0) return;
    if (V <= 0 || V > Vp || Vp % 8 != 0 || !layers_impl::aligned16(logits_inout))
        fail("crossentropy: needs 0 < V (%d) <= Vp (%d), Vp a multiple of 8 and 16-byte aligned logits", V,
             Vp);
    // Threads past one per real 8-column pack would only join the block's reductions with nothing to add: a
    // small vocabulary (byte-level text, the tests) gets one warp per 256 columns, and its sums stay bit for
    // bit those of CE_THREADS threads (an idle thread's share is an exact 0, and -inf to the max).
    const int real_packs = (V + 7) / 8,
              threads = std::min(layers_impl::CE_THREADS, (real_packs + 31) / 32 * 32);
    launch<layers_impl::crossentropy_kernel>({N, threads, 0, stream}, logits_inout, losses, targets, dloss, V,
                                             Vp, write_dlogits);
}

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
// them: what a producer that sums columns on the way must match (gpu/fp8.cuh's cast_transpose_kernel).
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

#endif // GPU_LAYERS_CUH

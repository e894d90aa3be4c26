// gpu/attention.cuh: the causal self-attention of the CUDA trainer, two implementations behind one interface.
//
//   exact  our kernels: FP32 CUDA-core arithmetic with the scores in the CPU's order of operations, so that
//          they match train_gpt.c's attention up to the FP32 rounding of the softmax. The oracle of the fast
//          path, and the attention of builds without cuDNN and of the CPU emulation build (emu/).
//   fast   cuDNN's fused flash attention (the cudnn-frontend SDPA graphs): tensor cores, BF16 in and out,
//          FP32 softmax statistics, the probabilities rounded to BF16 before they multiply V. Built when
//          USE_CUDNN is defined (the Makefile defines it where it finds cuDNN's and the frontend's headers).
//          Its backward is cuDNN's deterministic one, so that a run is reproducible bit for bit and a
//          resumed run continues the same bits, as with the exact kernels.
//
// Why cuDNN and not a kernel of our own: attention at FlashAttention-3 speed on Hopper needs warpgroup MMA,
// TMA loads and warp-specialised pipelines per head size and architecture; cuDNN ships exactly that for
// Hopper and Blackwell and is kept up to date by NVIDIA (llm.c made the same choice). What stays ours is the
// exact path that checks it.
//
// Both implementations read qkv (B,T,QKV) laid out [q | k | v], NH query heads then KVH key heads then KVH
// value heads of HS = C/NH each (QKV = (NH + 2 KVH) HS; GPT-2: KVH = NH, QKV = 3C), query head h reading
// key and value head h / (NH/KVH) (grouped-query attention, Llama), write out (B,T,C) and lse (B,NH,T) = max
// + ln(sum exp) of each row's scaled scores. cuDNN's "Stats" output has that definition and layout, so a
// forward of either kind feeds a backward of either. The backward writes every element of dqkv (B,T,QKV). No
// (T,T) buffer in either.
#ifndef GPU_ATTENTION_CUH
#define GPU_ATTENTION_CUH

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include <type_traits>

#include "attention_cudnn.h"
#include "../core/attention_choice.h"
#include "layer_common.cuh"

namespace layers_impl {

// A block is ATT_ROWS warps, one row each (query rows in the forward and the dq kernel, key rows in
// the dk/dv kernel), all of one (b, h): blockIdx.y = b * NH + h. The rows of a block are consecutive
// and 8-aligned, so they lie in one 32-row chunk and need the same chunks of the other side. The
// block stages those chunks, 32 rows at a time, in shared memory (BF16, coalesced 16-byte loads) and
// every warp reads them from there: each lane takes one row of the chunk for the dot products (the
// row stride HS + 2 puts the 32 lanes' rows in 32 different banks), then the lanes switch to head
// dimensions (d = lane + 32 k) to accumulate the output rows, in increasing row order like the CPU.
// Dot products add q[i] * k[i] for i = 0..HS-1 in order, unfused, as the CPU: the scores are the
// CPU's bit for bit. The softmax differs from the CPU by FP32 rounding only.

constexpr int ATT_ROWS = 8;
constexpr int ATT_THREADS = 32 * ATT_ROWS;
constexpr int ATT_CHUNK = 32; // one row per lane
static_assert(ATT_CHUNK % ATT_ROWS == 0, "the rows of a block must lie in one chunk");

// Rows row0 .. row0+31 (those below T) of HS values at src + row * stride into sh, row stride HS + 2.
template <int HS>
__device__ __forceinline__ void stage_chunk(bf16 *sh, const bf16 *src, size_t stride, int row0, int T) {
    constexpr int PACKS = HS / 8; // 16-byte packs per row
    for (int i = threadIdx.x; i < ATT_CHUNK * PACKS; i += blockDim.x) {
        const int r = i / PACKS, p = i % PACKS;
        if (row0 + r >= T) continue; // never read: past the last row
        const Bf16Pack<8> v = load_pack<8>(src + (size_t)(row0 + r) * stride + p * 8);
        // (HS + 2) * r + 8 p is even: 4-byte aligned pairs, though not 16-byte aligned
        __nv_bfloat162 *dst = reinterpret_cast<__nv_bfloat162 *>(sh + r * (HS + 2) + p * 8);
#pragma unroll
        for (int k = 0; k < 4; k++) dst[k] = __halves2bfloat162(v.v[2 * k], v.v[2 * k + 1]);
    }
}

// sum_i vec[i] * row[i] in increasing i, unfused. vec: FP32 in shared memory, 16-byte aligned, the same
// address for all lanes (a broadcast); row: a staged BF16 row.
template <int HS> __device__ __forceinline__ float dot_row(const float *vec, const bf16 *row) {
    const float4 *vec4 = reinterpret_cast<const float4 *>(vec);
    const __nv_bfloat162 *row2 = reinterpret_cast<const __nv_bfloat162 *>(row);
    float acc = 0.0f;
#pragma unroll 8
    for (int i = 0; i < HS / 4; i++) {
        const float4 v = vec4[i];
        const float2 r0 = __bfloat1622float2(row2[2 * i]), r1 = __bfloat1622float2(row2[2 * i + 1]);
        acc = fadd(acc, fmul(v.x, r0.x));
        acc = fadd(acc, fmul(v.y, r0.y));
        acc = fadd(acc, fmul(v.z, r1.x));
        acc = fadd(acc, fmul(v.w, r1.y));
    }
    return acc;
}

// out (B,T,C), lse (B,NH,T) <- qkv (B,T,QKV). Pass 1 finds each row's max and sum of exponentials
// online; pass 2 recomputes the scores and accumulates p * v. The latest rows have the most keys:
// blockIdx.x counts tiles from the end so that they are scheduled first.
template <int HS>
static __global__ void __launch_bounds__(ATT_THREADS)
    attention_forward_kernel(bf16 *out, float *lse, const bf16 *qkv, int T, int C, int NH, int KVH,
                             float scale) {
    constexpr int KS = HS + 2;
    __shared__ __align__(16) bf16 k_sh[ATT_CHUNK * KS];
    __shared__ __align__(16) bf16 v_sh[ATT_CHUNK * KS];
    __shared__ __align__(16) float q_sh[ATT_ROWS][HS];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    const int tile = gridDim.x - 1 - blockIdx.x;
    const int t = tile * ATT_ROWS + warp;
    const bool active = t < T; // inactive warps still take part in the barriers
    const int nchunks = min(tile * ATT_ROWS + ATT_ROWS - 1, T - 1) / ATT_CHUNK + 1;
    const size_t stride = (size_t)(NH + 2 * KVH) * HS;
    const bf16 *q_base = qkv + (size_t)b * T * stride + h * HS;
    const bf16 *k_base = qkv + (size_t)b * T * stride + (NH + h / (NH / KVH)) * HS,
               *v_base = k_base + KVH * HS;
    if (active)
        for (int i = lane; i < HS; i += 32) q_sh[warp][i] = bf2f(q_base[(size_t)t * stride + i]);

    float m = -INFINITY, l = 0.0f; // this lane's running max and sum of exp(score - m)
    for (int c = 0; c < nchunks; c++) {
        __syncthreads(); // the previous chunk has been read (and q_sh written, the first time)
        stage_chunk<HS>(k_sh, k_base, stride, c * ATT_CHUNK, T);
        __syncthreads();
        if (active && c * ATT_CHUNK + lane <= t) {
            const float s = fmul(dot_row<HS>(q_sh[warp], k_sh + lane * KS), scale);
            if (s > m) {
                l = fadd(fmul(l, expf(fsub(m, s))), 1.0f);
                m = s;
            } else {
                l = fadd(l, expf(fsub(s, m)));
            }
        }
    }
    // Key 0 is always visible, so M is finite for finite inputs; a lane that saw no key has l = 0.
    const float M = warp_max(m);
    const float S = warp_sum(fmul(l, expf(fsub(m, M))));
    if (active && lane == 0) lse[(size_t)bh * T + t] = fadd(M, logf(S));

    float acc[HS / 32];
#pragma unroll
    for (int k = 0; k < HS / 32; k++) acc[k] = 0.0f;
    for (int c = 0; c < nchunks; c++) {
        __syncthreads();
        stage_chunk<HS>(k_sh, k_base, stride, c * ATT_CHUNK, T);
        stage_chunk<HS>(v_sh, v_base, stride, c * ATT_CHUNK, T);
        __syncthreads();
        const int nvalid = active ? min(ATT_CHUNK, t - c * ATT_CHUNK + 1) : 0; // keys <= t, warp-uniform
        float p = 0.0f;
        if (lane < nvalid) {
            const float s = fmul(dot_row<HS>(q_sh[warp], k_sh + lane * KS), scale);
            p = fdiv(expf(fsub(s, M)), S); // the CPU's expf(score - max) / sum
        }
        for (int j = 0; j < nvalid; j++) {
            const float pj = __shfl_sync(FULL_MASK, p, j);
#pragma unroll
            for (int k = 0; k < HS / 32; k++)
                acc[k] = fadd(acc[k], fmul(pj, bf2f(v_sh[j * KS + lane + 32 * k])));
        }
    }
    if (active) {
        bf16 *o = out + ((size_t)b * T + t) * C + h * HS;
#pragma unroll
        for (int k = 0; k < HS / 32; k++) o[lane + 32 * k] = f2bf(acc[k]);
    }
}

// Backward, kernel 1 of 2, one warp per query row t: p = exp(score - lse), dp = dout_t . v_t2,
// delta_t = sum p * dp (saved for kernel 2), then ds = p * (dp - delta) * scale and dq_t = sum ds * k_t2.
template <int HS>
static __global__ void __launch_bounds__(ATT_THREADS)
    attention_backward_dq_kernel(bf16 *dqkv, float *delta, const bf16 *dout, const bf16 *qkv,
                                 const float *lse, int T, int C, int NH, int KVH, float scale) {
    constexpr int KS = HS + 2;
    __shared__ __align__(16) bf16 k_sh[ATT_CHUNK * KS];
    __shared__ __align__(16) bf16 v_sh[ATT_CHUNK * KS];
    __shared__ __align__(16) float q_sh[ATT_ROWS][HS];
    __shared__ __align__(16) float do_sh[ATT_ROWS][HS];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    const int tile = gridDim.x - 1 - blockIdx.x;
    const int t = tile * ATT_ROWS + warp;
    const bool active = t < T;
    const int nchunks = min(tile * ATT_ROWS + ATT_ROWS - 1, T - 1) / ATT_CHUNK + 1;
    const size_t stride = (size_t)(NH + 2 * KVH) * HS;
    const bf16 *q_base = qkv + (size_t)b * T * stride + h * HS;
    const bf16 *k_base = qkv + (size_t)b * T * stride + (NH + h / (NH / KVH)) * HS,
               *v_base = k_base + KVH * HS;
    const bf16 *do_base = dout + (size_t)b * T * C + h * HS;
    if (active) {
        for (int i = lane; i < HS; i += 32) {
            q_sh[warp][i] = bf2f(q_base[(size_t)t * stride + i]);
            do_sh[warp][i] = bf2f(do_base[(size_t)t * C + i]);
        }
    }
    const float L = active ? lse[(size_t)bh * T + t] : 0.0f;

    float pdp = 0.0f;
    for (int c = 0; c < nchunks; c++) {
        __syncthreads();
        stage_chunk<HS>(k_sh, k_base, stride, c * ATT_CHUNK, T);
        stage_chunk<HS>(v_sh, v_base, stride, c * ATT_CHUNK, T);
        __syncthreads();
        if (active && c * ATT_CHUNK + lane <= t) {
            const float p = expf(fsub(fmul(dot_row<HS>(q_sh[warp], k_sh + lane * KS), scale), L));
            const float dp = dot_row<HS>(do_sh[warp], v_sh + lane * KS);
            pdp = fadd(pdp, fmul(p, dp));
        }
    }
    const float D = warp_sum(pdp);
    if (active && lane == 0) delta[(size_t)bh * T + t] = D;

    float acc[HS / 32];
#pragma unroll
    for (int k = 0; k < HS / 32; k++) acc[k] = 0.0f;
    for (int c = 0; c < nchunks; c++) {
        __syncthreads();
        stage_chunk<HS>(k_sh, k_base, stride, c * ATT_CHUNK, T);
        stage_chunk<HS>(v_sh, v_base, stride, c * ATT_CHUNK, T);
        __syncthreads();
        const int nvalid = active ? min(ATT_CHUNK, t - c * ATT_CHUNK + 1) : 0;
        float ds = 0.0f;
        if (lane < nvalid) {
            const float p = expf(fsub(fmul(dot_row<HS>(q_sh[warp], k_sh + lane * KS), scale), L));
            const float dp = dot_row<HS>(do_sh[warp], v_sh + lane * KS);
            ds = fmul(fmul(p, fsub(dp, D)), scale); // the CPU's p * (datt - dot_p_datt) * scale
        }
        for (int j = 0; j < nvalid; j++) {
            const float dsj = __shfl_sync(FULL_MASK, ds, j);
#pragma unroll
            for (int k = 0; k < HS / 32; k++)
                acc[k] = fadd(acc[k], fmul(dsj, bf2f(k_sh[j * KS + lane + 32 * k])));
        }
    }
    if (active) {
        bf16 *dq = dqkv + ((size_t)b * T + t) * stride + h * HS;
#pragma unroll
        for (int k = 0; k < HS / 32; k++) dq[lane + 32 * k] = f2bf(acc[k]);
    }
}

// Backward, kernel 2 of 2, one warp per key row t2 of one key/value head: over the query heads that read it
// in increasing order (GPT-2: the one head of the same index), over their queries t >= t2 in increasing
// order, dv_t2 = sum p * dout_t, dk_t2 = sum ds * q_t: the CPU's order. p and ds are recomputed exactly as
// kernel 1 did (same products in the same order, same lse and delta: the same bits). The earliest keys
// have the most queries and have the lowest blockIdx.x, so they are scheduled first.
template <int HS>
static __global__ void __launch_bounds__(ATT_THREADS)
    attention_backward_dkv_kernel(bf16 *dqkv, const bf16 *dout, const bf16 *qkv, const float *lse,
                                  const float *delta, int T, int C, int NH, int KVH, float scale) {
    constexpr int KS = HS + 2;
    __shared__ __align__(16) bf16 q_sh[ATT_CHUNK * KS];
    __shared__ __align__(16) bf16 do_sh[ATT_CHUNK * KS];
    __shared__ float lse_sh[ATT_CHUNK], delta_sh[ATT_CHUNK];
    __shared__ __align__(16) float k_row[ATT_ROWS][HS];
    __shared__ __align__(16) float v_row[ATT_ROWS][HS];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int b = blockIdx.y / KVH, kv = blockIdx.y % KVH, group = NH / KVH;
    const int t2 = blockIdx.x * ATT_ROWS + warp;
    const bool active = t2 < T;
    const size_t stride = (size_t)(NH + 2 * KVH) * HS;
    const bf16 *k_base = qkv + (size_t)b * T * stride + (NH + kv) * HS, *v_base = k_base + KVH * HS;
    if (active) {
        for (int i = lane; i < HS; i += 32) {
            k_row[warp][i] = bf2f(k_base[(size_t)t2 * stride + i]);
            v_row[warp][i] = bf2f(v_base[(size_t)t2 * stride + i]);
        }
    }
    float dk[HS / 32], dv[HS / 32];
#pragma unroll
    for (int k = 0; k < HS / 32; k++) dk[k] = dv[k] = 0.0f;
    const int nchunks = (T + ATT_CHUNK - 1) / ATT_CHUNK;
    for (int h = kv * group; h < (kv + 1) * group; h++) {
        const int bh = b * NH + h;
        const bf16 *q_base = qkv + (size_t)b * T * stride + h * HS;
        const bf16 *do_base = dout + (size_t)b * T * C + h * HS;
        for (int c = blockIdx.x * ATT_ROWS / ATT_CHUNK; c < nchunks; c++) {
            const int row0 = c * ATT_CHUNK;
            __syncthreads();
            stage_chunk<HS>(q_sh, q_base, stride, row0, T);
            stage_chunk<HS>(do_sh, do_base, C, row0, T);
            if (threadIdx.x < ATT_CHUNK && row0 + (int)threadIdx.x < T) {
                lse_sh[threadIdx.x] = lse[(size_t)bh * T + row0 + threadIdx.x];
                delta_sh[threadIdx.x] = delta[(size_t)bh * T + row0 + threadIdx.x];
            }
            __syncthreads();
            // queries row0 + j for j in [jmin, jmax) are >= t2 and < T; warp-uniform bounds
            const int jmin = active ? max(0, t2 - row0) : ATT_CHUNK, jmax = min(ATT_CHUNK, T - row0);
            float p = 0.0f, ds = 0.0f;
            if (lane >= jmin && lane < jmax) {
                p = expf(fsub(fmul(dot_row<HS>(k_row[warp], q_sh + lane * KS), scale), lse_sh[lane]));
                const float dp = dot_row<HS>(v_row[warp], do_sh + lane * KS);
                ds = fmul(fmul(p, fsub(dp, delta_sh[lane])), scale);
            }
            for (int j = jmin; j < jmax; j++) {
                const float pj = __shfl_sync(FULL_MASK, p, j), dsj = __shfl_sync(FULL_MASK, ds, j);
#pragma unroll
                for (int k = 0; k < HS / 32; k++) {
                    dv[k] = fadd(dv[k], fmul(pj, bf2f(do_sh[j * KS + lane + 32 * k])));
                    dk[k] = fadd(dk[k], fmul(dsj, bf2f(q_sh[j * KS + lane + 32 * k])));
                }
            }
        }
    }
    if (active) {
        bf16 *dkp = dqkv + ((size_t)b * T + t2) * stride + (NH + kv) * HS, *dvp = dkp + KVH * HS;
#pragma unroll
        for (int k = 0; k < HS / 32; k++) {
            dkp[lane + 32 * k] = f2bf(dk[k]);
            dvp[lane + 32 * k] = f2bf(dv[k]);
        }
    }
}

} // namespace layers_impl

// =========================================================================================================
// Host API

// Head sizes the attention kernels are compiled for: a multiple of 32 (one value per lane in the
// output accumulation), at most 128 (shared memory and registers).
inline void check_attention_shape(int C, int NH) {
    if (NH <= 0 || C <= 0 || C % NH != 0) fail("attention: %d channels do not split into %d heads", C, NH);
    const int hs = C / NH;
    if (hs % 32 != 0 || hs > 128)
        fail("attention: head size %d (C %d / NH %d) is not supported: it must be 32, 64, 96 or 128", hs, C,
             NH);
}

namespace layers_impl {
// The launch shape and the checks the attention kernels rely on.
inline dim3 attention_grid(const void *qkv, const void *dout, int B, int T, int C, int NH, int KVH) {
    check_attention_shape(C, NH);
    if (KVH <= 0 || NH % KVH != 0) fail("attention: %d query heads do not share %d key/value heads", NH, KVH);
    if (!aligned16(qkv) || (dout && !aligned16(dout)))
        fail("attention: qkv and dout must be 16-byte aligned (the kernels load 8 values at a time)");
    if ((long)B * NH > 65535) fail("attention: B * NH = %ld exceeds the grid limit 65535", (long)B * NH);
    return dim3(ceil_div(T, ATT_ROWS), B * NH);
}
} // namespace layers_impl

// Calls launch(std::integral_constant<int, HS>()) with the head size as a compile-time constant: the
// attention kernels are instantiated for the head sizes check_attention_shape admits.
template <typename Launch> inline void for_head_size(int hs, Launch launch) {
    switch (hs) {
    case 32:
        launch(std::integral_constant<int, 32>());
        break;
    case 64:
        launch(std::integral_constant<int, 64>());
        break;
    case 96:
        launch(std::integral_constant<int, 96>());
        break;
    default:
        launch(std::integral_constant<int, 128>());
        break;
    }
}

// out (B,T,C), lse (B,NH,T) <- qkv (B,T,QKV) laid out [q | k | v] (NH query heads, KVH key heads, KVH
// value heads of hs each). lse = max + log(sum exp) of each row's scaled scores, for the backward.
inline void attention_exact_forward(bf16 *out, float *lse, const bf16 *qkv, int B, int T, int C, int NH,
                                    int KVH, cudaStream_t stream) {
    using namespace layers_impl;
    if (B <= 0 || T <= 0) return;
    const dim3 grid = attention_grid(qkv, nullptr, B, T, C, NH, KVH);
    const int hs = C / NH;
    const float scale = 1.0f / sqrtf((float)hs); // as the CPU, on the host
    for_head_size(hs, [&](auto head_size) {
        launch<attention_forward_kernel<decltype(head_size)::value>>({grid, ATT_THREADS, 0, stream}, out, lse,
                                                                     qkv, T, C, NH, KVH, scale);
    });
}

// dqkv (B,T,QKV) = the gradient of attention_forward given dout (B,T,C); every element written (no
// accumulation). qkv and lse as in the forward; delta (B,NH,T) FP32 receives sum_t2 p * dp per row,
// which the second kernel reads (a block per key/value head there).
inline void attention_exact_backward(bf16 *dqkv, float *delta, const bf16 *dout, const bf16 *qkv,
                                     const float *lse, int B, int T, int C, int NH, int KVH,
                                     cudaStream_t stream) {
    using namespace layers_impl;
    if (B <= 0 || T <= 0) return;
    const dim3 grid = attention_grid(qkv, dout, B, T, C, NH, KVH), kv_grid(grid.x, B * KVH);
    const int hs = C / NH;
    const float scale = 1.0f / sqrtf((float)hs);
    for_head_size(hs, [&](auto head_size) {
        launch<attention_backward_dq_kernel<decltype(head_size)::value>>(
            {grid, ATT_THREADS, 0, stream}, dqkv, delta, dout, qkv, lse, T, C, NH, KVH, scale);
    });
    for_head_size(hs, [&](auto head_size) {
        launch<attention_backward_dkv_kernel<decltype(head_size)::value>>(
            {kv_grid, ATT_THREADS, 0, stream}, dqkv, dout, qkv, lse, delta, T, C, NH, KVH, scale);
    });
}

// ---------------------------------------------------------------------------------------------------------
// The interface the trainer calls. The fast path's cuDNN graphs live in gpu/attention_cudnn.cpp, a
// translation unit of its own: cudnn-frontend is host code, and compiling its headers once with the host
// compiler instead of in every nvcc build of the trainer saves minutes.

typedef struct {
    int fast;                // 1: cuDNN's fused attention; 0: the exact kernels
    int B, T, C, NH, KVH;    // the shape the fast path's graphs were built for
    AttentionGraphs *graphs; // fast only
    char description[256];   // what runs, for the run's banner
} Attention;

// What the memory plan gives the attention (memory_plan.h: BUF_ATTENTION_WORKSPACE).
typedef struct {
    void *workspace;        // the fast path's: cuDNN's graphs run in it
    size_t workspace_bytes; // 0 when the plan holds none
    const char *declined;   // auto planned without it: why (the banner says so); NULL otherwise
} AttentionMemory;

// Picks the attention for --attention (AttentionChoice, attention_choice.h) at shape (B,T,C,NH,KVH) and
// builds what it needs (cuDNN's graphs, here, never in a step; they run in the plan's workspace, memory).
// auto: fast where this build has cuDNN, the plan holds its workspace and cuDNN runs the shape on this device
// in it, else exact, saying why; fast: that or a one-line error. Grouped-query heads (KVH < NH) alike:
// cuDNN's graphs take them.
inline void attention_setup(Attention *att, int choice, int B, int T, int C, int NH, int KVH,
                            const AttentionMemory *memory) {
    memset(att, 0, sizeof(*att));
    att->B = B, att->T = T, att->C = C, att->NH = NH, att->KVH = KVH;
    check_attention_shape(C, NH);       // the exact kernels' shapes: the fallback must exist
    if (!plan_fast_attention(choice)) { // the plan's answer: --attention exact, or auto without cuDNN
        snprintf(att->description, sizeof att->description,
                 choice == ATTENTION_EXACT ? "exact" : "exact (built without cuDNN)");
        return;
    }
    if (choice == ATTENTION_AUTO && memory->declined) {
        snprintf(att->description, sizeof att->description, "exact (%s)", memory->declined);
        return;
    }
#ifdef USE_CUDNN
    char why[192];
    att->graphs =
        cudnn_attention_create(B, T, C, NH, KVH, memory->workspace, memory->workspace_bytes, why, sizeof why);
    if (!att->graphs) {
        if (choice == ATTENTION_FAST)
            fail("--attention fast: cuDNN %s runs no deterministic fused attention for B %d, T %d, %d heads "
                 "(%d key/value heads) of %d on this device (%s); --attention exact does",
                 cudnn_attention_version(), B, T, NH, KVH, C / NH, why);
        snprintf(att->description, sizeof att->description, "exact (cuDNN %s declined: %s)",
                 cudnn_attention_version(), why);
        return;
    }
    att->fast = 1;
    snprintf(att->description, sizeof att->description,
             "fast (cuDNN %s fused attention, deterministic backward, %.1f MiB workspace in the plan)",
             cudnn_attention_version(), cudnn_attention_workspace_bytes(att->graphs) / 1048576.0);
#else
    fail("--attention fast: this build has no cuDNN (make finds it in CUDNN_HOME and CUDNN_FRONTEND_HOME; "
         "scripts/cudnn_deps.sh puts it there); --attention exact runs the exact kernels");
#endif
}

inline void attention_free(Attention *att) {
#ifdef USE_CUDNN
    if (att->graphs) cudnn_attention_destroy(att->graphs);
#endif
    memset(att, 0, sizeof(*att));
}

namespace layers_impl {
inline void check_fast_shape(const Attention *att, int B, int T, int C, int NH) {
    if (B != att->B || T != att->T || C != att->C || NH != att->NH)
        fail("attention: called at B %d T %d C %d NH %d, set up for B %d T %d C %d NH %d (a bug)", B, T, C,
             NH, att->B, att->T, att->C, att->NH);
}
} // namespace layers_impl

// out (B,T,C), lse (B,NH,T) <- qkv (B,T,QKV), by the attention att picked (at its KVH).
inline void attention_forward(const Attention *att, bf16 *out, float *lse, const bf16 *qkv, int B, int T,
                              int C, int NH, cudaStream_t stream) {
    if (!att->fast) {
        attention_exact_forward(out, lse, qkv, B, T, C, NH, att->KVH, stream);
        return;
    }
#ifdef USE_CUDNN
    layers_impl::check_fast_shape(att, B, T, C, NH);
    cudnn_attention_forward(att->graphs, out, lse, qkv, stream);
#endif
}

// dqkv (B,T,QKV) <- dout (B,T,C), with qkv, out and lse of the forward. delta (B,NH,T): the exact
// kernels' scratch (sum_t2 p * dp per row); cuDNN keeps its own in its workspace.
inline void attention_backward(const Attention *att, bf16 *dqkv, float *delta, const bf16 *dout,
                               const bf16 *qkv, const bf16 *out, const float *lse, int B, int T, int C,
                               int NH, cudaStream_t stream) {
    if (!att->fast) {
        attention_exact_backward(dqkv, delta, dout, qkv, lse, B, T, C, NH, att->KVH, stream);
        return;
    }
#ifdef USE_CUDNN
    layers_impl::check_fast_shape(att, B, T, C, NH);
    cudnn_attention_backward(att->graphs, dqkv, dout, qkv, out, lse, stream);
#else
    (void)out;
#endif
}

#endif // GPU_ATTENTION_CUH

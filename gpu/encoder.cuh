// gpu/encoder.cuh: the token and position embeddings (llm.c's encoder), forward and backward, under
// gpu/layer_common.cuh's contract.
#ifndef GPU_ENCODER_CUH
#define GPU_ENCODER_CUH

#include <stdlib.h>

#include "layer_common.cuh"

namespace layers_impl {

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

} // namespace layers_impl

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

#endif // GPU_ENCODER_CUH

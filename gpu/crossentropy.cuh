// gpu/crossentropy.cuh: the loss, softmax cross-entropy over the vocabulary, and its logits gradient written
// in place of the logits.
#ifndef GPU_CROSSENTROPY_CUH
#define GPU_CROSSENTROPY_CUH

#include <algorithm>

#include "layer_common.cuh"

namespace layers_impl {

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

} // namespace layers_impl

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

#endif // GPU_CROSSENTROPY_CUH

// gpu/rope.cuh: Llama's rotary position embeddings on the CUDA trainer's qkv (train_gpt.c's rope_rotate, same
// rounding points: gpu/layer_common.cuh's contract). The table of (cos, sin) is gpt_model.h's rope_table,
// computed on the host in double and uploaded once, so both trainers rotate by the same floats.
// Why a pass of its own, in place, rather than fused into the QKV GEMM or the attention's input: cuBLASLt has
// no rotary epilogue, and cuDNN's fused attention reads q and k as they lie in memory, so the fast path needs
// them rotated there. The pass reads and writes the query and key columns of each qkv row once ((NH + KVH) hs
// of (NH + 2 KVH) hs: 72 of 80 heads' columns at Llama 2 70B), which the time plan counts.
#ifndef GPU_ROPE_CUH
#define GPU_ROPE_CUH

#include "layer_common.cuh"

namespace layers_impl {

// One thread per (row, head, pair) of the NH query and KVH key heads of qkv (N,QKV): (x0, x1) becomes
// (x0 cos - x1 sin, x0 sin + x1 cos), sin negated for the inverse (the transposed rotation), each rounded
// once.
static __global__ void rope_kernel(bf16 *qkv, const float *table, int N, int T, int NH, int KVH, int hs,
                                   int inverse) {
    const int pairs = hs / 2, heads = NH + KVH;
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)N * heads * pairs) return;
    const int bt = (int)(idx / ((size_t)heads * pairs)), head = (int)(idx / pairs % heads),
              i = (int)(idx % pairs);
    bf16 *x = qkv + (size_t)bt * (NH + 2 * KVH) * hs + head * hs + 2 * i;
    const float *cs = table + ((size_t)(bt % T) * pairs + i) * 2;
    const float cos_t = cs[0], sin_t = inverse ? -cs[1] : cs[1], x0 = bf2f(x[0]), x1 = bf2f(x[1]);
    x[0] = f2bf(fsub(fmul(x0, cos_t), fmul(x1, sin_t)));
    x[1] = f2bf(fadd(fmul(x0, sin_t), fmul(x1, cos_t)));
}

} // namespace layers_impl

// In place on the query and key heads of qkv (B,T,QKV) laid out as gpu/attention.cuh reads it: each pair of
// head dimensions (2i, 2i+1) at position t rotated by table (maxT, hs/2, 2)'s (cos, sin) of (t, i); inverse:
// by the opposite angle, the backward of the rotation applied to dqkv.
inline void rope_rotate(bf16 *qkv, const float *table, int B, int T, int C, int NH, int KVH, int inverse,
                        cudaStream_t stream) {
    const int N = B * T, hs = C / NH;
    const long threads = (long)N * (NH + KVH) * (hs / 2);
    if (threads <= 0) return;
    launch<layers_impl::rope_kernel>({ceil_div(threads, 256), 256, 0, stream}, qkv, table, N, T, NH, KVH, hs,
                                     inverse);
}

#endif // GPU_ROPE_CUH

// gpu/activations.cuh: the feed-forward block's activations, GELU (gpu/gelu.cuh's formula) and Llama's
// SwiGLU, forward and backward, and the values an FP8 cast computes in place of their stored outputs.
#ifndef GPU_ACTIVATIONS_CUH
#define GPU_ACTIVATIONS_CUH

#include "gelu.cuh"
#include "layer_common.cuh"

namespace layers_impl {

// ---------------------------------------------------------------------------------------------------------
// GELU, elementwise: one thread per W elements.

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

} // namespace layers_impl

// ---------------------------------------------------------------------------------------------------------
// GELU (elementwise over n)

// out = bf16(gelu(inp)), tanh approximation
inline void gelu_forward(bf16 *out, const bf16 *inp, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    const int W = layers_impl::pack_width((int64_t)n, out, inp), grid = ceil_div((long)(n / W), 256);
    if (W == 8)
        launch<layers_impl::gelu_forward_kernel<8>>({grid, 256, 0, stream}, out, inp, n);
    else
        launch<layers_impl::gelu_forward_kernel<1>>({grid, 256, 0, stream}, out, inp, n);
}

// gelu_forward's output at element i, computed where an FP8 cast reads it (gpu/fp8_cast.cuh's
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

#endif // GPU_ACTIVATIONS_CUH

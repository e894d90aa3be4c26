// gpu/gelu.cuh: the tanh GELU and its derivative, the one definition that the GELU kernels
// (gpu/activations.cuh) and the emulated cuBLASLt's GELU epilogues (emu/cublaslt.cpp, host code: __device__
// is empty there) share. train_gpt.c's gelu_forward and gelu_backward arithmetic, operation for operation,
// spelled with the _rn intrinsics so that no compiler fuses a multiply and an add the CPU does not.
// cuBLASLt documents its GELU epilogues only as x := GELU(x); the tanh form is what PyTorch's addmm falls
// back to where it cannot use them (at::gelu_(result, "tanh")) and what llm.c's own kernel, which they
// replace there, computes.
#ifndef GPU_GELU_CUH
#define GPU_GELU_CUH

#include <cuda_runtime.h>
#include <math.h>

constexpr float GELU_SQRT_2_OVER_PI = 0.7978845608028654f; // train_gpt.c's GELU_SCALE
constexpr float GELU_CUBIC = 0.044715f;

// The CPU's u = GELU_SCALE * (x + 0.044715f * x * x * x), same association.
__device__ __forceinline__ float gelu_inner(float x) {
    return __fmul_rn(GELU_SQRT_2_OVER_PI, __fadd_rn(x, __fmul_rn(__fmul_rn(__fmul_rn(GELU_CUBIC, x), x), x)));
}

// 0.5f * x * (1.0f + tanhf(u))
__device__ __forceinline__ float gelu_value(float x) {
    return __fmul_rn(__fmul_rn(0.5f, x), __fadd_rn(1.0f, tanhf(gelu_inner(x))));
}

// dout * gelu'(x)
__device__ __forceinline__ float gelu_backward_value(float dout, float x) {
    const float th = tanhf(gelu_inner(x));
    const float sech2 = __fsub_rn(1.0f, __fmul_rn(th, th));
    // 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x)
    const float slope = __fadd_rn(1.0f, __fmul_rn(__fmul_rn(__fmul_rn(3.0f, GELU_CUBIC), x), x));
    const float local =
        __fadd_rn(__fmul_rn(0.5f, __fadd_rn(1.0f, th)),
                  __fmul_rn(__fmul_rn(__fmul_rn(__fmul_rn(0.5f, x), sech2), GELU_SQRT_2_OVER_PI), slope));
    return __fmul_rn(dout, local);
}

#endif // GPU_GELU_CUH

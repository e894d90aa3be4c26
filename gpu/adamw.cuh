// gpu/adamw.cuh: the optimizer step on the device: AdamW on the FP32 master weights, bit for bit the CPU's
// adamw_update, writing their BF16 copy; and the BF16 copy of FP32 values.
#ifndef GPU_ADAMW_CUH
#define GPU_ADAMW_CUH

#include "common.cuh"
#include "step_params.cuh"

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

#endif // GPU_ADAMW_CUH

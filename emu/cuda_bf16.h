// emu/cuda_bf16.h: the BF16 types and conversions of CUDA's cuda_bf16.h for the CPU emulation build
// (emu/cuda_runtime.h says how the build uses this folder). The conversions are CUDA's: round to nearest
// even, NaN to the canonical quiet NaN 0x7FFF; arithmetic on bf16 values goes through float, as the
// project's kernels spell it.
#ifndef EMU_CUDA_BF16_H
#define EMU_CUDA_BF16_H

#include <stdint.h>
#include <string.h>

#include "cuda_runtime.h" // float2

struct __nv_bfloat16 {
    uint16_t __x;
};

struct __nv_bfloat162 {
    __nv_bfloat16 x, y;
};

static inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    __nv_bfloat16 h;
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) {
        h.__x = 0x7FFF;
        return h;
    }
    const uint32_t lsb = (u >> 16) & 1u; // ties go to the even neighbour
    h.__x = (uint16_t)((u + 0x7FFFu + lsb) >> 16);
    return h;
}

static inline __nv_bfloat16 __float2bfloat16(float f) {
    return __float2bfloat16_rn(f);
}

static inline float __bfloat162float(__nv_bfloat16 h) {
    const uint32_t u = (uint32_t)h.__x << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) {
    return __nv_bfloat162{a, b};
}

static inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) {
    return __nv_bfloat162{__float2bfloat16_rn(a), __float2bfloat16_rn(b)};
}

static inline float2 __bfloat1622float2(__nv_bfloat162 v) {
    return float2{__bfloat162float(v.x), __bfloat162float(v.y)};
}

static inline __nv_bfloat16 __low2bfloat16(__nv_bfloat162 v) {
    return v.x;
}

static inline __nv_bfloat16 __high2bfloat16(__nv_bfloat162 v) {
    return v.y;
}

#endif // EMU_CUDA_BF16_H

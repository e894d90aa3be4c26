// gpu/common.cuh: what every CUDA file of the project shares: error checks that end with one clear
// line, the element types, and launch helpers.
#ifndef GPU_COMMON_CUH
#define GPU_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "../common.h"

typedef __nv_bfloat16 bf16;
typedef uint8_t fp8; // raw E4M3 or E5M2 code; the format travels beside the pointer

#define cuda_check(call) cuda_check_at((call), #call, __FILE__, __LINE__)
static inline void cuda_check_at(cudaError_t err, const char *what, const char *file, int line) {
    if (err != cudaSuccess) fail("CUDA: %s: %s (%s:%d)", what, cudaGetErrorString(err), file, line);
}

// A kernel launch's own error (bad configuration) surfaces at once; execution errors at the next sync.
#define cuda_check_launch() cuda_check(cudaGetLastError())

static inline int ceil_div(long a, long b) {
    return (int)((a + b - 1) / b);
}

#endif // GPU_COMMON_CUH

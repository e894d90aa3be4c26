// gpu/common.cuh: what every CUDA file of the project shares: error checks that end with one clear
// line, the element types, the one way kernels are launched, and named NVTX ranges.
#ifndef GPU_COMMON_CUH
#define GPU_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>

#include <tuple>
#include <utility>

#include "../core/common.h"

typedef __nv_bfloat16 bf16;
typedef uint8_t fp8; // raw E4M3 or E5M2 code; the format travels beside the pointer

#define cuda_check(call) cuda_check_at((call), #call, __FILE__, __LINE__)
static inline void cuda_check_at(cudaError_t err, const char *what, const char *file, int line) {
    if (err != cudaSuccess) fail("CUDA: %s: %s (%s:%d)", what, cudaGetErrorString(err), file, line);
}

static inline int ceil_div(long a, long b) {
    return (int)((a + b - 1) / b);
}

// An NVTX range named printf-style, closed by nvtxRangePop: a layer's forward or backward, the optimizer, a
// collective, as Nsight Systems shows them on the timeline (and projected onto the GPU's streams). NVTX3 is
// header-only and returns at once when no profiler is attached; the name costs one snprintf. Ranges are
// host-side marks: a CUDA Graph replay shows them only as the capture recorded them, so a per-layer
// timeline is taken with --cuda_graph 0.
__attribute__((format(printf, 1, 2))) static inline void nvtx_push(const char *format, ...) {
    char name[64];
    va_list args;
    va_start(args, format);
    vsnprintf(name, sizeof name, format, args);
    va_end(args);
    nvtxRangePushA(name);
}

// Blocks of a grid-stride elementwise kernel over n elements (256 threads each).
static inline int elementwise_blocks(size_t n) {
    size_t blocks = n / 256 + 1;
    return blocks > 1024 ? 1024 : (int)blocks;
}

// ----------------------------------------------------------------------------
// Kernel launches. Every kernel of the project starts through launch<kernel>(shape, args...): the
// arguments are converted to the kernel's parameter types and handed to cudaLaunchKernel, which is what
// nvcc's <<<grid, block, shared, stream>>> syntax compiles to. Spelled as a plain call, it is one
// launch path for the GPU build and for the CPU emulation build (emu/, which stands in for
// cudaLaunchKernel), and a refused launch (a configuration beyond the device's limits) ends the run
// with the kernel's name. Errors of a running kernel surface at the next synchronisation.

typedef struct {
    dim3 grid, block;
    size_t shared_bytes; // dynamic shared memory per block
    cudaStream_t stream;
} LaunchShape;

// "name<args>" of the kernel, from the compiler's spelling of this function's template argument.
template <auto kernel> static inline void kernel_name(char *out, size_t size) {
    const char *pretty = __PRETTY_FUNCTION__, *start = strstr(pretty, "kernel = ");
    start = start ? start + strlen("kernel = ") : pretty;
    size_t n = strcspn(start, ";]");
    snprintf(out, size, "%.*s", (int)n, start);
}

template <typename... Params, typename... Args, size_t... I>
static inline cudaError_t launch_with(void (*kernel)(Params...), const LaunchShape &shape,
                                      std::index_sequence<I...>, Args &&...args) {
    std::tuple<Params...> params(std::forward<Args>(args)...);
    void *param_pointers[] = {(void *)&std::get<I>(params)..., nullptr};
    return cudaLaunchKernel(kernel, shape.grid, shape.block, param_pointers, shape.shared_bytes,
                            shape.stream);
}

template <auto kernel, typename... Args> static inline void launch(const LaunchShape &shape, Args &&...args) {
    cudaError_t err =
        launch_with(kernel, shape, std::index_sequence_for<Args...>(), std::forward<Args>(args)...);
    if (err != cudaSuccess) {
        char name[256];
        kernel_name<kernel>(name, sizeof(name));
        fail("CUDA: launch of %s (grid %u x %u x %u, block %u x %u x %u, %zu bytes of shared memory): %s",
             name, shape.grid.x, shape.grid.y, shape.grid.z, shape.block.x, shape.block.y, shape.block.z,
             shape.shared_bytes, cudaGetErrorString(err));
    }
}

#endif // GPU_COMMON_CUH

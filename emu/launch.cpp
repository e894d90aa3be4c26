// emu/launch.cpp: the launch path, and the runtime API's error and device calls.
//  - a launch (cudaLaunchKernel, through emu/cuda_runtime.h's launch_typed, which copied its arguments) is
//    checked as a GPU checks it: code for the device (CUDA_EMU_DEVICE), the grid and block against the
//    device's limits, dynamic shared memory against cudaFuncSetAttribute's opt-in; and, beyond a GPU,
//    every pointer argument against device memory (memory.cpp). It is then queued on its stream
//    (streams.cpp), and its blocks run when the host synchronises (threads.cpp's execute_kernel);
//  - the last error, which every runtime call that fails sets (set_error) and cudaGetLastError returns;
//    error names and strings;
//  - one device, device 0: an H200, or the device CUDA_EMU_DEVICE names, as cudaGetDeviceProperties reports
//    it, with the limits the launch checks use.
#include <stdio.h>
#include <string.h>

#include <map>
#include <string>

#include "runtime_internal.h"

namespace emu {

static std::map<const void *, size_t> dynamic_shared_limit; // cudaFuncSetAttribute's opt-ins

cudaError_t kernel_image(const void *function) {
    if (settings().device->has_image) return cudaSuccess;
    explain("%s: this program has code for sm_90a and sm_100a, not for the %s's sm_%d",
            function_name(function).c_str(), settings().device->name, compute_capability());
    return cudaErrorNoKernelImageForDevice;
}

// The checks a GPU makes when a kernel is launched: code for the device, the configuration against the
// device's limits, and (beyond a GPU) every pointer argument against device memory.
static cudaError_t check_launch(const KernelLaunch &k) {
    auto name = [&k] { return function_name(k.function); }; // looked up only for a message
    if (cudaError_t image = kernel_image(k.function)) return image;
    const unsigned block[3] = {k.block.x, k.block.y, k.block.z}, grid[3] = {k.grid.x, k.grid.y, k.grid.z};
    const uint64_t threads = (uint64_t)k.block.x * k.block.y * k.block.z;
    for (int d = 0; d < 3; d++) {
        if (block[d] == 0 || block[d] > MAX_BLOCK_DIM[d] || grid[d] == 0 || grid[d] > MAX_GRID_DIM[d]) {
            explain(
                "launch of %s: grid (%u,%u,%u) x block (%u,%u,%u): dimension %c beyond the device's limits "
                "(grid %u x %u x %u, block %u x %u x %u, none zero)",
                name().c_str(), grid[0], grid[1], grid[2], block[0], block[1], block[2], "xyz"[d],
                MAX_GRID_DIM[0], MAX_GRID_DIM[1], MAX_GRID_DIM[2], MAX_BLOCK_DIM[0], MAX_BLOCK_DIM[1],
                MAX_BLOCK_DIM[2]);
            return cudaErrorInvalidConfiguration;
        }
    }
    if (threads > (uint64_t)MAX_THREADS_PER_BLOCK) {
        explain("launch of %s: %llu threads per block, more than the device's %d", name().c_str(),
                (unsigned long long)threads, MAX_THREADS_PER_BLOCK);
        return cudaErrorInvalidConfiguration;
    }
    size_t limit = DEFAULT_DYNAMIC_SHARED;
    auto opt_in = dynamic_shared_limit.find(k.function);
    if (opt_in != dynamic_shared_limit.end()) limit = opt_in->second;
    if (k.shared_bytes > limit) {
        explain(
            "launch of %s: %zu bytes of dynamic shared memory, more than the %zu this kernel may use (%s)",
            name().c_str(), k.shared_bytes, limit,
            opt_in == dynamic_shared_limit.end() ? "raise it with cudaFuncSetAttribute" : "as set");
        return cudaErrorInvalidValue;
    }
    for (int i = 0; i < k.num_pointers; i++) {
        const void *p = k.pointer_values[i];
        if (p && !is_device_range(p, 0) && !is_pinned_range(p, 0))
            fatal("launch of %s: argument %d is %s: a kernel reads and writes device memory only",
                  name().c_str(), k.pointer_positions[i] + 1, describe_address(p).c_str());
    }
    return cudaSuccess;
}

cudaError_t set_max_dynamic_shared(const void *function, int bytes) {
    if (bytes < 0 || (size_t)bytes > MAX_DYNAMIC_SHARED) {
        explain("cudaFuncSetAttribute(%s): %d bytes of dynamic shared memory, beyond the device's %zu",
                function_name(function).c_str(), bytes, MAX_DYNAMIC_SHARED);
        return cudaErrorInvalidValue;
    }
    dynamic_shared_limit[function] = (size_t)bytes;
    return cudaSuccess;
}

static cudaError_t last_error = cudaSuccess;
cudaError_t set_error(cudaError_t err) {
    if (err != cudaSuccess) last_error = err;
    return err;
}

cudaError_t launch_kernel(const KernelLaunch &launch, cudaStream_t stream) {
    cudaError_t err = check_launch(launch);
    if (err != cudaSuccess) return set_error(err);
    return set_error(enqueue(stream, OP_KERNEL, [launch] { execute_kernel(launch); }));
}

} // namespace emu

using namespace emu;

static const char *error_name(cudaError_t error) {
    switch (error) {
    case cudaSuccess:
        return "cudaSuccess";
    case cudaErrorInvalidValue:
        return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
        return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
        return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer:
        return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidMemcpyDirection:
        return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorInvalidDeviceFunction:
        return "cudaErrorInvalidDeviceFunction";
    case cudaErrorNoKernelImageForDevice:
        return "cudaErrorNoKernelImageForDevice";
    case cudaErrorNoDevice:
        return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice:
        return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle:
        return "cudaErrorInvalidResourceHandle";
    case cudaErrorIllegalState:
        return "cudaErrorIllegalState";
    case cudaErrorNotReady:
        return "cudaErrorNotReady";
    case cudaErrorIllegalAddress:
        return "cudaErrorIllegalAddress";
    case cudaErrorLaunchOutOfResources:
        return "cudaErrorLaunchOutOfResources";
    case cudaErrorLaunchFailure:
        return "cudaErrorLaunchFailure";
    case cudaErrorNotSupported:
        return "cudaErrorNotSupported";
    case cudaErrorStreamCaptureUnsupported:
        return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated:
        return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureMerge:
        return "cudaErrorStreamCaptureMerge";
    case cudaErrorStreamCaptureUnmatched:
        return "cudaErrorStreamCaptureUnmatched";
    case cudaErrorStreamCaptureUnjoined:
        return "cudaErrorStreamCaptureUnjoined";
    case cudaErrorStreamCaptureIsolation:
        return "cudaErrorStreamCaptureIsolation";
    case cudaErrorStreamCaptureImplicit:
        return "cudaErrorStreamCaptureImplicit";
    case cudaErrorCapturedEvent:
        return "cudaErrorCapturedEvent";
    case cudaErrorStreamCaptureWrongThread:
        return "cudaErrorStreamCaptureWrongThread";
    }
    return "unknown CUDA error";
}

const char *cudaGetErrorName(cudaError_t error) {
    return error_name(error);
}

const char *cudaGetErrorString(cudaError_t error) {
    switch (error) {
    case cudaSuccess:
        return "no error";
    case cudaErrorInvalidValue:
        return "invalid argument";
    case cudaErrorMemoryAllocation:
        return "out of memory";
    case cudaErrorInvalidConfiguration:
        return "invalid configuration argument";
    case cudaErrorNoDevice:
        return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice:
        return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle:
        return "invalid resource handle";
    case cudaErrorStreamCaptureUnsupported:
        return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
        return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureUnjoined:
        return "capture operation did not join the origin stream";
    case cudaErrorStreamCaptureIsolation:
        return "dependency created on uncaptured work in another stream";
    case cudaErrorStreamCaptureImplicit:
        return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorCapturedEvent:
        return "operation not permitted on an event last recorded in a capturing stream";
    default:
        return error_name(error);
    }
}

cudaError_t cudaGetLastError(void) {
    cudaError_t err = last_error;
    last_error = cudaSuccess;
    return err;
}

cudaError_t cudaPeekAtLastError(void) {
    return last_error;
}

cudaError_t cudaGetDeviceCount(int *count) {
    *count = 1;
    return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *version) {
    *version = 13000;
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *version) {
    *version = 13000;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
    return set_error(device == 0 ? cudaSuccess : cudaErrorInvalidDevice);
}

cudaError_t cudaGetDevice(int *device) {
    *device = 0;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device) {
    if (device != 0) return set_error(cudaErrorInvalidDevice);
    memset(prop, 0, sizeof(*prop));
    snprintf(prop->name, sizeof(prop->name), "NVIDIA %s (CPU emulation)", settings().device->name);
    prop->totalGlobalMem = DEVICE_TOTAL_BYTES;
    prop->sharedMemPerBlock = DEFAULT_DYNAMIC_SHARED;
    prop->sharedMemPerBlockOptin = MAX_DYNAMIC_SHARED;
    prop->sharedMemPerMultiprocessor = 228 * 1024;
    prop->regsPerBlock = 65536;
    prop->warpSize = 32;
    prop->maxThreadsPerBlock = MAX_THREADS_PER_BLOCK;
    for (int d = 0; d < 3; d++) {
        prop->maxThreadsDim[d] = (int)MAX_BLOCK_DIM[d];
        prop->maxGridSize[d] = (int)MAX_GRID_DIM[d];
    }
    prop->major = emu::compute_capability() / 10;
    prop->minor = emu::compute_capability() % 10;
    prop->multiProcessorCount = 132;
    prop->maxThreadsPerMultiProcessor = 2048;
    prop->l2CacheSize = 60 * 1024 * 1024;
    prop->memoryBusWidth = 6144;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char *bus_id, int len, int device) {
    if (device != 0) return set_error(cudaErrorInvalidDevice);
    snprintf(bus_id, (size_t)len, "0000:00:00.0");
    return cudaSuccess;
}

cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest) {
    if (least) *least = 0;
    if (greatest) *greatest = -5;
    return cudaSuccess;
}

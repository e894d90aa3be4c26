// emu/memory.cpp: device memory. An allocation of cudaMalloc is host memory of its own mapping: its end meets
// an inaccessible guard page (an access past a 256-byte rounded end faults), and between device operations
// its pages are inaccessible to host code, as device memory is on a GPU, so that a host read of a device
// pointer faults here as it does there. The sanitizer build (ASan) takes allocations from malloc instead,
// whose red zones catch an access one byte past the end; it cannot also close them to host code.
//
// Provides the registry that every check asks (is_device_range, is_pinned_range, describe_address in
// emu/emu.h; check_device_range for atomics), open_device_memory for whatever runs device work (streams.cpp's
// drain and synchronous copies), and the runtime API's allocation calls, cudaMemGetInfo answering as an
// H200. A fault on these pages is reported by threads.cpp's handler, which knows the CUDA thread that made
// it; copies and memsets are streams.cpp's; the report prints the peak counted here.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <string>

#include "runtime_internal.h"

namespace emu {

static const size_t CONTEXT_BYTES = (size_t)512 << 20;    // what a CUDA context takes on a GPU
static const size_t ALLOCATION_GRANULE = (size_t)2 << 20; // cudaMalloc rounds large allocations to 2 MiB

std::mutex memory_mutex;
std::map<uintptr_t, Allocation> allocations; // by base
static size_t device_live, device_granted, device_live_count;
size_t device_peak, device_peak_count;
bool device_open = false; // device pages accessible (a device operation is running)

const Allocation *find_allocation(const void *p, bool include_guards) {
    uintptr_t a = (uintptr_t)p;
    auto it = allocations.upper_bound(a + (include_guards ? 2 * (uintptr_t)getpagesize() : 0));
    while (it != allocations.begin()) {
        --it;
        const Allocation &al = it->second;
        uintptr_t lo = include_guards && al.mapping ? (uintptr_t)al.mapping : (uintptr_t)al.base;
        uintptr_t hi = include_guards && al.mapping ? (uintptr_t)al.mapping + al.mapping_bytes
                                                    : (uintptr_t)al.base + al.bytes;
        if (a >= lo && a < hi) return &al;
        if ((uintptr_t)al.mapping + al.mapping_bytes < a && (uintptr_t)al.base + al.bytes < a) break;
    }
    return NULL;
}

static bool in_allocation(const void *p, size_t bytes, AllocationKind kind) {
    std::lock_guard<std::mutex> lock(memory_mutex);
    const Allocation *al = find_allocation(p, false);
    if (!al && bytes == 0) { // an empty range may start at an allocation's end
        uintptr_t a = (uintptr_t)p;
        auto it = allocations.upper_bound(a);
        if (it != allocations.begin() && (uintptr_t)(--it)->second.base + it->second.bytes == a)
            al = &it->second;
    }
    return al && al->kind == kind && (uintptr_t)p + bytes <= (uintptr_t)al->base + al->bytes;
}

bool is_device_range(const void *p, size_t bytes) {
    return in_allocation(p, bytes, ALLOCATION_DEVICE);
}

bool is_pinned_range(const void *p, size_t bytes) {
    return in_allocation(p, bytes, ALLOCATION_PINNED);
}

std::string describe_address(const void *p) {
    std::lock_guard<std::mutex> lock(memory_mutex);
    const Allocation *al = find_allocation(p, true);
    char buf[256];
    if (!al) {
        snprintf(buf, sizeof(buf), "%p (host memory, not from cudaMalloc)", p);
    } else {
        const char *what = al->kind == ALLOCATION_DEVICE ? "cudaMalloc" : "cudaMallocHost";
        ptrdiff_t offset = (const char *)p - al->base;
        snprintf(buf, sizeof(buf), "%p (byte %td of a %s allocation of %zu bytes at %p)", p, offset, what,
                 al->bytes, (void *)al->base);
    }
    return buf;
}

void check_device_range(const void *p, size_t bytes, const char *what) {
    if (!is_device_range(p, bytes)) {
        ThreadContext *t = current_thread;
        if (t)
            fatal("%s on %zu bytes at %s: not device memory (block (%u,%u,%u), thread (%u,%u,%u))", what,
                  bytes, describe_address(p).c_str(), t->block_idx.x, t->block_idx.y, t->block_idx.z,
                  t->thread_idx.x, t->thread_idx.y, t->thread_idx.z);
        fatal("%s on %zu bytes at %s: not device memory", what, bytes, describe_address(p).c_str());
    }
}

#ifndef EMU_ASAN
static void protect_device_pages(bool open) {
    for (auto &entry : allocations) {
        const Allocation &al = entry.second;
        if (al.kind == ALLOCATION_DEVICE && al.page_bytes &&
            mprotect(al.pages, al.page_bytes, open ? PROT_READ | PROT_WRITE : PROT_NONE) != 0)
            fatal("mprotect of device memory failed");
    }
}
#endif

// Device memory becomes accessible for the device operations that follow, and inaccessible again after.
void open_device_memory(bool open) {
    std::lock_guard<std::mutex> lock(memory_mutex);
    if (device_open == open) return;
    device_open = open;
#ifndef EMU_ASAN
    protect_device_pages(open);
#endif
}

static cudaError_t allocate(void **ptr, size_t bytes, AllocationKind kind) {
    install_fault_handler();
    Allocation al;
    memset(&al, 0, sizeof(al));
    al.kind = kind;
    al.bytes = bytes;
    size_t data = (bytes + 255) & ~(size_t)255;
    if (data == 0) data = 256;
#ifdef EMU_ASAN
    void *p = NULL;
    if (posix_memalign(&p, 256, bytes ? bytes : 1) != 0) return cudaErrorMemoryAllocation;
    al.base = (char *)p;
#else
    if (kind == ALLOCATION_PINNED) {
        void *p = NULL;
        if (posix_memalign(&p, 256, data) != 0) return cudaErrorMemoryAllocation;
        al.base = (char *)p;
    } else {
        size_t page = (size_t)getpagesize();
        al.page_bytes = (data + page - 1) / page * page;
        al.mapping_bytes = al.page_bytes + 2 * page;
        void *m = mmap(NULL, al.mapping_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED) return cudaErrorMemoryAllocation;
        al.mapping = (char *)m;
        al.pages = al.mapping + page;
        al.base = al.pages + (al.page_bytes - data); // the end meets the upper guard page
    }
#endif
    std::lock_guard<std::mutex> lock(memory_mutex);
#ifndef EMU_ASAN
    if (al.page_bytes && mprotect(al.pages, al.page_bytes, device_open ? PROT_READ | PROT_WRITE : PROT_NONE))
        return cudaErrorMemoryAllocation;
#endif
    if (kind == ALLOCATION_DEVICE) {
        device_live += bytes;
        device_granted += (bytes + ALLOCATION_GRANULE - 1) / ALLOCATION_GRANULE * ALLOCATION_GRANULE;
        device_live_count++;
        device_peak = std::max(device_peak, device_live);
        device_peak_count = std::max(device_peak_count, device_live_count);
    }
    allocations[(uintptr_t)al.base] = al;
    racecheck_device_allocated(al.base, bytes);
    *ptr = al.base;
    return cudaSuccess;
}

static cudaError_t release(void *ptr, AllocationKind kind) {
    if (!ptr) return cudaSuccess;
    std::lock_guard<std::mutex> lock(memory_mutex);
    auto it = allocations.find((uintptr_t)ptr);
    if (it == allocations.end() || it->second.kind != kind) {
        explain("%s(%p): not the start of a live %s allocation",
                kind == ALLOCATION_DEVICE ? "cudaFree" : "cudaFreeHost", ptr,
                kind == ALLOCATION_DEVICE ? "cudaMalloc" : "cudaMallocHost");
        return cudaErrorInvalidValue;
    }
    Allocation al = it->second;
    allocations.erase(it);
    racecheck_device_freed(al.base);
    if (kind == ALLOCATION_DEVICE) {
        device_live -= al.bytes;
        device_granted -= (al.bytes + ALLOCATION_GRANULE - 1) / ALLOCATION_GRANULE * ALLOCATION_GRANULE;
        device_live_count--;
    }
    if (al.mapping)
        munmap(al.mapping, al.mapping_bytes);
    else
        free(al.base);
    return cudaSuccess;
}

} // namespace emu

using namespace emu;

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
    std::lock_guard<std::mutex> lock(memory_mutex);
    size_t used = CONTEXT_BYTES + device_granted;
    *total_bytes = DEVICE_TOTAL_BYTES;
    *free_bytes = used < DEVICE_TOTAL_BYTES ? DEVICE_TOTAL_BYTES - used : 0;
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **ptr, size_t bytes) {
    cudaError_t err = refuse_during_capture("cudaMalloc");
    if (err != cudaSuccess) return set_error(err);
    size_t free_bytes, total;
    cudaMemGetInfo(&free_bytes, &total);
    if (bytes > free_bytes) {
        explain("cudaMalloc of %zu bytes: %zu of the device's %zu bytes are free", bytes, free_bytes, total);
        return set_error(cudaErrorMemoryAllocation);
    }
    return set_error(allocate(ptr, bytes, ALLOCATION_DEVICE));
}

cudaError_t cudaFree(void *ptr) {
    cudaError_t err = refuse_during_capture("cudaFree");
    if (err != cudaSuccess) return set_error(err);
    drain(); // cudaFree waits for the device, which may still use the memory
    return set_error(release(ptr, ALLOCATION_DEVICE));
}

cudaError_t cudaMallocHost(void **ptr, size_t bytes) {
    cudaError_t err = refuse_during_capture("cudaMallocHost");
    if (err != cudaSuccess) return set_error(err);
    return set_error(allocate(ptr, bytes, ALLOCATION_PINNED));
}

cudaError_t cudaFreeHost(void *ptr) {
    cudaError_t err = refuse_during_capture("cudaFreeHost");
    if (err != cudaSuccess) return set_error(err);
    drain();
    return set_error(release(ptr, ALLOCATION_PINNED));
}

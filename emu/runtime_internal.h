// emu/runtime_internal.h: what the files of the emulated CUDA runtime share among themselves and with no one
// else (emu/emu.h has what cublaslt.cpp, nccl.cpp and racecheck.cpp use too; emu/cuda_runtime.h what the
// emulated program sees). Not a CUDA header: the project's code never includes it. The runtime, by file:
//   diagnostics.cpp  settings (the CUDA_EMU_* variables) and the error lines;
//   symbols.cpp      names of kernels, call sites and __shared__ variables, from the executable's .symtab;
//   memory.cpp       tracked allocations, closed to host code between device operations;
//   threads.cpp      kernels: each block a group of fibers with barriers and warp operations, the blocks
//                    spread over a pool of host threads; the fault handler;
//   launch.cpp       the launch path (a GPU's checks of a launch), the runtime API's device and error calls;
//   streams.cpp      streams, events, graphs and copies: queued work that runs when the host synchronises;
//   report.cpp       NVTX ranges and the end-of-run report.
// Below, each group is defined in the file its comment names.
#ifndef EMU_RUNTIME_INTERNAL_H
#define EMU_RUNTIME_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "cuda_runtime.h"
#include "emu.h"

#if defined(__SANITIZE_ADDRESS__)
#define EMU_ASAN 1
#include <sanitizer/common_interface_defs.h>
#endif

namespace emu {

// ---------------------------------------------------------------------------------------------------------
// diagnostics.cpp: the settings, read once from the environment.

enum StreamOrder { ORDER_ISSUE, ORDER_FIRST_STREAM, ORDER_LAST_STREAM, ORDER_RANDOM };

// Which thread of a block runs when the running one waits (CUDA_EMU_SCHEDULE): the next in thread order
// (round-robin: every warp advances one warp operation at a time), the next of its own warp first
// (warp-ahead: a warp runs on until all its lanes wait at a __syncthreads or have exited), or any
// (random:SEED, with the blocks of each launch in a random order too).
enum Schedule { SCHEDULE_ROUND_ROBIN, SCHEDULE_WARP_AHEAD, SCHEDULE_RANDOM };

// One of the devices CUDA_EMU_DEVICE names (diagnostics.cpp lists them).
struct EmulatedDevice {
    const char *key, *name;
    int compute_capability;
    bool has_image;
};

struct Settings {
    StreamOrder order;            // CUDA_EMU_STREAM_ORDER: which ready stream (or graph branch) runs next
    uint64_t seed;                // random:SEED
    bool reverse_threads;         // CUDA_EMU_THREAD_ORDER=reverse: the threads of a block from the last
    Schedule schedule;            // CUDA_EMU_SCHEDULE
    uint64_t schedule_seed;       // random:SEED
    int host_threads;             // CUDA_EMU_THREADS: host threads that run blocks
    size_t stack_bytes;           // CUDA_EMU_STACK_KB: each CUDA thread's stack
    const char *report_path;      // CUDA_EMU_REPORT: where the end-of-run report goes
    int drop_wait_site;           // CUDA_EMU_DROP_WAIT_SITE: a test's planted fault (see cudaStreamWaitEvent)
    const EmulatedDevice *device; // CUDA_EMU_DEVICE: h200 (the default), b200 or l40s
};

const Settings &settings(void);

// ---------------------------------------------------------------------------------------------------------
// memory.cpp: the registry of allocations. threads.cpp's fault handler reads it without the lock (the
// faulting thread may hold it); streams.cpp's copies classify their pointers by it.

enum AllocationKind { ALLOCATION_DEVICE, ALLOCATION_PINNED };

struct Allocation {
    char *base;
    size_t bytes;
    AllocationKind kind;
    char *mapping, *pages; // the whole mapping with its guard pages, and the accessible pages
    size_t mapping_bytes, page_bytes;
};

static const size_t DEVICE_TOTAL_BYTES = (size_t)143771 << 20; // an H200 as nvidia-smi reports it

extern std::mutex memory_mutex;
extern std::map<uintptr_t, Allocation> allocations; // by base
extern size_t device_peak, device_peak_count;       // for the report
extern bool device_open;
const Allocation *find_allocation(const void *p, bool include_guards);
void open_device_memory(bool open);

// ---------------------------------------------------------------------------------------------------------
// threads.cpp: the device's limits, which launch.cpp checks launches against and threads.cpp sizes its
// fiber stacks by; running a launch; the fault handler, installed by memory.cpp's first allocation.

static const int MAX_THREADS_PER_BLOCK = 1024;
static const unsigned MAX_BLOCK_DIM[3] = {1024, 1024, 64};
static const unsigned MAX_GRID_DIM[3] = {2147483647u, 65535, 65535};
static const size_t DEFAULT_DYNAMIC_SHARED = 48 * 1024; // without cudaFuncSetAttribute
static const size_t MAX_DYNAMIC_SHARED = 227 * 1024;    // Hopper's opt-in limit per block
void execute_kernel(const KernelLaunch &k);
void install_fault_handler(void);

// ---------------------------------------------------------------------------------------------------------
// streams.cpp: a graph's nodes (report.cpp counts a launched graph's kernels); the lock of the runtime API;
// draining the queues, which memory.cpp's cudaFree and cudaFreeHost do first.

struct GraphNode {
    OpKind kind;
    std::function<void()> run;
    std::vector<int> deps;
    int stream_index;
};
extern std::recursive_mutex api_mutex;
cudaError_t refuse_during_capture(const char *call);
void drain(bool poll = false);

// ---------------------------------------------------------------------------------------------------------
// launch.cpp: the runtime API's last error, which every call that fails sets.

cudaError_t set_error(cudaError_t err);

// ---------------------------------------------------------------------------------------------------------
// report.cpp: the counters of the report, filled by threads.cpp's execute_kernel and streams.cpp's calls.

extern std::map<std::string, uint64_t> kernels_executed;
extern std::mutex kernel_stats_mutex;
extern std::vector<void *> wait_sites;
extern std::vector<uint64_t> wait_site_calls, wait_site_redundant;
void count_op(OpKind kind, const CUgraphExec_st *graph);
void count_execution(void);

} // namespace emu

struct CUgraphExec_st {
    std::vector<emu::GraphNode> nodes;
};

#endif // EMU_RUNTIME_INTERNAL_H

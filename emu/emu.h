// emu/emu.h: what the emulator's own files (the runtime's, which emu/runtime_internal.h lists, cublaslt.cpp,
// nccl.cpp, racecheck.cpp) share: diagnostics, device operations on streams, the device-memory registry and
// the host worker pool. Not a CUDA header: the project's code never includes it.
#ifndef EMU_EMU_H
#define EMU_EMU_H

#include <stddef.h>

#include <functional>
#include <string>

#include "cuda_runtime.h"

namespace emu {

// Ends the process with one line "cuda-emu: error: <what>" on stderr and exit status 3: what would be
// undefined, a fault or a hang on a GPU.
[[noreturn]] __attribute__((format(printf, 1, 2))) void fatal(const char *fmt, ...);

// One line "cuda-emu: <what>" on stderr: why an API call returns an error status (the status alone, as
// the real library returns it, seldom says).
__attribute__((format(printf, 1, 2))) void explain(const char *fmt, ...);

// The kind of a device operation, for the per-range counts of the report.
enum OpKind { OP_KERNEL, OP_COPY, OP_MEMSET, OP_EVENT, OP_MATMUL, OP_COLLECTIVE, OP_GRAPH };

// Queues run on stream (NULL: the legacy default stream) or, while the stream is being captured, adds it
// to the capture's graph. It runs when the host synchronises, with device memory accessible.
cudaError_t enqueue(cudaStream_t stream, OpKind kind, std::function<void()> run);

// Called by a running operation that waits on something outside the device (a collective on its peers):
// it has not finished, stays at the head of its stream and runs again later, keeping what its closure
// holds. A host poll (cudaStreamQuery, cudaEventQuery) then returns cudaErrorNotReady, as a GPU's does
// while a kernel spins on a peer; a synchronising call waits for it.
void op_waits(void);

// Adds a collective's payload (an all-reduce's or broadcast's buffer, an all-gather's output, a
// reduce-scatter's input) to the report's counts of the outermost NVTX range open now. kind: 0 all-reduce,
// 1 all-gather, 2 reduce-scatter, 3 broadcast.
void count_collective_bytes(int kind, size_t bytes);

// Whether [p, p + bytes) lies inside one allocation of cudaMalloc (and, for pinned, of cudaMallocHost).
bool is_device_range(const void *p, size_t bytes);
bool is_pinned_range(const void *p, size_t bytes);
// "a cudaMalloc allocation of N bytes at P" or "host memory", for messages.
std::string describe_address(const void *p);

// Runs body(begin, end) over [0, n) in chunks on the emulator's host threads (CUDA_EMU_THREADS).
void parallel_for(size_t n, const std::function<void(size_t begin, size_t end)> &body);

// The name of the function at address (from the executable's symbol table), or its address.
std::string function_name(const void *address);

// The executable's thread-local variables (__shared__ ones among them): the name of the one at `offset` in
// the static TLS block, and where it starts (*start), or "" when none; and the offset of one by its mangled
// name.
std::string tls_symbol_at(size_t offset, size_t *start);
size_t tls_symbol_offset(const char *mangled);

// The race checker (emu/racecheck.cpp), active in a program compiled with -fsanitize=thread (the race-check
// build), else every call returns at once. The runtime tells it of device memory, of each launch and block,
// and of the barriers a block passes; it checks every access the instrumented code makes.
bool racecheck_active(void);
void racecheck_device_allocated(const void *base, size_t bytes);
void racecheck_device_freed(const void *base);
void racecheck_launch_begin(const char *kernel, dim3 grid, dim3 block, const void *stacks,
                            size_t stack_bytes);
void racecheck_launch_end(void);
void racecheck_block_begin(uint64_t block_linear, void *dynamic_shared, size_t dynamic_bytes);
void racecheck_barrier(void);         // the block's threads passed a __syncthreads
void racecheck_warp_synced(int warp); // every lane of the warp passed a __syncwarp

// The emulated device's compute capability x 10: 90 (an H200, the default) or 100 (CUDA_EMU_DEVICE=b200, a
// Blackwell: the same device with the architecture whose library paths differ, cuBLASLt's scale modes).
int compute_capability(void);

// The MPI rank of this process once MPI is initialised (for messages), else -1.
int process_rank(void);

} // namespace emu

#endif // EMU_EMU_H

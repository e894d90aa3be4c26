// emu/racecheck.cpp: the emulation's race checker, what compute-sanitizer's racecheck and synccheck are on a
// GPU (docs/emulation.md). A program compiled with -fsanitize=thread (the emulator's race-check build: make
// train_emu RACECHECK=1) calls a __tsan_* hook at every load, store and atomic of its own code; the hooks are
// here, not ThreadSanitizer's runtime, which is never linked. While a CUDA thread runs, each access to shared
// memory (a block's __shared__ variables, which are the host thread's static TLS, and its dynamic shared
// memory) or to device memory (cudaMalloc and cudaMallocHost allocations) is checked against shadow state
// kept per byte: who last wrote it and who read it since, with the block's barrier epoch (the number of
// __syncthreads the block has passed) and the warp's __syncwarp epoch at the access.
//
// Two accesses to one byte, at least one a write, conflict unless they are ordered: by the same thread; by a
// __syncthreads between them (same block); by a full-warp __syncwarp between them (same warp); or both
// atomic. Warp shuffles and votes are not memory barriers (CUDA promises ordering only of __syncwarp), and
// blocks of one launch are never ordered with each other (only atomics may meet). A kernel boundary orders
// everything: the records belong to a generation, one per launch for device memory and one per block for
// shared memory, and older generations are empty. So the verdict does not depend on the order the
// emulator's scheduler happens to run threads in. Each conflict is reported with the kernel, the buffer (the
// __shared__ variable's name, or the allocation and byte) and both threads with their source lines; at the
// end of the launch the run stops with exit status 3.
//
// The records keep one writer and one reader per byte (the latest reader, and whether readers of several
// threads, warps or blocks are unordered with each other): a race against an earlier of several readers may
// go unreported, one against the latest never; nothing ordered is reported. Blocks run one at a time (the
// pool's helpers stay idle) so that the shadow state needs no locks.
#include <dlfcn.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "cuda_runtime.h"
#include "emu.h"

namespace emu {
namespace {

// The record of one byte. pc: the accessing instruction's offset in the executable (28 bits) and flags.
struct Cell {
    uint32_t write_gen, read_gen; // generation of the write and the read record (0: none)
    uint32_t writer, reader;      // CUDA thread of the launch + 1
    uint32_t write_pc, read_pc;
    uint16_t write_epoch, read_epoch;          // the block's __syncthreads count at the access
    uint8_t write_warp_epoch, read_warp_epoch; // the warp's __syncwarp count (mod 256)
    uint8_t flags, unused;
};
static_assert(sizeof(Cell) == 32, "a shadow cell is 32 bytes");

enum CellFlags : uint8_t {
    WRITE_ATOMIC = 1,
    READ_ATOMIC = 2,  // every read since the write was atomic
    READ_SHARED = 4,  // reads of several threads not ordered with each other
    READ_WARPS = 8,   // ... of several warps
    READ_BLOCKS = 16, // ... of several blocks
};

const uint32_t PC_MASK = 0x0fffffffu;

// A shadow region: cells for [base, base + bytes).
struct Region {
    uintptr_t base;
    size_t bytes;
    Cell *cells;
};

static Cell *map_cells(size_t bytes) {
    void *m = mmap(NULL, bytes * sizeof(Cell), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) fatal("racecheck: cannot map %zu bytes of shadow memory", bytes * sizeof(Cell));
    return (Cell *)m;
}

// Who is accessing: the running CUDA thread, numbered within its launch.
struct Accessor {
    uint32_t thread; // block * threads per block + thread in block + 1
    uint32_t block, warp;
    uint16_t epoch;
    uint8_t warp_epoch;
    uint32_t pc;
};

struct State {
    // the launch running now
    const char *kernel = NULL;
    dim3 grid, block;
    uint32_t threads_per_block = 0;
    uint32_t launch_gen = 0, block_gen = 0;
    uint64_t block_linear = 0;
    uint32_t epoch = 0;          // the block's __syncthreads count
    uint8_t warp_epoch[32] = {}; // each warp's full __syncwarp count
    // shared memory of the block: the static TLS block (every __shared__ variable) and the dynamic area
    Region tls = {0, 0, NULL}, dynamic = {0, 0, NULL};
    size_t dynamic_capacity = 0;
    uintptr_t ignore_lo = 0, ignore_hi = 0; // the emulator's own TLS pointer read by every threadIdx
    uintptr_t stacks_lo = 0, stacks_hi = 0; // the fiber stacks: a thread's locals are its own
    // device memory: one region per allocation, by base
    std::vector<Region> device;
    size_t last_device = 0;
    uintptr_t exe_base = 0;
    // the launch's reports
    std::set<std::tuple<uint32_t, uint32_t, int>> seen; // (pc, other pc, kind)
    uint64_t races = 0;
};

static State state;
// An instrumented program called __tsan_init. Not in State: the instrumented code's constructor calls it
// before State's own constructor would have run (a constant-initialised bool is set before either).
static bool active = false;
static std::mutex device_mutex; // cudaMalloc may run on another host thread than the blocks

// Offset of a code address in the executable, for the records and for addr2line.
static uint32_t code_offset(const void *pc) {
    return (uint32_t)(((uintptr_t)pc - state.exe_base) & PC_MASK);
}

// "file:line (function)" of a code offset, from addr2line (only when a race is reported).
static std::string source_line(uint32_t offset) {
    char cmd[256], line[512] = "";
    snprintf(cmd, sizeof(cmd), "addr2line -C -f -i -e /proc/%d/exe 0x%x 2>/dev/null", (int)getpid(), offset);
    std::string function, where;
    FILE *p = popen(cmd, "r");
    if (p) {
        if (fgets(line, sizeof(line), p)) function = std::string(line, strcspn(line, "\n"));
        if (fgets(line, sizeof(line), p)) where = std::string(line, strcspn(line, "\n"));
        pclose(p);
    }
    where = where.substr(0, where.find(" (discriminator"));
    const char *slash = strrchr(where.c_str(), '/');
    if (where.empty() || where[0] == '?') {
        char buf[32];
        snprintf(buf, sizeof(buf), "code offset 0x%x", offset);
        return buf;
    }
    // the repository-relative path: from the last "gpu/", "test/", "dev/" or the file name
    std::string shown = slash ? slash + 1 : where;
    for (const char *dir : {"/gpu/", "/test/", "/dev/", "/emu/"}) {
        size_t at = where.rfind(dir);
        if (at != std::string::npos) {
            shown = where.substr(at + 1);
            break;
        }
    }
    size_t paren = function.find('(');
    if (paren != std::string::npos) function = function.substr(0, paren);
    return shown + " (" + function + ")";
}

static std::string thread_name(uint32_t thread) {
    uint32_t t = thread - 1, tpb = state.threads_per_block;
    uint64_t b = t / tpb;
    uint32_t i = t % tpb;
    char buf[96];
    snprintf(buf, sizeof(buf), "block (%u,%u,%u) thread (%u,%u,%u)", (unsigned)(b % state.grid.x),
             (unsigned)(b / state.grid.x % state.grid.y),
             (unsigned)(b / ((uint64_t)state.grid.x * state.grid.y)), i % state.block.x,
             i / state.block.x % state.block.y, i / (state.block.x * state.block.y));
    return buf;
}

// Names a shared-memory byte: the __shared__ variable (a TLS symbol of the executable) and the byte in it.
static std::string tls_variable(uintptr_t address) {
    size_t start = 0;
    std::string name = tls_symbol_at(address - state.tls.base, &start);
    char buf[64];
    snprintf(buf, sizeof(buf), ", byte %zu", (size_t)(address - state.tls.base - start));
    return name.empty() ? "(a static TLS variable)" : "`" + name + "`" + buf;
}

static std::string describe(uintptr_t address, bool shared) {
    char buf[256];
    if (shared && address >= state.dynamic.base && address < state.dynamic.base + state.dynamic.bytes) {
        snprintf(buf, sizeof(buf), "dynamic shared memory, byte %zu", (size_t)(address - state.dynamic.base));
        return buf;
    }
    if (shared) return "shared memory " + tls_variable(address);
    return "global memory at " + describe_address((const void *)address);
}

enum RaceKind { WRITE_AFTER_WRITE, READ_AFTER_WRITE, WRITE_AFTER_READ, WRITE_AFTER_READS };

// other_blocks: the other access (or one of the other reads) is another block's.
static void report(RaceKind kind, uintptr_t address, bool shared, const Accessor &now, bool now_atomic,
                   uint32_t other, uint32_t other_pc, bool other_atomic, bool other_blocks) {
    state.races++;
    if (!state.seen.insert({now.pc, other_pc & PC_MASK, (int)kind}).second || state.seen.size() > 8) return;
    static const char *const now_what[] = {"write", "read", "write", "write"};
    static const char *const other_what[] = {"write", "write", "read", "reads by several threads, one"};
    const char *why = other_blocks
                          ? "different blocks of one launch are not ordered (a second kernel or atomics are)"
                      : now_atomic || other_atomic ? "an atomic and a plain access"
                                                   : "no __syncthreads between them";
    explain("racecheck: race in kernel %s on %s: %s%s by %s at %s, and %s%s by %s at %s: %s", state.kernel,
            describe(address, shared).c_str(), now_atomic ? "atomic " : "", now_what[kind],
            thread_name(now.thread).c_str(), source_line(now.pc).c_str(), other_atomic ? "atomic " : "",
            other_what[kind], thread_name(other).c_str(), source_line(other_pc & PC_MASK).c_str(), why);
}

// Whether an access of `thread` at (epoch, warp_epoch) precedes `now`.
static bool ordered(uint32_t thread, uint16_t epoch, uint8_t warp_epoch, const Accessor &now) {
    if (thread == now.thread) return true;
    const uint32_t t = thread - 1, tpb = state.threads_per_block;
    if (t / tpb != now.block) return false;
    if (epoch != (uint16_t)now.epoch) return true; // epochs only grow within a block
    return (t % tpb) / 32 == now.warp && warp_epoch != now.warp_epoch;
}

// Whether every read recorded in c precedes `now`.
static bool reads_ordered(const Cell &c, const Accessor &now) {
    if (!(c.flags & READ_SHARED)) return ordered(c.reader, c.read_epoch, c.read_warp_epoch, now);
    if (c.flags & READ_BLOCKS) return false;
    const uint32_t t = c.reader - 1, tpb = state.threads_per_block;
    if (t / tpb != now.block) return false;
    if (c.read_epoch != (uint16_t)now.epoch) return true;
    return !(c.flags & READ_WARPS) && (t % tpb) / 32 == now.warp && c.read_warp_epoch != now.warp_epoch;
}

static void access_cell(Cell &c, uint32_t gen, uintptr_t address, bool shared, const Accessor &now,
                        bool write, bool atomic) {
    const bool has_write = c.write_gen == gen && c.writer;
    const bool has_read = c.read_gen == gen && c.reader;
    if (has_write && !(atomic && (c.flags & WRITE_ATOMIC)) &&
        !ordered(c.writer, c.write_epoch, c.write_warp_epoch, now))
        report(write ? WRITE_AFTER_WRITE : READ_AFTER_WRITE, address, shared, now, atomic, c.writer,
               c.write_pc, c.flags & WRITE_ATOMIC, (c.writer - 1) / state.threads_per_block != now.block);
    if (write) {
        if (has_read && !(atomic && (c.flags & READ_ATOMIC)) && !reads_ordered(c, now))
            report(c.flags & READ_SHARED ? WRITE_AFTER_READS : WRITE_AFTER_READ, address, shared, now, atomic,
                   c.reader, c.read_pc, c.flags & READ_ATOMIC,
                   (c.flags & READ_BLOCKS) || (c.reader - 1) / state.threads_per_block != now.block);
        c.write_gen = gen;
        c.writer = now.thread;
        c.write_epoch = (uint16_t)now.epoch;
        c.write_warp_epoch = now.warp_epoch;
        c.write_pc = now.pc;
        c.flags = atomic ? WRITE_ATOMIC : 0; // the reads are ordered before this write, or reported
        c.read_gen = 0;
        return;
    }
    if (has_read && (c.flags & READ_SHARED || c.reader != now.thread) && !reads_ordered(c, now)) {
        // readers not ordered with each other: the first stays as the record's representative (for the
        // report, and for the block and warp the flags compare with); the epochs become the latest reader's
        const uint32_t t = c.reader - 1, tpb = state.threads_per_block;
        uint8_t f = READ_SHARED;
        if (t / tpb != now.block) f |= READ_BLOCKS;
        if (t / tpb != now.block || (t % tpb) / 32 != now.warp) f |= READ_WARPS;
        if (!atomic) c.flags &= (uint8_t)~READ_ATOMIC;
        c.flags |= f;
    } else {
        c.flags = (uint8_t)((c.flags & WRITE_ATOMIC) | (atomic ? READ_ATOMIC : 0));
        c.reader = now.thread;
        c.read_pc = now.pc;
    }
    c.read_gen = gen;
    c.read_epoch = (uint16_t)now.epoch;
    c.read_warp_epoch = now.warp_epoch;
}

static const Region *find_device(uintptr_t a) {
    std::lock_guard<std::mutex> lock(device_mutex);
    if (state.last_device < state.device.size()) {
        const Region &r = state.device[state.last_device];
        if (a >= r.base && a < r.base + r.bytes) return &r;
    }
    auto it = std::upper_bound(state.device.begin(), state.device.end(), a,
                               [](uintptr_t v, const Region &r) { return v < r.base; });
    if (it == state.device.begin()) return NULL;
    --it;
    if (a >= it->base + it->bytes) return NULL;
    state.last_device = (size_t)(it - state.device.begin());
    return &*it;
}

static void access(const void *p, size_t size, bool write, bool atomic, const void *pc) {
    ThreadContext *t = current_thread;
    if (!t || !active || !state.kernel) return;
    const uintptr_t a = (uintptr_t)p;
    if (a >= state.stacks_lo && a < state.stacks_hi) return;
    if (a >= state.ignore_lo && a < state.ignore_hi) return;
    Cell *cells;
    uint32_t gen;
    bool shared = true;
    if (a >= state.tls.base && a + size <= state.tls.base + state.tls.bytes) {
        cells = state.tls.cells + (a - state.tls.base);
        gen = state.block_gen;
    } else if (a >= state.dynamic.base && a + size <= state.dynamic.base + state.dynamic.bytes) {
        cells = state.dynamic.cells + (a - state.dynamic.base);
        gen = state.block_gen;
    } else {
        const Region *r = find_device(a);
        if (!r) return; // a thread's own stack, or host memory the emulator's checks refuse elsewhere
        if (a + size > r->base + r->bytes) size = r->base + r->bytes - a;
        cells = r->cells + (a - r->base);
        gen = state.launch_gen;
        shared = false;
    }
    Accessor now;
    const uint32_t linear =
        t->thread_idx.x + t->block_dim.x * (t->thread_idx.y + t->block_dim.y * t->thread_idx.z);
    now.block = (uint32_t)state.block_linear;
    now.thread = now.block * state.threads_per_block + linear + 1;
    now.warp = linear / 32;
    now.epoch = (uint16_t)state.epoch;
    now.warp_epoch = state.warp_epoch[now.warp];
    now.pc = code_offset(pc);
    for (size_t i = 0; i < size; i++) access_cell(cells[i], gen, a + i, shared, now, write, atomic);
}

static int find_tls(struct dl_phdr_info *info, size_t, void *out) {
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_TLS) {
            *(size_t *)out = info->dlpi_phdr[i].p_memsz;
            return 1; // the first object is the executable
        }
    return 1;
}

} // namespace

bool racecheck_active(void) {
    return active;
}

void racecheck_device_allocated(const void *base, size_t bytes) {
    if (!active || !bytes) return;
    std::lock_guard<std::mutex> lock(device_mutex);
    Region r = {(uintptr_t)base, bytes, map_cells(bytes)};
    auto it = std::upper_bound(state.device.begin(), state.device.end(), r.base,
                               [](uintptr_t v, const Region &x) { return v < x.base; });
    state.device.insert(it, r);
}

void racecheck_device_freed(const void *base) {
    if (!active) return;
    std::lock_guard<std::mutex> lock(device_mutex);
    for (size_t i = 0; i < state.device.size(); i++)
        if (state.device[i].base == (uintptr_t)base) {
            munmap(state.device[i].cells, state.device[i].bytes * sizeof(Cell));
            state.device.erase(state.device.begin() + (long)i);
            return;
        }
}

void racecheck_launch_begin(const char *kernel, dim3 grid, dim3 block, const void *stacks,
                            size_t stack_bytes) {
    if (!active) return;
    const uint64_t threads = (uint64_t)grid.x * grid.y * grid.z * block.x * block.y * block.z;
    if (threads >= 0xffffffffull)
        fatal("racecheck: kernel %s launches %llu threads; the race checker numbers at most 2^32 - 2", kernel,
              (unsigned long long)threads);
    state.kernel = kernel;
    state.grid = grid;
    state.block = block;
    state.threads_per_block = block.x * block.y * block.z;
    state.launch_gen++;
    state.seen.clear();
    state.races = 0;
    state.stacks_lo = (uintptr_t)stacks;
    state.stacks_hi = (uintptr_t)stacks + stack_bytes;
    if (!state.tls.cells) {
        // the executable's static TLS block ends where emu::current_thread's offset says
        size_t memsz = 0;
        dl_iterate_phdr(find_tls, &memsz);
        uintptr_t start = (uintptr_t)&current_thread - tls_symbol_offset("_ZN3emu14current_threadE");
        if (!memsz || (uintptr_t)&current_thread < start || (uintptr_t)&current_thread >= start + memsz)
            fatal("racecheck: cannot locate the executable's static TLS block (the __shared__ variables)");
        state.tls = {start, memsz, map_cells(memsz)};
        state.ignore_lo = (uintptr_t)&current_thread;
        state.ignore_hi = state.ignore_lo + sizeof(current_thread);
        Dl_info info;
        if (dladdr((void *)&racecheck_active, &info)) state.exe_base = (uintptr_t)info.dli_fbase;
    }
}

void racecheck_launch_end(void) {
    if (!active || !state.kernel) return;
    const char *kernel = state.kernel;
    state.kernel = NULL;
    if (state.races)
        fatal("racecheck: %llu conflicting accesses in kernel %s (the first of each kind and place above)",
              (unsigned long long)state.races, kernel);
}

void racecheck_block_begin(uint64_t block_linear, void *dynamic_shared, size_t dynamic_bytes) {
    if (!active) return;
    state.block_linear = block_linear;
    state.block_gen++;
    state.epoch = 0;
    memset(state.warp_epoch, 0, sizeof(state.warp_epoch));
    if (dynamic_bytes > state.dynamic_capacity) {
        if (state.dynamic.cells) munmap(state.dynamic.cells, state.dynamic_capacity * sizeof(Cell));
        state.dynamic.cells = map_cells(dynamic_bytes);
        state.dynamic_capacity = dynamic_bytes;
    }
    state.dynamic.base = (uintptr_t)dynamic_shared;
    state.dynamic.bytes = dynamic_bytes;
}

void racecheck_barrier(void) {
    if (!active) return;
    if (++state.epoch > 0xffff)
        fatal("racecheck: kernel %s: a block passed more than 65535 __syncthreads; the checker counts fewer",
              state.kernel);
}

void racecheck_warp_synced(int warp) {
    if (!active) return;
    if (++state.warp_epoch[warp] == 0)
        fatal("racecheck: kernel %s: a warp passed 256 __syncwarp; the checker counts fewer", state.kernel);
}

} // namespace emu

// ---------------------------------------------------------------------------------------------------------
// The hooks -fsanitize=thread compiles into every access (GCC's names and arguments; the memory orders of
// the atomics are honoured as sequentially consistent, which is at least as strong).

using emu::access;

extern "C" {

void __tsan_init(void) {
    emu::active = true;
}

void __tsan_func_entry(void *) {}
void __tsan_func_exit(void) {}
void __tsan_vptr_update(void **, void *) {}
void __tsan_vptr_read(void **) {}

#define EMU_TSAN_ACCESS(size)                                                                                \
    void __tsan_read##size(void *p) {                                                                        \
        access(p, size, false, false, __builtin_return_address(0));                                          \
    }                                                                                                        \
    void __tsan_write##size(void *p) {                                                                       \
        access(p, size, true, false, __builtin_return_address(0));                                           \
    }                                                                                                        \
    void __tsan_unaligned_read##size(void *p) {                                                              \
        access(p, size, false, false, __builtin_return_address(0));                                          \
    }                                                                                                        \
    void __tsan_unaligned_write##size(void *p) {                                                             \
        access(p, size, true, false, __builtin_return_address(0));                                           \
    }
EMU_TSAN_ACCESS(1)
EMU_TSAN_ACCESS(2)
EMU_TSAN_ACCESS(4)
EMU_TSAN_ACCESS(8)
EMU_TSAN_ACCESS(16)
#undef EMU_TSAN_ACCESS

void __tsan_read_range(void *p, unsigned long size) {
    access(p, size, false, false, __builtin_return_address(0));
}
void __tsan_write_range(void *p, unsigned long size) {
    access(p, size, true, false, __builtin_return_address(0));
}

#define EMU_TSAN_ATOMIC(bits, T)                                                                             \
    T __tsan_atomic##bits##_load(const volatile T *a, int) {                                                 \
        access((const void *)a, sizeof(T), false, true, __builtin_return_address(0));                        \
        return __atomic_load_n(a, __ATOMIC_SEQ_CST);                                                         \
    }                                                                                                        \
    void __tsan_atomic##bits##_store(volatile T *a, T v, int) {                                              \
        access((const void *)a, sizeof(T), true, true, __builtin_return_address(0));                         \
        __atomic_store_n(a, v, __ATOMIC_SEQ_CST);                                                            \
    }                                                                                                        \
    T __tsan_atomic##bits##_exchange(volatile T *a, T v, int) {                                              \
        access((const void *)a, sizeof(T), true, true, __builtin_return_address(0));                         \
        return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST);                                                  \
    }                                                                                                        \
    T __tsan_atomic##bits##_fetch_add(volatile T *a, T v, int) {                                             \
        access((const void *)a, sizeof(T), true, true, __builtin_return_address(0));                         \
        return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);                                                   \
    }                                                                                                        \
    T __tsan_atomic##bits##_fetch_sub(volatile T *a, T v, int) {                                             \
        access((const void *)a, sizeof(T), true, true, __builtin_return_address(0));                         \
        return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST);                                                   \
    }                                                                                                        \
    T __tsan_atomic##bits##_fetch_and(volatile T *a, T v, int) {                                             \
        access((const void *)a, sizeof(T), true, true, __builtin_return_address(0));                         \
        return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST);                                                   \
    }                                                                                                        \
    T __tsan_atomic##bits##_fetch_or(volatile T *a, T v, int) {                                              \
        access((const void *)a, sizeof(T), true, true, __builtin_return_address(0));                         \
        return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST);                                                    \
    }                                                                                                        \
    T __tsan_atomic##bits##_fetch_xor(volatile T *a, T v, int) {                                             \
        access((const void *)a, sizeof(T), true, true, __builtin_return_address(0));                         \
        return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST);                                                   \
    }                                                                                                        \
    int __tsan_atomic##bits##_compare_exchange_strong(volatile T *a, T *expected, T v, int, int) {           \
        access((const void *)a, sizeof(T), true, true, __builtin_return_address(0));                         \
        return __atomic_compare_exchange_n(a, expected, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);       \
    }                                                                                                        \
    int __tsan_atomic##bits##_compare_exchange_weak(volatile T *a, T *expected, T v, int, int) {             \
        access((const void *)a, sizeof(T), true, true, __builtin_return_address(0));                         \
        return __atomic_compare_exchange_n(a, expected, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);        \
    }                                                                                                        \
    T __tsan_atomic##bits##_compare_exchange_val(volatile T *a, T expected, T v, int, int) {                 \
        access((const void *)a, sizeof(T), true, true, __builtin_return_address(0));                         \
        __atomic_compare_exchange_n(a, &expected, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);             \
        return expected;                                                                                     \
    }
EMU_TSAN_ATOMIC(8, int8_t)
EMU_TSAN_ATOMIC(16, int16_t)
EMU_TSAN_ATOMIC(32, int32_t)
EMU_TSAN_ATOMIC(64, int64_t)
#undef EMU_TSAN_ATOMIC

void __tsan_atomic_thread_fence(int) {
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
void __tsan_atomic_signal_fence(int) {
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
}

} // extern "C"

// emu/runtime.cpp: the CUDA runtime of the CPU emulation build (emu/cuda_runtime.h has the contract,
// docs/emulation.md the design). Top to bottom:
//   1. settings and diagnostics;
//   2. symbols: kernel and call-site names from the executable's own symbol table;
//   3. device memory: tracked host allocations, closed to host code between device operations;
//   4. kernels: every block a group of fibers (one per CUDA thread) on one host thread, with barriers and
//      warp operations that check what a GPU leaves undefined; blocks spread over a pool of host threads;
//   5. streams, events and graphs: queued work that runs when the host synchronises, in an order the
//      dependencies allow and the policy picks;
//   6. the runtime API;
//   7. NVTX ranges and the end-of-run report.
#include <cxxabi.h>
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cuda_runtime.h"
#include "emu.h"
#include "nvtx3/nvToolsExt.h"

#if defined(__SANITIZE_ADDRESS__)
#define EMU_ASAN 1
#include <sanitizer/common_interface_defs.h>
#endif

#ifdef USE_MPI
#include <mpi.h>
#endif

namespace emu {

// =========================================================================================================
// 1. Settings and diagnostics

enum StreamOrder { ORDER_ISSUE, ORDER_FIRST_STREAM, ORDER_LAST_STREAM, ORDER_RANDOM };

// Which thread of a block runs when the running one waits (CUDA_EMU_SCHEDULE): the next in thread order
// (round-robin: every warp advances one warp operation at a time), the next of its own warp first
// (warp-ahead: a warp runs on until all its lanes wait at a __syncthreads or have exited), or any
// (random:SEED, with the blocks of each launch in a random order too).
enum Schedule { SCHEDULE_ROUND_ROBIN, SCHEDULE_WARP_AHEAD, SCHEDULE_RANDOM };

// The devices CUDA_EMU_DEVICE names. Memory and limits are the H200's for all; what differs is the name and
// the compute capability, which picks cuBLASLt's modes and whether this binary has code for the device: an
// emulated program carries images for sm_90a and sm_100a, as `make train`'s default build does, so the L40S
// (sm_89) gets cudaErrorNoKernelImageForDevice from every launch, as such a build does on an Ada GPU.
struct EmulatedDevice {
    const char *key, *name;
    int compute_capability;
    bool has_image;
};
static const EmulatedDevice EMULATED_DEVICES[] = {
    {"h200", "H200", 90, true}, {"b200", "B200", 100, true}, {"l40s", "L40S", 89, false}};

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

static Settings read_settings(void) {
    Settings s;
    memset(&s, 0, sizeof(s));
    const char *order = getenv("CUDA_EMU_STREAM_ORDER");
    s.order = ORDER_ISSUE;
    if (order && *order) {
        if (!strcmp(order, "issue"))
            s.order = ORDER_ISSUE;
        else if (!strcmp(order, "first-stream"))
            s.order = ORDER_FIRST_STREAM;
        else if (!strcmp(order, "last-stream"))
            s.order = ORDER_LAST_STREAM;
        else if (!strncmp(order, "random", 6)) {
            s.order = ORDER_RANDOM;
            s.seed = order[6] == ':' ? strtoull(order + 7, NULL, 10) : 1;
        } else {
            fatal("CUDA_EMU_STREAM_ORDER=%s: not one of issue, first-stream, last-stream, random[:SEED]",
                  order);
        }
    }
    const char *threads = getenv("CUDA_EMU_THREAD_ORDER");
    if (threads && *threads && strcmp(threads, "forward") && strcmp(threads, "reverse"))
        fatal("CUDA_EMU_THREAD_ORDER=%s: not forward or reverse", threads);
    s.reverse_threads = threads && !strcmp(threads, "reverse");
    const char *schedule = getenv("CUDA_EMU_SCHEDULE");
    s.schedule = SCHEDULE_ROUND_ROBIN;
    if (schedule && *schedule) {
        char *end = NULL;
        if (!strcmp(schedule, "warp-ahead")) {
            s.schedule = SCHEDULE_WARP_AHEAD;
        } else if (!strncmp(schedule, "random:", 7) &&
                   (s.schedule_seed = strtoull(schedule + 7, &end, 10), 1) && end != schedule + 7 && !*end) {
            s.schedule = SCHEDULE_RANDOM;
        } else if (strcmp(schedule, "round-robin")) {
            fatal("CUDA_EMU_SCHEDULE=%s: not one of round-robin, warp-ahead, random:SEED", schedule);
        }
    }
    const char *workers = getenv("CUDA_EMU_THREADS");
    s.host_threads = workers && *workers ? atoi(workers) : (int)std::thread::hardware_concurrency();
    if (s.host_threads < 1 || s.host_threads > 256) s.host_threads = workers && *workers ? -1 : 1;
    if (s.host_threads < 0) fatal("CUDA_EMU_THREADS=%s: not a number of threads in 1..256", workers);
    const char *stack = getenv("CUDA_EMU_STACK_KB");
#ifdef EMU_ASAN
    size_t stack_kb = 256; // instrumented frames are larger
#else
    size_t stack_kb = 64;
#endif
    if (stack && *stack) stack_kb = strtoull(stack, NULL, 10);
    if (stack_kb < 16 || stack_kb > 8192) fatal("CUDA_EMU_STACK_KB=%s: not in 16..8192", stack);
    s.stack_bytes = stack_kb * 1024;
    s.report_path = getenv("CUDA_EMU_REPORT");
    const char *drop = getenv("CUDA_EMU_DROP_WAIT_SITE");
    s.drop_wait_site = drop && *drop ? atoi(drop) : 0;
    const char *device_name = getenv("CUDA_EMU_DEVICE");
    s.device = &EMULATED_DEVICES[0];
    if (device_name && *device_name) {
        s.device = NULL;
        for (const EmulatedDevice &device : EMULATED_DEVICES)
            if (!strcmp(device_name, device.key)) s.device = &device;
        if (!s.device) fatal("CUDA_EMU_DEVICE=%s: not h200, b200 or l40s", device_name);
    }
    return s;
}

static const Settings *settings_read = NULL; // once read_settings has returned (fatal reads it)

static const Settings &settings(void) {
    static Settings s = read_settings();
    settings_read = &s;
    return s;
}

int compute_capability(void) {
    return settings().device->compute_capability;
}

int process_rank(void) {
#ifdef USE_MPI
    int initialized = 0, finalized = 0, rank = -1;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (initialized && !finalized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    return rank;
#else
    return -1;
#endif
}

static void write_line(const char *prefix, const char *fmt, va_list args) {
    char line[2048];
    int rank = process_rank();
    int n = rank >= 0 ? snprintf(line, sizeof(line), "%s(rank %d) ", prefix, rank)
                      : snprintf(line, sizeof(line), "%s", prefix);
    vsnprintf(line + n, sizeof(line) - n - 1, fmt, args);
    strcat(line, "\n");
    if (write(2, line, strlen(line)) < 0) return;
}

static void note(const char *fmt, ...);

void fatal(const char *fmt, ...) {
    fflush(stdout);
    va_list args;
    va_start(args, fmt);
    write_line("cuda-emu: error: ", fmt, args);
    va_end(args);
    const Settings *s = settings_read;
    if (s && s->schedule == SCHEDULE_RANDOM)
        note("cuda-emu: the threads ran in the schedule CUDA_EMU_SCHEDULE=random:%llu (set it again to "
             "reproduce)",
             (unsigned long long)s->schedule_seed);
    if (s && s->order == ORDER_RANDOM)
        note("cuda-emu: the streams ran in the order CUDA_EMU_STREAM_ORDER=random:%llu (set it again to "
             "reproduce)",
             (unsigned long long)s->seed);
    _exit(3);
}

static void note(const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    write_line("", fmt, args);
    va_end(args);
}

void explain(const char *fmt, ...) {
    fflush(stdout);
    va_list args;
    va_start(args, fmt);
    write_line("cuda-emu: ", fmt, args);
    va_end(args);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// =========================================================================================================
// 2. Symbols: names of kernels and call sites from the executable's .symtab (static functions included,
// which dladdr does not see), demangled, without their parameter lists.

struct Symbol {
    uintptr_t start, size;
    std::string name;
};

// "void f<8>(float*, int)" -> "f<8>": the demangled name without its parameter list and a template's return
// type.
static std::string short_name(const char *mangled) {
    int status = 0;
    char *demangled = abi::__cxa_demangle(mangled, NULL, NULL, &status);
    std::string name = status == 0 && demangled ? demangled : mangled;
    free(demangled);
    int depth = 0;
    size_t cut = name.size(), start = 0;
    for (size_t c = 0; c < name.size(); c++) {
        char ch = name[c];
        if (ch == '<') depth++;
        if (ch == '>') depth--;
        if (ch == '(' && depth == 0 && c > 0) {
            cut = c;
            break;
        }
        if (ch == ' ' && depth == 0) start = c + 1;
    }
    if (start >= cut) start = 0;
    return name.substr(start, cut - start);
}

// "f(float*, int)::red" -> "f::red": a function-local static's demangled name without parameter lists.
static std::string variable_name(const char *mangled) {
    int status = 0;
    char *demangled = abi::__cxa_demangle(mangled, NULL, NULL, &status);
    std::string full = status == 0 && demangled ? demangled : mangled, name;
    free(demangled);
    int depth = 0;
    for (char ch : full) {
        if (ch == '(') depth++;
        if (depth == 0) name += ch;
        if (ch == ')') depth--;
    }
    return name;
}

// The executable's functions (at their load addresses) and its thread-local variables (at their offsets in
// the static TLS block: __shared__ variables are thread_local here), each sorted by start.
struct SymbolTable {
    std::vector<Symbol> functions, tls;
    std::map<std::string, uintptr_t> tls_by_mangled_name;
};

static SymbolTable load_symbols(void) {
    SymbolTable table;
    std::vector<Symbol> &symbols = table.functions;
    int fd = open("/proc/self/exe", O_RDONLY);
    if (fd < 0) return table;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return table;
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return table;
    const char *file = (const char *)map;
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)file;
    Dl_info info;
    uintptr_t base = 0;
    if (eh->e_type == ET_DYN && dladdr((void *)&load_symbols, &info)) base = (uintptr_t)info.dli_fbase;
    const Elf64_Shdr *sections = (const Elf64_Shdr *)(file + eh->e_shoff);
    for (int i = 0; i < eh->e_shnum; i++) {
        if (sections[i].sh_type != SHT_SYMTAB) continue;
        const Elf64_Sym *syms = (const Elf64_Sym *)(file + sections[i].sh_offset);
        const char *names = file + sections[sections[i].sh_link].sh_offset;
        size_t count = sections[i].sh_size / sizeof(Elf64_Sym);
        for (size_t k = 0; k < count; k++) {
            const int type = ELF64_ST_TYPE(syms[k].st_info);
            const char *mangled = names + syms[k].st_name;
            if (type == STT_TLS) {
                table.tls.push_back(Symbol{syms[k].st_value, syms[k].st_size, variable_name(mangled)});
                table.tls_by_mangled_name[mangled] = syms[k].st_value;
            }
            if (type != STT_FUNC || syms[k].st_size == 0) continue;
            symbols.push_back(Symbol{base + syms[k].st_value, syms[k].st_size, short_name(mangled)});
        }
    }
    munmap(map, (size_t)st.st_size);
    auto by_start = [](const Symbol &a, const Symbol &b) { return a.start < b.start; };
    std::sort(symbols.begin(), symbols.end(), by_start);
    std::sort(table.tls.begin(), table.tls.end(), by_start);
    return table;
}

static const SymbolTable &symbol_table(void) {
    static std::mutex mutex;
    static SymbolTable *table; // never destroyed: the report at exit still names functions
    std::lock_guard<std::mutex> lock(mutex);
    if (!table) table = new SymbolTable(load_symbols());
    return *table;
}

// The symbol of `symbols` that holds a, or NULL.
static const Symbol *symbol_at(const std::vector<Symbol> &symbols, uintptr_t a) {
    auto it = std::upper_bound(symbols.begin(), symbols.end(), a,
                               [](uintptr_t v, const Symbol &s) { return v < s.start; });
    if (it != symbols.begin() && a < (it - 1)->start + std::max<uintptr_t>((it - 1)->size, 1))
        return &*(it - 1);
    return NULL;
}

std::string function_name(const void *address) {
    const Symbol *s = symbol_at(symbol_table().functions, (uintptr_t)address);
    if (s) return s->name;
    char buf[32];
    snprintf(buf, sizeof(buf), "%p", address);
    return buf;
}

std::string tls_symbol_at(size_t offset, size_t *start) {
    const Symbol *s = symbol_at(symbol_table().tls, offset);
    if (!s) return "";
    *start = s->start;
    return s->name;
}

size_t tls_symbol_offset(const char *mangled) {
    const SymbolTable &t = symbol_table();
    auto it = t.tls_by_mangled_name.find(mangled);
    if (it == t.tls_by_mangled_name.end())
        fatal("the executable's symbol table has no TLS symbol %s", mangled);
    return it->second;
}

// =========================================================================================================
// 3. Device memory. An allocation of cudaMalloc is host memory of its own mapping: its end meets an
// inaccessible guard page (an access past a 256-byte rounded end faults), and between device operations
// its pages are inaccessible to host code, as device memory is on a GPU, so that a host read of a device
// pointer faults here as it does there. The sanitizer build (ASan) takes allocations from malloc instead,
// whose red zones catch an access one byte past the end; it cannot also close them to host code.

enum AllocationKind { ALLOCATION_DEVICE, ALLOCATION_PINNED };

struct Allocation {
    char *base;
    size_t bytes;
    AllocationKind kind;
    char *mapping, *pages; // the whole mapping with its guard pages, and the accessible pages
    size_t mapping_bytes, page_bytes;
};

static const size_t DEVICE_TOTAL_BYTES = (size_t)143771 << 20; // an H200 as nvidia-smi reports it
static const size_t CONTEXT_BYTES = (size_t)512 << 20;         // what a CUDA context takes on a GPU
static const size_t ALLOCATION_GRANULE = (size_t)2 << 20;      // cudaMalloc rounds large allocations so

static std::mutex memory_mutex;
static std::map<uintptr_t, Allocation> allocations; // by base
static size_t device_live, device_peak, device_granted, device_live_count, device_peak_count;
static bool device_open = false; // device pages accessible (a device operation is running)

static const Allocation *find_allocation(const void *p, bool include_guards) {
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
static void open_device_memory(bool open) {
    std::lock_guard<std::mutex> lock(memory_mutex);
    if (device_open == open) return;
    device_open = open;
#ifndef EMU_ASAN
    protect_device_pages(open);
#endif
}

static void install_fault_handler(void);

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

// =========================================================================================================
// 4. Kernels
//
// A block runs on one host thread as one fiber per CUDA thread, each on its own stack. A fiber runs until
// it reaches __syncthreads, a warp operation or its end, and then gives the host thread back to the
// block's scheduler, which runs the next runnable fiber (in thread order, or reversed). A barrier
// releases its threads when every thread of the block has reached the same one; a warp operation
// completes when every lane its mask names has reached the same one, with the same mask. Everything
// else a GPU leaves undefined there is an error: a thread that exits while others wait at a barrier,
// barriers at different places, a mask naming a lane that does not exist, has exited or is elsewhere,
// a lane reading from a lane outside the mask. The blocks of a launch are spread over the host threads.

extern "C" void emu_switch_stack(void **save_sp, void *load_sp);
extern "C" void emu_fiber_start(void);
extern "C" [[noreturn]] void emu_fiber_main(void);

#if defined(__x86_64__)
// Saves the callee-saved registers, MXCSR and the x87 control word on the current stack, stores the
// stack pointer in *save_sp, and resumes the stack load_sp, which was saved the same way (or built by
// prepare_stack). A new fiber "returns" into emu_fiber_start with its stack 16-byte aligned.
asm(R"(
    .pushsection .text
    .globl emu_switch_stack
    .type emu_switch_stack, @function
emu_switch_stack:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size emu_switch_stack, .-emu_switch_stack
    .globl emu_fiber_start
    .type emu_fiber_start, @function
emu_fiber_start:
    call emu_fiber_main
    ud2
    .size emu_fiber_start, .-emu_fiber_start
    .popsection
)");

// A stack that emu_switch_stack resumes into emu_fiber_start: control words, six zeroed registers, the
// return address, laid out so that the stack is 16-byte aligned after the return.
static void *prepare_stack(char *stack_top) {
    uint64_t *sp = (uint64_t *)(((uintptr_t)stack_top & ~(uintptr_t)15) - 80);
    uint32_t control[2];
    asm volatile("stmxcsr %0" : "=m"(control[0]));
    asm volatile("fnstcw %0" : "=m"(control[1]));
    memcpy(&sp[0], control, sizeof(control));
    for (int i = 1; i <= 6; i++) sp[i] = 0;
    sp[7] = (uint64_t)(uintptr_t)&emu_fiber_start;
    return sp;
}
#else
#error "emu/runtime.cpp: the fiber switch is written for x86-64 only"
#endif

enum FiberState { FIBER_RUNNABLE, FIBER_AT_BARRIER, FIBER_AT_WARP, FIBER_EXITED };

struct Fiber {
    void *sp;
    ThreadContext ctx;
    FiberState state;
    int linear; // threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)
    const char *wait_file;
    int wait_line;
    uint64_t warp_result;
    int stack; // index of the stack it runs on, -1 before it starts and after it ends
    void *asan_fake_stack;
};

// A warp operation that some lanes of its mask have reached (its mask is in Block::pending_mask).
struct WarpPending {
    WarpOpKind kind;
    unsigned arrived;
    int width;
    const char *file;
    int line;
    uint64_t value[32];
    int arg[32];
};

static const int MAX_WARP_GROUPS = 8; // operations of disjoint masks in flight in one warp

struct Block {
    const KernelLaunch *launch;
    const char *kernel;
    Fiber *fibers;
    int num_threads, exited, first_exited;
    int barrier_arrived;
    const char *barrier_file;
    int barrier_line;
    unsigned exited_lanes[32];
    unsigned pending_mask[32][MAX_WARP_GROUPS]; // 0: the slot is free
    WarpPending pending[32][MAX_WARP_GROUPS];
};

// What one host thread needs to run blocks: fiber stacks and the scheduler's own context. A thread gets a
// stack when it first runs; one that ends hands its stack to the next thread that has not started, which
// then runs on it without a switch, so that threads that never wait cost a function call each.
struct Worker {
    char *stacks = NULL;
    size_t stack_stride = 0;
    std::vector<int> free_stacks;
    std::vector<Fiber> fibers;
    std::vector<char> dynamic_shared;
    Block block;
    Fiber *current = NULL;
    void *scheduler_sp = NULL;
    const void *scheduler_stack = NULL;
    size_t scheduler_stack_size = 0;
    void *scheduler_fake_stack = NULL;
    char *signal_stack = NULL;
    uint64_t random_state = 0; // CUDA_EMU_SCHEDULE=random's choices
};

static __thread Worker *this_worker;
__thread ThreadContext *current_thread;

static const int MAX_THREADS_PER_BLOCK = 1024;
static const unsigned MAX_BLOCK_DIM[3] = {1024, 1024, 64};
static const unsigned MAX_GRID_DIM[3] = {2147483647u, 65535, 65535};
static const size_t DEFAULT_DYNAMIC_SHARED = 48 * 1024; // without cudaFuncSetAttribute
static const size_t MAX_DYNAMIC_SHARED = 227 * 1024;    // Hopper's opt-in limit per block

static void setup_signal_stack(Worker *w);

static Worker *worker(void) {
    if (!this_worker) {
        this_worker = new Worker();
        setup_signal_stack(this_worker);
    }
    Worker *w = this_worker;
    if (!w->stacks) {
        size_t page = (size_t)getpagesize();
        w->stack_stride = (settings().stack_bytes + page - 1) / page * page + page; // + a guard page below
        size_t total = w->stack_stride * MAX_THREADS_PER_BLOCK;
        void *m =
            mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED) fatal("cannot map %zu bytes of thread stacks", total);
        w->stacks = (char *)m;
        for (int i = 0; i < MAX_THREADS_PER_BLOCK; i++)
            mprotect(w->stacks + i * w->stack_stride, page, PROT_NONE);
        w->fibers.resize(MAX_THREADS_PER_BLOCK);
        pthread_attr_t attr; // the host thread's own stack, which AddressSanitizer is told of at each switch
        if (pthread_getattr_np(pthread_self(), &attr) == 0) {
            void *lo = NULL;
            pthread_attr_getstack(&attr, &lo, &w->scheduler_stack_size);
            w->scheduler_stack = lo;
            pthread_attr_destroy(&attr);
        }
        for (int i = MAX_THREADS_PER_BLOCK - 1; i >= 0; i--) w->free_stacks.push_back(i);
    }
    return w;
}

// The random schedule's next number (xorshift64, from the seed): one host thread runs every block then, so
// that a seed always gives the same schedule.
static uint64_t schedule_random(Worker *w) {
    if (!w->random_state)
        w->random_state = settings().schedule_seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
    w->random_state ^= w->random_state << 13;
    w->random_state ^= w->random_state >> 7;
    w->random_state ^= w->random_state << 17;
    return w->random_state;
}

// The usable part of stack `index` (above its guard page).
static char *stack_low(Worker *w, int index) {
    return w->stacks + (size_t)index * w->stack_stride + getpagesize();
}

static size_t stack_size(Worker *w) {
    return w->stack_stride - getpagesize();
}

static void asan_start_switch(void **fake_stack_save, const void *bottom, size_t size) {
#ifdef EMU_ASAN
    __sanitizer_start_switch_fiber(fake_stack_save, bottom, size);
#else
    (void)fake_stack_save, (void)bottom, (void)size;
#endif
}

static void asan_finish_switch(void *fake_stack_save, const void **old_bottom, size_t *old_size) {
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(fake_stack_save, old_bottom, old_size);
#else
    (void)fake_stack_save, (void)old_bottom, (void)old_size;
#endif
}

static std::string thread_label(const Block *b, const Fiber *f) {
    char buf[192];
    snprintf(buf, sizeof(buf), "kernel %s, block (%u,%u,%u), thread (%u,%u,%u)", b->kernel,
             f->ctx.block_idx.x, f->ctx.block_idx.y, f->ctx.block_idx.z, f->ctx.thread_idx.x,
             f->ctx.thread_idx.y, f->ctx.thread_idx.z);
    return buf;
}

static const char *warp_op_name(WarpOpKind kind) {
    static const char *const names[] = {"__shfl_sync",       "__shfl_xor_sync",   "__shfl_up_sync",
                                        "__shfl_down_sync",  "__reduce_add_sync", "__reduce_min_sync",
                                        "__reduce_max_sync", "__ballot_sync",     "__any_sync",
                                        "__all_sync",        "__syncwarp"};
    return names[kind];
}

[[noreturn]] static void report_deadlock(Block *b);

static uint64_t schedule_random(Worker *w);

// The fiber to run after `from` waits, under the settings' schedule (CUDA_EMU_THREAD_ORDER=reverse walks the
// thread order backwards), or NULL when none is runnable.
static Fiber *next_runnable(Worker *w, Block *b, int from) {
    const int n = b->num_threads, step = settings().reverse_threads ? n - 1 : 1;
    if (settings().schedule == SCHEDULE_RANDOM) {
        int runnable = 0;
        for (int i = 0; i < n; i++) runnable += b->fibers[i].state == FIBER_RUNNABLE;
        if (!runnable) return NULL;
        int pick = (int)(schedule_random(w) % (uint64_t)runnable);
        for (int i = 0; i < n; i++)
            if (b->fibers[i].state == FIBER_RUNNABLE && pick-- == 0) return &b->fibers[i];
    }
    if (settings().schedule == SCHEDULE_WARP_AHEAD) {
        const int first = from / 32 * 32, lanes = std::min(32, n - first),
                  wstep = settings().reverse_threads ? lanes - 1 : 1;
        for (int i = 1, lane = from - first; i <= lanes; i++) {
            lane = (lane + wstep) % lanes;
            if (b->fibers[first + lane].state == FIBER_RUNNABLE) return &b->fibers[first + lane];
        }
    }
    for (int i = 1, j = from; i <= n; i++) {
        j = (j + step) % n;
        if (b->fibers[j].state == FIBER_RUNNABLE) return &b->fibers[j];
    }
    return NULL;
}

// Hands the host thread from fiber `from` (NULL: the block's scheduler) to `to` (NULL: the scheduler).
// A fiber that has exited passes save = NULL: its stack is not resumed again.
static void switch_fiber(Worker *w, Fiber *from, Fiber *to, bool save) {
    void **save_sp = from ? &from->sp : &w->scheduler_sp;
    void *unused = NULL;
    void **fake = save ? (from ? &from->asan_fake_stack : &w->scheduler_fake_stack) : NULL;
    w->current = to;
    current_thread = to ? &to->ctx : NULL;
    if (to && to->stack < 0) { // its first run: a stack of its own
        to->stack = w->free_stacks.back();
        w->free_stacks.pop_back();
        to->sp = prepare_stack(stack_low(w, to->stack) + stack_size(w));
    }
    if (to)
        asan_start_switch(fake, stack_low(w, to->stack), stack_size(w));
    else
        asan_start_switch(fake, w->scheduler_stack, w->scheduler_stack_size);
    emu_switch_stack(save ? save_sp : &unused, to ? to->sp : w->scheduler_sp);
    asan_finish_switch(from ? from->asan_fake_stack : w->scheduler_fake_stack, NULL, NULL);
}

// The running fiber waits (at a barrier or a warp operation): the next runnable one runs.
static void yield_fiber(Worker *w, Fiber *f) {
    Fiber *next = next_runnable(w, &w->block, f->linear);
    if (!next) report_deadlock(&w->block);
    if (next != f) switch_fiber(w, f, next, true); // f itself (the barrier it completed released it): go on
}

static bool same_site(const char *file_a, int line_a, const char *file_b, int line_b) {
    return line_a == line_b && (file_a == file_b || strcmp(file_a, file_b) == 0);
}

// Thread f has returned from the kernel: the checks a GPU leaves undefined, then the thread to run next
// (NULL when the block is done).
static Fiber *finish_thread(Worker *w, Fiber *f) {
    Block *b = &w->block;
    f->state = FIBER_EXITED;
    if (b->exited++ == 0) b->first_exited = f->linear;
    int lane = f->linear % 32, warp = f->linear / 32;
    b->exited_lanes[warp] |= 1u << lane;
    if (b->barrier_arrived > 0)
        fatal(
            "%s has exited while %d thread(s) of its block wait at __syncthreads (%s:%d): on a GPU a barrier "
            "waits for every thread of the block (a barrier in divergent code)",
            thread_label(b, f).c_str(), b->barrier_arrived, b->barrier_file, b->barrier_line);
    for (int g = 0; g < MAX_WARP_GROUPS; g++) {
        const WarpPending &p = b->pending[warp][g];
        if (b->pending_mask[warp][g] >> lane & 1u)
            fatal("%s has exited, but lanes of its warp wait for it at %s (%s:%d, mask 0x%08x)",
                  thread_label(b, f).c_str(), warp_op_name(p.kind), p.file, p.line, b->pending_mask[warp][g]);
    }
    Fiber *next = next_runnable(w, b, f->linear);
    if (!next && b->exited < b->num_threads) report_deadlock(b);
    return next;
}

void block_barrier(const char *file, int line) {
    Worker *w = this_worker;
    if (!w || !w->current) fatal("__syncthreads outside a kernel (%s:%d)", file, line);
    Block *b = &w->block;
    Fiber *f = w->current;
    if (b->exited)
        fatal("%s reached __syncthreads (%s:%d), but thread %d of its block has exited: on a GPU a barrier "
              "waits "
              "for every thread of the block (a barrier in divergent code)",
              thread_label(b, f).c_str(), file, line, b->first_exited);
    if (b->barrier_arrived == 0) {
        b->barrier_file = file;
        b->barrier_line = line;
    } else if (!same_site(file, line, b->barrier_file, b->barrier_line)) {
        fatal(
            "%s reached __syncthreads at %s:%d while other threads of its block wait at the one at %s:%d (a "
            "barrier in divergent code)",
            thread_label(b, f).c_str(), file, line, b->barrier_file, b->barrier_line);
    }
    const int lane = f->linear % 32, warp = f->linear / 32;
    for (int g = 0; g < MAX_WARP_GROUPS; g++) {
        const WarpPending &p = b->pending[warp][g];
        if (b->pending_mask[warp][g] >> lane & 1u)
            fatal("%s reached __syncthreads (%s:%d) while lanes of its warp wait for it at %s (%s:%d, mask "
                  "0x%08x)",
                  thread_label(b, f).c_str(), file, line, warp_op_name(p.kind), p.file, p.line,
                  b->pending_mask[warp][g]);
    }
    f->state = FIBER_AT_BARRIER;
    f->wait_file = file;
    f->wait_line = line;
    if (++b->barrier_arrived == b->num_threads) {
        b->barrier_arrived = 0;
        racecheck_barrier();
        for (int i = 0; i < b->num_threads; i++) b->fibers[i].state = FIBER_RUNNABLE;
    }
    yield_fiber(w, f);
}

void *dynamic_shared_memory(void) {
    Worker *w = this_worker;
    if (!w || !w->current) fatal("dynamic shared memory outside a kernel");
    return w->dynamic_shared.data();
}

// The lane a shuffle reads, or -1 for its own value (CUDA's rules for a source outside the lane's
// segment of width lanes).
static int shuffle_source(WarpOpKind kind, int lane, int arg, int width) {
    int segment = lane / width * width;
    switch (kind) {
    case WARP_SHFL:
        return segment + ((arg % width) + width) % width;
    case WARP_SHFL_XOR: {
        int src = lane ^ arg;
        return src < 0 || src > 31 || src / width > lane / width ? -1 : src;
    }
    case WARP_SHFL_UP:
        return lane - arg < segment ? -1 : lane - arg;
    default: // WARP_SHFL_DOWN
        return lane + arg >= segment + width ? -1 : lane + arg;
    }
}

// Every lane of the mask of slot g has arrived: each gets its result and runs again.
static void complete_warp_op(Block *b, int warp, int g) {
    WarpPending *p = &b->pending[warp][g];
    const unsigned mask = b->pending_mask[warp][g];
    uint64_t reduced = 0;
    if (p->kind == WARP_REDUCE_MIN) reduced = 0xffffffffu;
    if (p->kind == WARP_ALL) reduced = 1;
    for (int lane = 0; lane < 32; lane++) {
        if (!(mask >> lane & 1u)) continue;
        uint32_t v = (uint32_t)p->value[lane];
        switch (p->kind) {
        case WARP_REDUCE_ADD:
            reduced = (uint32_t)(reduced + v);
            break;
        case WARP_REDUCE_MIN:
            reduced = std::min<uint64_t>(reduced, v);
            break;
        case WARP_REDUCE_MAX:
            reduced = std::max<uint64_t>(reduced, v);
            break;
        case WARP_BALLOT:
            reduced |= (uint64_t)(v != 0) << lane;
            break;
        case WARP_ANY:
            reduced |= v != 0;
            break;
        case WARP_ALL:
            reduced &= v != 0;
            break;
        default:
            break;
        }
    }
    for (int lane = 0; lane < 32; lane++) {
        if (!(mask >> lane & 1u)) continue;
        Fiber *f = &b->fibers[warp * 32 + lane];
        uint64_t result = reduced;
        if (p->kind <= WARP_SHFL_DOWN) {
            int src = shuffle_source(p->kind, lane, p->arg[lane], p->width);
            if (src >= 0 && !(mask >> src & 1u))
                fatal("%s: %s (%s:%d) reads lane %d, which is not in the mask 0x%08x",
                      thread_label(b, f).c_str(), warp_op_name(p->kind), p->file, p->line, src, mask);
            result = p->value[src >= 0 ? src : lane];
        }
        f->warp_result = result;
        f->state = FIBER_RUNNABLE;
    }
    const int lanes = std::min(32, b->num_threads - warp * 32);
    if (p->kind == WARP_SYNC && mask == (lanes == 32 ? 0xffffffffu : (1u << lanes) - 1))
        racecheck_warp_synced(warp);
    b->pending_mask[warp][g] = 0;
}

uint64_t warp_op(WarpOpKind kind, unsigned mask, uint64_t value, int arg, int width, const char *file,
                 int line) {
    Worker *w = this_worker;
    if (!w || !w->current) fatal("%s outside a kernel (%s:%d)", warp_op_name(kind), file, line);
    Block *b = &w->block;
    Fiber *f = w->current;
    int lane = f->linear % 32, warp = f->linear / 32;
    int lanes = std::min(32, b->num_threads - warp * 32);
    unsigned existing = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
    const char *op = warp_op_name(kind);
    if (!(mask >> lane & 1u))
        fatal("%s: %s (%s:%d) with mask 0x%08x, which does not name the calling lane %d",
              thread_label(b, f).c_str(), op, file, line, mask, lane);
    if (mask & ~existing)
        fatal(
            "%s: %s (%s:%d) with mask 0x%08x names lanes that do not exist: warp %d of this %d-thread block "
            "has %d",
            thread_label(b, f).c_str(), op, file, line, mask, warp, b->num_threads, lanes);
    if (mask & b->exited_lanes[warp])
        fatal("%s: %s (%s:%d) with mask 0x%08x names lane %d, which has exited", thread_label(b, f).c_str(),
              op, file, line, mask, __builtin_ctz(mask & b->exited_lanes[warp]));
    if (width < 1 || width > 32 || (width & (width - 1)))
        fatal("%s: %s (%s:%d) with width %d: not a power of two up to 32", thread_label(b, f).c_str(), op,
              file, line, width);
    unsigned *masks = b->pending_mask[warp];
    int slot = -1, free_slot = -1;
    for (int g = 0; g < MAX_WARP_GROUPS; g++) {
        if (!masks[g]) {
            if (free_slot < 0) free_slot = g;
            continue;
        }
        if (!(masks[g] & mask)) continue;
        const WarpPending &q = b->pending[warp][g];
        if (masks[g] != mask || q.kind != kind || !same_site(q.file, q.line, file, line))
            fatal(
                "%s reached %s (%s:%d, mask 0x%08x) while lanes of its warp wait at %s (%s:%d, mask 0x%08x): "
                "every lane a mask names must reach the same warp operation",
                thread_label(b, f).c_str(), op, file, line, mask, warp_op_name(q.kind), q.file, q.line,
                masks[g]);
        slot = g;
        break;
    }
    WarpPending *p;
    if (slot >= 0) {
        p = &b->pending[warp][slot];
    } else {
        if (free_slot < 0)
            fatal("%s: more than %d warp operations of disjoint masks in flight in one warp",
                  thread_label(b, f).c_str(), MAX_WARP_GROUPS);
        slot = free_slot;
        masks[slot] = mask;
        p = &b->pending[warp][slot];
        p->kind = kind;
        p->arrived = 0;
        p->width = width;
        p->file = file;
        p->line = line;
    }
    if (b->barrier_arrived > 0 && p->arrived == 0) {
        // lanes of this mask are at __syncthreads: this operation can never complete
        for (int l = 0; l < 32; l++) {
            const Fiber &other = b->fibers[warp * 32 + l];
            if ((mask >> l & 1u) && other.state == FIBER_AT_BARRIER)
                fatal("%s reached %s (%s:%d, mask 0x%08x) while lane %d of its warp waits at __syncthreads "
                      "(%s:%d)",
                      thread_label(b, f).c_str(), op, file, line, mask, l, b->barrier_file, b->barrier_line);
        }
    }
    p->value[lane] = value;
    p->arg[lane] = arg;
    p->arrived |= 1u << lane;
    f->wait_file = file;
    f->wait_line = line;
    if (p->arrived == mask) {
        complete_warp_op(b, warp, slot);
        return f->warp_result;
    }
    f->state = FIBER_AT_WARP;
    yield_fiber(w, f);
    return f->warp_result;
}

extern "C" void emu_fiber_main(void) {
    Worker *w = this_worker;
    asan_finish_switch(NULL, NULL, NULL);
    for (;;) {
        const KernelLaunch *launch = w->block.launch;
        Fiber *f = w->current;
        launch->invoke(launch->function, launch->params.get());
        Fiber *next = finish_thread(w, f);
        if (next && next->stack < 0) { // the next thread has not started: it runs on this stack
            next->stack = f->stack;
            f->stack = -1;
            w->current = next;
            current_thread = &next->ctx;
            continue;
        }
        w->free_stacks.push_back(f->stack); // nothing runs on it once the switch below has left it
        f->stack = -1;
        switch_fiber(w, f, next, false); // next waits to resume, or the block is done
        __builtin_unreachable();
    }
}

// Every thread of the block waits and none can go on: the message names where each group waits.
[[noreturn]] static void report_deadlock(Block *b) {
    std::string where;
    int shown = 0;
    for (int i = 0; i < b->num_threads && shown < 4; i++) {
        const Fiber &f = b->fibers[i];
        if (f.state == FIBER_EXITED) continue;
        char buf[160];
        snprintf(buf, sizeof(buf), "%sthread %d at %s:%d", shown ? "; " : "", i, f.wait_file, f.wait_line);
        where += buf;
        shown++;
    }
    fatal("kernel %s, block (%u,%u,%u): every thread waits and none can go on (%s): a barrier or warp "
          "operation that not all of its threads reach",
          b->kernel, b->fibers[0].ctx.block_idx.x, b->fibers[0].ctx.block_idx.y, b->fibers[0].ctx.block_idx.z,
          where.c_str());
}

static void run_block(Worker *w, const KernelLaunch &k, const char *kernel, uint64_t block_linear) {
    Block *b = &w->block;
    const unsigned bx = k.block.x, by = k.block.y;
    const int n = (int)(k.block.x * k.block.y * k.block.z);
    b->launch = &k;
    b->kernel = kernel;
    b->fibers = w->fibers.data();
    b->num_threads = n;
    b->exited = 0;
    b->first_exited = -1;
    b->barrier_arrived = 0;
    for (int warp = 0; warp < (n + 31) / 32; warp++) {
        b->exited_lanes[warp] = 0;
        for (int g = 0; g < MAX_WARP_GROUPS; g++) b->pending_mask[warp][g] = 0;
    }
    uint3 block_idx = {(unsigned)(block_linear % k.grid.x), (unsigned)(block_linear / k.grid.x % k.grid.y),
                       (unsigned)(block_linear / ((uint64_t)k.grid.x * k.grid.y))};
    if (k.shared_bytes) {
        w->dynamic_shared.assign(k.shared_bytes, (char)0xFF); // uninitialised on a GPU: NaN patterns here
    }
    racecheck_block_begin(block_linear, w->dynamic_shared.data(), k.shared_bytes);
    const int first = settings().schedule == SCHEDULE_RANDOM ? (int)(schedule_random(w) % (uint64_t)n)
                      : settings().reverse_threads           ? n - 1
                                                             : 0;
    for (int i = 0; i < n; i++) {
        Fiber *f = &b->fibers[i];
        f->linear = i;
        f->state = FIBER_RUNNABLE;
        f->ctx.thread_idx = uint3{(unsigned)i % bx, (unsigned)i / bx % by, (unsigned)i / (bx * by)};
        f->ctx.block_idx = block_idx;
        f->ctx.block_dim = k.block;
        f->ctx.grid_dim = k.grid;
        f->wait_file = "";
        f->wait_line = 0;
        f->asan_fake_stack = NULL;
        f->stack = -1;
    }
    switch_fiber(w, NULL, &b->fibers[first], true);
}

// The host threads that run blocks: the calling thread and CUDA_EMU_THREADS - 1 helpers.
class WorkerPool {
  public:
    void run(uint64_t count, const std::function<void(uint64_t)> &task) {
        // the race checker's shadow state has no locks; a random schedule is reproducible from its seed alone
        const bool one_thread = racecheck_active() || settings().schedule == SCHEDULE_RANDOM;
        int helpers = one_thread ? 0 : settings().host_threads - 1;
        if (count < 2 || helpers < 1) {
            for (uint64_t i = 0; i < count; i++) task(i);
            return;
        }
        std::unique_lock<std::mutex> lock(mutex_);
        while ((int)threads_.size() < helpers) threads_.emplace_back([this] { loop(); });
        task_ = &task;
        count_ = count;
        next_.store(0);
        busy_ = helpers;
        generation_++;
        lock.unlock();
        wake_.notify_all();
        work();
        lock.lock();
        done_.wait(lock, [this] { return busy_ == 0; });
        task_ = NULL;
    }

  private:
    void work() {
        for (uint64_t i; (i = next_.fetch_add(1)) < count_;) (*task_)(i);
    }
    void loop() {
        uint64_t seen = 0;
        std::unique_lock<std::mutex> lock(mutex_);
        for (;;) {
            wake_.wait(lock, [&] { return generation_ != seen; });
            seen = generation_;
            lock.unlock();
            work();
            lock.lock();
            if (--busy_ == 0) done_.notify_all();
        }
    }
    std::mutex mutex_;
    std::condition_variable wake_, done_;
    std::vector<std::thread> threads_;
    const std::function<void(uint64_t)> *task_ = NULL;
    uint64_t count_ = 0, generation_ = 0;
    std::atomic<uint64_t> next_{0};
    int busy_ = 0;
};

static WorkerPool &pool(void) {
    static WorkerPool *p = new WorkerPool(); // never destroyed: its threads live until the process ends
    return *p;
}

void parallel_for(size_t n, const std::function<void(size_t, size_t)> &body) {
    const size_t chunks = std::min<size_t>(n, (size_t)settings().host_threads * 4);
    if (chunks <= 1) {
        if (n) body(0, n);
        return;
    }
    pool().run(chunks, [&](uint64_t c) { body(n * c / chunks, n * (c + 1) / chunks); });
}

static std::map<const void *, size_t> dynamic_shared_limit; // cudaFuncSetAttribute's opt-ins
static std::map<std::string, uint64_t> kernels_executed;
static std::mutex kernel_stats_mutex;

static void count_execution(void);

static void execute_kernel(const KernelLaunch &k) {
    const std::string name = function_name(k.function);
    {
        std::lock_guard<std::mutex> lock(kernel_stats_mutex);
        kernels_executed[name]++;
    }
    count_execution();
    const uint64_t blocks = (uint64_t)k.grid.x * k.grid.y * k.grid.z;
    Worker *w = worker();
    racecheck_launch_begin(name.c_str(), k.grid, k.block, w->stacks, w->stack_stride * MAX_THREADS_PER_BLOCK);
    std::vector<uint64_t> order; // random: the blocks in a shuffled order
    if (settings().schedule == SCHEDULE_RANDOM) {
        order.resize(blocks);
        for (uint64_t i = 0; i < blocks; i++) order[i] = i;
        for (uint64_t i = blocks; i > 1; i--) std::swap(order[i - 1], order[schedule_random(w) % i]);
    }
    pool().run(blocks, [&](uint64_t block) {
        run_block(worker(), k, name.c_str(), order.empty() ? block : order[block]);
    });
    racecheck_launch_end();
}

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

// ---------------------------------------------------------------------------------------------------------
// Faults: SIGSEGV and SIGBUS name what was touched and who touched it.

#ifndef EMU_ASAN // AddressSanitizer reports faults itself
static struct sigaction previous_segv, previous_bus;

static void on_fault(int sig, siginfo_t *info, void *context) {
    const void *address = info->si_addr;
    Worker *w = this_worker;
    std::string who = w && w->current ? thread_label(&w->block, w->current) : std::string("host code");
    const Allocation *al = NULL;
    for (auto &entry : allocations) { // no lock: the faulting thread may hold it; the map is not changing
        const Allocation &a = entry.second;
        if (a.mapping && address >= (const void *)a.mapping &&
            address < (const void *)(a.mapping + a.mapping_bytes))
            al = &a;
    }
    if (al && address >= (const void *)al->base && address < (const void *)(al->base + al->bytes) &&
        !device_open)
        fatal("%s touched device memory at %p (byte %td of a cudaMalloc allocation of %zu bytes at %p) "
              "outside a "
              "device operation: on a GPU host code cannot dereference a device pointer (copy it with "
              "cudaMemcpy)",
              who.c_str(), address, (const char *)address - al->base, al->bytes, (void *)al->base);
    if (al)
        fatal("%s: out-of-bounds access at %p, %td bytes from the start of a cudaMalloc allocation of %zu "
              "bytes at "
              "%p",
              who.c_str(), address, (const char *)address - al->base, al->bytes, (void *)al->base);
    if (w && w->stacks && address >= (const void *)w->stacks &&
        address < (const void *)(w->stacks + w->stack_stride * MAX_THREADS_PER_BLOCK))
        fatal("%s overflowed its emulated stack of %zu bytes (CUDA_EMU_STACK_KB raises it)", who.c_str(),
              settings().stack_bytes);
    if (w && w->current)
        fatal("%s: invalid access at %p (%s)", who.c_str(), address,
              sig == SIGBUS ? "bus error" : "not mapped");
    // a fault of the host program: leave it to the handler that was there before, or the default
    struct sigaction *previous = sig == SIGSEGV ? &previous_segv : &previous_bus;
    sigaction(sig, previous, NULL);
    (void)context;
}

static void setup_signal_stack(Worker *w) {
    const size_t size = 64 * 1024;
    w->signal_stack = (char *)malloc(size);
    stack_t ss;
    ss.ss_sp = w->signal_stack;
    ss.ss_size = size;
    ss.ss_flags = 0;
    sigaltstack(&ss, NULL);
}

static void install_fault_handler(void) {
    static bool installed = false;
    if (installed) return;
    installed = true;
    worker(); // the host thread's signal stack
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &previous_segv);
    sigaction(SIGBUS, &sa, &previous_bus);
}
#else
static void setup_signal_stack(Worker *) {}
static void install_fault_handler(void) {}
#endif

// =========================================================================================================
// 5. Streams, events and graphs
//
// A stream is a queue of operations. An operation may also wait for positions in other streams (a
// cudaStreamWaitEvent before it; the legacy default stream's implicit synchronisation). Nothing runs
// when it is queued: every synchronising call runs all queued work, repeatedly choosing among the
// streams whose next operation is ready. The choice is the settings' order: "issue" takes the oldest
// ready operation; "first-stream" the ready stream created first, so that later streams run as late as
// their dependencies allow; "last-stream" the reverse, as early as they allow; "random" any. A missing
// wait between two streams then shows as a different result under one of the orders.
//
// Capture: a capturing stream adds its operations to the graph as nodes that depend on the stream's last
// nodes; a stream that waits on an event recorded in the capture joins it. cudaGraphLaunch queues the
// whole graph as one operation that runs its nodes in a dependency order chosen the same way.

struct Dep {
    CUstream_st *stream;
    uint64_t position; // satisfied once stream->completed >= position
};

struct Op {
    uint64_t id;
    OpKind kind;
    std::vector<Dep> deps;
    std::function<void()> run;
};

struct GraphNode {
    OpKind kind;
    std::function<void()> run;
    std::vector<int> deps;
    int stream_index;
};

struct Capture {
    CUgraph_st *graph;
    CUstream_st *origin;
    std::vector<CUstream_st *> streams; // the origin and every stream that joined
    bool invalidated, ended;
};

} // namespace emu

struct CUgraph_st {
    std::vector<emu::GraphNode> nodes;
};

struct CUgraphExec_st {
    std::vector<emu::GraphNode> nodes;
};

struct CUstream_st {
    int index; // creation order: 0 is the legacy default stream
    unsigned flags;
    int priority;
    std::deque<emu::Op> queue;
    uint64_t enqueued = 0, completed = 0;
    std::vector<emu::Dep> pending; // waits that the next operation takes
    // Vector clock: clock[t] is the number of stream t's operations that this stream's next one is known
    // to follow (through waits, directly or transitively). It tells a redundant wait from a needed one.
    std::vector<uint64_t> clock;
    emu::Capture *capture = NULL;
    std::vector<int> tails; // capture: the nodes the next one depends on
};

struct CUevent_st {
    unsigned flags;
    bool recorded = false;
    CUstream_st *stream = NULL;
    uint64_t position = 0, generation = 0;
    emu::Capture *capture = NULL; // last recorded while capture was active
    std::vector<int> tails;
    double time_ms = -1.0;
    std::vector<uint64_t> clock; // the recording stream's clock at the record
};

namespace emu {

static std::recursive_mutex api_mutex; // the runtime API is called from the host thread(s)
static CUstream_st legacy_stream;
static std::vector<CUstream_st *> streams = {&legacy_stream};
static std::vector<std::unique_ptr<Capture>> captures; // kept: events refer to them after they end
static uint64_t next_op_id = 1;
static uint64_t random_state = 0;
static cudaError_t last_error = cudaSuccess;
static bool draining = false;

// a = max(a, b), elementwise.
static void merge_clock(std::vector<uint64_t> &a, const std::vector<uint64_t> &b) {
    if (a.size() < b.size()) a.resize(b.size(), 0);
    for (size_t i = 0; i < b.size(); i++) a[i] = std::max(a[i], b[i]);
}

static cudaError_t set_error(cudaError_t err) {
    if (err != cudaSuccess) last_error = err;
    return err;
}

static uint64_t next_random(void) {
    if (!random_state) random_state = settings().seed * 0x9E3779B97F4A7C15ull + 1;
    random_state ^= random_state << 13;
    random_state ^= random_state >> 7;
    random_state ^= random_state << 17;
    return random_state;
}

static CUstream_st *resolve(cudaStream_t stream) {
    return stream ? stream : &legacy_stream;
}

static Capture *active_capture(void) {
    for (auto &c : captures)
        if (!c->ended) return c.get();
    return NULL;
}

static void invalidate_captures(void) {
    for (auto &c : captures)
        if (!c->ended) c->invalidated = true;
}

// A call that a GPU refuses during a capture (it would synchronise or allocate): refused here too, and
// the capture is invalidated, as CUDA does.
static cudaError_t refuse_during_capture(const char *call) {
    if (!active_capture()) return cudaSuccess;
    explain("%s while a stream is being captured: not permitted (the capture is invalidated)", call);
    invalidate_captures();
    return cudaErrorStreamCaptureUnsupported;
}

// The index of the candidate that runs next under the settings' order. Each candidate: (id, stream index).
static size_t pick(const std::vector<std::pair<uint64_t, int>> &candidates) {
    size_t best = 0;
    switch (settings().order) {
    case ORDER_RANDOM:
        return (size_t)(next_random() % candidates.size());
    case ORDER_ISSUE:
        for (size_t i = 1; i < candidates.size(); i++)
            if (candidates[i].first < candidates[best].first) best = i;
        return best;
    case ORDER_FIRST_STREAM:
    case ORDER_LAST_STREAM:
        for (size_t i = 1; i < candidates.size(); i++) {
            int a = candidates[i].second, b = candidates[best].second;
            bool earlier = settings().order == ORDER_FIRST_STREAM ? a < b : a > b;
            if (earlier || (a == b && candidates[i].first < candidates[best].first)) best = i;
        }
        return best;
    }
    return best;
}

static bool ready(const Op &op) {
    for (const Dep &d : op.deps)
        if (d.stream->completed < d.position) return false;
    return true;
}

static bool op_waiting = false; // set by op_waits() while an operation runs

void op_waits(void) {
    op_waiting = true;
}

// Runs queued operations of every stream: all of them, or (poll) until every stream left is blocked on
// an operation that waits outside the device (op_waits), which a synchronising call instead retries.
static void drain(bool poll = false) {
    std::lock_guard<std::recursive_mutex> lock(api_mutex);
    if (draining) fatal("internal: a device operation synchronised");
    draining = true;
    open_device_memory(true);
    std::vector<CUstream_st *> blocked; // streams whose head waited since the last progress
    for (;;) {
        std::vector<std::pair<uint64_t, int>> candidates;
        std::vector<CUstream_st *> owners;
        bool pending = false;
        for (CUstream_st *s : streams) {
            if (s->queue.empty()) continue;
            pending = true;
            if (!ready(s->queue.front()) || std::count(blocked.begin(), blocked.end(), s)) continue;
            candidates.push_back({s->queue.front().id, s->index});
            owners.push_back(s);
        }
        if (!pending) break;
        if (candidates.empty()) {
            if (blocked.empty()) fatal("internal: the queued stream operations wait on each other");
            if (poll) break;
            blocked.clear();
            usleep(100);
            continue;
        }
        CUstream_st *s = owners[pick(candidates)];
        Op op = std::move(s->queue.front());
        s->queue.pop_front();
        op_waiting = false;
        op.run();
        if (op_waiting) {
            s->queue.push_front(std::move(op));
            blocked.push_back(s);
            continue;
        }
        s->completed++;
        blocked.clear();
    }
    open_device_memory(false);
    draining = false;
}

static void run_graph(const CUgraphExec_st *exec) {
    const size_t n = exec->nodes.size();
    std::vector<int> remaining(n);
    std::vector<std::vector<int>> dependents(n);
    for (size_t i = 0; i < n; i++) {
        remaining[i] = (int)exec->nodes[i].deps.size();
        for (int d : exec->nodes[i].deps) dependents[d].push_back((int)i);
    }
    std::vector<int> ready_nodes;
    for (size_t i = 0; i < n; i++)
        if (remaining[i] == 0) ready_nodes.push_back((int)i);
    while (!ready_nodes.empty()) {
        std::vector<std::pair<uint64_t, int>> candidates;
        for (int i : ready_nodes) candidates.push_back({(uint64_t)i, exec->nodes[i].stream_index});
        size_t chosen = pick(candidates);
        int node = ready_nodes[chosen];
        ready_nodes.erase(ready_nodes.begin() + chosen);
        // graphs hold no collective of several ranks (the trainer captures none then): a wait is brief
        do {
            op_waiting = false;
            exec->nodes[node].run();
            if (op_waiting) usleep(100);
        } while (op_waiting);
        for (int d : dependents[node])
            if (--remaining[d] == 0) ready_nodes.push_back(d);
    }
}

struct RangeStats;
static void count_op(OpKind kind, const CUgraphExec_st *graph);

cudaError_t enqueue(cudaStream_t stream, OpKind kind, std::function<void()> run) {
    std::lock_guard<std::recursive_mutex> lock(api_mutex);
    CUstream_st *s = resolve(stream);
    if (s->capture) {
        Capture *c = s->capture;
        if (c->invalidated) return cudaErrorStreamCaptureInvalidated;
        GraphNode node{kind, std::move(run), s->tails, s->index};
        c->graph->nodes.push_back(std::move(node));
        s->tails = {(int)c->graph->nodes.size() - 1};
        return cudaSuccess;
    }
    if (s == &legacy_stream && active_capture()) {
        explain(
            "work on the legacy default stream while a stream is being captured: it would synchronise with "
            "the capture (the capture is invalidated)");
        invalidate_captures();
        return cudaErrorStreamCaptureImplicit;
    }
    count_op(kind, NULL);
    Op op;
    op.id = next_op_id++;
    op.kind = kind;
    op.deps = std::move(s->pending);
    s->pending.clear();
    if (s == &legacy_stream) {
        for (CUstream_st *other : streams)
            if (other != s && !(other->flags & cudaStreamNonBlocking)) {
                op.deps.push_back({other, other->enqueued});
                merge_clock(s->clock, other->clock);
            }
    } else if (!(s->flags & cudaStreamNonBlocking)) {
        op.deps.push_back({&legacy_stream, legacy_stream.enqueued});
        merge_clock(s->clock, legacy_stream.clock);
    }
    op.run = std::move(run);
    s->queue.push_back(std::move(op));
    s->enqueued++;
    if (s->clock.size() <= (size_t)s->index) s->clock.resize(s->index + 1, 0);
    s->clock[s->index] = s->enqueued;
    return cudaSuccess;
}

cudaError_t launch_kernel(const KernelLaunch &launch, cudaStream_t stream) {
    cudaError_t err = check_launch(launch);
    if (err != cudaSuccess) return set_error(err);
    return set_error(enqueue(stream, OP_KERNEL, [launch] { execute_kernel(launch); }));
}

// ---------------------------------------------------------------------------------------------------------
// Copies: each side classified and checked, then done now (synchronous calls) or queued.

enum Side { SIDE_DEVICE, SIDE_PINNED, SIDE_PAGEABLE, SIDE_BAD };

static Side classify(const void *p, size_t bytes) {
    if (is_device_range(p, bytes)) return SIDE_DEVICE;
    if (is_pinned_range(p, bytes)) return SIDE_PINNED;
    std::lock_guard<std::mutex> lock(memory_mutex);
    return find_allocation(p, false) ? SIDE_BAD : SIDE_PAGEABLE; // BAD: starts in an allocation, leaves it
}

static const char *kind_name(cudaMemcpyKind kind) {
    static const char *const names[] = {"cudaMemcpyHostToHost", "cudaMemcpyHostToDevice",
                                        "cudaMemcpyDeviceToHost", "cudaMemcpyDeviceToDevice",
                                        "cudaMemcpyDefault"};
    return (unsigned)kind <= 4 ? names[kind] : "an unknown direction";
}

static cudaError_t check_copy(const char *call, void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                              Side *dst_side, Side *src_side) {
    *dst_side = classify(dst, bytes);
    *src_side = classify(src, bytes);
    if (*dst_side == SIDE_BAD || *src_side == SIDE_BAD) {
        explain("%s of %zu bytes from %s to %s: the range leaves its allocation", call, bytes,
                describe_address(src).c_str(), describe_address(dst).c_str());
        return cudaErrorInvalidValue;
    }
    bool dst_device = *dst_side == SIDE_DEVICE, src_device = *src_side == SIDE_DEVICE;
    bool ok = kind == cudaMemcpyDefault || (kind == cudaMemcpyHostToDevice && dst_device && !src_device) ||
              (kind == cudaMemcpyDeviceToHost && !dst_device && src_device) ||
              (kind == cudaMemcpyDeviceToDevice && dst_device && src_device) ||
              (kind == cudaMemcpyHostToHost && !dst_device && !src_device);
    if (!ok) {
        explain("%s of %zu bytes with %s from %s to %s: the pointers do not match the direction", call, bytes,
                kind_name(kind), describe_address(src).c_str(), describe_address(dst).c_str());
        return cudaErrorInvalidValue;
    }
    return cudaSuccess;
}

} // namespace emu

using namespace emu;

// =========================================================================================================
// 6. The runtime API

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

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
    std::lock_guard<std::mutex> lock(memory_mutex);
    size_t used = CONTEXT_BYTES + device_granted;
    *total_bytes = DEVICE_TOTAL_BYTES;
    *free_bytes = used < DEVICE_TOTAL_BYTES ? DEVICE_TOTAL_BYTES - used : 0;
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
    cudaError_t err = refuse_during_capture("cudaDeviceSynchronize");
    if (err != cudaSuccess) return set_error(err);
    drain();
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

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind) {
    Side dst_side, src_side;
    cudaError_t err = check_copy("cudaMemcpy", dst, src, bytes, kind, &dst_side, &src_side);
    if (err == cudaSuccess) err = refuse_during_capture("cudaMemcpy");
    if (err != cudaSuccess) return set_error(err);
    count_op(OP_COPY, NULL);
    drain();
    open_device_memory(true);
    memcpy(dst, src, bytes);
    open_device_memory(false);
    return cudaSuccess;
}

// Pageable host memory takes part as CUDA handles it: a host-to-device copy reads it before returning (it
// is staged), a device-to-host copy completes before returning; neither can be captured. Pinned memory
// is read or written when the copy runs.
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
    std::lock_guard<std::recursive_mutex> lock(api_mutex);
    Side dst_side, src_side;
    cudaError_t err = check_copy("cudaMemcpyAsync", dst, src, bytes, kind, &dst_side, &src_side);
    if (err != cudaSuccess) return set_error(err);
    bool pageable = src_side == SIDE_PAGEABLE || dst_side == SIDE_PAGEABLE;
    if (pageable && resolve(stream)->capture) {
        explain(
            "cudaMemcpyAsync of %zu bytes between pageable host memory and the device while the stream is "
            "captured: a graph cannot copy pageable memory (use cudaMallocHost)",
            bytes);
        resolve(stream)->capture->invalidated = true;
        return set_error(cudaErrorStreamCaptureUnsupported);
    }
    if (src_side == SIDE_PAGEABLE && dst_side != SIDE_PAGEABLE) {
        std::shared_ptr<std::vector<char>> staged =
            std::make_shared<std::vector<char>>((const char *)src, (const char *)src + bytes);
        return set_error(
            enqueue(stream, OP_COPY, [dst, staged] { memcpy(dst, staged->data(), staged->size()); }));
    }
    err = enqueue(stream, OP_COPY, [dst, src, bytes] { memcpy(dst, src, bytes); });
    if (err == cudaSuccess && dst_side == SIDE_PAGEABLE) drain();
    return set_error(err);
}

cudaError_t cudaMemset(void *ptr, int value, size_t bytes) {
    if (!is_device_range(ptr, bytes)) {
        explain("cudaMemset of %zu bytes at %s: not device memory", bytes, describe_address(ptr).c_str());
        return set_error(cudaErrorInvalidValue);
    }
    cudaError_t err = refuse_during_capture("cudaMemset");
    if (err != cudaSuccess) return set_error(err);
    count_op(OP_MEMSET, NULL);
    drain();
    open_device_memory(true);
    memset(ptr, value, bytes);
    open_device_memory(false);
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *ptr, int value, size_t bytes, cudaStream_t stream) {
    if (!is_device_range(ptr, bytes)) {
        explain("cudaMemsetAsync of %zu bytes at %s: not device memory", bytes,
                describe_address(ptr).c_str());
        return set_error(cudaErrorInvalidValue);
    }
    return set_error(enqueue(stream, OP_MEMSET, [ptr, value, bytes] { memset(ptr, value, bytes); }));
}

cudaError_t cudaStreamCreateWithPriority(cudaStream_t *stream, unsigned int flags, int priority) {
    std::lock_guard<std::recursive_mutex> lock(api_mutex);
    CUstream_st *s = new CUstream_st();
    s->index = (int)emu::streams.size();
    s->flags = flags;
    s->priority = priority;
    emu::streams.push_back(s);
    *stream = s;
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags) {
    return cudaStreamCreateWithPriority(stream, flags, 0);
}

cudaError_t cudaStreamCreate(cudaStream_t *stream) {
    return cudaStreamCreateWithPriority(stream, cudaStreamDefault, 0);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    std::lock_guard<std::recursive_mutex> lock(api_mutex);
    if (!stream || stream->capture) return set_error(cudaErrorInvalidResourceHandle);
    drain(); // its queued work still runs
    emu::streams.erase(std::find(emu::streams.begin(), emu::streams.end(), stream));
    delete stream;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    if (resolve(stream)->capture || (!stream && active_capture())) {
        explain(
            "cudaStreamSynchronize of a stream being captured: not permitted (the capture is invalidated)");
        invalidate_captures();
        return set_error(cudaErrorStreamCaptureUnsupported);
    }
    drain();
    return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
    CUstream_st *s = resolve(stream);
    if (s->capture) return set_error(cudaErrorStreamCaptureUnsupported);
    drain(true); // a poll must see progress: the queued work runs now, up to what waits on other ranks
    return s->queue.empty() ? cudaSuccess : cudaErrorNotReady;
}

static std::vector<void *> wait_sites;
static std::vector<uint64_t> wait_site_calls, wait_site_redundant;

// The site of the call is where the trainer calls it (this function is never inlined into it). With
// CUDA_EMU_DROP_WAIT_SITE=k, the waits made from the k-th distinct call site are left out: a test plants
// a missing cross-stream wait this way and shows that some stream order then changes the result.
__attribute__((noinline)) cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
                                                          unsigned int flags) {
    void *site = __builtin_return_address(0);
    std::lock_guard<std::recursive_mutex> lock(api_mutex);
    (void)flags;
    size_t index = std::find(wait_sites.begin(), wait_sites.end(), site) - wait_sites.begin();
    if (index == wait_sites.size())
        wait_sites.push_back(site), wait_site_calls.push_back(0), wait_site_redundant.push_back(0);
    wait_site_calls[index]++;
    if ((int)index + 1 == settings().drop_wait_site) return cudaSuccess;
    CUstream_st *s = resolve(stream);
    if (!event) return set_error(cudaErrorInvalidResourceHandle);
    if (!event->recorded) return cudaSuccess; // an event never recorded stands for no work
    if (event->capture) {
        Capture *c = event->capture;
        if (c->ended) {
            explain("cudaStreamWaitEvent on an event last recorded inside a capture that has ended");
            return set_error(cudaErrorCapturedEvent);
        }
        if (s->capture && s->capture != c) return set_error(cudaErrorStreamCaptureMerge);
        if (!s->capture) { // the stream joins the capture
            s->capture = c;
            s->tails.clear();
            c->streams.push_back(s);
        }
        for (int t : event->tails)
            if (std::find(s->tails.begin(), s->tails.end(), t) == s->tails.end()) s->tails.push_back(t);
        return cudaSuccess;
    }
    if (s->capture) {
        explain("cudaStreamWaitEvent in a capturing stream on an event recorded outside the capture: the "
                "dependency would cross the capture's boundary");
        s->capture->invalidated = true;
        return set_error(cudaErrorStreamCaptureIsolation);
    }
    const int t = event->stream->index;
    if ((size_t)t < s->clock.size() && s->clock[t] >= event->position) wait_site_redundant[index]++;
    merge_clock(s->clock, event->clock);
    s->pending.push_back({event->stream, event->position});
    return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
    std::lock_guard<std::recursive_mutex> lock(api_mutex);
    (void)mode; // one host thread: global and thread-local capture prohibit the same calls
    if (!stream) {
        explain("cudaStreamBeginCapture on the legacy default stream: not permitted");
        return set_error(cudaErrorStreamCaptureUnsupported);
    }
    if (stream->capture) return set_error(cudaErrorIllegalState);
    Capture *c = new Capture{new CUgraph_st(), stream, {stream}, false, false};
    captures.emplace_back(c);
    stream->capture = c;
    stream->tails.clear();
    return cudaSuccess;
}

// Node `node` and everything it depends on.
static void mark_ancestors(const CUgraph_st *g, int node, std::vector<char> &marked) {
    if (marked[node]) return;
    marked[node] = 1;
    for (int d : g->nodes[node].deps) mark_ancestors(g, d, marked);
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *graph) {
    std::lock_guard<std::recursive_mutex> lock(api_mutex);
    if (!stream || !stream->capture) return set_error(cudaErrorIllegalState);
    Capture *c = stream->capture;
    if (c->origin != stream) {
        explain("cudaStreamEndCapture on a stream that joined the capture, not the one that began it");
        return set_error(cudaErrorStreamCaptureUnmatched);
    }
    std::vector<char> joined(c->graph->nodes.size(), 0);
    for (int t : stream->tails) mark_ancestors(c->graph, t, joined);
    cudaError_t err = c->invalidated ? cudaErrorStreamCaptureInvalidated : cudaSuccess;
    for (CUstream_st *s : c->streams) {
        for (int t : s->tails)
            if (err == cudaSuccess && !joined[t]) {
                explain("cudaStreamEndCapture: stream %d's captured work is not joined back into the origin "
                        "stream "
                        "(record an event on it and wait for it there)",
                        s->index);
                err = cudaErrorStreamCaptureUnjoined;
            }
        s->capture = NULL;
        s->tails.clear();
    }
    c->ended = true;
    if (err != cudaSuccess) {
        delete c->graph;
        c->graph = NULL;
        *graph = NULL;
        return set_error(err);
    }
    *graph = c->graph;
    c->graph = NULL;
    return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus *status) {
    Capture *c = resolve(stream)->capture;
    *status = !c               ? cudaStreamCaptureStatusNone
              : c->invalidated ? cudaStreamCaptureStatusInvalidated
                               : cudaStreamCaptureStatusActive;
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags) {
    CUevent_st *e = new CUevent_st();
    e->flags = flags;
    *event = e;
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *event) {
    return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
    delete event;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
    std::lock_guard<std::recursive_mutex> lock(api_mutex);
    if (!event) return set_error(cudaErrorInvalidResourceHandle);
    CUstream_st *s = resolve(stream);
    if (s->capture) {
        event->recorded = true;
        event->capture = s->capture;
        event->tails = s->tails;
        return cudaSuccess;
    }
    uint64_t generation = ++event->generation;
    event->time_ms = -1.0;
    cudaError_t err = enqueue(stream, OP_EVENT, [event, generation] {
        if (event->generation == generation) event->time_ms = now_ms();
    });
    if (err != cudaSuccess) return set_error(err);
    event->recorded = true;
    event->capture = NULL;
    event->stream = s;
    event->position = s->enqueued;
    event->clock = s->clock;
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
    if (!event) return set_error(cudaErrorInvalidResourceHandle);
    if (event->capture) {
        explain("cudaEventSynchronize on an event last recorded in a capture");
        return set_error(cudaErrorCapturedEvent);
    }
    cudaError_t err = refuse_during_capture("cudaEventSynchronize");
    if (err != cudaSuccess) return set_error(err);
    drain();
    return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
    if (!event) return set_error(cudaErrorInvalidResourceHandle);
    if (event->capture) return set_error(cudaErrorCapturedEvent);
    cudaError_t err = refuse_during_capture("cudaEventQuery");
    if (err != cudaSuccess) return set_error(err);
    drain(true);
    return !event->recorded || event->stream->completed >= event->position ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
    if (!start || !end || (start->flags & cudaEventDisableTiming) || (end->flags & cudaEventDisableTiming))
        return set_error(cudaErrorInvalidResourceHandle);
    if (start->capture || end->capture) return set_error(cudaErrorCapturedEvent);
    if (start->time_ms < 0 || end->time_ms < 0) return set_error(cudaErrorNotReady);
    *ms = (float)(end->time_ms - start->time_ms);
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags) {
    (void)flags;
    if (!graph) return set_error(cudaErrorInvalidValue);
    CUgraphExec_st *e = new CUgraphExec_st();
    e->nodes = graph->nodes;
    *exec = e;
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
    delete graph;
    return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
    drain();
    delete exec;
    return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
    std::lock_guard<std::recursive_mutex> lock(api_mutex);
    if (!exec) return set_error(cudaErrorInvalidValue);
    if (resolve(stream)->capture) {
        explain("cudaGraphLaunch into a capturing stream: child graphs are not emulated");
        return set_error(cudaErrorNotSupported);
    }
    count_op(OP_GRAPH, exec);
    return set_error(enqueue(stream, OP_GRAPH, [exec] { run_graph(exec); }));
}

// =========================================================================================================
// 7. NVTX ranges and the end-of-run report (CUDA_EMU_REPORT=path: written when the process exits, "%p" in
// the path replaced by the process id). The work queued inside each outermost range is counted per name,
// so that a run reports, per optimizer step, its kernel launches, graph launches and the rest.

namespace emu {

struct RangeStats {
    uint64_t count = 0, kernels = 0, graphs = 0, graph_kernels = 0, copies = 0, memsets = 0, matmuls = 0,
             collectives = 0, executed = 0;
    uint64_t collective_bytes[4] = {0, 0, 0, 0}; // all-reduce, all-gather, reduce-scatter, broadcast: totals
};

static std::vector<std::string> range_stack;
static std::map<std::string, RangeStats> range_stats;

static void count_op(OpKind kind, const CUgraphExec_st *graph) {
    if (range_stack.empty()) return;
    RangeStats &r = range_stats[range_stack.front()];
    switch (kind) {
    case OP_KERNEL:
        r.kernels++;
        break;
    case OP_COPY:
        r.copies++;
        break;
    case OP_MEMSET:
        r.memsets++;
        break;
    case OP_MATMUL:
        r.matmuls++;
        break;
    case OP_COLLECTIVE:
        r.collectives++;
        break;
    case OP_GRAPH:
        if (!graph) break; // the launch itself, counted with its graph below
        r.graphs++;
        for (const GraphNode &n : graph->nodes) r.graph_kernels += n.kind == OP_KERNEL;
        break;
    case OP_EVENT:
        break;
    }
}

void count_collective_bytes(int kind, size_t bytes) {
    std::lock_guard<std::recursive_mutex> lock(api_mutex);
    if (!range_stack.empty()) range_stats[range_stack.front()].collective_bytes[kind] += bytes;
}

// A kernel runs (in a drain, on the host thread) inside the outermost range open then.
static void count_execution(void) {
    if (!range_stack.empty()) range_stats[range_stack.front()].executed++;
}

static void write_report(void) {
    const char *path = settings().report_path;
    if (!path || !*path) return;
    std::string name = path;
    size_t at = name.find("%p");
    if (at != std::string::npos) name.replace(at, 2, std::to_string(getpid()));
    FILE *f = fopen(name.c_str(), "w");
    if (!f) {
        explain("CUDA_EMU_REPORT=%s: cannot write the report", path);
        return;
    }
    fprintf(f, "device_memory_peak_bytes %zu\n", device_peak);
    fprintf(f, "device_allocations_peak %zu\n", device_peak_count);
    uint64_t total = 0;
    for (auto &k : kernels_executed) total += k.second;
    fprintf(f, "kernels_executed %llu\n", (unsigned long long)total);
    for (auto &entry : range_stats) {
        const RangeStats &r = entry.second;
        double n = r.count ? (double)r.count : 1.0;
        fprintf(f,
                "range %s count %llu kernel_launches_per_range %.1f graph_launches_per_range %.1f "
                "graph_kernels_per_range %.1f kernels_executed_per_range %.1f matmuls_per_range %.1f "
                "copies_per_range %.1f memsets_per_range %.1f collectives_per_range %.1f\n",
                entry.first.c_str(), (unsigned long long)r.count, r.kernels / n, r.graphs / n,
                r.graph_kernels / n, r.executed / n, r.matmuls / n, r.copies / n, r.memsets / n,
                r.collectives / n);
        fprintf(f,
                "range_collective_bytes %s count %llu all_reduce %llu all_gather %llu reduce_scatter %llu "
                "broadcast %llu\n",
                entry.first.c_str(), (unsigned long long)r.count, (unsigned long long)r.collective_bytes[0],
                (unsigned long long)r.collective_bytes[1], (unsigned long long)r.collective_bytes[2],
                (unsigned long long)r.collective_bytes[3]);
    }
    for (size_t i = 0; i < wait_sites.size(); i++)
        fprintf(f, "wait_site %zu calls %llu redundant %llu function %s\n", i + 1,
                (unsigned long long)wait_site_calls[i], (unsigned long long)wait_site_redundant[i],
                function_name(wait_sites[i]).c_str());
    for (auto &k : kernels_executed)
        fprintf(f, "kernel %s executed %llu\n", k.first.c_str(), (unsigned long long)k.second);
    fclose(f);
}

static struct ReportAtExit {
    ReportAtExit() {
        atexit(write_report);
    }
} report_at_exit;

} // namespace emu

int nvtxRangePushA(const char *message) {
    std::lock_guard<std::recursive_mutex> lock(api_mutex);
    if (range_stack.empty()) range_stats[message].count++;
    range_stack.push_back(message);
    return (int)range_stack.size() - 1;
}

int nvtxRangePop(void) {
    std::lock_guard<std::recursive_mutex> lock(api_mutex);
    if (range_stack.empty()) return -1;
    range_stack.pop_back();
    return (int)range_stack.size();
}

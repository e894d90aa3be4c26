// emu/threads.cpp: kernels. A block runs on one host thread as one fiber per CUDA thread, each on its own
// stack. A fiber runs until it reaches __syncthreads, a warp operation or its end, and then gives the host
// thread back to the block's scheduler, which runs the next runnable fiber (in thread order, or reversed).
// A barrier releases its threads when every thread of the block has reached the same one; a warp operation
// completes when every lane its mask names has reached the same one, with the same mask. Everything else a
// GPU leaves undefined there is an error: a thread that exits while others wait at a barrier, barriers at
// different places, a mask naming a lane that does not exist, has exited or is elsewhere, a lane reading
// from a lane outside the mask. The blocks of a launch are spread over the host threads.
//
// Provides execute_kernel (a launch that launch.cpp has checked, run when streams.cpp drains its queue),
// the device side of emu/cuda_runtime.h (block_barrier, warp_op, dynamic_shared_memory, current_thread),
// parallel_for for cublaslt.cpp and nccl.cpp, and the SIGSEGV and SIGBUS handler: it is here because it
// names the CUDA thread that faulted and tells an overflow of a fiber's stack, and it describes the
// allocation touched from memory.cpp's registry (memory.cpp installs it with the first allocation). The race
// checker (emu/racecheck.cpp) hears of each launch, block and barrier from here. x86-64 only: the fiber
// switch is assembly.
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime_internal.h"

namespace emu {

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
#error "emu/threads.cpp: the fiber switch is written for x86-64 only"
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

void execute_kernel(const KernelLaunch &k) {
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

void install_fault_handler(void) {
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
void install_fault_handler(void) {}
#endif

} // namespace emu

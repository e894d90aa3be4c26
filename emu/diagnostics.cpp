// emu/diagnostics.cpp: the emulator's settings and its lines on stderr (emu/runtime_internal.h lists the
// runtime's other files).
//  - settings(): the CUDA_EMU_* environment variables, read once, at the first call. A value that does not
//    parse is fatal rather than ignored, so that a misspelt order or schedule cannot leave a test running
//    in the default one it meant to change;
//  - fatal() and explain() (emu/emu.h): one line each on stderr, with the MPI rank when MPI is running.
//    fatal() also prints the random seeds in use, so that a failure in a random order can be run again,
//    and ends the process with _exit(3): no exit handler (the report among them) runs after an error.
//    Called from fibers and from the fault handler, it writes its line with one write(2);
//  - compute_capability() and process_rank() (emu/emu.h).
// Assumes nothing of the other files: every one of them calls into this one.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <thread>

#include "runtime_internal.h"

#ifdef USE_MPI
#include <mpi.h>
#endif

namespace emu {

// The devices CUDA_EMU_DEVICE names. Memory and limits are the H200's for all; what differs is the name and
// the compute capability, which picks cuBLASLt's modes and whether this binary has code for the device: an
// emulated program carries images for sm_90a and sm_100a, as `make train`'s default build does, so the L40S
// (sm_89) gets cudaErrorNoKernelImageForDevice from every launch, as such a build does on an Ada GPU.
static const EmulatedDevice EMULATED_DEVICES[] = {
    {"h200", "H200", 90, true}, {"b200", "B200", 100, true}, {"l40s", "L40S", 89, false}};

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

const Settings &settings(void) {
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

} // namespace emu

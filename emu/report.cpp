// emu/report.cpp: NVTX ranges and the end-of-run report (CUDA_EMU_REPORT=path: written when the process
// exits, "%p" in the path replaced by the process id). The work queued inside each outermost range is
// counted per name, so that a run reports, per optimizer step, its kernel launches, graph launches and the
// rest; and, for the run, peak device memory (memory.cpp), each kernel's executions (threads.cpp's
// execute_kernel) and each cudaStreamWaitEvent call site with the waits it made that were already implied
// (streams.cpp).
//
// The counters the report reads at exit are defined here, before report_at_exit, whatever file fills
// them: C++ orders the construction and destruction of statics only within one file, and they must still
// exist when write_report runs. Ranges are pushed and popped under streams.cpp's api_mutex, which also
// serialises the queue whose work they count.
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "nvtx3/nvToolsExt.h"
#include "runtime_internal.h"

namespace emu {

// Filled by threads.cpp's execute_kernel and streams.cpp's cudaStreamWaitEvent (whose call sites these
// number, for CUDA_EMU_DROP_WAIT_SITE too).
std::map<std::string, uint64_t> kernels_executed;
std::mutex kernel_stats_mutex;
std::vector<void *> wait_sites;
std::vector<uint64_t> wait_site_calls, wait_site_redundant;

struct RangeStats {
    uint64_t count = 0, kernels = 0, graphs = 0, graph_kernels = 0, copies = 0, memsets = 0, matmuls = 0,
             collectives = 0, executed = 0;
    uint64_t collective_bytes[4] = {0, 0, 0, 0}; // all-reduce, all-gather, reduce-scatter, broadcast: totals
};

static std::vector<std::string> range_stack;
static std::map<std::string, RangeStats> range_stats;

void count_op(OpKind kind, const CUgraphExec_st *graph) {
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
void count_execution(void) {
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

using namespace emu;

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

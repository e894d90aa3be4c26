// emu/streams.cpp: streams, events and graphs.
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
//
// Provides enqueue and op_waits (emu/emu.h: launch.cpp, cublaslt.cpp and nccl.cpp queue their work here),
// drain, and the runtime API's stream, event, graph, synchronisation and copy calls. Device memory is
// opened (memory.cpp) for as long as a drain runs queued work; a kernel's operation runs its blocks through
// threads.cpp; what is queued inside an NVTX range is counted by report.cpp.
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "runtime_internal.h"

namespace emu {

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

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

std::recursive_mutex api_mutex; // the runtime API is called from the host thread(s)
static CUstream_st legacy_stream;
static std::vector<CUstream_st *> streams = {&legacy_stream};
static std::vector<std::unique_ptr<Capture>> captures; // kept: events refer to them after they end
static uint64_t next_op_id = 1;
static uint64_t random_state = 0;
static bool draining = false;

// a = max(a, b), elementwise.
static void merge_clock(std::vector<uint64_t> &a, const std::vector<uint64_t> &b) {
    if (a.size() < b.size()) a.resize(b.size(), 0);
    for (size_t i = 0; i < b.size(); i++) a[i] = std::max(a[i], b[i]);
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
cudaError_t refuse_during_capture(const char *call) {
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
void drain(bool poll) {
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

cudaError_t cudaDeviceSynchronize(void) {
    cudaError_t err = refuse_during_capture("cudaDeviceSynchronize");
    if (err != cudaSuccess) return set_error(err);
    drain();
    return cudaSuccess;
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

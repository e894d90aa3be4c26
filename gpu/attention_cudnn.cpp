// gpu/attention_cudnn.cpp: the fast attention of gpu/attention.cuh, cuDNN's fused flash attention through
// the cudnn-frontend graph API (SDPA forward with softmax statistics, SDPA backward, both causal, BF16 in and
// out, FP32 inside). Host code only, compiled once by the host compiler (nvcc passes .cpp files to it) and
// linked into every build with cuDNN: the frontend's headers take minutes to compile.
//
// The graphs view our tensors in place, no copies: q (B,NH,T,HS), k and v (B,KVH,T,HS) are strided views of
// qkv (B,T,QKV), QKV = (NH + 2 KVH) HS, at column offsets 0, NH HS and (NH + KVH) HS; out, dout and dqkv
// likewise (GPT-2, KVH = NH: offsets 0, C and 2C of rows of 3C). Grouped-query attention (Llama, KVH < NH)
// is cuDNN's own: given k and v with fewer heads than q (NH a multiple of KVH, cudnn-frontend's rule), query
// head h reads key/value head h / (NH/KVH), as our exact kernels do, and the backward sums each group's dk
// and dv. The backward is cuDNN's deterministic one (no floating-point atomics across blocks), so that a run
// is reproducible bit for bit, as the project's resume tests require of every path.
#include <stdint.h>
#include <string.h>

#include <algorithm>
#include <array>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <cudnn_frontend.h>

#include "attention_cudnn.h"
#include "common.cuh" // fail

struct AttentionGraphs {
    cudnnHandle_t handle;
    std::shared_ptr<cudnn_frontend::graph::Graph> forward, backward;
    void *workspace;        // the caller's (the memory plan's), at least workspace_bytes
    size_t workspace_bytes; // the larger of the two plans' workspaces
    int NH, KVH, HS;        // the qkv rows' layout, for the columns of k and v (column_of)
};

namespace attention_impl {
namespace fe = cudnn_frontend;
using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

using TensorMap = std::unordered_map<int64_t, TensorPtr>; // the graph's tensors by uid (AttentionTensor)

// The column of its buffer's rows at which a tensor starts: k and v (and their gradients) lie after the NH
// query heads of a qkv (or dqkv) row, v after the KVH key heads.
static size_t column_of(int64_t uid, int NH, int KVH, int HS) {
    return uid == ATT_K || uid == ATT_DK   ? (size_t)NH * HS
           : uid == ATT_V || uid == ATT_DV ? (size_t)(NH + KVH) * HS
                                           : 0;
}

// The width of a qkv row: NH query heads, KVH key heads, KVH value heads.
static int qkv_width(int NH, int KVH, int HS) {
    return (NH + 2 * KVH) * HS;
}

// cuDNN's (B,heads,T,HS) view of a row-major (B,T,width) tensor whose head h starts at column h*HS: the
// strides, in elements, of b, h, t and d. q, k and v are such views of qkv at their columns (column_of).
static std::vector<int64_t> head_strides(int T, int width, int HS) {
    return {(int64_t)T * width, HS, width, 1};
}

static std::vector<int64_t> head_dims(int B, int heads, int T, int HS) {
    return {B, heads, T, HS};
}

static TensorPtr head_input(fe::graph::Graph &graph, TensorMap &tensors, const char *name, int64_t uid, int B,
                            int heads, int T, int HS, int width) {
    return tensors[uid] = graph.tensor(fe::graph::Tensor_attributes()
                                           .set_name(name)
                                           .set_uid(uid)
                                           .set_dim(head_dims(B, heads, T, HS))
                                           .set_stride(head_strides(T, width, HS)));
}

static void head_output(TensorMap &tensors, const TensorPtr &tensor, int64_t uid, int B, int heads, int T,
                        int HS, int width) {
    tensor->set_output(true)
        .set_uid(uid)
        .set_dim(head_dims(B, heads, T, HS))
        .set_stride(head_strides(T, width, HS));
    tensors[uid] = tensor;
}

// lse (B,NH,T) as cuDNN's Stats, (B,NH,T,1) FP32
static std::vector<int64_t> stats_dims(int B, int NH, int T) {
    return {B, NH, T, 1};
}
static std::vector<int64_t> stats_strides(int NH, int T) {
    return {(int64_t)NH * T, T, 1, 1};
}

// sm_version: the compute capability (90: Hopper) to build for; 0, the current device's.
static std::shared_ptr<fe::graph::Graph> new_graph(int sm_version) {
    auto graph = std::make_shared<fe::graph::Graph>();
    if (sm_version) graph->set_sm_version(sm_version);
    graph->set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    return graph;
}

// The first line of a cudnn-frontend error's message: the reason, for a one-line error or banner.
static std::string first_line(fe::error_t &status) {
    std::string message = status.get_message();
    return message.substr(0, message.find('\n'));
}

// "" when cuDNN built an execution plan for the graph, else its reason (first line).
static std::string build_graph(fe::graph::Graph &graph, cudnnHandle_t handle) {
    auto stage = [&](int i) -> fe::error_t {
        switch (i) {
        case 0:
            return graph.validate();
        case 1:
            return graph.build_operation_graph(handle);
        case 2:
            return graph.create_execution_plans({fe::HeurMode_t::A});
        case 3:
            return graph.check_support(handle);
        default:
            return graph.build_plans(handle);
        }
    };
    for (int i = 0; i < 5; i++) {
        fe::error_t status = stage(i);
        if (!status.is_good()) return first_line(status);
    }
    return "";
}

// q (B,NH,T,HS), k and v (B,KVH,T,HS): the views of qkv (B,T,QKV), inputs of both graphs.
static std::array<TensorPtr, 3> qkv_inputs(fe::graph::Graph &graph, TensorMap &tensors, int B, int T, int C,
                                           int NH, int KVH) {
    const int HS = C / NH, width = qkv_width(NH, KVH, HS);
    return {head_input(graph, tensors, "q", ATT_Q, B, NH, T, HS, width),
            head_input(graph, tensors, "k", ATT_K, B, KVH, T, HS, width),
            head_input(graph, tensors, "v", ATT_V, B, KVH, T, HS, width)};
}

// lse as cuDNN's softmax statistics: FP32 (B,NH,T,1), an output of the forward, an input of the backward.
static void stats_attributes(fe::graph::Tensor_attributes &stats, int B, int NH, int T) {
    stats.set_uid(ATT_STATS)
        .set_data_type(fe::DataType_t::FLOAT)
        .set_dim(stats_dims(B, NH, T))
        .set_stride(stats_strides(NH, T));
}

// out (B,T,C), lse (B,NH,T) <- qkv (B,T,QKV), causal, scores scaled by 1/sqrt(HS).
static std::shared_ptr<fe::graph::Graph> forward_graph(int B, int T, int C, int NH, int KVH, int sm_version,
                                                       TensorMap &tensors) {
    const int HS = C / NH;
    auto graph = new_graph(sm_version);
    auto [q, k, v] = qkv_inputs(*graph, tensors, B, T, C, NH, KVH);
    auto options = fe::graph::SDPA_attributes()
                       .set_name("attention_forward")
                       .set_generate_stats(true)
                       .set_causal_mask(true)
                       .set_attn_scale(1.0f / sqrtf((float)HS));
    auto [o, stats] = graph->sdpa(q, k, v, options);
    head_output(tensors, o, ATT_O, B, NH, T, HS, C);
    stats_attributes(stats->set_output(true), B, NH, T);
    tensors[ATT_STATS] = stats;
    return graph;
}

// dqkv (B,T,QKV) <- dout (B,T,C), qkv, out and lse of the forward; deterministic.
static std::shared_ptr<fe::graph::Graph> backward_graph(int B, int T, int C, int NH, int KVH, int sm_version,
                                                        TensorMap &tensors) {
    const int HS = C / NH, width = qkv_width(NH, KVH, HS);
    auto graph = new_graph(sm_version);
    auto [q, k, v] = qkv_inputs(*graph, tensors, B, T, C, NH, KVH);
    TensorPtr o = head_input(*graph, tensors, "o", ATT_O, B, NH, T, HS, C);
    TensorPtr dout = head_input(*graph, tensors, "dout", ATT_DOUT, B, NH, T, HS, C);
    fe::graph::Tensor_attributes lse;
    stats_attributes(lse.set_name("lse"), B, NH, T);
    TensorPtr stats = graph->tensor(lse);
    tensors[ATT_STATS] = stats;
    auto options = fe::graph::SDPA_backward_attributes()
                       .set_name("attention_backward")
                       .set_causal_mask(true)
                       .set_attn_scale(1.0f / sqrtf((float)HS))
                       .set_deterministic_algorithm(true);
    auto [dq, dk, dv] = graph->sdpa_backward(q, k, v, o, dout, stats, options);
    head_output(tensors, dq, ATT_DQ, B, NH, T, HS, width);
    head_output(tensors, dk, ATT_DK, B, KVH, T, HS, width);
    head_output(tensors, dv, ATT_DV, B, KVH, T, HS, width);
    return graph;
}

#define cudnn_check(call) cudnn_check_at((call), #call, __FILE__, __LINE__)
static void cudnn_check_at(cudnnStatus_t status, const char *what, const char *file, int line) {
    if (status != CUDNN_STATUS_SUCCESS)
        fail("cuDNN: %s: %s (%s:%d)", what, cudnnGetErrorString(status), file, line);
}

static void execute(const AttentionGraphs *graphs, const fe::graph::Graph &graph,
                    std::unordered_map<int64_t, void *> &pack, cudaStream_t stream) {
    cudnn_check(cudnnSetStream(graphs->handle, stream));
    fe::error_t status = graph.execute(graphs->handle, pack, graphs->workspace);
    if (!status.is_good()) fail("cuDNN attention: %s", status.get_message().c_str());
}
} // namespace attention_impl

AttentionGraphs *cudnn_attention_create(int B, int T, int C, int NH, int KVH, void *workspace,
                                        size_t workspace_bytes, char *why, size_t why_size) {
    using namespace attention_impl;
    AttentionGraphs *graphs = new AttentionGraphs();
    graphs->NH = NH, graphs->KVH = KVH, graphs->HS = C / NH;
    TensorMap tensors;
    cudnn_check(cudnnCreate(&graphs->handle));
    graphs->forward = forward_graph(B, T, C, NH, KVH, 0, tensors);
    graphs->backward = backward_graph(B, T, C, NH, KVH, 0, tensors);
    std::string reason = build_graph(*graphs->forward, graphs->handle);
    if (reason.empty()) reason = build_graph(*graphs->backward, graphs->handle);
    int64_t forward_bytes = 0, backward_bytes = 0;
    if (reason.empty() && (!graphs->forward->get_workspace_size(forward_bytes).is_good() ||
                           !graphs->backward->get_workspace_size(backward_bytes).is_good()))
        reason = "no workspace size for its plans";
    graphs->workspace = workspace;
    graphs->workspace_bytes = (size_t)std::max(forward_bytes, backward_bytes);
    if (reason.empty() && graphs->workspace_bytes > workspace_bytes)
        reason = "its plans need a " + std::to_string(graphs->workspace_bytes) + "-byte workspace, the " +
                 "memory plan holds " + std::to_string(workspace_bytes) + " (attention_workspace_bytes)";
    if (!reason.empty()) {
        snprintf(why, why_size, "%s", reason.c_str());
        cudnnDestroy(graphs->handle);
        delete graphs;
        return NULL;
    }
    return graphs;
}

int cudnn_attention_validate(int B, int T, int C, int NH, int KVH, int sm_version, char *why,
                             size_t why_size) {
    using namespace attention_impl;
    TensorMap tensors;
    const std::shared_ptr<fe::graph::Graph> graphs[2] = {
        forward_graph(B, T, C, NH, KVH, sm_version, tensors),
        backward_graph(B, T, C, NH, KVH, sm_version, tensors)};
    for (const auto &graph : graphs) {
        fe::error_t status = graph->validate();
        if (!status.is_good()) {
            snprintf(why, why_size, "%s", first_line(status).c_str());
            return 0;
        }
    }
    return 1;
}

void cudnn_attention_destroy(AttentionGraphs *graphs) {
    cudnnDestroy(graphs->handle);
    delete graphs;
}

size_t cudnn_attention_workspace_bytes(const AttentionGraphs *graphs) {
    return graphs->workspace_bytes;
}

const char *cudnn_attention_version(void) {
    static char text[160];
    const size_t version = cudnnGetVersion(); // major * 10000 + minor * 100 + patch since cuDNN 9
    char frontend[32];
    snprintf(frontend, sizeof frontend, "%d.%d.%d", CUDNN_FRONTEND_MAJOR_VERSION,
             CUDNN_FRONTEND_MINOR_VERSION, CUDNN_FRONTEND_PATCH_VERSION);
    const int tested = strcmp(frontend, CUDNN_FRONTEND_TESTED) == 0;
    snprintf(text, sizeof text, "%zu.%zu.%zu, frontend %s%s", version / 10000, version / 100 % 100,
             version % 100, frontend,
             tested ? "" : " (not " CUDNN_FRONTEND_TESTED ", whose workspace formula the plan has)");
    return text;
}

// The variant pack: each tensor's device pointer, its buffer's base moved to the tensor's column (BF16
// elements are 2 bytes; lse starts at its base).
static std::unordered_map<int64_t, void *>
variant_pack(const AttentionGraphs *graphs, const std::vector<std::pair<int64_t, const void *>> &bases) {
    std::unordered_map<int64_t, void *> pack;
    for (const auto &[uid, base] : bases)
        pack[uid] = (void *)((const uint16_t *)base +
                             attention_impl::column_of(uid, graphs->NH, graphs->KVH, graphs->HS));
    return pack;
}

void cudnn_attention_forward(const AttentionGraphs *graphs, void *out, float *lse, const void *qkv,
                             cudaStream_t stream) {
    auto pack =
        variant_pack(graphs, {{ATT_Q, qkv}, {ATT_K, qkv}, {ATT_V, qkv}, {ATT_O, out}, {ATT_STATS, lse}});
    attention_impl::execute(graphs, *graphs->forward, pack, stream);
}

void cudnn_attention_backward(const AttentionGraphs *graphs, void *dqkv, const void *dout, const void *qkv,
                              const void *out, const float *lse, cudaStream_t stream) {
    auto pack = variant_pack(graphs, {{ATT_Q, qkv},
                                      {ATT_K, qkv},
                                      {ATT_V, qkv},
                                      {ATT_O, out},
                                      {ATT_DOUT, dout},
                                      {ATT_STATS, lse},
                                      {ATT_DQ, dqkv},
                                      {ATT_DK, dqkv},
                                      {ATT_DV, dqkv}});
    attention_impl::execute(graphs, *graphs->backward, pack, stream);
}

int cudnn_attention_layout(int B, int T, int C, int NH, int KVH, int tensor, int64_t dims[4],
                           int64_t strides[4], size_t *column) {
    using namespace attention_impl;
    TensorMap tensors;
    forward_graph(B, T, C, NH, KVH, 90, tensors);
    backward_graph(B, T, C, NH, KVH, 90, tensors);
    auto found = tensors.find(tensor);
    if (found == tensors.end()) return 0;
    const std::vector<int64_t> &d = found->second->get_dim(), &s = found->second->get_stride();
    if (d.size() != 4 || s.size() != 4) return 0;
    for (int i = 0; i < 4; i++) dims[i] = d[i], strides[i] = s[i];
    *column = column_of(tensor, NH, KVH, C / NH);
    return 1;
}

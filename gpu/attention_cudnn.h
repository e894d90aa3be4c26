// gpu/attention_cudnn.h: the fast attention's cuDNN graphs (gpu/attention_cudnn.cpp), as gpu/attention.cuh
// calls them. Defined only in builds with cuDNN (USE_CUDNN); the type is declared in every build, so that
// gpu/attention.cuh's Attention is one struct everywhere.
#ifndef GPU_ATTENTION_CUDNN_H
#define GPU_ATTENTION_CUDNN_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

// The versions this code was built and checked with: memory_plan.h's attention_workspace_bytes reads this
// cudnn-frontend's SDPA backward, and scripts/cudnn_deps.sh fetches these two (it reads them here).
#define CUDNN_FRONTEND_TESTED "1.32.0"
#define CUDNN_WHEEL_TESTED "9.28.1.4"

struct AttentionGraphs; // cuDNN's handle, the forward and backward graphs and the workspace they run in

// The graphs' tensors (their uids in cuDNN's variant packs).
enum AttentionTensor { ATT_Q = 1, ATT_K, ATT_V, ATT_O, ATT_STATS, ATT_DOUT, ATT_DQ, ATT_DK, ATT_DV };

// Builds the graphs for causal attention over qkv (B,T,QKV) with NH query heads sharing KVH key/value heads
// (gpu/attention.cuh's layout; GPT-2: KVH = NH) on the current device, to run in workspace (workspace_bytes
// of device memory the caller owns: the memory plan's, memory_plan.h's attention_workspace_bytes). NULL when
// cuDNN has no plan for them or its plans need a larger workspace, with the reason (one line) in why.
AttentionGraphs *cudnn_attention_create(int B, int T, int C, int NH, int KVH, void *workspace,
                                        size_t workspace_bytes, char *why, size_t why_size);
void cudnn_attention_destroy(AttentionGraphs *graphs);
// The same graphs checked against cudnn-frontend's support rules for compute capability sm_version (90:
// Hopper, 100: Blackwell) and this cuDNN version, without a device: validation only, no plan is built. 1 when
// valid, else 0 with the reason in why. (test/test_cudnn_graphs.cpp runs it in CI, which has no GPU.)
int cudnn_attention_validate(int B, int T, int C, int NH, int KVH, int sm_version, char *why,
                             size_t why_size);
// How the graphs view a tensor (AttentionTensor) in its buffer: the dims and strides (in elements) of the
// tensor attributes the graphs were given, and the column of the buffer's rows at which the execute calls
// point cuDNN. 0 for an unknown tensor. (test/test_cudnn_graphs.cpp checks them against the layouts.)
int cudnn_attention_layout(int B, int T, int C, int NH, int KVH, int tensor, int64_t dims[4],
                           int64_t strides[4], size_t *column);
size_t cudnn_attention_workspace_bytes(const AttentionGraphs *graphs); // what the plans asked for
// "9.28.1, frontend 1.32.0": the library loaded (not the headers') and the frontend compiled in, with a note
// where the frontend is not CUDNN_FRONTEND_TESTED (the workspace formula may then be short: the plans are
// still checked against it at start, cudnn_attention_create)
const char *cudnn_attention_version(void);

// The layouts of gpu/attention.cuh's attention_forward and attention_backward; BF16 data as raw pointers.
// out (B,T,C), lse (B,NH,T) <- qkv (B,T,QKV)
void cudnn_attention_forward(const AttentionGraphs *graphs, void *out, float *lse, const void *qkv,
                             cudaStream_t stream);
// dqkv (B,T,QKV) <- dout (B,T,C), qkv, out, lse
void cudnn_attention_backward(const AttentionGraphs *graphs, void *dqkv, const void *dout, const void *qkv,
                              const void *out, const float *lse, cudaStream_t stream);

#endif // GPU_ATTENTION_CUDNN_H

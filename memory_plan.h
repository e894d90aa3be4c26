// memory_plan.h: every device buffer the CUDA trainer allocates, with its size, as plain C. The trainer
// carves its allocations from this table, so the plan printed or tested without a GPU is exactly what
// a GPU run allocates. Also the FP8 GEMM shape rules, so a shape cuBLASLt cannot take is refused with a
// clear error before any allocation.
#ifndef MEMORY_PLAN_H
#define MEMORY_PLAN_H

#include <stddef.h>
#include <stdio.h>

#include "cli.h"
#include "gpt_model.h"

#define PLAN_ALIGN 256 // every buffer starts at a multiple of 256 bytes (cuBLASLt wants 16)

typedef enum {
    // parameters and optimizer state
    BUF_PARAMS,
    BUF_GRADS,
    BUF_ADAM_M,
    BUF_ADAM_V,
    BUF_PARAMS_BF16,
    BUF_WEIGHTS_FP8,
    BUF_WEIGHTS_FP8_T,
    // activations kept for the backward
    BUF_ENCODED,
    BUF_RESIDUAL2,
    BUF_RESIDUAL3,
    BUF_LN1_STATS,
    BUF_LN2_STATS,
    BUF_QKV,
    BUF_ATT_LSE,
    BUF_FCH,
    BUF_LN1,
    BUF_ATTY,
    BUF_LN2,
    BUF_FCH_GELU,    // bfloat16: per layer (GEMM inputs); float8: one layer of scratch
    BUF_INPUT_FP8_T, // float8: every linear's input, transposed, E4M3, per layer
    BUF_LNF,
    BUF_LNF_STATS,
    BUF_LOGITS,
    BUF_LOSSES,
    // scratch of one layer's backward
    BUF_DRESIDUAL,
    BUF_DC,
    BUF_DQKV,
    BUF_DFCH,
    BUF_ATT_DELTA,
    BUF_CAST_FP8,
    BUF_CAST_FP8_T,
    BUF_REDUCE_SCRATCH,
    // FP8 scaling state and small per-step values
    BUF_FP8_STATE,
    BUF_STEP,
    BUF_TOKENS,
    BUF_GEMM_WORKSPACE,
    NUM_BUFFERS
} BufferId;

static const char *const BUFFER_NAMES[NUM_BUFFERS] = {
    "params_fp32", "grads_fp32",  "adam_m",        "adam_v",
    "params_bf16", "weights_fp8", "weights_fp8_t", "encoded",
    "residual2",   "residual3",   "ln1_stats",     "ln2_stats",
    "qkv",         "att_lse",     "fch",           "ln1",
    "atty",        "ln2",         "fch_gelu",      "inputs_fp8_t",
    "lnf",         "lnf_stats",   "logits",        "losses",
    "dresidual",   "dc",          "dqkv",          "dfch",
    "att_delta",   "cast_fp8",    "cast_fp8_t",    "reduce_scratch",
    "fp8_state",   "step_state",  "tokens",        "gemm_workspace",
};

typedef struct {
    size_t bytes[NUM_BUFFERS];
    size_t offset[NUM_BUFFERS]; // in one allocation, each aligned to PLAN_ALIGN
    size_t total;
} MemoryPlan;

#define GEMM_WORKSPACE_BYTES ((size_t)32 << 20)
// Scratch of the deterministic two-stage reductions (gpu/layers.cuh): per 128-row chunk of the batch,
// a partial sum per column (LayerNorm weight and bias gradients: 2C, bias gradients: up to 4C), or
// one double per block (at most 1024) of the gradient norm. The trainer checks each kernel's own
// *_scratch_floats against this at start-up.
static inline size_t reduce_scratch_floats(const GPTConfig *cfg, int B, int T) {
    size_t chunks = ((size_t)B * T + 127) / 128;
    return chunks * 4 * (size_t)cfg->channels + 2 * 1024;
}

// Elements of the four linear weights of one layer: 3C^2 + C^2 + 4C^2 + 4C^2.
static inline size_t linear_weights_per_layer(const GPTConfig *cfg) {
    return 12 * (size_t)cfg->channels * cfg->channels;
}

// Floats of the FP8 scaling state (gpu/fp8.cuh's Fp8DeviceState): per (layer, linear, role) a history,
// an amax, a scale, its inverse, the amax being measured and the last step's amax; per (layer, linear)
// the weight amax, scale and inverse; then, 8-byte aligned, two 64-bit telemetry counters per tensor
// and per weight.
static inline size_t fp8_state_floats(const GPTConfig *cfg, int history_len) {
    size_t tensors = (size_t)cfg->num_layers * NUM_BLOCK_LINEARS * 2;
    size_t weights = (size_t)cfg->num_layers * NUM_BLOCK_LINEARS;
    return tensors * ((size_t)history_len + 5) + weights * 3 + (tensors % 2) + (tensors + weights) * 4;
}

static inline void memory_plan_compute(MemoryPlan *plan, const GPTConfig *cfg, int dtype, int B, int T,
                                       int history_len) {
    size_t P = param_count(cfg), L = cfg->num_layers, C = cfg->channels, NH = cfg->num_heads;
    size_t N = (size_t)B * T, Vp = cfg->padded_vocab_size, bf = 2, f32 = 4;
    int fp8 = dtype == DTYPE_FLOAT8;
    size_t gemm_input_layers = fp8 ? 1 : L; // float8 keeps the GEMM inputs as FP8 transposes instead
    size_t *b = plan->bytes;
    b[BUF_PARAMS] = P * f32;
    b[BUF_GRADS] = P * f32;
    b[BUF_ADAM_M] = P * f32;
    b[BUF_ADAM_V] = P * f32;
    b[BUF_PARAMS_BF16] = P * bf;
    b[BUF_WEIGHTS_FP8] = fp8 ? L * linear_weights_per_layer(cfg) : 0;
    b[BUF_WEIGHTS_FP8_T] = fp8 ? L * linear_weights_per_layer(cfg) : 0;
    b[BUF_ENCODED] = N * C * bf;
    b[BUF_RESIDUAL2] = L * N * C * bf;
    b[BUF_RESIDUAL3] = L * N * C * bf;
    b[BUF_LN1_STATS] = L * N * 2 * f32;
    b[BUF_LN2_STATS] = L * N * 2 * f32;
    b[BUF_QKV] = L * N * 3 * C * bf;
    b[BUF_ATT_LSE] = L * N * NH * f32;
    b[BUF_FCH] = L * N * 4 * C * bf;
    b[BUF_LN1] = gemm_input_layers * N * C * bf;
    b[BUF_ATTY] = gemm_input_layers * N * C * bf;
    b[BUF_LN2] = gemm_input_layers * N * C * bf;
    b[BUF_FCH_GELU] = gemm_input_layers * N * 4 * C * bf;
    b[BUF_INPUT_FP8_T] = fp8 ? L * N * 7 * C : 0; // C (qkv) + C (attproj) + C (fc) + 4C (fcproj)
    b[BUF_LNF] = N * C * bf;
    b[BUF_LNF_STATS] = N * 2 * f32;
    b[BUF_LOGITS] = N * Vp * bf;
    b[BUF_LOSSES] = N * f32;
    b[BUF_DRESIDUAL] = N * C * bf;
    b[BUF_DC] = N * C * bf;
    b[BUF_DQKV] = N * 3 * C * bf;
    b[BUF_DFCH] = N * 4 * C * bf;
    b[BUF_ATT_DELTA] = N * NH * f32;
    b[BUF_CAST_FP8] = fp8 ? N * 4 * C : 0;
    b[BUF_CAST_FP8_T] = fp8 ? N * 4 * C : 0;
    b[BUF_REDUCE_SCRATCH] = reduce_scratch_floats(cfg, B, T) * f32;
    b[BUF_FP8_STATE] = fp8_state_floats(cfg, history_len) * f32;
    b[BUF_STEP] = 2 * PLAN_ALIGN; // StepParams, then StepResults at +PLAN_ALIGN (both well under 256 bytes)
    b[BUF_TOKENS] = (5 * N + 2) * sizeof(int); // inputs, targets, embedding-gradient buckets and their count
    b[BUF_GEMM_WORKSPACE] = GEMM_WORKSPACE_BYTES;
    size_t offset = 0;
    for (int i = 0; i < NUM_BUFFERS; i++) {
        plan->offset[i] = offset;
        offset += (b[i] + PLAN_ALIGN - 1) / PLAN_ALIGN * PLAN_ALIGN;
    }
    plan->total = offset;
}

// Every FP8 GEMM of a training step for this model and micro-batch, checked before anything runs; the
// error names what to change. On Hopper and Ada, cuBLASLt's FP8 GEMMs need K-major operands whose
// sizes and leading dimensions are multiples of 16 elements: every dimension here is a multiple of C
// or of B*T.
static inline void check_fp8_shapes(const GPTConfig *cfg, int B, int T) {
    long N = (long)B * T, C = cfg->channels;
    if (C % 16) fail("--channels: %ld is not a multiple of 16, which FP8 GEMMs need", C);
    if (N % 16)
        fail("--batch_size x --seq_len = %ld tokens is not a multiple of 16, which FP8 GEMMs need", N);
}

#endif // MEMORY_PLAN_H

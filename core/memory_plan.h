// core/memory_plan.h: every device buffer the CUDA trainer allocates, with its size, as plain C. The trainer
// carves its allocations from this table, so the plan printed or tested without a GPU is exactly what
// a GPU run allocates. Also the FP8 GEMM shape rules, so a shape cuBLASLt cannot take is refused with a
// clear error before any allocation.
// One set of formulas serves both architectures, from gpt_model.h's shapes (qkv QKV features, fc 4C or
// Llama's 2F, the MLP's hidden F). A Llama plan is the plan of buffers laid out as GPT-2's are, at Llama's
// shapes, plus what Llama alone needs (the RoPE table).
#ifndef MEMORY_PLAN_H
#define MEMORY_PLAN_H

#include <stddef.h>
#include <stdio.h>

#include "cli.h"
#include "dist.h"
#include "gpt_model.h"

#define PLAN_ALIGN 256 // every buffer starts at a multiple of 256 bytes (cuBLASLt wants 16)

// One entry per device buffer, in allocation order. What each holds depends on the ZeRO stage (see
// memory_plan_compute): with ZeRO-1/3 the FP32 master weights and moments are this rank's shard
// (dist.h), with ZeRO-3 the gathered weights and unit gradients are a few units' worth.
typedef enum {
    // parameters and optimizer state
    BUF_PARAMS,
    BUF_GRADS,
    BUF_GRAD_SHARD,
    BUF_GRAD_BF16, // --grad_reduce_dtype bfloat16: what NCCL sums, a piece of the gradients at a time
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
    BUF_FCH_GELU,    // the MLP's hidden activation (GELU's or SwiGLU's output); bfloat16: per layer (GEMM
                     // inputs); float8: one layer of scratch
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
    BUF_FP8_BLOCK_SCALES, // block recipes: the block factors of every FP8 operand, the scale telemetry
    BUF_STEP,
    BUF_TOKENS,
    BUF_ATTENTION_WORKSPACE, // cuDNN's fused attention (empty for the exact kernels)
    BUF_ROPE_TABLE,          // Llama: the rotary embeddings' cos and sin
    BUF_GEMM_WORKSPACE,
    NUM_BUFFERS
} BufferId;

static const char *const BUFFER_NAMES[NUM_BUFFERS] = {
    "params_fp32",      "grads_fp32",   "grad_shard",  "grads_bf16",     "adam_m",
    "adam_v",           "params_bf16",  "weights_fp8", "weights_fp8_t",  "encoded",
    "residual2",        "residual3",    "ln1_stats",   "ln2_stats",      "qkv",
    "att_lse",          "fch",          "ln1",         "atty",           "ln2",
    "fch_gelu",         "inputs_fp8_t", "lnf",         "lnf_stats",      "logits",
    "losses",           "dresidual",    "dc",          "dqkv",           "dfch",
    "att_delta",        "cast_fp8",     "cast_fp8_t",  "reduce_scratch", "fp8_state",
    "fp8_block_scales", "step_state",   "tokens",      "attn_workspace", "rope_table",
    "gemm_workspace"};

// What --dry_run groups the buffers into.
typedef enum {
    PLAN_MASTER_WEIGHTS,
    PLAN_GRADIENTS,
    PLAN_MOMENTS,
    PLAN_COMPUTE_WEIGHTS,
    PLAN_ACTIVATIONS,
    PLAN_BACKWARD_SCRATCH,
    PLAN_FP8_STATE,
    PLAN_WORKSPACE,
    NUM_PLAN_GROUPS
} PlanGroup;

static const char *const PLAN_GROUP_NAMES[NUM_PLAN_GROUPS] = {
    "master weights fp32", "gradients fp32",   "adamw moments",     "compute weights bf16/fp8",
    "activations",         "backward scratch", "fp8 scaling state", "workspaces and batch",
};

static inline PlanGroup buffer_group(BufferId id) {
    switch (id) {
    case BUF_PARAMS:
        return PLAN_MASTER_WEIGHTS;
    case BUF_GRADS:
    case BUF_GRAD_SHARD:
    case BUF_GRAD_BF16:
        return PLAN_GRADIENTS;
    case BUF_ADAM_M:
    case BUF_ADAM_V:
        return PLAN_MOMENTS;
    case BUF_PARAMS_BF16:
    case BUF_WEIGHTS_FP8:
    case BUF_WEIGHTS_FP8_T:
        return PLAN_COMPUTE_WEIGHTS;
    case BUF_DRESIDUAL:
    case BUF_DC:
    case BUF_DQKV:
    case BUF_DFCH:
    case BUF_ATT_DELTA:
    case BUF_CAST_FP8:
    case BUF_CAST_FP8_T:
    case BUF_REDUCE_SCRATCH:
        return PLAN_BACKWARD_SCRATCH;
    case BUF_FP8_STATE:
    case BUF_FP8_BLOCK_SCALES:
        return PLAN_FP8_STATE;
    case BUF_STEP:
    case BUF_TOKENS:
    case BUF_ATTENTION_WORKSPACE:
    case BUF_ROPE_TABLE:
    case BUF_GEMM_WORKSPACE:
        return PLAN_WORKSPACE;
    default:
        return PLAN_ACTIVATIONS;
    }
}

// Memory a process uses outside the plan's single allocation, reserved on top of it by --dry_run and by the
// trainer's start-up check (gpt_alloc refuses a plan that leaves less free). Why 2 GiB:
//   - the CUDA context, about 0.5 GiB on Hopper (the runtime and the kernel images of this program and of
//     cuBLASLt); with lazy module loading (CUDA_MODULE_LOADING=LAZY, CUDA 12.2's default) each kernel's
//     image is loaded at its first launch, after the start-up check: the context's share covers them there;
//   - NCCL's communication buffers, allocated at a communicator's first collectives: NCCL_BUFFSIZE (4 MiB)
//     for each channel (up to 32 on NVLink/InfiniBand machines) and each peer of the ring and the tree (2 to
//     4), 0.5 to 0.75 GiB for a communicator at most, and shard groups add two communicators whose
//     channels connect fewer peers;
//   - cuDNN's handle and the fused attention's plans (their workspace is in the plan), and the kernels
//     NVRTC compiles for them: tens of MiB; cuBLASLt's handle and heuristics cache: small (its workspace is
//     in the plan).
// 2 GiB covers these with headroom; the plan itself is one cudaMalloc, so there is no fragmentation.
#define RUNTIME_RESERVE_BYTES ((size_t)2 << 30)

// What a plan depends on beyond the model.
typedef struct {
    int dtype, B, T, history_len;
    int world_size, zero_stage, recompute;
    int fp8_recipe;
    int shard_group;    // --shard_group_size: the ranks a shard spans (0: all of world_size)
    int keep_gathered;  // --keep_gathered: ZeRO-3's gathered weights in a slot a layer instead of two
    int fast_attention; // cuDNN's fused attention: its workspace in the plan (plan_fast_attention)
    int grad_bf16;      // --grad_reduce_dtype bfloat16: the gradients summed over the ranks in BF16
} PlanSettings;

static inline PlanSettings plan_settings_from_options(const TrainOptions *opts, int B, int T,
                                                      int world_size) {
    PlanSettings s = {opts->dtype,
                      B,
                      T,
                      opts->amax_history,
                      world_size,
                      opts->zero_stage,
                      opts->recompute,
                      opts->fp8_recipe,
                      opts->shard_group_size,
                      opts->keep_gathered,
                      plan_fast_attention(opts->attention),
                      opts->grad_reduce_dtype == GRAD_REDUCE_BFLOAT16};
    return s;
}

// The ranks the ZeRO layout shards over.
static inline int plan_shard_ranks(const PlanSettings *s) {
    return s->shard_group ? s->shard_group : s->world_size;
}

typedef struct {
    PlanSettings settings;
    size_t bytes[NUM_BUFFERS];
    size_t offset[NUM_BUFFERS]; // in one allocation, each aligned to PLAN_ALIGN
    size_t total;
} MemoryPlan;

#define GEMM_WORKSPACE_BYTES ((size_t)32 << 20)

// Bytes of the workspace cuDNN's fused attention runs in (gpu/attention_cudnn.cpp: one buffer for its
// forward and its deterministic backward, the larger of the two), from cudnn-frontend 1.32.0's
// include/cudnn_frontend/node/scaled_dot_product_flash_attention.h, CompositeSDPABackwardNode:
//   - set_deterministic_algorithm(true) forces the dP-workspace decomposition (use_dp_workspace, lines
//     1842-1849; Hopper's ordered-dQ engine, whose workspace is linear in T, serves it only where the
//     environment variable CUDNN_FRONTEND_ATTN_DP_WORKSPACE_LIMIT opts in, lines 1808-1840: this project
//     does not set it). The frontend sizes the dP workspace, which the cuDNN engine holds, at
//     b * h_q * round_up(s_q, 64) * round_up(s_kv, 128) * 2 bytes (lines 1831-1834; lines 1794-1796 round
//     s_kv to 64 only): quadratic in T, 384 MiB for GPT-2 124M at B=16, T=1024, 4 GiB for Llama 3 8B at B=1,
//     T=8192 (32 query heads);
//   - the frontend's own workspace, ahead of the engine's (get_fe_workspace_size_node, lines 2379-2393):
//     softmax_sum, b * h_q * s_q FP32 (line 1935); dQ_accum only without dP (line 2280); dK and dV over all
//     query heads (grouped-query attention) only in ragged layouts (lines 2140, 2253), which ours are not.
//     (Nor the padding-mask workaround's 8 bytes a sequence, lines 2388-2390: no padding mask here.)
// The forward's frontend workspace is alibi's slopes only (SDPANodeBase, lines 620-628): none here. The
// engines' own workspaces (the cuDNN library's, beyond the frontend's formula) cannot be derived without a
// GPU: not counted; cudnn_attention_create compares what its built plans ask for with this and refuses more.
static inline size_t attention_workspace_bytes(int B, int T, int NH) {
    size_t b = (size_t)B, h = (size_t)NH, s = (size_t)T;
    size_t dp = b * h * ((s + 63) / 64 * 64) * ((s + 127) / 128 * 128) * 2, softmax_sum = b * h * s * 4;
    return dp + softmax_sum;
}

// Sums over the block's four linears (qkv, attproj, fc, fcproj), from gpt_model.h's shapes.
// Elements of their weights: GPT-2 3C^2 + C^2 + 4C^2 + 4C^2 = 12C^2, Llama (QKV + C + 2F) C + F C.
static inline size_t linear_weights_per_layer(const GPTConfig *cfg) {
    size_t n = 0;
    for (int lin = 0; lin < NUM_BLOCK_LINEARS; lin++) n += linear_weight_size(cfg, lin);
    return n;
}

// Features of their inputs: GPT-2 C + C + C + 4C = 7C, Llama C + C + C + F.
static inline size_t linear_input_features_sum(const GPTConfig *cfg) {
    size_t n = 0;
    for (int lin = 0; lin < NUM_BLOCK_LINEARS; lin++) n += linear_in_features(cfg, lin);
    return n;
}

// Features of their outputs: GPT-2 3C + C + 4C + C = 9C, Llama QKV + C + 2F + C.
static inline size_t linear_output_features_sum(const GPTConfig *cfg) {
    size_t n = 0;
    for (int lin = 0; lin < NUM_BLOCK_LINEARS; lin++) n += linear_out_features(cfg, lin);
    return n;
}

// Features of their biases (the tensor after each weight): GPT-2 the 9C above, Llama none.
static inline size_t linear_bias_features_sum(const GPTConfig *cfg) {
    size_t n = 0;
    for (int lin = 0; lin < NUM_BLOCK_LINEARS; lin++)
        n += param_tensor_size(cfg, linear_weight_tensor(lin) + 1);
    return n;
}

// Floats per token a norm keeps for its backward: LayerNorm's mean and 1/std, RMSNorm's 1/rms.
static inline size_t norm_stats_floats(const GPTConfig *cfg) {
    return model_parts(cfg).norm == NORM_RMSNORM ? 1 : 2;
}

// Scratch of the deterministic two-stage reductions (gpu/reductions.cuh): per 128-row chunk of the batch,
// a partial sum per column of the widest per-column gradient (a norm's weight and bias gradients: GPT-2's
// LayerNorm 2C, Llama's RMSNorm C; a bias gradient: GPT-2 up to 4C, Llama none), or one double per block
// (at most 1024) of the gradient norm. The trainer checks each kernel's own *_scratch_floats against this
// at start-up.
static inline size_t reduce_scratch_floats(const GPTConfig *cfg, int B, int T) {
    size_t chunks = ((size_t)B * T + 127) / 128;
    size_t columns = param_tensor_size(cfg, PT_ATTN_NORM_W) + param_tensor_size(cfg, PT_ATTN_NORM_B);
    for (int lin = 0; lin < NUM_BLOCK_LINEARS; lin++) {
        size_t bias = param_tensor_size(cfg, linear_weight_tensor(lin) + 1);
        if (bias > columns) columns = bias;
    }
    return chunks * columns + 2 * 1024;
}

// Floats of the FP8 scaling state (gpu/fp8_state.cuh's Fp8DeviceState): per (layer, linear, role) a history,
// an amax, a scale, its inverse, the amax being measured and the last step's amax and scale; per (layer,
// linear) the weight amax, scale and inverse; then, 8-byte aligned, two 64-bit telemetry counters per tensor
// and per weight.
static inline size_t fp8_state_floats(const GPTConfig *cfg, int history_len) {
    size_t tensors = (size_t)cfg->num_layers * NUM_BLOCK_LINEARS * 2;
    size_t weights = (size_t)cfg->num_layers * NUM_BLOCK_LINEARS;
    return tensors * ((size_t)history_len + 6) + weights * 3 + (tensors % 2) + (tensors + weights) * 4;
}

// The block recipes' factors (1/scale per block, fp8_scaling.h's layouts and sizes), in bytes. Offset of
// linear `linear`'s W factors in one layer's (W's, then W^T's, per linear; linear = NUM_BLOCK_LINEARS: one
// layer's size), and of its saved input transpose's (the operand (IC, K = tokens)) in one kept layer's.
static inline size_t weight_factor_offset(const GPTConfig *cfg, int recipe, int linear) {
    size_t offset = 0;
    for (int lin = 0; lin < linear; lin++) {
        size_t OC = linear_out_features(cfg, lin), IC = linear_in_features(cfg, lin);
        offset += fp8_weight_factor_bytes(recipe, OC, IC) + fp8_weight_factor_bytes(recipe, IC, OC);
    }
    return offset;
}

static inline size_t input_factor_offset(const GPTConfig *cfg, int recipe, size_t N, int linear) {
    size_t offset = 0;
    for (int lin = 0; lin < linear; lin++)
        offset += fp8_tile_factor_bytes(recipe, linear_in_features(cfg, lin), N);
    return offset;
}

// Bytes of BUF_FP8_BLOCK_SCALES: the smallest and largest block scale per tensor and per weight (FP32,
// telemetry); every layer's weight factors; every kept layer's saved input factors; the factors of the cast
// scratch (up to (N, W), W = model_widest_features: GPT-2 4C, tiles along W) and of its transpose (up to
// (W, N), tiles along the tokens).
static inline size_t fp8_block_factor_bytes(const GPTConfig *cfg, int recipe, size_t N, size_t kept_layers) {
    size_t L = cfg->num_layers, W = model_widest_features(cfg);
    return 2 * L * NUM_BLOCK_LINEARS * 3 * sizeof(float) +
           L * weight_factor_offset(cfg, recipe, NUM_BLOCK_LINEARS) +
           kept_layers * input_factor_offset(cfg, recipe, N, NUM_BLOCK_LINEARS) +
           fp8_tile_factor_bytes(recipe, N, W) + fp8_tile_factor_bytes(recipe, W, N);
}

// Elements of unit `unit` padded for the collectives: ways * chunk (dist.h).
static inline size_t padded_unit(const GPTConfig *cfg, int zero_stage, int world_size, int unit) {
    size_t start, size;
    shard_unit_range(cfg, zero_stage, unit, &start, &size);
    int ways = shard_ways(zero_stage, world_size);
    return (size_t)ways * shard_chunk(size, ways);
}

// Elements of one unit's slot in ZeRO-3's gathered buffers (the BF16 copy, the FP8 weights, the FP32
// gradients): the padded unit rounded up to 256 elements, so that every slot starts 256-byte aligned
// whatever its element type (ways * chunk need not be a multiple of anything, and cuBLASLt needs 16 bytes).
static inline size_t unit_slot_elements(const GPTConfig *cfg, int world_size, int unit) {
    return (padded_unit(cfg, 3, world_size, unit) + 255) / 256 * 256;
}

// ZeRO-3's layer slots of gathered weights: the layer in use and the next, or with --keep_gathered one
// for every layer (each gathered once an optimizer step and kept through its micro-steps).
static inline size_t zero3_weight_slots(const GPTConfig *cfg, int keep_gathered) {
    return keep_gathered ? (size_t)cfg->num_layers : 2;
}

// Where the weights and their gradients live, per ZeRO stage (P parameters, S = this rank's shard,
// G = the global tensors padded, Lu = one layer padded, both to world_size * chunk):
//   stage 0: FP32 master, gradients, moments and the BF16 copy of all P; gradients all-reduced.
//   stage 1: master and moments S; gradients P (padded) reduce-scattered into a gradient shard S after
//            the last micro-step; the BF16 copy (and in float8 the FP8 weights, in parameter layout)
//            all-gathered, padded, after the update.
//   stage 3: master, moments and gradient shard S; the BF16 copy holds the global tensors and two layer
//            slots (the layer in use and the next, gathered ahead on a second stream), the FP32
//            gradients G + two layer slots (one reduce-scattered while the next is computed), the FP8
//            W and W^T two layers of slots (W^T: linear_weights_per_layer each). G and Lu are
//            unit_slot_elements here: the second and third slots start after the first, so their lengths are
//            rounded for alignment. --keep_gathered: a weight slot for every layer (the BF16 copy, W and
//            W^T), the gradients' two as before.
// --grad_reduce_dtype bfloat16: the BF16 buffer the gradients pass through NCCL in, the longest buffer the
// step sums over the ranks (ZeRO-0 all parameters; ZeRO-1 the padded unit; ZeRO-3 a layer's or the global
// unit's slot; with shard groups also the shard) up to GRAD_BF16_STAGING_ELEMENTS, in pieces beyond: 64 MiB
// keeps every piece long enough for NCCL's bandwidth while a 70B's 140 GB of gradients need no copy.
#define GRAD_BF16_STAGING_ELEMENTS ((size_t)1 << 25)
static inline size_t grad_bf16_staging_elements(const GPTConfig *cfg, const PlanSettings *s) {
    if (!s->grad_bf16 || s->world_size == 1) return 0;
    int ways = plan_shard_ranks(s);
    size_t longest = s->zero_stage == 0 ? param_count(cfg) : padded_unit(cfg, s->zero_stage, ways, 0);
    if (s->zero_stage == 3 && padded_unit(cfg, 3, ways, 1) > longest) longest = padded_unit(cfg, 3, ways, 1);
    if (s->zero_stage != 0 && ways < s->world_size && shard_size(cfg, s->zero_stage, ways) > longest)
        longest = shard_size(cfg, s->zero_stage, ways);
    return longest < GRAD_BF16_STAGING_ELEMENTS ? longest : GRAD_BF16_STAGING_ELEMENTS;
}

static inline void plan_weight_buffers(size_t *b, const GPTConfig *cfg, const PlanSettings *s) {
    size_t P = param_count(cfg), L = cfg->num_layers, f32 = 4, bf = 2;
    int ways = plan_shard_ranks(s);
    size_t S = shard_size(cfg, s->zero_stage, ways);
    size_t all =
        s->zero_stage == 3 ? unit_slot_elements(cfg, ways, 0) : padded_unit(cfg, s->zero_stage, ways, 0);
    size_t layer = s->zero_stage == 3 ? unit_slot_elements(cfg, ways, 1) : 0;
    int fp8 = s->dtype == DTYPE_FLOAT8;
    size_t fp8_weights = linear_weights_per_layer(cfg);
    b[BUF_GRAD_BF16] = grad_bf16_staging_elements(cfg, s) * bf;
    switch (s->zero_stage) {
    case 0:
        b[BUF_PARAMS] = b[BUF_GRADS] = b[BUF_ADAM_M] = b[BUF_ADAM_V] = P * f32;
        b[BUF_GRAD_SHARD] = 0;
        b[BUF_PARAMS_BF16] = P * bf;
        b[BUF_WEIGHTS_FP8] = b[BUF_WEIGHTS_FP8_T] = fp8 ? L * fp8_weights : 0;
        break;
    case 1:
        b[BUF_PARAMS] = b[BUF_GRAD_SHARD] = b[BUF_ADAM_M] = b[BUF_ADAM_V] = S * f32;
        b[BUF_GRADS] = all * f32;
        b[BUF_PARAMS_BF16] = all * bf;
        b[BUF_WEIGHTS_FP8] = fp8 ? all : 0;
        b[BUF_WEIGHTS_FP8_T] = fp8 ? L * fp8_weights : 0;
        break;
    default: {
        size_t weight_slots = zero3_weight_slots(cfg, s->keep_gathered);
        b[BUF_PARAMS] = b[BUF_GRAD_SHARD] = b[BUF_ADAM_M] = b[BUF_ADAM_V] = S * f32;
        b[BUF_GRADS] = (all + 2 * layer) * f32;
        b[BUF_PARAMS_BF16] = (all + weight_slots * layer) * bf;
        b[BUF_WEIGHTS_FP8] = fp8 ? weight_slots * layer : 0;
        b[BUF_WEIGHTS_FP8_T] = fp8 ? weight_slots * fp8_weights : 0;
        break;
    }
    }
}

// The activations follow the block: norm1 -> qkv (N, QKV) -> [Llama: RoPE on q and k, in place] ->
// attention (NH query heads) -> attproj -> residual2 -> norm2 -> fc (N, FC: GPT-2 4C; Llama's up and gate,
// 2F) -> GELU or SwiGLU (N, F) -> fcproj -> residual3. Norm stats: norm_stats_floats a token.
static inline void memory_plan_compute(MemoryPlan *plan, const GPTConfig *cfg, const PlanSettings *s) {
    size_t L = cfg->num_layers, C = cfg->channels, NH = cfg->num_heads;
    size_t QKV = model_qkv_features(cfg), FC = linear_out_features(cfg, LIN_MLP_UP), F = model_ffn_dim(cfg);
    size_t stats = norm_stats_floats(cfg), widest = model_widest_features(cfg);
    size_t N = (size_t)s->B * s->T, Vp = cfg->padded_vocab_size, bf = 2, f32 = 4;
    int fp8 = s->dtype == DTYPE_FLOAT8;
    // With recompute only each layer's input (residual3 of the layer before) is kept per layer; the
    // backward recomputes the layer's forward into one layer of everything else.
    size_t kept = s->recompute ? 1 : L;
    size_t gemm_input_layers = fp8 ? 1 : kept; // float8 keeps the GEMM inputs as FP8 transposes instead
    plan->settings = *s;
    size_t *b = plan->bytes;
    plan_weight_buffers(b, cfg, s);
    b[BUF_ENCODED] = N * C * bf;
    b[BUF_RESIDUAL2] = kept * N * C * bf;
    b[BUF_RESIDUAL3] = L * N * C * bf;
    b[BUF_LN1_STATS] = kept * N * stats * f32;
    b[BUF_LN2_STATS] = kept * N * stats * f32;
    b[BUF_QKV] = kept * N * QKV * bf; // Llama: q and k rotated in place, what the attention backward reads
    b[BUF_ATT_LSE] = kept * N * NH * f32; // one per query head
    b[BUF_FCH] = kept * N * FC * bf;      // SwiGLU's backward reads up and gate
    b[BUF_LN1] = gemm_input_layers * N * C * bf;
    b[BUF_ATTY] = gemm_input_layers * N * C * bf;
    b[BUF_LN2] = gemm_input_layers * N * C * bf;
    b[BUF_FCH_GELU] = gemm_input_layers * N * F * bf;
    b[BUF_INPUT_FP8_T] = fp8 ? kept * N * linear_input_features_sum(cfg) : 0;
    b[BUF_LNF] = N * C * bf;
    b[BUF_LNF_STATS] = N * stats * f32;
    b[BUF_LOGITS] = N * Vp * bf;
    b[BUF_LOSSES] = N * f32;
    b[BUF_DRESIDUAL] = N * C * bf;
    b[BUF_DC] = N * C * bf;
    b[BUF_DQKV] = N * QKV * bf;
    // fc's output gradient. Llama's fcproj data-gradient GEMM writes SwiGLU's output gradient (N, F) over
    // the layer's SwiGLU output (BUF_FCH_GELU, dead once fcproj's weight gradient, computed first, read it),
    // and SwiGLU's backward writes the up and gate gradients here: no buffer of its own
    b[BUF_DFCH] = N * FC * bf;
    b[BUF_ATT_DELTA] = N * NH * f32;
    // the FP8 casts of a linear's input or output gradient, up to the widest (GPT-2 fc's 4C, Llama's 2F)
    b[BUF_CAST_FP8] = fp8 ? N * widest : 0;
    b[BUF_CAST_FP8_T] = fp8 ? N * widest : 0;
    b[BUF_REDUCE_SCRATCH] = reduce_scratch_floats(cfg, s->B, s->T) * f32;
    b[BUF_FP8_STATE] = fp8_state_floats(cfg, s->history_len) * f32;
    b[BUF_FP8_BLOCK_SCALES] =
        fp8 && fp8_recipe_is_block(s->fp8_recipe) ? fp8_block_factor_bytes(cfg, s->fp8_recipe, N, kept) : 0;
    // StepParams, StepResults at +PLAN_ALIGN (both well under 256 bytes), then the step guard's window
    // (2, GUARD_MAX_WINDOW): losses, norms
    b[BUF_STEP] = 2 * PLAN_ALIGN + 2 * GUARD_MAX_WINDOW * sizeof(float);
    // inputs, targets, embedding-gradient buckets and their count; then the same again, where the next batch
    // lands while the current one is in use
    b[BUF_TOKENS] = 2 * (5 * N + 2) * sizeof(int);
    // Llama: gpt_model.h's rope_table, (maxT, hs/2) pairs of cos and sin, uploaded once: the GPU rotates by
    // the CPU trainer's floats
    b[BUF_ROPE_TABLE] = model_has_rotary(cfg) ? (size_t)cfg->max_seq_len * (C / NH) * f32 : 0;
    b[BUF_GEMM_WORKSPACE] = GEMM_WORKSPACE_BYTES;
    b[BUF_ATTENTION_WORKSPACE] = s->fast_attention ? attention_workspace_bytes(s->B, s->T, (int)NH) : 0;
    size_t offset = 0;
    for (int i = 0; i < NUM_BUFFERS; i++) {
        plan->offset[i] = offset;
        offset += (b[i] + PLAN_ALIGN - 1) / PLAN_ALIGN * PLAN_ALIGN;
    }
    plan->total = offset;
}

// Every FP8 GEMM of a training step for this model and micro-batch, checked before anything runs; the
// error names what to change. On Hopper and Ada, cuBLASLt's FP8 GEMMs need K-major operands whose
// sizes and leading dimensions are multiples of 16 elements: every dimension here is a linear's input or
// output features (GPT-2: C, 3C, 4C, all multiples of 16 when C is; Llama also QKV, 2F and F) or B*T.
static inline int fp8_linears_ok(const GPTConfig *cfg) {
    int ok = 1;
    for (int lin = 0; lin < NUM_BLOCK_LINEARS; lin++)
        ok &= linear_out_features(cfg, lin) % 16 == 0 && linear_in_features(cfg, lin) % 16 == 0;
    return ok;
}

static inline int fp8_shapes_ok(const GPTConfig *cfg, int B, int T) {
    return cfg->channels % 16 == 0 && fp8_linears_ok(cfg) && (long)B * T % 16 == 0;
}

static inline void check_fp8_shapes(const GPTConfig *cfg, int B, int T) {
    if (fp8_shapes_ok(cfg, B, T)) return;
    if (cfg->channels % 16)
        fail("--channels: %d is not a multiple of 16, which FP8 GEMMs need", cfg->channels);
    if (!fp8_linears_ok(cfg))
        fail("--kv_heads, --ffn_dim: qkv's %d and SwiGLU's %d features must be multiples of 16, which FP8 "
             "GEMMs need",
             model_qkv_features(cfg), model_ffn_dim(cfg));
    fail("--batch_size x --seq_len = %ld tokens is not a multiple of 16, which FP8 GEMMs need", (long)B * T);
}

#endif // MEMORY_PLAN_H

// test/test_plan_bounds.cu: the CUDA trainer's buffers against its memory plan, on the CPU (no GPU, no CUDA
// call). train_gpt_fp8.cu makes one allocation of memory_plan.h's plan and derives every device pointer from
// it: gpt_carve, then weight_bf16, grad_of, weight_fp8(_t), saved_input_t, layer_acts, the shard chunks,
// ZeRO-3's slots, the checkpoint staging. This test runs the trainer's own gpt_plan and gpt_carve on a fake
// base address, which nothing dereferences, and checks that every region the trainer reads or writes
// (pointer and extent, through the trainer's accessors where it has them) lies inside the buffer it must
// come from, and where a gather writes it inside its unit or slot; 16-byte aligned where cuBLASLt takes it
// (GEMM operands, outputs, biases, the workspace) and where the attention and cross-entropy kernels refuse
// less (qkv, dc, logits), naturally aligned elsewhere; and that no planned buffer goes unchecked. Regions
// that only the trainer's CUDA-calling functions compute (the gathers, the reduce-scatters, the tokens area)
// are restated from those functions, next to their names below. Extents are the kernels' own, per
// architecture (gpt_model.h's shapes): GPT-2's qkv 3C, fc 4C, LayerNorm's two statistics, biases; Llama's
// grouped-query qkv (NH + 2 KVH) hs, fc [up | gate] 2F and hidden F, RMSNorm's one statistic, no biases, its
// own LM head and the RoPE table.
//   small models: GPT-2 and Llama x layers 1-4 x widths 32-128 x two batch shapes (the second with
//   --attention
//                 fast: cuDNN's workspace in the plan) x bfloat16/float8 x ZeRO
//                 0/1/3 x world sizes 1-8, every rank x recompute 0/1 x (ZeRO-3) --keep_gathered 0/1
//                 (parameter units that the world size does not divide included: their chunks carry padding);
//   70B:          GPT-2's 70B and llama2-70B, float8, ZeRO-3, 32 ranks (every rank), B=1, T=2048, recompute
//                 0/1: sizes only;
//   block recipes: blockwise (C = 128, 256) and mxfp8 (also C = 32, 96), 1-3 layers, B = 1-3 of T = 128,
//                 recompute 0/1, GPT-2 and (C = 128, 256) Llama: the whole layout, and every block-factor
//                 view inside its buffer, aligned, none overlapping;
//   self-test:    the checker flags a region one element past a buffer's end, before its start, misaligned,
//                 from a buffer the plan leaves empty, and whole layouts carved for other settings than
//                 the model's (a model planned with --recompute 1 but run without; a rank past the world;
//                 Llama with more key/value heads or a larger F than planned; GPT-2's plan used by Llama and
//                 Llama's by GPT-2).
#define TRAIN_GPT_FP8_NO_MAIN
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function" // the trainer's loop, I/O and device-side functions
#include "../train_gpt_fp8.cu"
#pragma GCC diagnostic pop

#include "test_util.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

// cudaMalloc's guarantee is 256 bytes: a base aligned to no more than that, so that an alignment the
// plan does not give cannot pass by chance. Never dereferenced.
static char *const FAKE_BASE = (char *)(uintptr_t)0x7f0000000100ull;

#define GEMM_ALIGN 16 // cuBLASLt's FP8 GEMMs need 16-byte aligned operands
#define MAX_REPORTED 20

static char config_label[192]; // the layout being checked, for failure messages
static char scope_label[64];   // the layer, linear or unit being checked
static int buffer_used[NUM_BUFFERS];
static long regions_checked;
static int muted; // the self-test's layouts with a planted error: count failures, print nothing
static long muted_failures;

// [p, p + bytes) inside [lo, lo + lo_bytes), p a multiple of align. NULL (a buffer the plan leaves empty)
// never fits.
static int region_fits(const void *p, size_t bytes, size_t align, const void *lo, size_t lo_bytes) {
    uintptr_t a = (uintptr_t)p, b = (uintptr_t)lo;
    return p && lo && a >= b && a - b <= lo_bytes && bytes <= lo_bytes - (a - b) && a % align == 0;
}

// test_util.h's expect for the layouts: a failure prints only among the first MAX_REPORTED (one wrong offset
// breaks thousands of regions), and the self-test's planted layouts count failures without printing.
__attribute__((format(printf, 2, 3))) static void expect_layout(int ok, const char *fmt, ...) {
    if (muted) {
        muted_failures += !ok;
        return;
    }
    if (ok || failed >= MAX_REPORTED) {
        ok ? passed++ : failed++;
        return;
    }
    failed++;
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL: %s%s | ", config_label, scope_label);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
}

static void expect_region(const char *what, const void *p, size_t bytes, size_t align, const void *lo,
                          size_t lo_bytes, const char *lo_name) {
    regions_checked++;
    expect_layout(region_fits(p, bytes, align, lo, lo_bytes),
                  "%s: %zu bytes at %+lld of %s (%zu bytes), alignment %zu", what, bytes,
                  (long long)((intptr_t)p - (intptr_t)lo), lo_name, lo_bytes, align);
}

static const char *buffer_start(const GPT *m, BufferId id) {
    return m->memory + m->plan.offset[id];
}

static void expect_in_buffer(GPT *m, BufferId id, const char *what, const void *p, size_t bytes,
                             size_t align) {
    buffer_used[id] = 1;
    expect_region(what, p, bytes, align, buffer_start(m, id), m->plan.bytes[id], BUFFER_NAMES[id]);
}

// count elements at ptr inside plan buffer id (or inside the region of lo_count elements at lo), naturally
// aligned, or 16-byte aligned for what cuBLASLt reads or writes.
#define ALIGN_OF(ptr) alignof(decltype(*(ptr)))
#define IN_BUFFER(m, id, ptr, count)                                                                         \
    expect_in_buffer(m, id, #ptr, ptr, (size_t)(count) * sizeof(*(ptr)), ALIGN_OF(ptr))
#define GEMM_IN_BUFFER(m, id, ptr, count)                                                                    \
    expect_in_buffer(m, id, #ptr, ptr, (size_t)(count) * sizeof(*(ptr)), GEMM_ALIGN)
#define IN_REGION(ptr, count, lo, lo_count)                                                                  \
    expect_region(#ptr, ptr, (size_t)(count) * sizeof(*(ptr)), ALIGN_OF(ptr), lo,                            \
                  (size_t)(lo_count) * sizeof(*(lo)), #lo)

static size_t max_size(size_t a, size_t b) {
    return a > b ? a : b;
}

// The tensors cuBLASLt takes: the linear weights and biases, wte (GPT-2's LM head) and Llama's own head.
static int is_gemm_tensor(int tensor) {
    return tensor == PT_TOKEN_EMBED || tensor == PT_LM_HEAD ||
           (param_is_per_layer(tensor) && tensor != PT_ATTN_NORM_W && tensor != PT_ATTN_NORM_B &&
            tensor != PT_MLP_NORM_W && tensor != PT_MLP_NORM_B);
}

// Floats a norm's forward writes per token for its backward: LayerNorm's mean then rstd (stats, stats + N),
// RMSNorm's rstd alone.
static size_t norm_stats_per_token(const GPTConfig *cfg) {
    return model_parts(cfg).norm == NORM_RMSNORM ? 1 : 2;
}

// The unit holding tensor (layer) and where the trainer gathers its weights and reduces its gradients:
// ZeRO-3 the layer's slot (of weight_slots, of 2) or the global region, ZeRO-1 the whole padded vector, all
// in parameter layout from the unit's start.
static ShardUnit unit_of(GPT *m, int tensor, int layer, size_t *gathered_at, size_t *reduced_at) {
    int unit = m->zero_stage == 3 && param_is_per_layer(tensor) ? 1 + layer : 0;
    *gathered_at = unit ? slot_offset(m, layer, m->sharding.weight_slots) : 0;
    *reduced_at = unit ? grad_slot_offset(m, layer) : 0;
    return shard_map_unit(&m->sharding.shards, unit);
}

// weight_bf16 and grad_of of every tensor of every layer the architecture has (the trainer never takes the
// others: linear_bias is NULL), and with ZeRO-1/3 exactly where the gathers put the tensor in its unit (a
// slot mixed up stays in bounds: this catches it).
static void check_weights(GPT *m) {
    const GPTConfig *cfg = &m->config;
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        size_t n = param_tensor_size(cfg, t);
        if (n == 0) continue;
        for (int l = 0; l < (param_is_per_layer(t) ? cfg->num_layers : 1); l++) {
            snprintf(scope_label, sizeof(scope_label), " | tensor %d layer %d", t, l);
            int gemm = is_gemm_tensor(t);
            const bf16 *w = weight_bf16(m, t, l);
            float *g = grad_of(m, t, l);
            expect_in_buffer(m, BUF_PARAMS_BF16, "weight_bf16", w, n * sizeof(bf16),
                             gemm ? GEMM_ALIGN : sizeof(bf16));
            expect_in_buffer(m, BUF_GRADS, "grad_of", g, n * sizeof(float),
                             gemm ? GEMM_ALIGN : sizeof(float));
            if (m->zero_stage == 0) continue;
            size_t at, reduced_at;
            ShardUnit u = unit_of(m, t, l, &at, &reduced_at);
            size_t full = u.chunk * m->sharding.shards.ways, in_unit = param_offset(cfg, t, l) - u.start;
            IN_REGION(w, n, m->weights.params_bf16 + at, full);
            IN_REGION(g, n, m->gradients.grads + reduced_at, full);
            expect_layout(w == m->weights.params_bf16 + at + in_unit &&
                              g == m->gradients.grads + reduced_at + in_unit,
                          "weight_bf16 / grad_of: not where the gather puts the tensor");
        }
    }
}

// Each linear's weight as the bfloat16 GEMMs read it and its gradient as every weight-gradient GEMM writes
// it: (OC, IC) from the weight tensor on, which for Llama's fc is [up; gate], fcw then fcgatew (2F, C) in one
// operand; inside the unit the gathers fill with ZeRO-1/3.
static void check_linear_weights(GPT *m) {
    const GPTConfig *cfg = &m->config;
    size_t F = model_ffn_dim(cfg), C = cfg->channels;
    for (int l = 0; l < cfg->num_layers; l++)
        for (int lin = 0; lin < NUM_BLOCK_LINEARS; lin++) {
            snprintf(scope_label, sizeof(scope_label), " | layer %d linear %d", l, lin);
            int tensor = linear_weight_tensor(lin);
            size_t n = linear_weight_size(cfg, lin);
            const bf16 *w = weight_bf16(m, tensor, l);
            float *g = grad_of(m, tensor, l);
            GEMM_IN_BUFFER(m, BUF_PARAMS_BF16, w, n);
            GEMM_IN_BUFFER(m, BUF_GRADS, g, n);
            if (model_parts(cfg).mlp == MLP_SWIGLU && lin == LIN_MLP_UP)
                expect_layout(weight_bf16(m, PT_MLP_GATE_W, l) == w + F * C &&
                                  grad_of(m, PT_MLP_GATE_W, l) == g + F * C,
                              "fc's gate rows do not follow its up rows");
            if (m->zero_stage == 0) continue;
            size_t at, reduced_at;
            ShardUnit u = unit_of(m, tensor, l, &at, &reduced_at);
            IN_REGION(w, n, m->weights.params_bf16 + at, u.chunk * m->sharding.shards.ways);
            IN_REGION(g, n, m->gradients.grads + reduced_at, u.chunk * m->sharding.shards.ways);
        }
    scope_label[0] = '\0';
}

// float8: W, W^T and the saved transposed inputs of every linear.
static void check_fp8_weights(GPT *m) {
    const GPTConfig *cfg = &m->config;
    size_t N = (size_t)m->B * m->T, per_layer = linear_weights_per_layer(cfg);
    for (int l = 0; l < cfg->num_layers; l++) {
        for (int lin = 0; lin < NUM_BLOCK_LINEARS; lin++) {
            snprintf(scope_label, sizeof(scope_label), " | layer %d linear %d", l, lin);
            size_t OC = linear_out_features(cfg, lin), IC = linear_in_features(cfg, lin);
            fp8 *w = weight_fp8(m, l, lin), *wt = weight_fp8_t(m, l, lin);
            GEMM_IN_BUFFER(m, BUF_WEIGHTS_FP8, w, OC * IC);
            GEMM_IN_BUFFER(m, BUF_WEIGHTS_FP8_T, wt, IC * OC);
            GEMM_IN_BUFFER(m, BUF_INPUT_FP8_T, saved_input_t(m, l, lin), IC * N);
            if (m->zero_stage == 3) // W^T: the layer's weight slot; W: where gather_layer gathers the layer
                IN_REGION(wt, IC * OC,
                          m->weights.weights_fp8_t + (size_t)(l % m->sharding.weight_slots) * per_layer,
                          per_layer);
            if (m->zero_stage != 0) {
                size_t at, reduced_at;
                int tensor = linear_weight_tensor(lin);
                ShardUnit u = unit_of(m, tensor, l, &at, &reduced_at);
                fp8 *gathered = m->zero_stage == 3 ? m->weights.weights_fp8 + (at - m->sharding.global_slot)
                                                   : m->weights.weights_fp8;
                IN_REGION(w, OC * IC, gathered, u.chunk * m->sharding.shards.ways);
                expect_layout(w == gathered + param_offset(cfg, tensor, l) - u.start,
                              "weight_fp8: not where the gather puts the weight");
            }
        }
    }
}

// The block recipes' factors: every layer's W and W^T factors, every kept layer's saved input factors, the
// cast scratch's, the scale telemetry, each inside BUF_FP8_BLOCK_SCALES, 16-byte aligned (cuBLASLt reads
// them), and no two overlapping (the carving could put two views on the same bytes and stay in bounds).
static void check_block_factors(GPT *m) {
    const GPTConfig *cfg = &m->config;
    size_t N = (size_t)m->B * m->T, W = model_widest_features(cfg),
           counted = (size_t)cfg->num_layers * NUM_BLOCK_LINEARS * 3;
    int recipe = m->fp8_state.recipe;
    std::vector<std::pair<const char *, size_t>> regions; // start, bytes
    auto add = [&](const char *what, const void *p, size_t bytes) {
        expect_in_buffer(m, BUF_FP8_BLOCK_SCALES, what, p, bytes, GEMM_ALIGN);
        regions.push_back({(const char *)p, bytes});
    };
    for (int l = 0; l < cfg->num_layers; l++)
        for (int lin = 0; lin < NUM_BLOCK_LINEARS; lin++) {
            snprintf(scope_label, sizeof(scope_label), " | layer %d linear %d", l, lin);
            size_t OC = linear_out_features(cfg, lin), IC = linear_in_features(cfg, lin);
            add("W factors", weight_factors(m, l, lin, 0), fp8_weight_factor_bytes(recipe, OC, IC));
            add("W^T factors", weight_factors(m, l, lin, 1), fp8_weight_factor_bytes(recipe, IC, OC));
            if (l == kept_layer(m, l))
                add("saved input factors", saved_input_factors_t(m, l, lin),
                    fp8_tile_factor_bytes(recipe, IC, N));
        }
    scope_label[0] = '\0';
    add("cast factors", m->fp8_state.cast_factors, fp8_tile_factor_bytes(recipe, N, W));
    add("cast_t factors", m->fp8_state.cast_factors_t, fp8_tile_factor_bytes(recipe, W, N));
    add("block_scale_min", m->fp8_state.block_scale_min, counted * sizeof(float));
    add("block_scale_max", m->fp8_state.block_scale_max, counted * sizeof(float));
    std::sort(regions.begin(), regions.end());
    for (size_t i = 1; i < regions.size(); i++)
        expect_layout(regions[i - 1].first + regions[i - 1].second <= regions[i].first,
                      "two block-factor regions overlap (%zu and %zu bytes)", regions[i - 1].second,
                      regions[i].second);
}

// Every layer's activations (layer_acts: kept per layer, or one layer with --recompute), its input and
// output, at the widths the kernels use: qkv the qkv linear's output, which the attention reads as NH query
// heads then KVH key and KVH value heads (Llama's RoPE rotates the first NH + KVH in place); fch fc's output
// (GPT-2 4C; Llama 2F, SwiGLU's rows [up | gate]); fch_gelu the MLP's hidden F (GELU's or SwiGLU's output,
// fcproj's input; Llama's fcproj data gradient (N, F) is written over it); the norms' statistics; one
// log-sum-exp per query head.
static void check_activations(GPT *m) {
    const GPTConfig *cfg = &m->config;
    size_t N = (size_t)m->B * m->T, NC = N * cfg->channels, stats = N * norm_stats_per_token(cfg);
    size_t QKV = linear_out_features(cfg, LIN_QKV), FC = linear_out_features(cfg, LIN_MLP_UP),
           F = linear_in_features(cfg, LIN_MLP_DOWN);
    for (int l = 0; l < cfg->num_layers; l++) {
        snprintf(scope_label, sizeof(scope_label), " | layer %d", l);
        LayerActs a = layer_acts(m, l);
        GEMM_IN_BUFFER(m, BUF_LN1, a.ln1, NC);
        GEMM_IN_BUFFER(m, BUF_QKV, a.qkv, N * QKV);
        GEMM_IN_BUFFER(m, BUF_ATTY, a.atty, NC);
        IN_BUFFER(m, BUF_RESIDUAL2, a.residual2, NC);
        GEMM_IN_BUFFER(m, BUF_LN2, a.ln2, NC);
        GEMM_IN_BUFFER(m, BUF_FCH, a.fch, N * FC);
        GEMM_IN_BUFFER(m, BUF_FCH_GELU, a.fch_gelu, N * F);
        IN_BUFFER(m, BUF_LN1_STATS, a.ln1_stats, stats);
        IN_BUFFER(m, BUF_LN2_STATS, a.ln2_stats, stats);
        IN_BUFFER(m, BUF_ATT_LSE, a.att_lse, N * cfg->num_heads);
        IN_BUFFER(m, l == 0 ? BUF_ENCODED : BUF_RESIDUAL3, layer_input(m, l), NC);
        IN_BUFFER(m, BUF_RESIDUAL3, m->acts.residual3 + l * NC, NC); // layer_forward's output
    }
    scope_label[0] = '\0';
}

// The buffers of the whole model: head, backward scratch (each sized for the widest linear it serves:
// dqkv the attention's input gradient, dfch fc's output gradient (GPT-2's GELU backward, Llama's SwiGLU
// backward writes it)), reductions' scratch, Llama's RoPE table, tokens, step values, GEMM workspace, the
// attention workspace.
static void check_model_buffers(GPT *m) {
    const GPTConfig *cfg = &m->config;
    size_t N = (size_t)m->B * m->T, C = cfg->channels, NC = N * C, widest = 0;
    for (int lin = 0; lin < NUM_BLOCK_LINEARS; lin++) {
        widest = max_size(widest, max_size(linear_in_features(cfg, lin), linear_out_features(cfg, lin)));
    }
    IN_BUFFER(m, BUF_ENCODED, m->acts.encoded, NC);
    GEMM_IN_BUFFER(m, BUF_LNF, m->acts.lnf, NC);
    IN_BUFFER(m, BUF_LNF_STATS, m->acts.lnf_stats, N * norm_stats_per_token(cfg));
    GEMM_IN_BUFFER(m, BUF_LOGITS, m->acts.logits, N * cfg->padded_vocab_size);
    IN_BUFFER(m, BUF_LOSSES, m->acts.losses, N);
    GEMM_IN_BUFFER(m, BUF_DRESIDUAL, m->work.dresidual, NC);
    GEMM_IN_BUFFER(m, BUF_DC, m->work.dc, NC);
    GEMM_IN_BUFFER(m, BUF_DQKV, m->work.dqkv, N * linear_out_features(cfg, LIN_QKV));
    GEMM_IN_BUFFER(m, BUF_DFCH, m->work.dfch, N * linear_out_features(cfg, LIN_MLP_UP));
    IN_BUFFER(m, BUF_ATT_DELTA, m->work.att_delta, N * cfg->num_heads);
    if (m->dtype == DTYPE_FLOAT8) {
        GEMM_IN_BUFFER(m, BUF_CAST_FP8, m->work.cast_fp8, N * widest);
        GEMM_IN_BUFFER(m, BUF_CAST_FP8_T, m->work.cast_fp8_t, N * widest);
    }
    // the largest *_scratch_floats of a kernel the trainer gives it: the norms' backward (LayerNorm's or
    // RMSNorm's), the bias gradients of the linears that have one (the float8 casts' column sums alike),
    // global_norm_squared (doubles), encoder_backward
    size_t scratch = model_parts(cfg).norm == NORM_RMSNORM
                         ? rmsnorm_backward_scratch_floats((int)N, (int)C)
                         : layernorm_backward_scratch_floats((int)N, (int)C);
    for (int lin = 0; lin < NUM_BLOCK_LINEARS; lin++)
        if (param_tensor_size(cfg, linear_weight_tensor(lin) + 1))
            scratch = max_size(scratch, bias_backward_scratch_floats((int)N, linear_out_features(cfg, lin)));
    scratch = max_size(scratch, global_norm_squared_scratch_floats(m->sharding.shard_floats));
    scratch = max_size(scratch, encoder_backward_scratch_floats(m->B, m->T, (int)C));
    expect_in_buffer(m, BUF_REDUCE_SCRATCH, "reduce_scratch", m->work.reduce_scratch, scratch * sizeof(float),
                     sizeof(double));
    // gpt_alloc: rope_table writes (maxT, hs/2) pairs of cos and sin into a host buffer of the plan's
    // bytes, copied whole; the kernel reads its first T rows (cli.h refuses T > maxT)
    if (model_has_rotary(cfg))
        IN_BUFFER(m, BUF_ROPE_TABLE, m->acts.rope, (size_t)cfg->max_seq_len * (C / cfg->num_heads / 2) * 2);
    // upload_batch, gpt_loss, encoder_backward: inputs, targets, then the buckets' positions, tokens, starts
    // (N + 1) and count
    IN_BUFFER(m, BUF_TOKENS, m->io.tokens, N);
    IN_BUFFER(m, BUF_TOKENS, m->io.tokens + N, N);
    IN_BUFFER(m, BUF_TOKENS, m->io.tokens + 2 * N, N);
    IN_BUFFER(m, BUF_TOKENS, m->io.tokens + 3 * N, N);
    IN_BUFFER(m, BUF_TOKENS, m->io.tokens + 4 * N, N + 1);
    IN_BUFFER(m, BUF_TOKENS, m->io.tokens + 5 * N + 1, 1);
    // the next batch's area after the current one's (the device copy reads one while the other is written)
    IN_BUFFER(m, BUF_TOKENS, m->io.tokens_next, 5 * N + 2);
    expect_layout(m->io.tokens_next >= m->io.tokens + 5 * N + 2, "tokens_next overlaps tokens");
    IN_BUFFER(m, BUF_STEP, m->io.step_params, 1);
    IN_BUFFER(m, BUF_STEP, m->io.step_results, 1);
    IN_BUFFER(m, BUF_STEP, m->io.guard_history, 2 * GUARD_MAX_WINDOW);
    expect_layout((char *)m->io.step_results >= (char *)(m->io.step_params + 1) &&
                      (char *)m->io.guard_history >= (char *)(m->io.step_results + 1),
                  "the step's parameters, results and guard window overlap");
    GEMM_IN_BUFFER(m, BUF_GEMM_WORKSPACE, (char *)plan_ptr(m, BUF_GEMM_WORKSPACE), GEMM_WORKSPACE_BYTES);
    // gpt_alloc: cuDNN's fused attention runs in the workspace the plan sized for it (--attention fast; auto
    // in a build with cuDNN), which the exact kernels do not have
    if (m->plan.settings.fast_attention)
        GEMM_IN_BUFFER(m, BUF_ATTENTION_WORKSPACE, m->work.attention_workspace,
                       attention_workspace_bytes(m->B, m->T, cfg->num_heads));
    else
        expect_layout(!m->work.attention_workspace, "an attention workspace without the fast attention");
}

// fp8_state_views: every array, the counters 8-byte aligned, and amax_current followed by weight_amax (one
// all-reduce takes both).
static void check_fp8_state(GPT *m) {
    Fp8DeviceState *s = &m->fp8_state.scaling;
    size_t n = s->num_tensors, w = s->num_weights;
    IN_BUFFER(m, BUF_FP8_STATE, s->amax_history, n * s->history_len);
    IN_BUFFER(m, BUF_FP8_STATE, s->amax_current, n + w);
    IN_BUFFER(m, BUF_FP8_STATE, s->weight_amax, w);
    IN_BUFFER(m, BUF_FP8_STATE, s->scale, n);
    IN_BUFFER(m, BUF_FP8_STATE, s->descale, n);
    IN_BUFFER(m, BUF_FP8_STATE, s->weight_scale, w);
    IN_BUFFER(m, BUF_FP8_STATE, s->weight_descale, w);
    IN_BUFFER(m, BUF_FP8_STATE, s->amax_measure, n);
    IN_BUFFER(m, BUF_FP8_STATE, s->amax_last, n);
    IN_BUFFER(m, BUF_FP8_STATE, s->counts, 2 * (n + w));
    expect_layout(s->weight_amax == s->amax_current + n,
                  "fp8 state: weight_amax does not follow amax_current");
}

// This rank's chunk of every unit in the shard buffers (AdamW, load_master, the gradient shard), and per
// ZeRO stage the regions the collectives, the optimizer's BF16 writes and the checkpoint staging take.
static void check_shards(GPT *m) {
    int ways = m->sharding.shards.ways, zero = m->zero_stage;
    size_t S = m->sharding.shard_floats;
    for (int unit = 0; unit < m->sharding.num_units; unit++) {
        snprintf(scope_label, sizeof(scope_label), " | unit %d", unit);
        ShardUnit u = shard_map_unit(&m->sharding.shards, unit);
        size_t full = u.chunk * ways, mine = (size_t)m->sharding.shards.rank * u.chunk;
        IN_BUFFER(m, BUF_PARAMS, m->weights.params + u.shard, u.chunk);
        IN_BUFFER(m, BUF_ADAM_M, m->weights.m + u.shard, u.chunk);
        IN_BUFFER(m, BUF_ADAM_V, m->weights.v + u.shard, u.chunk);
        if (zero == 0) { // adamw_step reads the gradients and writes the whole BF16 copy
            IN_BUFFER(m, BUF_GRADS, m->gradients.grads + u.shard, u.owned);
            IN_BUFFER(m, BUF_PARAMS_BF16, m->weights.params_bf16, u.owned);
            IN_BUFFER(m, BUF_PARAMS, m->weights.params, u.size); // save_model's unit, read in place
            continue;
        }
        IN_BUFFER(m, BUF_GRAD_SHARD, m->gradients.grad_shard + u.shard, u.chunk);
        // gather_master_unit: the unit staged whole in the gradients (a ZeRO-3 layer in the first slot)
        float *staging = m->gradients.grads + (unit == 0 ? 0 : m->sharding.global_slot);
        IN_BUFFER(m, BUF_GRADS, staging, full);
        IN_BUFFER(m, BUF_GRADS, staging + mine, u.chunk);
        if (zero == 1) { // reduce_gradients, adamw_step / refresh_compute_weights, publish_zero1
            IN_BUFFER(m, BUF_GRADS, m->gradients.grads, full);
            IN_BUFFER(m, BUF_GRADS, m->gradients.grads + mine, u.chunk);
            IN_BUFFER(m, BUF_PARAMS_BF16, m->weights.params_bf16, full);
            IN_BUFFER(m, BUF_PARAMS_BF16, m->weights.params_bf16 + mine, u.chunk);
            if (m->fp8_weights) {
                IN_BUFFER(m, BUF_WEIGHTS_FP8, m->weights.weights_fp8, full);
                IN_BUFFER(m, BUF_WEIGHTS_FP8, m->weights.weights_fp8 + mine, u.chunk);
            }
            continue;
        }
        // ZeRO-3: gather_global / gather_layer, begin_ and end_layer_backward, reduce_scatter_global
        int layer = unit - 1;
        size_t at = unit == 0 ? 0 : slot_offset(m, layer, m->sharding.weight_slots),
               reduced_at = unit == 0 ? 0 : grad_slot_offset(m, layer),
               slot = unit == 0 ? m->sharding.global_slot : m->sharding.layer_slot;
        IN_REGION(staging, full, m->gradients.grads + (unit == 0 ? 0 : m->sharding.global_slot), slot);
        bf16 *copy = m->weights.params_bf16 + at;
        float *grads = m->gradients.grads + reduced_at;
        IN_BUFFER(m, BUF_PARAMS_BF16, copy, full);
        IN_REGION(copy, full, m->weights.params_bf16 + at, slot);
        IN_BUFFER(m, BUF_PARAMS_BF16, copy + mine, u.chunk);
        IN_BUFFER(m, BUF_GRADS, grads, full);
        IN_REGION(grads, full, m->gradients.grads + reduced_at, slot);
        IN_BUFFER(m, BUF_GRADS, grads + mine, u.chunk);
        if (unit > 0 && m->fp8_weights) {
            fp8 *weights = m->weights.weights_fp8 + (at - m->sharding.global_slot);
            IN_BUFFER(m, BUF_WEIGHTS_FP8, weights, full);
            IN_BUFFER(m, BUF_WEIGHTS_FP8, weights + mine, u.chunk);
        }
    }
    scope_label[0] = '\0';
    // state_blocks, global_norm_squared, the update's gradients; debug_first_micro_step (ZeRO-0/1)
    IN_BUFFER(m, BUF_PARAMS, m->weights.params, S);
    IN_BUFFER(m, BUF_ADAM_M, m->weights.m, S);
    IN_BUFFER(m, BUF_ADAM_V, m->weights.v, S);
    IN_BUFFER(m, zero == 0 ? BUF_GRADS : BUF_GRAD_SHARD,
              zero == 0 ? m->gradients.grads : m->gradients.grad_shard, S);
    if (zero != 3) IN_BUFFER(m, BUF_GRADS, m->gradients.grads, m->num_params);
}

// ZeRO-3's regions themselves, every slot index whatever the number of layers: the global region and
// the layer slots of the BF16 copy (weight_slots) and the gradients (2), weight_slots of the FP8 W and W^T,
// each 256-byte aligned (memory_plan.h's unit_slot_elements).
static void check_zero3_slots(GPT *m) {
    size_t per_layer = linear_weights_per_layer(&m->config);
    expect_in_buffer(m, BUF_PARAMS_BF16, "global region of params_bf16", m->weights.params_bf16,
                     m->sharding.global_slot * sizeof(bf16), PLAN_ALIGN);
    expect_in_buffer(m, BUF_GRADS, "global region of grads", m->gradients.grads,
                     m->sharding.global_slot * sizeof(float), PLAN_ALIGN);
    for (int slot = 0; slot < 2; slot++) {
        snprintf(scope_label, sizeof(scope_label), " | gradient slot %d", slot);
        expect_in_buffer(m, BUF_GRADS, "grads slot", m->gradients.grads + grad_slot_offset(m, slot),
                         m->sharding.layer_slot * sizeof(float), PLAN_ALIGN);
    }
    for (int slot = 0; slot < m->sharding.weight_slots; slot++) {
        snprintf(scope_label, sizeof(scope_label), " | weight slot %d", slot);
        expect_in_buffer(m, BUF_PARAMS_BF16, "params_bf16 slot",
                         m->weights.params_bf16 + slot_offset(m, slot, m->sharding.weight_slots),
                         m->sharding.layer_slot * sizeof(bf16), PLAN_ALIGN);
        if (!m->fp8_weights) continue;
        expect_in_buffer(m, BUF_WEIGHTS_FP8, "weights_fp8 slot",
                         m->weights.weights_fp8 + (size_t)slot * m->sharding.layer_slot,
                         m->sharding.layer_slot, PLAN_ALIGN);
        expect_in_buffer(m, BUF_WEIGHTS_FP8_T, "weights_fp8_t slot",
                         m->weights.weights_fp8_t + (size_t)slot * per_layer, per_layer, GEMM_ALIGN);
    }
    scope_label[0] = '\0';
}

static void check_layout(GPT *m) {
    memset(buffer_used, 0, sizeof(buffer_used));
    scope_label[0] = '\0';
    check_weights(m);
    check_linear_weights(m);
    if (m->fp8_weights) check_fp8_weights(m);
    if (m->fp8_state.block_scale_min) check_block_factors(m);
    check_activations(m);
    check_model_buffers(m);
    check_fp8_state(m);
    check_shards(m);
    if (m->zero_stage == 3) check_zero3_slots(m);
    for (int id = 0; id < NUM_BUFFERS; id++) // a buffer nothing here checks would be a hole in this test
        if (m->plan.bytes[id])
            expect_layout(buffer_used[id], "buffer %s is planned but no region of it was checked",
                          BUFFER_NAMES[id]);
}

// The trainer's options at their defaults, then the layout's settings.
static TrainOptions layout_options(int dtype, int zero_stage, int recompute, int B, int T) {
    TrainOptions opts;
    options_defaults(&opts);
    opts.dtype = dtype;
    opts.zero_stage = zero_stage;
    opts.recompute = recompute;
    opts.batch_size = B;
    opts.seq_len = T;
    return opts;
}

// gpt_alloc's host half: the plan and the carving, on FAKE_BASE, for one rank of world_size.
static void carve(GPT *m, const GPTConfig *cfg, const TrainOptions *opts, int world_size, int rank) {
    Comm comm;
    memset(&comm, 0, sizeof(comm)); // no communicator: the plan needs the rank and world size only
    comm.rank = rank;
    comm.world_size = world_size;
    gpt_plan(m, cfg, opts, opts->batch_size, opts->seq_len, 1, &comm, NULL);
    gpt_carve(m, FAKE_BASE);
    snprintf(config_label, sizeof(config_label),
             "%s L=%d C=%d NH=%d KVH=%d F=%d B=%d T=%d %s zero %d world %d rank %d recompute %d",
             model_parts(cfg).name, cfg->num_layers, cfg->channels, cfg->num_heads, model_kv_heads(cfg),
             model_ffn_dim(cfg), opts->batch_size, opts->seq_len, dtype_name(opts->dtype), opts->zero_stage,
             world_size, rank, opts->recompute);
}

// GPT-2, or Llama with half as many key/value heads (one head: its own) and F = 3C (fc's output 6C: wider
// than GPT-2's 4C).
static GPTConfig small_config(int layers, int channels, int heads, int llama) {
    TrainOptions opts = layout_options(DTYPE_BFLOAT16, 0, 0, 1, 1);
    opts.layers = layers;
    opts.channels = channels;
    opts.heads = heads;
    if (llama) {
        snprintf(opts.model_size, sizeof(opts.model_size), "d2"); // a preset either architecture takes
        opts.arch = 1 + ARCH_LLAMA;                               // --arch llama (choice 0 is auto)
        opts.kv_heads = heads / 2;
        opts.ffn_dim = 3 * channels;
    }
    opts.max_seq_len = 64;
    opts.vocab = 250; // padded to 256
    GPTConfig cfg = config_from_options(&opts);
    check_attention_shape(cfg.channels, cfg.num_heads); // a shape the trainer runs (it exits otherwise)
    return cfg;
}

static int check_small_models(long *padded_units) {
    static const int layers[] = {1, 2, 3, 4}, widths[][2] = {{32, 1}, {64, 2}, {96, 3}, {128, 2}},
                     shapes[][2] = {{2, 16}, {3, 48}}, zero_stages[] = {0, 1, 3};
    int layouts = 0;
    for (int llama = 0; llama <= 1; llama++)
        for (int li = 0; li < 4; li++)
            for (int wi = 0; wi < 4; wi++) {
                GPTConfig cfg = small_config(layers[li], widths[wi][0], widths[wi][1], llama);
                for (int si = 0; si < 2; si++)
                    for (int dtype = DTYPE_BFLOAT16; dtype <= DTYPE_FLOAT8; dtype++)
                        for (int zi = 0; zi < 3; zi++)
                            for (int world = 1; world <= 8; world++)
                                for (int rank = 0; rank < world; rank++)
                                    for (int recompute = 0; recompute <= 1; recompute++)
                                        for (int keep = 0; keep <= (zero_stages[zi] == 3); keep++) {
                                            TrainOptions opts =
                                                layout_options(dtype, zero_stages[zi], recompute,
                                                               shapes[si][0], shapes[si][1]);
                                            opts.keep_gathered = keep;
                                            // the second shape with cuDNN's attention workspace
                                            opts.attention = si ? ATTENTION_FAST : ATTENTION_EXACT;
                                            check_fp8_shapes(&cfg, opts.batch_size, opts.seq_len);
                                            GPT m;
                                            carve(&m, &cfg, &opts, world, rank);
                                            check_layout(&m);
                                            for (int unit = 0; unit < m.sharding.num_units; unit++)
                                                *padded_units +=
                                                    shard_map_unit(&m.sharding.shards, unit).size %
                                                        m.sharding.shards.ways !=
                                                    0;
                                            layouts++;
                                        }
            }
    return layouts;
}

// The block recipes (ZeRO-0 only in the CUDA trainer) on the shapes they take: channels and B*T multiples of
// the block (Llama's qkv and fc widths too: C = 128, 256).
static int check_block_layouts(void) {
    static const int widths[][2] = {{128, 2}, {256, 4}}, mx_widths[][2] = {{32, 1}, {96, 3}};
    int layouts = 0;
    for (int layers = 1; layers <= 3; layers++)
        for (int recipe = FP8_RECIPE_BLOCKWISE; recipe <= FP8_RECIPE_MXFP8; recipe++)
            for (int wi = 0; wi < 6; wi++) {
                int llama = wi >= 4;
                const int *w = wi < 2 || llama ? widths[wi % 2] : mx_widths[wi - 2];
                if (wi >= 2 && !llama && recipe != FP8_RECIPE_MXFP8) continue;
                GPTConfig cfg = small_config(layers, w[0], w[1], llama);
                for (int recompute = 0; recompute <= 1; recompute++)
                    for (int B = 1; B <= 3; B++) {
                        TrainOptions opts = layout_options(DTYPE_FLOAT8, 0, recompute, B, 128);
                        opts.fp8_recipe = recipe;
                        check_fp8_recipe_shape(&opts, &cfg, opts.batch_size, opts.seq_len);
                        GPT m;
                        carve(&m, &cfg, &opts, 1, 0);
                        check_layout(&m);
                        layouts++;
                    }
            }
    return layouts;
}

// A 70B preset (the GPT architecture's "gpt-70B", Llama 2's "llama2-70B" with its 8 key/value heads and F =
// 28672) in float8 on 32 GPUs with ZeRO-3, B=1, T=2048: every rank.
static int check_70b(const char *preset) {
    TrainOptions opts = layout_options(DTYPE_FLOAT8, 3, 1, 1, 2048);
    snprintf(opts.model_size, sizeof(opts.model_size), "%s", preset);
    GPTConfig cfg = config_from_options(&opts);
    int layouts = 0;
    for (int recompute = 0; recompute <= 1; recompute++)
        for (int rank = 0; rank < 32; rank++) {
            opts.recompute = recompute;
            GPT m;
            carve(&m, &cfg, &opts, 32, rank);
            check_layout(&m);
            layouts++;
        }
    return layouts;
}

// Failures a check (check_layout, or one of its parts) finds in a layout carved for other settings than the
// model now has.
static long planted_failures(GPT *m, void (*check_part)(GPT *)) {
    muted = 1;
    muted_failures = 0;
    check_part(m);
    muted = 0;
    return muted_failures;
}

// Llama's widths: layouts carved for a narrower Llama (fewer key/value heads, a smaller F) or for GPT-2, each
// checked as the model, and a Llama layout checked as GPT-2 (two norm statistics a token, not one).
static void self_test_llama(void) {
    GPTConfig llama = small_config(2, 128, 4, 1), gpt2 = small_config(2, 128, 4, 0);
    TrainOptions opts = layout_options(DTYPE_FLOAT8, 0, 0, 2, 16);
    GPT m;
    carve(&m, &llama, &opts, 1, 0);
    check(llama.num_kv_heads == 2 && llama.ffn_dim == 384,
          "self-test: the Llama model has 2 of 4 kv heads and F = 384");
    check(planted_failures(&m, check_layout) == 0, "self-test: the Llama layout passes as carved");
    m.config.num_kv_heads = 4; // qkv (N, 8 hs) per layer, read as (N, 12 hs)
    check(planted_failures(&m, check_activations) > 0,
          "self-test: qkv planned for 2 kv heads, used with 4, is caught");
    m.config = llama;
    m.config.ffn_dim = 512; // fch (N, 2F) and fch_gelu (N, F) planned for F = 384
    check(planted_failures(&m, check_activations) > 0,
          "self-test: fch and fch_gelu planned for a smaller F are caught");
    m.config = gpt2; // GPT-2's widths in a Llama plan's buffers: two norm statistics a token, not one
    check(planted_failures(&m, check_layout) > 0, "self-test: a Llama layout checked as GPT-2 is caught");
    carve(&m, &gpt2, &opts, 1, 0);
    m.config = llama; // fch and dfch 4C wide, not 2F = 6C; no RoPE table
    check(planted_failures(&m, check_activations) > 0,
          "self-test: GPT-2's activations used by Llama are caught");
    check(planted_failures(&m, check_model_buffers) > 0,
          "self-test: GPT-2's dfch and missing RoPE table used by Llama are caught");
}

// The checker must not pass what is wrong: single regions at and past the edges of a real buffer, then whole
// layouts carved for other settings than the model's.
static void self_test(void) {
    GPTConfig cfg = small_config(2, 64, 2, 0);
    TrainOptions opts = layout_options(DTYPE_FLOAT8, 3, 1, 2, 16);
    GPT m;
    carve(&m, &cfg, &opts, 3, 2);
    const char *lo = buffer_start(&m, BUF_PARAMS_BF16);
    size_t bytes = m.plan.bytes[BUF_PARAMS_BF16];
    const bf16 *end = (const bf16 *)(lo + bytes);
    check(region_fits(end - 1, sizeof(bf16), 2, lo, bytes), "self-test: the last element of a buffer fits");
    check(region_fits(end, 0, 2, lo, bytes), "self-test: an empty region at a buffer's end fits");
    check(!region_fits(end, sizeof(bf16), 2, lo, bytes),
          "self-test: one element past a buffer's end is caught");
    check(!region_fits(end - 1, 2 * sizeof(bf16), 2, lo, bytes),
          "self-test: a region running one element past a buffer's end is caught");
    check(!region_fits((const bf16 *)lo - 1, sizeof(bf16), 2, lo, bytes),
          "self-test: one element before a buffer's start is caught");
    check(!region_fits(lo + 2, 16, GEMM_ALIGN, lo, bytes),
          "self-test: a GEMM operand off 16 bytes is caught");
    check(!region_fits(NULL, 0, 1, lo, bytes), "self-test: a buffer the plan leaves empty (NULL) is caught");
    // Through the trainer's accessor: with ZeRO-3, layer 1's fcproj W^T ends the second of two W^T slots,
    // the end of its buffer, so one element more is past it.
    const char *wt_lo = buffer_start(&m, BUF_WEIGHTS_FP8_T);
    size_t wt_bytes = m.plan.bytes[BUF_WEIGHTS_FP8_T], fcproj = 4 * (size_t)cfg.channels * cfg.channels;
    const fp8 *wt = weight_fp8_t(&m, 1, LIN_MLP_DOWN);
    check(region_fits(wt, fcproj, GEMM_ALIGN, wt_lo, wt_bytes) &&
              wt + fcproj == (const fp8 *)(wt_lo + wt_bytes),
          "self-test: layer 1's fcproj W^T ends its buffer exactly");
    check(!region_fits(wt, fcproj + 1, GEMM_ALIGN, wt_lo, wt_bytes),
          "self-test: layer 1's fcproj W^T one element longer is caught");
    check(planted_failures(&m, check_layout) == 0, "self-test: the self-test's own layout passes as carved");
    m.recompute = 0; // planned with --recompute 1 (one layer of activations), run as if without
    check(planted_failures(&m, check_layout) > 0,
          "self-test: activations of every layer in a --recompute 1 plan are caught");
    carve(&m, &cfg, &opts, 3, 2);
    m.sharding.shards.rank = 3; // a rank past the world: its chunks end past the gathered units
    check(planted_failures(&m, check_layout) > 0, "self-test: a rank past the world size is caught");
    self_test_llama();
}

// gpt_alloc's choice before it allocates (fit_attention_workspace), given the device's free bytes: the plan
// with cuDNN's attention workspace where it fits beside the runtime reserve (memory_plan.h); where it does
// not, auto plans without it and says why, and --attention fast exits with one error.
static void check_attention_fit(void) {
    GPTConfig cfg = small_config(2, 64, 2, 0);
    TrainOptions opts = layout_options(DTYPE_BFLOAT16, 0, 0, 2, 16);
    opts.attention = ATTENTION_FAST;
    GPT m;
    carve(&m, &cfg, &opts, 1, 0);
    const size_t total = m.plan.total, workspace = m.plan.bytes[BUF_ATTENTION_WORKSPACE];
    const size_t needed = total + RUNTIME_RESERVE_BYTES;
    char declined[160] = "";
    fit_attention_workspace(&m, &cfg, ATTENTION_AUTO, needed, declined, sizeof declined);
    check(m.plan.total == total && declined[0] == '\0',
          "attention fit: the plan with the workspace fits as it is");
    fit_attention_workspace(&m, &cfg, ATTENTION_AUTO, needed - 1, declined, sizeof declined);
    check(m.plan.bytes[BUF_ATTENTION_WORKSPACE] == 0 && m.plan.total == total - workspace &&
              strstr(declined, "auto: cuDNN's deterministic backward needs a"),
          "attention fit: auto, one byte short, plans without the workspace and says why");
    carve(&m, &cfg, &opts, 1, 0);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        freopen("/dev/null", "w", stderr);
        fit_attention_workspace(&m, &cfg, ATTENTION_FAST, needed - 1, declined, sizeof declined);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    check(WIFEXITED(status) && WEXITSTATUS(status) == 1,
          "attention fit: --attention fast, one byte short, exits");
}

int main(void) {
    double start = wall_time_ms();
    check_attention_fit();
    self_test();
    long padded_units = 0;
    int small = check_small_models(&padded_units), big = check_70b("gpt-70B") + check_70b("llama2-70B"),
        block = check_block_layouts();
    check(padded_units > 0,
          "some units' sizes are not multiples of the world size (their chunks carry padding)");
    printf("%d small layouts, %d 70B layouts, %d block-recipe layouts, %ld units with padded chunks, %ld "
           "regions "
           "checked, %.2f s\n",
           small, big, block, padded_units, regions_checked, (wall_time_ms() - start) / 1e3);
    return test_summary();
}

// train_gpt_fp8.cu: the CUDA trainer. The same model, flags, log line and files as train_gpt.c (the CPU
// reference, which emulates this file's roundings), with
//   --dtype bfloat16: BF16 activations and weights, cuBLASLt BF16 GEMMs with FP32 accumulation;
//   --dtype float8:   the four linear layers of every block in FP8 through cuBLASLt: forward E4M3 x E4M3
//                     (fast accumulation), data gradient E5M2 x E4M3 and weight gradient E5M2 x E4M3
//                     (full accumulation into FP32), per-tensor scales (delayed or current recipe).
// FP8 GEMMs on Hopper need K-major operands, so the forward keeps each linear's input transposed in FP8
// for the weight gradient (half the bytes of the BF16 copy the bfloat16 path keeps), and the weight
// casts keep W^T in FP8 for the data gradient. No host synchronisation inside a step: scales, the
// NaN/Inf guard and the optimizer all run on the device; a micro-step and the update are each one
// CUDA Graph launch when --cuda_graph 1.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "cli.h"
#include "common.h"
#include "dataloader.h"
#include "debug_state.h"
#include "fp8_scaling.h"
#include "gpt_model.h"
#include "gpu/common.cuh"
#include "health.h"
#include "gpu/fp8.cuh"
#include "gpu/gemm.cuh"
#include "gpu/layers.cuh"
#include "memory_plan.h"
#include "sampling.h"
#include "train_log.h"

// ----------------------------------------------------------------------------
// The model on the device

typedef struct {
    GPTConfig config;
    int dtype, recipe, margin, B, T, accum_steps;
    int keeps_gemm_inputs; // planned for bfloat16: the BF16 GEMM inputs of every layer are kept
    size_t num_params;
    MemoryPlan plan;
    char *memory; // the one allocation the plan carves
    float *params, *grads, *m, *v;
    bf16 *params_bf16;
    fp8 *weights_fp8, *weights_fp8_t; // (L, 12C^2) in linear order qkv, attproj, fc, fcproj; W and W^T
    bf16 *encoded, *residual2, *residual3, *qkv, *fch, *ln1, *atty, *ln2, *fch_gelu, *lnf, *logits;
    float *ln1_stats, *ln2_stats, *att_lse, *lnf_stats, *losses;
    fp8 *inputs_fp8_t; // (L, 7C, N): each linear's input transposed, offsets as the weights' input widths
    bf16 *dresidual, *dc, *dqkv, *dfch;
    float *att_delta, *reduce_scratch;
    fp8 *cast_fp8, *cast_fp8_t;
    // inputs (N), targets (N), embedding-gradient buckets: positions (N), tokens (N), starts (N+1), count (1)
    int *tokens;
    Fp8DeviceState fp8;
    StepParams *step_params, *step_params_host;    // device, pinned host
    StepResults *step_results, *step_results_host; // device, pinned host
    int *tokens_host;                              // pinned staging of the tokens area
    float *sample_row;                             // (Vp) host logits of one position, for sampling
    bf16 *sample_row_bf16;                         // (Vp) its device-format copy
    cudaEvent_t tokens_copied;
    GemmContext gemm;
    cudaStream_t stream;
    cudaGraphExec_t micro_graph, update_graph;
} GPT;

// BUF_STEP holds StepParams, then StepResults at +PLAN_ALIGN (memory_plan.h).
static_assert(sizeof(StepParams) <= PLAN_ALIGN && sizeof(StepResults) <= PLAN_ALIGN,
              "memory_plan.h: BUF_STEP is too small for StepParams and StepResults");

static void *plan_ptr(GPT *model, BufferId id) {
    return model->plan.bytes[id] ? model->memory + model->plan.offset[id] : NULL;
}

static void copy_to_host(void *dst, const void *src, size_t bytes) {
    cuda_check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

static void copy_to_device(void *dst, const void *src, size_t bytes) {
    cuda_check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

static void gpt_alloc(GPT *model, const GPTConfig *cfg, const TrainOptions *opts, int B, int T,
                      int accum_steps) {
    memset(model, 0, sizeof(*model));
    model->config = *cfg;
    model->dtype = opts->dtype;
    model->recipe = opts->fp8_recipe;
    model->margin = opts->fp8_margin;
    model->keeps_gemm_inputs = opts->dtype == DTYPE_BFLOAT16;
    model->B = B;
    model->T = T;
    model->accum_steps = accum_steps;
    model->num_params = param_count(cfg);
    PlanSettings settings = plan_settings_from_options(opts, B, T, 1);
    memory_plan_compute(&model->plan, cfg, &settings);
    size_t free_bytes = 0, total_bytes = 0;
    cuda_check(cudaMemGetInfo(&free_bytes, &total_bytes));
    if (model->plan.total > free_bytes)
        fail("model does not fit: needs %.2f GiB of device memory, %.2f GiB free (lower --batch_size or "
             "--seq_len)",
             model->plan.total / 1073741824.0, free_bytes / 1073741824.0);
    cuda_check(cudaMalloc((void **)&model->memory, model->plan.total));
    cuda_check(cudaMemset(model->memory, 0, model->plan.total));
    model->params = (float *)plan_ptr(model, BUF_PARAMS);
    model->grads = (float *)plan_ptr(model, BUF_GRADS);
    model->m = (float *)plan_ptr(model, BUF_ADAM_M);
    model->v = (float *)plan_ptr(model, BUF_ADAM_V);
    model->params_bf16 = (bf16 *)plan_ptr(model, BUF_PARAMS_BF16);
    model->weights_fp8 = (fp8 *)plan_ptr(model, BUF_WEIGHTS_FP8);
    model->weights_fp8_t = (fp8 *)plan_ptr(model, BUF_WEIGHTS_FP8_T);
    model->encoded = (bf16 *)plan_ptr(model, BUF_ENCODED);
    model->residual2 = (bf16 *)plan_ptr(model, BUF_RESIDUAL2);
    model->residual3 = (bf16 *)plan_ptr(model, BUF_RESIDUAL3);
    model->ln1_stats = (float *)plan_ptr(model, BUF_LN1_STATS);
    model->ln2_stats = (float *)plan_ptr(model, BUF_LN2_STATS);
    model->qkv = (bf16 *)plan_ptr(model, BUF_QKV);
    model->att_lse = (float *)plan_ptr(model, BUF_ATT_LSE);
    model->fch = (bf16 *)plan_ptr(model, BUF_FCH);
    model->ln1 = (bf16 *)plan_ptr(model, BUF_LN1);
    model->atty = (bf16 *)plan_ptr(model, BUF_ATTY);
    model->ln2 = (bf16 *)plan_ptr(model, BUF_LN2);
    model->fch_gelu = (bf16 *)plan_ptr(model, BUF_FCH_GELU);
    model->inputs_fp8_t = (fp8 *)plan_ptr(model, BUF_INPUT_FP8_T);
    model->lnf = (bf16 *)plan_ptr(model, BUF_LNF);
    model->lnf_stats = (float *)plan_ptr(model, BUF_LNF_STATS);
    model->logits = (bf16 *)plan_ptr(model, BUF_LOGITS);
    model->losses = (float *)plan_ptr(model, BUF_LOSSES);
    model->dresidual = (bf16 *)plan_ptr(model, BUF_DRESIDUAL);
    model->dc = (bf16 *)plan_ptr(model, BUF_DC);
    model->dqkv = (bf16 *)plan_ptr(model, BUF_DQKV);
    model->dfch = (bf16 *)plan_ptr(model, BUF_DFCH);
    model->att_delta = (float *)plan_ptr(model, BUF_ATT_DELTA);
    model->cast_fp8 = (fp8 *)plan_ptr(model, BUF_CAST_FP8);
    model->cast_fp8_t = (fp8 *)plan_ptr(model, BUF_CAST_FP8_T);
    model->reduce_scratch = (float *)plan_ptr(model, BUF_REDUCE_SCRATCH);
    model->tokens = (int *)plan_ptr(model, BUF_TOKENS);
    fp8_state_views(&model->fp8, (float *)plan_ptr(model, BUF_FP8_STATE), cfg->num_layers,
                    opts->amax_history);
    model->step_params = (StepParams *)plan_ptr(model, BUF_STEP);
    model->step_results = (StepResults *)(model->memory + model->plan.offset[BUF_STEP] + PLAN_ALIGN);
    cuda_check(cudaMallocHost((void **)&model->step_params_host, sizeof(StepParams)));
    cuda_check(cudaMallocHost((void **)&model->step_results_host, sizeof(StepResults)));
    cuda_check(cudaMallocHost((void **)&model->tokens_host, model->plan.bytes[BUF_TOKENS]));
    cuda_check(cudaEventCreateWithFlags(&model->tokens_copied, cudaEventDisableTiming));
    model->sample_row = (float *)malloc_check(cfg->padded_vocab_size * sizeof(float), "sampling");
    model->sample_row_bf16 = (bf16 *)malloc_check(cfg->padded_vocab_size * sizeof(bf16), "sampling");
    cuda_check(cudaStreamCreate(&model->stream));
    gemm_init(&model->gemm, plan_ptr(model, BUF_GEMM_WORKSPACE), GEMM_WORKSPACE_BYTES);
    size_t N = (size_t)B * T, scratch = reduce_scratch_floats(cfg, B, T);
    if (layernorm_backward_scratch_floats((int)N, cfg->channels) > scratch ||
        bias_backward_scratch_floats((int)N, 4 * cfg->channels) > scratch ||
        global_norm_squared_scratch_floats(model->num_params) > scratch)
        fail("memory_plan.h: reduce_scratch_floats is smaller than a kernel's scratch (a bug)");
}

// ----------------------------------------------------------------------------
// Weights: the BF16 copy and the FP8 casts follow every change of the master weights

static size_t linear_weight_offset_fp8(const GPTConfig *cfg, int layer, int linear) {
    size_t offset = (size_t)layer * linear_weights_per_layer(cfg);
    for (int lin = 0; lin < linear; lin++)
        offset += (size_t)linear_out_features(cfg, lin) * linear_in_features(cfg, lin);
    return offset;
}

// Exact amax of each FP32 master weight, its scale, and W, W^T in E4M3.
static void cast_weights(GPT *model) {
    const GPTConfig *cfg = &model->config;
    Fp8DeviceState *s = &model->fp8;
    for (int l = 0; l < cfg->num_layers; l++) {
        for (int lin = 0; lin < NUM_BLOCK_LINEARS; lin++) {
            int w = l * NUM_BLOCK_LINEARS + lin, OC = linear_out_features(cfg, lin),
                IC = linear_in_features(cfg, lin);
            const float *master = model->params + param_offset(cfg, linear_weight_tensor(lin), l);
            size_t offset = linear_weight_offset_fp8(cfg, l, lin);
            measure_scale<float>(&s->weight_amax[w], &s->weight_scale[w], &s->weight_descale[w], master,
                                 (size_t)OC * IC, FP8_E4M3, model->margin, model->stream);
            cast_transpose<float>(model->weights_fp8 + offset, model->weights_fp8_t + offset, NULL,
                                  &s->counts[2 * (s->num_tensors + w)], master, OC, IC, &s->weight_scale[w],
                                  FP8_E4M3, model->stream);
        }
    }
}

static void refresh_compute_weights(GPT *model) {
    to_bf16_kernel<<<1024, 256, 0, model->stream>>>(model->params_bf16, model->params, model->num_params);
    cuda_check_launch();
    if (model->dtype == DTYPE_FLOAT8) cast_weights(model);
}

static const bf16 *weight_bf16(GPT *model, int tensor, int layer) {
    return model->params_bf16 + param_offset(&model->config, tensor, layer);
}

// ----------------------------------------------------------------------------
// Linear layers: forward and backward side by side, BF16 or FP8

static GemmOperand bf16_operand(const bf16 *data) {
    GemmOperand op = {data, CUDA_R_16BF, NULL};
    return op;
}

static GemmOperand fp8_operand(const fp8 *data, Fp8Format format, const float *descale) {
    GemmOperand op = {data, format == FP8_E4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2, descale};
    return op;
}

// Casts x (rows, cols) with the scale of tensor `index` into out / out_t. delayed: this step's scale;
// current: measure first, then cast with the exact scale. In training (record) the cast adds to the
// step's amax and telemetry counts, as the CPU's fp8_cast.
static void fp8_cast(GPT *model, int index, const bf16 *x, int rows, int cols, fp8 *out, fp8 *out_t,
                     int record, Fp8Format format) {
    Fp8DeviceState *s = &model->fp8;
    if (model->recipe == FP8_RECIPE_CURRENT)
        measure_scale<bf16>(&s->amax_measure[index], &s->scale[index], &s->descale[index], x,
                            (size_t)rows * cols, format, model->margin, model->stream);
    cast_transpose<bf16>(out, out_t, record ? &s->amax_current[index] : NULL,
                         record ? &s->counts[2 * index] : NULL, x, rows, cols, &s->scale[index], format,
                         model->stream);
}

static fp8 *saved_input_t(GPT *model, int layer, int linear) {
    const GPTConfig *cfg = &model->config;
    size_t N = (size_t)model->B * model->T, C = cfg->channels;
    // in units of C: qkv (C wide), attproj (C), fc (C), fcproj (4C)
    static const int column_offset[NUM_BLOCK_LINEARS] = {0, 1, 2, 3};
    return model->inputs_fp8_t + ((size_t)layer * 7 + column_offset[linear]) * C * N;
}

// out (N,OC) = inp (N,IC) . W^T + bias
static void linear_forward(GPT *model, int layer, int linear, bf16 *out, const bf16 *inp, int record_amax) {
    const GPTConfig *cfg = &model->config;
    int N = model->B * model->T, OC = linear_out_features(cfg, linear), IC = linear_in_features(cfg, linear);
    int weight_tensor = linear_weight_tensor(linear);
    const bf16 *bias = weight_bf16(model, weight_tensor + 1, layer);
    if (model->dtype == DTYPE_FLOAT8) {
        int index = fp8_tensor_index(layer, linear, 0), w = layer * NUM_BLOCK_LINEARS + linear;
        fp8_cast(model, index, inp, N, IC, model->cast_fp8, saved_input_t(model, layer, linear), record_amax,
                 FP8_E4M3);
        const fp8 *weight = model->weights_fp8 + linear_weight_offset_fp8(cfg, layer, linear);
        gemm(&model->gemm, out, CUDA_R_16BF,
             fp8_operand(model->cast_fp8, FP8_E4M3, &model->fp8.descale[index]), 0,
             fp8_operand(weight, FP8_E4M3, &model->fp8.weight_descale[w]), 1, N, OC, IC, bias, 0, 1,
             model->stream);
    } else {
        gemm(&model->gemm, out, CUDA_R_16BF, bf16_operand(inp), 0,
             bf16_operand(weight_bf16(model, weight_tensor, layer)), 1, N, OC, IC, bias, 0, 0, model->stream);
    }
}

// dinp (N,IC) = dout . W; dW (OC,IC) += dout^T . inp; dbias += column sums of dout
static void linear_backward(GPT *model, int layer, int linear, bf16 *dinp, const bf16 *dout,
                            const bf16 *inp) {
    const GPTConfig *cfg = &model->config;
    int N = model->B * model->T, OC = linear_out_features(cfg, linear), IC = linear_in_features(cfg, linear);
    int weight_tensor = linear_weight_tensor(linear);
    float *dweight = model->grads + param_offset(cfg, weight_tensor, layer);
    float *dbias = model->grads + param_offset(cfg, weight_tensor + 1, layer);
    bias_backward(dbias, dout, N, OC, model->reduce_scratch, model->stream);
    if (model->dtype == DTYPE_FLOAT8) {
        int index = fp8_tensor_index(layer, linear, 1), w = layer * NUM_BLOCK_LINEARS + linear;
        int input_index = fp8_tensor_index(layer, linear, 0);
        fp8_cast(model, index, dout, N, OC, model->cast_fp8, model->cast_fp8_t, 1, FP8_E5M2);
        const fp8 *weight_t = model->weights_fp8_t + linear_weight_offset_fp8(cfg, layer, linear);
        GemmOperand dout_q = fp8_operand(model->cast_fp8, FP8_E5M2, &model->fp8.descale[index]);
        GemmOperand dout_q_t = fp8_operand(model->cast_fp8_t, FP8_E5M2, &model->fp8.descale[index]);
        // dinp (N,IC) = dout_q (N,OC) . (W^T (IC,OC))^T
        gemm(&model->gemm, dinp, CUDA_R_16BF, dout_q, 0,
             fp8_operand(weight_t, FP8_E4M3, &model->fp8.weight_descale[w]), 1, N, IC, OC, NULL, 0, 0,
             model->stream);
        // dW (OC,IC) += dout^T (OC,N) . (x^T (IC,N))^T
        gemm(&model->gemm, dweight, CUDA_R_32F, dout_q_t, 0,
             fp8_operand(saved_input_t(model, layer, linear), FP8_E4M3, &model->fp8.descale[input_index]), 1,
             OC, IC, N, NULL, 1, 0, model->stream);
    } else {
        gemm(&model->gemm, dinp, CUDA_R_16BF, bf16_operand(dout), 0,
             bf16_operand(weight_bf16(model, weight_tensor, layer)), 0, N, IC, OC, NULL, 0, 0, model->stream);
        gemm(&model->gemm, dweight, CUDA_R_32F, bf16_operand(dout), 1, bf16_operand(inp), 0, OC, IC, N, NULL,
             1, 0, model->stream);
    }
}

// ----------------------------------------------------------------------------
// Forward and backward of the whole model, on the tokens in model->tokens

// The per-layer buffers the bfloat16 path keeps; the float8 path reuses one layer's worth, its backward
// reads the FP8 transposes instead.
static bf16 *gemm_input(GPT *model, bf16 *base, int layer, size_t per_layer) {
    return model->keeps_gemm_inputs ? base + layer * per_layer : base;
}

static void gpt_forward(GPT *model, int record_amax) {
    const GPTConfig *cfg = &model->config;
    int B = model->B, T = model->T, C = cfg->channels, NH = cfg->num_heads, L = cfg->num_layers, N = B * T;
    size_t NC = (size_t)N * C;
    cudaStream_t stream = model->stream;
    const int *inputs = model->tokens;
    encoder_forward(model->encoded, inputs, weight_bf16(model, PT_WTE, 0), weight_bf16(model, PT_WPE, 0), B,
                    T, C, stream);
    for (int l = 0; l < L; l++) {
        const bf16 *residual = l == 0 ? model->encoded : model->residual3 + (l - 1) * NC;
        bf16 *ln1 = gemm_input(model, model->ln1, l, NC), *atty = gemm_input(model, model->atty, l, NC);
        bf16 *ln2 = gemm_input(model, model->ln2, l, NC),
             *fch_gelu = gemm_input(model, model->fch_gelu, l, 4 * NC);
        bf16 *qkv = model->qkv + l * 3 * NC, *fch = model->fch + l * 4 * NC,
             *residual2 = model->residual2 + l * NC;
        float *ln1_stats = model->ln1_stats + (size_t)l * 2 * N,
              *ln2_stats = model->ln2_stats + (size_t)l * 2 * N;
        layernorm_forward(ln1, ln1_stats, ln1_stats + N, residual, weight_bf16(model, PT_LN1W, l),
                          weight_bf16(model, PT_LN1B, l), N, C, stream);
        linear_forward(model, l, LIN_QKV, qkv, ln1, record_amax);
        attention_forward(atty, model->att_lse + (size_t)l * N * NH, qkv, B, T, C, NH, stream);
        linear_forward(model, l, LIN_ATTPROJ, model->dc, atty, record_amax); // dc: scratch in the forward
        residual_forward(residual2, residual, model->dc, NC, stream);
        layernorm_forward(ln2, ln2_stats, ln2_stats + N, residual2, weight_bf16(model, PT_LN2W, l),
                          weight_bf16(model, PT_LN2B, l), N, C, stream);
        linear_forward(model, l, LIN_FC, fch, ln2, record_amax);
        gelu_forward(fch_gelu, fch, 4 * NC, stream);
        linear_forward(model, l, LIN_FCPROJ, model->dc, fch_gelu, record_amax);
        residual_forward(model->residual3 + l * NC, residual2, model->dc, NC, stream);
    }
    layernorm_forward(model->lnf, model->lnf_stats, model->lnf_stats + N, model->residual3 + (L - 1) * NC,
                      weight_bf16(model, PT_LNFW, 0), weight_bf16(model, PT_LNFB, 0), N, C, stream);
    // LM head tied to wte, BF16: (N,C) . (Vp,C)^T -> (N,Vp)
    gemm(&model->gemm, model->logits, CUDA_R_16BF, bf16_operand(model->lnf), 0,
         bf16_operand(weight_bf16(model, PT_WTE, 0)), 1, N, cfg->padded_vocab_size, C, NULL, 0, 0, stream);
}

// Losses of the last forward, and with write_dlogits the loss gradient in place of the logits.
static void gpt_loss(GPT *model, int write_dlogits, float *loss_sum) {
    const GPTConfig *cfg = &model->config;
    int N = model->B * model->T;
    float dloss = 1.0f / ((float)N * model->accum_steps);
    crossentropy_forward_backward(model->logits, model->losses, model->tokens + N, dloss, N, cfg->vocab_size,
                                  cfg->padded_vocab_size, write_dlogits, model->stream);
    accumulate_mean_kernel<<<1, 256, 0, model->stream>>>(loss_sum, model->losses, N);
    cuda_check_launch();
}

static void gpt_backward(GPT *model) {
    const GPTConfig *cfg = &model->config;
    int B = model->B, T = model->T, C = cfg->channels, NH = cfg->num_heads, L = cfg->num_layers, N = B * T;
    int Vp = cfg->padded_vocab_size;
    size_t NC = (size_t)N * C;
    cudaStream_t stream = model->stream;
    float *dw = model->grads;
    const bf16 *dlogits = model->logits;
    gemm(&model->gemm, model->dc, CUDA_R_16BF, bf16_operand(dlogits), 0,
         bf16_operand(weight_bf16(model, PT_WTE, 0)), 0, N, C, Vp, NULL, 0, 0, stream);
    gemm(&model->gemm, dw + param_offset(cfg, PT_WTE, 0), CUDA_R_32F, bf16_operand(dlogits), 1,
         bf16_operand(model->lnf), 0, Vp, C, N, NULL, 1, 0, stream);
    cuda_check(cudaMemsetAsync(model->dresidual, 0, NC * sizeof(bf16), stream));
    layernorm_backward(model->dresidual, dw + param_offset(cfg, PT_LNFW, 0),
                       dw + param_offset(cfg, PT_LNFB, 0), model->dc, model->residual3 + (L - 1) * NC,
                       weight_bf16(model, PT_LNFW, 0), model->lnf_stats, model->lnf_stats + N, N, C,
                       model->reduce_scratch, stream);
    for (int l = L - 1; l >= 0; l--) {
        const bf16 *residual = l == 0 ? model->encoded : model->residual3 + (l - 1) * NC;
        const bf16 *ln1 = gemm_input(model, model->ln1, l, NC), *atty = gemm_input(model, model->atty, l, NC);
        const bf16 *ln2 = gemm_input(model, model->ln2, l, NC);
        const bf16 *fch_gelu = gemm_input(model, model->fch_gelu, l, 4 * NC);
        const float *ln1_stats = model->ln1_stats + (size_t)l * 2 * N,
                    *ln2_stats = model->ln2_stats + (size_t)l * 2 * N;
        linear_backward(model, l, LIN_FCPROJ, model->dfch, model->dresidual, fch_gelu);
        gelu_backward(model->dfch, model->fch + l * 4 * NC, 4 * NC, stream);
        linear_backward(model, l, LIN_FC, model->dc, model->dfch, ln2);
        layernorm_backward(model->dresidual, dw + param_offset(cfg, PT_LN2W, l),
                           dw + param_offset(cfg, PT_LN2B, l), model->dc, model->residual2 + l * NC,
                           weight_bf16(model, PT_LN2W, l), ln2_stats, ln2_stats + N, N, C,
                           model->reduce_scratch, stream);
        linear_backward(model, l, LIN_ATTPROJ, model->dc, model->dresidual, atty);
        attention_backward(model->dqkv, model->att_delta, model->dc, model->qkv + l * 3 * NC,
                           model->att_lse + (size_t)l * N * NH, B, T, C, NH, stream);
        linear_backward(model, l, LIN_QKV, model->dc, model->dqkv, ln1);
        layernorm_backward(model->dresidual, dw + param_offset(cfg, PT_LN1W, l),
                           dw + param_offset(cfg, PT_LN1B, l), model->dc, residual,
                           weight_bf16(model, PT_LN1W, l), ln1_stats, ln1_stats + N, N, C,
                           model->reduce_scratch, stream);
    }
    const int *buckets = model->tokens + 2 * N;
    encoder_backward(
        dw + param_offset(cfg, PT_WTE, 0), dw + param_offset(cfg, PT_WPE, 0), model->dresidual, model->tokens,
        buckets, buckets + 2 * N, buckets + N, N, B, T, C, model->reduce_scratch,
        stream); // N buckets: the unused ones are empty, so the launch does not depend on the batch
}

// ----------------------------------------------------------------------------
// Steps

// Stages a batch (and its embedding-gradient buckets) and copies it to the device, in stream order.
// The pinned staging is reused only once its previous copy has run.
static void upload_batch(GPT *model, const int *inputs, const int *targets) {
    int N = model->B * model->T;
    int *host = model->tokens_host;
    cuda_check(cudaEventSynchronize(model->tokens_copied));
    memcpy(host, inputs, N * sizeof(int));
    memcpy(host + N, targets, N * sizeof(int));
    int *positions = host + 2 * N, *bucket_tokens = host + 3 * N, *starts = host + 4 * N;
    encoder_buckets_host(inputs, N, positions, starts, bucket_tokens, &host[5 * N + 1]);
    cuda_check(cudaMemcpyAsync(model->tokens, host, model->plan.bytes[BUF_TOKENS], cudaMemcpyHostToDevice,
                               model->stream));
    cuda_check(cudaEventRecord(model->tokens_copied, model->stream));
}

static void micro_step(GPT *model) {
    gpt_forward(model, 1);
    gpt_loss(model, 1, &model->step_results->loss_sum);
    gpt_backward(model);
}

// After the micro-steps: gradient norm, the skip decision, AdamW, the new weight casts and scales, and
// zeroed gradients for the next step.
static void update_step(GPT *model) {
    cudaStream_t stream = model->stream;
    inject_nan_kernel<<<1, 1, 0, stream>>>(model->grads, model->step_params);
    cuda_check_launch();
    global_norm_squared(&model->step_results->norm_squared, model->grads, model->num_params,
                        model->reduce_scratch, stream);
    step_decide_kernel<<<1, 1, 0, stream>>>(model->step_results, model->step_params);
    cuda_check_launch();
    adamw_kernel<<<1024, 256, 0, stream>>>(model->params, model->params_bf16, model->grads, model->m,
                                           model->v, model->num_params, model->config, model->step_params,
                                           model->step_results);
    cuda_check_launch();
    if (model->dtype == DTYPE_FLOAT8) {
        cast_weights(model);
        fp8_end_step_kernel<<<ceil_div(model->fp8.num_tensors, 128), 128, 0, stream>>>(
            model->fp8, model->recipe == FP8_RECIPE_DELAYED, model->step_params, model->step_results);
        cuda_check_launch();
    }
    cuda_check(cudaMemsetAsync(model->grads, 0, model->num_params * sizeof(float), stream));
}

typedef void (*StepFunction)(GPT *model);

// Runs fn on the stream; with graphs, the first call runs it directly (cuBLASLt picks its algorithms,
// kernels load), the second captures it, and later calls replay the capture.
static void run_captured(GPT *model, StepFunction fn, cudaGraphExec_t *exec, int use_graph, int *calls) {
    if (!use_graph || (*calls)++ == 0) {
        fn(model);
        return;
    }
    if (!*exec) {
        cudaGraph_t graph;
        cuda_check(cudaStreamBeginCapture(model->stream, cudaStreamCaptureModeThreadLocal));
        fn(model);
        cuda_check(cudaStreamEndCapture(model->stream, &graph));
        cuda_check(cudaGraphInstantiate(exec, graph, 0));
        cuda_check(cudaGraphDestroy(graph));
    }
    cuda_check(cudaGraphLaunch(*exec, model->stream));
}

// The host writes the pinned copy only after the previous step's read_step_results synchronised the
// stream, so the asynchronous copy of the last values has completed.
static void set_step_params(GPT *model, const TrainOptions *opts, int step, long updates_applied,
                            const StepGuard *guard) {
    StepParams *p = model->step_params_host;
    step_guard_thresholds(guard, opts, &p->max_loss, &p->max_norm);
    p->inject_nan = step + 1 == opts->inject_nan_step;
    p->lr = learning_rate(opts, step);
    p->beta1 = opts->beta1;
    p->beta2 = opts->beta2;
    p->eps = opts->eps;
    p->weight_decay = opts->weight_decay;
    p->grad_clip = opts->grad_clip;
    p->beta1_correction = 1.0f - powf(opts->beta1, (float)(updates_applied + 1));
    p->beta2_correction = 1.0f - powf(opts->beta2, (float)(updates_applied + 1));
    p->inv_accum_steps = 1.0f / model->accum_steps;
    p->fp8_margin = opts->fp8_margin;
    p->history_len = opts->amax_history;
    p->step = step;
    cuda_check(
        cudaMemcpyAsync(model->step_params, p, sizeof(StepParams), cudaMemcpyHostToDevice, model->stream));
}

static void read_step_results(GPT *model) {
    cuda_check(cudaMemcpyAsync(model->step_results_host, model->step_results, sizeof(StepResults),
                               cudaMemcpyDeviceToHost, model->stream));
    cuda_check(cudaStreamSynchronize(model->stream));
}

static float evaluate(GPT *model, DataLoader *loader, int num_batches) {
    dataloader_reset(loader);
    cuda_check(cudaMemsetAsync(&model->step_results->val_loss_sum, 0, sizeof(float), model->stream));
    for (int i = 0; i < num_batches; i++) {
        dataloader_next_batch(loader);
        upload_batch(model, loader->inputs, loader->targets);
        gpt_forward(model, 0);
        gpt_loss(model, 0, &model->step_results->val_loss_sum);
    }
    read_step_results(model);
    return model->step_results_host->val_loss_sum / num_batches;
}

// sampling.h's view of the model: a forward over tokens, then one position's logits on the host.
static const float *gpu_position_logits(void *model_ptr, const int *tokens, int position) {
    GPT *model = (GPT *)model_ptr;
    int Vp = model->config.padded_vocab_size;
    upload_batch(model, tokens, tokens);
    gpt_forward(model, 0);
    copy_to_host(model->sample_row_bf16, model->logits + (size_t)position * Vp, Vp * sizeof(bf16));
    for (int v = 0; v < Vp; v++) model->sample_row[v] = __bfloat162float(model->sample_row_bf16[v]);
    return model->sample_row;
}

// ----------------------------------------------------------------------------
// Checkpoints: the same files as train_cpu

// The state file's arrays, staged on the host: moments and amax histories copied from the device, the
// step guard's window where it lives (host).
static void state_blocks(GPT *model, float *host, StepGuard *guard, StateBlock blocks[NUM_STATE_BLOCKS]) {
    size_t P = model->num_params, H = (size_t)model->fp8.num_tensors * model->fp8.history_len;
    blocks[STATE_ADAM_M] = StateBlock{host, P};
    blocks[STATE_ADAM_V] = StateBlock{host + P, P};
    blocks[STATE_AMAX_HISTORY] = StateBlock{host + 2 * P, H};
    blocks[STATE_GUARD_HISTORY] = StateBlock{guard->history, 2 * (size_t)guard->window};
}

static void save_checkpoint(GPT *model, const TrainOptions *opts, TrainState *state, StepGuard *guard) {
    size_t P = model->num_params, H = (size_t)model->fp8.num_tensors * model->fp8.history_len;
    float *host = (float *)malloc_check((3 * P + H) * sizeof(float), "checkpoint staging");
    StateBlock blocks[NUM_STATE_BLOCKS];
    state_blocks(model, host + P, guard, blocks);
    cuda_check(cudaStreamSynchronize(model->stream));
    copy_to_host(host, model->params, P * sizeof(float));
    copy_to_host(blocks[STATE_ADAM_M].data, model->m, P * sizeof(float));
    copy_to_host(blocks[STATE_ADAM_V].data, model->v, P * sizeof(float));
    copy_to_host(blocks[STATE_AMAX_HISTORY].data, model->fp8.amax_history, H * sizeof(float));
    char model_path[CHECKPOINT_PATH_LEN], state_path[CHECKPOINT_PATH_LEN];
    checkpoint_paths(opts->output_dir, (long)state->step, state->rank, model_path, state_path,
                     sizeof(model_path));
    save_model_file(model_path, host, &model->config);
    save_state_file(state_path, state, &model->config, blocks);
    write_latest_checkpoint(opts->output_dir, (long)state->step);
    printf("checkpoint | step %ld | %s\n", (long)state->step, model_path);
    free(host);
}

static void load_checkpoint(GPT *model, const TrainOptions *opts, TrainState *state, StepGuard *guard) {
    long step = read_latest_checkpoint(opts->output_dir);
    char model_path[CHECKPOINT_PATH_LEN], state_path[CHECKPOINT_PATH_LEN];
    checkpoint_paths(opts->output_dir, step, state->rank, model_path, state_path, sizeof(model_path));
    float *params = load_checkpoint_model(model_path, &model->config);
    size_t P = model->num_params, H = (size_t)model->fp8.num_tensors * model->fp8.history_len;
    float *host = (float *)malloc_check((2 * P + H) * sizeof(float), "checkpoint staging");
    StateBlock blocks[NUM_STATE_BLOCKS];
    state_blocks(model, host, guard, blocks);
    load_state_file(state_path, state, &model->config, blocks);
    guard->count = state->guard_count;
    copy_to_device(model->params, params, P * sizeof(float));
    copy_to_device(model->m, blocks[STATE_ADAM_M].data, P * sizeof(float));
    copy_to_device(model->v, blocks[STATE_ADAM_V].data, P * sizeof(float));
    copy_to_device(model->fp8.amax_history, blocks[STATE_AMAX_HISTORY].data, H * sizeof(float));
    free(host);
    free(params);
    printf("resumed | step %ld | %s\n", step, model_path);
}

// ----------------------------------------------------------------------------
// Health: the BF16 shadow check, FP8 telemetry, energy

// The loss of the batch in model->tokens through the bfloat16 path on the same weights (the BF16 copy);
// runs op by op and leaves the FP8 state untouched. Reads back, so it synchronises: only on check steps.
static float bf16_shadow_loss(GPT *model) {
    int dtype = model->dtype;
    model->dtype = DTYPE_BFLOAT16;
    cuda_check(cudaMemsetAsync(&model->step_results->val_loss_sum, 0, sizeof(float), model->stream));
    gpt_forward(model, 0);
    gpt_loss(model, 0, &model->step_results->val_loss_sum);
    model->dtype = dtype;
    read_step_results(model);
    return model->step_results_host->val_loss_sum;
}

// The step's telemetry from the device (amaxes, scales, counters), then fresh counters.
static void fetch_fp8_stats(GPT *model, Fp8Stats *stats) {
    const GPTConfig *cfg = &model->config;
    Fp8DeviceState *s = &model->fp8;
    int n = s->num_tensors, w = s->num_weights;
    unsigned long long *counts = (unsigned long long *)malloc_check(2 * (size_t)(n + w) * 8, "fp8 stats");
    copy_to_host(stats->amax, s->amax_last, n * sizeof(float));
    copy_to_host(stats->scale, s->scale, n * sizeof(float));
    copy_to_host(stats->amax + n, s->weight_amax, w * sizeof(float));
    copy_to_host(stats->scale + n, s->weight_scale, w * sizeof(float));
    copy_to_host(counts, s->counts, 2 * (size_t)(n + w) * sizeof(unsigned long long));
    cuda_check(
        cudaMemsetAsync(s->counts, 0, 2 * (size_t)(n + w) * sizeof(unsigned long long), model->stream));
    size_t N = (size_t)model->B * model->T * model->accum_steps;
    for (int t = 0; t < n + w; t++) {
        int linear = t < n ? (t / 2) % NUM_BLOCK_LINEARS : (t - n) % NUM_BLOCK_LINEARS;
        size_t OC = linear_out_features(cfg, linear), IC = linear_in_features(cfg, linear);
        stats->saturated[t] = counts[2 * t];
        stats->flushed[t] = counts[2 * t + 1];
        stats->elements[t] = t >= n ? OC * IC : (t % 2) ? N * OC : N * IC;
    }
    free(counts);
}

// Energy the GPU used during the run, from NVML loaded at run time (the binary runs where the driver
// library is absent, and then says so). NVML's handle is looked up by PCI bus id: its device order need
// not be CUDA's.
typedef struct {
    void *library;
    void *device;
    int (*get_energy)(void *device, unsigned long long *millijoules);
    unsigned long long start_millijoules;
    const char *unavailable; // why energy is not measured, or NULL
} EnergyMeter;

static void energy_meter_start(EnergyMeter *meter, int cuda_device) {
    memset(meter, 0, sizeof(*meter));
    meter->library = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!meter->library) {
        meter->unavailable = "libnvidia-ml.so.1 not found";
        return;
    }
    int (*init)(void) = (int (*)(void))dlsym(meter->library, "nvmlInit_v2");
    int (*by_bus_id)(const char *, void **) =
        (int (*)(const char *, void **))dlsym(meter->library, "nvmlDeviceGetHandleByPciBusId_v2");
    meter->get_energy =
        (int (*)(void *, unsigned long long *))dlsym(meter->library, "nvmlDeviceGetTotalEnergyConsumption");
    char bus_id[64];
    if (!init || !by_bus_id || !meter->get_energy || init() != 0 ||
        cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), cuda_device) != cudaSuccess ||
        by_bus_id(bus_id, &meter->device) != 0 ||
        meter->get_energy(meter->device, &meter->start_millijoules) != 0)
        meter->unavailable = "NVML has no energy counter for this GPU";
}

// Joules since energy_meter_start, or -1 when not measured.
static double energy_meter_joules(EnergyMeter *meter) {
    unsigned long long now = 0;
    if (meter->unavailable || meter->get_energy(meter->device, &now) != 0) return -1.0;
    return (now - meter->start_millijoules) / 1e3;
}

// ----------------------------------------------------------------------------
// Debug state (debug_state.h): the first step read back op by op, for test/compare_debug_state

static void logits_to_host(GPT *model, float *out) {
    size_t n = (size_t)model->B * model->T * model->config.padded_vocab_size;
    bf16 *staging = (bf16 *)malloc_check(n * sizeof(bf16), "debug state");
    copy_to_host(staging, model->logits, n * sizeof(bf16));
    for (size_t i = 0; i < n; i++) out[i] = __bfloat162float(staging[i]);
    free(staging);
}

static void debug_first_micro_step(GPT *model, DebugState *debug, const int *inputs, const int *targets) {
    size_t N = (size_t)model->B * model->T;
    gpt_forward(model, 1);
    logits_to_host(model, debug->logits);
    memcpy(debug->inputs, inputs, N * sizeof(int));
    memcpy(debug->targets, targets, N * sizeof(int));
    gpt_loss(model, 1, &model->step_results->loss_sum);
    gpt_backward(model);
    read_step_results(model);
    debug->loss = model->step_results_host->loss_sum;
    copy_to_host(debug->grads, model->grads, model->num_params * sizeof(float));
}

// ----------------------------------------------------------------------------
// Training

// Dense BF16 tensor-core peak of the card, for MFU: H100/H200 SXM (sm_90), B200 (sm_100), L40S (sm_89).
static double bf16_peak_flops(const cudaDeviceProp *props) {
    int sm = props->major * 10 + props->minor;
    return sm >= 100 ? 2250e12 : sm >= 90 ? 989.4e12 : sm >= 89 ? 362e12 : 0.0;
}

// Model FLOPs per token of a training step (forward + backward): 6 per parameter and the attention
// scores and values, 12 L C T (PaLM's accounting).
static double flops_per_token(const GPTConfig *cfg, size_t num_params, int T) {
    return 6.0 * num_params + 12.0 * cfg->num_layers * cfg->channels * T;
}

int main(int argc, char **argv) {
    TrainOptions opts;
    parse_options(&opts, argc, argv);
    validate_options(&opts);
    prepare_output_dir(opts.output_dir);
    if (opts.dtype == DTYPE_FLOAT32)
        fail("--dtype: float32 is the CPU reference's (train_cpu); the GPU trainer runs bfloat16 or float8");
    if (opts.sample_every > 0)
        fail("--sample_every: text sampling is done by train_cpu; the GPU trainer has none");
    GPTConfig cfg;
    float *init_params = NULL;
    if (*opts.init_from)
        init_params = load_model_file(opts.init_from, &cfg);
    else
        cfg = config_from_options(&opts);
    int B = opts.batch_size, T = resolve_seq_len(&opts, &cfg);
    size_t N = (size_t)B * T;
    int accum_steps = resolve_grad_accum_steps(&opts, T, 1);
    if (*opts.debug_state && (accum_steps != 1 || opts.resume))
        fail("--debug_state: needs a fresh run (no --resume) without gradient accumulation");
    check_attention_shape(cfg.channels, cfg.num_heads);
    if (opts.dtype == DTYPE_FLOAT8 || opts.eval_only) check_fp8_shapes(&cfg, B, T);

    DataLoader train_loader, val_loader;
    dataloader_init(&train_loader, opts.train_data, B, T, 0, 1, opts.shuffle, (uint64_t)opts.seed,
                    cfg.vocab_size);
    int have_val = *opts.val_data != '\0';
    if (have_val) dataloader_init(&val_loader, opts.val_data, B, T, 0, 1, 0, 0, cfg.vocab_size);
    Tokenizer tokenizer;
    load_tokenizer_for(&tokenizer, &opts, &cfg);
    int *sample_tokens = (int *)malloc_check(N * sizeof(int), "sample buffer");

    int device_count = 0;
    if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0)
        fail("no CUDA device found (the CPU reference trainer is train_cpu)");
    cudaDeviceProp props;
    cuda_check(cudaGetDeviceProperties(&props, 0));
    if (opts.dtype == DTYPE_FLOAT8 && props.major * 10 + props.minor < 89)
        fail("--dtype float8: %s (sm_%d%d) has no FP8 tensor cores (needs sm_89 or newer)", props.name,
             props.major, props.minor);

    if (opts.eval_only) { // the float8 model holds both paths: its BF16 copy and its FP8 casts
        opts.dtype = DTYPE_FLOAT8;
        opts.fp8_recipe = FP8_RECIPE_CURRENT;
    }
    GPT model;
    gpt_alloc(&model, &cfg, &opts, B, T, accum_steps);
    float *host_params = init_params;
    if (!host_params) {
        host_params = (float *)malloc_check(model.num_params * sizeof(float), "parameters");
        gpt_init_params(host_params, &cfg, (uint64_t)opts.seed);
    }
    copy_to_device(model.params, host_params, model.num_params * sizeof(float));
    free(host_params);
    TrainState state = train_state_init(&opts, B, T);
    StepGuard guard;
    step_guard_init(&guard, opts.guard_window);
    if (opts.resume) {
        load_checkpoint(&model, &opts, &state, &guard);
        dataloader_set_position(&train_loader, state.train_position);
    }
    scales_from_history_kernel<<<ceil_div(model.fp8.num_tensors, 128), 128, 0, model.stream>>>(
        model.fp8, opts.fp8_margin);
    cuda_check_launch();
    refresh_compute_weights(&model);
    Fp8Stats stats;
    fp8_stats_alloc(&stats, cfg.num_layers);
    if (opts.dtype == DTYPE_FLOAT8)
        fetch_fp8_stats(&model, &stats); // the start-up weight casts belong to no step
    EnergyMeter energy;
    energy_meter_start(&energy, 0);

    printf(
        "train | %s | model L=%d C=%d NH=%d V=%d maxT=%d | %zu parameters | dtype %s | B=%d T=%d accum=%d | "
        "%.2f GiB planned\n",
        props.name, cfg.num_layers, cfg.channels, cfg.num_heads, cfg.vocab_size, cfg.max_seq_len,
        model.num_params, dtype_name(opts.dtype), B, T, accum_steps, model.plan.total / 1073741824.0);
    RunLog log;
    run_log_open(&log, opts.log_file, (long)state.step);
    if (opts.eval_only) {
        model.dtype = DTYPE_BFLOAT16;
        float bf16_loss = evaluate(&model, &val_loader, opts.val_batches);
        model.dtype = DTYPE_FLOAT8;
        log_eval_only(&log, opts.init_from, bf16_loss, evaluate(&model, &val_loader, opts.val_batches));
        opts.steps = 0; // nothing to train
    }
    DebugState debug = {};
    int have_debug = *opts.debug_state != '\0';
    if (have_debug) debug_state_alloc(&debug, &cfg, B, T, opts.dtype, opts.steps);
    double timed_ms = 0.0;
    int timed_steps = 0, first_step = (int)state.step;
    int micro_calls = 0, update_calls = 0, use_graph = opts.cuda_graph && !have_debug;

    for (int step = (int)state.step; step < opts.steps; step++) {
        double start = wall_time_ms();
        set_step_params(&model, &opts, step, (long)state.updates_applied, &guard);
        int bf16_check = opts.bf16_check_every > 0 && (step + 1) % opts.bf16_check_every == 0;
        for (int micro = 0; micro < accum_steps; micro++) {
            dataloader_next_batch(&train_loader);
            upload_batch(&model, train_loader.inputs, train_loader.targets);
            float bf16_loss = 0.0f;
            if (bf16_check && micro == 0) bf16_loss = bf16_shadow_loss(&model);
            if (have_debug && step == 0) {
                debug_first_micro_step(&model, &debug, train_loader.inputs, train_loader.targets);
            } else {
                run_captured(&model, micro_step, &model.micro_graph, use_graph, &micro_calls);
            }
            if (bf16_check && micro == 0) {
                read_step_results(&model); // loss_sum holds this first micro-batch's loss alone
                log_bf16_check(&log, &opts, step + 1, model.step_results_host->loss_sum, bf16_loss);
            }
        }
        run_captured(&model, update_step, &model.update_graph, use_graph, &update_calls);
        read_step_results(&model);
        const StepResults *r = model.step_results_host;
        if (r->skipped) {
            state.skipped_steps++;
        } else {
            state.updates_applied++;
            step_guard_record(&guard, r->loss, r->grad_norm);
        }
        state.step = step + 1;
        state.guard_count = guard.count;
        if (have_debug) debug.step_losses[step] = r->loss;
        double ms = wall_time_ms() - start;
        if (step >= first_step + 3) timed_ms += ms, timed_steps++; // after warm-up and graph capture
        StepRecord record = {step + 1,
                             opts.steps,
                             r->loss,
                             model.step_params_host->lr,
                             r->grad_norm,
                             ms,
                             (double)N * accum_steps / (ms / 1e3),
                             r->skipped};
        log_step(&log, &record);
        if (opts.dtype == DTYPE_FLOAT8) {
            fetch_fp8_stats(&model, &stats);
            report_fp8_stats(&log, &opts, step + 1, &stats);
        }
        int last = step + 1 == opts.steps;
        if (have_val && is_due(step + 1, opts.val_every, last))
            log_val(&log, step + 1, evaluate(&model, &val_loader, opts.val_batches));
        if (opts.sample_every > 0 && (step + 1) % opts.sample_every == 0)
            sample_text(&model, gpu_position_logits, &tokenizer, sample_tokens, B, T, cfg.vocab_size,
                        opts.sample_len, step);
        if (*opts.output_dir && is_due(step + 1, opts.ckpt_every, last)) {
            state.train_position = train_loader.pos;
            save_checkpoint(&model, &opts, &state, &guard);
        }
    }
    if (have_debug) debug_state_write(opts.debug_state, &debug);
    size_t free_bytes, total_bytes;
    cuda_check(cudaMemGetInfo(&free_bytes, &total_bytes));
    if (timed_steps > 0) {
        double ms = timed_ms / timed_steps, tokens_per_second = (double)N * accum_steps / (ms / 1e3);
        double peak = bf16_peak_flops(&props);
        double mfu =
            peak > 0 ? 100.0 * flops_per_token(&cfg, model.num_params, T) * tokens_per_second / peak : 0.0;
        // every buffer is allocated up front from the plan, so the plan's total is this run's peak
        printf("summary | %.1f ms/step | %.0f tok/s | MFU %.1f%% of the BF16 peak | peak memory %.2f GiB "
               "(device in use: %.2f GiB)\n",
               ms, tokens_per_second, mfu, model.plan.total / 1073741824.0,
               (total_bytes - free_bytes) / 1073741824.0);
    }
    if (state.skipped_steps) printf("skipped steps: %ld\n", (long)state.skipped_steps);
    log_energy(&log, energy_meter_joules(&energy), &opts, energy.unavailable);
    run_log_close(&log);
    step_guard_free(&guard);
    fp8_stats_free(&stats);
    gemm_destroy(&model.gemm);
    return 0;
}

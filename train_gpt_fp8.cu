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
// CUDA Graph launch when --cuda_graph 1 (one process only).
//
// Several processes, one GPU each (dist.h: mpirun/srun, or torchrun-style RANK/WORLD_SIZE/LOCAL_RANK):
// data parallel over NCCL (gpu/nccl.cuh), rank r reading rows r*B.. of the global batch, so N processes
// with batch B train as one with batch N*B. Every rank takes the same decisions from the same numbers:
// the loss and the gradient norm are reduced before the skip decision, and the FP8 amaxes measured in a
// step (activations, gradients, weights) are max-reduced once per step in one all-reduce before the
// scales are updated, so every rank scales alike (the current recipe's per-cast scale is each rank's own
// exact amax of its own tensor: it is never reused, so it need not agree). --zero_stage (memory_plan.h
// says where every buffer lives):
//   0: all-reduce of the gradients after the last micro-step, AdamW on everything everywhere;
//   1: reduce-scatter of the gradients into this rank's shard, AdamW on the shard, all-gather of the
//      BF16 copy and, in float8, of the FP8 weights themselves (each rank casts its chunk with the exact
//      scale of its weight, the max over ranks of the shard amaxes), then a local W^T;
//   3: the parameters too: the global tensors are gathered after each update and kept, each layer is
//      gathered (BF16 and FP8) just before use into one of two slots, the next one on a second stream
//      while this one computes, and each layer's gradients are reduce-scattered into the shard while the
//      backward goes on; with --keep_gathered each layer has a slot of its own, gathered in the first
//      micro-step's forward and read there by every pass until the next update.
// --recompute 1 keeps only each layer's input for the backward, which replays the layer's forward first.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/atomic_file.h"
#include "core/checkpoint.h"
#include "core/checkpoint_io.h"
#include "core/cli.h"
#include "core/common.h"
#include "core/dataloader.h"
#include "core/debug_state.h"
#include "core/dist.h"
#include "core/dry_run.h"
#include "core/eval_data.h"
#include "core/fp8_scaling.h"
#include "core/gpt_model.h"
#include "gpu/attention.cuh"
#include "gpu/common.cuh"
#include "core/health.h"
#include "core/manifest.h"
#include "core/model_file.h"
#include "core/run_control.h"
#include "core/run_files.h"
#include "core/run_records.h"
#include "gpu/adamw.cuh"
#include "gpu/block_cast.cuh"
#include "gpu/fp8_cast.cuh"
#include "gpu/fp8_state.cuh"
#include "gpu/step_kernels.cuh"
#include "gpu/step_params.cuh"
#include "gpu/gemm.cuh"
#include "gpu/activations.cuh"
#include "gpu/crossentropy.cuh"
#include "gpu/encoder.cuh"
#include "gpu/norms.cuh"
#include "gpu/reductions.cuh"
#include "gpu/nccl.cuh"
#include "gpu/rope.cuh"
#include "gpu/zero.cuh"
#include "core/memory_plan.h"
#include "core/sampling.h"
#include "core/state_reshard.h"
#include "core/train_log.h"
#include "core/train_state.h"

// ----------------------------------------------------------------------------
// The model on the device

// GPT (at the end) holds the run's settings and, in named groups, what the model keeps on the device and
// beside it: each group's name says what its fields are for, as llm.c groups its model's tensors into
// ParameterTensors and ActivationTensors.

// The parameters and their copies: the FP32 master weights, the BF16 and FP8 copies the GEMMs read, and
// AdamW's moments.
typedef struct {
    float *params, *m, *v;
    bf16 *params_bf16;
    // ZeRO-0: (L, 12C^2; Llama linear_weights_per_layer) in linear order qkv, attproj, fc, fcproj; ZeRO-1:
    // the parameter layout, padded; ZeRO-3: weight_slots slots of one layer's unit in parameter layout. W^T
    // always in linear order (weight_slots layers with ZeRO-3).
    fp8 *weights_fp8, *weights_fp8_t;
} GPTWeights;

// The parameter gradients: the full gradient a micro-step accumulates, and this rank's reduced shard.
typedef struct {
    float *grads, *grad_shard;
    bf16 *grads_bf16;        // --grad_reduce_dtype bfloat16: the gradients NCCL sums (gpu/zero.cuh)
    size_t grads_bf16_elems; // 0: the sums in FP32
} GPTGradients;

// The forward's activations, which the backward reads again, and the tables and transposes kept for it.
typedef struct {
    bf16 *encoded, *residual2, *residual3, *qkv, *fch, *ln1, *atty, *ln2, *fch_gelu, *lnf, *logits;
    float *ln1_stats, *ln2_stats, *att_lse, *lnf_stats, *losses;
    float *rope;       // Llama: gpt_model.h's rope_table (maxT, hs/2, 2), uploaded once
    fp8 *inputs_fp8_t; // (kept layers, 7C (Llama 3C + F), N): each linear's input transposed, offsets as its
                       // input width
} GPTActivations;

// The backward's activation gradients, and the scratch buffers that the forward and backward reuse.
typedef struct {
    bf16 *dresidual, *dc, *dqkv, *dfch;
    float *att_delta, *reduce_scratch;
    fp8 *cast_fp8, *cast_fp8_t;
    char *attention_workspace; // cuDNN's fused attention runs in it; NULL where the plan holds none (exact)
} GPTWorkBuffers;

// The FP8 recipe and its scaling state.
typedef struct {
    // --fp8_recipe, --fp8_margin, --fp8_pow2_scales, --fp8_fast_accum
    int recipe, margin, pow2_scales, fast_accum;
    int histories_empty;    // delayed recipe: some tensor's amax history has no applied step yet (its casts
                            // measure)
    Fp8DeviceState scaling; // the FP8 scaling state on the device
    // block recipes (memory_plan.h's fp8_block_factor_bytes): the smallest and largest block scale per
    // tensor then per weight; W's and W^T's factors per layer and linear; the saved input transposes'
    // factors per kept layer and linear; the factors of cast_fp8 and cast_fp8_t
    float *block_scale_min, *block_scale_max;
    char *weight_factors, *input_factors_t, *cast_factors, *cast_factors_t;
} GPTFp8State;

// Several ranks (dist.h's ZeRO layout): this rank's chunks, and ZeRO-3's slots (memory_plan.h). The shards
// span shard_comm: comm (every rank), or with --shard_group_size this rank's group, whose replicas in the
// other groups (replica_comm; this is replica `replica`) sum their gradient shards
typedef struct {
    Comm comm, group_comm, replica_comm;
    Comm *shard_comm;
    int replica;
    ShardMap shards;
    int num_units;
    size_t shard_floats;            // master weights and moments: all P (ZeRO-0) or this rank's shard S
    size_t global_slot, layer_slot; // ZeRO-3: elements of the global unit's region and of a layer slot
    int weight_slots;               // ZeRO-3: layer slots of gathered weights, 2 or (--keep_gathered) L
    int layers_resident; // ZeRO-3 --keep_gathered: every layer gathered since the last update, none to gather
} GPTSharding;

// What a step exchanges with the host: the batches' tokens, the step's parameters and results, the guard's
// window, the rows that sampling reads, and the events that order the copies.
typedef struct {
    // inputs (N), targets (N), embedding-gradient buckets: positions (N), tokens (N), starts (N+1), count
    // (1); tokens_next the same, where the next batch lands from the host while the current one is in use
    int *tokens, *tokens_next;
    StepParams *step_params;        // device
    StepParams *step_params_host;   // pinned (2): step s's in slot s % 2
    StepResults *step_results;      // device
    StepResults *step_results_host; // pinned (3): step s's in slot s % 2, then RESULTS_NOW
    float *guard_history;           // device (2, window): the step guard's window (losses, then norms)
    int *tokens_host;               // pinned staging of the tokens area
    float *sample_row;              // (Vp) host logits of one position, for sampling
    bf16 *sample_row_bf16;          // (Vp) its device-format copy
    cudaEvent_t tokens_uploaded;    // tokens_next holds the batch staged last (copy_stream)
    cudaEvent_t tokens_taken;       // the compute stream has copied tokens_next into tokens
    cudaEvent_t results_copied[2];  // a step's results are in their pinned slot
} GPTHostExchange;

// Where the work runs: the streams, the events that order them, and the captured CUDA Graphs.
// Compute runs on `stream`; every NCCL call and ZeRO-3's gathers on `comm_stream`. Each wait below is on an
// event recorded earlier in the same function call, so no wait crosses the boundary of a CUDA Graph
// capture and none waits on an event last recorded inside one.
// The host-to-device copies of the batches run on copy_stream, beside the step before them.
typedef struct {
    cudaStream_t stream, comm_stream, copy_stream;
    cudaEvent_t forked, joined;
    cudaEvent_t layer_gathered[2], layer_done[2], grads_free[2]; // ZeRO-3, per slot
    cudaGraphExec_t micro_graph, update_graph;
} GPTExecution;

// The model: its settings and plan, then its groups, and the GEMM and attention libraries' state.
typedef struct {
    GPTConfig config;
    int dtype, B, T, accum_steps;
    int keeps_gemm_inputs; // planned for bfloat16: the BF16 GEMM inputs of every kept layer are kept
    int fp8_weights;       // planned for float8: the FP8 copies of the weights exist
    int zero_stage, recompute;
    size_t num_params;
    MemoryPlan plan;
    char *memory; // the one allocation the plan carves
    GPTWeights weights;
    GPTGradients gradients;
    GPTActivations acts;
    GPTWorkBuffers work;
    GPTFp8State fp8_state;
    GPTSharding sharding;
    GPTHostExchange io;
    GPTExecution exec;
    GemmContext gemm;
    Attention attention;
} GPT;

// BUF_STEP holds StepParams, then StepResults at +PLAN_ALIGN (memory_plan.h).
static_assert(sizeof(StepParams) <= PLAN_ALIGN && sizeof(StepResults) <= PLAN_ALIGN,
              "memory_plan.h: BUF_STEP is too small for StepParams and StepResults");

static_assert(layers_impl::RMSNORM_EPS == LLAMA_NORM_EPS, "gpu/norms.cuh: RMSNorm's epsilon is not Llama's");

#define RESULTS_NOW 2 // the pinned results slot of reads that wait at once (validation, the shadow check)

static void *plan_ptr(GPT *model, BufferId id) {
    return model->plan.bytes[id] ? model->memory + model->plan.offset[id] : NULL;
}

// The device is waited for first through comm_wait_stream, which a collective stuck on a peer cannot hold
// forever (a plain cudaMemcpy would wait for it unboundedly); the copy then runs alone.
static void copy_to_host(GPT *model, void *dst, const void *src, size_t bytes) {
    comm_wait_stream(&model->sharding.comm, model->exec.stream, "copying results to the host");
    cuda_check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

// At start-up only, before any collective is in flight.
static void copy_to_device(void *dst, const void *src, size_t bytes) {
    cuda_check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

static void create_event(cudaEvent_t *event) {
    cuda_check(cudaEventCreateWithFlags(event, cudaEventDisableTiming));
}

// This rank's place in dist.h's ZeRO layout, and ZeRO-3's slot sizes. group: the shard group's
// communicator with --shard_group_size, else NULL (the shards span comm).
static void gpt_shards(GPT *model, const GPTConfig *cfg, int zero_stage, const Comm *comm,
                       const Comm *group) {
    model->sharding.comm = *comm;
    model->sharding.shard_comm = &model->sharding.comm;
    if (group) {
        model->sharding.group_comm = *group;
        model->sharding.shard_comm = &model->sharding.group_comm;
    }
    const Comm *shard = model->sharding.shard_comm;
    model->zero_stage = zero_stage;
    model->sharding.shards = shard_map(cfg, zero_stage, shard->world_size, shard->rank);
    model->sharding.num_units = shard_num_units(cfg, zero_stage);
    model->sharding.shard_floats = shard_size(cfg, zero_stage, shard->world_size); // all P with one way
    if (zero_stage == 3) {
        model->sharding.global_slot = unit_slot_elements(cfg, shard->world_size, 0);
        model->sharding.layer_slot = unit_slot_elements(cfg, shard->world_size, 1);
    }
}

// The model's shape and settings, this rank's place in the ZeRO layout and the memory plan: all that
// gpt_carve needs. Host-only, like gpt_carve, so that test/test_plan_bounds.cu runs both without a GPU.
static void gpt_plan(GPT *model, const GPTConfig *cfg, const TrainOptions *opts, int B, int T,
                     int accum_steps, const Comm *comm, const Comm *group) {
    memset(model, 0, sizeof(*model));
    model->config = *cfg;
    model->dtype = opts->dtype;
    model->fp8_state.recipe = opts->fp8_recipe;
    model->fp8_state.margin = opts->fp8_margin;
    model->fp8_state.pow2_scales = opts->fp8_pow2_scales;
    model->fp8_state.fast_accum = opts->fp8_fast_accum;
    model->keeps_gemm_inputs = opts->dtype == DTYPE_BFLOAT16;
    model->fp8_weights = opts->dtype == DTYPE_FLOAT8;
    model->recompute = opts->recompute;
    model->B = B;
    model->T = T;
    model->accum_steps = accum_steps;
    model->num_params = param_count(cfg);
    gpt_shards(model, cfg, opts->zero_stage, comm, group);
    model->sharding.weight_slots = (int)zero3_weight_slots(cfg, opts->keep_gathered);
    PlanSettings settings = plan_settings_from_options(opts, B, T, comm->world_size);
    memory_plan_compute(&model->plan, cfg, &settings);
}

// The block recipes' views of their buffer, in memory_plan.h's order (all NULL in other plans).
static void carve_block_factors(GPT *model, char *base) {
    if (model->plan.bytes[BUF_FP8_BLOCK_SCALES] == 0) return;
    const GPTConfig *cfg = &model->config;
    int recipe = model->fp8_state.recipe;
    size_t counted = (size_t)cfg->num_layers * NUM_BLOCK_LINEARS * 3, N = (size_t)model->B * model->T;
    size_t kept = model->recompute ? 1 : cfg->num_layers, W = model_widest_features(cfg);
    model->fp8_state.block_scale_min = (float *)base;
    model->fp8_state.block_scale_max = model->fp8_state.block_scale_min + counted;
    model->fp8_state.weight_factors = (char *)(model->fp8_state.block_scale_max + counted);
    model->fp8_state.input_factors_t = model->fp8_state.weight_factors +
                                       cfg->num_layers * weight_factor_offset(cfg, recipe, NUM_BLOCK_LINEARS);
    model->fp8_state.cast_factors =
        model->fp8_state.input_factors_t + kept * input_factor_offset(cfg, recipe, N, NUM_BLOCK_LINEARS);
    model->fp8_state.cast_factors_t = model->fp8_state.cast_factors + fp8_tile_factor_bytes(recipe, N, W);
}

// Every device pointer of the model, carved out of memory (the plan's total bytes) by the plan, and
// nothing else: no CUDA call and no access to memory, so test/test_plan_bounds.cu checks the carving
// against the plan's buffers with a fake base. Every other pointer is derived from these (weight_bf16,
// layer_acts, the shard chunks...).
static void gpt_carve(GPT *model, char *memory) {
    model->memory = memory;
    model->weights.params = (float *)plan_ptr(model, BUF_PARAMS);
    model->gradients.grads = (float *)plan_ptr(model, BUF_GRADS);
    model->gradients.grad_shard = (float *)plan_ptr(model, BUF_GRAD_SHARD);
    model->gradients.grads_bf16 = (bf16 *)plan_ptr(model, BUF_GRAD_BF16);
    model->gradients.grads_bf16_elems = model->plan.bytes[BUF_GRAD_BF16] / sizeof(bf16);
    model->weights.m = (float *)plan_ptr(model, BUF_ADAM_M);
    model->weights.v = (float *)plan_ptr(model, BUF_ADAM_V);
    model->weights.params_bf16 = (bf16 *)plan_ptr(model, BUF_PARAMS_BF16);
    model->weights.weights_fp8 = (fp8 *)plan_ptr(model, BUF_WEIGHTS_FP8);
    model->weights.weights_fp8_t = (fp8 *)plan_ptr(model, BUF_WEIGHTS_FP8_T);
    model->acts.encoded = (bf16 *)plan_ptr(model, BUF_ENCODED);
    model->acts.residual2 = (bf16 *)plan_ptr(model, BUF_RESIDUAL2);
    model->acts.residual3 = (bf16 *)plan_ptr(model, BUF_RESIDUAL3);
    model->acts.ln1_stats = (float *)plan_ptr(model, BUF_LN1_STATS);
    model->acts.ln2_stats = (float *)plan_ptr(model, BUF_LN2_STATS);
    model->acts.qkv = (bf16 *)plan_ptr(model, BUF_QKV);
    model->acts.att_lse = (float *)plan_ptr(model, BUF_ATT_LSE);
    model->acts.fch = (bf16 *)plan_ptr(model, BUF_FCH);
    model->acts.ln1 = (bf16 *)plan_ptr(model, BUF_LN1);
    model->acts.atty = (bf16 *)plan_ptr(model, BUF_ATTY);
    model->acts.ln2 = (bf16 *)plan_ptr(model, BUF_LN2);
    model->acts.fch_gelu = (bf16 *)plan_ptr(model, BUF_FCH_GELU);
    model->acts.inputs_fp8_t = (fp8 *)plan_ptr(model, BUF_INPUT_FP8_T);
    model->acts.lnf = (bf16 *)plan_ptr(model, BUF_LNF);
    model->acts.lnf_stats = (float *)plan_ptr(model, BUF_LNF_STATS);
    model->acts.rope = (float *)plan_ptr(model, BUF_ROPE_TABLE);
    model->acts.logits = (bf16 *)plan_ptr(model, BUF_LOGITS);
    model->acts.losses = (float *)plan_ptr(model, BUF_LOSSES);
    model->work.dresidual = (bf16 *)plan_ptr(model, BUF_DRESIDUAL);
    model->work.dc = (bf16 *)plan_ptr(model, BUF_DC);
    model->work.dqkv = (bf16 *)plan_ptr(model, BUF_DQKV);
    model->work.dfch = (bf16 *)plan_ptr(model, BUF_DFCH);
    model->work.att_delta = (float *)plan_ptr(model, BUF_ATT_DELTA);
    model->work.cast_fp8 = (fp8 *)plan_ptr(model, BUF_CAST_FP8);
    model->work.cast_fp8_t = (fp8 *)plan_ptr(model, BUF_CAST_FP8_T);
    model->work.reduce_scratch = (float *)plan_ptr(model, BUF_REDUCE_SCRATCH);
    model->work.attention_workspace = (char *)plan_ptr(model, BUF_ATTENTION_WORKSPACE);
    carve_block_factors(model, (char *)plan_ptr(model, BUF_FP8_BLOCK_SCALES));
    model->io.tokens = (int *)plan_ptr(model, BUF_TOKENS);
    model->io.tokens_next = model->io.tokens + model->plan.bytes[BUF_TOKENS] / 2 / sizeof(int);
    fp8_state_views(&model->fp8_state.scaling, (float *)plan_ptr(model, BUF_FP8_STATE),
                    model->config.num_layers, model->plan.settings.history_len);
    model->io.step_params = (StepParams *)plan_ptr(model, BUF_STEP);
    model->io.step_results = (StepResults *)(model->memory + model->plan.offset[BUF_STEP] + PLAN_ALIGN);
    model->io.guard_history = (float *)(model->memory + model->plan.offset[BUF_STEP] + 2 * PLAN_ALIGN);
}

// A fresh run's amax histories: every slot FP8_AMAX_UNRECORDED (a resume overwrites them).
static void fill_unrecorded_histories(GPT *model) {
    size_t H = (size_t)model->fp8_state.scaling.num_tensors * model->fp8_state.scaling.history_len;
    model->fp8_state.histories_empty = 1;
    if (model->plan.bytes[BUF_FP8_STATE] == 0) return;
    float *host = (float *)malloc_check(H * sizeof(float), "amax histories");
    for (size_t i = 0; i < H; i++) host[i] = FP8_AMAX_UNRECORDED;
    copy_to_device(model->fp8_state.scaling.amax_history, host, H * sizeof(float));
    free(host);
}

// One allocation of the plan's size, carved by gpt_carve, and the model's host side (pinned staging,
// events, streams, cuBLASLt); says how much device memory that allocation really took (NCCL's and
// cuBLASLt's own buffers are outside the plan).
// Blockwise: fresh block-scale telemetry (smallest +inf, largest 0), as the CPU's fp8_stats_reset.
static void reset_block_scale_stats(GPT *model) {
    if (!model->fp8_state.block_scale_min) return;
    size_t counted = (size_t)model->fp8_state.scaling.num_tensors + model->fp8_state.scaling.num_weights;
    launch<fill_floats_kernel>({1, 256, 0, model->exec.stream}, model->fp8_state.block_scale_min, INFINITY,
                               counted);
    cuda_check(
        cudaMemsetAsync(model->fp8_state.block_scale_max, 0, counted * sizeof(float), model->exec.stream));
}

// The plan without cuDNN's attention workspace where the plan with it does not fit the free_bytes the device
// has: --attention auto takes the exact kernels (the reason, for the banner, in declined); --attention fast
// is refused.
static void fit_attention_workspace(GPT *model, const GPTConfig *cfg, int choice, size_t free_bytes,
                                    char *declined, size_t declined_size) {
    const size_t workspace = model->plan.bytes[BUF_ATTENTION_WORKSPACE];
    if (!workspace || model->plan.total + RUNTIME_RESERVE_BYTES <= free_bytes) return;
    if (choice == ATTENTION_FAST)
        fail("--attention fast: cuDNN's deterministic backward needs a %zu-byte (%.2f GiB) workspace; with "
             "it the plan's %zu bytes and the %zu-byte runtime reserve exceed the device's %zu free; "
             "--attention exact needs none",
             workspace, workspace / 1073741824.0, model->plan.total, RUNTIME_RESERVE_BYTES, free_bytes);
    snprintf(declined, declined_size,
             "auto: cuDNN's deterministic backward needs a %.2f GiB workspace; with it the plan's %.2f GiB "
             "and the %.2f GiB reserve exceed the device's %.2f GiB free",
             workspace / 1073741824.0, model->plan.total / 1073741824.0, RUNTIME_RESERVE_BYTES / 1073741824.0,
             free_bytes / 1073741824.0);
    PlanSettings settings = model->plan.settings;
    settings.fast_attention = 0;
    memory_plan_compute(&model->plan, cfg, &settings);
}

static void gpt_alloc(GPT *model, const GPTConfig *cfg, const TrainOptions *opts, int B, int T,
                      int accum_steps, const Comm *comm, const Comm *group) {
    gpt_plan(model, cfg, opts, B, T, accum_steps, comm, group);
    size_t free_before = 0, free_after = 0, total_bytes = 0;
    cuda_check(cudaMemGetInfo(&free_before, &total_bytes));
    char declined[160] = "";
    fit_attention_workspace(model, cfg, opts->attention, free_before, declined, sizeof declined);
    // what NCCL, cuDNN and lazily loaded kernels allocate after this (memory_plan.h's reserve) must fit too,
    // or the run would end out of memory at its first collective instead of here
    if (model->plan.total + RUNTIME_RESERVE_BYTES > free_before)
        fail(
            "model does not fit: needs %.2f GiB of device memory (plan %.2f + runtime reserve %.2f for NCCL, "
            "cuDNN and lazily loaded kernels), %.2f GiB free (lower --batch_size or --seq_len, or shard with "
            "--zero_stage 1 or 3, or --recompute 1: --dry_run 1 lists what fits)",
            (model->plan.total + RUNTIME_RESERVE_BYTES) / 1073741824.0, model->plan.total / 1073741824.0,
            RUNTIME_RESERVE_BYTES / 1073741824.0, free_before / 1073741824.0);
    char *memory = NULL;
    cuda_check(cudaMalloc((void **)&memory, model->plan.total));
    cuda_check(cudaMemset(memory, 0, model->plan.total));
    cuda_check(cudaMemGetInfo(&free_after, &total_bytes));
    printf(
        "memory | planned %zu bytes (%.3f GiB) | allocated %zu bytes (%.3f GiB, device free memory before "
        "minus after) | reserve %.2f GiB for NCCL, cuDNN and lazily loaded kernels, %.2f GiB free before\n",
        model->plan.total, model->plan.total / 1073741824.0, free_before - free_after,
        (free_before - free_after) / 1073741824.0, RUNTIME_RESERVE_BYTES / 1073741824.0,
        free_before / 1073741824.0);
    gpt_carve(model, memory);
    fill_unrecorded_histories(model);
    cuda_check(cudaMallocHost((void **)&model->io.step_params_host, 2 * sizeof(StepParams)));
    cuda_check(cudaMallocHost((void **)&model->io.step_results_host, 3 * sizeof(StepResults)));
    cuda_check(cudaMallocHost((void **)&model->io.tokens_host, model->plan.bytes[BUF_TOKENS] / 2));
    create_event(&model->io.tokens_uploaded);
    create_event(&model->io.tokens_taken);
    create_event(&model->io.results_copied[0]);
    create_event(&model->io.results_copied[1]);
    create_event(&model->exec.forked);
    create_event(&model->exec.joined);
    for (int slot = 0; slot < 2; slot++) {
        create_event(&model->exec.layer_gathered[slot]);
        create_event(&model->exec.layer_done[slot]);
        create_event(&model->exec.grads_free[slot]);
    }
    model->io.sample_row = (float *)malloc_check(cfg->padded_vocab_size * sizeof(float), "sampling");
    model->io.sample_row_bf16 = (bf16 *)malloc_check(cfg->padded_vocab_size * sizeof(bf16), "sampling");
    cuda_check(cudaStreamCreate(&model->exec.stream));
    cuda_check(cudaStreamCreate(&model->exec.copy_stream));
    // the collectives at the greatest priority: a gather or reduce-scatter the next layer waits for is
    // scheduled ahead of compute blocks queued behind it
    int least_priority = 0, greatest_priority = 0;
    cuda_check(cudaDeviceGetStreamPriorityRange(&least_priority, &greatest_priority));
    cuda_check(cudaStreamCreateWithPriority(&model->exec.comm_stream, cudaStreamDefault, greatest_priority));
    gemm_init(&model->gemm, plan_ptr(model, BUF_GEMM_WORKSPACE), GEMM_WORKSPACE_BYTES);
    const AttentionMemory attention_memory = {model->work.attention_workspace,
                                              model->plan.bytes[BUF_ATTENTION_WORKSPACE],
                                              declined[0] ? declined : NULL};
    attention_setup(&model->attention, opts->attention, B, T, cfg->channels, cfg->num_heads,
                    model_kv_heads(cfg), &attention_memory);
    reset_block_scale_stats(model);
    if (model->acts.rope) {
        float *table = (float *)malloc_check(model->plan.bytes[BUF_ROPE_TABLE], "rope table");
        rope_table(table, cfg);
        copy_to_device(model->acts.rope, table, model->plan.bytes[BUF_ROPE_TABLE]);
        free(table);
    }
    size_t N = (size_t)B * T, scratch = reduce_scratch_floats(cfg, B, T);
    size_t norm_scratch = model_parts(cfg).norm == NORM_RMSNORM
                              ? rmsnorm_backward_scratch_floats((int)N, cfg->channels)
                              : layernorm_backward_scratch_floats((int)N, cfg->channels);
    if (norm_scratch > scratch ||
        bias_backward_scratch_floats((int)N, (int)param_tensor_size(cfg, PT_MLP_UP_B)) > scratch ||
        global_norm_squared_scratch_floats(model->sharding.shard_floats) > scratch)
        fail("memory_plan.h: reduce_scratch_floats is smaller than a kernel's scratch (a bug)");
}

// Everything gpt_alloc made, and the CUDA Graphs the steps captured.
static void gpt_free(GPT *model) {
    if (model->exec.micro_graph) cuda_check(cudaGraphExecDestroy(model->exec.micro_graph));
    if (model->exec.update_graph) cuda_check(cudaGraphExecDestroy(model->exec.update_graph));
    gemm_destroy(&model->gemm);
    attention_free(&model->attention);
    cuda_check(cudaStreamDestroy(model->exec.copy_stream));
    cuda_check(cudaStreamDestroy(model->exec.comm_stream));
    cuda_check(cudaStreamDestroy(model->exec.stream));
    cudaEvent_t events[] = {
        model->io.tokens_uploaded,     model->io.tokens_taken,    model->io.results_copied[0],
        model->io.results_copied[1],   model->exec.forked,        model->exec.joined,
        model->exec.layer_gathered[0], model->exec.layer_done[0], model->exec.grads_free[0],
        model->exec.layer_gathered[1], model->exec.layer_done[1], model->exec.grads_free[1]};
    for (cudaEvent_t event : events) cuda_check(cudaEventDestroy(event));
    free(model->io.sample_row);
    free(model->io.sample_row_bf16);
    cuda_check(cudaFreeHost(model->io.tokens_host));
    cuda_check(cudaFreeHost(model->io.step_results_host));
    cuda_check(cudaFreeHost(model->io.step_params_host));
    cuda_check(cudaFree(model->memory));
}

// The communication stream continues after everything enqueued on the compute stream so far.
static void comm_after_compute(GPT *model) {
    cuda_check(cudaEventRecord(model->exec.forked, model->exec.stream));
    cuda_check(cudaStreamWaitEvent(model->exec.comm_stream, model->exec.forked, 0));
}

// The compute stream continues after everything enqueued on the communication stream so far.
static void compute_after_comm(GPT *model) {
    cuda_check(cudaEventRecord(model->exec.joined, model->exec.comm_stream));
    cuda_check(cudaStreamWaitEvent(model->exec.stream, model->exec.joined, 0));
}

// values (n <= 4 host doubles) = their sum over the ranks. Every rank calls it at the same point.
static void sum_over_ranks(GPT *model, double *values, int n) {
    if (!model->sharding.comm.comm) return;
    double *device = model->io.step_results->host_values;
    double *pinned = model->io.step_results_host[RESULTS_NOW].host_values;
    memcpy(pinned, values, n * sizeof(double)); // pinned: a copy from pageable memory would block the host
    cuda_check(
        cudaMemcpyAsync(device, pinned, n * sizeof(double), cudaMemcpyHostToDevice, model->exec.stream));
    comm_after_compute(model);
    comm_all_reduce(&model->sharding.comm, device, (size_t)n, ncclFloat64, ncclSum, model->exec.comm_stream);
    compute_after_comm(model);
    cuda_check(
        cudaMemcpyAsync(pinned, device, n * sizeof(double), cudaMemcpyDeviceToHost, model->exec.stream));
    comm_wait_stream(&model->sharding.comm, model->exec.stream, "a sum over the ranks");
    memcpy(values, pinned, n * sizeof(double));
}

// ----------------------------------------------------------------------------
// Where the weights and their gradients are (memory_plan.h's plan_weight_buffers)

static size_t linear_weight_offset_fp8(const GPTConfig *cfg, int layer, int linear) {
    size_t offset = (size_t)layer * linear_weights_per_layer(cfg);
    for (int lin = 0; lin < linear; lin++)
        offset += (size_t)linear_out_features(cfg, lin) * linear_in_features(cfg, lin);
    return offset;
}

// ZeRO-3 keeps layer l's unit in slot l % slots, after the global unit's region: its gradients in 2 slots
// (one reduce-scattered while the next is computed), its gathered weights in weight_slots.
static size_t slot_offset(const GPT *model, int layer, int slots) {
    return model->sharding.global_slot + (size_t)(layer % slots) * model->sharding.layer_slot;
}

static size_t grad_slot_offset(const GPT *model, int layer) {
    return slot_offset(model, layer, 2);
}

// Offset of a tensor in the buffers laid out as the parameter vector (the BF16 copy, the FP32
// gradients): the vector itself, or with ZeRO-3 the global region and the layer's slot of `slots`.
static size_t param_position(const GPT *model, int tensor, int layer, int slots) {
    const GPTConfig *cfg = &model->config;
    size_t offset = param_offset(cfg, tensor, layer);
    if (model->zero_stage != 3 || !param_is_per_layer(tensor)) return offset;
    return slot_offset(model, layer, slots) + offset - param_offset(cfg, PT_ATTN_NORM_W, layer);
}

static const bf16 *weight_bf16(GPT *model, int tensor, int layer) {
    return model->weights.params_bf16 + param_position(model, tensor, layer, model->sharding.weight_slots);
}

static float *grad_of(GPT *model, int tensor, int layer) {
    return model->gradients.grads + param_position(model, tensor, layer, 2);
}

// The bias of a block linear (the tensor after its weight) and its gradient, NULL where the architecture
// has none (Llama).
static const bf16 *linear_bias(GPT *model, int layer, int linear) {
    int tensor = linear_weight_tensor(linear) + 1;
    return param_tensor_size(&model->config, tensor) ? weight_bf16(model, tensor, layer) : NULL;
}

static float *linear_bias_grad(GPT *model, int layer, int linear) {
    int tensor = linear_weight_tensor(linear) + 1;
    return param_tensor_size(&model->config, tensor) ? grad_of(model, tensor, layer) : NULL;
}

// W (OC, IC) of a linear in E4M3: linear order (ZeRO-0), parameter layout (ZeRO-1), a layer slot (ZeRO-3).
static fp8 *weight_fp8(GPT *model, int layer, int linear) {
    const GPTConfig *cfg = &model->config;
    int tensor = linear_weight_tensor(linear);
    if (model->zero_stage == 0)
        return model->weights.weights_fp8 + linear_weight_offset_fp8(cfg, layer, linear);
    if (model->zero_stage == 1) return model->weights.weights_fp8 + param_offset(cfg, tensor, layer);
    return model->weights.weights_fp8 + param_position(model, tensor, layer, model->sharding.weight_slots) -
           model->sharding.global_slot;
}

// W^T (IC, OC), linear order (ZeRO-3: of the layer's slot).
static fp8 *weight_fp8_t(GPT *model, int layer, int linear) {
    int stored = model->zero_stage == 3 ? layer % model->sharding.weight_slots : layer;
    return model->weights.weights_fp8_t + linear_weight_offset_fp8(&model->config, stored, linear);
}

// Block recipes: the factors of W (OC, IC) as the operand (OC, K = IC), or of W^T as (IC, K = OC) (blockwise:
// the same 128x128 blocks; mxfp8: 1x32 tiles along OC, a cast of its own).
static char *weight_factors(GPT *model, int layer, int linear, int transposed) {
    const GPTConfig *cfg = &model->config;
    int recipe = model->fp8_state.recipe;
    char *w = model->fp8_state.weight_factors + layer * weight_factor_offset(cfg, recipe, NUM_BLOCK_LINEARS) +
              weight_factor_offset(cfg, recipe, linear);
    if (!transposed) return w;
    return w +
           fp8_weight_factor_bytes(recipe, linear_out_features(cfg, linear), linear_in_features(cfg, linear));
}

// ----------------------------------------------------------------------------
// Weights: the BF16 copy and the FP8 casts follow every change of the master weights

// Block recipes, ZeRO-0. Blockwise: W in 128x128 blocks of E4M3 with their factors (also as W^T's), then W^T;
// mxfp8: W in 1x32 tiles along IC, and W^T from 32x1 tiles down OC. The weight amaxes (the max over the
// blocks) and telemetry as cast_weights'.
static void cast_weight_blocks(GPT *model) {
    const GPTConfig *cfg = &model->config;
    Fp8DeviceState *s = &model->fp8_state.scaling;
    cuda_check(cudaMemsetAsync(s->weight_amax, 0, s->num_weights * sizeof(float), model->exec.stream));
    for (int l = 0; l < cfg->num_layers; l++) {
        for (int lin = 0; lin < NUM_BLOCK_LINEARS; lin++) {
            int w = l * NUM_BLOCK_LINEARS + lin, t = s->num_tensors + w, OC = linear_out_features(cfg, lin),
                IC = linear_in_features(cfg, lin);
            BlockRecord rec = {&s->weight_amax[w], model->sharding.comm.rank == 0 ? &s->counts[2 * t] : NULL,
                               &model->fp8_state.block_scale_min[t], &model->fp8_state.block_scale_max[t]};
            const float *master = model->weights.params + param_offset(cfg, linear_weight_tensor(lin), l);
            fp8 *w_q = weight_fp8(model, l, lin), *w_q_t = weight_fp8_t(model, l, lin);
            if (fp8_weight_casts(model->fp8_state.recipe) == 2) {
                block_cast<float>(model->fp8_state.recipe, w_q, weight_factors(model, l, lin, 0), w_q_t,
                                  weight_factors(model, l, lin, 1), rec, master, OC, IC, FP8_E4M3,
                                  model->fp8_state.margin, 0, model->exec.stream);
                continue;
            }
            block_cast_square<float>(w_q, (float *)weight_factors(model, l, lin, 0),
                                     (float *)weight_factors(model, l, lin, 1), rec, master, OC, IC,
                                     model->fp8_state.margin, model->fp8_state.pow2_scales,
                                     model->exec.stream);
            transpose_bytes(w_q_t, w_q, OC, IC, model->exec.stream);
        }
    }
}

// ZeRO-0: exact amax of each FP32 master weight, its scale, and W, W^T in E4M3. Every rank holds the same
// weights, so rank 0 alone counts their saturated and flushed values (the counters are summed over ranks).
static void cast_weights(GPT *model) {
    const GPTConfig *cfg = &model->config;
    Fp8DeviceState *s = &model->fp8_state.scaling;
    if (fp8_recipe_is_block(model->fp8_state.recipe)) {
        cast_weight_blocks(model);
        return;
    }
    for (int l = 0; l < cfg->num_layers; l++) {
        for (int lin = 0; lin < NUM_BLOCK_LINEARS; lin++) {
            int w = l * NUM_BLOCK_LINEARS + lin, OC = linear_out_features(cfg, lin),
                IC = linear_in_features(cfg, lin);
            const float *master = model->weights.params + param_offset(cfg, linear_weight_tensor(lin), l);
            measure_scale<float>(&s->weight_amax[w], &s->weight_scale[w], &s->weight_descale[w], master,
                                 (size_t)OC * IC, FP8_E4M3, model->fp8_state.margin, model->exec.stream);
            unsigned long long *counts =
                model->sharding.comm.rank == 0 ? &s->counts[2 * (s->num_tensors + w)] : NULL;
            cast_transpose<float>(weight_fp8(model, l, lin), weight_fp8_t(model, l, lin), NULL, counts,
                                  master, OC, IC, &s->weight_scale[w], FP8_E4M3, model->exec.stream);
        }
    }
}

// ZeRO-1/3: every linear weight's amax over this rank's shard, one kernel; reduce_fp8_amaxes then takes
// the max over the ranks, the exact amax.
static void measure_shard_weight_amaxes(GPT *model) {
    Fp8DeviceState *s = &model->fp8_state.scaling;
    cuda_check(cudaMemsetAsync(s->weight_amax, 0, s->num_weights * sizeof(float), model->exec.stream));
    dim3 grid(shard_weight_amax_blocks(&model->config, model->sharding.shards.ways), s->num_weights);
    launch<shard_weight_amax_kernel>({grid, 256, 0, model->exec.stream}, s->weight_amax,
                                     model->weights.params, model->sharding.shards);
}

// The step's measured amaxes (amax_current and weight_amax, adjacent), max over the ranks: one all-reduce.
static void reduce_fp8_amaxes(GPT *model) {
    if (!model->sharding.comm.comm) return;
    comm_after_compute(model);
    comm_all_reduce(&model->sharding.comm, model->fp8_state.scaling.amax_current,
                    (size_t)model->fp8_state.scaling.num_tensors + model->fp8_state.scaling.num_weights,
                    ncclFloat32, ncclMax, model->exec.comm_stream);
    compute_after_comm(model);
}

// Where a shard's weight casts count their saturated and flushed values: one replica's shards cover every
// weight once, so the other groups' casts count nothing.
static unsigned long long *weight_counts(GPT *model) {
    return model->sharding.replica == 0 ? model->fp8_state.scaling.counts : NULL;
}

// This rank's chunk of unit `unit` in E4M3 (linear weights; the rest 0) at out, on `stream`.
static void cast_shard_chunk(GPT *model, int unit, fp8 *out, unsigned long long *counts,
                             cudaStream_t stream) {
    ShardUnit u = shard_map_unit(&model->sharding.shards, unit);
    launch<shard_weight_cast_kernel>({elementwise_blocks(u.chunk), 256, 0, stream}, out, counts,
                                     model->weights.params, model->sharding.shards, unit,
                                     model->fp8_state.scaling.weight_scale,
                                     model->fp8_state.scaling.num_tensors);
}

// W^T of every linear of layer `layer` from its gathered W.
static void transpose_layer_weights(GPT *model, int layer, cudaStream_t stream) {
    for (int lin = 0; lin < NUM_BLOCK_LINEARS; lin++)
        transpose_bytes(weight_fp8_t(model, layer, lin), weight_fp8(model, layer, lin),
                        linear_out_features(&model->config, lin), linear_in_features(&model->config, lin),
                        stream);
}

// Whether a gather moves the whole BF16 copy. A float8 pass reads the block linears' weights in FP8 only
// and the other tensors (embeddings, LayerNorms, biases) in BF16, so float8 gathers the FP8 weights and
// broadcasts only those BF16 tensors (a third of the bytes of gathering both); a bfloat16 run, and a
// BF16 pass of a float8 run (begin_bf16_pass), gathers the whole copy.
static int gathers_whole_bf16(const GPT *model) {
    return !model->fp8_weights || model->dtype != DTYPE_FLOAT8;
}

// Of unit `unit`'s BF16 copy at `copy` (the unit's chunks in rank order, this rank's written), the tensors
// a float8 pass reads in BF16: each owner's piece broadcast in place (in the caller's NCCL group). A
// layer's are 13C elements, against 12C^2 + 13C for the whole layer.
static void broadcast_bf16_read_tensors(GPT *model, int unit, bf16 *copy, cudaStream_t stream) {
    ShardUnit u = shard_map_unit(&model->sharding.shards, unit);
    for (size_t at = u.start; at < u.start + u.size;) {
        int tensor, layer;
        size_t end = param_locate(&model->config, at, &tensor, &layer); // units end at a tensor's end
        for (size_t x = at; x < end && !param_is_linear_weight(tensor);) {
            size_t within = x - u.start, owner = within / u.chunk;
            size_t n = end - x < (owner + 1) * u.chunk - within ? end - x : (owner + 1) * u.chunk - within;
            comm_broadcast(model->sharding.shard_comm, copy + within, n, ncclBfloat16, (int)owner, stream);
            x += n;
        }
        at = end;
    }
}

// ZeRO-3, on the communication stream: the global unit's BF16 copy, gathered in place.
static void gather_global(GPT *model) {
    ShardUnit u = shard_map_unit(&model->sharding.shards, 0);
    launch<to_bf16_kernel>({elementwise_blocks(u.chunk), 256, 0, model->exec.comm_stream},
                           model->weights.params_bf16 + (size_t)model->sharding.shards.rank * u.chunk,
                           model->weights.params + u.shard, u.chunk);
    comm_all_gather(model->sharding.shard_comm, model->weights.params_bf16, u.chunk, ncclBfloat16,
                    sizeof(bf16), model->exec.comm_stream);
}

// ZeRO-3, on the communication stream: layer `layer` into its weight slot, its BF16 copy (float8: the
// tensors it reads in BF16) and (float8) its FP8 weights with this update's scales, in place in one NCCL
// group, then W^T. The caller orders it after the last use of the slot.
static void gather_layer(GPT *model, int layer) {
    ShardUnit u = shard_map_unit(&model->sharding.shards, 1 + layer);
    size_t mine = (size_t)model->sharding.shards.rank * u.chunk;
    size_t slot = slot_offset(model, layer, model->sharding.weight_slots);
    bf16 *copy = model->weights.params_bf16 + slot;
    fp8 *weights =
        model->fp8_weights ? model->weights.weights_fp8 + (slot - model->sharding.global_slot) : NULL;
    launch<to_bf16_kernel>({elementwise_blocks(u.chunk), 256, 0, model->exec.comm_stream}, copy + mine,
                           model->weights.params + u.shard, u.chunk);
    if (weights) cast_shard_chunk(model, 1 + layer, weights + mine, NULL, model->exec.comm_stream);
    comm_group_start(model->sharding.shard_comm);
    if (gathers_whole_bf16(model))
        comm_all_gather(model->sharding.shard_comm, copy, u.chunk, ncclBfloat16, sizeof(bf16),
                        model->exec.comm_stream);
    else
        broadcast_bf16_read_tensors(model, 1 + layer, copy, model->exec.comm_stream);
    if (weights)
        comm_all_gather(model->sharding.shard_comm, weights, u.chunk, ncclUint8, 1, model->exec.comm_stream);
    comm_group_end(model->sharding.shard_comm);
    if (weights) transpose_layer_weights(model, layer, model->exec.comm_stream);
}

// ZeRO-1: the BF16 copy (this rank's chunk already written; float8: the tensors it reads in BF16) and the
// FP8 weights in parameter layout, each rank casting its chunk, both gathered in place; then W^T locally.
static void publish_zero1(GPT *model) {
    ShardUnit u = shard_map_unit(&model->sharding.shards, 0);
    if (model->fp8_weights)
        cast_shard_chunk(model, 0, model->weights.weights_fp8 + (size_t)model->sharding.shards.rank * u.chunk,
                         weight_counts(model), model->exec.stream);
    if (model->sharding.shard_comm->comm) {
        comm_after_compute(model);
        comm_group_start(model->sharding.shard_comm);
        if (gathers_whole_bf16(model))
            comm_all_gather(model->sharding.shard_comm, model->weights.params_bf16, u.chunk, ncclBfloat16,
                            sizeof(bf16), model->exec.comm_stream);
        else
            broadcast_bf16_read_tensors(model, 0, model->weights.params_bf16, model->exec.comm_stream);
        if (model->fp8_weights)
            comm_all_gather(model->sharding.shard_comm, model->weights.weights_fp8, u.chunk, ncclUint8, 1,
                            model->exec.comm_stream);
        comm_group_end(model->sharding.shard_comm);
        compute_after_comm(model);
    }
    if (model->fp8_weights)
        for (int l = 0; l < model->config.num_layers; l++)
            transpose_layer_weights(model, l, model->exec.stream);
}

// ZeRO-3: between passes slot s holds layer s (s < 2): the update gathers the global unit and layers 0 and
// 1; gpt_forward leaves layers L-2 and L-1, which gpt_backward starts with and ends with 0 and 1 again.
// With --keep_gathered the first forward gathers the others into their own slots, and every later pass
// until the next update reads them there. Weight telemetry: the casts happen at every gather, so the
// shard's saturated and flushed values are counted here, once per update.
static void publish_zero3(GPT *model) {
    model->sharding.layers_resident = 0;
    if (model->fp8_weights)
        for (int l = 0; l < model->config.num_layers; l++)
            cast_shard_chunk(model, 1 + l, NULL, weight_counts(model), model->exec.stream);
    comm_after_compute(model);
    gather_global(model);
    gather_layer(model, 0);
    if (model->config.num_layers > 1) gather_layer(model, 1);
    compute_after_comm(model);
}

// The compute copies of the weights after the master changed (this rank's BF16 chunk already written):
// the FP8 weights with each weight's exact amax, the BF16 copy everywhere it is needed. With end_step also
// the step's end of FP8 scaling: the amaxes max-reduced over ranks, histories and scales updated.
static void publish_weights(GPT *model, int end_step) {
    Fp8DeviceState *s = &model->fp8_state.scaling;
    cudaStream_t stream = model->exec.stream;
    if (model->fp8_weights) {
        if (model->zero_stage == 0)
            cast_weights(model);
        else
            measure_shard_weight_amaxes(model);
        reduce_fp8_amaxes(model);
        if (model->zero_stage != 0) {
            launch<scale_from_amax_kernel>({ceil_div(s->num_weights, 128), 128, 0, stream}, s->weight_scale,
                                           s->weight_descale, s->weight_amax, (const float *)NULL, 0,
                                           s->num_weights, FP8_E4M3, model->fp8_state.margin);
        }
        if (end_step) {
            launch<fp8_end_step_kernel>({ceil_div(s->num_tensors, 128), 128, 0, stream}, *s,
                                        fp8_recipe_uses_history(model->fp8_state.recipe),
                                        model->io.step_params, model->io.step_results);
        }
    }
    if (model->zero_stage == 1) publish_zero1(model);
    if (model->zero_stage == 3) publish_zero3(model);
}

// At start-up: this rank's BF16 chunk from the master (AdamW writes it afterwards), then publish.
static void refresh_compute_weights(GPT *model) {
    if (model->zero_stage != 3) {
        ShardUnit u = shard_map_unit(&model->sharding.shards, 0);
        launch<to_bf16_kernel>({elementwise_blocks(u.chunk), 256, 0, model->exec.stream},
                               model->weights.params_bf16 + (size_t)model->sharding.shards.rank * u.chunk,
                               model->weights.params, u.chunk);
    }
    publish_weights(model, 0);
}

// ----------------------------------------------------------------------------
// Linear layers: forward and backward side by side, BF16 or FP8

static GemmOperand bf16_operand(const bf16 *data) {
    GemmOperand op = {data, CUDA_R_16BF, NULL, GEMM_SCALE_TENSOR};
    return op;
}

static GemmOperand fp8_operand(const fp8 *data, Fp8Format format, const void *descale) {
    GemmOperand op = {data, format == FP8_E4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2, descale, GEMM_SCALE_TENSOR};
    return op;
}

// Block recipes: an FP8 operand with its factors, as the recipe's activations and gradients (1-D tiles along
// K: VEC128_32F, or mxfp8's VEC32_UE8M0) or weights (blockwise: 128x128 blocks, BLK128x128_32F).
static GemmOperand block_operand(const fp8 *data, Fp8Format format, const void *factors, int recipe,
                                 int weight) {
    GemmOperand op = fp8_operand(data, format, factors);
    const Fp8RecipeInfo r = fp8_recipe(recipe);
    if (r.scale_format == FP8_SCALE_E8M0)
        op.scale_mode = GEMM_SCALE_MX_32;
    else
        op.scale_mode = weight && r.weight_rows == r.tile ? GEMM_SCALE_BLOCK_128x128 : GEMM_SCALE_TILE_128;
    return op;
}

// Block recipes: the casts of tensor `index`, x (rows, cols), into out (tiles along cols) and/or out_t (tiles
// along the rows, transposed), with their factors; in training (record) its amax and telemetry, as the
// CPU's cast_blocks.
static void fp8_block_cast(GPT *model, int index, const bf16 *x, int rows, int cols, fp8 *out, void *factors,
                           fp8 *out_t, void *factors_t, int record, Fp8Format format) {
    Fp8DeviceState *s = &model->fp8_state.scaling;
    BlockRecord rec = {NULL, NULL, NULL, NULL};
    if (record)
        rec = {&s->amax_current[index], &s->counts[2 * index], &model->fp8_state.block_scale_min[index],
               &model->fp8_state.block_scale_max[index]};
    block_cast<bf16>(model->fp8_state.recipe, out, factors, out_t, factors_t, rec, x, rows, cols, format,
                     model->fp8_state.margin, model->fp8_state.pow2_scales, model->exec.stream);
}

// The FP8 operands of a linear's GEMMs in the recipe's scaling: per tensor (a pointer to 1/scale) or per
// block (the factors, block_operand's scale modes). Tensor `index`'s cast in cast_fp8 (tiles along its
// features), or transposed in cast_fp8_t (tiles along the tokens).
static GemmOperand cast_operand(GPT *model, int index, int transposed) {
    Fp8Format format = fp8_role_format(model->fp8_state.recipe, fp8_tensor_role(index));
    const fp8 *data = transposed ? model->work.cast_fp8_t : model->work.cast_fp8;
    if (!fp8_recipe_is_block(model->fp8_state.recipe))
        return fp8_operand(data, format, &model->fp8_state.scaling.descale[index]);
    return block_operand(data, format,
                         transposed ? model->fp8_state.cast_factors_t : model->fp8_state.cast_factors,
                         model->fp8_state.recipe, 0);
}

// W (OC, IC) as the forward reads it, or W^T (IC, OC) as the data gradient does.
static GemmOperand weight_operand(GPT *model, int layer, int linear, int transposed) {
    const fp8 *data = transposed ? weight_fp8_t(model, layer, linear) : weight_fp8(model, layer, linear);
    if (!fp8_recipe_is_block(model->fp8_state.recipe))
        return fp8_operand(data, FP8_E4M3,
                           &model->fp8_state.scaling.weight_descale[layer * NUM_BLOCK_LINEARS + linear]);
    return block_operand(data, FP8_E4M3, weight_factors(model, layer, linear, transposed),
                         model->fp8_state.recipe, 1);
}

// The scale of tensor `index`'s cast of x (n). delayed: this step's scale, or while the tensor's history is
// empty the exact scale of x's amax, the max over the ranks (the kernels check the history on the device;
// the host only knows whether any is empty); current: x's amax measured first, the exact scale.
static void fp8_prepare_scale(GPT *model, int index, const bf16 *x, size_t n, Fp8Format format) {
    Fp8DeviceState *s = &model->fp8_state.scaling;
    if (!fp8_recipe_uses_history(model->fp8_state.recipe)) {
        measure_scale<bf16>(&s->amax_measure[index], &s->scale[index], &s->descale[index], x, n, format,
                            model->fp8_state.margin, model->exec.stream);
    } else if (model->fp8_state.histories_empty) {
        const float *history = s->amax_history + (size_t)index * s->history_len;
        measure_amax<bf16>(&s->amax_measure[index], history, s->history_len, x, n, model->exec.stream);
        if (model->sharding.comm.comm) {
            comm_after_compute(model);
            comm_all_reduce(&model->sharding.comm, &s->amax_measure[index], 1, ncclFloat32, ncclMax,
                            model->exec.comm_stream);
            compute_after_comm(model);
        }
        launch<scale_from_amax_kernel>({1, 32, 0, model->exec.stream}, &s->scale[index], &s->descale[index],
                                       &s->amax_measure[index], history, s->history_len, 1, format,
                                       model->fp8_state.margin);
    }
}

// Layers whose activations are kept: all, or with --recompute only the one being recomputed (index 0).
static int kept_layer(const GPT *model, int layer) {
    return model->recompute ? 0 : layer;
}

static fp8 *saved_input_t(GPT *model, int layer, int linear) {
    const GPTConfig *cfg = &model->config;
    size_t N = (size_t)model->B * model->T, C = cfg->channels;
    // in units of C: qkv (C wide), attproj (C), fc (C), fcproj (GPT-2 4C, Llama F); a layer's inputs are
    // linear_input_features_sum wide (GPT-2 7C)
    static const int column_offset[NUM_BLOCK_LINEARS] = {0, 1, 2, 3};
    return model->acts.inputs_fp8_t +
           ((size_t)kept_layer(model, layer) * linear_input_features_sum(cfg) + column_offset[linear] * C) *
               N;
}

// Block recipes: the factors of saved_input_t, the operand (IC, K = N) in tiles along the tokens.
static char *saved_input_factors_t(GPT *model, int layer, int linear) {
    const GPTConfig *cfg = &model->config;
    size_t N = (size_t)model->B * model->T;
    return model->fp8_state.input_factors_t +
           (size_t)kept_layer(model, layer) *
               input_factor_offset(cfg, model->fp8_state.recipe, N, NUM_BLOCK_LINEARS) +
           input_factor_offset(cfg, model->fp8_state.recipe, N, linear);
}

// The forward's input saved for the weight gradient, x^T (IC, N).
static GemmOperand saved_input_operand(GPT *model, int layer, int linear) {
    const fp8 *data = saved_input_t(model, layer, linear);
    if (!fp8_recipe_is_block(model->fp8_state.recipe))
        return fp8_operand(
            data, FP8_E4M3,
            &model->fp8_state.scaling.descale[fp8_tensor_index(layer, linear, FP8_ROLE_INPUT)]);
    return block_operand(data, FP8_E4M3, saved_input_factors_t(model, layer, linear), model->fp8_state.recipe,
                         0);
}

// A linear's FP8 GEMMs, one form for every recipe, once its casts are in place: the forward's out (N,OC) =
// x . W^T + bias, from the input's cast in cast_fp8.
static void fp8_forward_gemm(GPT *model, int layer, int linear, bf16 *out) {
    const GPTConfig *cfg = &model->config;
    int N = model->B * model->T, OC = linear_out_features(cfg, linear), IC = linear_in_features(cfg, linear);
    gemm(&model->gemm,
         {.D = out,
          .d_type = CUDA_R_16BF,
          .A = cast_operand(model, fp8_tensor_index(layer, linear, FP8_ROLE_INPUT), 0),
          .B = weight_operand(model, layer, linear, 0),
          .trans_b = 1,
          .M = N,
          .N = OC,
          .K = IC,
          .epilogue = gemm_bias(linear_bias(model, layer, linear)),
          .fast_accum =
              fp8_gemm_fast_accum(model->fp8_state.recipe, model->fp8_state.fast_accum, FAST_ACCUM_FORWARD)},
         model->exec.stream);
}

// The backward's dinp (N,IC) = dout . W and dW (OC,IC) += dout^T . x, from the output gradient's casts in
// cast_fp8 and (transposed) cast_fp8_t, and the forward's saved input.
static void fp8_backward_gemms(GPT *model, int layer, int linear, bf16 *dinp) {
    const GPTConfig *cfg = &model->config;
    int N = model->B * model->T, OC = linear_out_features(cfg, linear), IC = linear_in_features(cfg, linear);
    int index = fp8_tensor_index(layer, linear, FP8_ROLE_GRAD_OUTPUT);
    // only with --fp8_fast_accum 2, a study's choice: fast accumulation costs the gradients precision
    const int fast =
        fp8_gemm_fast_accum(model->fp8_state.recipe, model->fp8_state.fast_accum, FAST_ACCUM_ALL);
    // dinp (N,IC) = dout_q (N,OC) . (W^T (IC,OC))^T
    gemm(&model->gemm,
         {.D = dinp,
          .d_type = CUDA_R_16BF,
          .A = cast_operand(model, index, 0),
          .B = weight_operand(model, layer, linear, 1),
          .trans_b = 1,
          .M = N,
          .N = IC,
          .K = OC,
          .fast_accum = fast},
         model->exec.stream);
    // dW (OC,IC) += dout^T (OC,N) . (x^T (IC,N))^T
    gemm(&model->gemm,
         {.D = grad_of(model, linear_weight_tensor(linear), layer),
          .d_type = CUDA_R_32F,
          .A = cast_operand(model, index, 1),
          .B = saved_input_operand(model, layer, linear),
          .trans_b = 1,
          .M = OC,
          .N = IC,
          .K = N,
          .accumulate = 1,
          .fast_accum = fast},
         model->exec.stream);
}

// The per-tensor recipes, the scale prepared (fp8_prepare_scale): the input (N,IC) from `load` cast to E4M3
// into cast_fp8 (with out; without, the backward's replay, not) and the saved transpose the weight gradient
// reads, then out (N,OC) = input . W^T + bias. In training (record) the cast adds to the step's amax and
// telemetry counts, as the CPU's fp8_cast.
template <typename Load>
static void fp8_linear_forward(GPT *model, int layer, int linear, bf16 *out, Load load, int record) {
    const GPTConfig *cfg = &model->config;
    Fp8DeviceState *s = &model->fp8_state.scaling;
    int N = model->B * model->T, IC = linear_in_features(cfg, linear);
    int index = fp8_tensor_index(layer, linear, FP8_ROLE_INPUT);
    cast_transpose_values(out ? model->work.cast_fp8 : NULL, saved_input_t(model, layer, linear),
                          record ? &s->amax_current[index] : NULL, record ? &s->counts[2 * index] : NULL,
                          (float *)NULL, load, N, IC, &s->scale[index], FP8_E4M3, model->exec.stream);
    if (out) fp8_forward_gemm(model, layer, linear, out);
}

// out (N,OC) = inp (N,IC) . W^T + bias. With gelu_out (fc's GELU output), in bfloat16: the GEMM also
// applies the GELU (cuBLASLt's GELU_AUX_BIAS: gelu_out = bf16(GELU) of the FP32 result, out its BF16
// rounding, the pre-activation the backward reads) where cuBLASLt has an algorithm for it. Returns whether it
// did.
static int linear_forward(GPT *model, int layer, int linear, bf16 *out, const bf16 *inp, bf16 *gelu_out,
                          int record_amax) {
    const GPTConfig *cfg = &model->config;
    int N = model->B * model->T, OC = linear_out_features(cfg, linear), IC = linear_in_features(cfg, linear);
    int weight_tensor = linear_weight_tensor(linear);
    const bf16 *bias = linear_bias(model, layer, linear);
    if (model->dtype == DTYPE_FLOAT8 && fp8_recipe_is_block(model->fp8_state.recipe)) {
        // tiles along IC for this GEMM, along the tokens into the saved transpose for the weight gradient
        fp8_block_cast(model, fp8_tensor_index(layer, linear, FP8_ROLE_INPUT), inp, N, IC,
                       model->work.cast_fp8, model->fp8_state.cast_factors,
                       saved_input_t(model, layer, linear), saved_input_factors_t(model, layer, linear),
                       record_amax, FP8_E4M3);
        fp8_forward_gemm(model, layer, linear, out);
    } else if (model->dtype == DTYPE_FLOAT8) {
        fp8_prepare_scale(model, fp8_tensor_index(layer, linear, FP8_ROLE_INPUT), inp, (size_t)N * IC,
                          FP8_E4M3);
        fp8_linear_forward(model, layer, linear, out, StoredValues<bf16>{inp}, record_amax);
    } else {
        GemmOperand x = bf16_operand(inp), w = bf16_operand(weight_bf16(model, weight_tensor, layer));
        if (gelu_out && gemm_fused(&model->gemm,
                                   {.D = gelu_out,
                                    .d_type = CUDA_R_16BF,
                                    .A = x,
                                    .B = w,
                                    .trans_b = 1,
                                    .M = N,
                                    .N = OC,
                                    .K = IC,
                                    .epilogue = gemm_gelu_bias(bias, out)},
                                   model->exec.stream))
            return 1;
        gemm(&model->gemm,
             {.D = out,
              .d_type = CUDA_R_16BF,
              .A = x,
              .B = w,
              .trans_b = 1,
              .M = N,
              .N = OC,
              .K = IC,
              .epilogue = gemm_bias(bias)},
             model->exec.stream);
    }
    return 0;
}

// float8's steady state (the delayed recipe once every history holds a step): the input casts of qkv, fc
// (LayerNormValues; Llama RmsNormValues) and fcproj (GeluValues; SwigluValues) compute the norm and
// activation outputs themselves, from the norm's statistics and fc's output, and fc's output-gradient cast
// the activation's backward (GeluBackwardValues; SwigluBackwardValues), so those BF16 tensors are neither
// written nor read back. The current recipe and a first step measure the stored tensor's amax before casting:
// two passes there.
static int casts_compute_inputs(const GPT *model) {
    return model->dtype == DTYPE_FLOAT8 && fp8_recipe_uses_history(model->fp8_state.recipe) &&
           !model->fp8_state.histories_empty;
}

// What the backward of a linear needs of its input without running the linear: float8 keeps the FP8
// transpose the forward's cast saves (same scale, same bits); bfloat16 keeps inp itself.
static void save_linear_input(GPT *model, int layer, int linear, const bf16 *inp) {
    if (model->dtype != DTYPE_FLOAT8) return;
    int N = model->B * model->T, IC = linear_in_features(&model->config, linear);
    if (fp8_recipe_is_block(model->fp8_state.recipe)) {
        fp8_block_cast(model, fp8_tensor_index(layer, linear, FP8_ROLE_INPUT), inp, N, IC, NULL, NULL,
                       saved_input_t(model, layer, linear), saved_input_factors_t(model, layer, linear), 0,
                       FP8_E4M3);
        return;
    }
    fp8_prepare_scale(model, fp8_tensor_index(layer, linear, FP8_ROLE_INPUT), inp, (size_t)N * IC, FP8_E4M3);
    fp8_linear_forward(model, layer, linear, NULL, StoredValues<bf16>{inp}, 0);
}

// The per-tensor recipes, the scale prepared: dout (N,OC) from `load` cast to E5M2 in both layouts, the bias
// gradient (if the linear has a bias) summed on the way (in bias_backward's order, so the same bits); dinp
// (N,IC) = dout . W, dW (OC,IC) += dout^T . x.
template <typename Load>
static void fp8_linear_backward(GPT *model, int layer, int linear, bf16 *dinp, Load load) {
    static_assert(CAST_ROWS == COLUMN_SUM_ROWS && CAST_WARPS == COLUMN_SUM_THREADS_Y,
                  "the cast's column sums must be bias_backward's partial sums");
    const GPTConfig *cfg = &model->config;
    Fp8DeviceState *s = &model->fp8_state.scaling;
    int N = model->B * model->T, OC = linear_out_features(cfg, linear);
    int index = fp8_tensor_index(layer, linear, FP8_ROLE_GRAD_OUTPUT);
    float *dbias = linear_bias_grad(model, layer, linear);
    cast_transpose_values(model->work.cast_fp8, model->work.cast_fp8_t, &s->amax_current[index],
                          &s->counts[2 * index], dbias ? model->work.reduce_scratch : NULL, load, N, OC,
                          &s->scale[index], fp8_role_format(model->fp8_state.recipe, FP8_ROLE_GRAD_OUTPUT),
                          model->exec.stream);
    if (dbias) bias_backward_from_partials(dbias, model->work.reduce_scratch, N, OC, model->exec.stream);
    fp8_backward_gemms(model, layer, linear, dinp);
}

// dinp (N,IC) = dout . W; dW (OC,IC) += dout^T . inp; dbias (if any) += column sums of dout. With gelu_pre
// (fcproj's input's pre-activation, fc's output), in bfloat16: dinp = bf16((dout . W) * GELU'(gelu_pre)) from
// the GEMM's FP32 result (cuBLASLt's DGELU) where cuBLASLt has an algorithm for it. Returns whether it did.
// In bfloat16 the bias gradient comes from the weight gradient's GEMM where it can (BGRADB: the sums over the
// tokens of the BF16 dout it reads, in FP32, written to scratch, since the epilogue overwrites and dbias
// accumulates over the micro-steps), else from bias_backward. The weight gradient runs first, so that dinp
// may overwrite inp (Llama's fcproj: SwiGLU's output gradient over its output, dead after).
static int linear_backward(GPT *model, int layer, int linear, bf16 *dinp, const bf16 *dout, const bf16 *inp,
                           const bf16 *gelu_pre) {
    const GPTConfig *cfg = &model->config;
    int N = model->B * model->T, OC = linear_out_features(cfg, linear), IC = linear_in_features(cfg, linear);
    if (model->dtype == DTYPE_FLOAT8 && !fp8_recipe_is_block(model->fp8_state.recipe)) {
        fp8_prepare_scale(model, fp8_tensor_index(layer, linear, FP8_ROLE_GRAD_OUTPUT), dout, (size_t)N * OC,
                          fp8_role_format(model->fp8_state.recipe, FP8_ROLE_GRAD_OUTPUT));
        fp8_linear_backward(model, layer, linear, dinp, StoredValues<bf16>{dout});
        return 0;
    }
    int weight_tensor = linear_weight_tensor(linear);
    float *dweight = grad_of(model, weight_tensor, layer), *dbias = linear_bias_grad(model, layer, linear);
    if (model->dtype == DTYPE_FLOAT8) {
        if (dbias) bias_backward(dbias, dout, N, OC, model->work.reduce_scratch, model->exec.stream);
        // block recipes: dout in tiles along OC for the data gradient, along the tokens (transposed) for the
        // weight gradient
        fp8_block_cast(model, fp8_tensor_index(layer, linear, FP8_ROLE_GRAD_OUTPUT), dout, N, OC,
                       model->work.cast_fp8, model->fp8_state.cast_factors, model->work.cast_fp8_t,
                       model->fp8_state.cast_factors_t, 1,
                       fp8_role_format(model->fp8_state.recipe, FP8_ROLE_GRAD_OUTPUT));
        fp8_backward_gemms(model, layer, linear, dinp);
        return 0;
    }
    GemmOperand g = bf16_operand(dout), w = bf16_operand(weight_bf16(model, weight_tensor, layer));
    // dW (OC,IC) += dout^T (OC,N) . inp (N,IC), and the bias gradient: the sums of dout^T's rows
    GemmCall dweight_call = {.D = dweight,
                             .d_type = CUDA_R_32F,
                             .A = g,
                             .trans_a = 1,
                             .B = bf16_operand(inp),
                             .M = OC,
                             .N = IC,
                             .K = N,
                             .accumulate = 1};
    // with a bias, cuBLASLt's epilogue sums the rows into scratch, or else a kernel does
    GemmCall fused_call = dweight_call;
    fused_call.epilogue = gemm_bias_grad(model->work.reduce_scratch);
    if (dbias && gemm_fused(&model->gemm, fused_call, model->exec.stream)) {
        launch<add_kernel>({ceil_div(OC, 256), 256, 0, model->exec.stream}, dbias,
                           (const float *)model->work.reduce_scratch, (size_t)OC);
    } else {
        gemm(&model->gemm, dweight_call, model->exec.stream);
        if (dbias) bias_backward(dbias, dout, N, OC, model->work.reduce_scratch, model->exec.stream);
    }
    int gelu_done = gelu_pre && gemm_fused(&model->gemm,
                                           {.D = dinp,
                                            .d_type = CUDA_R_16BF,
                                            .A = g,
                                            .B = w,
                                            .M = N,
                                            .N = IC,
                                            .K = OC,
                                            .epilogue = gemm_dgelu(gelu_pre)},
                                           model->exec.stream);
    if (!gelu_done)
        gemm(&model->gemm, {.D = dinp, .d_type = CUDA_R_16BF, .A = g, .B = w, .M = N, .N = IC, .K = OC},
             model->exec.stream);
    return gelu_done;
}

// ----------------------------------------------------------------------------
// Forward and backward of the whole model, on the tokens in model->io.tokens

// One layer's activations. Kept per layer (or, with --recompute, one layer's worth); the GEMM inputs
// ln1, atty, ln2, fch_gelu only by the bfloat16 plan: float8 keeps their FP8 transposes instead and uses
// one layer of them as scratch.
typedef struct {
    bf16 *ln1, *qkv, *atty, *residual2, *ln2, *fch, *fch_gelu;
    float *ln1_stats, *ln2_stats, *att_lse;
} LayerActs;

// Widths (memory_plan.h's): qkv QKV, fch the fc linear's output (GPT-2 4C, Llama 2F), fch_gelu the MLP's
// hidden F, the norms' statistics norm_stats_floats a row (LayerNorm mean then rstd, RMSNorm rstd).
static LayerActs layer_acts(GPT *model, int layer) {
    const GPTConfig *cfg = &model->config;
    size_t N = (size_t)model->B * model->T, NC = N * cfg->channels, NH = cfg->num_heads;
    size_t k = (size_t)kept_layer(model, layer), g = model->keeps_gemm_inputs ? k : 0;
    size_t stats = norm_stats_floats(cfg) * N;
    LayerActs a;
    a.ln1 = model->acts.ln1 + g * NC;
    a.atty = model->acts.atty + g * NC;
    a.ln2 = model->acts.ln2 + g * NC;
    a.fch_gelu = model->acts.fch_gelu + g * N * model_ffn_dim(cfg);
    a.qkv = model->acts.qkv + k * N * model_qkv_features(cfg);
    a.residual2 = model->acts.residual2 + k * NC;
    a.fch = model->acts.fch + k * N * linear_out_features(cfg, LIN_MLP_UP);
    a.ln1_stats = model->acts.ln1_stats + k * stats;
    a.ln2_stats = model->acts.ln2_stats + k * stats;
    a.att_lse = model->acts.att_lse + k * N * NH;
    return a;
}

// The input of layer l: the embeddings, or the previous layer's output (kept for every layer).
static const bf16 *layer_input(GPT *model, int layer) {
    size_t NC = (size_t)model->B * model->T * model->config.channels;
    return layer == 0 ? model->acts.encoded : model->acts.residual3 + (layer - 1) * NC;
}

// out (N,OC) = linear `linear` of the LayerNorm (gain tensor ln_weight, bias the next) of x (N,C), or with
// add of x = bf16(inp + add) written to the LayerNorm's input sum (one pass: residual_layernorm_forward),
// else x = inp: the LayerNorm's output in ln, its statistics in stats (mean (N), rstd (N)); with
// casts_compute_inputs the statistics only, the cast computing the output. gelu_out: as linear_forward's,
// whose result it returns.
// Llama: the RMSNorm (weight ln_weight, its rstd in stats).
static int layernorm_linear_forward(GPT *model, int l, int ln_weight, bf16 *ln, float *stats, bf16 *sum,
                                    const bf16 *inp, const bf16 *add, int linear, bf16 *out, bf16 *gelu_out,
                                    int record_amax) {
    int N = model->B * model->T, C = model->config.channels, fused = casts_compute_inputs(model);
    int rms = model_parts(&model->config).norm == NORM_RMSNORM;
    const bf16 *weight = weight_bf16(model, ln_weight, l), *x = add ? sum : inp;
    const bf16 *bias = rms ? NULL : weight_bf16(model, ln_weight + 1, l);
    if (rms)
        residual_rmsnorm_forward(fused ? NULL : ln, stats, sum, inp, add, weight, N, C, model->exec.stream);
    else
        residual_layernorm_forward(fused ? NULL : ln, stats, stats + N, sum, inp, add, weight, bias, N, C,
                                   model->exec.stream);
    if (!fused) return linear_forward(model, l, linear, out, ln, gelu_out, record_amax);
    if (rms)
        fp8_linear_forward(model, l, linear, out, RmsNormValues{x, stats, weight}, record_amax);
    else
        fp8_linear_forward(model, l, linear, out, LayerNormValues{x, stats, stats + N, weight, bias},
                           record_amax);
    return 0;
}

// out (N,C) = fcproj of GELU(fch) (N,4C) (Llama: of SwiGLU(fch) (N,2F) -> (N,F)), the activation's output in
// fch_gelu (with casts_compute_inputs: the cast computes it; with gelu_done fc's GEMM wrote it). out NULL
// (the backward's replay): only the input the backward keeps.
static void gelu_linear_forward(GPT *model, int l, const bf16 *fch, bf16 *fch_gelu, int gelu_done, bf16 *out,
                                int record_amax) {
    const GPTConfig *cfg = &model->config;
    int N = model->B * model->T;
    if (casts_compute_inputs(model)) {
        if (model_parts(cfg).mlp == MLP_SWIGLU)
            fp8_linear_forward(model, l, LIN_MLP_DOWN, out, SwigluValues{fch, model_ffn_dim(cfg)},
                               record_amax);
        else
            fp8_linear_forward(model, l, LIN_MLP_DOWN, out, GeluValues{fch}, record_amax);
        return;
    }
    if (model_parts(cfg).mlp == MLP_SWIGLU)
        swiglu_forward(fch_gelu, fch, N, model_ffn_dim(cfg), model->exec.stream);
    else if (!gelu_done)
        gelu_forward(fch_gelu, fch, (size_t)N * 4 * cfg->channels, model->exec.stream);
    if (out)
        linear_forward(model, l, LIN_MLP_DOWN, out, fch_gelu, NULL, record_amax);
    else
        save_linear_input(model, l, LIN_MLP_DOWN, fch_gelu);
}

// residual3[l] = layer l of the input. recomputing (the backward's replay, --recompute 1): the same
// kernels on the same input, weights and scales, so the same bits, without recording amaxes; it stops
// once the backward has what it needs (fcproj's input), leaving residual3[l], which is kept, alone.
static void layer_forward(GPT *model, int l, int record_amax, int recomputing) {
    const GPTConfig *cfg = &model->config;
    int B = model->B, T = model->T, C = cfg->channels, NH = cfg->num_heads, N = B * T;
    int rotary = model_has_rotary(cfg), swiglu = model_parts(cfg).mlp == MLP_SWIGLU;
    size_t NC = (size_t)N * C;
    cudaStream_t stream = model->exec.stream;
    const bf16 *residual = layer_input(model, l);
    LayerActs a = layer_acts(model, l);
    nvtx_push("layer %d %s", l, recomputing ? "recompute" : "forward");
    layernorm_linear_forward(model, l, PT_ATTN_NORM_W, a.ln1, a.ln1_stats, NULL, residual, NULL, LIN_QKV,
                             a.qkv, NULL, record_amax);
    if (rotary) rope_rotate(a.qkv, model->acts.rope, B, T, C, NH, model_kv_heads(cfg), 0, stream);
    attention_forward(&model->attention, a.atty, a.att_lse, a.qkv, B, T, C, NH, stream);
    linear_forward(model, l, LIN_ATTN_OUT, model->work.dc, a.atty, NULL,
                   record_amax); // dc: scratch in the forward
    // residual2 = residual + dc, and the norm of it, in one pass; in bfloat16 fc's GEMM applies GPT-2's GELU
    int gelu_done =
        layernorm_linear_forward(model, l, PT_MLP_NORM_W, a.ln2, a.ln2_stats, a.residual2, residual,
                                 model->work.dc, LIN_MLP_UP, a.fch, swiglu ? NULL : a.fch_gelu, record_amax);
    gelu_linear_forward(model, l, a.fch, a.fch_gelu, gelu_done, recomputing ? NULL : model->work.dc,
                        record_amax);
    if (recomputing) {
        nvtxRangePop();
        return;
    }
    residual_forward(model->acts.residual3 + l * NC, a.residual2, model->work.dc, NC, stream);
    nvtxRangePop();
}

// ZeRO-3: layer `layer` gathered into its slot on the communication stream, with two slots once the
// compute stream is done with the layer the slot held (its layer_done, recorded earlier in this pass).
static void prefetch_layer(GPT *model, int layer) {
    int slot = layer % 2;
    if (model->sharding.weight_slots == 2)
        cuda_check(cudaStreamWaitEvent(model->exec.comm_stream, model->exec.layer_done[slot], 0));
    gather_layer(model, layer);
    cuda_check(cudaEventRecord(model->exec.layer_gathered[slot], model->exec.comm_stream));
}

static void wait_for_layer(GPT *model, int layer) {
    cuda_check(cudaStreamWaitEvent(model->exec.stream, model->exec.layer_gathered[layer % 2], 0));
}

static void layer_finished(GPT *model, int layer) {
    cuda_check(cudaEventRecord(model->exec.layer_done[layer % 2], model->exec.stream));
}

// The LM head's weight: GPT-2's tied to wte, Llama's its own.
static int lm_head(const GPTConfig *cfg) {
    return model_parts(cfg).tied_head ? PT_TOKEN_EMBED : PT_LM_HEAD;
}

static void gpt_forward(GPT *model, int record_amax) {
    const GPTConfig *cfg = &model->config;
    int B = model->B, T = model->T, C = cfg->channels, L = cfg->num_layers, N = B * T;
    size_t NC = (size_t)N * C;
    cudaStream_t stream = model->exec.stream;
    int zero3 = model->zero_stage == 3, gathering = zero3 && !model->sharding.layers_resident;
    int rms = model_parts(cfg).norm == NORM_RMSNORM;
    encoder_forward(model->acts.encoded, model->io.tokens, weight_bf16(model, PT_TOKEN_EMBED, 0),
                    param_in_arch(cfg, PT_POS_EMBED) ? weight_bf16(model, PT_POS_EMBED, 0) : NULL, B, T, C,
                    stream);
    for (int l = 0; l < L; l++) {
        if (gathering && l + 1 >= 2 && l + 1 < L) prefetch_layer(model, l + 1); // overlaps layer l
        if (gathering && l >= 2) wait_for_layer(model, l);
        layer_forward(model, l, record_amax, 0);
        if (zero3) layer_finished(model, l);
    }
    model->sharding.layers_resident = zero3 && model->sharding.weight_slots == L;
    nvtxRangePushA("lm head");
    if (rms)
        residual_rmsnorm_forward(model->acts.lnf, model->acts.lnf_stats, NULL,
                                 model->acts.residual3 + (L - 1) * NC, NULL,
                                 weight_bf16(model, PT_FINAL_NORM_W, 0), N, C, stream);
    else
        layernorm_forward(model->acts.lnf, model->acts.lnf_stats, model->acts.lnf_stats + N,
                          model->acts.residual3 + (L - 1) * NC, weight_bf16(model, PT_FINAL_NORM_W, 0),
                          weight_bf16(model, PT_FINAL_NORM_B, 0), N, C, stream);
    // LM head, GPT-2's tied to wte, Llama's its own, BF16: (N,C) . (Vp,C)^T -> (N,Vp)
    gemm(&model->gemm,
         {.D = model->acts.logits,
          .d_type = CUDA_R_16BF,
          .A = bf16_operand(model->acts.lnf),
          .B = bf16_operand(weight_bf16(model, lm_head(cfg), 0)),
          .trans_b = 1,
          .M = N,
          .N = cfg->padded_vocab_size,
          .K = C},
         stream);
    nvtxRangePop();
}

// A forward no backward follows (evaluation, sampling, the BF16 shadow check): with ZeRO-3 it puts
// layers 0 and 1 back in their slots for the next pass.
static void forward_only(GPT *model) {
    gpt_forward(model, 0);
    if (model->zero_stage != 3 || model->config.num_layers <= 2 || model->sharding.layers_resident) return;
    comm_after_compute(model);
    gather_layer(model, 0);
    gather_layer(model, 1);
    compute_after_comm(model);
}

// Losses of the last forward, and with write_dlogits the loss gradient in place of the logits: the mean
// over the tokens of all micro-batches of all ranks.
static void gpt_loss(GPT *model, int write_dlogits, float *loss_sum) {
    const GPTConfig *cfg = &model->config;
    int N = model->B * model->T;
    float dloss = 1.0f / ((float)N * model->accum_steps * model->sharding.comm.world_size);
    nvtxRangePushA("cross-entropy");
    crossentropy_forward_backward(model->acts.logits, model->acts.losses, model->io.tokens + N, dloss, N,
                                  cfg->vocab_size, cfg->padded_vocab_size, write_dlogits, model->exec.stream);
    launch<accumulate_mean_kernel>({1, 256, 0, model->exec.stream}, loss_sum, model->acts.losses, N);
    nvtxRangePop();
}

// dresidual += the input gradient of norm `weight` (layer l) of inp given dout (model->work.dc): GPT-2's
// LayerNorm or Llama's RMSNorm; the norm's parameter gradients accumulate.
static void norm_backward(GPT *model, int weight, int l, const bf16 *inp, const float *stats) {
    int N = model->B * model->T, C = model->config.channels;
    if (model_parts(&model->config).norm == NORM_RMSNORM)
        rmsnorm_backward(model->work.dresidual, grad_of(model, weight, l), model->work.dc, inp,
                         weight_bf16(model, weight, l), stats, N, C, model->work.reduce_scratch,
                         model->exec.stream);
    else
        layernorm_backward(model->work.dresidual, grad_of(model, weight, l), grad_of(model, weight + 1, l),
                           model->work.dc, inp, weight_bf16(model, weight, l), stats, stats + N, N, C,
                           model->work.reduce_scratch, model->exec.stream);
}

static void layer_backward(GPT *model, int l) {
    const GPTConfig *cfg = &model->config;
    int B = model->B, T = model->T, C = cfg->channels, NH = cfg->num_heads, N = B * T;
    size_t NC = (size_t)N * C;
    cudaStream_t stream = model->exec.stream;
    LayerActs a = layer_acts(model, l);
    nvtx_push("layer %d backward", l);
    if (model_parts(cfg).mlp == MLP_SWIGLU) {
        // SwiGLU's output gradient (N,F) over its output, which only fcproj's weight gradient read (and with
        // casts_compute_inputs no kernel wrote: the buffer is free)
        int F = model_ffn_dim(cfg);
        linear_backward(model, l, LIN_MLP_DOWN, a.fch_gelu, model->work.dresidual, a.fch_gelu, NULL);
        if (casts_compute_inputs(model)) { // fc's output gradient computed by its cast, never stored
            fp8_linear_backward(model, l, LIN_MLP_UP, model->work.dc,
                                SwigluBackwardValues{a.fch_gelu, a.fch, F});
        } else {
            swiglu_backward(model->work.dfch, a.fch_gelu, a.fch, N, F, stream);
            linear_backward(model, l, LIN_MLP_UP, model->work.dc, model->work.dfch, a.ln2, NULL);
        }
    } else {
        // in bfloat16 fcproj's data-gradient GEMM applies the GELU's backward
        int gelu_done = linear_backward(model, l, LIN_MLP_DOWN, model->work.dfch, model->work.dresidual,
                                        a.fch_gelu, a.fch);
        if (casts_compute_inputs(model)) { // fc's output gradient computed by its cast, never stored
            fp8_linear_backward(model, l, LIN_MLP_UP, model->work.dc,
                                GeluBackwardValues{model->work.dfch, a.fch});
        } else {
            if (!gelu_done) gelu_backward(model->work.dfch, a.fch, 4 * NC, stream);
            linear_backward(model, l, LIN_MLP_UP, model->work.dc, model->work.dfch, a.ln2, NULL);
        }
    }
    norm_backward(model, PT_MLP_NORM_W, l, a.residual2, a.ln2_stats);
    linear_backward(model, l, LIN_ATTN_OUT, model->work.dc, model->work.dresidual, a.atty, NULL);
    attention_backward(&model->attention, model->work.dqkv, model->work.att_delta, model->work.dc, a.qkv,
                       a.atty, a.att_lse, B, T, C, NH, stream);
    if (model_has_rotary(cfg))
        rope_rotate(model->work.dqkv, model->acts.rope, B, T, C, NH, model_kv_heads(cfg), 1, stream);
    linear_backward(model, l, LIN_QKV, model->work.dc, model->work.dqkv, a.ln1, NULL);
    norm_backward(model, PT_ATTN_NORM_W, l, layer_input(model, l), a.ln1_stats);
    nvtxRangePop();
}

// ZeRO-3, before layer l's backward: gather layer l-1 ahead (layers L-1 and L-2 are still in their slots
// from the forward; with --keep_gathered all are), wait for layer l, and zero l's gradient slot once the
// reduce-scatter of the layer that used it before (l+2) has read it.
static void begin_layer_backward(GPT *model, int l) {
    int L = model->config.num_layers;
    if (!model->sharding.layers_resident && l - 1 >= 0 && l - 1 <= L - 3) prefetch_layer(model, l - 1);
    if (!model->sharding.layers_resident && l <= L - 3) wait_for_layer(model, l);
    if (l + 2 <= L - 1) cuda_check(cudaStreamWaitEvent(model->exec.stream, model->exec.grads_free[l % 2], 0));
    ShardUnit u = shard_map_unit(&model->sharding.shards, 1 + l);
    cuda_check(cudaMemsetAsync(model->gradients.grads + grad_slot_offset(model, l), 0,
                               u.chunk * model->sharding.shards.ways * sizeof(float), model->exec.stream));
}

// The gradients' sums over the ranks of c, on the communication stream: in FP32, or in BF16 through
// grads_bf16 (--grad_reduce_dtype bfloat16).
static void sum_gradients(GPT *model, Comm *c, float *buf, size_t n) {
    if (model->gradients.grads_bf16_elems)
        comm_all_reduce_bf16(c, buf, n, model->gradients.grads_bf16, model->gradients.grads_bf16_elems,
                             model->exec.comm_stream);
    else
        comm_all_reduce(c, buf, n, ncclFloat32, ncclSum, model->exec.comm_stream);
}

static void reduce_scatter_gradients(GPT *model, float *base, size_t chunk) {
    if (model->gradients.grads_bf16_elems)
        comm_reduce_scatter_bf16(model->sharding.shard_comm, base, chunk, model->gradients.grads_bf16,
                                 model->gradients.grads_bf16_elems, model->exec.comm_stream);
    else
        comm_reduce_scatter(model->sharding.shard_comm, base, chunk, model->exec.comm_stream);
}

// ZeRO-3, after layer l's backward: its gradient slot reduce-scattered in place and this rank's chunk added
// into the gradient shard, on the communication stream while the next layer computes.
static void end_layer_backward(GPT *model, int l) {
    ShardUnit u = shard_map_unit(&model->sharding.shards, 1 + l);
    float *slot = model->gradients.grads + grad_slot_offset(model, l);
    layer_finished(model, l);
    cuda_check(cudaStreamWaitEvent(model->exec.comm_stream, model->exec.layer_done[l % 2], 0));
    reduce_scatter_gradients(model, slot, u.chunk);
    launch<add_kernel>({elementwise_blocks(u.chunk), 256, 0, model->exec.comm_stream},
                       model->gradients.grad_shard + u.shard,
                       slot + (size_t)model->sharding.shards.rank * u.chunk, u.chunk);
    cuda_check(cudaEventRecord(model->exec.grads_free[l % 2], model->exec.comm_stream));
}

// ZeRO-3, after the backward: the global unit's gradients (LM head, final LayerNorm, embeddings) likewise,
// and the compute stream waits for every reduce-scatter of this micro-step.
static void reduce_scatter_global(GPT *model) {
    ShardUnit u = shard_map_unit(&model->sharding.shards, 0);
    comm_after_compute(model);
    reduce_scatter_gradients(model, model->gradients.grads, u.chunk);
    launch<add_kernel>({elementwise_blocks(u.chunk), 256, 0, model->exec.comm_stream},
                       model->gradients.grad_shard + u.shard,
                       model->gradients.grads + (size_t)model->sharding.shards.rank * u.chunk, u.chunk);
    compute_after_comm(model);
}

static void gpt_backward(GPT *model) {
    const GPTConfig *cfg = &model->config;
    int B = model->B, T = model->T, C = cfg->channels, L = cfg->num_layers, N = B * T;
    int Vp = cfg->padded_vocab_size, zero3 = model->zero_stage == 3;
    size_t NC = (size_t)N * C;
    cudaStream_t stream = model->exec.stream;
    const bf16 *dlogits = model->acts.logits;
    if (zero3) { // this micro-step's global gradients (the last ones were reduce-scattered and joined)
        ShardUnit u = shard_map_unit(&model->sharding.shards, 0);
        cuda_check(cudaMemsetAsync(model->gradients.grads, 0,
                                   u.chunk * model->sharding.shards.ways * sizeof(float), stream));
    }
    nvtxRangePushA("lm head backward");
    int head = lm_head(cfg);
    gemm(&model->gemm,
         {.D = model->work.dc,
          .d_type = CUDA_R_16BF,
          .A = bf16_operand(dlogits),
          .B = bf16_operand(weight_bf16(model, head, 0)),
          .M = N,
          .N = C,
          .K = Vp},
         stream);
    gemm(&model->gemm,
         {.D = grad_of(model, head, 0),
          .d_type = CUDA_R_32F,
          .A = bf16_operand(dlogits),
          .trans_a = 1,
          .B = bf16_operand(model->acts.lnf),
          .M = Vp,
          .N = C,
          .K = N,
          .accumulate = 1},
         stream);
    cuda_check(cudaMemsetAsync(model->work.dresidual, 0, NC * sizeof(bf16), stream));
    norm_backward(model, PT_FINAL_NORM_W, 0, model->acts.residual3 + (L - 1) * NC, model->acts.lnf_stats);
    nvtxRangePop();
    for (int l = L - 1; l >= 0; l--) {
        if (zero3) begin_layer_backward(model, l);
        if (model->recompute && l < L - 1) layer_forward(model, l, 0, 1); // the forward left layer L-1's
        layer_backward(model, l);
        if (zero3) end_layer_backward(model, l);
    }
    const int *buckets = model->io.tokens + 2 * N;
    encoder_backward(
        grad_of(model, PT_TOKEN_EMBED, 0),
        param_in_arch(cfg, PT_POS_EMBED) ? grad_of(model, PT_POS_EMBED, 0) : NULL, model->work.dresidual,
        model->io.tokens, buckets, buckets + 2 * N, buckets + N, N, B, T, C, model->work.reduce_scratch,
        stream); // N buckets: the unused ones are empty, so the launch does not depend on the batch
    if (zero3) reduce_scatter_global(model);
}

// ----------------------------------------------------------------------------
// Steps

// Stages a batch (and its embedding-gradient buckets) and copies it into tokens_next on the copy stream,
// while the compute stream still runs the work before it (the host is a step ahead); the compute stream
// then takes it into tokens, in its order, with a device copy. The pinned staging and tokens_next are
// refilled only once the compute stream has taken the batch before (which implies its upload ran).
static void upload_batch(GPT *model, const int *inputs, const int *targets) {
    int N = model->B * model->T;
    size_t bytes = model->plan.bytes[BUF_TOKENS] / 2;
    int *host = model->io.tokens_host;
    comm_wait_event(&model->sharding.comm, model->io.tokens_taken, "the previous batch's upload");
    memcpy(host, inputs, N * sizeof(int));
    memcpy(host + N, targets, N * sizeof(int));
    int *positions = host + 2 * N, *bucket_tokens = host + 3 * N, *starts = host + 4 * N;
    encoder_buckets_host(inputs, N, positions, starts, bucket_tokens, &host[5 * N + 1]);
    cuda_check(
        cudaMemcpyAsync(model->io.tokens_next, host, bytes, cudaMemcpyHostToDevice, model->exec.copy_stream));
    cuda_check(cudaEventRecord(model->io.tokens_uploaded, model->exec.copy_stream));
    cuda_check(cudaStreamWaitEvent(model->exec.stream, model->io.tokens_uploaded, 0));
    cuda_check(cudaMemcpyAsync(model->io.tokens, model->io.tokens_next, bytes, cudaMemcpyDeviceToDevice,
                               model->exec.stream));
    cuda_check(cudaEventRecord(model->io.tokens_taken, model->exec.stream));
}

static void micro_step(GPT *model) {
    gpt_forward(model, 1);
    gpt_loss(model, 1, &model->io.step_results->loss_sum);
    gpt_backward(model);
}

// The gradients summed over the ranks where the optimizer reads them: ZeRO-0 all of them on every rank,
// ZeRO-1 this rank's chunk into the gradient shard (ZeRO-3 reduce-scattered them in the backward); with
// shard groups those sums are the group's, and the shards are then summed across the groups.
static void reduce_gradients(GPT *model) {
    if (model->zero_stage == 0 && model->sharding.comm.comm) {
        comm_after_compute(model);
        sum_gradients(model, &model->sharding.comm, model->gradients.grads, model->num_params);
        compute_after_comm(model);
    }
    if (model->zero_stage == 1) {
        ShardUnit u = shard_map_unit(&model->sharding.shards, 0);
        if (model->sharding.shard_comm->comm) {
            comm_after_compute(model);
            reduce_scatter_gradients(model, model->gradients.grads, u.chunk);
            compute_after_comm(model);
        }
        cuda_check(cudaMemcpyAsync(model->gradients.grad_shard,
                                   model->gradients.grads + (size_t)model->sharding.shards.rank * u.chunk,
                                   u.chunk * sizeof(float), cudaMemcpyDeviceToDevice, model->exec.stream));
    }
    if (model->zero_stage != 0 &&
        model->sharding.replica_comm.comm) { // the groups' shards summed, once a step
        comm_after_compute(model);
        sum_gradients(model, &model->sharding.replica_comm, model->gradients.grad_shard,
                      model->sharding.shard_floats);
        compute_after_comm(model);
    }
}

// AdamW over this rank's chunk of every unit: one launch per run of consecutive tensors that share their
// weight decay (param_decay_run), so that no element has to look up its tensor. The BF16 copy is written
// here for ZeRO-0 and ZeRO-1 (into this rank's chunk of the gathered buffer); ZeRO-3 converts at each
// gather.
static void adamw_step(GPT *model, const float *grads) {
    nvtxRangePushA("adamw");
    for (int unit = 0; unit < model->sharding.num_units; unit++) {
        ShardUnit u = shard_map_unit(&model->sharding.shards, unit);
        if (!u.owned) continue;
        bf16 *copy = model->zero_stage == 0 ? model->weights.params_bf16
                     : model->zero_stage == 1
                         ? model->weights.params_bf16 + (size_t)model->sharding.shards.rank * u.chunk
                         : NULL;
        const size_t begin = shard_unit_begin(&model->sharding.shards, &u), end = begin + u.owned;
        for (size_t start = begin; start < end;) {
            int decayed;
            const size_t stop = param_decay_run(&model->config, start, end, &decayed);
            const size_t at = u.shard + (start - begin), n = stop - start;
            launch<adamw_kernel>({elementwise_blocks((n + 3) / 4), 256, 0, model->exec.stream},
                                 model->weights.params + at, copy ? copy + (start - begin) : NULL, grads + at,
                                 model->weights.m + at, model->weights.v + at, n, decayed,
                                 model->io.step_params, model->io.step_results);
            start = stop;
        }
    }
    nvtxRangePop();
}

// float8, at the end of a step: the FP8 cast counts summed over the ranks (each counts its own batch's
// activations and gradients and its share of the weights), their sum for the host's per-step line, and
// fresh counts unless the host reads this step's telemetry (StepParams.keep_fp8_counts).
static void summarise_fp8_counts(GPT *model) {
    Fp8DeviceState *s = &model->fp8_state.scaling;
    int counted = s->num_tensors + s->num_weights;
    if (model->sharding.comm.comm) {
        comm_after_compute(model);
        comm_all_reduce(&model->sharding.comm, s->counts, 2 * (size_t)counted, ncclUint64, ncclSum,
                        model->exec.comm_stream);
        compute_after_comm(model);
    }
    launch<fp8_step_telemetry_kernel>({1, 256, 0, model->exec.stream}, model->io.step_results, s->counts,
                                      model->fp8_state.block_scale_min, model->fp8_state.block_scale_max,
                                      counted, model->io.step_params);
}

// After the micro-steps: gradients reduced, their norm, the skip decision (the same on every rank: the
// loss and the squared norm are sums over the ranks), AdamW, the new weight casts and scales, and zeroed
// gradients for the next step.
static void update_step(GPT *model) {
    cudaStream_t stream = model->exec.stream;
    float *grads = model->zero_stage == 0 ? model->gradients.grads : model->gradients.grad_shard;
    reduce_gradients(model);
    launch<inject_nan_kernel>({1, 1, 0, stream}, grads, model->io.step_params);
    global_norm_squared(&model->io.step_results->norm_squared, grads, model->sharding.shard_floats,
                        model->work.reduce_scratch, stream);
    launch<stop_vote_kernel>({1, 1, 0, stream}, model->io.step_results, model->io.step_params);
    if (model->sharding.comm.comm) {
        comm_after_compute(model);
        comm_group_start(&model->sharding.comm);
        // the loss sum and, beside it, the votes to stop: every rank learns both from one all-reduce
        comm_all_reduce(&model->sharding.comm, &model->io.step_results->loss_sum, 2, ncclFloat32, ncclSum,
                        model->exec.comm_stream);
        comm_group_end(&model->sharding.comm);
        if (model->zero_stage != 0) // every group holds all the shards: the norm is one group's sum
            comm_all_reduce(model->sharding.shard_comm, &model->io.step_results->norm_squared, 1, ncclFloat64,
                            ncclSum, model->exec.comm_stream);
        compute_after_comm(model);
    }
    launch<step_decide_kernel>({1, 1, 0, stream}, model->io.step_results, model->io.step_params,
                               model->io.guard_history);
    adamw_step(model, grads);
    if (model->zero_stage == 3)
        cuda_check(
            cudaMemsetAsync(model->gradients.grad_shard, 0, model->plan.bytes[BUF_GRAD_SHARD], stream));
    else
        cuda_check(cudaMemsetAsync(model->gradients.grads, 0, model->plan.bytes[BUF_GRADS], stream));
    publish_weights(model, 1);
    if (model->dtype == DTYPE_FLOAT8) summarise_fp8_counts(model);
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
        cuda_check(cudaStreamBeginCapture(model->exec.stream, cudaStreamCaptureModeThreadLocal));
        fn(model);
        cuda_check(cudaStreamEndCapture(model->exec.stream, &graph));
        cuda_check(cudaGraphInstantiate(exec, graph, 0));
        cuda_check(cudaGraphDestroy(graph));
    }
    cuda_check(cudaGraphLaunch(*exec, model->exec.stream));
}

// Step `step`'s values into pinned slot step % 2, whose last copy (step - 2's) has run: the host has read
// step - 2's results, copied after it. updates_known: the AdamW updates of the steps the host has read.
static void set_step_params(GPT *model, const TrainOptions *opts, int step, long long updates_known,
                            int stop_vote) {
    StepParams *p = &model->io.step_params_host[step % 2];
    p->stop_vote = stop_vote;
    p->skip_loss_z = opts->skip_loss_z;
    p->skip_norm_z = opts->skip_norm_z;
    p->guard_window = opts->guard_window;
    p->keep_fp8_counts = fp8_stats_due(opts, step + 1);
    p->inject_nan = step + 1 == opts->inject_nan_step;
    p->lr = learning_rate(opts, step);
    p->beta1 = opts->beta1;
    p->beta2 = opts->beta2;
    p->eps = opts->eps;
    p->weight_decay = opts->weight_decay;
    p->grad_clip = opts->grad_clip;
    p->updates_known = updates_known;
    for (int i = 0; i < 2; i++) {
        p->beta1_candidates[i] = 1.0f - powf(opts->beta1, (float)(updates_known + 1 + i));
        p->beta2_candidates[i] = 1.0f - powf(opts->beta2, (float)(updates_known + 1 + i));
    }
    p->inv_micro_batches = 1.0f / (float)(model->accum_steps * model->sharding.comm.world_size);
    p->fp8_margin = opts->fp8_margin;
    p->history_len = opts->amax_history;
    p->step = step;
    cuda_check(cudaMemcpyAsync(model->io.step_params, p, sizeof(StepParams), cudaMemcpyHostToDevice,
                               model->exec.stream));
}

// Step `step`'s results on their way into pinned slot step % 2, which the host reads (step_results_of)
// while the next step runs.
static void copy_step_results(GPT *model, int step) {
    cuda_check(cudaMemcpyAsync(&model->io.step_results_host[step % 2], model->io.step_results,
                               sizeof(StepResults), cudaMemcpyDeviceToHost, model->exec.stream));
    cuda_check(cudaEventRecord(model->io.results_copied[step % 2], model->exec.stream));
}

static const StepResults *step_results_of(GPT *model, int step) {
    comm_wait_event(&model->sharding.comm, model->io.results_copied[step % 2], "the step's results");
    return &model->io.step_results_host[step % 2];
}

// The results as everything enqueued so far leaves them: waits for the device.
static const StepResults *read_results_now(GPT *model) {
    StepResults *r = &model->io.step_results_host[RESULTS_NOW];
    cuda_check(cudaMemcpyAsync(r, model->io.step_results, sizeof(StepResults), cudaMemcpyDeviceToHost,
                               model->exec.stream));
    comm_wait_stream(&model->sharding.comm, model->exec.stream, "the step's results");
    return r;
}

// The device's part of the training state, fresh or from a checkpoint: the AdamW update count and the
// step guard's window (its record count is the state's: the host's StepGuard only stages the window for the
// state file); no loss summed yet.
static void upload_step_state(GPT *model, const TrainState *state, const StepGuard *guard) {
    StepResults *r = &model->io.step_results_host[RESULTS_NOW];
    memset(r, 0, sizeof(*r));
    r->updates_applied = state->updates_applied;
    r->guard_count = state->guard_count;
    copy_to_device(model->io.step_results, r, sizeof(*r));
    copy_to_device(model->io.guard_history, guard->history, 2 * (size_t)guard->window * sizeof(float));
}

// The mean validation loss over num_batches batches of every rank (each reads its own rows).
static float evaluate(GPT *model, DataLoader *loader, int num_batches) {
    dataloader_reset(loader);
    cuda_check(cudaMemsetAsync(&model->io.step_results->val_loss_sum, 0, sizeof(float), model->exec.stream));
    for (int i = 0; i < num_batches; i++) {
        dataloader_next_batch(loader);
        upload_batch(model, loader->inputs, loader->targets);
        forward_only(model);
        gpt_loss(model, 0, &model->io.step_results->val_loss_sum);
    }
    double sum = read_results_now(model)->val_loss_sum;
    sum_over_ranks(model, &sum, 1);
    return (float)(sum / model->sharding.comm.world_size / num_batches);
}

// The examples of --eval_data that the model answers correctly (eval_data.h), summed over the ranks: the
// forward and the per-token losses on the device, each row's mean and the choice on the host (as llm.c).
static int score_eval_set(GPT *model, EvalSet *set) {
    size_t N = (size_t)model->B * model->T;
    float *losses = (float *)malloc_check(N * sizeof(float), "--eval_data losses");
    for (int batch = 0; batch < set->num_batches; batch++) {
        eval_set_batch(set, batch);
        upload_batch(model, set->inputs, set->targets);
        forward_only(model);
        gpt_loss(model, 0, &model->io.step_results->val_loss_sum);
        copy_to_host(model, losses, model->acts.losses, N * sizeof(float));
        eval_set_take_losses(set, batch, losses);
    }
    free(losses);
    double correct = eval_set_correct(set);
    sum_over_ranks(model, &correct, 1);
    return (int)correct;
}

// sampling.h's view of the model: a forward over tokens, then one position's logits on the host. Every
// rank runs it (ZeRO-3's forward gathers); the ranks hold the same weights and draw the same tokens.
static const float *gpu_position_logits(void *model_ptr, const int *tokens, int position) {
    GPT *model = (GPT *)model_ptr;
    int Vp = model->config.padded_vocab_size;
    upload_batch(model, tokens, tokens);
    forward_only(model);
    copy_to_host(model, model->io.sample_row_bf16, model->acts.logits + (size_t)position * Vp,
                 Vp * sizeof(bf16));
    for (int v = 0; v < Vp; v++) model->io.sample_row[v] = __bfloat162float(model->io.sample_row_bf16[v]);
    return model->io.sample_row;
}

// A sum over the ranks with a buffer of its own, for any n: before the model's buffers exist (run_control.h's
// agreement of the settings) and for a checkpoint's digests (manifest.h), off the steps' path. Both copies
// go on the collective's stream, from and to pinned memory: a cudaMemcpy from pageable memory may return
// before its data reaches the device, on the legacy stream, which a non-blocking stream does not wait for, so
// NCCL could read the buffer before it is written. The device is idle first: a collective still queued on
// another stream of the same communicator (the model's broadcasts at set-up, a step's reductions) would
// otherwise be in flight beside this one, and NCCL's collectives on one communicator must not overlap in
// different orders on different ranks.
static void sum_over_ranks_at_start(void *comm_ptr, double *values, int n) {
    Comm *comm = (Comm *)comm_ptr;
    if (!comm->comm) return;
    cuda_check(cudaDeviceSynchronize());
    const size_t bytes = (size_t)n * sizeof(double);
    double *device, *pinned;
    cudaStream_t stream;
    cuda_check(cudaMalloc((void **)&device, bytes));
    cuda_check(cudaMallocHost((void **)&pinned, bytes));
    cuda_check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    memcpy(pinned, values, bytes);
    cuda_check(cudaMemcpyAsync(device, pinned, bytes, cudaMemcpyHostToDevice, stream));
    comm_all_reduce(comm, device, (size_t)n, ncclFloat64, ncclSum, stream);
    cuda_check(cudaMemcpyAsync(pinned, device, bytes, cudaMemcpyDeviceToHost, stream));
    comm_wait_stream(comm, stream, "the ranks' settings");
    memcpy(values, pinned, bytes);
    cuda_check(cudaStreamDestroy(stream));
    cuda_check(cudaFreeHost(pinned));
    cuda_check(cudaFree(device));
}

// ----------------------------------------------------------------------------
// Checkpoints: the same files as train_cpu. The model file holds the FP32 master, every rank writing its
// own part of it in place; every rank writes its own state file (its moments); rank 0 moves
// latest_checkpoint only after every rank's files are on disk.

#define CHECKPOINT_PIECE ((size_t)1 << 24) // floats per host copy while writing the model file

// This rank's master weights (its chunk of every unit; all of them with ZeRO-0), unit by unit, from a
// model file or from the counter-based initialisation, which gives each element the value a single
// process draws. Never the whole vector on one host with ZeRO-1/3.
static void load_master(GPT *model, const char *path, uint64_t seed) {
    size_t most = 1;
    for (int unit = 0; unit < model->sharding.num_units; unit++) {
        ShardUnit u = shard_map_unit(&model->sharding.shards, unit);
        if (u.owned > most) most = u.owned;
    }
    float *host = (float *)malloc_check(most * sizeof(float), "parameters");
    for (int unit = 0; unit < model->sharding.num_units; unit++) {
        ShardUnit u = shard_map_unit(&model->sharding.shards, unit);
        if (!u.owned) continue;
        size_t begin = shard_unit_begin(&model->sharding.shards, &u);
        if (path)
            load_model_range(path, &model->config, begin, u.owned, host);
        else
            gpt_init_range(host, &model->config, seed, begin, u.owned);
        copy_to_device(model->weights.params + u.shard, host, u.owned * sizeof(float));
    }
    free(host);
}

static void comm_destroy_all(GPT *model) {
    comm_destroy(&model->sharding.replica_comm);
    comm_destroy(&model->sharding.group_comm);
    comm_destroy(&model->sharding.comm);
}

// ----------------------------------------------------------------------------
// Health: the BF16 shadow check, FP8 telemetry, energy

// A BF16 pass of a float8 run (the shadow check, --eval_only's BF16 loss) reads every weight in BF16, which
// float8's gathers leave out (gathers_whole_bf16): with ZeRO-1 the whole copy is gathered first, with
// ZeRO-3 layers 0 and 1 (the pass gathers the others whole as it reaches them).
static void begin_bf16_pass(GPT *model) {
    model->dtype = DTYPE_BFLOAT16;
    if (!model->fp8_weights || !model->sharding.comm.comm || model->zero_stage == 0) return;
    comm_after_compute(model);
    if (model->zero_stage == 1) {
        ShardUnit u = shard_map_unit(&model->sharding.shards, 0);
        comm_all_gather(model->sharding.shard_comm, model->weights.params_bf16, u.chunk, ncclBfloat16,
                        sizeof(bf16), model->exec.comm_stream);
    } else {
        model->sharding.layers_resident = 0; // a float8 pass's kept layers lack the BF16 linear weights
        gather_layer(model, 0);
        if (model->config.num_layers > 1) gather_layer(model, 1);
    }
    compute_after_comm(model);
}

// The loss of the batch in model->io.tokens through the bfloat16 path on the same weights (the BF16 copy);
// runs op by op and leaves the FP8 state untouched. Reads back, so it synchronises: only on check steps.
// This rank's batch only: the caller averages over ranks.
static float bf16_shadow_loss(GPT *model) {
    int dtype = model->dtype;
    begin_bf16_pass(model);
    cuda_check(cudaMemsetAsync(&model->io.step_results->val_loss_sum, 0, sizeof(float), model->exec.stream));
    forward_only(model);
    gpt_loss(model, 0, &model->io.step_results->val_loss_sum);
    model->dtype = dtype;
    return read_results_now(model)->val_loss_sum;
}

// Fresh FP8 cast counters and block-scale spreads.
static void reset_fp8_counts(GPT *model) {
    Fp8DeviceState *s = &model->fp8_state.scaling;
    size_t num_counts = 2 * (size_t)(s->num_tensors + s->num_weights);
    cuda_check(cudaMemsetAsync(s->counts, 0, num_counts * sizeof(unsigned long long), model->exec.stream));
    reset_block_scale_stats(model);
}

// A telemetry step's record from the device (amaxes, scales, counters), then fresh counters. The counters
// are already the sums over the ranks (summarise_fp8_counts), the amaxes the max over ranks
// (reduce_fp8_amaxes), the scales the same on all.
static void fetch_fp8_stats(GPT *model, Fp8Stats *stats) {
    const GPTConfig *cfg = &model->config;
    Fp8DeviceState *s = &model->fp8_state.scaling;
    int n = s->num_tensors, w = s->num_weights;
    size_t num_counts = 2 * (size_t)(n + w);
    unsigned long long *counts = (unsigned long long *)malloc_check(num_counts * 8, "fp8 stats");
    copy_to_host(model, stats->amax, s->amax_last, n * sizeof(float));
    copy_to_host(model, stats->scale, s->scale_last, n * sizeof(float)); // the step's, as the CPU reports
    copy_to_host(model, stats->amax + n, s->weight_amax, w * sizeof(float));
    copy_to_host(model, stats->scale + n, s->weight_scale, w * sizeof(float));
    copy_to_host(model, counts, s->counts, num_counts * sizeof(unsigned long long));
    int block = fp8_recipe_is_block(model->fp8_state.recipe),
        weight_casts = fp8_weight_casts(model->fp8_state.recipe);
    if (block) { // each tensor's spread of block scales; its scale is that of the block holding its amax
        copy_to_host(model, stats->scale_min, model->fp8_state.block_scale_min, (n + w) * sizeof(float));
        copy_to_host(model, stats->scale_max, model->fp8_state.block_scale_max, (n + w) * sizeof(float));
    }
    reset_fp8_counts(model);
    // block recipes cast each activation and gradient twice (tiles along each GEMM's reduction), mxfp8 each
    // weight too
    size_t N =
        (size_t)model->B * model->T * model->accum_steps * model->sharding.comm.world_size * (block ? 2 : 1);
    for (int t = 0; t < n + w; t++) {
        int linear = t < n ? (t / 2) % NUM_BLOCK_LINEARS : (t - n) % NUM_BLOCK_LINEARS;
        size_t OC = linear_out_features(cfg, linear), IC = linear_in_features(cfg, linear);
        if (block)
            stats->scale[t] =
                fp8_block_scale(stats->amax[t], model->fp8_state.recipe, fp8_stats_format(stats, t),
                                model->fp8_state.margin, model->fp8_state.pow2_scales);
        else
            stats->scale_min[t] = stats->scale_max[t] = stats->scale[t]; // one scale per tensor
        stats->saturated[t] = counts[2 * t];
        stats->flushed[t] = counts[2 * t + 1];
        stats->elements[t] = t >= n ? weight_casts * OC * IC : (t % 2) ? N * OC : N * IC;
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

static void energy_meter_stop(EnergyMeter *meter) {
    if (meter->library) dlclose(meter->library);
}

// Joules since energy_meter_start, or -1 when not measured.
static double energy_meter_joules(EnergyMeter *meter) {
    unsigned long long now = 0;
    if (meter->unavailable || meter->get_energy(meter->device, &now) != 0) return -1.0;
    return (now - meter->start_millijoules) / 1e3;
}

// Joules of every rank's GPU together, or -1 when some GPU's energy is not measured.
static double energy_all_ranks(GPT *model, EnergyMeter *meter) {
    double joules = energy_meter_joules(meter),
           values[2] = {joules < 0 ? 0.0 : joules, joules < 0 ? 1.0 : 0.0};
    sum_over_ranks(model, values, 2);
    return values[1] > 0 ? -1.0 : values[0];
}

// ----------------------------------------------------------------------------
// Debug state (debug_state.h): the first step read back op by op, for test/compare_debug_state (one
// process, ZeRO-0 or ZeRO-1: the gradients lie in parameter layout in model->gradients.grads)

static void logits_to_host(GPT *model, float *out) {
    size_t n = (size_t)model->B * model->T * model->config.padded_vocab_size;
    bf16 *staging = (bf16 *)malloc_check(n * sizeof(bf16), "debug state");
    copy_to_host(model, staging, model->acts.logits, n * sizeof(bf16));
    for (size_t i = 0; i < n; i++) out[i] = __bfloat162float(staging[i]);
    free(staging);
}

static void debug_first_micro_step(GPT *model, DebugState *debug, const int *inputs, const int *targets) {
    size_t N = (size_t)model->B * model->T;
    gpt_forward(model, 1);
    logits_to_host(model, debug->logits);
    memcpy(debug->inputs, inputs, N * sizeof(int));
    memcpy(debug->targets, targets, N * sizeof(int));
    gpt_loss(model, 1, &model->io.step_results->loss_sum);
    gpt_backward(model);
    debug->loss = read_results_now(model)->loss_sum;
    copy_to_host(model, debug->grads, model->gradients.grads, model->num_params * sizeof(float));
}

// ----------------------------------------------------------------------------
// Training

// Per-step times: a step's time runs from its start, or from the previous step's read when the host was a
// step ahead, to the read of its results; the summary averages them after warm-up and graph capture.
typedef struct {
    double timed_ms, last_read_ms;
    int timed_steps, first_step;
    double tokens_per_step;
} StepClock;

// The steps whose results the host waits for before it starts the next: while an amax history is empty
// (whether the step was applied picks the next step's kernels), the debug state's steps, and the float8
// telemetry steps (--fp8_stats_every; their records are read whole, once the step has run).
static int host_waits_for_step(const GPT *model, const TrainOptions *opts, int step, int have_debug) {
    return model->fp8_state.histories_empty || have_debug ||
           (model->dtype == DTYPE_FLOAT8 && fp8_stats_due(opts, step + 1));
}

// The host's part of step `step` once its results are in: the state's counters, the step line, the float8
// saturation line and telemetry, the debug state's loss.
static void finish_step(GPT *model, const TrainOptions *opts, int step, double start_ms, TrainState *state,
                        RunLog *log, Fp8Stats *stats, DebugState *debug, StepClock *clock,
                        RunControl *control) {
    const StepResults *r = step_results_of(model, step);
    double now = wall_time_ms(), ms = now - (start_ms > clock->last_read_ms ? start_ms : clock->last_read_ms);
    clock->last_read_ms = now;
    if (step >= clock->first_step + 3) clock->timed_ms += ms, clock->timed_steps++;
    if (r->skipped)
        state->skipped_steps++;
    else
        model->fp8_state.histories_empty = 0; // the step's amaxes entered every history
    state->updates_applied = r->updates_applied;
    state->guard_count = r->guard_count;
    state->step = step + 1;
    run_control_step_time(control, ms);
    run_control_after_step(control, (int)r->stop_votes, r->skipped != SKIP_NONE, &state->consecutive_skips);
    if (debug->step_losses) debug->step_losses[step - debug->first_step] = r->loss;
    const StepParams *p = &model->io.step_params_host[step % 2];
    StepRecord record = {step + 1,
                         opts->steps,
                         r->loss,
                         p->lr,
                         r->grad_norm,
                         ms,
                         clock->tokens_per_step / (ms / 1e3),
                         r->skipped,
                         model_flops_per_token(&model->config, model->T)};
    log_step(log, &record);
    if (model->dtype != DTYPE_FLOAT8) return;
    if (fp8_stats_due(opts, step + 1)) {
        fetch_fp8_stats(model, stats);
        report_fp8_stats(log, opts, step + 1, stats);
    } else {
        print_saturation_summary(step + 1, stats, r->saturation);
    }
}

// Dense BF16 tensor-core peak of the card, for MFU: time_plan.h's data sheets for B200 (sm_100), H100/H200
// SXM and H100 PCIe (sm_90, told apart by their 132 and 114 SMs) and A100 (sm_80); L40S (sm_89).
static double bf16_peak_flops(const cudaDeviceProp *props) {
    int sm = props->major * 10 + props->minor;
    const GpuSpec *gpu = sm >= 100  ? &GPU_SPECS[GPU_B200]
                         : sm >= 90 ? &GPU_SPECS[props->multiProcessorCount < 132 ? GPU_H100_PCIE : GPU_H200]
                         : sm == 80 ? &GPU_SPECS[GPU_A100]
                                    : NULL;
    return gpu ? gpu->bf16_tflops * 1e12 : sm >= 89 ? 362e12 : 0.0;
}

// The GPU of this process: local rank l takes device l of its node.
static void select_device(const Dist *dist, cudaDeviceProp *props) {
    int device_count = 0;
    if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0)
        fail("no CUDA device found (the CPU reference trainer is train_cpu)");
    // One GPU per process: the local rank's GPU of the node, or the only one a process sees when the
    // launcher gives each its own (srun --gpus-per-task=1 sets CUDA_VISIBLE_DEVICES per task).
    int device = device_count == 1 ? 0 : dist->local_rank;
    if (device >= device_count)
        fail("rank %d: local rank %d but this process sees %d CUDA devices: start one process per GPU",
             dist->rank, dist->local_rank, device_count);
    cuda_check(cudaSetDevice(device));
    cuda_check(cudaGetDeviceProperties(props, device));
    // An sm_90a or sm_100a image runs on that architecture alone: a GPU the build has no code for would fail
    // its first launch with "no kernel image", after the set-up. Ask once, for any of the kernels.
    cudaFuncAttributes attributes;
    cudaError_t image = cudaFuncGetAttributes(&attributes, scales_from_history_kernel);
    if (image == cudaErrorNoKernelImageForDevice || image == cudaErrorInvalidDeviceFunction)
        fail("%s (compute capability %d.%d): this build has no code for it (make train builds sm_90a and "
             "sm_100a); rebuild with GPU_ARCH='-gencode arch=compute_%d%d,code=sm_%d%d'",
             props->name, props->major, props->minor, props->major, props->minor, props->major, props->minor);
    cuda_check(image);
}

// The recipes whose GEMMs a cuBLAS of this version (10000 major + 100 minor + patch) has, "delayed, current".
static const char *recipes_of_cublas(int version, char out[OPTION_STRING_LEN]) {
    *out = '\0';
    for (int r = 0; r < FP8_RECIPE_COUNT; r++)
        if (fp8_recipe(r).cublaslt <= version)
            snprintf(out + strlen(out), OPTION_STRING_LEN - strlen(out), "%s%s", *out ? ", " : "",
                     fp8_recipe_name(r));
    return out;
}

// The versions of the libraries this process loaded (not of the headers it was built with), the line a first
// contact's failure is read against; and what needs a newer one, refused now rather than at its first use.
static void check_versions(const TrainOptions *opts, const cudaDeviceProp *props) {
    int driver = 0, runtime = 0, nccl = 0;
    cuda_check(cudaDriverGetVersion(&driver)); // 1000 major + 10 minor
    cuda_check(cudaRuntimeGetVersion(&runtime));
    nccl_check(ncclGetVersion(&nccl));            // 10000 major + 100 minor + patch (NCCL 2.9 and later)
    const size_t cublaslt = cublasLtGetVersion(); // 10000 major + 100 minor + patch
#ifdef USE_CUDNN
    const char *cudnn = cudnn_attention_version();
#else
    const char *cudnn = "none (built without it)";
#endif
    printf("versions | %s, compute capability %d.%d | driver %d.%d | CUDA runtime %d.%d | "
           "cuBLASLt %zu.%zu.%zu | NCCL %d.%d.%d | cuDNN %s | FP8 accumulation %s\n",
           props->name, props->major, props->minor, driver / 1000, driver % 1000 / 10, runtime / 1000,
           runtime % 1000 / 10, cublaslt / 10000, cublaslt / 100 % 100, cublaslt % 100, nccl / 10000,
           nccl / 100 % 100, nccl % 100, cudnn,
           fp8_accumulation_name(fp8_accumulation_of_device(props->major)));
    if (opts->dtype != DTYPE_FLOAT8) return;
    const Fp8RecipeInfo recipe = fp8_recipe(opts->fp8_recipe);
    char others[OPTION_STRING_LEN];
    if (recipe.cublaslt > CUBLAS_VERSION)
        fail("--fp8_recipe %s: this build's cuBLAS %d.%d headers have no %s, which need cuBLAS %d.%d or "
             "newer: "
             "rebuild against that toolkit (%s run here)",
             recipe.name, CUBLAS_VERSION / 10000, CUBLAS_VERSION / 100 % 100, recipe.gemms,
             recipe.cublaslt / 10000, recipe.cublaslt / 100 % 100, recipes_of_cublas(CUBLAS_VERSION, others));
    if ((size_t)recipe.cublaslt > cublaslt)
        fail("--fp8_recipe %s: the loaded cuBLASLt %zu.%zu.%zu has no %s, which need cuBLAS %d.%d or newer",
             recipe.name, cublaslt / 10000, cublaslt / 100 % 100, cublaslt % 100, recipe.gemms,
             recipe.cublaslt / 10000, recipe.cublaslt / 100 % 100);
}

// What the block recipes need of the CUDA trainer: ZeRO-0 (a weight block would span the ranks' shards of
// ZeRO-1/3). The device's own limits (blockwise: Hopper's modes; mxfp8: Blackwell's) are checked once it is
// known.
static void check_gpu_recipe(const TrainOptions *opts) {
    if (opts->dtype == DTYPE_FLOAT8 && fp8_recipe_is_block(opts->fp8_recipe) && opts->zero_stage != 0)
        fail("--fp8_recipe %s: needs --zero_stage 0 in the CUDA trainer for now (a weight block spans the "
             "ranks' "
             "shards with ZeRO-%d)",
             fp8_recipe_name(opts->fp8_recipe), opts->zero_stage);
}

// CUDA Graphs capture one micro-step (one process only). With --keep_gathered, ZeRO-3 gathers the layers in
// an optimizer step's first pass and later passes wait on those gathers' events: a captured pass would wait
// on work recorded outside its capture, which CUDA refuses (cudaErrorStreamCaptureIsolation, the capture
// invalidated), so the combination is refused here rather than at the first capture.
static void check_gpu_graphs(const TrainOptions *opts, int world_size) {
    if (opts->zero_stage == 3 && opts->keep_gathered && opts->cuda_graph && world_size == 1)
        fail("--keep_gathered 1: a CUDA Graph of a micro-step would wait on gathers recorded outside its "
             "capture (CUDA refuses that); add --cuda_graph 0");
}

#ifndef TRAIN_GPT_FP8_NO_MAIN // test/test_plan_bounds.cu includes this file for its host functions
// A run from its set-up to its end: what main's phases share.
typedef struct {
    Dist dist;
    TrainOptions opts;
    GPTConfig cfg;
    cudaDeviceProp props;
    int B, T, accum_steps, have_val, have_eval, have_debug;
    long resume_step; // the checkpoint a --resume run continues
    DataLoader train_loader, val_loader;
    EvalSet eval;
    Tokenizer tokenizer;
    Comm comm, group, replicas; // all ranks; this rank's shard group and its replicas (hybrid sharding)
    GPT model;
    TrainState state;
    StepGuard guard;
    Fp8Stats stats;
    EnergyMeter energy;
    RunLog log;
    RunControl control;
    DebugState debug;
    StepClock clock;
    int micro_calls, update_calls, use_graph;
    // The host reads a step's results while the next step runs (pending), except after the steps whose
    // results it needs before going on (host_waits_for_step).
    int pending;
    double pending_start, step_start;
    double start_ms;    // the process's start: the rented time runs from here
    int *sample_tokens; // (B,T)
} Run;

enum { RUN_GOES_ON = -1 }; // a set-up phase's answer where the run goes on (else: its exit status)

// ----------------------------------------------------------------------------
// Checkpoints: what core/checkpoint_io.h's protocol needs of this trainer

// Every rank writes its own part of the model file from the device, a piece at a time: with ZeRO-1/3 its
// chunk of every unit, straight from its shard (nothing is gathered; with shard groups, the first group's
// ranks); with ZeRO-0, where every rank holds the whole master, an equal share.
static void write_model_range(GPT *model, FILE *f, const char *tmp, size_t begin, size_t count,
                              const float *device, float *host) {
    for (size_t done = 0; done < count; done += CHECKPOINT_PIECE) {
        size_t n = count - done < CHECKPOINT_PIECE ? count - done : CHECKPOINT_PIECE;
        copy_to_host(model, host, device + done, n * sizeof(float));
        model_file_write_range(f, tmp, &model->config, begin + done, n, host);
    }
}

static void write_model_part(void *run, FILE *f, const char *tmp) {
    GPT *model = &((Run *)run)->model;
    float *host = (float *)malloc_check(CHECKPOINT_PIECE * sizeof(float), "checkpoint staging");
    if (model->zero_stage == 0) {
        size_t begin, count;
        model_file_share(model->num_params, model->sharding.comm.rank, model->sharding.comm.world_size,
                         &begin, &count);
        write_model_range(model, f, tmp, begin, count, model->weights.params + begin, host);
    } else if (model->sharding.replica == 0) { // the other groups hold the same shards
        for (int unit = 0; unit < model->sharding.num_units; unit++) {
            ShardUnit u = shard_map_unit(&model->sharding.shards, unit);
            write_model_range(model, f, tmp, shard_unit_begin(&model->sharding.shards, &u), u.owned,
                              model->weights.params + u.shard, host);
        }
    }
    free(host);
}

static void read_model(void *run, const char *path) {
    load_master(&((Run *)run)->model, path, 0);
}

// The state file's arrays, staged on the host: this rank's moments, the amax histories and the step guard's
// window.
static void state_blocks(void *run, float *staging, StateBlock blocks[NUM_STATE_BLOCKS]) {
    GPT *model = &((Run *)run)->model;
    StepGuard *guard = &((Run *)run)->guard;
    size_t S = model->sharding.shard_floats,
           H = (size_t)model->fp8_state.scaling.num_tensors * model->fp8_state.scaling.history_len;
    blocks[STATE_ADAM_M] = StateBlock{staging, S};
    blocks[STATE_ADAM_V] = StateBlock{staging + S, S};
    blocks[STATE_AMAX_HISTORY] = StateBlock{staging + 2 * S, H};
    blocks[STATE_GUARD_HISTORY] = StateBlock{guard->history, 2 * (size_t)guard->window};
}

static void state_to_blocks(void *run, StateBlock blocks[NUM_STATE_BLOCKS]) {
    GPT *model = &((Run *)run)->model;
    StepGuard *guard = &((Run *)run)->guard;
    copy_to_host(model, guard->history, model->io.guard_history, 2 * (size_t)guard->window * sizeof(float));
    copy_to_host(model, blocks[STATE_ADAM_M].data, model->weights.m,
                 blocks[STATE_ADAM_M].count * sizeof(float));
    copy_to_host(model, blocks[STATE_ADAM_V].data, model->weights.v,
                 blocks[STATE_ADAM_V].count * sizeof(float));
    copy_to_host(model, blocks[STATE_AMAX_HISTORY].data, model->fp8_state.scaling.amax_history,
                 blocks[STATE_AMAX_HISTORY].count * sizeof(float));
}

// After a load: the moments and histories to the device (the guard's window goes with upload_step_state),
// and whether a history is still empty (its scales then come from the first step's amaxes).
static void state_from_blocks(void *run, const TrainState *state, StateBlock blocks[NUM_STATE_BLOCKS]) {
    (void)state;
    GPT *model = &((Run *)run)->model;
    copy_to_device(model->weights.m, blocks[STATE_ADAM_M].data, blocks[STATE_ADAM_M].count * sizeof(float));
    copy_to_device(model->weights.v, blocks[STATE_ADAM_V].data, blocks[STATE_ADAM_V].count * sizeof(float));
    copy_to_device(model->fp8_state.scaling.amax_history, blocks[STATE_AMAX_HISTORY].data,
                   blocks[STATE_AMAX_HISTORY].count * sizeof(float));
    model->fp8_state.histories_empty = 0;
    for (int t = 0; t < model->fp8_state.scaling.num_tensors; t++)
        model->fp8_state.histories_empty |= fp8_history_empty(
            blocks[STATE_AMAX_HISTORY].data + (size_t)t * model->fp8_state.scaling.history_len,
            model->fp8_state.scaling.history_len);
}

static CheckpointIO checkpoint_io(Run *r) {
    GPT *model = &r->model;
    size_t staging = 2 * model->sharding.shard_floats +
                     (size_t)model->fp8_state.scaling.num_tensors * model->fp8_state.scaling.history_len;
    CheckpointIO io = {r,
                       sum_over_ranks_at_start,
                       &model->sharding.comm,
                       r->dist.rank,
                       r->dist.world_size,
                       write_model_part,
                       read_model,
                       staging,
                       state_blocks,
                       state_to_blocks,
                       state_from_blocks};
    return io;
}

static void checkpoint_now(Run *r) {
    double start = wall_time_ms();
    r->state.train_position = r->train_loader.pos;
    comm_wait_stream(&r->model.sharding.comm, r->model.exec.stream, "the step before a checkpoint");
    CheckpointIO io = checkpoint_io(r);
    checkpoint_save(&io, &r->opts, &r->state, &r->cfg);
    run_control_checkpoint_time(&r->control, wall_time_ms() - start);
}

// ----------------------------------------------------------------------------
// Records: what core/run_records.h needs of this trainer

static float val_loss(void *run, int bf16) {
    Run *r = (Run *)run;
    if (!bf16) return evaluate(&r->model, &r->val_loader, r->opts.val_batches);
    begin_bf16_pass(&r->model);
    float loss = evaluate(&r->model, &r->val_loader, r->opts.val_batches);
    r->model.dtype = DTYPE_FLOAT8;
    return loss;
}

static int eval_correct(void *run) {
    return score_eval_set(&((Run *)run)->model, &((Run *)run)->eval);
}

static void sample_after(void *run, int step) {
    Run *r = (Run *)run;
    sample_text(&r->model, gpu_position_logits, &r->tokenizer, r->sample_tokens, r->B, r->T,
                r->cfg.vocab_size, r->opts.sample_len, step);
}

static void checkpoint_hook(void *run) {
    checkpoint_now((Run *)run);
}

static RunHooks run_hooks(Run *r) {
    RunHooks hooks = {
        r, val_loss, eval_correct, r->have_eval ? r->eval.num_examples : 0, sample_after, checkpoint_hook};
    return hooks;
}

// Set-up 1: the processes, the flags and the model's shape; a dry run ends with its plan.
static int read_settings(Run *r, int argc, char **argv) {
    r->start_ms = wall_time_ms();
    dist_init(&r->dist, &argc, &argv);
    dist_quiet_other_ranks(&r->dist);
    line_buffer_stdout();
    parse_options(&r->opts, argc, argv);
    validate_options(&r->opts);
    stop_signals_install(stop_signal_number(&r->opts));
    r->dist.timeout_s = r->opts.nccl_timeout_s;
    if (r->opts.dtype == DTYPE_FLOAT32)
        fail("--dtype: float32 is the CPU reference's (train_cpu); the GPU trainer runs bfloat16 or float8");
    r->cfg = *r->opts.init_from ? model_file_config(r->opts.init_from) : config_from_options(&r->opts);
    if (*r->opts.init_from) check_init_from_shape(&r->opts, &r->cfg);
    r->B = r->opts.batch_size, r->T = resolve_seq_len(&r->opts, &r->cfg);
    check_fp8_recipe_shape(&r->opts, &r->cfg, r->B, r->T);
    check_gpu_recipe(&r->opts);
    if (!r->opts.dry_run) return RUN_GOES_ON;
    return dry_run_only(&r->opts, &r->cfg, r->B, r->T, &r->dist);
}

// Set-up 2: the output directory, the checks of the run's shape, the data and the tokenizer.
static void open_inputs(Run *r) {
    const TrainOptions *opts = &r->opts;
    const Dist *dist = &r->dist;
    check_gpu_graphs(opts, dist->world_size);
    if (dist->rank == 0) prepare_output_dir(opts->output_dir); // the others find it once NCCL has joined them
    run_dir_claim(opts, dist->rank);
    if (*opts->debug_state) check_writable_file(opts->debug_state, "--debug_state");
    r->accum_steps = resolve_grad_accum_steps(opts, r->T, dist->world_size);
    comm_check_bootstrap(dist, opts->output_dir);
    if (*opts->debug_state && dist->world_size > 1)
        fail("--debug_state: the CPU reference's check runs one process; this run has %d", dist->world_size);
    if (*opts->debug_state && opts->zero_stage == 3)
        fail("--debug_state: needs --zero_stage 0 or 1 (ZeRO-3 holds two layers of gradients at a time)");
    if (*opts->debug_state && r->accum_steps != 1)
        fail("--debug_state: needs a run without gradient accumulation");
    check_attention_shape(r->cfg.channels, r->cfg.num_heads);
    if (opts->dtype == DTYPE_FLOAT8 || opts->eval_only) check_fp8_shapes(&r->cfg, r->B, r->T);
    dataloader_init(&r->train_loader, opts->train_data, r->B, r->T, dist->rank, dist->world_size,
                    opts->shuffle, (uint64_t)opts->seed, r->cfg.vocab_size);
    r->have_val = *opts->val_data != '\0';
    if (r->have_val)
        dataloader_init(&r->val_loader, opts->val_data, r->B, r->T, dist->rank, dist->world_size, 0, 0,
                        r->cfg.vocab_size);
    r->have_eval = *opts->eval_data != '\0';
    if (r->have_eval)
        eval_set_init(&r->eval, opts->eval_data, r->B, r->T, r->cfg.vocab_size, dist->rank, dist->world_size);
    load_tokenizer_for(&r->tokenizer, opts, &r->cfg);
    check_run_inputs(opts, dist->rank, &r->train_loader, r->have_val ? &r->val_loader : NULL);
    r->sample_tokens = (int *)malloc_check((size_t)r->B * r->T * sizeof(int), "sample buffer");
}

// What the device can run of this run's recipe: the compute capabilities whose cuBLASLt has its GEMMs (FP8
// tensor cores, Hopper's block scaling, Blackwell's MXFP8).
static void check_device_recipe(const TrainOptions *opts, const cudaDeviceProp *props) {
    if (opts->dtype != DTYPE_FLOAT8) return;
    const Fp8RecipeInfo recipe = fp8_recipe(opts->fp8_recipe);
    int cc = props->major * 10 + props->minor;
    if (cc >= recipe.min_cc && (!recipe.max_cc || cc <= recipe.max_cc)) return;
    char range[32];
    if (recipe.max_cc)
        snprintf(range, sizeof range, "sm_%d to sm_%d", recipe.min_cc, recipe.max_cc);
    else
        snprintf(range, sizeof range, "sm_%d or newer", recipe.min_cc);
    fail("--fp8_recipe %s: %s (sm_%d): cuBLASLt's %s need %s (%s); train_cpu runs every recipe", recipe.name,
         props->name, cc, recipe.gemms, recipe.gpu, range);
}

// Set-up 3: this process's GPU and libraries, NCCL, the ranks' agreement and their shard groups.
static void join_ranks(Run *r) {
    Dist *dist = &r->dist;
    const TrainOptions *opts = &r->opts;
    select_device(dist, &r->props);
    check_versions(opts, &r->props);
    check_device_recipe(opts, &r->props);
    comm_init(&r->comm, dist, opts->output_dir, opts->nccl_timeout_s);
    // before any other collective: ranks with other flags would meet in mismatched ones
    check_ranks_agree(opts, &r->cfg, &r->train_loader, r->have_val ? &r->val_loader : NULL, dist->rank,
                      dist->world_size, sum_over_ranks_at_start, &r->comm);
    run_dir_agree(opts, dist->rank, dist->world_size, sum_over_ranks_at_start,
                  &r->comm); // before any training
    r->resume_step =
        resume_step_for_run(opts, dist->rank, dist->world_size, sum_over_ranks_at_start, &r->comm);
    dist_set_shard_group(dist, resolve_shard_group(opts, dist->world_size));
    if (dist->replicas > 1) {
        comm_split(&r->comm, dist->replica, &r->group);
        comm_split(&r->comm, dist->group_rank, &r->replicas);
    }
}

// Set-up 4: the model with its weights (fresh, --init_from's or the checkpoint's), the training state, the
// step guard, the scales and the energy meter.
static void build_model(Run *r) {
    TrainOptions *opts = &r->opts;
    Dist *dist = &r->dist;
    GPT *model = &r->model;
    if (opts->eval_only &&
        r->have_val) { // the float8 model holds both paths: its BF16 copy and its FP8 casts
        opts->dtype = DTYPE_FLOAT8;
        opts->fp8_recipe = FP8_RECIPE_CURRENT;
    }
    gpt_alloc(model, &r->cfg, opts, r->B, r->T, r->accum_steps, &r->comm,
              dist->replicas > 1 ? &r->group : NULL);
    if (dist->replicas > 1) model->sharding.replica_comm = r->replicas;
    model->sharding.replica = dist->replica;
    r->state =
        train_state_init(opts, &r->train_loader, r->B, r->T, r->accum_steps, dist->rank, dist->world_size);
    check_ranks_same_data(&r->train_loader, dist->rank, dist->world_size, sum_over_ranks_at_start, &r->comm);
    step_guard_init(&r->guard, opts->guard_window);
    if (opts->resume) {
        CheckpointIO io = checkpoint_io(r);
        checkpoint_load(&io, opts, r->resume_step, &r->state, &r->cfg);
        resume_data_position(&r->train_loader, opts->output_dir, &r->state);
    } else {
        load_master(model, *opts->init_from ? opts->init_from : NULL, (uint64_t)opts->seed);
    }
    upload_step_state(model, &r->state, &r->guard); // synchronous copies: before any collective is in flight
    launch<scales_from_history_kernel>(
        {ceil_div(model->fp8_state.scaling.num_tensors, 128), 128, 0, model->exec.stream},
        model->fp8_state.scaling, opts->fp8_margin);
    refresh_compute_weights(model);
    fp8_stats_alloc(&r->stats, r->cfg.num_layers, opts->fp8_recipe);
    if (opts->dtype == DTYPE_FLOAT8) reset_fp8_counts(model); // the start-up weight casts belong to no step
    int device;
    cuda_check(cudaGetDevice(&device));
    energy_meter_start(&r->energy, device); // the GPU this process uses, not its local rank's index
}

static void print_run_line(const Run *r) {
    const GPTConfig *cfg = &r->cfg;
    const TrainOptions *opts = &r->opts;
    char model[160];
    model_description(cfg, model, sizeof(model));
    printf("train | %s | model %s | %zu parameters | dtype %s | B=%d T=%d accum=%d | "
           "%d process(es), zero_stage %d%s%s, recompute %d | %.2f GiB planned per GPU | attention %s\n",
           r->props.name, model, r->model.num_params, dtype_name(opts->dtype), r->B, r->T, r->accum_steps,
           r->dist.world_size, opts->zero_stage, shard_groups_label(&r->dist),
           opts->keep_gathered ? ", layers kept gathered" : "", opts->recompute,
           r->model.plan.total / 1073741824.0, r->model.attention.description);
}

// Set-up 5: the run's line and log, the validation a resumed run owes, --eval_only's losses, the debug
// state, the step clock, CUDA Graphs and the run control.
static void open_records(Run *r) {
    TrainOptions *opts = &r->opts;
    print_run_line(r);
    run_log_open(&r->log, r->dist.rank == 0 ? opts->log_file : "", (long)r->state.step);
    RunHooks hooks = run_hooks(r);
    records_at_start(&hooks, opts, &r->log, (long)r->state.step, r->have_val);
    r->debug = {};
    r->have_debug = *opts->debug_state != '\0';
    if (r->have_debug)
        debug_state_alloc(&r->debug, &r->cfg, r->B, r->T, opts->dtype, (int)r->state.step,
                          opts->steps - (int)r->state.step);
    int world = r->dist.world_size;
    r->clock = {0.0, 0.0, 0, (int)r->state.step, (double)r->B * r->T * r->accum_steps * world};
    r->micro_calls = r->update_calls = 0;
    r->use_graph = opts->cuda_graph && !r->have_debug && world == 1;
    if (opts->cuda_graph && world > 1 && opts->steps > r->clock.first_step)
        printf("note | CUDA Graphs are off with several processes: the steps and their NCCL calls run op by "
               "op\n");
    r->pending = -1;
    r->pending_start = 0.0;
    run_control_start(&r->control, opts);
    run_control_reserve_checkpoint(&r->control, 4.0 * (double)r->model.num_params / world +
                                                    8.0 * (double)r->model.sharding.shard_floats);
    dist_stall_if_chosen(&r->dist, opts->inject_stall_rank);
}

// A run that ends before its first step (a resumed run with nothing left to do, a stop asked for during
// set-up): what set-up allocated freed, and its exit status; model_built: after build_model (the
// communicators are then the model's).
static int end_in_set_up(Run *r, int model_built, int status) {
    if (model_built) {
        step_guard_free(&r->guard);
        fp8_stats_free(&r->stats);
        energy_meter_stop(&r->energy);
        gpt_free(&r->model);
        comm_destroy_all(&r->model);
    } else {
        if (r->dist.replicas > 1) comm_destroy(&r->replicas), comm_destroy(&r->group);
        comm_destroy(&r->comm);
    }
    if (r->have_eval) eval_set_free(&r->eval);
    if (r->have_val) dataloader_free(&r->val_loader);
    dataloader_free(&r->train_loader);
    if (r->tokenizer.loaded) tokenizer_free(&r->tokenizer);
    free(r->sample_tokens);
    dist_finalize(&r->dist);
    return status;
}

static int set_up_run(Run *r, int argc, char **argv) {
    int status = read_settings(r, argc, argv);
    if (status != RUN_GOES_ON) return status;
    open_inputs(r);
    join_ranks(r);
    if (r->opts.resume && !resume_has_work(&r->opts, r->resume_step)) return end_in_set_up(r, 0, 0);
    // a stop asked for while the data was indexed and NCCL joined the ranks, then while a checkpoint loaded
    if (stopped_in_set_up(r->dist.rank, r->dist.world_size, sum_over_ranks_at_start, &r->comm))
        return end_in_set_up(r, 0, EXIT_STOPPED);
    build_model(r);
    if (stopped_in_set_up(r->dist.rank, r->dist.world_size, sum_over_ranks_at_start, &r->model.sharding.comm))
        return end_in_set_up(r, 1, EXIT_STOPPED);
    open_records(r);
    return RUN_GOES_ON;
}

// The host's part of the step whose results it reads now (finish_step).
static void finish_pending(Run *r) {
    finish_step(&r->model, &r->opts, r->pending, r->pending_start, &r->state, &r->log, &r->stats, &r->debug,
                &r->clock, &r->control);
    r->pending = -1;
}

// One micro-step queued: its batch, its forward and backward (captured as a graph where it can be), and the
// first's --bf16_check_every shadow loss or debug state.
static void queue_micro_step(Run *r, int step, int micro, int bf16_check) {
    GPT *model = &r->model;
    micro_step_progress(step + 1, micro, r->accum_steps);
    dataloader_next_batch(&r->train_loader);
    upload_batch(model, r->train_loader.inputs, r->train_loader.targets);
    float bf16_loss = 0.0f;
    if (bf16_check && micro == 0) {
        if (r->pending >= 0) finish_pending(r); // its line first
        bf16_loss = bf16_shadow_loss(model);
    }
    if (r->have_debug && step == r->debug.first_step) {
        debug_first_micro_step(model, &r->debug, r->train_loader.inputs, r->train_loader.targets);
    } else {
        // graphs only once no cast measures first: a captured step replays the same kernels
        run_captured(model, micro_step, &model->exec.micro_graph,
                     r->use_graph && !model->fp8_state.histories_empty, &r->micro_calls);
    }
    if (bf16_check && micro == 0) {
        // loss_sum holds this first micro-batch's loss alone
        double losses[2] = {read_results_now(model)->loss_sum, bf16_loss};
        sum_over_ranks(model, losses, 2); // both means over the ranks: every rank decides alike
        int world = r->dist.world_size;
        log_bf16_check(&r->log, &r->opts, step + 1, (float)(losses[0] / world), (float)(losses[1] / world));
    }
}

// One optimizer step queued: its micro-steps, then the update (the guards and AdamW on the device), then
// the copy of its results for the host to read.
static void train_step(Run *r, int step) {
    GPT *model = &r->model;
    const TrainOptions *opts = &r->opts;
    r->step_start = wall_time_ms();
    run_control_inject(opts, r->dist.rank, step);
    nvtxRangePushA("step"); // an optimizer step, for profilers' timelines and the emulator's counts
    set_step_params(model, opts, step, r->state.updates_applied,
                    run_control_vote(&r->control, r->log.failed));
    int bf16_check = opts->bf16_check_every > 0 && (step + 1) % opts->bf16_check_every == 0;
    for (int micro = 0; micro < r->accum_steps; micro++) queue_micro_step(r, step, micro, bf16_check);
    run_captured(model, update_step, &model->exec.update_graph,
                 r->use_graph && !model->fp8_state.histories_empty, &r->update_calls);
    copy_step_results(model, step);
    nvtxRangePop();
}

// The end of a step: the previous step's results read, and where this step's are needed now, the wait for
// them and what the step's end holds (run_records.h); 0 where the run ends early.
static int end_of_step(Run *r, int step) {
    if (r->pending >= 0) finish_pending(r);
    r->pending = step, r->pending_start = r->step_start;
    // a stop the ranks agreed on in a step read so far (every rank reads the same steps at the same points):
    // this step, already under way, is the last
    StepEnd end = step_end(&r->opts, &r->control, step, r->have_val);
    if (!(end.last || end.ends_early || end.validate || end.score || end.sample || end.checkpoint ||
          host_waits_for_step(&r->model, &r->opts, step, r->have_debug)))
        return 1;
    finish_pending(r);
    RunHooks hooks = run_hooks(r);
    return records_after_step(&hooks, &end, &r->log, step);
}

// The summary line: the mean step time after warm-up, MFU, and the memory the run held.
static void print_summary(const Run *r) {
    if (r->clock.timed_steps == 0) return;
    size_t free_bytes, total_bytes;
    cuda_check(cudaMemGetInfo(&free_bytes, &total_bytes));
    double ms = r->clock.timed_ms / r->clock.timed_steps,
           tokens_per_second = r->clock.tokens_per_step / (ms / 1e3);
    double peak = bf16_peak_flops(&r->props) * r->dist.world_size;
    double mfu = peak > 0 ? 100.0 * model_flops_per_token(&r->cfg, r->T) * tokens_per_second / peak : 0.0,
           hfu = peak > 0 ? 100.0 * hardware_flops_per_token(&r->cfg, r->T, r->opts.recompute) *
                                tokens_per_second / peak
                          : 0.0;
    // every buffer is allocated up front from the plan, so the plan's total is this run's peak
    printf("summary | %.1f ms/step | %.0f tok/s | MFU %.1f%% of the BF16 peak (6 x (parameters - input "
           "embeddings) + 6 L C T FLOPs a token), hardware FLOPs %.1f%% | peak memory %.2f GiB "
           "(device in use: %.2f GiB)\n",
           ms, tokens_per_second, mfu, hfu, r->model.plan.total / 1073741824.0,
           (total_bytes - free_bytes) / 1073741824.0);
}

// The end of the run: the debug state, the last lines and the exit status, everything freed.
static int end_run(Run *r) {
    if (r->have_debug) debug_state_write(r->opts.debug_state, &r->debug);
    print_summary(r);
    if (r->state.skipped_steps) printf("skipped steps: %ld\n", (long)r->state.skipped_steps);
    int status = run_control_finish(&r->control, &r->opts, r->dist.rank, (long)r->state.step,
                                    (long)r->state.skipped_steps, r->log.failed);
    log_rental(&r->log, &r->opts, r->dist.world_size, wall_time_ms() - r->start_ms);
    log_energy(&r->log, energy_all_ranks(&r->model, &r->energy), &r->opts,
               r->energy.unavailable ? r->energy.unavailable : "a GPU of another rank has no energy counter");
    run_log_close(&r->log);
    step_guard_free(&r->guard);
    fp8_stats_free(&r->stats);
    if (r->have_debug) debug_state_free(&r->debug);
    if (r->have_eval) eval_set_free(&r->eval);
    if (r->have_val) dataloader_free(&r->val_loader);
    dataloader_free(&r->train_loader);
    if (r->tokenizer.loaded) tokenizer_free(&r->tokenizer);
    free(r->sample_tokens);
    gpt_free(&r->model);
    comm_destroy_all(&r->model);
    energy_meter_stop(&r->energy);
    dist_finalize(&r->dist);
    return status;
}

int main(int argc, char **argv) {
    stop_signals_install(SIGUSR1); // first: a stop signal during set-up stops the run (run_control.h)
    Run run;
    int status = set_up_run(&run, argc, argv);
    if (status != RUN_GOES_ON) return status;
    for (int step = (int)run.state.step; step < run.opts.steps; step++) {
        train_step(&run, step);
        if (!end_of_step(&run, step)) break;
    }
    return end_run(&run);
}
#endif // TRAIN_GPT_FP8_NO_MAIN

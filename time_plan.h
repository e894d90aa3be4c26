// time_plan.h: --dry_run's time plan, what one optimizer step of the CUDA trainer should take per process,
// printed without a GPU. It counts the work of the step and divides it by achieved rates:
//  - the FLOPs of the GEMMs (the block linears in the run's dtype, the LM head in BF16) and of the fused
//    attention, at assumed TFLOP/s;
//  - the DRAM bytes of the memory-bound kernels (LayerNorm or RMSNorm, residual, GELU or SwiGLU, Llama's
//    RoPE, bias gradients, FP8 casts, cross-entropy, AdamW; in bfloat16 the GELU epilogues' extra GEMM
//    traffic), at an assumed bandwidth;
//  - the payload of every NCCL collective the step issues (exactly the trainer's: the emulation counts
//    them, test/test_dist_emu.sh compares), on the wire as a ring moves it, at the bandwidth inside a node
//    or, when the ranks span nodes, between them (with --shard_group_size, the shards' collectives over
//    the group's link and the gradient sum across the groups between nodes); ZeRO-3's layer gathers and
//    reduce-scatters run on the communication stream beside the layers' compute, the rest between phases.
// The rates are flags (--plan_*, --intra_node_gbps, --inter_node_gbps); their defaults are assumptions, not
// measurements: no GPU has measured them yet (docs/gpu-results.md), and a measured rate belongs in the flag.
// The shapes are gpt_model.h's, so one plan serves GPT-2 and Llama; for Llama (which the CUDA trainer does
// not run yet) it is the plan of kernels and collectives laid out as GPT-2's are.
#ifndef TIME_PLAN_H
#define TIME_PLAN_H

#include <stdio.h>

#include "cli.h"
#include "dist.h"
#include "gpt_model.h"
#include "memory_plan.h"

#define H200_BF16_PEAK_FLOPS 989.4e12 // dense tensor-core FLOP/s, the MFU denominator
// The exact attention (gpu/attention.cuh's CUDA-core kernels, --attention exact): FP32 multiply and add as
// two instructions (33.5 of the H200's 67 TFLOP/s of FMA), q.k computed twice in the forward and six dot
// products per pair in the backward (about 1.3 times the counted FLOPs), half the instruction rate reached.
#define EXACT_ATTENTION_TFLOPS 12.0

// Model FLOPs per token of a training step (forward + backward): 6 per parameter and the attention scores
// and values, 12 L C T (PaLM's accounting; the trainer's MFU uses it too). With grouped-query attention the
// scores are still NH query heads of C/NH each: 12 L C T as well.
static inline double flops_per_token(const GPTConfig *cfg, size_t num_params, int T) {
    return 6.0 * num_params + 12.0 * cfg->num_layers * cfg->channels * T;
}

enum { COLL_ALL_REDUCE, COLL_ALL_GATHER, COLL_REDUCE_SCATTER, COLL_BROADCAST, NUM_COLLECTIVE_KINDS };
static const char *const COLLECTIVE_NAMES[NUM_COLLECTIVE_KINDS] = {"all-reduce", "all-gather",
                                                                   "reduce-scatter", "broadcast"};
static const char *const COLLECTIVE_KEYS[NUM_COLLECTIVE_KINDS] = {"all_reduce", "all_gather",
                                                                  "reduce_scatter", "broadcast"};

// Bytes on one rank's wire per payload byte in a ring of n ranks: an all-reduce is a reduce-scatter and an
// all-gather, each moving (n - 1) / n of the buffer (NCCL's "bus bandwidth" accounting); a broadcast
// passes the whole buffer along the ring.
static inline double wire_factor(int kind, int n) {
    double f = (double)(n - 1) / n;
    return kind == COLL_ALL_REDUCE ? 2 * f : kind == COLL_BROADCAST ? 1 : f;
}

typedef struct {
    double gemm_bf16_tflops, gemm_fp8_tflops, attention_tflops, hbm_gbps;
    double intra_node_gbps, inter_node_gbps;
    int nodes;
} PlanRates;

static inline PlanRates plan_rates_from_options(const TrainOptions *opts, int world_size) {
    PlanRates r = {opts->plan_gemm_bf16_tflops,
                   opts->plan_gemm_fp8_tflops,
                   opts->attention == ATTENTION_EXACT ? EXACT_ATTENTION_TFLOPS : opts->plan_attention_tflops,
                   opts->plan_hbm_gbps,
                   opts->intra_node_gbps,
                   opts->inter_node_gbps,
                   opts->nodes ? opts->nodes : (world_size + 7) / 8};
    return r;
}

// Where a collective runs: its ranks, and the bandwidth of the slowest link between them.
typedef struct {
    int ranks;
    double gbps;
} CollectiveLink;

// A run's three links: every rank; the shard group (its consecutive ranks share a node when it fits one);
// the replicas of a place across the groups (one rank a group, each in another node when groups are nodes).
static inline void plan_links(const PlanSettings *s, const PlanRates *r, CollectiveLink *world,
                              CollectiveLink *group, CollectiveLink *across) {
    int W = s->world_size, G = plan_shard_ranks(s), per_node = (W + r->nodes - 1) / r->nodes;
    world->ranks = W;
    world->gbps = r->nodes > 1 ? r->inter_node_gbps : r->intra_node_gbps;
    group->ranks = G;
    group->gbps = G <= per_node ? r->intra_node_gbps : r->inter_node_gbps;
    across->ranks = W / G;
    across->gbps = r->nodes > 1 ? r->inter_node_gbps : r->intra_node_gbps;
}

typedef struct {
    double payload[NUM_COLLECTIVE_KINDS];    // bytes of all the step's collectives of each kind
    double overlapped[NUM_COLLECTIVE_KINDS]; // of which beside the layers' compute (ZeRO-3's layers)
    double serial_ms, overlapped_ms;         // their time on the wire
} StepCollectives;

static inline void add_collective(StepCollectives *c, int kind, double bytes, int overlapped,
                                  const CollectiveLink *link) {
    double ms = link->ranks > 1 ? bytes * wire_factor(kind, link->ranks) / link->gbps / 1e6 : 0;
    c->payload[kind] += bytes;
    if (overlapped) c->overlapped[kind] += bytes;
    *(overlapped ? &c->overlapped_ms : &c->serial_ms) += ms;
}

// The collectives of one optimizer step (accum micro-steps) once the amax histories hold a step (the first
// step also max-reduces each tensor's amax alone), per process, as the calls in train_gpt_fp8.cu issue
// them. Payload: an all-reduce's or broadcast's buffer, an all-gather's output, a reduce-scatter's input.
static inline StepCollectives step_collectives(const GPTConfig *cfg, const PlanSettings *s, int accum,
                                               const PlanRates *r) {
    StepCollectives c = {{0}, {0}, 0, 0};
    int W = s->world_size, G = plan_shard_ranks(s), L = cfg->num_layers, fp8 = s->dtype == DTYPE_FLOAT8;
    if (W == 1) return c;
    CollectiveLink world, group, across;
    plan_links(s, r, &world, &group, &across);
    size_t global = param_global_size(cfg), layer = param_layer_size(cfg), P = param_count(cfg);
    add_collective(&c, COLL_ALL_REDUCE, 4, 0, &world);                         // the loss
    if (s->zero_stage != 0) add_collective(&c, COLL_ALL_REDUCE, 8, 0, &group); // the squared gradient norm
    if (fp8) { // amaxes; the casts' saturated and flushed counts (two 8-byte counters per tensor)
        add_collective(&c, COLL_ALL_REDUCE, 4.0 * 3 * L * NUM_BLOCK_LINEARS, 0, &world);
        add_collective(&c, COLL_ALL_REDUCE, 16.0 * 3 * L * NUM_BLOCK_LINEARS, 0, &world);
    }
    // A unit's weights: bfloat16 all-gathers the BF16 copy; float8 the FP8 weights (1 byte an element),
    // and broadcasts the BF16 of the tensors it reads in BF16, all but the block linears' weights (GPT-2:
    // LayerNorms and biases; Llama: the two RMSNorm weights).
    double linear = (double)linear_weights_per_layer(cfg), small = (double)layer - linear;
    if (s->zero_stage == 0) {
        add_collective(&c, COLL_ALL_REDUCE, 4.0 * P, 0, &world);
        return c;
    }
    if (s->zero_stage == 1) {
        double unit = (double)shard_chunk(P, G) * G;
        add_collective(&c, COLL_REDUCE_SCATTER, 4 * unit, 0, &group);
        add_collective(&c, COLL_ALL_GATHER, (fp8 ? 1 : 2) * unit, 0, &group);
        if (fp8) add_collective(&c, COLL_BROADCAST, 2 * ((double)global + L * small), 0, &group);
    } else {
        double g = (double)shard_chunk(global, G) * G, l = (double)shard_chunk(layer, G) * G;
        // the update gathers the global unit and layers 0 and 1, which stay in their slots; each forward
        // and backward gathers the others, or with --keep_gathered the first forward alone
        int updated = L > 1 ? 2 : 1, others = L > 2 ? L - 2 : 0;
        int gathered = s->keep_gathered ? others : accum * 2 * others;
        add_collective(&c, COLL_ALL_GATHER, gathered * (fp8 ? 1 : 2) * l, 1, &group);
        if (fp8) add_collective(&c, COLL_BROADCAST, gathered * 2 * small, 1, &group);
        add_collective(&c, COLL_REDUCE_SCATTER, accum * L * 4 * l, 1, &group);
        add_collective(&c, COLL_REDUCE_SCATTER, accum * 4 * g, 0, &group);
        add_collective(&c, COLL_ALL_GATHER, 2 * g + updated * (fp8 ? 1 : 2) * l, 0, &group);
        if (fp8) add_collective(&c, COLL_BROADCAST, updated * 2 * small, 0, &group);
    }
    if (W / G > 1) // shard groups: each shard summed across the groups, once a step
        add_collective(&c, COLL_ALL_REDUCE, 4.0 * shard_size(cfg, s->zero_stage, G), 0, &across);
    return c;
}

// DRAM bytes of the memory-bound kernels of one micro-step of N tokens (BF16 activations, 2 bytes),
// per layer and token in the order the step runs them, then the logits and (per step) AdamW. Widths: fc's
// output FC (GPT-2 4C; Llama's up and gate, 2F), the MLP's hidden F (4C; F), the linears' inputs (7C;
// 3C + F), output gradients (9C; QKV + C + 2F + C) and biases (9C; none).
static inline double memory_bound_bytes(const GPTConfig *cfg, const PlanSettings *s, double tokens,
                                        size_t shard_params) {
    double C = cfg->channels, F = model_ffn_dim(cfg), FC = linear_out_features(cfg, LIN_FC), b = 2;
    double inputs = (double)linear_input_features_sum(cfg),
           output_grads = (double)linear_output_features_sum(cfg);
    double biases = (double)linear_bias_features_sum(cfg);
    // Llama's RoPE rotates the queries and keys of qkv in place (read, write), and their gradients back
    double rope = model_is_llama(cfg)
                      ? 2 * (double)(cfg->num_heads + model_kv_heads(cfg)) * (C / cfg->num_heads) * b
                      : 0;
    double activation = (FC + F) * b;              // GELU (read, write 4C); SwiGLU (read up, gate; write F)
    double activation_backward = (2 * FC + F) * b; // fc's output, the gradient (F), write fc's gradient
    double forward = (2 * 2 * C + 3 * C) * b       // 2 norms (read x, write y), residual (2 reads, 1 write)
                     - C * b                       // fc's norm adds the residual before it: x from registers
                     + activation + rope;
    double backward = (2 * 3 * C + 3 * C) * b // norm backwards (dy, x, write dx), residual gradients
                      + activation_backward + biases * b + rope; // and the bias gradients (read each)
    if (s->dtype == DTYPE_FLOAT8) {
        // the linears' inputs and output gradients: read in BF16, written as the FP8 tensor and its transpose
        forward += inputs * (b + 2);
        backward += output_grads * (b + 2);
        // the per-tensor recipes' output-gradient casts sum the bias gradients on the way; the delayed
        // recipe's casts compute the norms' and the MLP activation's outputs (from the norms' inputs and fc's
        // output: no norm output written, no activation pass; the fcproj cast reads fc's output, FC, instead
        // of F) and fc's output gradient (from fcproj's input gradient, F, and fc's output, FC, instead of
        // fc's output gradient: no activation backward pass, F more read)
        if (!fp8_recipe_is_block(s->fp8_recipe)) backward -= biases * b;
        if (s->fp8_recipe == FP8_RECIPE_DELAYED) {
            forward -= 2 * C * b + activation - (FC - F) * b;
            backward -= activation_backward - F * b;
        }
    } else {
        // bfloat16: the weight-gradient GEMMs sum the bias gradients of the output gradients they read (no
        // pass); and, for GELU, cuBLASLt's epilogues (gpu/gemm.cuh; where the heuristic has them, which a GPU
        // has yet to show): fc's GEMM writes the GELU beside its output (F written, no GELU pass), fcproj's
        // data-gradient GEMM reads fc's output for the GELU's backward (FC read, no GELU backward pass).
        // SwiGLU, which combines two columns of fc's output, has no epilogue: its passes stay.
        if (!model_is_llama(cfg)) {
            forward -= activation - F * b;
            backward -= activation_backward - FC * b;
        }
        backward -= biases * b;
    }
    double per_layer = forward * (s->recompute ? 2 : 1) + backward;
    double logits = 2 * (double)cfg->padded_vocab_size * b; // one-pass cross-entropy: a read and a write
    double adamw = 7 * 4 + 2 + (s->dtype == DTYPE_FLOAT8);  // param, grad, m, v in; param, m, v, copies out
    return tokens * (per_layer * cfg->num_layers + logits) + adamw * (double)shard_params;
}

typedef struct {
    double gemm_ms, attention_ms, memory_ms, compute_ms;
    double comm_ms, overlapped_comm_ms, exposed_comm_ms, step_ms;
    double tokens_per_s, mfu; // tokens of this process per second; percent of the BF16 peak
    StepCollectives collectives;
} TimePlan;

static inline TimePlan time_plan(const GPTConfig *cfg, const PlanSettings *s, int accum, const PlanRates *r) {
    TimePlan t;
    double N = (double)s->B * s->T * accum, C = cfg->channels, L = cfg->num_layers;
    // the block linears (GPT-2 12 C^2 weights a layer, Llama (QKV + C + 3F) C); recompute: a second forward
    double block = 6 * (double)linear_weights_per_layer(cfg) * L * N * (s->recompute ? 4.0 / 3 : 1);
    double head = 6 * (double)cfg->padded_vocab_size * C * N;
    double block_rate = s->dtype == DTYPE_FLOAT8 ? r->gemm_fp8_tflops : r->gemm_bf16_tflops;
    t.gemm_ms = (block / block_rate + head / r->gemm_bf16_tflops) / 1e9;
    // QK^T and PV of the NH query heads (C features; GQA shares keys and values, not FLOPs), halved by the
    // mask
    double attention_forward = 2 * 2 * (double)s->T * C / 2 * N * L;
    t.attention_ms = attention_forward * (3.5 + (s->recompute ? 1 : 0)) / r->attention_tflops / 1e9;
    size_t shard =
        s->zero_stage == 0 ? param_count(cfg) : shard_size(cfg, s->zero_stage, plan_shard_ranks(s));
    t.memory_ms = memory_bound_bytes(cfg, s, N, shard) / r->hbm_gbps / 1e6;
    t.compute_ms = t.gemm_ms + t.attention_ms + t.memory_ms;
    t.collectives = step_collectives(cfg, s, accum, r);
    t.overlapped_comm_ms = t.collectives.overlapped_ms;
    t.comm_ms = t.collectives.serial_ms + t.overlapped_comm_ms;
    // The overlapped collectives hide behind the compute (counted whole, though the LM head and AdamW run
    // beside none of them: an upper bound on what hides); what exceeds it, and the rest, adds to the step.
    double hidden = t.overlapped_comm_ms < t.compute_ms ? t.overlapped_comm_ms : t.compute_ms;
    t.exposed_comm_ms = t.comm_ms - hidden;
    t.step_ms = t.compute_ms + t.exposed_comm_ms;
    t.tokens_per_s = N / (t.step_ms / 1e3);
    t.mfu = 100 * flops_per_token(cfg, param_count(cfg), s->T) * t.tokens_per_s / H200_BF16_PEAK_FLOPS;
    return t;
}

static inline void time_plan_print(const GPTConfig *cfg, const PlanSettings *s, int accum,
                                   const PlanRates *r) {
    TimePlan t = time_plan(cfg, s, accum, r);
    printf("time plan per optimizer step and process (an estimate from assumed rates, not a measurement):\n");
    printf("  %d micro-step(s) of B=%d x T=%d; %d process(es) on %d node(s)\n", accum, s->B, s->T,
           s->world_size, r->nodes);
    printf("  GEMMs            %9.2f ms  block linears in %s at %.0f TFLOP/s, LM head in BF16 at %.0f\n",
           t.gemm_ms, dtype_name(s->dtype),
           s->dtype == DTYPE_FLOAT8 ? r->gemm_fp8_tflops : r->gemm_bf16_tflops, r->gemm_bf16_tflops);
    printf("  attention        %9.2f ms  at %.0f TFLOP/s (%s)\n", t.attention_ms, r->attention_tflops,
           r->attention_tflops == EXACT_ATTENTION_TFLOPS ? "--attention exact" : "fused, cuDNN");
    printf("  memory-bound     %9.2f ms  at %.0f GB/s\n", t.memory_ms, r->hbm_gbps);
    for (int k = 0; k < NUM_COLLECTIVE_KINDS; k++)
        if (t.collectives.payload[k] > 0)
            printf("  %-16s %12.0f bytes payload (%.0f beside the layers' compute)\n", COLLECTIVE_NAMES[k],
                   t.collectives.payload[k], t.collectives.overlapped[k]);
    if (s->world_size > 1) {
        CollectiveLink world, group, across;
        plan_links(s, r, &world, &group, &across);
        printf("  communication    %9.2f ms  on the wire, %.2f ms of it hidden behind compute; ZeRO's shards "
               "over %d rank(s) at %.0f GB/s",
               t.comm_ms, t.comm_ms - t.exposed_comm_ms, group.ranks, group.gbps);
        if (across.ranks > 1) printf(", summed across %d groups at %.0f GB/s", across.ranks, across.gbps);
        printf("\n");
    }
    printf("  step             %9.2f ms  = compute %.2f + exposed communication %.2f (%.0f%% of the step); "
           "%.0f tokens/s per process, %.0f in all; MFU %.1f%% of the BF16 peak\n",
           t.step_ms, t.compute_ms, t.exposed_comm_ms, 100 * t.exposed_comm_ms / t.step_ms, t.tokens_per_s,
           t.tokens_per_s * s->world_size, t.mfu);
    printf("plan_step_ms %.3f", t.step_ms);
    for (int k = 0; k < NUM_COLLECTIVE_KINDS; k++)
        printf(" plan_%s_bytes %.0f", COLLECTIVE_KEYS[k], t.collectives.payload[k]);
    printf("\n");
}

#endif // TIME_PLAN_H

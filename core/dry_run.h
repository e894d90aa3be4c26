// core/dry_run.h: --dry_run, the per-process memory plan of the CUDA trainer, printed without allocating
// anything and without a GPU. The sizes are memory_plan.h's (the trainer allocates exactly plan.total
// in one cudaMalloc); this file groups and explains them, adds what the plan cannot hold (the CUDA
// runtime's own memory), says whether one process fits a GPU of --gpu_memory_gb, and when it does not,
// which single change (or combination) would, each checked by planning it again. Then time_plan.h's
// estimate of the step, and the fastest setting that fits.
#ifndef DRY_RUN_H
#define DRY_RUN_H

#include <stddef.h>
#include <stdio.h>

#include "cli.h"
#include "gpt_model.h"
#include "memory_plan.h"
#include "time_plan.h"

#define DRY_RUN_GIB 1073741824.0
#define DRY_RUN_MAX_WORLD (1 << 20) // the largest --world_size cli.h accepts

static inline double dry_run_gib(size_t bytes) {
    return (double)bytes / DRY_RUN_GIB;
}

// Bytes one process needs: the plan's allocation plus the runtime reserve.
static inline size_t dry_run_needed_bytes(const GPTConfig *cfg, const PlanSettings *s) {
    MemoryPlan plan;
    memory_plan_compute(&plan, cfg, s);
    return plan.total + RUNTIME_RESERVE_BYTES;
}

static inline int dry_run_fits(const GPTConfig *cfg, const PlanSettings *s, double gpu_bytes) {
    return (double)dry_run_needed_bytes(cfg, s) <= gpu_bytes;
}

// A buffer's share of the allocation: its size rounded up to the next buffer's aligned offset, so that
// the groups add up to plan.total exactly.
static inline size_t dry_run_aligned_bytes(const MemoryPlan *plan, int i) {
    size_t end = i + 1 < NUM_BUFFERS ? plan->offset[i + 1] : plan->total;
    return end - plan->offset[i];
}

// ----------------------------------------------------------------------------
// Validation: what a real run would refuse, and shapes whose plan would not fit in size_t.

// A generous over-estimate of the plan (every buffer bounded from above), in double so that it cannot
// wrap: memory_plan_compute counts in size_t and only absurd overrides of --layers, --channels,
// --batch_size and --seq_len come near 2^64 bytes. Per token and layer a plan keeps at most some 20 rows
// of the widest activation W (C, QKV, fc's output and F are each at most W, and fewer than 20 of them are
// kept or scratch a layer): 20 W bytes, with GPT-2's W = 4C the former 64 C and more. cuDNN's attention
// workspace (attention_workspace_bytes) adds at most 2 (T + 64) (T + 128) / T + 4 bytes a token and query
// head.
static inline double dry_run_plan_bound(const GPTConfig *cfg, int B, int T, int world_size, int history,
                                        int fast_attention) {
    double N = (double)B * T, L = cfg->num_layers, W = model_widest_features(cfg);
    double per_token = (L + 2) * (20.0 * W + 4.0 * cfg->num_heads + 64.0) + 2.0 * cfg->padded_vocab_size +
                       (fast_attention ? (2.0 * (T + 64) * (T + 128) / T + 4.0) * cfg->num_heads : 0.0);
    // the weight state (under 24 bytes a parameter with the padding) and the RoPE table (maxT x hs floats)
    double weights = 24.0 * (double)param_count(cfg) + 64.0 * world_size * (L + 1) +
                     4.0 * cfg->max_seq_len * cfg->channels;
    return weights + N * per_token + 64.0 * L * NUM_BLOCK_LINEARS * (history + 16) + 1e9;
}

static inline void dry_run_validate(const TrainOptions *opts, const GPTConfig *cfg, int B, int T,
                                    int world_size) {
    if (world_size < 1) fail("--world_size: %d: a plan needs at least one process", world_size);
    if (opts->zero_stage != 0 && opts->zero_stage != 1 && opts->zero_stage != 3)
        fail("--zero_stage: %d is not supported (0, 1 or 3)", opts->zero_stage);
    if (B < 1) fail("--batch_size: %d: needs at least one sequence", B);
    if (T < 1 || T > cfg->max_seq_len)
        fail("--seq_len: %d is outside [1, %d], the model's maximum sequence length", T, cfg->max_seq_len);
    if (opts->shard_group_size) resolve_shard_group(opts, world_size); // exits on a group that cannot be
    if (opts->nodes > world_size)
        fail("--nodes: %d nodes for %d process(es): every node runs at least one", opts->nodes, world_size);
    if (opts->dtype == DTYPE_FLOAT32)
        fail("--dtype: float32 runs only in train_cpu; the GPU trainer, whose memory --dry_run plans, runs "
             "bfloat16 or float8");
    if (dry_run_plan_bound(cfg, B, T, world_size, opts->amax_history, plan_fast_attention(opts->attention)) >
        4e18)
        fail("--batch_size x --seq_len: with this model (--layers, --channels) the plan exceeds 4e18 bytes; "
             "nothing that large can be planned or run");
    if (opts->dtype == DTYPE_FLOAT8 && GPU_SPECS[opts->gpu].fp8_tflops == 0)
        fail("--gpu %s: has no FP8 tensor cores; plan --dtype bfloat16 on it", GPU_SPECS[opts->gpu].name);
    if (opts->dtype == DTYPE_FLOAT8) check_fp8_shapes(cfg, B, T); // exits as a real float8 run would
}

// Bytes of one GPU: --gpu_memory_gb, or the --gpu's data sheet.
static inline double dry_run_gpu_bytes(const TrainOptions *opts) {
    return (opts->gpu_memory_gb ? opts->gpu_memory_gb : GPU_SPECS[opts->gpu].memory_gb) * 1e9;
}

// ----------------------------------------------------------------------------
// The plan, group by group and buffer by buffer.

// What a buffer holds, where the name alone does not say it; some depend on the ZeRO stage and the
// architecture.
static inline const char *dry_run_buffer_note(int id, const GPTConfig *cfg, const PlanSettings *s) {
    int z = s->zero_stage, keep = s->keep_gathered;
    ArchParts parts = model_parts(cfg);
    int rms = parts.norm == NORM_RMSNORM, swiglu = parts.mlp == MLP_SWIGLU;
    switch (id) {
    case BUF_PARAMS:
        return z ? "FP32 master weights, this rank's shard" : "FP32 master weights, all parameters";
    case BUF_GRADS:
        return z == 3   ? "global tensors + 2 layer slots, reduce-scattered layer by layer"
               : z == 1 ? "all parameters (padded), reduce-scattered after the last micro-step"
                        : "all parameters, accumulated over the micro-steps";
    case BUF_GRAD_SHARD:
        return "this rank's shard of the reduced gradients";
    case BUF_GRAD_BF16:
        return "--grad_reduce_dtype bfloat16: the gradients NCCL sums, a piece at a time";
    case BUF_ADAM_M:
        return z ? "AdamW first moment, this rank's shard" : "AdamW first moment";
    case BUF_ADAM_V:
        return z ? "AdamW second moment, this rank's shard" : "AdamW second moment";
    case BUF_PARAMS_BF16:
        return z != 3 ? "BF16 copy of all parameters"
               : keep ? "BF16 global tensors + a gathered slot a layer (--keep_gathered)"
                      : "BF16 global tensors + 2 gathered layer slots";
    case BUF_WEIGHTS_FP8:
        return z != 3 ? "E4M3 linear weights, cast once a step"
               : keep ? "E4M3 linear weights, a gathered slot a layer (--keep_gathered)"
                      : "E4M3 linear weights, 2 gathered layer slots";
    case BUF_WEIGHTS_FP8_T:
        return "E4M3 W^T for the data-gradient GEMMs";
    case BUF_ENCODED:
        return parts.position == POSITION_LEARNED ? "token + position embedding" : "token embedding";
    case BUF_RESIDUAL2:
        return "residual stream after attention";
    case BUF_RESIDUAL3:
        return "every layer's output = the next layer's input (kept even with recompute)";
    case BUF_LN1_STATS:
    case BUF_LN2_STATS:
    case BUF_LNF_STATS:
        return rms ? "RMSNorm 1/rms per token" : "LayerNorm mean and 1/std per token";
    case BUF_LN1:
    case BUF_LN2:
    case BUF_ATTY:
    case BUF_FCH_GELU:
        return s->dtype == DTYPE_FLOAT8 ? "BF16 GEMM input, one layer of scratch" : "BF16 GEMM input";
    case BUF_QKV:
        return parts.position == POSITION_ROTARY ? "attention q, k (rotated), v: grouped-query heads"
                                                 : "attention q, k, v";
    case BUF_ATT_LSE:
        return "attention log-sum-exp per head";
    case BUF_FCH:
        return swiglu ? "MLP before SwiGLU: up and gate projections" : "MLP before GELU";
    case BUF_INPUT_FP8_T:
        return "every linear's input, transposed, E4M3";
    case BUF_LNF:
        return rms ? "final RMSNorm output" : "final LayerNorm output";
    case BUF_LOGITS:
        return "B*T x padded vocabulary, bf16";
    case BUF_LOSSES:
        return "per-token loss";
    case BUF_DRESIDUAL:
        return "gradient of the residual stream";
    case BUF_DC:
    case BUF_DQKV:
        return "gradients of one layer's activations";
    case BUF_DFCH:
        return swiglu ? "gradient of up and gate; SwiGLU's output gradient first, in place"
                      : "gradients of one layer's activations";
    case BUF_ATT_DELTA:
        return "attention backward row sums";
    case BUF_CAST_FP8:
    case BUF_CAST_FP8_T:
        return "FP8 cast of a linear's input or gradient, up to the widest";
    case BUF_REDUCE_SCRATCH:
        return "partial sums of the deterministic reductions";
    case BUF_FP8_STATE:
        return "amax histories, scales, saturation counters";
    case BUF_STEP:
        return "step parameters and results";
    case BUF_TOKENS:
        return "inputs, targets, embedding-gradient buckets, and the next batch's";
    case BUF_ROPE_TABLE:
        return "rotary embeddings' cos and sin per position and pair";
    case BUF_GEMM_WORKSPACE:
        return "cuBLASLt";
    case BUF_ATTENTION_WORKSPACE:
        return "cuDNN attention workspace: the deterministic backward's dP, B x NH x T x T x 2 bytes";
    default:
        return "";
    }
}

static inline size_t dry_run_group_bytes(const MemoryPlan *plan, int group) {
    size_t sum = 0;
    for (int i = 0; i < NUM_BUFFERS; i++)
        if ((int)buffer_group((BufferId)i) == group) sum += dry_run_aligned_bytes(plan, i);
    return sum;
}

static inline void dry_run_print_groups(const GPTConfig *cfg, const MemoryPlan *plan) {
    printf("per-process device memory (GiB = 2^30 bytes), one allocation of %zu buffers:\n",
           (size_t)NUM_BUFFERS);
    for (int g = 0; g < NUM_PLAN_GROUPS; g++) {
        printf("  %-28s %10.3f GiB\n", PLAN_GROUP_NAMES[g], dry_run_gib(dry_run_group_bytes(plan, g)));
        for (int i = 0; i < NUM_BUFFERS; i++) {
            if ((int)buffer_group((BufferId)i) != g || !plan->bytes[i]) continue;
            const char *note = dry_run_buffer_note(i, cfg, &plan->settings);
            printf("      %-24s %10.3f GiB%s%s\n", BUFFER_NAMES[i], dry_run_gib(plan->bytes[i]),
                   *note ? "  " : "", note);
        }
    }
}

// The activations of this plan next to those of the same run with --recompute flipped.
static inline void dry_run_print_recompute(const GPTConfig *cfg, const MemoryPlan *plan) {
    PlanSettings other = plan->settings;
    other.recompute = !other.recompute;
    MemoryPlan flipped;
    memory_plan_compute(&flipped, cfg, &other);
    const MemoryPlan *with = plan->settings.recompute ? plan : &flipped;
    const MemoryPlan *without = plan->settings.recompute ? &flipped : plan;
    printf("activations kept for the backward: %.3f GiB without recompute, %.3f GiB with --recompute 1 "
           "(this run: %s)\n",
           dry_run_gib(dry_run_group_bytes(without, PLAN_ACTIVATIONS)),
           dry_run_gib(dry_run_group_bytes(with, PLAN_ACTIVATIONS)),
           plan->settings.recompute ? "with" : "without");
}

// ZeRO's collectives work in place, in buffers of the plan: name them. What NCCL allocates for itself
// is in the runtime reserve.
static inline void dry_run_print_communication(const GPTConfig *cfg, const PlanSettings *s) {
    int fp8 = s->dtype == DTYPE_FLOAT8;
    ArchParts parts = model_parts(cfg);
    printf("communication (in place, no extra buffers in the plan):\n");
    if (s->world_size == 1) {
        printf("  one process: no collectives\n");
    } else if (s->zero_stage == 0) {
        printf("  gradients: all-reduced in grads_fp32 once a step\n");
    } else if (s->zero_stage == 1) {
        printf("  gradients: grads_fp32 reduce-scattered into grad_shard after the last micro-step\n");
        printf("  weights: the updated shards all-gathered into %s\n",
               fp8 ? "weights_fp8 (1 byte a parameter); of params_bf16 only the tensors float8 reads in\n"
                     "    BF16 (all but the block linears' weights), broadcast by their owners"
                   : "params_bf16");
    } else {
        const char *fp8_weights =
            !parts.biases
                ? "weights_fp8 and, of params_bf16, the tensors float8 reads in BF16 (RMSNorms)"
                : "weights_fp8 and, of params_bf16, the tensors float8 reads in BF16 (biases, LayerNorms)";
        printf("  weights: each layer gathered into its slot of the %s, the next layer ahead on a\n"
               "    second stream: %s\n",
               s->keep_gathered ? "layer slots (one a layer, --keep_gathered: gathered once a step, in the "
                                  "first micro-step's forward)"
                                : "2 layer slots",
               fp8 ? fp8_weights : "params_bf16");
        printf("  gradients: each layer reduce-scattered from the 2 layer slots of grads_fp32 into "
               "grad_shard\n");
        printf("  %s: gathered and reduced through their own part of params_bf16 and grads_fp32\n",
               parts.tied_head ? "wte, wpe, lnf" : "wte, lmhead, lnf");
    }
    if (s->zero_stage != 0 && plan_shard_ranks(s) < s->world_size)
        printf(
            "  shard groups of %d ranks: each group's gradient shards all-reduced across the %d groups once "
            "a step\n",
            plan_shard_ranks(s), s->world_size / plan_shard_ranks(s));
    if (s->grad_bf16 && s->world_size > 1)
        printf("  the gradients' sums in BF16 (--grad_reduce_dtype bfloat16), through grads_bf16: half the "
               "bytes\n");
    if (fp8 && s->world_size > 1) printf("  FP8 amaxes max-reduced in fp8_state once a step\n");
    printf("  not in the plan: CUDA context, NCCL's internal buffers, cuBLASLt handles: reserve %.3f GiB\n",
           dry_run_gib(RUNTIME_RESERVE_BYTES));
}

// ----------------------------------------------------------------------------
// Suggestions, each planned again: only what really fits is printed.

// The flags that turn `from` into `to`, e.g. "--zero_stage 3 --world_size 16".
static inline void dry_run_changes(char *out, size_t n, const PlanSettings *from, const PlanSettings *to) {
    int len = 0;
    out[0] = '\0';
    if (to->dtype != from->dtype) len += snprintf(out + len, n - len, " --dtype %s", dtype_name(to->dtype));
    if (to->recompute != from->recompute)
        len += snprintf(out + len, n - len, " --recompute %d", to->recompute);
    if (to->fast_attention != from->fast_attention)
        len += snprintf(out + len, n - len, " --attention %s", to->fast_attention ? "fast" : "exact");
    if (to->B != from->B) len += snprintf(out + len, n - len, " --batch_size %d", to->B);
    if (to->zero_stage != from->zero_stage)
        len += snprintf(out + len, n - len, " --zero_stage %d", to->zero_stage);
    if (to->shard_group != from->shard_group)
        len += snprintf(out + len, n - len, " --shard_group_size %d", to->shard_group);
    if (to->keep_gathered != from->keep_gathered)
        len += snprintf(out + len, n - len, " --keep_gathered %d", to->keep_gathered);
    if (to->world_size != from->world_size) snprintf(out + len, n - len, " --world_size %d", to->world_size);
}

// Prints `to` as a suggestion when it fits; returns whether it did.
static inline int dry_run_suggest(const GPTConfig *cfg, const PlanSettings *from, const PlanSettings *to,
                                  double gpu_bytes) {
    size_t needed = dry_run_needed_bytes(cfg, to);
    if ((double)needed > gpu_bytes) return 0;
    char flags[160];
    dry_run_changes(flags, sizeof(flags), from, to);
    printf("  %-48s needs %.2f GiB (%.0f%%)\n", flags[0] ? flags + 1 : "(no change)", dry_run_gib(needed),
           100.0 * needed / gpu_bytes);
    return 1;
}

// The largest micro-batch below s.B that fits (the plan grows with B), keeping float8's multiple-of-16
// tokens; 0 when even one sequence does not fit.
static inline int dry_run_largest_batch(const GPTConfig *cfg, PlanSettings s, double gpu_bytes) {
    int lo = 0, hi = s.B - 1; // the answer is in [lo, hi]; lo = 0 stands for "none"
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        s.B = mid;
        if (dry_run_fits(cfg, &s, gpu_bytes))
            lo = mid;
        else
            hi = mid - 1;
    }
    while (lo > 0 && s.dtype == DTYPE_FLOAT8 && !fp8_shapes_ok(cfg, lo, s.T)) lo--;
    return lo;
}

// The smallest world size from `first` on (then the powers of two above it) at which s fits with
// ZeRO-3; 0 when none up to the CLI's limit does (ZeRO does not shard the activations).
static inline int dry_run_smallest_world(const GPTConfig *cfg, PlanSettings s, int first, double gpu_bytes) {
    s.zero_stage = 3;
    s.shard_group = 0; // more ranks: shards over all of them
    s.world_size = first;
    if (dry_run_fits(cfg, &s, gpu_bytes)) return first;
    int w = 1;
    while (w <= first) w *= 2;
    for (; w <= DRY_RUN_MAX_WORLD; w *= 2) {
        s.world_size = w;
        if (dry_run_fits(cfg, &s, gpu_bytes)) return w;
    }
    return 0;
}

// ZeRO-1, else ZeRO-3, at this world size: the first above the current stage that fits. Even one process
// can gain from ZeRO-3, which keeps no full BF16 copy of the weights, only the layers in use.
static inline int dry_run_suggest_zero(const GPTConfig *cfg, const PlanSettings *s, double gpu_bytes) {
    PlanSettings t = *s;
    for (t.zero_stage = 1; t.zero_stage <= 3; t.zero_stage += 2)
        if (t.zero_stage > s->zero_stage && dry_run_suggest(cfg, s, &t, gpu_bytes)) return 1;
    return 0;
}

// More processes with ZeRO-3: the smallest power of two above the current world size that fits.
static inline int dry_run_suggest_world(const GPTConfig *cfg, const PlanSettings *s, double gpu_bytes) {
    int w = 1;
    while (w <= s->world_size) w *= 2;
    PlanSettings t = *s;
    t.world_size = w <= DRY_RUN_MAX_WORLD ? dry_run_smallest_world(cfg, *s, w, gpu_bytes) : 0;
    t.zero_stage = 3;
    return t.world_size ? dry_run_suggest(cfg, s, &t, gpu_bytes) : 0;
}

// Each change alone; returns how many fit. More processes are suggested only when sharding over the
// current ones does not already suffice.
// fp8: the GPU has FP8 tensor cores (an A100 has none: float8 is not suggested there).
static inline int dry_run_single_changes(const GPTConfig *cfg, const PlanSettings *s, double gpu_bytes,
                                         int fp8) {
    int zero = dry_run_suggest_zero(cfg, s, gpu_bytes), found = zero;
    PlanSettings t = *s;
    if (s->shard_group) { // shards over every rank: 1/world_size of the state instead of 1/group
        t.shard_group = 0;
        found += dry_run_suggest(cfg, s, &t, gpu_bytes);
        t = *s;
    }
    if (s->keep_gathered) { // two layer slots of gathered weights instead of one a layer
        t.keep_gathered = 0;
        found += dry_run_suggest(cfg, s, &t, gpu_bytes);
        t = *s;
    }
    if (!s->recompute) {
        t.recompute = 1;
        found += dry_run_suggest(cfg, s, &t, gpu_bytes);
        t = *s;
    }
    if (s->fast_attention) { // the exact kernels need no cuDNN workspace (and are slower: time_plan.h)
        t.fast_attention = 0;
        found += dry_run_suggest(cfg, s, &t, gpu_bytes);
        t = *s;
    }
    if (fp8 && s->dtype == DTYPE_BFLOAT16 && fp8_shapes_ok(cfg, s->B, s->T)) {
        t.dtype = DTYPE_FLOAT8;
        found += dry_run_suggest(cfg, s, &t, gpu_bytes);
        t = *s;
    }
    t.B = dry_run_largest_batch(cfg, *s, gpu_bytes);
    if (t.B) found += dry_run_suggest(cfg, s, &t, gpu_bytes);
    if (!zero) found += dry_run_suggest_world(cfg, s, gpu_bytes);
    return found;
}

// The smallest micro-batch a run of this dtype takes: float8 needs B*T to be a multiple of 16.
static inline int dry_run_min_batch(int dtype, int T) {
    if (dtype != DTYPE_FLOAT8) return 1;
    int b = 1;
    while ((long)b * T % 16) b *= 2;
    return b;
}

// When no single change fits: recompute, then float8, then the smallest micro-batch, taken one after
// another until, with ZeRO-3, some world size fits; the fewest changes that do are printed.
static inline int dry_run_combined_changes(const GPTConfig *cfg, const PlanSettings *s, double gpu_bytes,
                                           int fp8) {
    PlanSettings t = *s;
    for (int step = 0; step < 3; step++) {
        if (step == 0) t.recompute = 1;
        if (step == 1 && fp8 && t.dtype == DTYPE_BFLOAT16 && fp8_shapes_ok(cfg, t.B, t.T))
            t.dtype = DTYPE_FLOAT8;
        int min_batch = dry_run_min_batch(t.dtype, t.T);
        if (step == 2 && min_batch < t.B) t.B = min_batch;
        int w = dry_run_smallest_world(cfg, t, s->world_size, gpu_bytes);
        if (w) {
            t.zero_stage = 3;
            t.world_size = w;
            return dry_run_suggest(cfg, s, &t, gpu_bytes);
        }
    }
    return 0;
}

static inline void dry_run_print_suggestions(const GPTConfig *cfg, const PlanSettings *s, double gpu_bytes,
                                             int fp8) {
    printf("to fit, change one of (each planned again):\n");
    if (dry_run_single_changes(cfg, s, gpu_bytes, fp8)) return;
    printf("  no single change fits; together:\n");
    if (dry_run_combined_changes(cfg, s, gpu_bytes, fp8)) return;
    printf("  nothing tried fits (ZeRO-3 up to --world_size %d, --recompute 1, float8, --batch_size 1): "
           "lower --seq_len or use a GPU with more memory\n",
           DRY_RUN_MAX_WORLD);
}

// ----------------------------------------------------------------------------
// The fastest setting that fits: among micro-batches that keep the global batch (B x accumulation the
// same), --recompute, --zero_stage, --shard_group_size and (ZeRO-3) --keep_gathered, the one whose time
// plan is shortest.

static inline void dry_run_print_fastest(const GPTConfig *cfg, const PlanSettings *s, int accum,
                                         const PlanRates *r, double gpu_bytes) {
    long rows = (long)s->B * accum; // sequences per process and optimizer step
    int W = s->world_size, per_node = (W + r->nodes - 1) / r->nodes;
    // shard groups tried: all the ranks, and one group a node when there are several nodes
    int groups[2] = {0, r->nodes > 1 && per_node >= 2 && W % per_node == 0 ? per_node : 0};
    PlanSettings best = *s;
    int best_accum = dry_run_fits(cfg, s, gpu_bytes) ? accum : 0;
    double best_ms = best_accum ? time_plan(cfg, s, accum, r).step_ms : 0;
    for (long b = 1; b <= rows; b++) {
        if (rows % b || (s->dtype == DTYPE_FLOAT8 && !fp8_shapes_ok(cfg, (int)b, s->T))) continue;
        for (int zero = 0; zero <= 3; zero += zero == 0 ? 1 : 2)
            for (int recompute = 0; recompute <= 1; recompute++)
                for (int g = 0; g < 2 && !(g == 1 && (!groups[1] || zero == 0)); g++)
                    for (int keep = 0; keep <= (zero == 3); keep++) {
                        PlanSettings t = *s;
                        t.B = (int)b;
                        t.zero_stage = zero;
                        t.recompute = recompute;
                        t.shard_group = groups[g];
                        t.keep_gathered = keep;
                        if (!dry_run_fits(cfg, &t, gpu_bytes)) continue;
                        double ms = time_plan(cfg, &t, (int)(rows / b), r).step_ms;
                        // 0.1% faster at least: the rates do not depend on B, so ties (same work, same
                        // collectives) keep this run's setting
                        if (!best_accum || ms < 0.999 * best_ms)
                            best = t, best_accum = (int)(rows / b), best_ms = ms;
                    }
    }
    if (!best_accum) return; // nothing fits: the suggestions say what would
    const char *tried = "same global batch; micro-batch, recompute, ZeRO stage, shard group, keep gathered "
                        "tried";
    if (best.B == s->B && best.zero_stage == s->zero_stage && best.recompute == s->recompute &&
        plan_shard_ranks(&best) == plan_shard_ranks(s) && best.keep_gathered == s->keep_gathered) {
        printf("fastest that fits (%s): this one\n", tried);
        return;
    }
    TimePlan t = time_plan(cfg, &best, best_accum, r);
    char extra[64] = "";
    int len = 0;
    if (best.shard_group != s->shard_group) // 0: sharded over every rank
        len = snprintf(extra, sizeof(extra), " --shard_group_size %d", best.shard_group);
    if (best.keep_gathered != s->keep_gathered)
        snprintf(extra + len, sizeof(extra) - len, " --keep_gathered %d", best.keep_gathered);
    printf(
        "fastest that fits (%s): --batch_size %d --recompute %d --zero_stage %d%s (%d micro-step(s)): %.2f "
        "ms/step, %.0f tokens/s per process, MFU %.1f%%, communication %.0f%% of the step, %.1f days per "
        "100B "
        "tokens\n",
        tried, best.B, best.recompute, best.zero_stage, extra, best_accum, t.step_ms, t.tokens_per_s, t.mfu,
        100 * t.exposed_comm_ms / t.step_ms, t.days_per_100b);
}

// ----------------------------------------------------------------------------

// What the planned run costs before it is rented: each GPU draws its board power while it computes and is
// counted idle (no power) while it waits on exposed communication, so the planned utilisation is the compute
// share of the step; the facility's energy is the GPUs' x --pue, its price --price_kwh; the rental is
// --price_gpu_hour for every GPU for the whole time. Host CPUs, memory and the network are not counted
// beyond what --pue covers. Prices are in the user's currency.
static inline void dry_run_print_cost(const TrainOptions *opts, const TimePlan *t, const PlanRates *r,
                                      int world_size) {
    double utilisation = t->compute_ms / t->step_ms, watts = r->gpu->board_watts;
    double step_h = t->step_ms / 3.6e6, kwh_per_gpu_hour = watts * utilisation / 1e3 * opts->pue;
    const char *names[3] = {"per step", "per 100B tokens", "for --steps"};
    double hours[3] = {step_h, t->days_per_100b * 24, step_h * opts->steps};
    printf("cost plan (an estimate: %d x %s at %.0f W board power x %.0f%% planned utilisation, the compute "
           "share of the step; PUE %.2f; %.4g per kWh, %.4g per GPU-hour):\n",
           world_size, r->gpu->name, watts, 100 * utilisation, opts->pue, opts->price_kwh,
           opts->price_gpu_hour);
    for (int i = 0; i < 3; i++) {
        double kwh = world_size * hours[i] * kwh_per_gpu_hour,
               rental = world_size * hours[i] * opts->price_gpu_hour;
        printf("  %-16s %11.4g h wall  %11.4g kWh  electricity %11.4g  rental %11.4g  total %11.4g\n",
               names[i], hours[i], kwh, kwh * opts->price_kwh, rental, kwh * opts->price_kwh + rental);
    }
    if (opts->price_kwh == 0 && opts->price_gpu_hour == 0)
        printf("  (give --price_kwh and --price_gpu_hour for the costs)\n");
    printf("plan_board_watts %.0f plan_utilisation %.6f plan_kwh_per_step %.9g plan_cost_per_step %.9g\n",
           watts, utilisation, world_size * step_h * kwh_per_gpu_hour,
           world_size * step_h * (kwh_per_gpu_hour * opts->price_kwh + opts->price_gpu_hour));
}

// Prints the plan; returns the process exit status: 0 when it fits, 1 when it does not.
static inline int dry_run_report(const TrainOptions *opts, const GPTConfig *cfg, int B, int T,
                                 int world_size) {
    dry_run_validate(opts, cfg, B, T, world_size);
    PlanSettings s = plan_settings_from_options(opts, B, T, world_size);
    MemoryPlan plan;
    memory_plan_compute(&plan, cfg, &s);
    double gpu_bytes = dry_run_gpu_bytes(opts);
    size_t needed = plan.total + RUNTIME_RESERVE_BYTES;
    char model[160];
    model_description(cfg, model, sizeof(model));
    printf(
        "dry run | model %s | %zu parameters | dtype %s | B=%d T=%d | world size %d | ZeRO-%d | recompute %d "
        "| amax history %d\n",
        model, param_count(cfg), dtype_name(s.dtype), B, T, world_size, s.zero_stage, s.recompute,
        s.history_len);
    printf("attention: %s\n", plan_attention_label(opts->attention));
    dry_run_print_groups(cfg, &plan);
    dry_run_print_recompute(cfg, &plan);
    dry_run_print_communication(cfg, &s);
    printf("total per process: %.3f GiB = plan %.3f GiB + runtime reserve %.3f GiB\n", dry_run_gib(needed),
           dry_run_gib(plan.total), dry_run_gib(RUNTIME_RESERVE_BYTES));
    printf("plan_total_bytes %zu reserve_bytes %zu needed_bytes %zu gpu_bytes %.0f\n", plan.total,
           (size_t)RUNTIME_RESERVE_BYTES, needed, gpu_bytes);
    int accum = resolve_grad_accum_steps(opts, T, world_size);
    PlanRates rates = plan_rates_from_options(opts, world_size);
    time_plan_print(cfg, &s, accum, &rates);
    TimePlan t = time_plan(cfg, &s, accum, &rates);
    dry_run_print_cost(opts, &t, &rates, world_size);
    dry_run_print_fastest(cfg, &s, accum, &rates, gpu_bytes);
    if ((double)needed <= gpu_bytes) {
        printf("fits: %.2f GiB of %g GB (%.0f%%)\n", dry_run_gib(needed), gpu_bytes / 1e9,
               100.0 * needed / gpu_bytes);
        return 0;
    }
    printf("does not fit: needs %.2f GiB, the GPU has %g GB (%.2f GiB)\n", dry_run_gib(needed),
           gpu_bytes / 1e9, gpu_bytes / DRY_RUN_GIB);
    dry_run_print_suggestions(cfg, &s, gpu_bytes, GPU_SPECS[opts->gpu].fp8_tflops > 0);
    return 1;
}

#endif // DRY_RUN_H

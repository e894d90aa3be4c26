// test_memory_plan.c: the CUDA trainer's buffer plan (memory_plan.h), checked on the CPU: every buffer
// starts aligned for cuBLASLt, none overlaps another, the sizes follow from the shapes, and float8 keeps
// its GEMM inputs as 1-byte transposes where bfloat16 keeps 2-byte copies. Also the FP8 shape rules.
// Then the ZeRO and recompute plans against expectations derived here from what each stage must hold
// (not from memory_plan.h's lines), and the --dry_run report of dry_run.h: its verdicts, suggestions and
// validation, and cuDNN's attention workspace in both. Then Llama 2 70B's plan on 4 nodes x 8 H200s against
// arithmetic done here from its published shapes. It prints "reference ..." lines with plan totals that
// test/test_dry_run.sh compares with the trainer's --dry_run output.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../core/dry_run.h"
#include "../core/memory_plan.h"
#include "../core/time_plan.h"
#include "test_util.h"

// A preset as the trainers configure it (cli.h), in its own architecture (GPT-2 for d2, d4, d6); vocab 0
// takes the preset's tokenizer's.
static GPTConfig preset_config(const char *name, int vocab) {
    TrainOptions opts;
    options_defaults(&opts);
    snprintf(opts.model_size, sizeof(opts.model_size), "%s", name);
    opts.vocab = vocab;
    return config_from_options(&opts);
}

static void check_layout(const MemoryPlan *plan, const char *what) {
    char label[128];
    int aligned = 1, ordered = 1;
    size_t sum = 0;
    for (int i = 0; i < NUM_BUFFERS; i++) {
        aligned &= plan->offset[i] % PLAN_ALIGN == 0;
        if (i + 1 < NUM_BUFFERS) ordered &= plan->offset[i] + plan->bytes[i] <= plan->offset[i + 1];
        sum += plan->bytes[i];
    }
    snprintf(label, sizeof(label), "%s: every buffer 256-byte aligned", what);
    check(aligned, label);
    snprintf(label, sizeof(label), "%s: buffers do not overlap", what);
    check(ordered && plan->offset[NUM_BUFFERS - 1] + plan->bytes[NUM_BUFFERS - 1] <= plan->total, label);
    snprintf(label, sizeof(label), "%s: padding below 256 bytes a buffer", what);
    check(plan->total >= sum && plan->total - sum < (size_t)NUM_BUFFERS * PLAN_ALIGN, label);
}

// Runs check_fp8_shapes in a child; returns its exit status (0: accepted).
static int fp8_shapes_status(const GPTConfig *cfg, int B, int T) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        freopen("/dev/null", "w", stderr);
        check_fp8_shapes(cfg, B, T);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// ----------------------------------------------------------------------------
// ZeRO and recompute. Expectations come from what each configuration must hold, argued in the comments.

static MemoryPlan plan_of(const GPTConfig *cfg, int dtype, int B, int T, int world, int zero, int recompute) {
    PlanSettings s = {dtype, B, T, 16, world, zero, recompute, 0, 0, 0, 0, 0};
    MemoryPlan plan;
    memory_plan_compute(&plan, cfg, &s);
    char label[160];
    snprintf(label, sizeof(label), "L=%d C=%d %s B=%d T=%d W=%d ZeRO-%d recompute %d", cfg->num_layers,
             cfg->channels, dtype_name(dtype), B, T, world, zero, recompute);
    check_layout(&plan, label); // (g) for every plan of these tests
    return plan;
}

static int is_weight_state(int id) {
    PlanGroup g = buffer_group((BufferId)id);
    return g == PLAN_MASTER_WEIGHTS || g == PLAN_GRADIENTS || g == PLAN_MOMENTS || g == PLAN_COMPUTE_WEIGHTS;
}

static size_t group_bytes(const MemoryPlan *plan, PlanGroup group) {
    size_t sum = 0;
    for (int i = 0; i < NUM_BUFFERS; i++)
        if (buffer_group((BufferId)i) == group) sum += plan->bytes[i];
    return sum;
}

// (a) ZeRO-0 is the single-process plan: one FP32 copy each of master weights, gradients and both
// moments (4 bytes a parameter each), one BF16 copy (2 bytes), no gradient shard, and nothing depends
// on the world size, since every rank holds everything. Sharding changes only the weight state: the
// activations, scratch and workspaces of a rank are those of its own micro-batch at any stage.
static void test_zero0_is_single_process(const GPTConfig *cfg, const char *name) {
    size_t P = param_count(cfg);
    for (int dtype = DTYPE_BFLOAT16; dtype <= DTYPE_FLOAT8; dtype++) {
        MemoryPlan one = plan_of(cfg, dtype, 2, 64, 1, 0, 0);
        expect(one.bytes[BUF_PARAMS] == 4 * P && one.bytes[BUF_GRADS] == 4 * P &&
                   one.bytes[BUF_ADAM_M] == 4 * P && one.bytes[BUF_ADAM_V] == 4 * P &&
                   one.bytes[BUF_PARAMS_BF16] == 2 * P && one.bytes[BUF_GRAD_SHARD] == 0,
               "%s %s ZeRO-0: 4P master, gradients, m, v; 2P bf16; no shard", name, dtype_name(dtype));
        for (int world = 8; world <= 32; world *= 4) {
            MemoryPlan many = plan_of(cfg, dtype, 2, 64, world, 0, 0);
            expect(many.total == one.total && memcmp(many.bytes, one.bytes, sizeof(one.bytes)) == 0,
                   "%s %s ZeRO-0 at W=%d equals the single-process plan", name, dtype_name(dtype), world);
            for (int zero = 1; zero <= 3; zero += 2) {
                MemoryPlan sharded = plan_of(cfg, dtype, 2, 64, world, zero, 0);
                int same = 1;
                for (int i = 0; i < NUM_BUFFERS; i++)
                    if (!is_weight_state(i)) same &= sharded.bytes[i] == one.bytes[i];
                expect(same, "%s %s ZeRO-%d W=%d: every buffer but the weight state as at ZeRO-0", name,
                       dtype_name(dtype), zero, world);
            }
        }
    }
}

// (b) A unit of n elements is split into W chunks of ceil(n/W) rounded up to SHARD_ALIGN (64) elements,
// less than n/W + 64, so the shards of all ranks cover the parameters and overshoot by less than 64
// elements per rank and unit; and the elements the ranks really own add up to each unit exactly.
static void test_shards_cover_parameters(const GPTConfig *cfg, const char *name) {
    static const int worlds[] = {1, 3, 8, 32, 1000};
    size_t P = param_count(cfg);
    for (int zero = 1; zero <= 3; zero += 2) {
        size_t units = (size_t)shard_num_units(cfg, zero);
        for (int k = 0; k < 5; k++) {
            size_t W = (size_t)worlds[k], covered = shard_size(cfg, zero, (int)W) * W, owned = 0;
            for (size_t u = 0; u < units; u++) {
                size_t start, n;
                shard_unit_range(cfg, zero, (int)u, &start, &n);
                for (size_t r = 0; r < W; r++) owned += shard_owned(n, (int)W, (int)r);
            }
            expect(covered >= P && covered - P < SHARD_ALIGN * W * units && owned == P,
                   "%s ZeRO-%d W=%zu: shards cover %zu parameters with %zu padding (< 64 W x %zu units)",
                   name, zero, W, P, covered - P, units);
        }
    }
}

// (c) ZeRO-1 and ZeRO-3 keep the FP32 master weights and both moments only for this rank's shard:
// 3 x 4 bytes per parameter divided by W, plus the padding of (b) (< one element per unit, 12 bytes
// each). ZeRO-3 adds the FP32 gradient shard: 16 bytes per parameter divided by W.
static void test_sharded_optimizer_state(const GPTConfig *cfg, const char *name) {
    double P = (double)param_count(cfg);
    for (int world = 1; world <= 64; world *= 4) {
        MemoryPlan z1 = plan_of(cfg, DTYPE_FLOAT8, 2, 64, world, 1, 0);
        double state1 = (double)(z1.bytes[BUF_PARAMS] + z1.bytes[BUF_ADAM_M] + z1.bytes[BUF_ADAM_V]);
        expect(state1 >= 12 * P / world && state1 < 12 * (P / world + SHARD_ALIGN),
               "%s ZeRO-1 W=%d: master + moments %.0f bytes = 12P/W = %.0f within one padded element", name,
               world, state1, 12 * P / world);
        MemoryPlan z3 = plan_of(cfg, DTYPE_FLOAT8, 2, 64, world, 3, 0);
        double units = shard_num_units(cfg, 3);
        double state3 = (double)(z3.bytes[BUF_PARAMS] + z3.bytes[BUF_ADAM_M] + z3.bytes[BUF_ADAM_V] +
                                 z3.bytes[BUF_GRAD_SHARD]);
        expect(state3 >= 16 * P / world && state3 < 16 * (P / world + SHARD_ALIGN * units),
               "%s ZeRO-3 W=%d: master + moments + gradient shard %.0f bytes = 16P/W = %.0f within padding",
               name, world, state3, 16 * P / world);
    }
}

// What each stage must still hold in full. ZeRO-1 shards only the optimizer state: every rank computes
// with all P weights in BF16 and accumulates all P gradients in FP32 (padded to W chunks: < 64 W elements
// more). ZeRO-3 holds the global tensors (G elements: wte, wpe, lnf) and two layer slots of Lp elements
// each (the layer in use and the next, prefetched; one gradient slot reduce-scattered while the next is
// computed): BF16 weights and FP32 gradients of G + 2 Lp, padded by < 64 W elements per unit for the
// collectives and then by < 256 more so that each slot starts 256-byte aligned; in float8 the FP8 copies of
// two layers and the FP8 transposes of their 12 C^2 linear weights.
static void test_unsharded_buffers(const GPTConfig *cfg, const char *name) {
    double P = (double)param_count(cfg), C = cfg->channels;
    double G = (double)param_global_size(cfg), Lp = (double)param_layer_size(cfg);
    for (int world = 1; world <= 64; world *= 4) {
        MemoryPlan z1 = plan_of(cfg, DTYPE_FLOAT8, 2, 64, world, 1, 0);
        double bf1 = (double)z1.bytes[BUF_PARAMS_BF16], g1 = (double)z1.bytes[BUF_GRADS];
        expect(bf1 >= 2 * P && bf1 < 2 * (P + SHARD_ALIGN * world) && g1 >= 4 * P &&
                   g1 < 4 * (P + SHARD_ALIGN * world),
               "%s ZeRO-1 W=%d: BF16 weights and FP32 gradients of all P parameters", name, world);
        MemoryPlan z3 = plan_of(cfg, DTYPE_FLOAT8, 2, 64, world, 3, 0);
        double bf3 = (double)z3.bytes[BUF_PARAMS_BF16], g3 = (double)z3.bytes[BUF_GRADS];
        double gathered = G + 2 * Lp, pad = 3.0 * (SHARD_ALIGN * world + 256);
        expect(bf3 >= 2 * gathered && bf3 < 2 * (gathered + pad) && g3 >= 4 * gathered &&
                   g3 < 4 * (gathered + pad),
               "%s ZeRO-3 W=%d: BF16 weights and FP32 gradients of the global tensors + 2 layer slots", name,
               world);
        double f8 = (double)(z3.bytes[BUF_WEIGHTS_FP8] + z3.bytes[BUF_WEIGHTS_FP8_T]);
        expect(f8 >= 2 * (12 * C * C) * 2 && f8 < 2 * (Lp + SHARD_ALIGN * world + 256) + 2 * 12 * C * C,
               "%s ZeRO-3 W=%d float8: FP8 weights and transposes of 2 layers", name, world);
        // --keep_gathered: a weight slot for each of the L layers, the gradients' two slots unchanged
        PlanSettings keep_settings = {DTYPE_FLOAT8, 2, 64, 16, world, 3, 0, 0, 0, 1, 0, 0};
        MemoryPlan keep;
        memory_plan_compute(&keep, cfg, &keep_settings);
        check_layout(&keep, "keep_gathered");
        double L = cfg->num_layers, kept = G + L * Lp, kept_pad = (L + 1) * (SHARD_ALIGN * world + 256);
        double bfk = (double)keep.bytes[BUF_PARAMS_BF16];
        double f8k = (double)(keep.bytes[BUF_WEIGHTS_FP8] + keep.bytes[BUF_WEIGHTS_FP8_T]);
        expect(bfk >= 2 * kept && bfk < 2 * (kept + kept_pad) &&
                   keep.bytes[BUF_GRADS] == z3.bytes[BUF_GRADS] && f8k >= L * (12 * C * C) * 2 &&
                   f8k < L * (Lp + SHARD_ALIGN * world + 256) + L * 12 * C * C,
               "%s ZeRO-3 W=%d --keep_gathered: BF16 and FP8 weights of the global tensors + %g layer slots, "
               "the gradients' 2 slots",
               name, world, L);
    }
}

// (d) The GPT architecture's 70B (gpt-70B) in float8 on 32 H200s, B=1, T=2048. P = 80 layers x (12 C^2 + 13
// C) + wte (50304 x 8192)
// + wpe (2048 x 8192) + 2C = 64.86e9 parameters (C = 8192).
// ZeRO-1 keeps the FP32 gradients of all P parameters on every rank: 4 x 64.86e9 = 259 GB alone,
// more than a 141 GB card. ZeRO-3, per rank:
//   master + gradient shard + m + v: 16 bytes x P / 32                     = 32.43e9
//   gathered global tensors (wte, wpe, lnf: 428.9e6): FP32 grad + BF16 = 6 B = 2.57e9
//   two layer slots of 805.4e6 parameters: FP32 grad 4 + BF16 2 + FP8 1 bytes, and the FP8 transposes
//   of the 12 C^2 linear weights: 2 x (7 x 805.4e6 + 805.3e6)             = 12.89e9
//   activations kept for the backward (see (e)): 80 x 2048 x (25 C + 16 + 4 x 64) = 33.60e9
//   one layer of scratch, logits (2048 x 50304 x 2), GEMM workspace        ~  1e9
// about 82.5e9 bytes, which with the runtime reserve (2 GiB = 2.15e9) is far below 141e9.
static double estimate_70b_fp8_zero3(const GPTConfig *cfg, double W, double N) {
    double C = cfg->channels, L = cfg->num_layers, P = (double)param_count(cfg);
    double global = (double)cfg->padded_vocab_size * C + cfg->max_seq_len * C + 2 * C;
    double layer = 12 * C * C + 13 * C;
    double kept = L * N * (25 * C + 16 + 4 * cfg->num_heads);
    return 16 * P / W + 6 * global + 2 * (7 * layer + 12 * C * C) + kept + 1e9;
}

static void test_70b_fits_32_gpus(void) {
    GPTConfig cfg = preset_config("gpt-70B", GPT2_VOCAB_SIZE);
    double gpu = 141e9, P = (double)param_count(&cfg);
    expect(P > 64.8e9 && P < 64.9e9, "gpt-70B preset: %.4g parameters (80 x (12 C^2 + 13 C) + embeddings)",
           P);
    MemoryPlan z3 = plan_of(&cfg, DTYPE_FLOAT8, 1, 2048, 32, 3, 0);
    MemoryPlan z1 = plan_of(&cfg, DTYPE_FLOAT8, 1, 2048, 32, 1, 0);
    expect((double)z3.total < gpu - (double)RUNTIME_RESERVE_BYTES,
           "gpt-70B float8 W=32 ZeRO-3: %.1f GB + reserve fits 141 GB", z3.total / 1e9);
    expect((double)z1.total > gpu, "gpt-70B float8 W=32 ZeRO-1: %.1f GB does not fit 141 GB", z1.total / 1e9);
    expect((double)z1.bytes[BUF_GRADS] >= 4 * P, "ZeRO-1 keeps all FP32 gradients on each rank");
    double estimate = estimate_70b_fp8_zero3(&cfg, 32, 2048);
    expect(z3.total > 0.9 * estimate && z3.total < 1.1 * estimate,
           "gpt-70B float8 W=32 ZeRO-3: plan %.2f GB within 10%% of the estimate %.2f GB", z3.total / 1e9,
           estimate / 1e9);
    // Every rank needs its 1/W of the 16 bytes a parameter, so no ZeRO-3 plan is below 16P/W.
    MemoryPlan z3_64 = plan_of(&cfg, DTYPE_FLOAT8, 1, 2048, 64, 3, 1);
    expect((double)z3_64.total > 16 * P / 64, "gpt-70B W=64 ZeRO-3 recompute: above 16P/W");
}

// (e) What the backward of one block needs, per token, in bytes (bf16 = 2, float = 4, E4M3 = 1):
//   layer input (previous output, LayerNorm 1's input) 2C; LayerNorm 1 mean and 1/std 8; qkv 6C;
//   attention log-sum-exp 4 NH; residual after attention (LayerNorm 2's input) 2C; LayerNorm 2 stats 8;
//   fc output before GELU 8C; and the inputs of the four GEMMs for their weight gradients: in bfloat16
//   ln1 2C + attention output 2C + ln2 2C + GELU output 8C = 14C, in float8 transposed E4M3 copies of
//   the same C + C + C + 4C = 7C.
//   bfloat16: 2C + 8 + 6C + 4NH + 2C + 8 + 8C + 14C = 32C + 16 + 4NH
//   float8:   2C + 8 + 6C + 4NH + 2C + 8 + 8C + 7C  = 25C + 16 + 4NH
// With recompute only the layer input (2C) is kept for every layer and the rest for one layer, so the
// activations shrink by (L - 1) x N x (bytes - 2C); float8's one layer of BF16 GEMM inputs is scratch
// either way. Nothing outside the activations changes.
static void test_recompute_saves(const GPTConfig *cfg, const char *name, int B, int T) {
    size_t C = cfg->channels, L = cfg->num_layers, NH = cfg->num_heads, N = (size_t)B * T;
    for (int dtype = DTYPE_BFLOAT16; dtype <= DTYPE_FLOAT8; dtype++) {
        size_t per_token_layer = (dtype == DTYPE_FLOAT8 ? 25 : 32) * C + 16 + 4 * NH;
        size_t expected = (L - 1) * N * (per_token_layer - 2 * C);
        MemoryPlan keep = plan_of(cfg, dtype, B, T, 1, 0, 0), redo = plan_of(cfg, dtype, B, T, 1, 0, 1);
        size_t saved = group_bytes(&keep, PLAN_ACTIVATIONS) - group_bytes(&redo, PLAN_ACTIVATIONS);
        expect(saved == expected,
               "%s %s: recompute saves %zu activation bytes, expected (L-1) N (%zuC + 16 + 4NH)", name,
               dtype_name(dtype), saved, per_token_layer / C - 2);
        int same = 1;
        for (int g = 0; g < NUM_PLAN_GROUPS; g++)
            if (g != PLAN_ACTIVATIONS)
                same &= group_bytes(&keep, (PlanGroup)g) == group_bytes(&redo, (PlanGroup)g);
        expect(same, "%s %s: recompute changes only the activations", name, dtype_name(dtype));
        // The activations kept without recompute are at least the per-layer bytes above for all L layers.
        expect(group_bytes(&keep, PLAN_ACTIVATIONS) >= L * N * per_token_layer,
               "%s %s: activations hold L N (%zuC + 16 + 4NH) bytes", name, dtype_name(dtype),
               per_token_layer / C);
    }
}

// (f) float8 keeps 7C bytes of GEMM inputs per token and layer where bfloat16 keeps 14C (see (e)), but
// adds one layer of BF16 GEMM inputs (14C) and two FP8 gradient casts (8C) of scratch per token, and
// 2 bytes per linear weight (FP8 W and W^T; at ZeRO-1 the FP8 copy is gathered in parameter layout, so
// 1 byte per parameter + 1 per linear weight). Break-even at 124M (L = 12, C = 768, P = 124.5e6):
//   ZeRO-0: N (7 L - 22) C > 24 C^2 L           ->  N > 24 x 768 x 12 / 62      = 3567 tokens
//   ZeRO-1: N (7 L - 22) C > P + 12 C^2 L       ->  N > 209.4e6 / (62 x 768)    = 4398 tokens
// so at B=8, T=1024 (8192 tokens) float8 must plan less at every stage.
static void test_float8_smaller(void) {
    GPTConfig cfg = preset_config("124M", GPT2_VOCAB_SIZE);
    for (int world = 1; world <= 8; world *= 8)
        for (int zero = 0; zero <= 3; zero += zero ? 2 : 1) {
            MemoryPlan bf = plan_of(&cfg, DTYPE_BFLOAT16, 8, 1024, world, zero, 0);
            MemoryPlan f8 = plan_of(&cfg, DTYPE_FLOAT8, 8, 1024, world, zero, 0);
            expect(f8.total < bf.total, "124M B=8 T=1024 W=%d ZeRO-%d: float8 %.3f GiB < bfloat16 %.3f GiB",
                   world, zero, f8.total / 1073741824.0, bf.total / 1073741824.0);
        }
}

// ----------------------------------------------------------------------------
// Llama 2 70B on 4 nodes x 8 H200s, as the CUDA trainer would run it (it runs GPT-2 only so far): ZeRO-3 over
// all 32 ranks, B = 8 x T = 4096 with recompute, 1M tokens a step in one micro-step (the fastest setting the
// report finds for that batch). Every expectation is worked out here from the published shapes, not from
// memory_plan.h's or time_plan.h's lines:
//   C = 8192, 64 query heads and 8 key/value heads of 128, SwiGLU F = 28672, vocabulary 32000 (a multiple
//   of 128: no padding), L = 80.
//   A layer: qkv 8192 x (8192 + 2 x 1024) = 83,886,080; attproj 8192^2 = 67,108,864; SwiGLU's up, gate and
//   down 3 x 8192 x 28672 = 704,643,072 (the four linears: 855,638,016); two RMSNorm weights 16,384:
//   Lu = 855,654,400. The global unit: wte and the untied head 2 x 32000 x 8192 = 524,288,000 and the final
//   RMSNorm 8192: G = 524,296,192. P = 80 Lu + G = 68,976,648,192.
#define LLAMA70_LINEARS ((size_t)8192 * (8192 + 2 * 1024) + (size_t)8192 * 8192 + (size_t)3 * 8192 * 28672)
#define LLAMA70_LAYER (LLAMA70_LINEARS + 2 * 8192)
#define LLAMA70_GLOBAL ((size_t)2 * 32000 * 8192 + 8192)
#define LLAMA70_N ((size_t)8 * 4096)

static PlanSettings llama70_settings(int dtype, int recompute, int B, int shard_group) {
    PlanSettings s = {dtype, B, 4096, 16, 32, 3, recompute, FP8_RECIPE_DELAYED, shard_group, 0, 0, 0};
    return s;
}

// G / 32 = 16,384,256 = 64 x 256,004 and Lu / 32 = 26,739,200 = 64 x 417,800: every rank's chunk is whole
// 64-element SHARD_ALIGN blocks, so the shards carry no padding, and G and Lu are multiples of 256, so
// ZeRO-3's slots carry none either: the weight state is exact, per rank,
//   FP32 master, gradient shard, m and v: 4 P / 32 = 8,622,081,024 bytes each;
//   FP32 gradients of the global tensors and 2 layer slots 4 (G + 2 Lu), their BF16 copy 2 (G + 2 Lu);
//   float8 only: FP8 weights of the 2 slots, 2 Lu bytes, and the 2 slots' W^T, 2 x 855,638,016 bytes.
// So float8 holds 2 (Lu + 855,638,016) = 3.42e9 bytes more weights than bfloat16 at ZeRO-3: it gathers FP8
// weights but keeps the BF16 slots too (which its RMSNorm weights, read in BF16, land in).
// Activations with recompute, per token (every buffer is a multiple of 256 bytes at N = 32768: exact):
//   every layer's output L x 2C = 1,310,720; of one layer the input embedding 2C, residual2 2C, two RMSNorm
//   1/rms 4 + 4, qkv 2 x 10240, log-sum-exp 4 x 64, fc's up and gate 2 x 57344, the BF16 GEMM inputs ln1,
//   atty, ln2 3 x 2C and SwiGLU's output 2 x 28672; the final RMSNorm 2C + 4, logits 2 x 32000, the loss 4:
//   1,665,808 bytes; float8 also keeps one layer's 1-byte transposes of the four linears' inputs, 3C + F =
//   53,248: 1,719,056.
static void test_llama2_70b_memory(void) {
    GPTConfig cfg = preset_config("llama2-70B", 0);
    size_t P = param_count(&cfg), Lu = LLAMA70_LAYER, G = LLAMA70_GLOBAL, N = LLAMA70_N;
    expect(cfg.arch == ARCH_LLAMA && P == 80 * LLAMA70_LAYER + LLAMA70_GLOBAL && P == 68976648192ull,
           "llama2-70B: %zu parameters = 80 x 855,654,400 + 524,296,192", P);
    expect(linear_weights_per_layer(&cfg) == LLAMA70_LINEARS && param_layer_size(&cfg) == Lu &&
               param_global_size(&cfg) == G,
           "llama2-70B: a layer's linears %zu, layer %zu, global unit %zu", linear_weights_per_layer(&cfg),
           param_layer_size(&cfg), param_global_size(&cfg));
    MemoryPlan plans[2];
    for (int dtype = DTYPE_BFLOAT16; dtype <= DTYPE_FLOAT8; dtype++) {
        int f8 = dtype == DTYPE_FLOAT8;
        PlanSettings s = llama70_settings(dtype, 1, 8, 0);
        MemoryPlan *plan = &plans[f8];
        memory_plan_compute(plan, &cfg, &s);
        check_layout(plan, f8 ? "llama2-70B float8" : "llama2-70B bfloat16");
        size_t *b = plan->bytes, state = 4 * P / 32;
        expect(P % 32 == 0 && b[BUF_PARAMS] == state && b[BUF_GRAD_SHARD] == state &&
                   b[BUF_ADAM_M] == state && b[BUF_ADAM_V] == state && state == 8622081024ull,
               "llama2-70B %s W=32 ZeRO-3: master, gradient shard, m, v %zu bytes each = 4P/32",
               dtype_name(dtype), b[BUF_PARAMS]);
        expect(b[BUF_GRADS] == 4 * (G + 2 * Lu) && b[BUF_PARAMS_BF16] == 2 * (G + 2 * Lu),
               "llama2-70B %s ZeRO-3: FP32 gradients 4 (G + 2 Lu), BF16 copy 2 (G + 2 Lu)",
               dtype_name(dtype));
        expect(b[BUF_WEIGHTS_FP8] == (f8 ? 2 * Lu : 0) &&
                   b[BUF_WEIGHTS_FP8_T] == (f8 ? 2 * LLAMA70_LINEARS : 0),
               "llama2-70B %s ZeRO-3: FP8 weights %zu and W^T %zu bytes (float8: 2 slots)", dtype_name(dtype),
               b[BUF_WEIGHTS_FP8], b[BUF_WEIGHTS_FP8_T]);
        size_t per_token = f8 ? 1719056 : 1665808;
        expect(group_bytes(plan, PLAN_ACTIVATIONS) == N * per_token,
               "llama2-70B %s B=8 T=4096 recompute: activations %zu bytes = N x %zu", dtype_name(dtype),
               group_bytes(plan, PLAN_ACTIVATIONS), per_token);
        // The backward of one layer: the gradients of the residual stream, of a C-wide activation, of qkv and
        // of fc's output (2C + 2C + 2 x 10240 + 2 x 57344 = 168,192 bytes a token), and float8's two casts up
        // to fc's 57,344 features; besides these only the attention's row sums (256 bytes a token) and the
        // reductions' partial sums (under 0.3 MB), so under 300 bytes a token more.
        double scratch = (double)group_bytes(plan, PLAN_BACKWARD_SCRATCH);
        double gradients = (double)N * (168192 + (f8 ? 2 * 57344 : 0));
        expect(scratch >= gradients && scratch < gradients + 300.0 * N,
               "llama2-70B %s: backward scratch %.0f bytes, one layer's gradients %.0f", dtype_name(dtype),
               scratch, gradients);
        expect(b[BUF_ROPE_TABLE] == (size_t)4096 * 128 * 4 && b[BUF_LN1_STATS] == N * 4,
               "llama2-70B: RoPE table (maxT, 64 pairs) of cos and sin, RMSNorm keeps 1/rms alone");
        printf("reference llama2-70B %s B=8 T=4096 W=32 ZeRO-3 recompute 1: plan_total_bytes %zu\n",
               dtype_name(dtype), plan->total);
        expect(dry_run_fits(&cfg, &s, 141e9), "llama2-70B %s B=8 recompute W=32 ZeRO-3: %.1f GiB fits 141 GB",
               dtype_name(dtype), (plan->total + RUNTIME_RESERVE_BYTES) / DRY_RUN_GIB);
    }
    size_t extra = 2 * (Lu + LLAMA70_LINEARS);
    expect(
        group_bytes(&plans[1], PLAN_COMPUTE_WEIGHTS) == group_bytes(&plans[0], PLAN_COMPUTE_WEIGHTS) + extra,
        "llama2-70B ZeRO-3: float8's compute weights exceed bfloat16's by its FP8 slots and W^T, %zu bytes",
        extra);
    // Without recompute (B = 1, N = 4096) float8 keeps every layer's GEMM inputs as 1-byte transposes (3C + F
    // = 53,248 bytes a token) where bfloat16 keeps them in BF16 (twice that), but also one layer of BF16 GEMM
    // inputs as scratch: 78 N (3C + F) = 17.01e9 bytes less; it adds the FP8 weights above (3.42e9), two
    // casts of up to fc's 2F outputs (2 x 57,344 N = 0.47e9). Nothing else differs (both plans hold the FP8
    // scaling state): 13.12e9 bytes less in all.
    PlanSettings bs = llama70_settings(DTYPE_BFLOAT16, 0, 1, 0), fs = llama70_settings(DTYPE_FLOAT8, 0, 1, 0);
    MemoryPlan bf, f8;
    memory_plan_compute(&bf, &cfg, &bs);
    memory_plan_compute(&f8, &cfg, &fs);
    size_t saved = (size_t)78 * 4096 * 53248 - extra - (size_t)2 * 57344 * 4096;
    expect(f8.total < bf.total && bf.total - f8.total == saved,
           "llama2-70B B=1 T=4096 no recompute: float8 plans %.2f GB less than bfloat16 (%.2f GB expected)",
           (bf.total - f8.total) / 1e9, saved / 1e9);
    // Shard groups of 8 (one a node): each rank holds 16 bytes a parameter / 8 = 137.95e9 of optimizer state
    // alone (G / 8 and Lu / 8 are whole SHARD_ALIGN blocks too), with the gathered slots past 141 GB
    PlanSettings grouped = llama70_settings(DTYPE_FLOAT8, 1, 8, 8);
    MemoryPlan g8;
    memory_plan_compute(&g8, &cfg, &grouped);
    size_t state8 =
        g8.bytes[BUF_PARAMS] + g8.bytes[BUF_GRAD_SHARD] + g8.bytes[BUF_ADAM_M] + g8.bytes[BUF_ADAM_V];
    expect(state8 == 16 * P / 8 && !dry_run_fits(&cfg, &grouped, 141e9),
           "llama2-70B float8 in shard groups of 8: %.2f GB of optimizer state a rank, does not fit 141 GB",
           state8 / 1e9);
}

// The time plan of the same runs at the default rates (the H200's data sheet, time_plan.h's efficiencies:
// BF16 GEMMs up to 0.67 x 989.4, FP8 up to 0.55 x 1978.9 TFLOP/s, attention 0.40 x 989.4), worked out from
// the shapes; relative tolerance 1e-9: far above the rounding of a few products of doubles in another order
// (~1e-15), far below what any term left out or miscounted would change (the smallest, the final RMSNorm's
// 8192 weights, is 1e-7 of the parameters).
//   GEMMs, each by its shape: an (M x K) . (K x N) GEMM fills ceil(M/128) ceil(N/256) tiles of 128 x 256 in
//   waves of the H200's 132 SMs, reaching M N / (waves x 132 x 128 x 256) of its rate where the tiles leave
//   SMs or rows idle, and K / (K + K0) of it (K0 = 256 in BF16, 512 in FP8). A micro-step of N = 32768 tokens
//   runs, per layer, each linear's forward (N, OC, IC), twice with recompute, its data gradient (N, IC, OC)
//   and weight gradient (OC, IC, N), for qkv (10240, 8192), attproj (8192, 8192), fc's up and gate (57344,
//   8192) and fcproj (8192, 28672), in the run's dtype; the LM head (32000, 8192) the same three in BF16.
//   Attention: the forward's QK^T and PV over 64 query heads of 128 (GQA shares keys and values, not
//   FLOPs), 2 x 2 x T x C / 2 (causal) a token and layer, times 3.5 for forward and backward, plus 1 for
//   the recompute.
//   Collectives, one micro-step, shards over the 32 ranks (no padding, as above): each layer's gradients
//   reduce-scattered, 4 Lu bytes x 80, and the global unit's, 4 G; each of the 78 layers outside the slots
//   that stay gathered after the update gathered in the forward and again in the backward (156), and the
//   update gathers G in BF16 and layers 0 and 1: all-gathered (156 + 2) Lu bytes in float8 (FP8), twice
//   that in bfloat16, plus 2 G; float8 broadcasts the RMSNorm weights of those 158 layer gathers, 2 x 2C
//   bytes each. All-reduces: the loss and the votes to stop (8 bytes) and the squared gradient norm (8);
//   float8 also the amaxes and the casts' counters of 3 tensors a linear, 4 + 16 bytes each.
static double shape_ms(double M, double N, double K, double tflops, double k0) {
    double tiles = ceil(M / 128) * ceil(N / 256), filled = M * N / (ceil(tiles / 132) * 132 * 128 * 256);
    return 2 * M * N * K / (tflops * 1e9 * filled * K / (K + k0));
}

static double llama70_gemm_ms(int f8) {
    const double linears[4][2] = {{10240, 8192}, {8192, 8192}, {57344, 8192}, {8192, 28672}};
    double N = (double)LLAMA70_N, rate = f8 ? 0.55 * 1978.9 : 0.67 * 989.4, k0 = f8 ? 512 : 256, ms = 0;
    for (int i = 0; i < 4; i++) {
        double OC = linears[i][0], IC = linears[i][1];
        ms +=
            2 * shape_ms(N, OC, IC, rate, k0) + shape_ms(N, IC, OC, rate, k0) + shape_ms(OC, IC, N, rate, k0);
    }
    double bf16 = 0.67 * 989.4;
    return 80 * ms + shape_ms(N, 32000, 8192, bf16, 256) + shape_ms(N, 8192, 32000, bf16, 256) +
           shape_ms(32000, 8192, N, bf16, 256);
}

static void test_llama2_70b_time(void) {
    GPTConfig cfg = preset_config("llama2-70B", 0);
    TrainOptions opts;
    options_defaults(&opts);
    PlanRates rates = plan_rates_from_options(&opts, 32);
    double N = (double)LLAMA70_N, Lu = (double)LLAMA70_LAYER, G = (double)LLAMA70_GLOBAL;
    // the attention the settings plan (memory_plan.h's plan_fast_attention: exact where this build has no
    // cuDNN): the fused rate, 40% of the BF16 peak, or the exact kernels'
    const double attention_flops = 2 * 2 * 4096.0 * 8192 / 2 * N * 80 * 4.5;
    // The memory-bound kernels' bytes a token and layer (BF16, 2 bytes an element), kernel by kernel as
    // time_plan.h describes them, tallied here for Llama's widths. Forward: the two RMSNorms and the residual
    // 6C, SwiGLU reading up and gate and writing its output 3F, RoPE reading and writing the 64 + 8 query and
    // key heads of 128 (18,432 elements: 36,864 bytes, forward and backward alike): 2 (49,152 + 86,016) +
    // 36,864 = 307,200. Backward: the RMSNorms and residual 9C, SwiGLU's backward reading up, gate and the
    // gradient and writing two, 5F, RoPE: 2 (73,728 + 143,360) + 36,864 = 471,040. No biases, and no
    // cuBLASLt epilogue for SwiGLU in bfloat16. Float8 (delayed) adds the casts reading the four linears'
    // inputs (3C + F = 53,248) and output gradients (QKV + C + 2F + C = 83,968) in BF16 and writing FP8 and
    // its transpose, 4 bytes an element; its casts spare the norms' 2C outputs and SwiGLU's 3F pass but read
    // fc's 2F output instead of SwiGLU's F (2C + 2F spared: 147,456 bytes), and spare SwiGLU's 5F backward
    // pass but read its F gradient beside fc's output (4F spared: 229,376 bytes): 307,200 + 212,992 - 147,456
    // = 372,736 and 471,040 + 335,872 - 229,376 = 577,536. The forward runs twice (recompute); the logits
    // are read and written once a token (2 x 2 x 32000); AdamW moves 30 bytes a shard parameter (31 with
    // float8's FP8 copy), at 3360 GB/s.
    const double forward[2] = {307200, 372736}, backward[2] = {471040, 577536};
    double step_ms[2];
    for (int dtype = DTYPE_BFLOAT16; dtype <= DTYPE_FLOAT8; dtype++) {
        int f8 = dtype == DTYPE_FLOAT8;
        PlanSettings s = llama70_settings(dtype, 1, 8, 0);
        TimePlan t = time_plan(&cfg, &s, 1, &rates);
        double gemm_ms = llama70_gemm_ms(f8);
        const double attention_ms =
            attention_flops / (s.fast_attention ? 0.40 * 989.4e12 : EXACT_ATTENTION_TFLOPS * 1e12) * 1e3;
        expect(fabs(t.gemm_ms - gemm_ms) < 1e-9 * t.gemm_ms &&
                   fabs(t.attention_ms - attention_ms) < 1e-9 * attention_ms,
               "llama2-70B %s: GEMMs %.1f ms (%.1f expected), attention %.1f ms (%.1f)", dtype_name(dtype),
               t.gemm_ms, gemm_ms, t.attention_ms, attention_ms);
        const double *c = t.collectives.payload;
        expect(c[COLL_REDUCE_SCATTER] == 80 * 4 * Lu + 4 * G &&
                   c[COLL_ALL_GATHER] == 158 * (f8 ? 1 : 2) * Lu + 2 * G &&
                   c[COLL_BROADCAST] == (f8 ? 158 * 2 * 2 * 8192.0 : 0) &&
                   c[COLL_ALL_REDUCE] == 16 + (f8 ? 20.0 * 3 * 4 * 80 : 0),
               "llama2-70B %s: collectives' payloads reduce-scatter %.0f, all-gather %.0f, broadcast %.0f, "
               "all-reduce %.0f bytes",
               dtype_name(dtype), c[COLL_REDUCE_SCATTER], c[COLL_ALL_GATHER], c[COLL_BROADCAST],
               c[COLL_ALL_REDUCE]);
        double memory_ms = (N * (80 * (2 * forward[f8] + backward[f8]) + 4 * 32000.0) +
                            (30 + f8) * (double)(LLAMA70_LAYER * 80 + LLAMA70_GLOBAL) / 32) /
                           3360e9 * 1e3;
        expect(fabs(t.memory_ms - memory_ms) < 1e-9 * memory_ms,
               "llama2-70B %s: memory-bound kernels %.1f ms (%.1f expected)", dtype_name(dtype), t.memory_ms,
               memory_ms);
        step_ms[f8] = t.step_ms;
        printf("reference llama2-70B %s B=8 T=4096 W=32 ZeRO-3 recompute 1 time: plan_step_ms %.3f\n",
               dtype_name(dtype), t.step_ms);
    }
    expect(step_ms[1] < step_ms[0],
           "llama2-70B: float8 plans a shorter step (%.0f ms) than bfloat16 (%.0f ms)", step_ms[1],
           step_ms[0]);
}

// --grad_reduce_dtype bfloat16: the BF16 buffer NCCL sums the gradients in holds the longest buffer a step
// sums over the ranks, up to 2^25 elements (64 MiB), and nothing in FP32 or on one process: 124M's 124.5e6
// parameters with ZeRO-0 over 8 ranks fill the 2^25; d2 with ZeRO-3 over 2 ranks holds its longest unit, a
// layer's 12 C^2 + 13 C = 49,984 elements padded to whole 64-element blocks a rank, 2 x 25,024 = 50,048 (over
// the global unit's wte, wpe and final LayerNorm, 2 x 256 x 64 + 2 x 64 = 32,896; no shard groups, so no sum
// of the shards across them). The
// collectives' payload: llama2-70B's reduce-scatters (80 layers' 4 Lu bytes and the global unit's 4 G in
// FP32) move half the bytes in BF16, and nothing else changes.
static void test_grad_bf16(void) {
    GPTConfig gpt124 = preset_config("124M", GPT2_VOCAB_SIZE), d2 = preset_config("d2", 256);
    PlanSettings s = {DTYPE_BFLOAT16, 16, 1024, 16, 8, 0, 0, 0, 0, 0, 0, 1};
    MemoryPlan with, without;
    memory_plan_compute(&with, &gpt124, &s);
    s.grad_bf16 = 0;
    memory_plan_compute(&without, &gpt124, &s);
    expect(param_count(&gpt124) > ((size_t)1 << 25) && with.bytes[BUF_GRAD_BF16] == (size_t)2 << 25 &&
               with.total == without.total + ((size_t)2 << 25) && without.bytes[BUF_GRAD_BF16] == 0,
           "124M ZeRO-0 over 8 ranks: grads_bf16 %zu bytes (2^25 BF16 elements), none in FP32",
           with.bytes[BUF_GRAD_BF16]);
    s.grad_bf16 = 1, s.world_size = 1;
    memory_plan_compute(&with, &gpt124, &s);
    expect(with.bytes[BUF_GRAD_BF16] == 0, "one process: no grads_bf16 (%zu bytes)",
           with.bytes[BUF_GRAD_BF16]);
    PlanSettings z3 = {DTYPE_FLOAT8, 4, 64, 16, 2, 3, 0, 0, 0, 0, 0, 1};
    memory_plan_compute(&with, &d2, &z3);
    expect(param_global_size(&d2) == 2 * 256 * 64 + 2 * 64 &&
               param_layer_size(&d2) == 12 * 64 * 64 + 13 * 64 && with.bytes[BUF_GRAD_BF16] == 2 * 50048,
           "d2 ZeRO-3 over 2 ranks: grads_bf16 %zu bytes, a padded layer's 50,048 elements in BF16",
           with.bytes[BUF_GRAD_BF16]);
    GPTConfig cfg = preset_config("llama2-70B", 0);
    TrainOptions opts;
    options_defaults(&opts);
    PlanRates rates = plan_rates_from_options(&opts, 32);
    PlanSettings f = llama70_settings(DTYPE_FLOAT8, 1, 8, 0), b = f;
    b.grad_bf16 = 1;
    StepCollectives cf = step_collectives(&cfg, &f, 1, &rates), cb = step_collectives(&cfg, &b, 1, &rates);
    double Lu = (double)LLAMA70_LAYER, G = (double)LLAMA70_GLOBAL;
    expect(cf.payload[COLL_REDUCE_SCATTER] == 80 * 4 * Lu + 4 * G &&
               cb.payload[COLL_REDUCE_SCATTER] == 80 * 2 * Lu + 2 * G &&
               cb.payload[COLL_ALL_GATHER] == cf.payload[COLL_ALL_GATHER] &&
               cb.payload[COLL_ALL_REDUCE] == cf.payload[COLL_ALL_REDUCE],
           "llama2-70B ZeRO-3 float8: reduce-scatters %.0f bytes in BF16, %.0f in FP32, the rest the same",
           cb.payload[COLL_REDUCE_SCATTER], cf.payload[COLL_REDUCE_SCATTER]);
}

// ----------------------------------------------------------------------------
// dry_run.h

// Runs dry_run_report in a child with stdout and stderr in `out` (NUL-terminated); returns its exit status.
static int run_report(const TrainOptions *opts, const GPTConfig *cfg, int B, int T, int world, char *out,
                      size_t n) {
    FILE *f = tmpfile();
    if (!f) return -1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fileno(f), 1);
        dup2(fileno(f), 2);
        int status = dry_run_report(opts, cfg, B, T, world);
        fflush(stdout);
        _exit(status);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    rewind(f);
    size_t got = fread(out, 1, n - 1, f);
    out[got] = '\0';
    fclose(f);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static TrainOptions default_options(const char *model, int dtype, int zero, int recompute) {
    TrainOptions opts;
    options_defaults(&opts);
    snprintf(opts.model_size, sizeof(opts.model_size), "%s", model);
    opts.dtype = dtype;
    opts.zero_stage = zero;
    opts.recompute = recompute;
    opts.dry_run = 1;
    return opts;
}

// The total the report prints for this configuration, also printed here as a reference line.
static size_t reference_total(const char *model, int dtype, int B, int T, int world, int zero) {
    GPTConfig cfg = preset_config(model, 0);
    MemoryPlan plan = plan_of(&cfg, dtype, B, T, world, zero, 0);
    printf("reference %s %s B=%d T=%d W=%d ZeRO-%d recompute 0: plan_total_bytes %zu\n", model,
           dtype_name(dtype), B, T, world, zero, plan.total);
    return plan.total;
}

// The suggestions after "to fit": how many, each parsed from "needs X GiB"; -1 if one exceeds gpu_bytes.
static int suggestions_that_fit(const char *out, double gpu_bytes) {
    const char *p = strstr(out, "to fit");
    int count = 0;
    while (p && (p = strstr(p, "needs ")) != NULL) {
        p += 6;
        if (atof(p) * 1073741824.0 > gpu_bytes) return -1;
        count++;
    }
    return count;
}

static void test_report_verdicts(void) {
    static char out[1 << 16];
    char line[128];
    // the 70B users mean (--model_size 70B): LLaMA-2's
    GPTConfig g70 = preset_config("llama2-70B", 0), g124 = preset_config("124M", GPT2_VOCAB_SIZE);
    TrainOptions f8 = default_options("llama2-70B", DTYPE_FLOAT8, 3, 0);
    int status = run_report(&f8, &g70, 1, 2048, 32, out, sizeof(out));
    snprintf(line, sizeof(line), "plan_total_bytes %zu ",
             reference_total("llama2-70B", DTYPE_FLOAT8, 1, 2048, 32, 3));
    expect(status == 0 && strstr(out, "\nfits: ") && strstr(out, line),
           "dry run llama2-70B float8 W=32 ZeRO-3 B=1 T=2048: exit 0, 'fits', the plan's total");
    expect(strstr(out, "dry run | model llama L=80 C=8192 NH=64 V=32000") && strstr(out, "ZeRO-3") &&
               strstr(out, "with --recompute 1") && strstr(out, "reduce-scattered") && strstr(out, "reserve"),
           "dry run prints the header, the recompute comparison, the collectives and the reserve");
    TrainOptions bf = default_options("124M", DTYPE_BFLOAT16, 0, 0);
    status = run_report(&bf, &g124, 4, 1024, 1, out, sizeof(out));
    snprintf(line, sizeof(line), "plan_total_bytes %zu ",
             reference_total("124M", DTYPE_BFLOAT16, 4, 1024, 1, 0));
    expect(status == 0 && strstr(out, "\nfits: ") && strstr(out, line), "dry run 124M bfloat16 W=1: fits");
    f8.zero_stage = 0;
    status = run_report(&f8, &g70, 1, 2048, 1, out, sizeof(out));
    expect(status == 1 && strstr(out, "does not fit: needs") && strstr(out, "--world_size"),
           "dry run llama2-70B float8 W=1: exit 1, a larger world size suggested");
    int n = suggestions_that_fit(out, 141e9);
    expect(n >= 1, "dry run llama2-70B float8 W=1: %d suggestions, each needing at most 141 GB", n);
}

// cuDNN's attention workspace (memory_plan.h's attention_workspace_bytes: cudnn-frontend's dP workspace of
// the deterministic backward, b h T T 2 bytes with T rounded up to 64 and 128, plus its FP32 softmax sums, b
// h T 4 bytes): a line of the dry run with --attention fast, none with exact, none with auto in this build
// (no cuDNN), and counted where the report asks what fits.
static void test_attention_workspace(void) {
    static char out[1 << 16];
    char line[160];
    const size_t ws124 = (size_t)16 * 12 * 1024 * 1024 * 2 + (size_t)16 * 12 * 1024 * 4;
    const size_t ws8b = (size_t)32 * 8192 * 8192 * 2 + (size_t)32 * 8192 * 4;
    expect(attention_workspace_bytes(16, 1024, 12) == ws124 && ws124 == 403439616,
           "attention workspace, 124M B=16 T=1024: 384 MiB of dP + 0.75 MiB of softmax sums");
    expect(attention_workspace_bytes(1, 8192, 32) == ws8b && ws8b == 4296015872,
           "attention workspace, llama3-8B B=1 T=8192: 4 GiB of dP + 1 MiB of softmax sums");
    expect(attention_workspace_bytes(1, 100, 2) == (size_t)2 * 128 * 128 * 2 + 2 * 100 * 4,
           "attention workspace, T=100: the dP rows rounded up to 64 and its columns to 128");
    expect(!plan_fast_attention(ATTENTION_AUTO) && !plan_fast_attention(ATTENTION_EXACT) &&
               plan_fast_attention(ATTENTION_FAST),
           "a build without cuDNN plans the workspace for --attention fast only");

    GPTConfig g124 = preset_config("124M", GPT2_VOCAB_SIZE), l8 = preset_config("llama3-8B", 0);
    TrainOptions opts = default_options("124M", DTYPE_BFLOAT16, 0, 0);
    opts.attention = ATTENTION_EXACT;
    run_report(&opts, &g124, 16, 1024, 1, out, sizeof(out));
    size_t exact_total = reference_total("124M", DTYPE_BFLOAT16, 16, 1024, 1, 0);
    snprintf(line, sizeof(line), "plan_total_bytes %zu ", exact_total);
    expect(strstr(out, line) && !strstr(out, "attn_workspace"),
           "dry run 124M B=16 T=1024 --attention exact: no attention workspace");
    opts.attention = ATTENTION_AUTO;
    run_report(&opts, &g124, 16, 1024, 1, out, sizeof(out));
    expect(strstr(out, line) && !strstr(out, "attn_workspace"),
           "dry run 124M B=16 T=1024 --attention auto without cuDNN: no attention workspace");
    opts.attention = ATTENTION_FAST;
    run_report(&opts, &g124, 16, 1024, 1, out, sizeof(out));
    snprintf(line, sizeof(line), "plan_total_bytes %zu ", exact_total + ws124); // a multiple of 256
    expect(strstr(out, line) &&
               strstr(out, "attn_workspace                0.376 GiB  cuDNN attention workspace"),
           "dry run 124M B=16 T=1024 --attention fast: the workspace's line, 0.376 GiB, and in the total");

    TrainOptions l8_opts = default_options("llama3-8B", DTYPE_BFLOAT16, 0, 0);
    l8_opts.attention = ATTENTION_FAST;
    run_report(&l8_opts, &l8, 1, 8192, 1, out, sizeof(out));
    expect(strstr(out, "attn_workspace                4.001 GiB  cuDNN attention workspace") != NULL,
           "dry run llama3-8B B=1 T=8192 --attention fast: the workspace's line, 4.001 GiB");

    // The fit the suggestions and the fastest-that-fits search ask (dry_run_fits): the workspace counts.
    PlanSettings exact = plan_settings_from_options(&opts, 16, 1024, 1), fast = exact;
    exact.fast_attention = 0;
    double between = (double)dry_run_needed_bytes(&g124, &exact) + ws124 / 2.0;
    expect(dry_run_fits(&g124, &exact, between) && !dry_run_fits(&g124, &fast, between),
           "124M B=16 T=1024: a GPU 192 MiB above the exact plan fits it and not the fast one");
    opts.gpu_memory_gb = between / 1e9;
    int status = run_report(&opts, &g124, 16, 1024, 1, out, sizeof(out));
    expect(
        status == 1 && strstr(out, "\n  --attention exact ") && suggestions_that_fit(out, between) >= 1,
        "dry run 124M B=16 T=1024 --attention fast on that GPU: does not fit, --attention exact suggested");
}

// The searches behind the suggestions: the largest batch fits and one more does not; the smallest world
// size fits and half of it does not.
static void test_suggestion_searches(void) {
    GPTConfig g7 = preset_config("gpt-7B", GPT2_VOCAB_SIZE), g70 = preset_config("gpt-70B", GPT2_VOCAB_SIZE);
    double gpu = 141e9;
    PlanSettings s = {DTYPE_BFLOAT16, 8, 2048, 16, 1, 0, 0, 0, 0, 0, 0, 0};
    int b = dry_run_largest_batch(&g7, s, gpu);
    PlanSettings fit = s, over = s;
    fit.B = b;
    over.B = b + 1;
    expect(b >= 1 && b < 8 && dry_run_fits(&g7, &fit, gpu) && !dry_run_fits(&g7, &over, gpu),
           "gpt-7B bfloat16 B=8: largest batch that fits is %d", b);
    PlanSettings t = {DTYPE_FLOAT8, 1, 2048, 16, 1, 3, 0, 0, 0, 0, 0, 0};
    int w = dry_run_smallest_world(&g70, t, 1, gpu);
    PlanSettings at = t, half = t;
    at.world_size = w;
    half.world_size = w / 2;
    expect(w > 1 && w <= 32 && (w & (w - 1)) == 0 && dry_run_fits(&g70, &at, gpu) &&
               !dry_run_fits(&g70, &half, gpu),
           "gpt-70B float8 B=1 T=2048 ZeRO-3: smallest power-of-two world size that fits is %d", w);
    expect(dry_run_needed_bytes(&g70, &at) ==
               plan_of(&g70, DTYPE_FLOAT8, 1, 2048, w, 3, 0).total + RUNTIME_RESERVE_BYTES,
           "needed bytes = plan + runtime reserve");
}

// Bad settings end the process with one error line naming the flag, as a real run's would.
static void test_report_validation(void) {
    static char out[1 << 12];
    GPTConfig g124 = preset_config("124M", GPT2_VOCAB_SIZE);
    TrainOptions opts = default_options("124M", DTYPE_FLOAT8, 0, 0);
    expect(run_report(&opts, &g124, 4, 1024, 0, out, sizeof(out)) == 1 && strstr(out, "error: --world_size"),
           "world size 0 is refused");
    opts.zero_stage = 2;
    expect(run_report(&opts, &g124, 4, 1024, 8, out, sizeof(out)) == 1 && strstr(out, "error: --zero_stage"),
           "ZeRO-2 is refused");
    opts.zero_stage = 0;
    expect(run_report(&opts, &g124, 3, 5, 1, out, sizeof(out)) == 1 && strstr(out, "multiple of 16"),
           "float8 with B*T = 15 is refused as a float8 run would");
    expect(run_report(&opts, &g124, 4, 2048, 1, out, sizeof(out)) == 1 && strstr(out, "error: --seq_len"),
           "T above maxT is refused");
    opts.dtype = DTYPE_FLOAT32;
    expect(run_report(&opts, &g124, 4, 1024, 1, out, sizeof(out)) == 1 && strstr(out, "error: --dtype"),
           "float32 (no GPU plan) is refused");
    opts.dtype = DTYPE_FLOAT8;
    GPTConfig huge = g124;
    huge.num_layers = 1024;
    huge.channels = 65536;
    huge.num_heads = 1024;
    expect(run_report(&opts, &huge, 1 << 20, 1024, 1, out, sizeof(out)) == 1 && strstr(out, "exceeds 4e18"),
           "a plan too large for size_t is refused");
}

int main(void) {
    GPTConfig small = preset_config("d2", 256), gpt124 = preset_config("124M", 50257);
    MemoryPlan bf, f8;
    int B = 4, T = 64;
    memory_plan_compute(&bf, &small, &(PlanSettings){DTYPE_BFLOAT16, B, T, 16, 1, 0, 0, 0, 0, 0, 0, 0});
    memory_plan_compute(&f8, &small, &(PlanSettings){DTYPE_FLOAT8, B, T, 16, 1, 0, 0, 0, 0, 0, 0, 0});
    check_layout(&bf, "d2 bfloat16");
    check_layout(&f8, "d2 float8");
    size_t P = param_count(&small), L = small.num_layers, C = small.channels, N = (size_t)B * T;
    check(bf.bytes[BUF_PARAMS] == 4 * P && bf.bytes[BUF_PARAMS_BF16] == 2 * P,
          "parameter copies: 4P and 2P bytes");
    check(bf.bytes[BUF_WEIGHTS_FP8] == 0 && bf.bytes[BUF_INPUT_FP8_T] == 0,
          "bfloat16 allocates no FP8 buffer");
    check(f8.bytes[BUF_WEIGHTS_FP8] == L * 12 * C * C && f8.bytes[BUF_WEIGHTS_FP8_T] == L * 12 * C * C,
          "FP8 weights and transposes: one byte per linear weight (12 C^2 per layer)");
    check(f8.bytes[BUF_INPUT_FP8_T] == L * N * 7 * C, "FP8 saved inputs: 7C bytes per token and layer");
    check(bf.bytes[BUF_LN1] + bf.bytes[BUF_ATTY] + bf.bytes[BUF_LN2] + bf.bytes[BUF_FCH_GELU] ==
              L * N * 7 * C * 2,
          "bfloat16 saved GEMM inputs: 14C bytes per token and layer");
    check(f8.bytes[BUF_LN1] == N * C * 2 && f8.bytes[BUF_FCH_GELU] == N * 4 * C * 2,
          "float8 keeps one layer of BF16 GEMM inputs as scratch");
    check(f8.bytes[BUF_FP8_STATE] == 4 * fp8_state_floats(&small, 16) &&
              fp8_state_floats(&small, 16) == L * 8 * (16 + 6) + L * 4 * 3 + (L * 12) * 4,
          "FP8 scaling state: history + 6 floats per tensor (amax, scale, descale, measured, last amax, last "
          "scale), 3 per weight, two 64-bit counters for each");
    // At 124M and a realistic batch, float8 must need less memory than bfloat16 for the activations.
    MemoryPlan bf124, f8124;
    memory_plan_compute(&bf124, &gpt124,
                        &(PlanSettings){DTYPE_BFLOAT16, 16, 1024, 16, 1, 0, 0, 0, 0, 0, 0, 0});
    memory_plan_compute(&f8124, &gpt124, &(PlanSettings){DTYPE_FLOAT8, 16, 1024, 16, 1, 0, 0, 0, 0, 0, 0, 0});
    check_layout(&f8124, "124M float8");
    check(f8124.total < bf124.total, "124M B=16 T=1024: float8 plans less memory than bfloat16");
    check(param_count(&gpt124) * 4 == bf124.bytes[BUF_PARAMS], "124M parameters");
    // FP8 GEMMs need multiples of 16
    check(fp8_shapes_status(&small, B, T) == 0, "d2 with B*T = 256 is accepted");
    GPTConfig odd = small;
    odd.channels = 72;
    odd.num_heads = 2;
    check(fp8_shapes_status(&odd, B, T) == 1, "C = 72 is refused");
    check(fp8_shapes_status(&small, 3, 5) == 1, "B*T = 15 is refused");
    // ZeRO, recompute and the dry run
    GPTConfig gpt70 = preset_config("gpt-70B", GPT2_VOCAB_SIZE), llama7 = preset_config("llama2-7B", 0);
    GPTConfig llama70 = preset_config("llama2-70B", 0);
    test_zero0_is_single_process(&small, "d2");
    test_zero0_is_single_process(&gpt124, "124M");
    test_zero0_is_single_process(&llama7, "llama2-7B");
    test_shards_cover_parameters(&small, "d2");
    test_shards_cover_parameters(&gpt124, "124M");
    test_shards_cover_parameters(&gpt70, "gpt-70B");
    test_shards_cover_parameters(&llama70, "llama2-70B");
    test_sharded_optimizer_state(&small, "d2");
    test_sharded_optimizer_state(&gpt124, "124M");
    test_sharded_optimizer_state(&gpt70, "gpt-70B");
    test_sharded_optimizer_state(&llama70, "llama2-70B");
    test_unsharded_buffers(&small, "d2");
    test_unsharded_buffers(&gpt124, "124M");
    test_unsharded_buffers(&gpt70, "gpt-70B");
    test_70b_fits_32_gpus();
    test_recompute_saves(&small, "d2", 4, 64);
    test_recompute_saves(&gpt124, "124M", 4, 1024);
    test_recompute_saves(&gpt70, "gpt-70B", 1, 2048);
    test_float8_smaller();
    test_llama2_70b_memory();
    test_llama2_70b_time();
    test_grad_bf16();
    test_suggestion_searches();
    test_report_verdicts();
    test_report_validation();
    test_attention_workspace();
    return test_summary();
}

// core/time_plan.h: --dry_run's time plan, what one optimizer step of the CUDA trainer should take per
// process, printed without a GPU. It counts the work of the step and divides it by rates derived from the
// GPU's data sheet (--gpu) and a few efficiencies that hold for every GPU and model
// (docs/plan-vs-published.md says where they come from and which published runs they were fitted to):
//  - every GEMM of the step by its shape (the block linears in the run's dtype, the LM head in BF16): its
//    FLOPs at the asymptotic rate (PLAN_GEMM_*_EFFICIENCY of the peak), slowed by the tile and wave
//    quantization of its output and by a reduction dimension K too short to amortize a tile's fixed cost;
//  - the fused attention's FLOPs (causal) at PLAN_ATTENTION_EFFICIENCY of the BF16 peak;
//  - the DRAM bytes of the memory-bound kernels (LayerNorm or RMSNorm, residual, GELU or SwiGLU, Llama's
//    RoPE, bias gradients, FP8 casts, cross-entropy, AdamW; in bfloat16 the GELU epilogues' extra GEMM
//    traffic) at PLAN_HBM_EFFICIENCY of the data sheet's bandwidth;
//  - the launch gaps between the step's kernels;
//  - every NCCL collective the step issues (exactly the trainer's: the emulation counts them,
//    test/test_dist_emu.sh compares) as NCCL runs it: inside a node over NVLink, across nodes through all
//    the node's NICs at once (NCCL's rings and trees, one channel a NIC), a ring or, for an all-reduce, a
//    tree, whichever is faster at its size; ZeRO-3's layer gathers and reduce-scatters run on the
//    communication stream beside the layers' compute, the rest between phases.
// Measured rates replace the derived ones: --plan_rates FILE (what scripts/gpu_check.sh writes from a real
// GPU) or the --plan_* flags. The shapes are gpt_model.h's, so one plan serves GPT-2 and Llama; for Llama
// (which the CUDA trainer does not run yet) it is the plan of kernels and collectives laid out as GPT-2's
// are.
#ifndef TIME_PLAN_H
#define TIME_PLAN_H

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "dist.h"
#include "gpt_model.h"
#include "memory_plan.h"

// ----------------------------------------------------------------------------
// GPUs, from NVIDIA's data sheets: dense (not 2:4 sparse) tensor-core peaks, HBM bandwidth and capacity, SMs
// (the wave size of a GEMM), and the bus bandwidth NCCL reaches inside a node: 80% of the per-direction
// link (NVLink 4: 450 GB/s, so 360, what nccl-tests report for an 8-GPU ring; NVLink 5: 900; NVLink 3: 300;
// PCIe Gen5 x16: 64), and the board power (the maximum TDP the data sheet gives: what large GEMMs, held at
// the power limit, draw). In cli.h's GPU_CHOICE_NAMES order.
typedef struct {
    const char *name;
    double bf16_tflops, fp8_tflops; // 0: no FP8 tensor cores
    double hbm_gbps, memory_gb;
    int sms;
    double nvlink_gbps;
    double board_watts;
} GpuSpec;

enum { GPU_H200, GPU_H100_SXM, GPU_H100_PCIE, GPU_B200, GPU_A100 };
static const GpuSpec GPU_SPECS[] = {
    {"h200", 989.4, 1978.9, 4800, 141, 132, 360, 700},    // H200 SXM: 141 GB HBM3e, NVLink 4, 700 W
    {"h100-sxm", 989.4, 1978.9, 3350, 80, 132, 360, 700}, // H100 SXM5: 80 GB HBM3, NVLink 4, 700 W
    {"h100-pcie", 756.0, 1513.0, 2000, 80, 114, 51,
     350}, // H100 PCIe: 80 GB HBM2e, PCIe Gen5 between GPUs, 350 W
    {"b200", 2250.0, 4500.0, 8000, 180, 148, 720, 1000}, // HGX/DGX B200: 180 GB HBM3e, NVLink 5, 1000 W
    {"a100", 312.0, 0.0, 2039, 80, 108, 240, 400},       // A100 SXM4 80 GB: HBM2e, NVLink 3, no FP8, 400 W
};

// The calibration: three numbers for every GPU and model, fitted to three published runs on 8 to 512 H100s
// (docs/plan-vs-published.md; the other rows there are held out): the asymptotic BF16 GEMM efficiency and K0
// to llm.c's GPT-2 1.5B (K = 1600) and IBM's Llama 3 70B (K = 8192) in bfloat16, the FP8 efficiency to NeMo's
// Llama 2 7B in FP8 (delayed scaling, as this trainer's default). The asymptotes sit where Hopper's power
// limit holds cuBLAS's large GEMMs (dev/bench_gemm.cu measures them; gpu_check.sh writes what it finds).
// PLAN_GEMM_K0: a tile spends a fixed time outside its main loop (filling the pipeline, the epilogue writing
// C) worth K0 elements of K in BF16, so a GEMM reaches K / (K + K0) of the asymptote; FP8's main loop runs
// twice as fast per element of K and its epilogue takes as long, so its K0 is twice BF16's. Attention and
// HBM, not fitted: what FlashAttention-class kernels and streaming kernels reach on Hopper.
#define PLAN_GEMM_BF16_EFFICIENCY 0.67
#define PLAN_GEMM_FP8_EFFICIENCY 0.55
#define PLAN_GEMM_K0 256.0
#define PLAN_ATTENTION_EFFICIENCY 0.40
#define PLAN_HBM_EFFICIENCY 0.70
// cuBLAS's large Hopper GEMM tile (128 x 256 outputs a thread-block cluster), which quantizes the output.
#define PLAN_GEMM_TILE_M 128
#define PLAN_GEMM_TILE_N 256
// Kernel launches: with CUDA Graphs a kernel starts about 2 us after the one it depends on; a block's forward
// and backward launch some 30 kernels; the host's work between steps (the loss read back, the next batch, the
// log) about 1 ms.
#define PLAN_KERNEL_GAP_MS 0.002
#define PLAN_KERNELS_PER_LAYER 30
#define PLAN_STEP_HOST_MS 1.0
// NCCL's latency a step of a ring or tree: about 1 us over NVLink, 5 us over RDMA between nodes.
#define PLAN_NVLINK_LATENCY_MS 0.001
#define PLAN_NETWORK_LATENCY_MS 0.005
// The exact attention (gpu/attention.cuh's CUDA-core kernels, --attention exact): FP32 multiply and add as
// two instructions (33.5 of the H200's 67 TFLOP/s of FMA), q.k computed twice in the forward and six dot
// products per pair in the backward (about 1.3 times the counted FLOPs), half the instruction rate reached.
#define EXACT_ATTENTION_TFLOPS 12.0

// FLOPs per token as the field counts them (Kaplan et al.'s 6N with N the non-embedding parameters, and
// Megatron's and NeMo's accounting): 6 per weight of every matmul, the LM head included (it is a GEMM of
// Vp x C weights, tied or not) and the input embedding tables excluded (a lookup), plus the causal attention,
// QK^T and PV over the T/2 earlier positions on average: 2 x 2 x C x T/2 forward, 3 times that with the
// backward, 6 L C T. With grouped-query attention the scores are still NH query heads of C/NH each.
static inline double model_flops_per_token(const GPTConfig *cfg, int T) {
    double embeddings = (double)param_tensor_size(cfg, PT_TOKEN_EMBED) +
                        (double)param_tensor_size(cfg, PT_POS_EMBED) +
                        (double)param_tensor_size(cfg, PT_LM_HEAD);
    double matmul = (double)param_count(cfg) - embeddings + (double)cfg->padded_vocab_size * cfg->channels;
    return 6.0 * matmul + 6.0 * cfg->num_layers * cfg->channels * T;
}

// What the GPU computes: with --recompute the block linears and the attention run their forward twice.
static inline double hardware_flops_per_token(const GPTConfig *cfg, int T, int recompute) {
    double again = 2.0 * (double)linear_weights_per_layer(cfg) * cfg->num_layers +
                   2.0 * cfg->num_layers * cfg->channels * T;
    return model_flops_per_token(cfg, T) + (recompute ? again : 0.0);
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
    const GpuSpec *gpu;
    double gemm_bf16_tflops, gemm_fp8_tflops; // asymptotic: large K, whole waves
    double attention_tflops, hbm_gbps;
    double nvlink_gbps, nic_gbps;
    int gpus_per_node, nics_per_node, nodes;
    int measured; // the GEMM rates came from --plan_rates or the flags
} PlanRates;

// --plan_rates: lines "key value" (gemm_bf16_tflops, gemm_fp8_tflops, attention_tflops, hbm_gbps), '#'
// comments; a key it leaves out keeps the derived rate.
static inline void plan_rates_read(PlanRates *r, const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) fail("--plan_rates: cannot open %s", path);
    char line[256], key[64];
    double value;
    for (int n = 1; fgets(line, sizeof(line), f); n++) {
        if (line[0] == '#' || line[strspn(line, " \t\r\n")] == '\0') continue;
        if (sscanf(line, "%63s %lf", key, &value) != 2 || !(value > 0) || value > 1e6)
            fail("--plan_rates: %s line %d: expected 'key value' with a value in (0, 1e6]", path, n);
        double *slot = strcmp(key, "gemm_bf16_tflops") == 0   ? &r->gemm_bf16_tflops
                       : strcmp(key, "gemm_fp8_tflops") == 0  ? &r->gemm_fp8_tflops
                       : strcmp(key, "attention_tflops") == 0 ? &r->attention_tflops
                       : strcmp(key, "hbm_gbps") == 0         ? &r->hbm_gbps
                                                              : NULL;
        if (!slot)
            fail("--plan_rates: %s line %d: unknown key '%s' (gemm_bf16_tflops, gemm_fp8_tflops, "
                 "attention_tflops, hbm_gbps)",
                 path, n, key);
        *slot = value;
        r->measured |= slot == &r->gemm_bf16_tflops || slot == &r->gemm_fp8_tflops;
    }
    fclose(f);
}

static inline PlanRates plan_rates_from_options(const TrainOptions *opts, int world_size) {
    PlanRates r;
    memset(&r, 0, sizeof(r));
    r.gpu = &GPU_SPECS[opts->gpu];
    r.gemm_bf16_tflops = r.gpu->bf16_tflops * PLAN_GEMM_BF16_EFFICIENCY;
    r.gemm_fp8_tflops = r.gpu->fp8_tflops * PLAN_GEMM_FP8_EFFICIENCY;
    r.attention_tflops = r.gpu->bf16_tflops * PLAN_ATTENTION_EFFICIENCY;
    r.hbm_gbps = r.gpu->hbm_gbps * PLAN_HBM_EFFICIENCY;
    if (*opts->plan_rates) plan_rates_read(&r, opts->plan_rates);
    if (opts->plan_gemm_bf16_tflops) r.gemm_bf16_tflops = opts->plan_gemm_bf16_tflops, r.measured = 1;
    if (opts->plan_gemm_fp8_tflops) r.gemm_fp8_tflops = opts->plan_gemm_fp8_tflops, r.measured = 1;
    if (opts->plan_attention_tflops) r.attention_tflops = opts->plan_attention_tflops;
    if (opts->plan_hbm_gbps) r.hbm_gbps = opts->plan_hbm_gbps;
    r.nvlink_gbps = opts->intra_node_gbps ? opts->intra_node_gbps : r.gpu->nvlink_gbps;
    r.nic_gbps = opts->nic_gbps;
    r.gpus_per_node = opts->gpus_per_node;
    r.nics_per_node = opts->nics_per_node;
    r.nodes = opts->nodes ? opts->nodes : (world_size + r.gpus_per_node - 1) / r.gpus_per_node;
    return r;
}

// ----------------------------------------------------------------------------
// GEMMs by shape.

// Milliseconds of an (M x K) . (K x N) GEMM at an asymptotic rate: the tiles of its M x N output fill whole
// waves of the GPU's SMs only where they divide evenly (the last wave's idle SMs and each edge tile's unused
// rows and columns are lost), and each tile reaches K / (K + k0) of the rate.
static inline double gemm_ms(double M, double N, double K, double tflops, double k0, int sms) {
    double tiles = ceil(M / PLAN_GEMM_TILE_M) * ceil(N / PLAN_GEMM_TILE_N);
    double filled = M * N / (ceil(tiles / sms) * sms * PLAN_GEMM_TILE_M * PLAN_GEMM_TILE_N);
    return 2 * M * N * K / (tflops * 1e9 * filled * K / (K + k0));
}

// One micro-step of n tokens: each block linear (OC, IC) runs its forward (n, OC, IC), data gradient
// (n, IC, OC) and weight gradient (OC, IC, n), the forward twice with recompute; the LM head (Vp, C) the same
// three in BF16.
static inline double micro_step_gemm_ms(const GPTConfig *cfg, const PlanSettings *s, const PlanRates *r) {
    double n = (double)s->B * s->T, ms = 0;
    int fp8 = s->dtype == DTYPE_FLOAT8, sms = r->gpu->sms;
    double rate = fp8 ? r->gemm_fp8_tflops : r->gemm_bf16_tflops, k0 = fp8 ? 2 * PLAN_GEMM_K0 : PLAN_GEMM_K0;
    for (int lin = 0; lin < NUM_BLOCK_LINEARS; lin++) {
        double OC = linear_out_features(cfg, lin), IC = linear_in_features(cfg, lin);
        ms += gemm_ms(n, OC, IC, rate, k0, sms) * (s->recompute ? 2 : 1) + gemm_ms(n, IC, OC, rate, k0, sms) +
              gemm_ms(OC, IC, n, rate, k0, sms);
    }
    ms *= cfg->num_layers;
    double V = cfg->padded_vocab_size, C = cfg->channels, bf16 = r->gemm_bf16_tflops;
    return ms + gemm_ms(n, V, C, bf16, PLAN_GEMM_K0, sms) + gemm_ms(n, C, V, bf16, PLAN_GEMM_K0, sms) +
           gemm_ms(V, C, n, bf16, PLAN_GEMM_K0, sms);
}

// ----------------------------------------------------------------------------
// Collectives as NCCL runs them.

// Where a collective runs: its ranks, how many share a node, and the bus bandwidth a rank sees. Across nodes
// NCCL runs one channel a NIC, so the node's traffic leaves through every NIC its ranks reach at once: each
// GPU has nics_per_node / gpus_per_node of them, and collectives running side by side on the node (the shard
// positions' sums across groups) share them.
typedef struct {
    int ranks, ranks_per_node, nodes;
    double nics;      // NICs one such collective drives a node
    double bus_gbps;  // the slower of NVLink and the NICs, as nccl-tests' bus bandwidth reports it
    int side_by_side; // collectives of this kind running at once on a node
} CollectiveLink;

static inline CollectiveLink collective_link(const PlanRates *r, int ranks, int ranks_per_node,
                                             int side_by_side) {
    CollectiveLink l;
    l.ranks = ranks;
    l.ranks_per_node = ranks_per_node < ranks ? ranks_per_node : ranks;
    l.nodes = (ranks + l.ranks_per_node - 1) / l.ranks_per_node;
    l.side_by_side = side_by_side;
    double reach = (double)l.ranks_per_node * r->nics_per_node / r->gpus_per_node,
           share = (double)r->nics_per_node / side_by_side;
    l.nics = l.nodes > 1 ? (reach < share ? reach : share) : 0;
    double network = l.nics * r->nic_gbps;
    l.bus_gbps = l.nodes == 1                                       ? r->nvlink_gbps
                 : l.ranks_per_node > 1 && r->nvlink_gbps < network ? r->nvlink_gbps
                                                                    : network;
    return l;
}

// A run's three links: every rank; the shard group (consecutive ranks, a node's when it fits one); the
// replicas of a place across the groups (every rank of a node in one at once, each with its own).
static inline void plan_links(const PlanSettings *s, const PlanRates *r, CollectiveLink *world,
                              CollectiveLink *group, CollectiveLink *across) {
    int W = s->world_size, G = plan_shard_ranks(s), per_node = (W + r->nodes - 1) / r->nodes;
    *world = collective_link(r, W, per_node, 1);
    *group = collective_link(r, G, per_node, G < per_node ? per_node / G : 1);
    int stride_per_node = G < per_node ? per_node / G : 1; // ranks of one across-collective a node
    *across = collective_link(r, W / G, stride_per_node, per_node / stride_per_node);
}

enum { ALGO_RING, ALGO_TREE };

// Milliseconds of one collective of `bytes` payload: a ring's (n - 1) steps a pass (an all-reduce makes two),
// each at the latency of its slowest hop, or, for an all-reduce spanning nodes, NCCL's tree: up and down the
// chain inside a node and the binary tree across them. Both move the bus bytes at the link's bus bandwidth.
static inline double collective_ms(int kind, double bytes, const CollectiveLink *l, int *algo) {
    *algo = ALGO_RING;
    if (l->ranks <= 1) return 0;
    double transfer = bytes * wire_factor(kind, l->ranks) / l->bus_gbps / 1e6;
    double hop = l->nodes > 1 ? PLAN_NETWORK_LATENCY_MS : PLAN_NVLINK_LATENCY_MS;
    double ring = transfer + (kind == COLL_ALL_REDUCE ? 2 : 1) * (l->ranks - 1) * hop;
    if (kind != COLL_ALL_REDUCE || l->nodes == 1) return ring;
    double tree = transfer + 2 * (ceil(log2((double)l->nodes)) * PLAN_NETWORK_LATENCY_MS +
                                  (l->ranks_per_node - 1) * PLAN_NVLINK_LATENCY_MS);
    if (tree < ring) *algo = ALGO_TREE;
    return tree < ring ? tree : ring;
}

typedef struct {
    double payload[NUM_COLLECTIVE_KINDS];    // bytes of all the step's collectives of each kind
    double overlapped[NUM_COLLECTIVE_KINDS]; // of which beside the layers' compute (ZeRO-3's layers)
    double ms[NUM_COLLECTIVE_KINDS];         // their time on the wire
    double largest[NUM_COLLECTIVE_KINDS];    // the largest call's payload, whose link and algorithm follow
    CollectiveLink link[NUM_COLLECTIVE_KINDS];
    int algo[NUM_COLLECTIVE_KINDS];
    double serial_ms, overlapped_ms;
} StepCollectives;

// `calls` collectives of `bytes` each.
static inline void add_collectives(StepCollectives *c, int kind, double calls, double bytes, int overlapped,
                                   const CollectiveLink *link) {
    if (calls <= 0 || bytes <= 0) return;
    int algo;
    double ms = calls * collective_ms(kind, bytes, link, &algo);
    c->payload[kind] += calls * bytes;
    c->ms[kind] += ms;
    if (overlapped) c->overlapped[kind] += calls * bytes;
    *(overlapped ? &c->overlapped_ms : &c->serial_ms) += ms;
    if (bytes > c->largest[kind]) c->largest[kind] = bytes, c->link[kind] = *link, c->algo[kind] = algo;
}

// The collectives of one optimizer step (accum micro-steps) once the amax histories hold a step (the first
// step also max-reduces each tensor's amax alone), per process, as the calls in train_gpt_fp8.cu issue
// them. Payload: an all-reduce's or broadcast's buffer, an all-gather's output, a reduce-scatter's input.
static inline StepCollectives step_collectives(const GPTConfig *cfg, const PlanSettings *s, int accum,
                                               const PlanRates *r) {
    StepCollectives c;
    memset(&c, 0, sizeof(c));
    int W = s->world_size, G = plan_shard_ranks(s), L = cfg->num_layers, fp8 = s->dtype == DTYPE_FLOAT8;
    if (W == 1) return c;
    CollectiveLink world, group, across;
    plan_links(s, r, &world, &group, &across);
    size_t global = param_global_size(cfg), layer = param_layer_size(cfg), P = param_count(cfg);
    add_collectives(&c, COLL_ALL_REDUCE, 1, 8, 0, &world); // the loss and the votes to stop (run_control.h)
    if (s->zero_stage != 0)
        add_collectives(&c, COLL_ALL_REDUCE, 1, 8, 0, &group); // the squared gradient norm
    if (fp8) { // amaxes; the casts' saturated and flushed counts (two 8-byte counters per tensor)
        add_collectives(&c, COLL_ALL_REDUCE, 1, 4.0 * 3 * L * NUM_BLOCK_LINEARS, 0, &world);
        add_collectives(&c, COLL_ALL_REDUCE, 1, 16.0 * 3 * L * NUM_BLOCK_LINEARS, 0, &world);
    }
    // A unit's weights: bfloat16 all-gathers the BF16 copy; float8 the FP8 weights (1 byte an element),
    // and broadcasts the BF16 of the tensors it reads in BF16, all but the block linears' weights (GPT-2:
    // LayerNorms and biases; Llama: the two RMSNorm weights).
    double linear = (double)linear_weights_per_layer(cfg), small = (double)layer - linear;
    // the gradients' sums: FP32, or with --grad_reduce_dtype bfloat16 BF16 (its casts run on the
    // communication stream beside the compute, 6 bytes an element: not counted)
    double grad = s->grad_bf16 ? 2 : 4;
    if (s->zero_stage == 0) {
        add_collectives(&c, COLL_ALL_REDUCE, 1, grad * P, 0, &world);
        return c;
    }
    if (s->zero_stage == 1) {
        double unit = (double)shard_chunk(P, G) * G;
        add_collectives(&c, COLL_REDUCE_SCATTER, 1, grad * unit, 0, &group);
        add_collectives(&c, COLL_ALL_GATHER, 1, (fp8 ? 1 : 2) * unit, 0, &group);
        if (fp8) add_collectives(&c, COLL_BROADCAST, 1, 2 * ((double)global + L * small), 0, &group);
    } else {
        double g = (double)shard_chunk(global, G) * G, l = (double)shard_chunk(layer, G) * G;
        // the update gathers the global unit and layers 0 and 1, which stay in their slots; each forward
        // and backward gathers the others, or with --keep_gathered the first forward alone
        int updated = L > 1 ? 2 : 1, others = L > 2 ? L - 2 : 0;
        int gathered = s->keep_gathered ? others : accum * 2 * others;
        add_collectives(&c, COLL_ALL_GATHER, gathered, (fp8 ? 1 : 2) * l, 1, &group);
        if (fp8) add_collectives(&c, COLL_BROADCAST, gathered, 2 * small, 1, &group);
        add_collectives(&c, COLL_REDUCE_SCATTER, (double)accum * L, grad * l, 1, &group);
        add_collectives(&c, COLL_REDUCE_SCATTER, accum, grad * g, 0, &group);
        add_collectives(&c, COLL_ALL_GATHER, 1, 2 * g, 0, &group);
        add_collectives(&c, COLL_ALL_GATHER, updated, (fp8 ? 1 : 2) * l, 0, &group);
        if (fp8) add_collectives(&c, COLL_BROADCAST, updated, 2 * small, 0, &group);
    }
    if (W / G > 1) // shard groups: each shard summed across the groups, once a step
        add_collectives(&c, COLL_ALL_REDUCE, 1, grad * shard_size(cfg, s->zero_stage, G), 0, &across);
    return c;
}
// DRAM bytes of the memory-bound kernels of one micro-step of N tokens (BF16 activations, 2 bytes),
// per layer and token in the order the step runs them, then the logits and (per step) AdamW. Widths: fc's
// output FC (GPT-2 4C; Llama's up and gate, 2F), the MLP's hidden F (4C; F), the linears' inputs (7C;
// 3C + F), output gradients (9C; QKV + C + 2F + C) and biases (9C; none).
static inline double memory_bound_bytes(const GPTConfig *cfg, const PlanSettings *s, double tokens,
                                        size_t shard_params) {
    double C = cfg->channels, F = model_ffn_dim(cfg), FC = linear_out_features(cfg, LIN_MLP_UP), b = 2;
    double inputs = (double)linear_input_features_sum(cfg),
           output_grads = (double)linear_output_features_sum(cfg);
    double biases = (double)linear_bias_features_sum(cfg);
    // Llama's RoPE rotates the queries and keys of qkv in place (read, write), and their gradients back
    double rope = model_has_rotary(cfg)
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
        if (fp8_recipe_uses_history(s->fp8_recipe)) {
            forward -= 2 * C * b + activation - (FC - F) * b;
            backward -= activation_backward - F * b;
        }
    } else {
        // bfloat16: the weight-gradient GEMMs sum the bias gradients of the output gradients they read (no
        // pass); and, for GELU, cuBLASLt's epilogues (gpu/gemm.cuh; where the heuristic has them, which a GPU
        // has yet to show): fc's GEMM writes the GELU beside its output (F written, no GELU pass), fcproj's
        // data-gradient GEMM reads fc's output for the GELU's backward (FC read, no GELU backward pass).
        // SwiGLU, which combines two columns of fc's output, has no epilogue: its passes stay.
        if (model_parts(cfg).mlp == MLP_GELU) {
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
    double gemm_ms, attention_ms, memory_ms, overhead_ms, compute_ms;
    double comm_ms, overlapped_comm_ms, exposed_comm_ms, step_ms;
    double tokens_per_s;  // tokens of this process per second
    double mfu, hfu;      // model and hardware FLOPs (model_flops_per_token, hardware_flops_per_token) per
                          // second, percent of the GPU's BF16 peak
    double days_per_100b; // days the whole run (every process) takes for 100B tokens
    StepCollectives collectives;
} TimePlan;

// The attention's rate: the plan's attention (PlanSettings.fast_attention, memory_plan.h's
// plan_fast_attention) at the fused rate, or the exact kernels'.
static inline double plan_attention_tflops(const PlanSettings *s, const PlanRates *r) {
    return s->fast_attention ? r->attention_tflops : EXACT_ATTENTION_TFLOPS;
}

static inline TimePlan time_plan(const GPTConfig *cfg, const PlanSettings *s, int accum, const PlanRates *r) {
    TimePlan t;
    double N = (double)s->B * s->T * accum, C = cfg->channels, L = cfg->num_layers;
    t.gemm_ms = accum * micro_step_gemm_ms(cfg, s, r);
    // QK^T and PV of the NH query heads (C features; GQA shares keys and values, not FLOPs), halved by the
    // mask
    double attention_forward = 2 * 2 * (double)s->T * C / 2 * N * L;
    t.attention_ms = attention_forward * (3.5 + (s->recompute ? 1 : 0)) / plan_attention_tflops(s, r) / 1e9;
    size_t shard =
        s->zero_stage == 0 ? param_count(cfg) : shard_size(cfg, s->zero_stage, plan_shard_ranks(s));
    t.memory_ms = memory_bound_bytes(cfg, s, N, shard) / r->hbm_gbps / 1e6;
    t.overhead_ms = accum * L * PLAN_KERNELS_PER_LAYER * (s->recompute ? 4.0 / 3 : 1) * PLAN_KERNEL_GAP_MS +
                    PLAN_STEP_HOST_MS;
    t.compute_ms = t.gemm_ms + t.attention_ms + t.memory_ms + t.overhead_ms;
    t.collectives = step_collectives(cfg, s, accum, r);
    t.overlapped_comm_ms = t.collectives.overlapped_ms;
    t.comm_ms = t.collectives.serial_ms + t.overlapped_comm_ms;
    // The overlapped collectives hide behind the compute (counted whole, though the LM head and AdamW run
    // beside none of them: an upper bound on what hides); what exceeds it, and the rest, adds to the step.
    double hidden = t.overlapped_comm_ms < t.compute_ms ? t.overlapped_comm_ms : t.compute_ms;
    t.exposed_comm_ms = t.comm_ms - hidden;
    t.step_ms = t.compute_ms + t.exposed_comm_ms;
    t.tokens_per_s = N / (t.step_ms / 1e3);
    double peak = r->gpu->bf16_tflops * 1e12;
    t.mfu = 100 * model_flops_per_token(cfg, s->T) * t.tokens_per_s / peak;
    t.hfu = 100 * hardware_flops_per_token(cfg, s->T, s->recompute) * t.tokens_per_s / peak;
    t.days_per_100b = 1e11 / (t.tokens_per_s * s->world_size) / 86400;
    return t;
}

static inline void time_plan_print_link(const CollectiveLink *l, const PlanRates *r) {
    if (l->nodes == 1) {
        printf("%d rank(s) in a node, NVLink %.0f GB/s", l->ranks, r->nvlink_gbps);
        return;
    }
    printf("%d rank(s) on %d nodes, %d a node: ", l->ranks, l->nodes, l->ranks_per_node);
    if (l->ranks_per_node > 1) printf("NVLink %.0f GB/s inside, ", r->nvlink_gbps);
    printf("%.3g NIC(s) x %.0f GB/s across", l->nics, r->nic_gbps);
    if (l->side_by_side > 1)
        printf(" (%d such collectives share the node's %d NICs)", l->side_by_side, r->nics_per_node);
    printf(", bus %.0f GB/s", l->bus_gbps);
}

static inline void time_plan_print(const GPTConfig *cfg, const PlanSettings *s, int accum,
                                   const PlanRates *r) {
    TimePlan t = time_plan(cfg, s, accum, r);
    printf("time plan per optimizer step and process (an estimate from data-sheet rates and calibrated "
           "efficiencies, not a measurement: docs/plan-vs-published.md):\n");
    printf("  %d micro-step(s) of B=%d x T=%d; %d process(es) on %d node(s) of %d GPUs (%s), %d NICs x %.0f "
           "GB/s a node\n",
           accum, s->B, s->T, s->world_size, r->nodes, r->gpus_per_node, r->gpu->name, r->nics_per_node,
           r->nic_gbps);
    printf(
        "  GEMMs            %9.2f ms  by shape; block linears in %s at up to %.0f TFLOP/s, LM head in BF16 "
        "at up to %.0f (%s)\n",
        t.gemm_ms, dtype_name(s->dtype), s->dtype == DTYPE_FLOAT8 ? r->gemm_fp8_tflops : r->gemm_bf16_tflops,
        r->gemm_bf16_tflops, r->measured ? "measured rates" : "data sheet x calibrated efficiency");
    printf("  attention        %9.2f ms  at %.0f TFLOP/s (%s)\n", t.attention_ms, plan_attention_tflops(s, r),
           s->fast_attention ? "cuDNN's fused attention" : "the exact kernels");
    printf("  memory-bound     %9.2f ms  at %.0f GB/s\n", t.memory_ms, r->hbm_gbps);
    printf("  launch and host  %9.2f ms\n", t.overhead_ms);
    for (int k = 0; k < NUM_COLLECTIVE_KINDS; k++) {
        if (t.collectives.payload[k] <= 0) continue;
        printf("  %-16s %9.2f ms  %.0f bytes payload (%.0f beside the layers' compute); the largest %s over ",
               COLLECTIVE_NAMES[k], t.collectives.ms[k], t.collectives.payload[k],
               t.collectives.overlapped[k], t.collectives.algo[k] == ALGO_TREE ? "a tree" : "a ring");
        time_plan_print_link(&t.collectives.link[k], r);
        printf("\n");
    }
    if (s->world_size > 1)
        printf("  communication    %9.2f ms  on the wire, %.2f ms of it hidden behind compute\n", t.comm_ms,
               t.comm_ms - t.exposed_comm_ms);
    printf("  step             %9.2f ms  = compute %.2f + exposed communication %.2f (%.0f%% of the step); "
           "%.0f tokens/s per process, %.0f in all; %.1f days per 100B tokens\n",
           t.step_ms, t.compute_ms, t.exposed_comm_ms, 100 * t.exposed_comm_ms / t.step_ms, t.tokens_per_s,
           t.tokens_per_s * s->world_size, t.days_per_100b);
    printf("  MFU %.1f%% of the %s's BF16 peak (model FLOPs: 6 x (parameters - input embeddings) + 6 L C T, "
           "%.3g a token); hardware FLOPs %.1f%% (%.3g a token, recompute included)\n",
           t.mfu, r->gpu->name, model_flops_per_token(cfg, s->T), t.hfu,
           hardware_flops_per_token(cfg, s->T, s->recompute));
    printf("plan_step_ms %.3f plan_tokens_per_s %.1f plan_mfu %.2f", t.step_ms, t.tokens_per_s, t.mfu);
    for (int k = 0; k < NUM_COLLECTIVE_KINDS; k++)
        printf(" plan_%s_bytes %.0f", COLLECTIVE_KEYS[k], t.collectives.payload[k]);
    printf("\n");
}

#endif // TIME_PLAN_H

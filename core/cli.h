// core/cli.h: the command line shared by both trainers. One table lists every flag with its type, default,
// range and help; parsing, --help and validation all read that table, so `train` and `train_cpu`
// take exactly the same flags and reject bad values with the same one-line errors.
#ifndef CLI_H
#define CLI_H

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention_choice.h"
#include "common.h"
#include "fp8_scaling.h"
#include "gpt_model.h"

typedef enum { DTYPE_FLOAT32 = 0, DTYPE_BFLOAT16 = 1, DTYPE_FLOAT8 = 2 } Dtype;
typedef enum { LR_COSINE = 0, LR_LINEAR = 1, LR_CONSTANT = 2 } LrSchedule;
// --arch: auto takes the preset's architecture (GPT-2 for the tiny presets, which have both); then the
// architectures of gpt_model.h's ARCH_TABLE by name, in its order: choice i > 0 is architecture i - 1.
#define ARCH_CHOICE_NAME(id, name, ...) "|" name
#define ARCH_CHOICES "auto" ARCH_TABLE(ARCH_CHOICE_NAME)
#define ARCH_CHOICE_AUTO 0
// --fp8_accumulation: how the CPU trainer's FP8 GEMMs sum (fp8_scaling.h's model of Hopper's tensor cores).
typedef enum { FP8_ACCUMULATION_FP32 = 0, FP8_ACCUMULATION_HOPPER = 1 } Fp8Accumulation;
// How a GPU of compute capability `major` sums its FP8 GEMMs, for the CPU reference a check compares it with:
// Hopper's FP8 MMA keeps 13 fraction bits (fp8_scaling.h's model; Ada's, sm_89, is taken to be the same);
// Blackwell's (sm_100 and later: tcgen05's MMA) accumulates in FP32, as the emulated B200 does. The trainer
// prints it on its versions line, and the checks (test_gpu.sh, first_contact) take it from there.
static inline Fp8Accumulation fp8_accumulation_of_device(int major) {
    return major >= 10 ? FP8_ACCUMULATION_FP32 : FP8_ACCUMULATION_HOPPER;
}
static inline const char *fp8_accumulation_name(Fp8Accumulation a) {
    return a == FP8_ACCUMULATION_HOPPER ? "hopper" : "fp32"; // --fp8_accumulation's values
}
// --grad_reduce_dtype: the type the gradients are summed over the processes in.
typedef enum { GRAD_REDUCE_FLOAT32 = 0, GRAD_REDUCE_BFLOAT16 = 1 } GradReduceDtype;
// --fp8_fast_accum: which FP8 GEMMs accumulate without promotion (per-tensor recipes).
typedef enum { FAST_ACCUM_NONE = 0, FAST_ACCUM_FORWARD = 1, FAST_ACCUM_ALL = 2 } FastAccum;
// Whether the GEMMs named by `gemms` (FAST_ACCUM_FORWARD: the forward's, FAST_ACCUM_ALL: the gradients')
// accumulate fast: --fp8_fast_accum (`setting`) reaches them and the recipe's GEMMs have fast accumulation.
static inline int fp8_gemm_fast_accum(int recipe, int setting, FastAccum gemms) {
    return fp8_recipe(recipe).fast_accum && setting >= (int)gemms;
}
// --stop_signal: the signal that, besides SIGTERM, SIGINT and SIGHUP, stops a run with a checkpoint
// (run_control.h).
typedef enum { STOP_SIGNAL_USR1 = 0, STOP_SIGNAL_USR2 = 1, STOP_SIGNAL_NONE = 2 } StopSignalChoice;

#define OPTION_STRING_LEN 512
// --gpu: the GPUs time_plan.h's GPU_SPECS describes, in its order.
#define GPU_CHOICE_NAMES "h200|h100-sxm|h100-pcie|b200|a100"
#define GUARD_MAX_WINDOW                                                                                     \
    10000 // --guard_window's largest value: the GPU trainer keeps that much room on the device

typedef struct {
    char train_data[OPTION_STRING_LEN];
    char val_data[OPTION_STRING_LEN];
    char eval_data[OPTION_STRING_LEN];
    char tokenizer[OPTION_STRING_LEN];
    char output_dir[OPTION_STRING_LEN];
    char log_file[OPTION_STRING_LEN];
    char init_from[OPTION_STRING_LEN];
    char model_size[OPTION_STRING_LEN];
    char debug_state[OPTION_STRING_LEN];
    char plan_rates[OPTION_STRING_LEN];
    int arch; // --arch's choice: ARCH_CHOICE_AUTO, or 1 + a ModelArch
    int layers, channels, heads, kv_heads, ffn_dim, vocab, max_seq_len;
    float rope_theta;
    int dtype;                                                     // Dtype
    int fp8_recipe;                                                // Fp8Recipe
    int amax_history, fp8_margin, fp8_pow2_scales, fp8_fast_accum; // fp8_fast_accum: FastAccum
    int fp8_accumulation;                                          // Fp8Accumulation
    int batch_size, seq_len, total_batch_size;
    int steps;
    float lr;
    int lr_schedule; // LrSchedule
    int warmup_steps;
    float final_lr_frac;
    float beta1, beta2, eps, weight_decay, grad_clip;
    int eval_every;
    int val_every, val_batches, sample_every, sample_len, ckpt_every, keep_checkpoints, resume, overwrite;
    int seed, shuffle;
    int cuda_graph;
    int attention; // AttentionChoice
    int bf16_check_every, bf16_check_stop;
    float bf16_check_tolerance;
    int fp8_stats_every;
    float skip_loss_z, skip_norm_z;
    int guard_window;
    int inject_nan_step, inject_stall_rank, inject_signal_step, inject_signal_rank;
    int time_limit_s, stop_signal, max_consecutive_skips; // stop_signal: StopSignalChoice
    float price_kwh, pue, price_gpu_hour;
    int eval_only;
    int zero_stage, shard_group_size, keep_gathered, recompute, dry_run, world_size, nccl_timeout_s;
    int grad_reduce_dtype; // GradReduceDtype
    float gpu_memory_gb;
    int gpu; // GPU_CHOICE_NAMES, time_plan.h's GPU_SPECS
    int nodes, gpus_per_node, nics_per_node;
    float intra_node_gbps, nic_gbps;
    float plan_gemm_bf16_tflops, plan_gemm_fp8_tflops, plan_attention_tflops, plan_hbm_gbps;
} TrainOptions;

typedef enum { OPT_INT, OPT_FLOAT, OPT_STRING, OPT_CHOICE } OptionKind;

typedef struct {
    const char *name;
    OptionKind kind;
    size_t offset;
    const char *default_value;
    double min, max;     // OPT_INT / OPT_FLOAT: inclusive range
    const char *choices; // OPT_CHOICE: '|'-separated; the value stored is the index
    const char *help;
} OptionSpec;

#define OPT_AT(field) offsetof(TrainOptions, field)

static const OptionSpec OPTION_SPECS[] = {
    {"train_data", OPT_STRING, OPT_AT(train_data), "data/tinyshakespeare_train_*.bin", 0, 0, NULL,
     "training token shards (glob)"},
    {"val_data", OPT_STRING, OPT_AT(val_data), "data/tinyshakespeare_val_*.bin", 0, 0, NULL,
     "validation token shards (glob); empty disables validation"},
    {"tokenizer", OPT_STRING, OPT_AT(tokenizer), "", 0, 0, NULL, "llm.c tokenizer file to decode samples"},
    {"output_dir", OPT_STRING, OPT_AT(output_dir), "out", 0, 0, NULL, "where checkpoints are written"},
    {"log_file", OPT_STRING, OPT_AT(log_file), "", 0, 0, NULL, "JSON-lines log (empty: none)"},
    {"init_from", OPT_STRING, OPT_AT(init_from), "", 0, 0, NULL,
     "llm.c model file to start from (empty: random init)"},
    {"model_size", OPT_STRING, OPT_AT(model_size), "124M", 0, 0, NULL, "preset: " MODEL_PRESET_NAMES},
    {"debug_state", OPT_STRING, OPT_AT(debug_state), "", 0, 0, NULL,
     "write inputs, logits, loss and gradients of step 1 to this file (GPU test oracle)"},
    {"arch", OPT_CHOICE, OPT_AT(arch), "auto", 0, 0, ARCH_CHOICES,
     "architecture (auto: the preset's; d2, d4 and d6 are GPT-2 unless llama is given; 7B, 13B and 70B are "
     "LLaMA-2's unless gpt2 is given)"},
    {"layers", OPT_INT, OPT_AT(layers), "0", 0, MODEL_MAX_LAYERS, NULL,
     "override the preset's layers (0: preset)"},
    {"channels", OPT_INT, OPT_AT(channels), "0", 0, MODEL_MAX_CHANNELS, NULL,
     "override the preset's channels"},
    {"heads", OPT_INT, OPT_AT(heads), "0", 0, MODEL_MAX_HEADS, NULL, "override the preset's heads"},
    {"kv_heads", OPT_INT, OPT_AT(kv_heads), "0", 0, MODEL_MAX_HEADS, NULL,
     "llama: key/value heads of grouped-query attention, dividing --heads (0: the preset's, or --heads "
     "when that is given)"},
    {"ffn_dim", OPT_INT, OPT_AT(ffn_dim), "0", 0, 4 * MODEL_MAX_CHANNELS, NULL,
     "llama: SwiGLU hidden features (0: the preset's, or with --channels 8C/3 rounded up to 64)"},
    {"rope_theta", OPT_FLOAT, OPT_AT(rope_theta), "0", 0, 1e9, NULL,
     "llama: base of the rotary embeddings' wavelengths (0: the preset's)"},
    {"vocab", OPT_INT, OPT_AT(vocab), "0", 0, MODEL_MAX_VOCAB, NULL,
     "vocabulary size of the data (0: the preset's tokenizer: 50257 GPT-2, 32000 llama2, 128256 llama3)"},
    {"max_seq_len", OPT_INT, OPT_AT(max_seq_len), "0", 0, MODEL_MAX_SEQ_LEN, NULL,
     "override the preset's maxT"},
    {"dtype", OPT_CHOICE, OPT_AT(dtype), "float8", 0, 0, "float32|bfloat16|float8", "matmul precision"},
    {"fp8_recipe", OPT_CHOICE, OPT_AT(fp8_recipe), "delayed", 0, 0, FP8_RECIPE_CHOICES,
     "FP8 scaling: per tensor (delayed, current) or per block (blockwise 1x128/128x128, mxfp8 1x32 E8M0)"},
    {"amax_history", OPT_INT, OPT_AT(amax_history), "16", 1, 1024, NULL, "delayed scaling window (steps)"},
    {"fp8_margin", OPT_INT, OPT_AT(fp8_margin), "0", 0, 16, NULL, "FP8 scale headroom: scale /= 2^margin"},
    {"fp8_pow2_scales", OPT_INT, OPT_AT(fp8_pow2_scales), "0", 0, 1, NULL,
     "blockwise: round each block's scale down to a power of two"},
    {"fp8_fast_accum", OPT_INT, OPT_AT(fp8_fast_accum), "1", 0, 2, NULL,
     "per-tensor recipes: FP8 GEMMs without cuBLASLt's periodic promotion to FP32 (faster, less exact): 1 "
     "the "
     "forward's, 2 the gradients' too (for studies: it costs the gradients precision), 0 none (the GPU, and "
     "the CPU trainer with --fp8_accumulation hopper)"},
    {"fp8_accumulation", OPT_CHOICE, OPT_AT(fp8_accumulation), "fp32", 0, 0, "fp32|hopper",
     "CPU trainer: how its FP8 GEMMs sum: fp32, or hopper, as Hopper's tensor cores do (13 fraction bits, "
     "truncated, every 32 products; promoted to FP32 every 128 unless --fp8_fast_accum)"},
    {"batch_size", OPT_INT, OPT_AT(batch_size), "4", 1, 1 << 20, NULL, "micro-batch size B per process"},
    {"seq_len", OPT_INT, OPT_AT(seq_len), "0", 0, 1 << 20, NULL, "sequence length T (0: the model's maxT)"},
    {"total_batch_size", OPT_INT, OPT_AT(total_batch_size), "0", 0, 1 << 30, NULL,
     "tokens per optimizer step; a multiple of B*T (0: B*T, no accumulation)"},
    {"steps", OPT_INT, OPT_AT(steps), "1000", 1, 1 << 30, NULL, "optimizer steps"},
    {"lr", OPT_FLOAT, OPT_AT(lr), "3e-4", 0, 10, NULL, "peak learning rate"},
    {"lr_schedule", OPT_CHOICE, OPT_AT(lr_schedule), "cosine", 0, 0, "cosine|linear|constant",
     "decay after warmup"},
    {"warmup_steps", OPT_INT, OPT_AT(warmup_steps), "0", 0, 1 << 30, NULL, "linear warmup steps"},
    {"final_lr_frac", OPT_FLOAT, OPT_AT(final_lr_frac), "0.0", 0, 1, NULL, "final lr as a fraction of --lr"},
    {"beta1", OPT_FLOAT, OPT_AT(beta1), "0.9", 0, 0.999999, NULL, "AdamW beta1"},
    {"beta2", OPT_FLOAT, OPT_AT(beta2), "0.95", 0, 0.999999, NULL, "AdamW beta2"},
    {"eps", OPT_FLOAT, OPT_AT(eps), "1e-8", 1e-30, 1, NULL, "AdamW epsilon"},
    {"weight_decay", OPT_FLOAT, OPT_AT(weight_decay), "0.1", 0, 10, NULL, "AdamW decay of 2-D weights"},
    {"grad_clip", OPT_FLOAT, OPT_AT(grad_clip), "1.0", 0, 1e6, NULL, "global-norm clip (0 disables)"},
    {"val_every", OPT_INT, OPT_AT(val_every), "100", 0, 1 << 30, NULL,
     "steps between val losses (0: end only)"},
    {"val_batches", OPT_INT, OPT_AT(val_batches), "20", 1, 1 << 20, NULL, "batches per validation"},
    {"eval_data", OPT_STRING, OPT_AT(eval_data), "", 0, 0, NULL,
     "multiple-choice eval file in llm.c's format (HellaSwag: scripts/prepare_eval.py), scored every "
     "--eval_every steps and at the end (empty: none)"},
    {"eval_every", OPT_INT, OPT_AT(eval_every), "0", 0, 1 << 30, NULL,
     "steps between eval accuracies of --eval_data (0: end only)"},
    {"sample_every", OPT_INT, OPT_AT(sample_every), "0", 0, 1 << 30, NULL,
     "steps between samples (0: never)"},
    {"sample_len", OPT_INT, OPT_AT(sample_len), "64", 1, 1 << 20, NULL, "tokens per sample"},
    {"ckpt_every", OPT_INT, OPT_AT(ckpt_every), "0", 0, 1 << 30, NULL,
     "steps between checkpoints (0: only at the end)"},
    {"keep_checkpoints", OPT_INT, OPT_AT(keep_checkpoints), "0", 0, 1 << 20, NULL,
     "keep the N newest complete checkpoints in --output_dir, delete older ones (0: keep all)"},
    {"resume", OPT_INT, OPT_AT(resume), "0", 0, 1, NULL,
     "1: continue from the latest checkpoint in --output_dir"},
    {"overwrite", OPT_INT, OPT_AT(overwrite), "0", 0, 1, NULL,
     "1: start a fresh run in an --output_dir that holds another run's checkpoint (refused otherwise)"},
    {"seed", OPT_INT, OPT_AT(seed), "1337", 0, 2147483647, NULL, "initialisation and shuffling seed"},
    {"shuffle", OPT_INT, OPT_AT(shuffle), "0", 0, 1, NULL, "1: shuffle batch order within shards each epoch"},
    {"cuda_graph", OPT_INT, OPT_AT(cuda_graph), "1", 0, 1, NULL,
     "GPU trainer: capture the step in a CUDA Graph"},
    {"attention", OPT_CHOICE, OPT_AT(attention), "auto", 0, 0, "auto|fast|exact",
     "GPU trainer: fast (cuDNN's fused attention), exact (the kernels that match the CPU), auto (fast where "
     "cuDNN is built in and runs the shape)"},
    {"bf16_check_every", OPT_INT, OPT_AT(bf16_check_every), "0", 0, 1 << 30, NULL,
     "every N steps also evaluate the batch in bfloat16 and log the loss difference (0: never)"},
    {"bf16_check_tolerance", OPT_FLOAT, OPT_AT(bf16_check_tolerance), "0", 0, 100, NULL,
     "warn when |loss - bfloat16 loss| exceeds this (0: never)"},
    {"bf16_check_stop", OPT_INT, OPT_AT(bf16_check_stop), "0", 0, 1, NULL,
     "1: stop the run (exit 1) instead of warning"},
    {"fp8_stats_every", OPT_INT, OPT_AT(fp8_stats_every), "0", 0, 1 << 30, NULL,
     "every N steps log amax, scale, saturated and flushed counts of each FP8 tensor (0: never)"},
    {"skip_loss_z", OPT_FLOAT, OPT_AT(skip_loss_z), "0", 0, 1000, NULL,
     "skip a step whose loss is this many std devs above the recent mean (0: off)"},
    {"skip_norm_z", OPT_FLOAT, OPT_AT(skip_norm_z), "0", 0, 1000, NULL,
     "skip a step whose gradient norm is this many std devs above the recent mean (0: off)"},
    {"guard_window", OPT_INT, OPT_AT(guard_window), "50", 8, GUARD_MAX_WINDOW, NULL,
     "steps in the moving window of the loss and norm guards"},
    {"inject_nan_step", OPT_INT, OPT_AT(inject_nan_step), "0", 0, 1 << 30, NULL,
     "test: make the gradient of this step (1-based) NaN (0: never)"},
    {"inject_stall_rank", OPT_INT, OPT_AT(inject_stall_rank), "-1", -1, 1 << 20, NULL,
     "test: this rank stops answering before its first step, as a hung process would (-1: none)"},
    {"inject_signal_step", OPT_INT, OPT_AT(inject_signal_step), "0", 0, 1 << 30, NULL,
     "test: rank --inject_signal_rank sends itself SIGTERM as this step (1-based) starts (0: never)"},
    {"inject_signal_rank", OPT_INT, OPT_AT(inject_signal_rank), "0", 0, 1 << 20, NULL,
     "test: the rank --inject_signal_step signals"},
    {"time_limit_s", OPT_INT, OPT_AT(time_limit_s), "0", 0, 1 << 30, NULL,
     "stop with a checkpoint (exit 75) before this many seconds since the start have passed, leaving room "
     "for two steps and a checkpoint as long as the longest so far (0: no limit)"},
    {"stop_signal", OPT_CHOICE, OPT_AT(stop_signal), "usr1", 0, 0, "usr1|usr2|none",
     "the signal that, as SIGTERM, SIGINT and SIGHUP do, stops the run after its step with a checkpoint "
     "(exit 75): Slurm's early warning (#SBATCH --signal=USR1@180)"},
    {"max_consecutive_skips", OPT_INT, OPT_AT(max_consecutive_skips), "8", 1, 1 << 30, NULL,
     "end the run (exit 76, after a checkpoint) when the guards skip this many steps in a row"},
    {"price_kwh", OPT_FLOAT, OPT_AT(price_kwh), "0", 0, 1e6, NULL,
     "electricity price per kWh for the cost (the end-of-run energy line, --dry_run's cost plan)"},
    {"pue", OPT_FLOAT, OPT_AT(pue), "1.0", 1, 10, NULL,
     "power usage effectiveness of the data centre (facility energy / GPU energy)"},
    {"price_gpu_hour", OPT_FLOAT, OPT_AT(price_gpu_hour), "0", 0, 1e6, NULL,
     "rental price of one GPU for an hour: --dry_run's cost plan, the GPU trainer's end-of-run rental line"},
    {"eval_only", OPT_INT, OPT_AT(eval_only), "0", 0, 1, NULL,
     "1: report the validation loss of --init_from with BF16 weights and with FP8 weights (with --val_data), "
     "its --eval_data accuracy (in --dtype; float8 with --val_data), then exit"},
    {"zero_stage", OPT_INT, OPT_AT(zero_stage), "0", 0, 3, NULL,
     "ZeRO sharding over the processes: 0 none, 1 optimizer state, 3 also parameters and gradients"},
    {"shard_group_size", OPT_INT, OPT_AT(shard_group_size), "0", 0, 1 << 20, NULL,
     "ZeRO-1/3 shard within groups of this many consecutive processes (a node), replicated across groups, "
     "gradients summed across groups once a step (0: one group of all)"},
    {"keep_gathered", OPT_INT, OPT_AT(keep_gathered), "0", 0, 1, NULL,
     "ZeRO-3, 1: keep each layer's gathered weights from the first micro-step to the update (one gather a "
     "step instead of two a micro-step; the memory of every layer's weight copies)"},
    {"grad_reduce_dtype", OPT_CHOICE, OPT_AT(grad_reduce_dtype), "float32", 0, 0, "float32|bfloat16",
     "type the gradients are summed over the processes in (NCCL, MPI): bfloat16 halves those bytes, each "
     "rank's gradient and running sum rounded to BF16 (docs/grad-reduce-bf16.md); the sums over micro-steps "
     "stay FP32"},
    {"recompute", OPT_INT, OPT_AT(recompute), "0", 0, 1, NULL,
     "1: keep only each layer's input for the backward and recompute the rest (less memory)"},
    {"dry_run", OPT_INT, OPT_AT(dry_run), "0", 0, 1, NULL,
     "1: print the per-process memory plan and whether it fits --gpu_memory_gb, allocate nothing, exit"},
    {"world_size", OPT_INT, OPT_AT(world_size), "0", 0, 1 << 20, NULL,
     "processes the --dry_run plans for (0: the processes of this run)"},
    {"nccl_timeout_s", OPT_INT, OPT_AT(nccl_timeout_s), "300", 1, 86400, NULL,
     "seconds a wait on the other processes (NCCL, MPI) may last before the run aborts with an error"},
    {"gpu", OPT_CHOICE, OPT_AT(gpu), "h200", 0, 0, GPU_CHOICE_NAMES,
     "the GPU --dry_run plans for: its memory, data-sheet peaks and bandwidths (time_plan.h)"},
    {"gpu_memory_gb", OPT_FLOAT, OPT_AT(gpu_memory_gb), "0", 0, 1e6, NULL,
     "memory of one GPU in GB (10^9 bytes) that --dry_run checks the plan against (0: the --gpu's, H200 "
     "141)"},
    // --dry_run's time plan (time_plan.h): the cluster, and measured rates in place of the derived ones
    {"nodes", OPT_INT, OPT_AT(nodes), "0", 0, 1 << 20, NULL,
     "nodes the --dry_run time plan spreads the processes over (0: one per --gpus_per_node processes)"},
    {"gpus_per_node", OPT_INT, OPT_AT(gpus_per_node), "8", 1, 1024, NULL,
     "--dry_run: GPUs (processes) a node (HGX/DGX: 8)"},
    {"nics_per_node", OPT_INT, OPT_AT(nics_per_node), "8", 1, 1024, NULL,
     "--dry_run: network cards a node that NCCL spreads collectives between nodes over (DGX H100/H200: 8)"},
    {"nic_gbps", OPT_FLOAT, OPT_AT(nic_gbps), "46", 0.001, 1e6, NULL,
     "--dry_run: GB/s (gigabytes) one NIC moves for NCCL (400 Gb/s InfiniBand or RoCE: 46, NCCL's "
     "maintainers quote 46-48)"},
    {"intra_node_gbps", OPT_FLOAT, OPT_AT(intra_node_gbps), "0", 0, 1e6, NULL,
     "--dry_run: NCCL bus bandwidth inside a node, GB/s per GPU (0: the --gpu's, NVLink 4: 360)"},
    {"plan_rates", OPT_STRING, OPT_AT(plan_rates), "", 0, 0, NULL,
     "--dry_run: file of measured rates ('gemm_bf16_tflops 690' lines: scripts/gpu_check.sh writes it)"},
    {"plan_gemm_bf16_tflops", OPT_FLOAT, OPT_AT(plan_gemm_bf16_tflops), "0", 0, 1e6, NULL,
     "--dry_run: achieved BF16 GEMM TFLOP/s of large GEMMs (0: 67% of the --gpu's peak, or --plan_rates')"},
    {"plan_gemm_fp8_tflops", OPT_FLOAT, OPT_AT(plan_gemm_fp8_tflops), "0", 0, 1e6, NULL,
     "--dry_run: achieved FP8 GEMM TFLOP/s of large GEMMs (0: 55% of the --gpu's peak, or --plan_rates')"},
    {"plan_attention_tflops", OPT_FLOAT, OPT_AT(plan_attention_tflops), "0", 0, 1e6, NULL,
     "--dry_run: achieved fused-attention TFLOP/s, forward and backward (0: 40% of the --gpu's BF16 peak)"},
    {"plan_hbm_gbps", OPT_FLOAT, OPT_AT(plan_hbm_gbps), "0", 0, 1e6, NULL,
     "--dry_run: achieved GB/s of the memory-bound kernels (0: 70% of the --gpu's HBM bandwidth)"},
};
#define NUM_OPTION_SPECS ((int)(sizeof(OPTION_SPECS) / sizeof(OPTION_SPECS[0])))

// Index of `value` in a '|'-separated list, or -1.
static inline int choice_index(const char *choices, const char *value) {
    size_t len = strlen(value);
    int index = 0;
    for (const char *p = choices; *p; index++) {
        const char *end = strchr(p, '|');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n == len && strncmp(p, value, n) == 0) return index;
        if (!end) break;
        p = end + 1;
    }
    return -1;
}

static inline void option_set(TrainOptions *opts, const OptionSpec *spec, const char *value) {
    char *field = (char *)opts + spec->offset;
    char *end = NULL;
    switch (spec->kind) {
    case OPT_STRING:
        if (strlen(value) >= OPTION_STRING_LEN)
            fail("--%s: value longer than %d characters", spec->name, OPTION_STRING_LEN - 1);
        strcpy(field, value);
        return;
    case OPT_CHOICE: {
        int index = choice_index(spec->choices, value);
        if (index < 0) fail("--%s: '%s' is not one of %s", spec->name, value, spec->choices);
        *(int *)field = index;
        return;
    }
    case OPT_INT: {
        errno = 0;
        long v = strtol(value, &end, 10);
        if (*value == '\0' || *end != '\0' || errno) fail("--%s: '%s' is not an integer", spec->name, value);
        if (v < spec->min || v > spec->max)
            fail("--%s: %ld is out of range [%.0f, %.0f]", spec->name, v, spec->min, spec->max);
        *(int *)field = (int)v;
        return;
    }
    case OPT_FLOAT: {
        errno = 0;
        double v = strtod(value, &end);
        if (*value == '\0' || *end != '\0' || v != v) fail("--%s: '%s' is not a number", spec->name, value);
        // a nonzero value below FLT_MIN (1.2e-38), or below a double's range, would become 0 or lose its
        // precision as a float
        if ((v != 0.0 && fabs(v) < 1.17549435e-38) || (errno == ERANGE && v == 0.0))
            fail("--%s: %s is too small for a float (its magnitude must be 0 or at least 1.2e-38)",
                 spec->name, value);
        if (v < spec->min || v > spec->max || errno == ERANGE)
            fail("--%s: %s is out of range [%g, %g]", spec->name, value, spec->min, spec->max);
        *(float *)field = (float)v;
        return;
    }
    }
}

static inline void print_usage(const char *program) {
    printf("usage: %s [--flag value | --flag=value]...\n\n", program);
    for (int i = 0; i < NUM_OPTION_SPECS; i++) {
        const OptionSpec *s = &OPTION_SPECS[i];
        char name[64];
        snprintf(name, sizeof(name), "--%s", s->name);
        printf("  %-20s %s", name, s->help);
        if (s->kind == OPT_CHOICE) printf(" (%s)", s->choices);
        printf(" [default: %s", *s->default_value ? s->default_value : "\"\"");
        if (s->kind == OPT_INT) printf("; %.0f..%.0f", s->min, s->max);
        if (s->kind == OPT_FLOAT) printf("; %g..%g", s->min, s->max);
        printf("]\n");
    }
}

// What a bare invocation prints: the defaults describe a 124M model, not a first try.
static inline void print_short_usage(const char *program) {
    printf("usage: %s --flag value ... (every flag and its range: %s --help)\n"
           "  a small first run (byte-level tinyshakespeare from scripts/prepare_data.py --tokenizer byte):\n"
           "    %s --model_size d2 --vocab 256 --seq_len 128 --batch_size 8 --steps 100 --dtype float8 \\\n"
           "        --train_data 'data/tinyshakespeare_train_*.bin' --val_data "
           "'data/tinyshakespeare_val_*.bin'\n"
           "  make demo runs and compares float32, bfloat16 and float8 on the CPU.\n",
           program, program, program);
}

// Parses argv into opts (defaults first, then flags in order). --help prints the table and exits 0; no
// arguments at all print a short usage and exit 2. A flag given twice is refused: which one was meant?
static inline void options_defaults(TrainOptions *opts) {
    memset(opts, 0, sizeof(*opts));
    for (int i = 0; i < NUM_OPTION_SPECS; i++)
        option_set(opts, &OPTION_SPECS[i], OPTION_SPECS[i].default_value);
}

static inline void parse_options(TrainOptions *opts, int argc, char **argv) {
    options_defaults(opts);
    if (argc <= 1) {
        print_short_usage(argv[0]);
        exit(2);
    }
    const char *given[NUM_OPTION_SPECS] = {0};
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            print_usage(argv[0]);
            exit(0);
        }
        if (strncmp(arg, "--", 2) != 0) fail("unexpected argument '%s' (flags are --name value)", arg);
        const char *name = arg + 2;
        const char *eq = strchr(name, '=');
        size_t name_len = eq ? (size_t)(eq - name) : strlen(name);
        const OptionSpec *spec = NULL;
        for (int k = 0; k < NUM_OPTION_SPECS; k++)
            if (strlen(OPTION_SPECS[k].name) == name_len &&
                strncmp(OPTION_SPECS[k].name, name, name_len) == 0)
                spec = &OPTION_SPECS[k];
        if (!spec) fail("unknown flag '%.*s' (see --help)", (int)(name_len + 2), arg);
        const char *value = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!value) fail("--%s: missing value", spec->name);
        if (given[spec - OPTION_SPECS])
            fail("--%s: given twice ('%s' and '%s')", spec->name, given[spec - OPTION_SPECS], value);
        given[spec - OPTION_SPECS] = value;
        option_set(opts, spec, value);
    }
}

// The architecture --arch names (a ModelArch), or -1 for auto.
static inline int arch_chosen(const TrainOptions *opts) {
    return opts->arch - 1;
}

// The model configuration the flags describe (when not loading a model file): the preset, then the
// explicit overrides. Checks the combinations a single flag's range cannot express.
static inline GPTConfig config_from_options(const TrainOptions *opts) {
    const ModelPreset *preset = find_model_preset(opts->model_size, arch_chosen(opts) == ARCH_GPT2);
    if (!preset) fail("--model_size: unknown preset '%s' (%s)", opts->model_size, MODEL_PRESET_NAMES);
    int arch = arch_chosen(opts) >= 0        ? arch_chosen(opts)
               : preset->arch == ARCH_EITHER ? ARCH_GPT2
                                             : preset->arch;
    if (preset->arch != ARCH_EITHER && preset->arch != arch)
        fail("--arch: %s is a %s preset", preset->name, arch_parts(preset->arch).name);
    GPTConfig cfg;
    memset(&cfg, 0, sizeof(cfg)); // not `= {0}`: C++ (the CUDA trainer) warns of the fields it leaves out
    cfg.arch = arch;
    cfg.num_layers = opts->layers ? opts->layers : preset->num_layers;
    cfg.channels = opts->channels ? opts->channels : preset->channels;
    cfg.num_heads = opts->heads ? opts->heads : preset->num_heads;
    cfg.max_seq_len = opts->max_seq_len ? opts->max_seq_len : preset->max_seq_len;
    cfg.vocab_size = opts->vocab ? opts->vocab : preset->vocab_size;
    if (cfg.vocab_size < 2)
        fail("--vocab: %d is too small (at least 2; 0 takes the preset's)", cfg.vocab_size);
    cfg.padded_vocab_size = pad_vocab(cfg.vocab_size);
    if (cfg.channels % cfg.num_heads != 0)
        fail("--channels: %d is not divisible by --heads %d", cfg.channels, cfg.num_heads);
    // each part's flags (zero where the architecture lacks the part: model_kv_heads, model_ffn_dim)
    ArchParts parts = arch_parts(arch);
    if (opts->kv_heads && !parts.grouped_kv)
        fail("--kv_heads: only for an architecture with grouped key/value heads; --arch %s has full heads",
             parts.name);
    if (opts->ffn_dim && parts.mlp != MLP_SWIGLU)
        fail("--ffn_dim: only for a SwiGLU MLP; --arch %s's MLP is 4C wide", parts.name);
    if (opts->rope_theta && parts.position != POSITION_ROTARY)
        fail("--rope_theta: only for rotary positions; --arch %s learns its positions", parts.name);
    if (parts.grouped_kv) {
        cfg.num_kv_heads = opts->kv_heads ? opts->kv_heads
                           : opts->heads  ? cfg.num_heads
                                          : preset->num_kv_heads;
        if (cfg.num_heads % cfg.num_kv_heads != 0)
            fail("--kv_heads: %d does not divide the %d query heads", cfg.num_kv_heads, cfg.num_heads);
    }
    if (parts.mlp == MLP_SWIGLU)
        cfg.ffn_dim = opts->ffn_dim    ? opts->ffn_dim
                      : opts->channels ? llama_default_ffn_dim(cfg.channels)
                                       : preset->ffn_dim;
    if (parts.position == POSITION_ROTARY) {
        cfg.rope_theta = opts->rope_theta ? opts->rope_theta : preset->rope_theta;
        cfg.scaled_rope = preset->scaled_rope;
        if ((cfg.channels / cfg.num_heads) % 2 != 0)
            fail("--heads: the head size C/NH = %d must be even (rotary embeddings rotate pairs)",
                 cfg.channels / cfg.num_heads);
    }
    return cfg;
}

// --fp8_pow2_scales rounds FP32 block scales down to powers of two: a recipe whose scales are per tensor has
// no block scales, and one with E8M0 block scales has powers of two already.
static inline int fp8_recipe_has_fp32_block_scales(int recipe) {
    return fp8_recipe_is_block(recipe) && fp8_recipe(recipe).scale_format == FP8_SCALE_FP32;
}

static inline void check_fp8_pow2_scales(const TrainOptions *opts) {
    if (!opts->fp8_pow2_scales || fp8_recipe_has_fp32_block_scales(opts->fp8_recipe)) return;
    char names[OPTION_STRING_LEN] = "";
    for (int r = 0; r < FP8_RECIPE_COUNT; r++)
        if (fp8_recipe_has_fp32_block_scales(r))
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", *names ? "|" : "",
                     fp8_recipe_name(r));
    fail("--fp8_pow2_scales: only for --fp8_recipe %s (%s's scales are %s)", names,
         fp8_recipe_name(opts->fp8_recipe),
         fp8_recipe_is_block(opts->fp8_recipe) ? "powers of two already" : "per tensor");
}

// Checks of values a range cannot express, before anything is loaded.
static inline void validate_options(const TrainOptions *opts) {
    if (!*opts->train_data) fail("--train_data: empty (give the token shards to train on)");
    if (opts->zero_stage == 2) fail("--zero_stage: 2 is not supported (0, 1 or 3)");
    if (opts->world_size && !opts->dry_run)
        fail("--world_size: only for --dry_run (a run's world size is the number of processes started)");
    if (opts->eval_only && (!*opts->init_from || (!*opts->val_data && !*opts->eval_data)))
        fail("--eval_only: needs --init_from (the model to evaluate) and --val_data or --eval_data");
    if (opts->eval_every && !*opts->eval_data) fail("--eval_every: no --eval_data to score");
    if (opts->bf16_check_every > 0 && opts->dtype == DTYPE_FLOAT32)
        fail("--bf16_check_every: compares a reduced-precision run with bfloat16; this run is float32");
    if (opts->resume && !*opts->output_dir)
        fail("--resume: needs --output_dir, the directory whose latest checkpoint to continue");
    if (opts->resume && *opts->init_from)
        fail("--init_from: a --resume 1 run continues the checkpoint's own model; give one of the two");
    if (opts->resume && opts->overwrite)
        fail(
            "--overwrite: a --resume 1 run continues the checkpoint it would overwrite; give one of the two");
    if (opts->ckpt_every > 0 && !*opts->output_dir)
        fail("--ckpt_every: checkpoints are written to --output_dir, which is empty");
    if (opts->keep_gathered && opts->zero_stage != 3)
        fail("--keep_gathered: only for --zero_stage 3 (ZeRO-0 and ZeRO-1 keep every weight gathered)");
    check_fp8_pow2_scales(opts);
    const Fp8RecipeInfo recipe = fp8_recipe(opts->fp8_recipe);
    if (opts->fp8_accumulation == FP8_ACCUMULATION_HOPPER &&
        fp8_accumulation_of_device(recipe.min_cc / 10) != FP8_ACCUMULATION_HOPPER)
        fail("--fp8_accumulation hopper: %s runs on %s, whose FP8 accumulation the model does not describe "
             "(fp32 sums there)",
             recipe.name, recipe.gpu);
}

// A block recipe's blocks must tile every FP8 GEMM operand, as cuBLASLt's block-scaled GEMMs require: every
// block linear's input and output features (GPT-2: C, 3C, 4C) and the tokens of a micro-batch, B*T (the
// weight gradient reduces over them), are multiples of the block.
static inline void check_fp8_recipe_shape(const TrainOptions *opts, const GPTConfig *cfg, int B, int T) {
    if (opts->dtype != DTYPE_FLOAT8 || !fp8_recipe_is_block(opts->fp8_recipe)) return;
    int block = fp8_block_size(opts->fp8_recipe);
    const char *recipe = fp8_recipe_name(opts->fp8_recipe);
    if (cfg->channels % block != 0)
        fail("--fp8_recipe %s: the channels (%d) must be a multiple of its %d-element blocks", recipe,
             cfg->channels, block);
    for (int linear = 0; linear < NUM_BLOCK_LINEARS; linear++)
        if (linear_out_features(cfg, linear) % block || linear_in_features(cfg, linear) % block)
            fail("--fp8_recipe %s: the %s linear's features (%d out, %d in) must be multiples of its "
                 "%d-element "
                 "blocks (--kv_heads, --ffn_dim)",
                 recipe, (const char *[]){"qkv", "attproj", "fc", "fcproj"}[linear],
                 linear_out_features(cfg, linear), linear_in_features(cfg, linear), block);
    if ((long)B * T % block != 0)
        fail("--fp8_recipe %s: batch_size x seq_len (%d x %d) must be a multiple of its %d-element blocks",
             recipe, B, T, block);
}

// Sequence length, micro-batch and accumulation for a model; errors name the flag to change.
static inline int resolve_seq_len(const TrainOptions *opts, const GPTConfig *cfg) {
    int T = opts->seq_len ? opts->seq_len : cfg->max_seq_len;
    if (T > cfg->max_seq_len)
        fail("--seq_len: %d exceeds the model's maximum sequence length %d", T, cfg->max_seq_len);
    return T;
}

static inline int resolve_grad_accum_steps(const TrainOptions *opts, int T, int world_size) {
    long tokens_per_micro_step = (long)opts->batch_size * T * world_size;
    if (opts->total_batch_size == 0) return 1;
    if (opts->total_batch_size % tokens_per_micro_step != 0)
        fail("--total_batch_size: %d is not a multiple of batch_size*seq_len*world_size = %ld",
             opts->total_batch_size, tokens_per_micro_step);
    return (int)(opts->total_batch_size / tokens_per_micro_step);
}

// The processes a ZeRO shard spans: --shard_group_size, or all of them.
static inline int resolve_shard_group(const TrainOptions *opts, int world_size) {
    int group = opts->shard_group_size;
    if (!group) return world_size;
    if (opts->zero_stage == 0)
        fail("--shard_group_size: %d with --zero_stage 0, which shards nothing (use 1 or 3)", group);
    if (group < 2 || group > world_size || world_size % group)
        fail("--shard_group_size: %d does not divide the %d processes into groups of 2 or more", group,
             world_size);
    return group;
}

static inline const char *dtype_name(int dtype) {
    static const char *names[] = {"float32", "bfloat16", "float8"};
    return names[dtype];
}

#endif // CLI_H

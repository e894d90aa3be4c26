// gpt_model.h: the GPT-2 model shared by both trainers: configuration and presets, the parameter
// layout in memory, and the seeded initialisation. One definition, included by train_gpt.c and
// train_gpt_fp8.cu, so a CPU run and a GPU run of one configuration start from identical weights.
#ifndef GPT_MODEL_H
#define GPT_MODEL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common.h"

// The layout functions below also run on the GPU (the optimizer derives a parameter's tensor from
// its offset), so under nvcc they are host and device functions.
#ifdef __CUDACC__
#define GPT_HD __host__ __device__
#else
#define GPT_HD
#endif

typedef struct {
    int max_seq_len;       // maxT: rows of the position embedding
    int vocab_size;        // V: token ids in the data are < V
    int padded_vocab_size; // Vp: V rounded up to 128, rows of wte (llm.c pads so GEMM shapes stay aligned)
    int num_layers;        // L
    int num_heads;         // NH
    int channels;          // C
} GPTConfig;

// The largest dimensions a model may have (the flags' ranges, and what a model file header may claim):
// the parameter count, computed in size_t, then stays far inside 64 bits.
#define MODEL_MAX_LAYERS 1024
#define MODEL_MAX_CHANNELS 65536
#define MODEL_MAX_HEADS 1024
#define MODEL_MAX_VOCAB (1 << 24)
#define MODEL_MAX_SEQ_LEN (1 << 20)

typedef struct {
    const char *name;
    int num_layers, channels, num_heads, max_seq_len;
} ModelPreset;

// Tiny sizes for tests and CPU studies; GPT-2 sizes; GPT-architecture models at the widths of the
// usual large sizes (7B, 13B, 70B).
static const ModelPreset MODEL_PRESETS[] = {
    {"d2", 2, 64, 2, 256},        {"d4", 4, 128, 4, 256},       {"d6", 6, 384, 6, 1024},
    {"124M", 12, 768, 12, 1024},  {"350M", 24, 1024, 16, 1024}, {"774M", 36, 1280, 20, 1024},
    {"1.5B", 48, 1600, 25, 1024}, {"7B", 32, 4096, 32, 2048},   {"13B", 40, 5120, 40, 2048},
    {"70B", 80, 8192, 64, 2048},
};
#define NUM_MODEL_PRESETS ((int)(sizeof(MODEL_PRESETS) / sizeof(MODEL_PRESETS[0])))
#define GPT2_VOCAB_SIZE 50257

static inline const ModelPreset *find_model_preset(const char *name) {
    for (int i = 0; i < NUM_MODEL_PRESETS; i++)
        if (strcmp(MODEL_PRESETS[i].name, name) == 0) return &MODEL_PRESETS[i];
    return NULL;
}

static inline int pad_vocab(int vocab_size) {
    return (vocab_size + 127) / 128 * 128;
}

// ----------------------------------------------------------------------------
// Parameters. The 16 tensors in llm.c's file order; in memory the tensors of one layer are kept
// together (per-layer sharding later slices one block per layer), the four global tensors first:
//   [wte (Vp,C)] [wpe (maxT,C)] [lnfw (C)] [lnfb (C)] then L blocks of
//   [ln1w (C)] [ln1b (C)] [qkvw (3C,C)] [qkvb (3C)] [attprojw (C,C)] [attprojb (C)]
//   [ln2w (C)] [ln2b (C)] [fcw (4C,C)] [fcb (4C)] [fcprojw (C,4C)] [fcprojb (C)]
// Checkpoint I/O converts to and from llm.c's tensor-major order.

enum {
    PT_WTE,
    PT_WPE,
    PT_LN1W,
    PT_LN1B,
    PT_QKVW,
    PT_QKVB,
    PT_ATTPROJW,
    PT_ATTPROJB,
    PT_LN2W,
    PT_LN2B,
    PT_FCW,
    PT_FCB,
    PT_FCPROJW,
    PT_FCPROJB,
    PT_LNFW,
    PT_LNFB,
    NUM_PARAM_TENSORS
};

static const char *const PARAM_TENSOR_NAMES[NUM_PARAM_TENSORS] = {
    "wte",  "wpe",  "ln1w", "ln1b", "qkvw",    "qkvb",    "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw",  "fcb",  "fcprojw", "fcprojb", "lnfw",     "lnfb"};

GPT_HD static inline int param_is_per_layer(int tensor) {
    return tensor >= PT_LN1W && tensor <= PT_FCPROJB;
}

// Elements of one tensor (for per-layer tensors: of one layer's slice).
GPT_HD static inline size_t param_tensor_size(const GPTConfig *cfg, int tensor) {
    size_t C = (size_t)cfg->channels;
    switch (tensor) {
    case PT_WTE:
        return (size_t)cfg->padded_vocab_size * C;
    case PT_WPE:
        return (size_t)cfg->max_seq_len * C;
    case PT_QKVW:
        return 3 * C * C;
    case PT_QKVB:
        return 3 * C;
    case PT_ATTPROJW:
        return C * C;
    case PT_FCW:
        return 4 * C * C;
    case PT_FCB:
        return 4 * C;
    case PT_FCPROJW:
        return 4 * C * C;
    default:
        return C; // the LayerNorm weights and biases, attprojb, fcprojb
    }
}

GPT_HD static inline size_t param_global_size(const GPTConfig *cfg) {
    return param_tensor_size(cfg, PT_WTE) + param_tensor_size(cfg, PT_WPE) + 2 * (size_t)cfg->channels;
}

GPT_HD static inline size_t param_layer_size(const GPTConfig *cfg) {
    size_t n = 0;
    for (int t = PT_LN1W; t <= PT_FCPROJB; t++) n += param_tensor_size(cfg, t);
    return n;
}

static inline size_t param_count(const GPTConfig *cfg) {
    return param_global_size(cfg) + (size_t)cfg->num_layers * param_layer_size(cfg);
}

// Offset of tensor `tensor` (of layer `layer` for per-layer tensors; layer ignored otherwise).
static inline size_t param_offset(const GPTConfig *cfg, int tensor, int layer) {
    if (!param_is_per_layer(tensor)) {
        static const int global_order[] = {PT_WTE, PT_WPE, PT_LNFW, PT_LNFB};
        size_t offset = 0;
        for (int i = 0; global_order[i] != tensor; i++) offset += param_tensor_size(cfg, global_order[i]);
        return offset;
    }
    size_t offset = param_global_size(cfg) + (size_t)layer * param_layer_size(cfg);
    for (int t = PT_LN1W; t < tensor; t++) offset += param_tensor_size(cfg, t);
    return offset;
}

// The tensor holding element `offset` of the parameter buffer.
GPT_HD static inline int param_tensor_at(const GPTConfig *cfg, size_t offset) {
    size_t global = param_global_size(cfg);
    if (offset >= global) {
        size_t within = (offset - global) % param_layer_size(cfg);
        int tensor = PT_LN1W;
        while (within >= param_tensor_size(cfg, tensor)) within -= param_tensor_size(cfg, tensor++);
        return tensor;
    }
    size_t wte = param_tensor_size(cfg, PT_WTE), wpe = param_tensor_size(cfg, PT_WPE);
    if (offset < wte) return PT_WTE;
    if (offset < wte + wpe) return PT_WPE;
    return offset < wte + wpe + (size_t)cfg->channels ? PT_LNFW : PT_LNFB;
}

// The tensor and layer (0 for the global tensors) holding element `offset`, and where that tensor's slice
// ends: the run of elements that share one tensor's treatment.
static inline size_t param_locate(const GPTConfig *cfg, size_t offset, int *tensor, int *layer) {
    *tensor = param_tensor_at(cfg, offset);
    *layer =
        param_is_per_layer(*tensor) ? (int)((offset - param_global_size(cfg)) / param_layer_size(cfg)) : 0;
    return param_offset(cfg, *tensor, *layer) + param_tensor_size(cfg, *tensor);
}

// Weight decay applies to the 2-D weights only (embeddings and matmul weights), not to LayerNorm or biases.
GPT_HD static inline int param_is_decayed(int tensor) {
    return tensor == PT_WTE || tensor == PT_WPE || tensor == PT_QKVW || tensor == PT_ATTPROJW ||
           tensor == PT_FCW || tensor == PT_FCPROJW;
}

// The end (at most limit) of the run of parameters from `offset` whose tensors all share the weight decay
// of offset's, and that decay: what one AdamW loop (CPU) or launch (GPU) covers, consecutive tensors alike
// merged (in a layer's unit: LayerNorm and biases, then each weight, alternating).
static inline size_t param_decay_run(const GPTConfig *cfg, size_t offset, size_t limit, int *decayed) {
    int tensor, layer;
    size_t stop = param_locate(cfg, offset, &tensor, &layer);
    *decayed = param_is_decayed(tensor);
    while (stop < limit) {
        size_t next_stop = param_locate(cfg, stop, &tensor, &layer);
        if (param_is_decayed(tensor) != *decayed) break;
        stop = next_stop;
    }
    return stop < limit ? stop : limit;
}

// The four linear layers of a block: their weight tensor, bias tensor, and (out, in) features.
enum { LIN_QKV, LIN_ATTPROJ, LIN_FC, LIN_FCPROJ, NUM_BLOCK_LINEARS };

GPT_HD static inline int linear_weight_tensor(int linear) {
    switch (linear) {
    case LIN_QKV:
        return PT_QKVW;
    case LIN_ATTPROJ:
        return PT_ATTPROJW;
    case LIN_FC:
        return PT_FCW;
    default:
        return PT_FCPROJW;
    }
}

// The block linears' weights, which float8 reads in FP8 only (every other tensor it reads in BF16).
GPT_HD static inline int param_is_linear_weight(int tensor) {
    return tensor == PT_QKVW || tensor == PT_ATTPROJW || tensor == PT_FCW || tensor == PT_FCPROJW;
}

static inline int linear_out_features(const GPTConfig *cfg, int linear) {
    static const int multiple[NUM_BLOCK_LINEARS] = {3, 1, 4, 1};
    return multiple[linear] * cfg->channels;
}

static inline int linear_in_features(const GPTConfig *cfg, int linear) {
    return linear == LIN_FCPROJ ? 4 * cfg->channels : cfg->channels;
}

// ----------------------------------------------------------------------------
// Random numbers: our own xorshift64* (sampling) and, for the initialisation, a counter-based normal
// (a hash of seed and element index), so that any slice of the parameters can be drawn alone: a ZeRO
// rank draws only its shard, and the CPU and GPU trainers draw identical weights everywhere.

typedef struct {
    uint64_t state;
} Rng;

static inline void rng_seed(Rng *rng, uint64_t seed) {
    rng->state = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
    if (rng->state == 0) rng->state = 1;
}

static inline uint64_t rng_next(Rng *rng) {
    rng->state ^= rng->state >> 12;
    rng->state ^= rng->state << 25;
    rng->state ^= rng->state >> 27;
    return rng->state * 0x2545F4914F6CDD1Dull;
}

// 53 random bits as a double in (0, 1), never exactly 0 so that log() below is finite.
static inline double uniform_from_bits(uint64_t bits) {
    return ((double)(bits >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

static inline double rng_uniform(Rng *rng) {
    return uniform_from_bits(rng_next(rng));
}

// splitmix64's finaliser: a well-mixed 64-bit hash.
static inline uint64_t hash64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// Standard normal number `index` of stream `seed` (Box-Muller on two hashed uniforms).
static inline float counter_normal(uint64_t seed, uint64_t index) {
    uint64_t key = hash64(seed ^ 0x6A09E667F3BCC909ull) + 2 * index;
    double u1 = uniform_from_bits(hash64(key)), u2 = uniform_from_bits(hash64(key + 1));
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

// ----------------------------------------------------------------------------
// Seeded initialisation (GPT-2): matmul weights and embeddings N(0, 0.02), the projections that feed
// the residual stream N(0, 0.02/sqrt(2L)), biases 0, LayerNorm weights 1; llm.c keeps the padded
// vocabulary rows of wte at zero (they never receive a gradient).

// Element `offset` of the parameter vector.
static inline float gpt_init_value(const GPTConfig *cfg, uint64_t seed, size_t offset) {
    int tensor = param_tensor_at(cfg, offset);
    if (tensor == PT_WTE && offset >= (size_t)cfg->vocab_size * cfg->channels) return 0.0f;
    if (param_is_decayed(tensor)) {
        float residual_std = 0.02f / sqrtf(2.0f * (float)cfg->num_layers);
        float std = (tensor == PT_ATTPROJW || tensor == PT_FCPROJW) ? residual_std : 0.02f;
        return std * counter_normal(seed, offset);
    }
    return (tensor == PT_LN1W || tensor == PT_LN2W || tensor == PT_LNFW) ? 1.0f : 0.0f;
}

// out[i] = element begin + i of the parameter vector, for i < count.
static inline void gpt_init_range(float *out, const GPTConfig *cfg, uint64_t seed, size_t begin,
                                  size_t count) {
#pragma omp parallel for
    for (size_t i = 0; i < count; i++) out[i] = gpt_init_value(cfg, seed, begin + i);
}

static inline void gpt_init_params(float *params, const GPTConfig *cfg, uint64_t seed) {
    gpt_init_range(params, cfg, seed, 0, param_count(cfg));
}

#endif // GPT_MODEL_H

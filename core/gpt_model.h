// core/gpt_model.h: the models shared by both trainers: configuration and presets of the two architectures
// (GPT-2, and Llama: RMSNorm, rotary embeddings, grouped-query attention, SwiGLU, untied head), the
// parameter layout in memory, and the seeded initialisation. One definition, included by train_gpt.c and
// train_gpt_fp8.cu, so a CPU run and a GPU run of one configuration start from identical weights.
#ifndef GPT_MODEL_H
#define GPT_MODEL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common.h"

// The layout functions below also run on the GPU (the optimizer derives a parameter's tensor from
// its offset), so under nvcc they are host and device functions.
#ifdef __CUDACC__
#define GPT_HD __host__ __device__
#else
#define GPT_HD
#endif

// An architecture is the parts it is made of. The layers, the plans and the files ask for a part (which norm,
// which positions, which MLP, whether there are biases, whether the head is wte), never for the architecture
// by name: another architecture made of these parts is one more row of ARCH_TABLE, and a new kind of part is
// one more value below with its forward and backward in both trainers (docs/extending.md).
// LayerNorm (weight and bias) or RMSNorm (weight); the position embedding added to the token's, or q and k
// rotated; proj(gelu(fc x)) or proj(silu(gate x) * fc x)
typedef enum { NORM_LAYERNORM, NORM_RMSNORM } NormKind;
typedef enum { POSITION_LEARNED, POSITION_ROTARY } PositionKind;
typedef enum { MLP_GELU, MLP_SWIGLU } MlpKind;

// X(id, name, norm, position, mlp, biases (the linears'), tied_head (the LM head is wte), grouped_kv (KVH
// key/value heads, each shared by NH/KVH query heads))
#define ARCH_TABLE(X)                                                                                        \
    X(ARCH_GPT2, "gpt2", NORM_LAYERNORM, POSITION_LEARNED, MLP_GELU, 1, 1, 0)                                \
    X(ARCH_LLAMA, "llama", NORM_RMSNORM, POSITION_ROTARY, MLP_SWIGLU, 0, 0, 1)

// The architectures' ids, in the table's order: debug-state files store them, so rows are only ever appended.
#define ARCH_ID(id, name, norm, position, mlp, biases, tied_head, grouped_kv) id,
typedef enum { ARCH_TABLE(ARCH_ID) NUM_ARCHS } ModelArch;
#undef ARCH_ID

typedef struct {
    const char *name;
    NormKind norm;
    PositionKind position;
    MlpKind mlp;
    int biases, tied_head, grouped_kv;
} ArchParts;

// An architecture's row of ARCH_TABLE (a switch, so that device code reads it too); arch is one of ModelArch.
#define ARCH_PARTS_CASE(id, name, norm, position, mlp, biases, tied_head, grouped_kv)                        \
    case id: {                                                                                               \
        ArchParts parts = {name, norm, position, mlp, biases, tied_head, grouped_kv};                        \
        return parts;                                                                                        \
    }
GPT_HD static inline ArchParts arch_parts(int arch) {
    switch (arch) { ARCH_TABLE(ARCH_PARTS_CASE) }
    ArchParts unknown = {"unknown", NORM_LAYERNORM, POSITION_LEARNED, MLP_GELU, 0, 0, 0};
    return unknown;
}
#undef ARCH_PARTS_CASE

typedef struct {
    int max_seq_len;       // maxT: rows of the position embedding (Llama: the longest sequence)
    int vocab_size;        // V: token ids in the data are < V
    int padded_vocab_size; // Vp: V rounded up to 128, rows of wte (llm.c pads so GEMM shapes stay aligned)
    int num_layers;        // L
    int num_heads;         // NH
    int channels;          // C
    // Llama only (zero for GPT-2, whose values follow from the above: model_kv_heads, model_ffn_dim)
    int arch;         // ModelArch
    int num_kv_heads; // KVH: key/value heads, each shared by NH/KVH query heads (grouped-query attention)
    int ffn_dim;      // F: hidden features of the SwiGLU MLP
    float rope_theta; // base of the rotary embeddings' wavelengths
    int scaled_rope;  // 1: Llama 3.1's long-context rescaling of those wavelengths (llm.c's use_scaled_rope)
} GPTConfig;

GPT_HD static inline ArchParts model_parts(const GPTConfig *cfg) {
    return arch_parts(cfg->arch);
}

GPT_HD static inline int model_has_rotary(const GPTConfig *cfg) {
    return model_parts(cfg).position == POSITION_ROTARY;
}

GPT_HD static inline int model_kv_heads(const GPTConfig *cfg) {
    return model_parts(cfg).grouped_kv ? cfg->num_kv_heads : cfg->num_heads;
}

// The MLP's hidden features: GPT-2's 4C, Llama's F (each of SwiGLU's two input projections).
GPT_HD static inline int model_ffn_dim(const GPTConfig *cfg) {
    return model_parts(cfg).mlp == MLP_SWIGLU ? cfg->ffn_dim : 4 * cfg->channels;
}

// The model as every header line names it, its architecture first: "gpt2 L=12 C=768 NH=12 V=50257 maxT=1024",
// "llama L=80 C=8192 NH=64 V=32000 maxT=4096 KVH=8 F=28672 theta=10000" (" scaled": Llama 3.1's rotary
// wavelengths).
static inline void model_description(const GPTConfig *cfg, char *out, size_t size) {
    int n = snprintf(out, size, "%s L=%d C=%d NH=%d V=%d maxT=%d", model_parts(cfg).name, cfg->num_layers,
                     cfg->channels, cfg->num_heads, cfg->vocab_size, cfg->max_seq_len);
    if (model_has_rotary(cfg) && n >= 0 && (size_t)n < size)
        snprintf(out + n, size - n, " KVH=%d F=%d theta=%g%s", cfg->num_kv_heads, cfg->ffn_dim,
                 cfg->rope_theta, cfg->scaled_rope ? " scaled" : "");
}

// Features of one qkv row: NH query heads, then KVH key heads, then KVH value heads, hs = C/NH each.
GPT_HD static inline int model_qkv_features(const GPTConfig *cfg) {
    return (cfg->num_heads + 2 * model_kv_heads(cfg)) * (cfg->channels / cfg->num_heads);
}

// Llama's default F for C channels when no preset gives it: 2/3 of 4C (SwiGLU's two input projections
// then cost what GPT-2's one 4C projection does), rounded up to a multiple of 64.
static inline int llama_default_ffn_dim(int channels) {
    int hidden = 8 * channels / 3;
    return (hidden + 63) / 64 * 64;
}

// The largest dimensions a model may have (the flags' ranges, and what a model file header may claim):
// the parameter count, computed in size_t, then stays far inside 64 bits.
#define MODEL_MAX_LAYERS 1024
#define MODEL_MAX_CHANNELS 65536
#define MODEL_MAX_HEADS 1024
#define MODEL_MAX_VOCAB (1 << 24)
#define MODEL_MAX_SEQ_LEN (1 << 20)

#define ARCH_EITHER (-1) // a preset of either architecture (--arch chooses)

typedef struct {
    const char *name;
    int arch; // ModelArch, or ARCH_EITHER
    int num_layers, channels, num_heads, max_seq_len;
    int vocab_size; // the tokenizer's vocabulary (--vocab overrides)
    // as Llama (zero for GPT-2-only presets)
    int num_kv_heads, ffn_dim;
    float rope_theta;
    int scaled_rope;
} ModelPreset;

#define GPT2_VOCAB_SIZE 50257
#define LLAMA2_VOCAB_SIZE 32000
#define LLAMA3_VOCAB_SIZE 128256

// Tiny sizes for tests and CPU studies, in either architecture; GPT-2 sizes; GPT-architecture models at the
// widths of the usual large sizes (gpt-7B, gpt-13B, gpt-70B); Llama 2, 3 and 3.1 at their published shapes
// (3.1: 3's, with the scaled rotary wavelengths of its 128K-token context).
static const ModelPreset MODEL_PRESETS[] = {
    {"d2", ARCH_EITHER, 2, 64, 2, 256, GPT2_VOCAB_SIZE, 1, 192, 10000.0f, 0},
    {"d4", ARCH_EITHER, 4, 128, 4, 256, GPT2_VOCAB_SIZE, 2, 384, 10000.0f, 0},
    {"d6", ARCH_EITHER, 6, 384, 6, 1024, GPT2_VOCAB_SIZE, 3, 1024, 10000.0f, 0},
    {"124M", ARCH_GPT2, 12, 768, 12, 1024, GPT2_VOCAB_SIZE, 0, 0, 0.0f, 0},
    {"350M", ARCH_GPT2, 24, 1024, 16, 1024, GPT2_VOCAB_SIZE, 0, 0, 0.0f, 0},
    {"774M", ARCH_GPT2, 36, 1280, 20, 1024, GPT2_VOCAB_SIZE, 0, 0, 0.0f, 0},
    {"1.5B", ARCH_GPT2, 48, 1600, 25, 1024, GPT2_VOCAB_SIZE, 0, 0, 0.0f, 0},
    {"gpt-7B", ARCH_GPT2, 32, 4096, 32, 2048, GPT2_VOCAB_SIZE, 0, 0, 0.0f, 0},
    {"gpt-13B", ARCH_GPT2, 40, 5120, 40, 2048, GPT2_VOCAB_SIZE, 0, 0, 0.0f, 0},
    {"gpt-70B", ARCH_GPT2, 80, 8192, 64, 2048, GPT2_VOCAB_SIZE, 0, 0, 0.0f, 0},
    {"llama2-7B", ARCH_LLAMA, 32, 4096, 32, 4096, LLAMA2_VOCAB_SIZE, 32, 11008, 10000.0f, 0},
    {"llama2-13B", ARCH_LLAMA, 40, 5120, 40, 4096, LLAMA2_VOCAB_SIZE, 40, 13824, 10000.0f, 0},
    {"llama2-70B", ARCH_LLAMA, 80, 8192, 64, 4096, LLAMA2_VOCAB_SIZE, 8, 28672, 10000.0f, 0},
    {"llama3-8B", ARCH_LLAMA, 32, 4096, 32, 8192, LLAMA3_VOCAB_SIZE, 8, 14336, 500000.0f, 0},
    {"llama3-70B", ARCH_LLAMA, 80, 8192, 64, 8192, LLAMA3_VOCAB_SIZE, 8, 28672, 500000.0f, 0},
    {"llama3.1-8B", ARCH_LLAMA, 32, 4096, 32, 131072, LLAMA3_VOCAB_SIZE, 8, 14336, 500000.0f, 1},
    {"llama3.1-70B", ARCH_LLAMA, 80, 8192, 64, 131072, LLAMA3_VOCAB_SIZE, 8, 28672, 500000.0f, 1},
};
#define NUM_MODEL_PRESETS ((int)(sizeof(MODEL_PRESETS) / sizeof(MODEL_PRESETS[0])))
#define MODEL_PRESET_NAMES                                                                                   \
    "d2 d4 d6 124M 350M 774M 1.5B gpt-7B gpt-13B gpt-70B llama2-7B llama2-13B llama2-70B llama3-8B "         \
    "llama3-70B llama3.1-8B llama3.1-70B; 7B 13B 70B: LLaMA-2's, or with --arch gpt2 gpt-7B gpt-13B gpt-70B"

// The sizes users name without an architecture are LLaMA-2's models (the 70B users pretrain and compare FP8
// with BF16 on), unless the GPT architecture is asked for: then the GPT-architecture models of those widths.
static const char *const MODEL_SIZE_ALIASES[][3] = {
    {"7B", "llama2-7B", "gpt-7B"}, {"13B", "llama2-13B", "gpt-13B"}, {"70B", "llama2-70B", "gpt-70B"}};

// The preset called `name`, an alias resolved for the GPT architecture when gpt2 is set; NULL if none.
static inline const ModelPreset *find_model_preset(const char *name, int gpt2) {
    for (size_t i = 0; i < sizeof(MODEL_SIZE_ALIASES) / sizeof(MODEL_SIZE_ALIASES[0]); i++)
        if (strcmp(MODEL_SIZE_ALIASES[i][0], name) == 0) name = MODEL_SIZE_ALIASES[i][gpt2 ? 2 : 1];
    for (int i = 0; i < NUM_MODEL_PRESETS; i++)
        if (strcmp(MODEL_PRESETS[i].name, name) == 0) return &MODEL_PRESETS[i];
    return NULL;
}

static inline int pad_vocab(int vocab_size) {
    return (vocab_size + 127) / 128 * 128;
}

// ----------------------------------------------------------------------------
// Parameters. The tensors in llm.c's file order, each architecture's file order being this order with its
// absent tensors left out (their size is 0). In memory the tensors of one layer are kept together
// (per-layer sharding slices one block per layer), the global tensors first:
//   [wte (Vp,C)] [wpe (maxT,C)] [lnfw (C)] [lnfb (C)] [lmhead (Vp,C)] then L blocks of
//   [ln1w (C)] [ln1b (C)] [qkvw (QKV,C)] [qkvb (QKV)] [attprojw (C,C)] [attprojb (C)]
//   [ln2w (C)] [ln2b (C)] [fcw (F,C)] [fcb (F)] [fcgatew (F,C)] [fcprojw (C,F)] [fcprojb (C)]
// GPT-2: QKV = 3C, F = 4C, no lmhead (tied to wte) and no fcgatew. Llama: QKV = (NH + 2 KVH) hs, no wpe,
// biases or LayerNorm biases (ln1w, ln2w, lnfw are RMSNorm weights); fcw is SwiGLU's up projection and
// fcgatew its gate, adjacent so that the block's fc linear is one (2F,C) GEMM, [up; gate].
// Checkpoint I/O converts to and from llm.c's tensor-major order.

// The tensors by what they are for in either architecture; the comments (and PARAM_TENSOR_NAMES) give
// llm.c's names, which the layout above and the model files use.
enum {
    PT_TOKEN_EMBED,  // wte: the token embedding (Vp,C)
    PT_POS_EMBED,    // wpe: learned positions (maxT,C)
    PT_ATTN_NORM_W,  // ln1w: the norm before attention
    PT_ATTN_NORM_B,  // ln1b
    PT_QKV_W,        // qkvw: the q, k and v projections, stacked
    PT_QKV_B,        // qkvb
    PT_ATTN_OUT_W,   // attprojw: attention's output projection
    PT_ATTN_OUT_B,   // attprojb
    PT_MLP_NORM_W,   // ln2w: the norm before the MLP
    PT_MLP_NORM_B,   // ln2b
    PT_MLP_UP_W,     // fcw: the MLP's first linear (GELU's input; SwiGLU's up projection)
    PT_MLP_UP_B,     // fcb
    PT_MLP_GATE_W,   // fcgatew: SwiGLU's gate
    PT_MLP_DOWN_W,   // fcprojw: the MLP's output projection
    PT_MLP_DOWN_B,   // fcprojb
    PT_FINAL_NORM_W, // lnfw: the norm before the head
    PT_FINAL_NORM_B, // lnfb
    PT_LM_HEAD,      // lmhead: the head (Vp,C), where it is not tied to the token embedding
    NUM_PARAM_TENSORS
};

static const char *const PARAM_TENSOR_NAMES[NUM_PARAM_TENSORS] = {
    "wte",  "wpe", "ln1w", "ln1b",    "qkvw",    "qkvb",    "attprojw", "attprojb", "ln2w",
    "ln2b", "fcw", "fcb",  "fcgatew", "fcprojw", "fcprojb", "lnfw",     "lnfb",     "lmhead"};

GPT_HD static inline int param_is_per_layer(int tensor) {
    return tensor >= PT_ATTN_NORM_W && tensor <= PT_MLP_DOWN_B;
}

// The tensors of an architecture's parts: a position embedding for learned positions, norm biases for
// LayerNorm, the linears' biases, the gate of SwiGLU, a head of its own when it is not tied to wte.
GPT_HD static inline int param_in_arch(const GPTConfig *cfg, int tensor) {
    ArchParts parts = model_parts(cfg);
    switch (tensor) {
    case PT_POS_EMBED:
        return parts.position == POSITION_LEARNED;
    case PT_ATTN_NORM_B:
    case PT_MLP_NORM_B:
    case PT_FINAL_NORM_B:
        return parts.norm == NORM_LAYERNORM;
    case PT_QKV_B:
    case PT_ATTN_OUT_B:
    case PT_MLP_UP_B:
    case PT_MLP_DOWN_B:
        return parts.biases;
    case PT_MLP_GATE_W:
        return parts.mlp == MLP_SWIGLU;
    case PT_LM_HEAD:
        return !parts.tied_head;
    default:
        return 1;
    }
}

// Elements of one tensor (for per-layer tensors: of one layer's slice); 0 for a tensor the architecture
// does not have.
GPT_HD static inline size_t param_tensor_size(const GPTConfig *cfg, int tensor) {
    size_t C = (size_t)cfg->channels, F = (size_t)model_ffn_dim(cfg), QKV = (size_t)model_qkv_features(cfg);
    if (!param_in_arch(cfg, tensor)) return 0;
    switch (tensor) {
    case PT_TOKEN_EMBED:
    case PT_LM_HEAD:
        return (size_t)cfg->padded_vocab_size * C;
    case PT_POS_EMBED:
        return (size_t)cfg->max_seq_len * C;
    case PT_QKV_W:
        return QKV * C;
    case PT_QKV_B:
        return QKV;
    case PT_ATTN_OUT_W:
        return C * C;
    case PT_MLP_UP_W:
    case PT_MLP_GATE_W:
    case PT_MLP_DOWN_W:
        return F * C;
    case PT_MLP_UP_B:
        return F;
    default:
        return C; // the LayerNorm weights and biases, attprojb, fcprojb
    }
}

// The global tensors in memory order: wte, wpe, lnfw, lnfb, lmhead.
#define NUM_GLOBAL_TENSORS 5
GPT_HD static inline int global_tensor(int i) {
    switch (i) {
    case 0:
        return PT_TOKEN_EMBED;
    case 1:
        return PT_POS_EMBED;
    case 2:
        return PT_FINAL_NORM_W;
    case 3:
        return PT_FINAL_NORM_B;
    default:
        return PT_LM_HEAD;
    }
}

GPT_HD static inline size_t param_global_size(const GPTConfig *cfg) {
    size_t n = 0;
    for (int i = 0; i < NUM_GLOBAL_TENSORS; i++) n += param_tensor_size(cfg, global_tensor(i));
    return n;
}

GPT_HD static inline size_t param_layer_size(const GPTConfig *cfg) {
    size_t n = 0;
    for (int t = PT_ATTN_NORM_W; t <= PT_MLP_DOWN_B; t++) n += param_tensor_size(cfg, t);
    return n;
}

static inline size_t param_count(const GPTConfig *cfg) {
    return param_global_size(cfg) + (size_t)cfg->num_layers * param_layer_size(cfg);
}

// Offset of tensor `tensor` (of layer `layer` for per-layer tensors; layer ignored otherwise).
static inline size_t param_offset(const GPTConfig *cfg, int tensor, int layer) {
    if (!param_is_per_layer(tensor)) {
        size_t offset = 0;
        for (int i = 0; global_tensor(i) != tensor; i++) offset += param_tensor_size(cfg, global_tensor(i));
        return offset;
    }
    size_t offset = param_global_size(cfg) + (size_t)layer * param_layer_size(cfg);
    for (int t = PT_ATTN_NORM_W; t < tensor; t++) offset += param_tensor_size(cfg, t);
    return offset;
}

// The tensor holding element `offset` of the parameter buffer (tensors of size 0 hold none).
GPT_HD static inline int param_tensor_at(const GPTConfig *cfg, size_t offset) {
    size_t global = param_global_size(cfg);
    if (offset >= global) {
        size_t within = (offset - global) % param_layer_size(cfg);
        int tensor = PT_ATTN_NORM_W;
        while (within >= param_tensor_size(cfg, tensor)) within -= param_tensor_size(cfg, tensor++);
        return tensor;
    }
    int i = 0;
    while (offset >= param_tensor_size(cfg, global_tensor(i)))
        offset -= param_tensor_size(cfg, global_tensor(i++));
    return global_tensor(i);
}

// The tensor and layer (0 for the global tensors) holding element `offset`, and where that tensor's slice
// ends: the run of elements that share one tensor's treatment.
static inline size_t param_locate(const GPTConfig *cfg, size_t offset, int *tensor, int *layer) {
    *tensor = param_tensor_at(cfg, offset);
    *layer =
        param_is_per_layer(*tensor) ? (int)((offset - param_global_size(cfg)) / param_layer_size(cfg)) : 0;
    return param_offset(cfg, *tensor, *layer) + param_tensor_size(cfg, *tensor);
}

// Weight decay applies to the 2-D weights only (embeddings, matmul weights and the head), not to the norms'
// weights or biases.
GPT_HD static inline int param_is_decayed(int tensor) {
    return tensor == PT_TOKEN_EMBED || tensor == PT_POS_EMBED || tensor == PT_QKV_W ||
           tensor == PT_ATTN_OUT_W || tensor == PT_MLP_UP_W || tensor == PT_MLP_GATE_W ||
           tensor == PT_MLP_DOWN_W || tensor == PT_LM_HEAD;
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

// The four linear layers of a block: their weight tensor, bias tensor (the one after it; Llama's are
// empty), and (out, in) features. Llama's fc is SwiGLU's up and gate projections in one GEMM: its weight
// is fcw and fcgatew, adjacent.
enum { LIN_QKV, LIN_ATTN_OUT, LIN_MLP_UP, LIN_MLP_DOWN, NUM_BLOCK_LINEARS };

GPT_HD static inline int linear_weight_tensor(int linear) {
    switch (linear) {
    case LIN_QKV:
        return PT_QKV_W;
    case LIN_ATTN_OUT:
        return PT_ATTN_OUT_W;
    case LIN_MLP_UP:
        return PT_MLP_UP_W;
    default:
        return PT_MLP_DOWN_W;
    }
}

// The block linears' weights, which float8 reads in FP8 only (every other tensor it reads in BF16).
GPT_HD static inline int param_is_linear_weight(int tensor) {
    return tensor == PT_QKV_W || tensor == PT_ATTN_OUT_W || tensor == PT_MLP_UP_W ||
           tensor == PT_MLP_GATE_W || tensor == PT_MLP_DOWN_W;
}

GPT_HD static inline int linear_out_features(const GPTConfig *cfg, int linear) {
    switch (linear) {
    case LIN_QKV:
        return model_qkv_features(cfg);
    case LIN_MLP_UP:
        return (model_parts(cfg).mlp == MLP_SWIGLU ? 2 : 1) * model_ffn_dim(cfg); // SwiGLU: fc and its gate
    default:
        return cfg->channels;
    }
}

GPT_HD static inline int linear_in_features(const GPTConfig *cfg, int linear) {
    return linear == LIN_MLP_DOWN ? model_ffn_dim(cfg) : cfg->channels;
}

// Elements of the linear's weight (OC, IC), from linear_weight_tensor's offset on.
GPT_HD static inline size_t linear_weight_size(const GPTConfig *cfg, int linear) {
    return (size_t)linear_out_features(cfg, linear) * linear_in_features(cfg, linear);
}

// The widest output row of a block's linears: the fc linear's (GPT-2 4C, Llama 2F) or qkv's, whichever is
// wider. It bounds every linear's input too (fcproj's F is at most fc's output), so it sizes the scratch that
// holds any one linear's input or output gradient.
static inline int model_widest_features(const GPTConfig *cfg) {
    int fc = linear_out_features(cfg, LIN_MLP_UP), qkv = model_qkv_features(cfg);
    return fc > qkv ? fc : qkv;
}

// ----------------------------------------------------------------------------
// Rotary position embeddings (Llama): the pair (x[2i], x[2i+1]) of every query and key head at position t is
// rotated by the angle t * theta^(-2i/hs), llm.c's and Meta's interleaved convention. The table of (cos,
// sin) is computed once, in double then rounded, so both trainers rotate by the same floats.

// Llama 3.1's rescaling (Meta's reference, fixed constants, which llm.c's file records as one flag): pairs
// that turn more than 4 times within the 8192 positions Llama 3 was trained on keep their frequency, pairs
// that turn less than once have it divided by 8 (their wavelengths then span the 8x longer context), and
// those between blend the two linearly in the number of turns, so the frequencies stay monotonic.
#define LLAMA31_ROPE_FACTOR 8.0
#define LLAMA31_ROPE_LOW_FREQ_TURNS 1.0
#define LLAMA31_ROPE_HIGH_FREQ_TURNS 4.0
#define LLAMA31_ROPE_ORIGINAL_CONTEXT 8192.0

static inline double llama31_rope_frequency(double frequency) {
    double turns = LLAMA31_ROPE_ORIGINAL_CONTEXT * frequency / (2 * acos(-1.0));
    if (turns > LLAMA31_ROPE_HIGH_FREQ_TURNS) return frequency;
    if (turns < LLAMA31_ROPE_LOW_FREQ_TURNS) return frequency / LLAMA31_ROPE_FACTOR;
    double smooth =
        (turns - LLAMA31_ROPE_LOW_FREQ_TURNS) / (LLAMA31_ROPE_HIGH_FREQ_TURNS - LLAMA31_ROPE_LOW_FREQ_TURNS);
    return (1 - smooth) * frequency / LLAMA31_ROPE_FACTOR + smooth * frequency;
}

// table (maxT, hs/2, 2): cos and sin of each position's angle for each pair.
static inline void rope_table(float *table, const GPTConfig *cfg) {
    int hs = cfg->channels / cfg->num_heads, pairs = hs / 2;
    for (int i = 0; i < pairs; i++) {
        double frequency = pow((double)cfg->rope_theta, -2.0 * i / hs);
        if (cfg->scaled_rope) frequency = llama31_rope_frequency(frequency);
        for (int t = 0; t < cfg->max_seq_len; t++) {
            double angle = t * frequency;
            table[((size_t)t * pairs + i) * 2] = (float)cos(angle);
            table[((size_t)t * pairs + i) * 2 + 1] = (float)sin(angle);
        }
    }
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
// Seeded initialisation (GPT-2's, also for Llama): matmul weights, embeddings and the head N(0, 0.02), the
// projections that feed the residual stream N(0, 0.02/sqrt(2L)), biases 0, norm weights 1; llm.c keeps the
// padded vocabulary rows of wte (and here of the head) at zero (they never receive a gradient).

// Element `offset` of the parameter vector.
static inline float gpt_init_value(const GPTConfig *cfg, uint64_t seed, size_t offset) {
    int tensor = param_tensor_at(cfg, offset);
    if ((tensor == PT_TOKEN_EMBED || tensor == PT_LM_HEAD) &&
        offset - param_offset(cfg, tensor, 0) >= (size_t)cfg->vocab_size * cfg->channels)
        return 0.0f;
    if (param_is_decayed(tensor)) {
        float residual_std = 0.02f / sqrtf(2.0f * (float)cfg->num_layers);
        float std = (tensor == PT_ATTN_OUT_W || tensor == PT_MLP_DOWN_W) ? residual_std : 0.02f;
        return std * counter_normal(seed, offset);
    }
    return (tensor == PT_ATTN_NORM_W || tensor == PT_MLP_NORM_W || tensor == PT_FINAL_NORM_W) ? 1.0f : 0.0f;
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

// core/model_file.h: a model's weights on disk, read and written by both trainers (a checkpoint's
// model_<step>.bin, --init_from's file).
//  - Model file (llm.c's formats, so llm.c loads what we train and the other way round), version 3 (fp32)
//    or 5 (bf16); we always write 3, the FP32 master weights, so that resume is bit-exact.
//    GPT-2: 256 int32 header [0]=20240326 [1]=version [2]=maxT [3]=V [4]=L [5]=NH [6]=C [7]=Vp, then the
//    16 tensors in llm.c's tensor-major order, wte with Vp rows.
//    Llama 3, written as llm.c's llama3 branch writes it and its train_llama3.cu reads it: 256 int32
//    [0]=20240803 [1]=version [2]=maxT [3]=V [4]=L [5]=NH [6]=KVH [7]=C [8]=multiple_of [9]=use_scaled_rope
//    [10,11]=Llama version, 256 float32 [0]=ffn_dim_multiplier [1]=norm_eps [2]=rope_theta, then GPT-2's 16
//    slots: wte (V,C), lmhead (V,C) in wpe's, ln1w, zeros (ln1b), qkvw (L,QKV,C), zeros, attprojw, zeros,
//    ln2w, zeros, fc (L,2F,C) each layer's up then gate, zeros (L,2F), fcprojw (L,C,F), zeros, lnfw,
//    zeros; the vocabulary unpadded. F = multiple_of * ceil(int(multiplier * int(8C/3)) / multiple_of).
//    Also read: llm.c master's train_llama3.py layout (an int-only header, its own tensor order; below).
#ifndef MODEL_FILE_H
#define MODEL_FILE_H

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "atomic_file.h"
#include "cli.h"
#include "common.h"
#include "fp8_scaling.h"
#include "gpt_model.h"

#define MODEL_FILE_MAGIC 20240326
#define LLAMA_MODEL_FILE_MAGIC 20240803
#define MODEL_FILE_HEADER_INTS 256
#define LLAMA_NORM_EPS 1e-5f // RMSNorm's epsilon, the only one Llama files here carry

// ----------------------------------------------------------------------------
// Model file
//
// The layouts a model file may have, each llm.c's: the tensors in file order, tensor-major (all layers of
// one tensor, then the next), each a slot that holds one of our tensors, two of them back to back in every
// layer's slice (llm.c packs SwiGLU's up and gate projections into GPT-2's fc slot), or zeros where llm.c
// keeps a tensor this model does not have.
//  - GPT-2 (train_gpt2.c, train_gpt2.py): the 16 tensors of PARAM_TENSOR_NAMES's order, wte with Vp rows.
//  - Llama 3 as llm.c's train_llama3.cu reads it and the llama3 branch's train_llama3.py writes it (what we
//    write): GPT-2's 16 slots, the head in wpe's, the biases and lnfb zeros, fc (L, 2F, C) each layer's
//    [up; gate], wte and the head with the V rows of the vocabulary, unpadded.
//  - Llama 3 as llm.c master's train_llama3.py writes it (read only; no llm.c reader has it): wte ln1w qkvw
//    attprojw ln2w fcw fcgatew fcprojw lnfw lmhead, PARAM_TENSOR_NAMES's order without the absent ones.
typedef enum { FILE_GPT2, FILE_LLAMA3, FILE_LLAMA3_MASTER } ModelFileLayout;

typedef struct {
    int version;            // 3: fp32 values, 5: bf16 values
    ModelFileLayout layout; // detected from the header
} ModelFileFormat;

#define FILE_ZEROS (-1) // a slot of zeros: llm.c's Llama file keeps GPT-2's biases, all zero
#define FILE_NO_PART (-2)

typedef struct {
    int slot;    // the GPT-2 tensor whose place it takes: its name, and whether it is per layer
    int part[2]; // our tensors in each slice, back to back (FILE_NO_PART: none second; FILE_ZEROS)
} FileTensor;

// Elements of our tensor (of one layer's slice) in the file: Llama's files hold the vocabulary unpadded,
// so the padding rows of wte and lmhead are zeros in memory that the file leaves out.
static inline size_t model_file_tensor_size(const GPTConfig *cfg, int tensor) {
    if (cfg->arch == ARCH_LLAMA && (tensor == PT_TOKEN_EMBED || tensor == PT_LM_HEAD))
        return (size_t)cfg->vocab_size * cfg->channels;
    return param_tensor_size(cfg, tensor);
}

// Elements of one slice of a slot: its parts, or the bias of GPT-2's shape it stands for (one per output
// feature of the weight before it).
static inline size_t file_slot_size(const GPTConfig *cfg, const FileTensor *t) {
    if (t->part[0] == FILE_ZEROS)
        return t->slot == PT_QKV_B      ? (size_t)model_qkv_features(cfg)
               : t->slot == PT_MLP_UP_B ? (size_t)linear_out_features(cfg, LIN_MLP_UP)
                                        : (size_t)cfg->channels;
    size_t n = model_file_tensor_size(cfg, t->part[0]);
    return t->part[1] == FILE_NO_PART ? n : n + model_file_tensor_size(cfg, t->part[1]);
}

// The slots of a layout, in file order; returns their number.
static inline int model_file_slots(const GPTConfig *cfg, ModelFileLayout layout,
                                   FileTensor out[NUM_PARAM_TENSORS]) {
    int n = 0;
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        FileTensor slot = {t, {t, FILE_NO_PART}};
        if (layout == FILE_LLAMA3) {
            if (t == PT_MLP_GATE_W || t == PT_LM_HEAD) continue; // packed with fc, in wpe's slot
            if (t == PT_POS_EMBED) slot.part[0] = PT_LM_HEAD;
            if (t == PT_MLP_UP_W) slot.part[1] = PT_MLP_GATE_W;
            if (!param_in_arch(cfg, slot.part[0])) slot.part[0] = FILE_ZEROS;
        } else if (!param_in_arch(cfg, t)) {
            continue;
        }
        out[n++] = slot;
    }
    return n;
}

static inline size_t model_file_header_bytes(ModelFileLayout layout) {
    return (layout == FILE_LLAMA3 ? 2 : 1) * MODEL_FILE_HEADER_INTS * sizeof(int);
}

// The layout this project writes for a model: llm.c's C readers' (train_gpt2.c, train_llama3.cu).
static inline ModelFileLayout model_file_layout_written(const GPTConfig *cfg) {
    return cfg->arch == ARCH_LLAMA ? FILE_LLAMA3 : FILE_GPT2;
}

static inline size_t model_file_param_count(const GPTConfig *cfg, ModelFileLayout layout) {
    FileTensor slots[NUM_PARAM_TENSORS];
    size_t n = 0;
    for (int i = 0, count = model_file_slots(cfg, layout, slots); i < count; i++)
        n += (param_is_per_layer(slots[i].slot) ? (size_t)cfg->num_layers : 1) *
             file_slot_size(cfg, &slots[i]);
    return n;
}

// Llama's F from a header's multiple_of and ffn_dim_multiplier, as llm.c computes it (a float product).
static inline long llama_ffn_dim_from_header(int channels, int multiple_of, float multiplier) {
    long hidden = (long)(multiplier * (float)(8L * channels / 3));
    return (long)multiple_of * ((hidden + multiple_of - 1) / multiple_of);
}

// Calls visit(slice, count, ctx) for every tensor slice in file order.
typedef void (*SliceVisitor)(float *slice, size_t count, void *ctx);

typedef struct {
    FILE *file;
    const char *path;
    ModelFileFormat format;
    int writing; // reading fills the padding the file leaves out with zeros; writing skips it
} ModelFileIO;

static inline void write_slice(float *slice, size_t count, void *ctx) {
    ModelFileIO *io = (ModelFileIO *)ctx;
    fwrite_check(slice, sizeof(float), count, io->file, io->path);
}

static inline void read_slice(float *slice, size_t count, void *ctx) {
    ModelFileIO *io = (ModelFileIO *)ctx;
    if (io->format.version == 3) {
        fread_check(slice, sizeof(float), count, io->file, io->path);
        return;
    }
    uint16_t chunk[4096];
    for (size_t done = 0; done < count;) {
        size_t n = count - done < 4096 ? count - done : 4096;
        fread_check(chunk, sizeof(uint16_t), n, io->file, io->path);
        for (size_t i = 0; i < n; i++) slice[done + i] = bf16_to_float(chunk[i]);
        done += n;
    }
}

// Element offset in the file (past its header) of the start of our tensor's slice of `layer`.
static inline size_t model_file_offset(const GPTConfig *cfg, ModelFileLayout layout, int tensor, int layer) {
    FileTensor slots[NUM_PARAM_TENSORS];
    size_t offset = 0;
    for (int i = 0, count = model_file_slots(cfg, layout, slots); i < count; i++) {
        size_t slice = file_slot_size(cfg, &slots[i]);
        if (slots[i].part[0] == tensor || slots[i].part[1] == tensor)
            return offset + (size_t)layer * slice +
                   (slots[i].part[1] == tensor ? model_file_tensor_size(cfg, slots[i].part[0]) : 0);
        offset += (param_is_per_layer(slots[i].slot) ? (size_t)cfg->num_layers : 1) * slice;
    }
    fail("model file: tensor %s is not in this layout", PARAM_TENSOR_NAMES[tensor]);
}

// Calls visit(slice, count, ctx) for the pieces of the memory range [begin, begin + count) (data holds
// that range) that the file holds, each after seeking the file to where that piece lives; padding the file
// leaves out is zeroed when reading. A ZeRO rank reads or writes only its shard of a model this way.
static inline void visit_file_range(ModelFileIO *io, const GPTConfig *cfg, size_t begin, size_t count,
                                    float *data, SliceVisitor visit) {
    size_t bytes = io->format.version == 3 ? 4 : 2;
    for (size_t offset = begin; offset < begin + count;) {
        int tensor, layer;
        size_t end = param_locate(cfg, offset, &tensor, &layer), start = param_offset(cfg, tensor, layer);
        size_t file_end = start + model_file_tensor_size(cfg, tensor);
        if (offset >= file_end) { // padding
            size_t n = (end < begin + count ? end : begin + count) - offset;
            if (!io->writing) memset(data + (offset - begin), 0, n * sizeof(float));
            offset += n;
            continue;
        }
        size_t n = (file_end < begin + count ? file_end : begin + count) - offset;
        long position =
            (long)(model_file_header_bytes(io->format.layout) +
                   (model_file_offset(cfg, io->format.layout, tensor, layer) + offset - start) * bytes);
        if (fseek(io->file, position, SEEK_SET) != 0) fail("%s: cannot seek: %s", io->path, strerror(errno));
        visit(data + (offset - begin), n, io);
        offset += n;
    }
}

// The header of the Llama file we write, as llm.c's train_llama3.py (llama3 branch) writes it: integer and
// float sections, the Llama version 3.1. F is written as multiple_of = F with a multiplier that gives F
// back through llm.c's formula (the multiplier and multiple_of a model was made with are not kept: only
// F is computed from them).
static inline void llama_file_header(const GPTConfig *cfg, int header[2 * MODEL_FILE_HEADER_INTS]) {
    int F = cfg->ffn_dim, hidden = 8 * cfg->channels / 3;
    float multiplier = hidden <= F ? 1.0f : (float)F / (float)hidden;
    if (llama_ffn_dim_from_header(cfg->channels, F, multiplier) != F)
        fail("ffn_dim %d: cannot be written as an llm.c Llama header with %d channels", F, cfg->channels);
    float floats[3] = {multiplier, LLAMA_NORM_EPS, cfg->rope_theta};
    header[0] = LLAMA_MODEL_FILE_MAGIC;
    header[1] = 3;
    header[2] = cfg->max_seq_len;
    header[3] = cfg->vocab_size;
    header[4] = cfg->num_layers;
    header[5] = cfg->num_heads;
    header[6] = cfg->num_kv_heads;
    header[7] = cfg->channels;
    header[8] = F;
    header[9] = cfg->scaled_rope;
    header[10] = 3; // the Llama version llm.c's writer records
    header[11] = 1;
    memcpy(header + MODEL_FILE_HEADER_INTS, floats, sizeof(floats));
}

// A model file being written (version 3) at tmp, at its full size (what no range is written to, llm.c's
// zero biases among it, reads as zeros), to be completed by model_file_write_range in any order.
static inline FILE *model_file_create(const char *path, char *tmp, size_t tmp_len, const GPTConfig *cfg) {
    FILE *f = atomic_open(path, tmp, tmp_len);
    int header[2 * MODEL_FILE_HEADER_INTS] = {0};
    ModelFileLayout layout = model_file_layout_written(cfg);
    if (layout == FILE_LLAMA3) {
        llama_file_header(cfg, header);
    } else {
        header[0] = MODEL_FILE_MAGIC;
        header[1] = 3;
        header[2] = cfg->max_seq_len;
        header[3] = cfg->vocab_size;
        header[4] = cfg->num_layers;
        header[5] = cfg->num_heads;
        header[6] = cfg->channels;
        header[7] = cfg->padded_vocab_size;
    }
    fwrite_check(header, 1, model_file_header_bytes(layout), f, tmp);
    off_t bytes =
        (off_t)(model_file_header_bytes(layout) + model_file_param_count(cfg, layout) * sizeof(float));
    if (fflush(f) != 0 || ftruncate(fileno(f), bytes) != 0)
        fail("%s: cannot size to %lld bytes: %s; %s is left as it was", tmp, (long long)bytes,
             strerror(errno), path);
    return f;
}

static inline void model_file_write_range(FILE *f, const char *tmp, const GPTConfig *cfg, size_t begin,
                                          size_t count, const float *data) {
    ModelFileIO io = {f, tmp, {3, model_file_layout_written(cfg)}, 1};
    visit_file_range(&io, cfg, begin, count, (float *)data, write_slice);
}

// A model file written by all ranks at once, each its own ranges, so that no rank holds the whole model
// and the write takes 1/N of one rank's time: rank 0 creates the temp file (the header, the file at its
// full size), then, after a barrier, every rank opens it (model_file_open_part), writes its ranges in
// place (model_file_write_range) and flushes them to disk (atomic_close); after a second barrier rank 0
// renames it over the path (atomic_publish). A failure on any rank leaves the path as it was.
static inline void model_file_create_sized(const char *path, char *tmp, size_t tmp_len,
                                           const GPTConfig *cfg) {
    atomic_close(model_file_create(path, tmp, tmp_len, cfg), tmp, path);
}

static inline FILE *model_file_open_part(const char *path, char *tmp, size_t tmp_len) {
    temp_path(path, tmp, tmp_len);
    FILE *f = fopen(tmp, "r+b");
    if (!f)
        fail("%s: cannot open to write this rank's part: %s (rank 0 created it; was it removed by hand?)",
             tmp, strerror(errno));
    return f;
}

// The part rank `rank` of `ranks` writes of parameters every rank holds whole: an equal share.
static inline void model_file_share(size_t num_params, int rank, int ranks, size_t *begin, size_t *count) {
    *begin = num_params * (size_t)rank / (size_t)ranks;
    *count = num_params * (size_t)(rank + 1) / (size_t)ranks - *begin;
}

// One process's model file: the parallel write with one rank.
static inline void save_model_file(const char *path, const float *params, const GPTConfig *cfg) {
    char tmp[CHECKPOINT_PATH_LEN];
    model_file_create_sized(path, tmp, sizeof(tmp), cfg);
    FILE *f = model_file_open_part(path, tmp, sizeof(tmp));
    model_file_write_range(f, tmp, cfg, 0, param_count(cfg), params);
    atomic_close(f, tmp, path);
    atomic_publish(tmp, path);
}

// Which of llm.c's two Llama layouts a header is, from the slots each writer fills: the llama3 branch's
// integer section ends at [11] with the Llama version at [10, 11]; master's ends at [15], its [10] the
// RMSNorm epsilon truncated to an int (0) and the version at [14, 15].
static inline ModelFileLayout llama_file_layout(const char *path, const int h[MODEL_FILE_HEADER_INTS]) {
    int zeros_from = h[10] == 3 ? 12 : h[10] == 0 && h[14] == 3 ? 16 : -1;
    for (int i = zeros_from < 0 ? MODEL_FILE_HEADER_INTS : zeros_from; i < MODEL_FILE_HEADER_INTS; i++)
        if (h[i] != 0) zeros_from = -1;
    if (zeros_from < 0)
        fail("%s: a Llama header of neither layout llm.c writes (ints [10..15] = %d %d %d %d %d %d; its "
             "llama3 "
             "branch: [10, 11] the Llama version 3.x, then zeros; master: [10] 0, [14, 15] 3.x, then zeros)",
             path, h[10], h[11], h[12], h[13], h[14], h[15]);
    return zeros_from == 12 ? FILE_LLAMA3 : FILE_LLAMA3_MASTER;
}

// The configuration of a llama3-branch header (the integer section h read, its float section next).
static inline GPTConfig read_llama3_header(FILE *f, const char *path, const int h[MODEL_FILE_HEADER_INTS]) {
    float floats[MODEL_FILE_HEADER_INTS];
    fread_check(floats, sizeof(float), MODEL_FILE_HEADER_INTS, f, path);
    GPTConfig cfg = {h[2],       h[3], pad_vocab(h[3] > 0 && h[3] <= MODEL_MAX_VOCAB ? h[3] : 1),
                     h[4],       h[5], h[7],
                     ARCH_LLAMA, h[6], 0,
                     floats[2],  h[9]};
    if (floats[1] != LLAMA_NORM_EPS)
        fail("%s: RMSNorm epsilon %g; this trainer computes with %g", path, floats[1], LLAMA_NORM_EPS);
    if (cfg.channels > 0 && cfg.channels <= MODEL_MAX_CHANNELS && h[8] > 0 &&
        h[8] <= 4 * MODEL_MAX_CHANNELS && floats[0] > 0.0f && floats[0] <= 16.0f) {
        long F = llama_ffn_dim_from_header(cfg.channels, h[8], floats[0]);
        cfg.ffn_dim = F > 0 && F <= 4 * MODEL_MAX_CHANNELS ? (int)F : 0;
    }
    if (cfg.ffn_dim == 0 && cfg.channels > 0 && cfg.channels <= MODEL_MAX_CHANNELS)
        fail("%s: multiple_of %d and ffn_dim_multiplier %g give no SwiGLU width (F) for %d channels", path,
             h[8], floats[0], cfg.channels);
    return cfg;
}

// The configuration of a master header, which its writer truncated to ints throughout: [8]
// ffn_dim_multiplier (1.3 reads 1), [9] multiple_of, [10] norm_eps (reads 0), [11] rope_theta, [12]
// use_scaled_rope, [13] max_gen_batch_size. F is left to the file's size (llama3_master_ffn_dim), and the
// epsilon is taken as the 1e-5 of every configuration llm.c has (Llama 3's).
static inline GPTConfig read_llama3_master_header(const int h[MODEL_FILE_HEADER_INTS]) {
    GPTConfig cfg = {h[2],         h[3], pad_vocab(h[3] > 0 && h[3] <= MODEL_MAX_VOCAB ? h[3] : 1),
                     h[4],         h[5], h[7],
                     ARCH_LLAMA,   h[6], 0,
                     (float)h[11], h[12]};
    return cfg;
}

// F of a master file: what its size leaves for the three (L, F, C) SwiGLU weights, which must be a width
// llm.c's formula gives with the header's multiple_of and a multiplier its truncated slot allows, [k, k+1).
static inline int llama3_master_ffn_dim(const char *path, GPTConfig cfg, int64_t size, int version,
                                        const int h[MODEL_FILE_HEADER_INTS]) {
    int k = h[8], multiple_of = h[9];
    int64_t bytes = version == 3 ? 4 : 2, data = size - (int64_t)model_file_header_bytes(FILE_LLAMA3_MASTER);
    cfg.ffn_dim = 0;
    int64_t rest = data / bytes - (int64_t)model_file_param_count(&cfg, FILE_LLAMA3_MASTER);
    int64_t per_feature = 3 * (int64_t)cfg.num_layers * cfg.channels, F = rest / per_feature;
    int64_t hidden = 8 * (int64_t)cfg.channels / 3, lo = (int64_t)k * hidden, hi = lo + hidden - 1;
    int ok = data % bytes == 0 && rest > 0 && rest % per_feature == 0 && F <= 4 * MODEL_MAX_CHANNELS &&
             multiple_of > 0 && k >= 0 && k <= 16 && F % multiple_of == 0 &&
             F >= (lo + multiple_of - 1) / multiple_of * multiple_of &&
             F <= (hi + multiple_of - 1) / multiple_of * multiple_of;
    if (!ok)
        fail("%s: size %ld fits no SwiGLU width of llm.c master's layout (multiple_of %d, ffn_dim_multiplier "
             "in "
             "[%d, %d)): truncated or corrupt",
             path, (long)size, multiple_of, k, k + 1);
    return (int)F;
}

// A llama3-branch file keeps GPT-2's biases as zeros: one whose biases are not zero is a model these
// trainers do not compute (they have no biases to hold them), so it is refused.
static inline void check_zero_slots(FILE *f, const char *path, const GPTConfig *cfg, ModelFileFormat format) {
    FileTensor slots[NUM_PARAM_TENSORS];
    ModelFileIO io = {f, path, format, 0};
    float chunk[4096];
    size_t offset = 0, bytes = format.version == 3 ? 4 : 2;
    for (int i = 0, count = model_file_slots(cfg, format.layout, slots); i < count; i++) {
        size_t slice = file_slot_size(cfg, &slots[i]);
        size_t n = (param_is_per_layer(slots[i].slot) ? (size_t)cfg->num_layers : 1) * slice;
        if (slots[i].part[0] == FILE_ZEROS) {
            if (fseek(f, (long)(model_file_header_bytes(format.layout) + offset * bytes), SEEK_SET) != 0)
                fail("%s: cannot seek: %s", path, strerror(errno));
            for (size_t done = 0; done < n; done += 4096) {
                size_t m = n - done < 4096 ? n - done : 4096;
                read_slice(chunk, m, &io);
                for (size_t j = 0; j < m; j++)
                    if (chunk[j] != 0.0f)
                        fail("%s: %s (layer %zu, element %zu) is %g, not 0: llm.c's Llama layout keeps "
                             "GPT-2's "
                             "biases as zeros, and Llama has none",
                             path, PARAM_TENSOR_NAMES[slots[i].slot], (done + j) / slice, (done + j) % slice,
                             chunk[j]);
            }
        }
        offset += n;
    }
}

// A model whose every weight tensor is constant (all zeros: a file whose writer died before writing its
// values, or a zeroed copy) trains nowhere (its loss stays ln V), so it is refused. Real models differ
// within their first tensor's first values: the read stops there.
static inline void check_model_not_constant(FILE *f, const char *path, const GPTConfig *cfg,
                                            ModelFileFormat format) {
    FileTensor slots[NUM_PARAM_TENSORS];
    ModelFileIO io = {f, path, format, 0};
    float chunk[4096];
    size_t offset = 0, bytes = format.version == 3 ? 4 : 2;
    for (int i = 0, count = model_file_slots(cfg, format.layout, slots); i < count; i++) {
        size_t n = (param_is_per_layer(slots[i].slot) ? (size_t)cfg->num_layers : 1) *
                   file_slot_size(cfg, &slots[i]);
        if (slots[i].part[0] != FILE_ZEROS) {
            if (fseek(f, (long)(model_file_header_bytes(format.layout) + offset * bytes), SEEK_SET) != 0)
                fail("%s: cannot seek: %s", path, strerror(errno));
            float first = 0.0f;
            for (size_t done = 0; done < n; done += 4096) {
                size_t m = n - done < 4096 ? n - done : 4096;
                read_slice(chunk, m, &io);
                if (done == 0) first = chunk[0];
                for (size_t j = 0; j < m; j++)
                    if (chunk[j] != first) return;
            }
        }
        offset += n;
    }
    fail("%s: every weight tensor is constant (an all-zero or unwritten model): not a model to train from",
         path);
}

// Reads the header of a model file and checks it describes a model, and that the file holds exactly it.
static inline GPTConfig read_model_header(FILE *f, const char *path, ModelFileFormat *format) {
    int64_t size = file_size_check(f, path);
    int header[MODEL_FILE_HEADER_INTS];
    if (size < (int64_t)sizeof(header))
        fail("%s: too short for a model file header (%ld bytes)", path, (long)size);
    fread_check(header, sizeof(int), MODEL_FILE_HEADER_INTS, f, path);
    if (header[0] != MODEL_FILE_MAGIC && header[0] != LLAMA_MODEL_FILE_MAGIC)
        fail("%s: not an llm.c model file (magic %d, expected %d for GPT-2 or %d for Llama)", path, header[0],
             MODEL_FILE_MAGIC, LLAMA_MODEL_FILE_MAGIC);
    if (header[1] != 3 && header[1] != 5)
        fail("%s: unsupported model file version %d (expected 3 fp32 or 5 bf16)", path, header[1]);
    ModelFileLayout layout = header[0] == MODEL_FILE_MAGIC ? FILE_GPT2 : llama_file_layout(path, header);
    if (layout == FILE_LLAMA3 && size < 2 * (int64_t)sizeof(header))
        fail("%s: too short for a Llama model file header (%ld bytes)", path, (long)size);
    GPTConfig cfg =
        layout == FILE_LLAMA3 ? read_llama3_header(f, path, header)
        : layout == FILE_LLAMA3_MASTER
            ? read_llama3_master_header(header)
            : (GPTConfig){header[2], header[3], header[7], header[4], header[5], header[6], 0, 0, 0, 0.0f, 0};
    // the flags' ranges (cli.h) bound every dimension, so the sizes computed from them cannot overflow
    if (cfg.max_seq_len <= 0 || cfg.max_seq_len > MODEL_MAX_SEQ_LEN || cfg.vocab_size <= 1 ||
        cfg.vocab_size > MODEL_MAX_VOCAB || cfg.num_layers <= 0 || cfg.num_layers > MODEL_MAX_LAYERS ||
        cfg.num_heads <= 0 || cfg.num_heads > MODEL_MAX_HEADS || cfg.channels <= 0 ||
        cfg.channels > MODEL_MAX_CHANNELS || cfg.channels % cfg.num_heads != 0 ||
        cfg.padded_vocab_size < cfg.vocab_size || cfg.padded_vocab_size > MODEL_MAX_VOCAB + 128)
        fail("%s: header describes an invalid model (maxT %d V %d L %d NH %d C %d Vp %d)", path,
             cfg.max_seq_len, cfg.vocab_size, cfg.num_layers, cfg.num_heads, cfg.channels,
             cfg.padded_vocab_size);
    if (cfg.arch == ARCH_LLAMA) {
        if (cfg.num_kv_heads <= 0 || cfg.num_heads % cfg.num_kv_heads != 0 ||
            (cfg.channels / cfg.num_heads) % 2 != 0)
            fail("%s: header describes an invalid Llama model (NH %d KVH %d C %d)", path, cfg.num_heads,
                 cfg.num_kv_heads, cfg.channels);
        if (cfg.scaled_rope != 0 && cfg.scaled_rope != 1)
            fail("%s: use_scaled_rope %d is neither 0 nor 1 (Llama 3.1's scaled rotary wavelengths)", path,
                 cfg.scaled_rope);
        if (!(cfg.rope_theta > 0.0f && cfg.rope_theta <= 1e9f))
            fail("%s: rope_theta %g is out of range (0, 1e9]", path, cfg.rope_theta);
    }
    if (layout == FILE_LLAMA3_MASTER) cfg.ffn_dim = llama3_master_ffn_dim(path, cfg, size, header[1], header);
    *format = (ModelFileFormat){header[1], layout};
    int64_t bytes = header[1] == 3 ? 4 : 2, header_bytes = (int64_t)model_file_header_bytes(layout);
    int64_t expected = header_bytes + (int64_t)model_file_param_count(&cfg, layout) * bytes;
    if (size != expected && layout == FILE_LLAMA3 &&
        size == header_bytes + (int64_t)model_file_param_count(&cfg, FILE_LLAMA3_MASTER) * bytes)
        fail("%s: the llama3 branch's header over master's tensor order, which no llm.c reader reads (what "
             "fp8gpt wrote before it wrote llm.c's layout): not read here either",
             path);
    if (size != expected)
        fail("%s: size %ld does not match its header (expected %ld bytes): truncated or corrupt", path,
             (long)size, (long)expected);
    return cfg;
}

// The model a file holds, its header checked as read_model_header does and, in llm.c's Llama layout, its
// zero biases (once per file: the readers of a rank's ranges, load_model_range, leave them out).
static inline GPTConfig read_model_file_config(FILE *f, const char *path, ModelFileFormat *format) {
    GPTConfig cfg = read_model_header(f, path, format);
    if (format->layout == FILE_LLAMA3) check_zero_slots(f, path, &cfg, *format);
    check_model_not_constant(f, path, &cfg, *format);
    return cfg;
}

// The model shape of a model file (its values are read per shard later, with load_model_range).
static inline GPTConfig model_file_config(const char *path) {
    FILE *f = fopen_regular(path);
    ModelFileFormat format;
    GPTConfig cfg = read_model_file_config(f, path, &format);
    fclose(f);
    return cfg;
}

// --init_from's file sets the model's shape: a shape flag given with it that disagrees with the file is
// refused (it would otherwise be dropped without a word), naming the flag and both values.
static inline void check_init_from_shape(const TrainOptions *opts, const GPTConfig *cfg) {
    const char *names[] = {"layers", "channels", "heads", "kv_heads", "ffn_dim", "vocab", "max_seq_len"};
    const int given[] = {opts->layers,  opts->channels, opts->heads,      opts->kv_heads,
                         opts->ffn_dim, opts->vocab,    opts->max_seq_len};
    const int file[] = {cfg->num_layers,    cfg->channels,   cfg->num_heads,  model_kv_heads(cfg),
                        model_ffn_dim(cfg), cfg->vocab_size, cfg->max_seq_len};
    for (int i = 0; i < (int)(sizeof(given) / sizeof(given[0])); i++)
        if (given[i] && given[i] != file[i])
            fail("--%s %d: --init_from %s has %s %d; leave the flag out (the file sets the model's shape)",
                 names[i], given[i], opts->init_from, names[i], file[i]);
    if (opts->rope_theta && opts->rope_theta != cfg->rope_theta)
        fail("--rope_theta %g: --init_from %s has rope_theta %g; leave the flag out (the file sets the "
             "model's shape)",
             (double)opts->rope_theta, opts->init_from, (double)cfg->rope_theta);
    int arch = arch_chosen(opts);
    if (arch >= 0 && arch != cfg->arch)
        fail("--arch %s: --init_from %s is a %s model; leave the flag out (the file sets the model's shape)",
             arch_parts(arch).name, opts->init_from, model_parts(cfg).name);
}

// Parameters [begin, begin + count) of a model just read, in values: a NaN or infinity would train on
// into NaN checkpoints, so it is refused, naming where it is. owned: a buffer freed before the refusal (NULL:
// none), where it is the caller's only reference, which the exit's leak check would otherwise report.
static inline void check_finite_params(const char *path, const GPTConfig *cfg, size_t begin, size_t count,
                                       const float *values, void *owned) {
    for (size_t i = 0; i < count; i++) {
        if (isfinite(values[i])) continue;
        int tensor, layer, nan = isnan(values[i]);
        param_locate(cfg, begin + i, &tensor, &layer);
        free(owned);
        fail("%s: parameter %zu of %s (layer %d) is %s: not a usable model (a diverged run's?)", path,
             begin + i - param_offset(cfg, tensor, layer), PARAM_TENSOR_NAMES[tensor], layer,
             nan ? "NaN" : "infinite");
    }
}

// Loads a model file into a freshly allocated FP32 parameter buffer in our layout.
static inline float *load_model_file(const char *path, GPTConfig *cfg_out) {
    FILE *f = fopen_regular(path);
    ModelFileFormat format;
    GPTConfig cfg = read_model_file_config(f, path, &format);
    float *params = (float *)malloc_check(param_count(&cfg) * sizeof(float), "model parameters");
    ModelFileIO io = {f, path, format, 0};
    visit_file_range(&io, &cfg, 0, param_count(&cfg), params, read_slice);
    fclose(f);
    check_finite_params(path, &cfg, 0, param_count(&cfg), params, params);
    *cfg_out = cfg;
    return params;
}

static inline void check_model_shape(const char *path, const GPTConfig *cfg, const GPTConfig *expected) {
    if (memcmp(cfg, expected, sizeof(*cfg)) != 0)
        fail("%s: model shape (%s L %d C %d NH %d KVH %d F %d V %d maxT %d theta %g%s) differs from this "
             "run's "
             "flags",
             path, model_parts(cfg).name, cfg->num_layers, cfg->channels, cfg->num_heads, model_kv_heads(cfg),
             model_ffn_dim(cfg), cfg->vocab_size, cfg->max_seq_len, cfg->rope_theta,
             cfg->scaled_rope ? " scaled" : "");
}

// The model file of a checkpoint this run continues: refused if its shape is not this run's.
static inline float *load_checkpoint_model(const char *path, const GPTConfig *expected) {
    GPTConfig cfg;
    float *params = load_model_file(path, &cfg);
    check_model_shape(path, &cfg, expected);
    return params;
}

// Elements [begin, begin + count) of the parameters of a model file whose shape must be `expected`.
static inline void load_model_range(const char *path, const GPTConfig *expected, size_t begin, size_t count,
                                    float *out) {
    FILE *f = fopen_regular(path);
    ModelFileFormat format;
    GPTConfig cfg = read_model_header(f, path, &format);
    check_model_shape(path, &cfg, expected);
    if (begin == 0) check_model_not_constant(f, path, &cfg, format); // once per model: the range at 0
    ModelFileIO io = {f, path, format, 0};
    visit_file_range(&io, &cfg, begin, count, out, read_slice);
    fclose(f);
    check_finite_params(path, &cfg, begin, count, out, NULL);
}

#endif // MODEL_FILE_H

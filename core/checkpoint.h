// core/checkpoint.h: the files a run reads and writes, shared by both trainers.
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
//  - Training state, one file per rank: a 64 x int64 header (magic, version, position, shapes), then
//    the AdamW moments of this rank's parameters, the FP8 amax histories and the step guard's window
//    of recent losses and norms (health.h). Scales are not stored:
//    they are a function of the histories (fp8_compute_scale of their max).
//  - `manifest_<step>.txt`: each file's size and digest, read back from disk once written; a resume checks
//    them before it trusts the checkpoint, and falls back to an older one that passes (the digests' section).
//  - `latest_checkpoint` in the output directory names the step of the last complete checkpoint. It is
//    replaced only after every file of that step is durable, and every file is written to a temp
//    name, fsync'ed and renamed, so a run killed at any moment resumes from a complete checkpoint.
#ifndef CHECKPOINT_H
#define CHECKPOINT_H

#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "common.h"
#include "dataloader.h"
#include "dist.h"
#include "fp8_scaling.h"
#include "gpt_model.h"

#define CHECKPOINT_PATH_LEN 1200 // fits --output_dir (at most 511 characters) and a file name
#define MODEL_FILE_MAGIC 20240326
#define LLAMA_MODEL_FILE_MAGIC 20240803
#define MODEL_FILE_HEADER_INTS 256
#define LLAMA_NORM_EPS 1e-5f // RMSNorm's epsilon, the only one Llama files here carry
#define STATE_FILE_MAGIC 20261130
#define STATE_FILE_VERSION                                                                                   \
    4 // 2: with the run identity; 3: its data fingerprint of whole shards; 4: its
      // model file's digest
#define STATE_FILE_HEADER_INTS 64

// ----------------------------------------------------------------------------
// Atomic writes: data goes to "<path>.<run tag>.tmp", is flushed to disk, then renamed over <path>. A run
// that ends on an error while a temp file is open (a full disk, say) removes it at exit: what it replaces
// stays as it was, and nothing half-written is left beside it. The run tag (run_files.h, agreed by the
// ranks, since all of them write into the model file's temp that rank 0 created) keeps two processes that
// write one path from truncating each other's temp file; a killed run's leftovers are removed by the next
// run that takes the directory (run_dir_claim).

#define MAX_OPEN_TEMP_FILES 4
static char open_temp_files[MAX_OPEN_TEMP_FILES][CHECKPOINT_PATH_LEN];

static inline void remove_open_temp_files(void) {
    for (int i = 0; i < MAX_OPEN_TEMP_FILES; i++)
        if (open_temp_files[i][0]) remove(open_temp_files[i]);
}

static inline void note_temp_file(const char *tmp_path, int open) {
    static int registered = 0;
    if (!registered) registered = !atexit(remove_open_temp_files);
    for (int i = 0; i < MAX_OPEN_TEMP_FILES; i++) {
        if (open && !open_temp_files[i][0]) {
            snprintf(open_temp_files[i], CHECKPOINT_PATH_LEN, "%s", tmp_path);
            return;
        }
        if (!open && strcmp(open_temp_files[i], tmp_path) == 0) {
            open_temp_files[i][0] = '\0';
            return;
        }
    }
}

// Until the ranks agree on a run tag, the process id: unique on this host, and what is written then
// (rank 0's NCCL id file) is written by one rank only.
static char run_tag[24];

static inline void temp_path(const char *path, char *tmp_path, size_t tmp_len) {
    if (!run_tag[0]) snprintf(run_tag, sizeof(run_tag), "p%ld", (long)getpid());
    if ((size_t)snprintf(tmp_path, tmp_len, "%s.%s.tmp", path, run_tag) >= tmp_len)
        fail("%s: path too long", path);
}

static inline FILE *atomic_open(const char *path, char *tmp_path, size_t tmp_len) {
    temp_path(path, tmp_path, tmp_len);
    FILE *f = fopen_check(tmp_path, "wb");
    note_temp_file(tmp_path, 1);
    return f;
}

static inline void fsync_parent_dir(const char *path) {
    char dir[CHECKPOINT_PATH_LEN];
    if ((size_t)snprintf(dir, sizeof(dir), "%s", path) >= sizeof(dir)) fail("%s: path too long", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    else
        strcpy(dir, ".");
    int fd = open(dir, O_RDONLY);
    if (fd >= 0) {
        fsync(fd); // a directory that cannot be fsync'ed (some network filesystems) still got the rename
        close(fd);
    }
}

// The temp file's data on disk, then the file closed (the first half of atomic_commit).
static inline void atomic_close(FILE *f, const char *tmp_path, const char *path) {
    if (ferror(f)) fail("%s: a write failed (disk full?); %s is left as it was", tmp_path, path);
    if (fflush(f) != 0 || fsync(fileno(f)) != 0)
        fail("%s: cannot flush to disk: %s; %s is left as it was", tmp_path, strerror(errno), path);
    if (fclose(f) != 0) fail("%s: close failed: %s; %s is left as it was", tmp_path, strerror(errno), path);
}

// The closed, durable temp file renamed over path (the second half).
static inline void atomic_publish(const char *tmp_path, const char *path) {
    if (rename(tmp_path, path) != 0) fail("%s: cannot rename to %s: %s", tmp_path, path, strerror(errno));
    note_temp_file(tmp_path, 0);
    fsync_parent_dir(path);
}

static inline void atomic_commit(FILE *f, const char *tmp_path, const char *path) {
    atomic_close(f, tmp_path, path);
    atomic_publish(tmp_path, path);
}

// mkdir -p
static inline void make_dir(const char *path) {
    char partial[CHECKPOINT_PATH_LEN];
    if ((size_t)snprintf(partial, sizeof(partial), "%s", path) >= sizeof(partial))
        fail("%s: path too long", path);
    for (char *p = partial + 1;; p++) {
        if (*p != '/' && *p != '\0') continue;
        char saved = *p;
        *p = '\0';
        struct stat st;
        // EEXIST: another rank created it between the stat and the mkdir
        if (stat(partial, &st) != 0 && mkdir(partial, 0755) != 0 && errno != EEXIST)
            fail("--output_dir: cannot create directory %s: %s", path, strerror(errno));
        if (stat(partial, &st) == 0 && !S_ISDIR(st.st_mode))
            fail("--output_dir: cannot create directory %s: %s is not a directory", path, partial);
        char target[CHECKPOINT_PATH_LEN];
        ssize_t n = stat(partial, &st) != 0 ? readlink(partial, target, sizeof(target) - 1) : -1;
        if (n >= 0) {
            target[n] = '\0';
            fail("--output_dir: %s is a symbolic link to %s, which does not exist: create it or name another "
                 "directory",
                 partial, target);
        }
        *p = saved;
        if (saved == '\0') break;
    }
}

// Creates the output directory and proves it writable before any training, so a typo costs nothing.
static inline void prepare_output_dir(const char *dir) {
    if (!*dir) return;
    make_dir(dir);
    char probe[CHECKPOINT_PATH_LEN];
    snprintf(probe, sizeof(probe), "%s/.write_probe_%ld", dir, (long)getpid()); // one per rank
    FILE *f = fopen(probe, "wb");
    if (!f) fail("--output_dir: %s is not writable: %s", dir, strerror(errno));
    fclose(f);
    remove(probe);
}

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
    if (model_is_llama(cfg) && (tensor == PT_WTE || tensor == PT_LMHEAD))
        return (size_t)cfg->vocab_size * cfg->channels;
    return param_tensor_size(cfg, tensor);
}

// Elements of one slice of a slot: its parts, or the bias of GPT-2's shape it stands for (one per output
// feature of the weight before it).
static inline size_t file_slot_size(const GPTConfig *cfg, const FileTensor *t) {
    if (t->part[0] == FILE_ZEROS)
        return t->slot == PT_QKVB  ? (size_t)model_qkv_features(cfg)
               : t->slot == PT_FCB ? (size_t)linear_out_features(cfg, LIN_FC)
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
            if (t == PT_FCGATEW || t == PT_LMHEAD) continue; // packed with fc, in wpe's slot
            if (t == PT_WPE) slot.part[0] = PT_LMHEAD;
            if (t == PT_FCW) slot.part[1] = PT_FCGATEW;
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
    return model_is_llama(cfg) ? FILE_LLAMA3 : FILE_GPT2;
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
    if (model_is_llama(&cfg)) {
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
    int arch = opts->arch == ARCH_CHOICE_LLAMA ? ARCH_LLAMA : ARCH_GPT2;
    if (opts->arch != ARCH_CHOICE_AUTO && arch != cfg->arch)
        fail("--arch %s: --init_from %s is a %s model; leave the flag out (the file sets the model's shape)",
             arch == ARCH_LLAMA ? "llama" : "gpt2", opts->init_from, model_is_llama(cfg) ? "llama" : "gpt2");
}

// Parameters [begin, begin + count) of a model just read, in values: a NaN or infinity would train on
// into NaN checkpoints, so it is refused, naming where it is.
static inline void check_finite_params(const char *path, const GPTConfig *cfg, size_t begin, size_t count,
                                       const float *values) {
    for (size_t i = 0; i < count; i++) {
        if (isfinite(values[i])) continue;
        int tensor, layer;
        param_locate(cfg, begin + i, &tensor, &layer);
        fail("%s: parameter %zu of %s (layer %d) is %s: not a usable model (a diverged run's?)", path,
             begin + i - param_offset(cfg, tensor, layer), PARAM_TENSOR_NAMES[tensor], layer,
             isnan(values[i]) ? "NaN" : "infinite");
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
    check_finite_params(path, &cfg, 0, param_count(&cfg), params);
    *cfg_out = cfg;
    return params;
}

static inline void check_model_shape(const char *path, const GPTConfig *cfg, const GPTConfig *expected) {
    if (memcmp(cfg, expected, sizeof(*cfg)) != 0)
        fail("%s: model shape (%s L %d C %d NH %d KVH %d F %d V %d maxT %d theta %g%s) differs from this "
             "run's "
             "flags",
             path, model_is_llama(cfg) ? "llama" : "gpt2", cfg->num_layers, cfg->channels, cfg->num_heads,
             model_kv_heads(cfg), model_ffn_dim(cfg), cfg->vocab_size, cfg->max_seq_len, cfg->rope_theta,
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
    check_finite_params(path, &cfg, begin, count, out);
}

// ----------------------------------------------------------------------------
// Training state

// The settings a continuation must share besides the model shape, the dtype and the data order, so that
// a checkpoint of another run is refused rather than continued into a hybrid of two. --steps is not
// among them: a run may be extended.
typedef struct {
    float lr, final_lr_frac, beta1, beta2, eps, weight_decay, grad_clip, skip_loss_z, skip_norm_z;
    int lr_schedule, warmup_steps, fp8_margin, fp8_pow2_scales;
    int64_t tokens_per_step;   // B * T * accumulation * processes
    uint64_t data_fingerprint; // of --train_data (dataloader_fingerprint)
} RunIdentity;

typedef struct {
    int64_t step;            // optimizer steps completed
    int64_t updates_applied; // AdamW's t: steps not skipped by the NaN/Inf guard
    int64_t skipped_steps;
    int64_t consecutive_skips; // the guards' skips in a row up to this step (run_control.h)
    DataLoaderPosition train_position;
    int rank, world_size;
    int dtype, fp8_recipe, amax_history_len;
    int batch_size, seq_len;
    int seed, shuffle;     // the data order: a resumed run must draw the same
    long long guard_count; // finite steps recorded in the step guard's window (health.h)
    int zero_stage;        // with shard_group, how the moments of this file are sharded (dist.h)
    int shard_group;       // the ranks a shard spans (--shard_group_size; 0 or world_size: all of them)
    uint64_t model_digest; // of the model file written with this state (checkpoint_model_digest)
    RunIdentity identity;
} TrainState;

// The state of a fresh run with these options on this training data; a resume then checks the checkpoint
// against it.
static inline TrainState train_state_init(const TrainOptions *opts, DataLoader *train, int B, int T,
                                          int accum_steps, int rank, int world_size) {
    TrainState st;
    memset(&st, 0, sizeof(st));
    st.rank = rank;
    st.world_size = world_size;
    st.dtype = opts->dtype;
    st.fp8_recipe = opts->fp8_recipe;
    st.amax_history_len = opts->amax_history;
    st.batch_size = B;
    st.seq_len = T;
    st.seed = opts->seed;
    st.shuffle = opts->shuffle;
    st.zero_stage = opts->zero_stage;
    st.shard_group = resolve_shard_group(opts, world_size);
    RunIdentity *id = &st.identity;
    id->lr = opts->lr;
    id->final_lr_frac = opts->final_lr_frac;
    id->beta1 = opts->beta1;
    id->beta2 = opts->beta2;
    id->eps = opts->eps;
    id->weight_decay = opts->weight_decay;
    id->grad_clip = opts->grad_clip;
    id->skip_loss_z = opts->skip_loss_z;
    id->skip_norm_z = opts->skip_norm_z;
    id->lr_schedule = opts->lr_schedule;
    id->warmup_steps = opts->warmup_steps;
    id->fp8_margin = opts->fp8_margin;
    id->fp8_pow2_scales = opts->fp8_pow2_scales;
    id->tokens_per_step = (int64_t)B * T * accum_steps * world_size;
    id->data_fingerprint = dataloader_fingerprint(train);
    return st;
}

enum {
    SH_MAGIC,
    SH_VERSION,
    SH_RANK,
    SH_WORLD,
    SH_STEP,
    SH_UPDATES,
    SH_SKIPPED,
    SH_EPOCH,
    SH_SHARD,
    SH_BATCH,
    SH_MOMENTS,
    SH_HISTORY_FLOATS,
    SH_DTYPE,
    SH_RECIPE,
    SH_HISTORY_LEN,
    SH_LAYERS,
    SH_CHANNELS,
    SH_VOCAB,
    SH_MAXT,
    SH_HEADS,
    SH_BATCH_SIZE,
    SH_SEQ_LEN,
    SH_SEED,
    SH_SHUFFLE,
    SH_GUARD_FLOATS,
    SH_GUARD_COUNT,
    SH_ZERO_STAGE,
    SH_LR, // the run identity: floats as their bits
    SH_FINAL_LR_FRAC,
    SH_BETA1,
    SH_BETA2,
    SH_EPS,
    SH_WEIGHT_DECAY,
    SH_GRAD_CLIP,
    SH_SKIP_LOSS_Z,
    SH_SKIP_NORM_Z,
    SH_LR_SCHEDULE,
    SH_WARMUP_STEPS,
    SH_FP8_MARGIN,
    SH_TOKENS_PER_STEP,
    SH_DATA_FINGERPRINT,
    SH_FP8_POW2_SCALES,   // 0 in version-2 files, which predate it: the default
    SH_SHARD_GROUP,       // 0 in files that predate it: one group of all the ranks
    SH_CONSECUTIVE_SKIPS, // 0 in files that predate it: the guards' skips in a row were not counted
    SH_MODEL_DIGEST       // the digest of the model file of its step (checkpoint_digests): the pair belongs
                          // together
};

// The ranks a file's shards span, and a run's.
static inline int state_shard_group(const int64_t *h) {
    return h[SH_SHARD_GROUP] ? (int)h[SH_SHARD_GROUP] : (int)h[SH_WORLD];
}

static inline int train_state_shard_group(const TrainState *st) {
    return st->shard_group ? st->shard_group : st->world_size;
}

// The run identity's float settings in header order, with their flags.
#define RUN_IDENTITY_FLOATS 9
static const char *const RUN_IDENTITY_FLOAT_FLAGS[RUN_IDENTITY_FLOATS] = {
    "--lr",           "--final_lr_frac", "--beta1",       "--beta2",      "--eps",
    "--weight_decay", "--grad_clip",     "--skip_loss_z", "--skip_norm_z"};

static inline void run_identity_floats(const RunIdentity *id, float out[RUN_IDENTITY_FLOATS]) {
    const float values[RUN_IDENTITY_FLOATS] = {id->lr,        id->final_lr_frac, id->beta1,
                                               id->beta2,     id->eps,           id->weight_decay,
                                               id->grad_clip, id->skip_loss_z,   id->skip_norm_z};
    memcpy(out, values, sizeof(values));
}

static inline int64_t float_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    return (int64_t)u;
}

static inline float bits_float(int64_t bits) {
    uint32_t u = (uint32_t)bits;
    float x;
    memcpy(&x, &u, sizeof(x));
    return x;
}

static inline void model_file_path(const char *dir, long step, char *path, size_t len) {
    snprintf(path, len, "%s/model_%08ld.bin", dir, step);
}

static inline void state_file_path(const char *dir, long step, int rank, char *path, size_t len) {
    snprintf(path, len, "%s/state_%08ld_%05d.bin", dir, step, rank);
}

static inline void checkpoint_paths(const char *dir, long step, int rank, char *model_path, char *state_path,
                                    size_t len) {
    model_file_path(dir, step, model_path, len);
    state_file_path(dir, step, rank, state_path, len);
}

// The float arrays of a state file, in file order; each one's length is in the header and must match
// what the loading run expects.
enum { STATE_ADAM_M, STATE_ADAM_V, STATE_AMAX_HISTORY, STATE_GUARD_HISTORY, NUM_STATE_BLOCKS };
static const int STATE_BLOCK_FIELD[NUM_STATE_BLOCKS] = {SH_MOMENTS, SH_MOMENTS, SH_HISTORY_FLOATS,
                                                        SH_GUARD_FLOATS};
static const char *const STATE_BLOCK_NAMES[NUM_STATE_BLOCKS] = {
    "optimizer moment count", "optimizer moment count", "amax history size", "step guard window"};

typedef struct {
    float *data;
    size_t count;
} StateBlock;

static inline void save_state_file(const char *path, const TrainState *st, const GPTConfig *cfg,
                                   const StateBlock blocks[NUM_STATE_BLOCKS]) {
    char tmp[CHECKPOINT_PATH_LEN];
    FILE *f = atomic_open(path, tmp, sizeof(tmp));
    int64_t h[STATE_FILE_HEADER_INTS] = {0};
    h[SH_MAGIC] = STATE_FILE_MAGIC;
    h[SH_VERSION] = STATE_FILE_VERSION;
    h[SH_RANK] = st->rank;
    h[SH_WORLD] = st->world_size;
    h[SH_SHARD_GROUP] = train_state_shard_group(st);
    h[SH_STEP] = st->step;
    h[SH_UPDATES] = st->updates_applied;
    h[SH_SKIPPED] = st->skipped_steps;
    h[SH_EPOCH] = st->train_position.epoch;
    h[SH_SHARD] = st->train_position.shard_index;
    h[SH_BATCH] = st->train_position.batch_index;
    h[SH_DTYPE] = st->dtype;
    h[SH_RECIPE] = st->fp8_recipe;
    h[SH_HISTORY_LEN] = st->amax_history_len;
    h[SH_LAYERS] = cfg->num_layers;
    h[SH_CHANNELS] = cfg->channels;
    h[SH_VOCAB] = cfg->padded_vocab_size;
    h[SH_MAXT] = cfg->max_seq_len;
    h[SH_HEADS] = cfg->num_heads;
    h[SH_BATCH_SIZE] = st->batch_size;
    h[SH_SEQ_LEN] = st->seq_len;
    h[SH_SEED] = st->seed;
    h[SH_SHUFFLE] = st->shuffle;
    h[SH_GUARD_COUNT] = st->guard_count;
    h[SH_CONSECUTIVE_SKIPS] = st->consecutive_skips;
    h[SH_MODEL_DIGEST] = (int64_t)st->model_digest;
    h[SH_ZERO_STAGE] = st->zero_stage;
    float identity_floats[RUN_IDENTITY_FLOATS];
    run_identity_floats(&st->identity, identity_floats);
    for (int i = 0; i < RUN_IDENTITY_FLOATS; i++) h[SH_LR + i] = float_bits(identity_floats[i]);
    h[SH_LR_SCHEDULE] = st->identity.lr_schedule;
    h[SH_WARMUP_STEPS] = st->identity.warmup_steps;
    h[SH_FP8_MARGIN] = st->identity.fp8_margin;
    h[SH_FP8_POW2_SCALES] = st->identity.fp8_pow2_scales;
    h[SH_TOKENS_PER_STEP] = st->identity.tokens_per_step;
    h[SH_DATA_FINGERPRINT] = (int64_t)st->identity.data_fingerprint;
    for (int b = 0; b < NUM_STATE_BLOCKS; b++) h[STATE_BLOCK_FIELD[b]] = (int64_t)blocks[b].count;
    fwrite_check(h, sizeof(int64_t), STATE_FILE_HEADER_INTS, f, tmp);
    for (int b = 0; b < NUM_STATE_BLOCKS; b++)
        fwrite_check(blocks[b].data, sizeof(float), blocks[b].count, f, tmp);
    atomic_commit(f, tmp, path);
}

// Refuses a state that does not continue this run: `expected` holds this run's settings.
static inline void check_state_field(const char *path, const int64_t *h, int field, int64_t expected,
                                     const char *what) {
    if (h[field] != expected)
        fail("%s: checkpoint has %s %ld but this run has %ld", path, what, (long)h[field], (long)expected);
}

// Opens a state file and reads its header, checked to be one of ours.
static inline FILE *open_state_file(const char *path, int rank, int64_t h[STATE_FILE_HEADER_INTS],
                                    int64_t *size) {
    // Only ranks below the world size of rank 0's file are opened (another world size is re-sharded), so a
    // missing file is never a checkpoint of fewer processes: one of the writers' files is gone.
    struct stat st;
    if (stat(path, &st) != 0 && errno == ENOENT && rank > 0)
        fail("%s: no state file for rank %d: the checkpoint is incomplete (rank 0's state file says more "
             "processes wrote it)",
             path, rank);
    FILE *f = fopen_regular(path);
    *size = file_size_check(f, path);
    if (*size < (int64_t)(STATE_FILE_HEADER_INTS * sizeof(int64_t)))
        fail("%s: too short for a training state header (%ld bytes)", path, (long)*size);
    fread_check(h, sizeof(int64_t), STATE_FILE_HEADER_INTS, f, path);
    if (h[SH_MAGIC] != STATE_FILE_MAGIC)
        fail("%s: not a training state file (bad magic %ld)", path, (long)h[0]);
    if (h[SH_VERSION] == 2)
        fail("%s: state file version 2, whose data fingerprint covers only the first and last 4 KiB of each "
             "shard; this build fingerprints whole shards (version 3): resume it with the build that wrote "
             "it, or start a new run with --init_from its model file",
             path);
    if (h[SH_VERSION] == 3)
        fail("%s: state file version 3, written before checkpoints carried digests (manifest_<step>.txt): "
             "resume it with the build that wrote it, or start a new run with --init_from its model file",
             path);
    if (h[SH_VERSION] != STATE_FILE_VERSION)
        fail("%s: unsupported state file version %ld (expected %d)", path, (long)h[1], STATE_FILE_VERSION);
    return f;
}

// The run identity: a checkpoint of a run with other settings or other training data is refused, naming
// the setting.
static inline void check_run_identity(const char *path, const int64_t *h, const RunIdentity *id) {
    float mine[RUN_IDENTITY_FLOATS];
    run_identity_floats(id, mine);
    for (int i = 0; i < RUN_IDENTITY_FLOATS; i++)
        if (h[SH_LR + i] != float_bits(mine[i]))
            fail("%s: checkpoint was written with %s %g but this run has %s %g", path,
                 RUN_IDENTITY_FLOAT_FLAGS[i], (double)bits_float(h[SH_LR + i]), RUN_IDENTITY_FLOAT_FLAGS[i],
                 (double)mine[i]);
    const int int_fields[4] = {SH_LR_SCHEDULE, SH_WARMUP_STEPS, SH_FP8_MARGIN, SH_FP8_POW2_SCALES};
    const int64_t int_values[4] = {id->lr_schedule, id->warmup_steps, id->fp8_margin, id->fp8_pow2_scales};
    const char *const int_flags[4] = {"--lr_schedule (0 cosine, 1 linear, 2 constant)", "--warmup_steps",
                                      "--fp8_margin", "--fp8_pow2_scales"};
    for (int i = 0; i < 4; i++)
        if (h[int_fields[i]] != int_values[i])
            fail("%s: checkpoint was written with %s %ld but this run has %ld", path, int_flags[i],
                 (long)h[int_fields[i]], (long)int_values[i]);
    if (h[SH_TOKENS_PER_STEP] != id->tokens_per_step)
        fail("%s: checkpoint was written with %ld tokens per optimizer step but this run has %ld "
             "(--total_batch_size, or batch_size x seq_len x processes when it is 0)",
             path, (long)h[SH_TOKENS_PER_STEP], (long)id->tokens_per_step);
    if ((uint64_t)h[SH_DATA_FINGERPRINT] != id->data_fingerprint)
        fail("%s: checkpoint was written for other training data than this run's --train_data (the shards' "
             "number, sizes or contents differ)",
             path);
}

// The counters of a state header against each other: every step so far was applied or skipped, the guard's
// window saw each applied one (and the finite skipped ones), the data position is a position.
static inline void check_state_counters(const char *path, const int64_t *h) {
    if (h[SH_STEP] < 0 || h[SH_UPDATES] < 0 || h[SH_SKIPPED] < 0 ||
        h[SH_UPDATES] + h[SH_SKIPPED] != h[SH_STEP])
        fail("%s: corrupt counters: step %ld, %ld updates applied and %ld skipped (they must add up)", path,
             (long)h[SH_STEP], (long)h[SH_UPDATES], (long)h[SH_SKIPPED]);
    if (h[SH_GUARD_COUNT] < h[SH_UPDATES] || h[SH_GUARD_COUNT] > h[SH_STEP])
        fail("%s: corrupt step guard count %ld (the window records each of the %ld applied updates and at "
             "most every one of the %ld steps)",
             path, (long)h[SH_GUARD_COUNT], (long)h[SH_UPDATES], (long)h[SH_STEP]);
    if (h[SH_CONSECUTIVE_SKIPS] < 0 || h[SH_CONSECUTIVE_SKIPS] > h[SH_SKIPPED])
        fail("%s: corrupt count of %ld steps skipped in a row (of %ld skipped)", path,
             (long)h[SH_CONSECUTIVE_SKIPS], (long)h[SH_SKIPPED]);
    if (h[SH_EPOCH] < 0 || h[SH_SHARD] < 0 || h[SH_BATCH] < 0)
        fail("%s: corrupt data position (epoch %ld, shard %ld, batch %ld)", path, (long)h[SH_EPOCH],
             (long)h[SH_SHARD], (long)h[SH_BATCH]);
}

// "fp8_recipe (0 delayed, 1 current, ...)": the recipes' values, which state files store, with their names.
static inline const char *fp8_recipe_legend(char out[OPTION_STRING_LEN]) {
    int n = snprintf(out, OPTION_STRING_LEN, "fp8_recipe (");
    for (int r = 0; r < FP8_RECIPE_COUNT; r++)
        n += snprintf(out + n, OPTION_STRING_LEN - n, "%s%d %s", r ? ", " : "", r, fp8_recipe_name(r));
    snprintf(out + n, OPTION_STRING_LEN - n, ")");
    return out;
}

// The settings a continuation must share (the model, the numerics, the data order), and the file's size
// against its header. moments: the moment count this run expects in this file.
static inline void check_state_header(const char *path, const int64_t *h, int64_t size, const TrainState *st,
                                      const GPTConfig *cfg, const StateBlock blocks[NUM_STATE_BLOCKS],
                                      int64_t moments) {
    char recipe_legend[OPTION_STRING_LEN];
    check_state_field(path, h, SH_LAYERS, cfg->num_layers, "layers");
    check_state_field(path, h, SH_CHANNELS, cfg->channels, "channels");
    check_state_field(path, h, SH_VOCAB, cfg->padded_vocab_size, "padded vocab");
    check_state_field(path, h, SH_MAXT, cfg->max_seq_len, "max_seq_len");
    check_state_field(path, h, SH_HEADS, cfg->num_heads, "heads");
    check_state_field(path, h, SH_DTYPE, st->dtype, "dtype (0 float32, 1 bfloat16, 2 float8)");
    check_state_field(path, h, SH_RECIPE, st->fp8_recipe, fp8_recipe_legend(recipe_legend));
    check_state_field(path, h, SH_HISTORY_LEN, st->amax_history_len, "amax_history");
    check_state_field(path, h, SH_SEQ_LEN, st->seq_len, "seq_len");
    check_state_field(path, h, SH_SEED, st->seed, "seed");
    check_state_field(path, h, SH_SHUFFLE, st->shuffle, "shuffle");
    check_run_identity(path, h, &st->identity);
    check_state_field(path, h, SH_MOMENTS, moments, STATE_BLOCK_NAMES[STATE_ADAM_M]);
    if (h[SH_GUARD_FLOATS] != (int64_t)blocks[STATE_GUARD_HISTORY].count)
        fail("%s: checkpoint was written with --guard_window %ld but this run has --guard_window %ld", path,
             (long)(h[SH_GUARD_FLOATS] / 2), (long)(blocks[STATE_GUARD_HISTORY].count / 2));
    int64_t expected = STATE_FILE_HEADER_INTS * (int64_t)sizeof(int64_t) + 8 * moments;
    for (int b = STATE_AMAX_HISTORY; b < NUM_STATE_BLOCKS; b++) {
        check_state_field(path, h, STATE_BLOCK_FIELD[b], (int64_t)blocks[b].count, STATE_BLOCK_NAMES[b]);
        expected += 4 * (int64_t)blocks[b].count;
    }
    if (size != expected)
        fail("%s: size %ld does not match its header (expected %ld bytes): truncated or corrupt", path,
             (long)size, (long)expected);
    check_state_counters(path, h);
}

// The arrays of a state file, value by value: moments finite (the second non-negative), amax histories
// finite and non-negative or FP8_AMAX_UNRECORDED, the guard's window finite. A NaN would train on into NaN
// checkpoints.
static inline void check_state_values(const char *path, const StateBlock blocks[NUM_STATE_BLOCKS]) {
    static const char *const what[NUM_STATE_BLOCKS] = {"AdamW first moment", "AdamW second moment",
                                                       "amax history", "step guard window"};
    for (int b = 0; b < NUM_STATE_BLOCKS; b++)
        for (size_t i = 0; i < blocks[b].count; i++) {
            float x = blocks[b].data[i];
            int signed_ok = b == STATE_ADAM_M || b == STATE_GUARD_HISTORY || x >= 0.0f ||
                            (b == STATE_AMAX_HISTORY && fp8_f32_to_bits(x) == FP8_AMAX_UNRECORDED_BITS);
            if (!isfinite(x) || !signed_ok)
                fail("%s: %s value %zu is %g: the checkpoint is corrupt", path, what[b], i, (double)x);
        }
}

// The run's counters and data position from a checked header.
static inline void take_state_counters(TrainState *st, const int64_t *h) {
    st->step = h[SH_STEP];
    st->updates_applied = h[SH_UPDATES];
    st->skipped_steps = h[SH_SKIPPED];
    st->train_position.epoch = h[SH_EPOCH];
    st->train_position.shard_index = h[SH_SHARD];
    st->train_position.batch_index = h[SH_BATCH];
    st->guard_count = h[SH_GUARD_COUNT];
    st->consecutive_skips = h[SH_CONSECUTIVE_SKIPS];
}

// Re-sharding: the moments of the full-vector range [begin, begin + count) from the files of the run that
// wrote them (old_world processes, ZeRO stage old_zero), into m and v. The pieces come rank after rank,
// so one file is open at a time (a checkpoint of thousands of ranks stays under the open-file limit);
// each is checked when opened and read only where it holds a piece of the range.
typedef struct {
    const char *dir;
    long step;
    const GPTConfig *cfg;
    int old_world, old_zero,
        old_group; // old_group: the ranks a shard spanned (its group 0's files hold them)
    int64_t old_moments;
    FILE *file;    // the old rank file open now
    int file_rank; // its rank
} OldShards;

static inline FILE *old_shard_file(OldShards *o, int rank, const TrainState *st, const StateBlock *blocks,
                                   char *path) {
    state_file_path(o->dir, o->step, rank, path, CHECKPOINT_PATH_LEN);
    if (o->file_rank == rank) return o->file;
    fclose(o->file);
    int64_t h[STATE_FILE_HEADER_INTS], size;
    o->file = open_state_file(path, rank, h, &size);
    o->file_rank = rank;
    check_state_field(path, h, SH_RANK, rank, "rank");
    check_state_field(path, h, SH_WORLD, o->old_world, "world size (rank 0's file says otherwise)");
    check_state_field(path, h, SH_ZERO_STAGE, o->old_zero, "ZeRO stage (rank 0's file says otherwise)");
    check_state_field(path, h, SH_STEP, o->step, "step");
    check_state_header(path, h, size, st, o->cfg, blocks, o->old_moments);
    return o->file;
}

static inline void read_moments_at(FILE *f, const char *path, int64_t moments, size_t at, size_t n, float *m,
                                   float *v) {
    long header = STATE_FILE_HEADER_INTS * (long)sizeof(int64_t);
    if (fseek(f, header + 4 * (long)at, SEEK_SET) != 0) fail("%s: cannot seek: %s", path, strerror(errno));
    fread_check(m, sizeof(float), n, f, path);
    if (fseek(f, header + 4 * (long)(moments + (int64_t)at), SEEK_SET) != 0)
        fail("%s: cannot seek: %s", path, strerror(errno));
    fread_check(v, sizeof(float), n, f, path);
}

static inline void read_old_moments(OldShards *o, size_t begin, size_t count, float *m, float *v,
                                    const TrainState *st, const StateBlock *blocks) {
    const GPTConfig *cfg = o->cfg;
    ShardMap old = shard_map(cfg, o->old_zero, o->old_group, 0); // the chunk offsets are every rank's
    size_t global = param_global_size(cfg), layer = param_layer_size(cfg);
    for (size_t x = begin; x < begin + count;) {
        int unit = o->old_zero == 3 && x >= global ? 1 + (int)((x - global) / layer) : 0;
        ShardUnit u = shard_map_unit(&old, unit);
        size_t within = x - u.start, rank = within / u.chunk, k = within % u.chunk;
        size_t n = begin + count - x;
        if (n > u.chunk - k) n = u.chunk - k;
        if (n > u.size - within) n = u.size - within;
        char path[CHECKPOINT_PATH_LEN];
        FILE *f = old_shard_file(o, (int)rank, st, blocks, path);
        read_moments_at(f, path, o->old_moments, u.shard + k, n, m + (x - begin), v + (x - begin));
        x += n;
    }
}

static inline void load_state_file(const char *path, TrainState *st, const GPTConfig *cfg,
                                   const StateBlock blocks[NUM_STATE_BLOCKS]) {
    int64_t h[STATE_FILE_HEADER_INTS], size;
    FILE *f = open_state_file(path, st->rank, h, &size);
    check_state_field(path, h, SH_RANK, st->rank, "rank");
    check_state_field(path, h, SH_WORLD, st->world_size, "world size (rank 0's file says otherwise)");
    check_state_field(path, h, SH_ZERO_STAGE, st->zero_stage, "ZeRO stage (rank 0's file says otherwise)");
    if (state_shard_group(h) != train_state_shard_group(st))
        fail("%s: shard groups of %d ranks, but rank 0's file and this run have %d", path,
             state_shard_group(h), train_state_shard_group(st));
    check_state_field(path, h, SH_BATCH_SIZE, st->batch_size, "batch_size");
    check_state_header(path, h, size, st, cfg, blocks, (int64_t)blocks[STATE_ADAM_M].count);
    take_state_counters(st, h);
    for (int b = 0; b < NUM_STATE_BLOCKS; b++)
        fread_check(blocks[b].data, sizeof(float), blocks[b].count, f, path);
    fclose(f);
    check_state_values(path, blocks);
}

// This rank's training state from checkpoint `step` in dir. Written with this run's number of processes
// and ZeRO stage: the rank's own file. Otherwise the checkpoint is re-sharded: the counters, amax
// histories and guard window (the same on every rank) from rank 0's file, the moments this rank now owns
// (dist.h's layout for this run) from the files of the ranks that held them. The data order continues
// exactly only with the same global batch, so processes x batch_size must be unchanged.
static inline void load_training_state(const char *dir, long step, TrainState *st, const GPTConfig *cfg,
                                       const StateBlock blocks[NUM_STATE_BLOCKS]) {
    char path[CHECKPOINT_PATH_LEN];
    state_file_path(dir, step, 0, path, sizeof(path));
    int64_t h[STATE_FILE_HEADER_INTS], size;
    FILE *f = open_state_file(path, 0, h, &size);
    // Every other file is checked against this one and its counters are the run's: it must be rank 0's
    // file of this step (a copied or renamed file would resume at another step, or with another rank's
    // moments, without a word).
    check_state_field(path, h, SH_RANK, 0, "rank");
    check_state_field(path, h, SH_STEP, step, "step");
    if (h[SH_WORLD] == st->world_size && h[SH_ZERO_STAGE] == st->zero_stage &&
        state_shard_group(h) == train_state_shard_group(st)) {
        fclose(f);
        state_file_path(dir, step, st->rank, path, sizeof(path));
        load_state_file(path, st, cfg, blocks);
        // a rank resuming at another step than the others would pair its collectives with theirs wrongly
        if (st->step != step)
            fail("%s: checkpoint has step %ld but this run has %ld", path, (long)st->step, step);
        return;
    }
    // the flags' ranges (cli.h): their product cannot overflow
    if (h[SH_WORLD] < 1 || h[SH_WORLD] > (1 << 20) || h[SH_BATCH_SIZE] < 1 || h[SH_BATCH_SIZE] > (1 << 20) ||
        (h[SH_ZERO_STAGE] != 0 && h[SH_ZERO_STAGE] != 1 && h[SH_ZERO_STAGE] != 3) ||
        state_shard_group(h) < 1 || h[SH_WORLD] % state_shard_group(h) != 0)
        fail("%s: corrupt header (world size %ld, batch size %ld, ZeRO stage %ld)", path, (long)h[SH_WORLD],
             (long)h[SH_BATCH_SIZE], (long)h[SH_ZERO_STAGE]);
    int64_t global_batch = h[SH_WORLD] * h[SH_BATCH_SIZE];
    if (global_batch != (int64_t)st->world_size * st->batch_size && global_batch % st->world_size != 0)
        fail("%s: written by %ld processes of --batch_size %ld: its global batch of %ld rows does not split "
             "over %d processes; resume with a number of processes that divides it",
             path, (long)h[SH_WORLD], (long)h[SH_BATCH_SIZE], (long)global_batch, st->world_size);
    if (global_batch != (int64_t)st->world_size * st->batch_size)
        fail(
            "%s: written by %ld processes of --batch_size %ld; with %d processes --batch_size must be %ld to "
            "continue the data order (the same global batch)",
            path, (long)h[SH_WORLD], (long)h[SH_BATCH_SIZE], st->world_size,
            (long)(global_batch / st->world_size));
    OldShards old = {dir,           step, cfg, (int)h[SH_WORLD], (int)h[SH_ZERO_STAGE], state_shard_group(h),
                     h[SH_MOMENTS], f,    0};
    check_state_header(path, h, size, st, cfg, blocks, old.old_moments);
    take_state_counters(st, h);
    long tail = STATE_FILE_HEADER_INTS * (long)sizeof(int64_t) + 8 * (long)old.old_moments;
    if (fseek(f, tail, SEEK_SET) != 0) fail("%s: cannot seek: %s", path, strerror(errno));
    for (int b = STATE_AMAX_HISTORY; b < NUM_STATE_BLOCKS; b++)
        fread_check(blocks[b].data, sizeof(float), blocks[b].count, f, path);
    for (int b = STATE_ADAM_M; b <= STATE_ADAM_V; b++) // padding stays zero
        memset(blocks[b].data, 0, blocks[b].count * sizeof(float));
    int group = train_state_shard_group(st);
    ShardMap mine = shard_map(cfg, st->zero_stage, group, st->rank % group);
    for (int unit = 0; unit < shard_num_units(cfg, st->zero_stage); unit++) {
        ShardUnit u = shard_map_unit(&mine, unit);
        read_old_moments(&old, shard_unit_begin(&mine, &u), u.owned, blocks[STATE_ADAM_M].data + u.shard,
                         blocks[STATE_ADAM_V].data + u.shard, st, blocks);
    }
    fclose(old.file);
    check_state_values(path, blocks); // (rank 0's path: the moments came from several files)
}

// Continues the training data where the checkpoint left it: the position its state files recorded.
static inline void resume_data_position(DataLoader *loader, const char *dir, const TrainState *st) {
    char path[CHECKPOINT_PATH_LEN];
    state_file_path(dir, (long)st->step, 0, path, sizeof(path));
    dataloader_set_position(loader, st->train_position, path);
}

// Proves at start-up that the file a flag names can be written, so that a typo in its directory costs
// nothing instead of the run it ends.
static inline void check_writable_file(const char *path, const char *flag) {
    struct stat st;
    int existed = stat(path, &st) == 0;
    FILE *f = fopen(path, "ab");
    if (!f) fail("%s: %s cannot be written: %s", flag, path, strerror(errno));
    fclose(f);
    if (!existed) remove(path);
}

// ----------------------------------------------------------------------------
// The latest-checkpoint pointer

static inline void write_latest_checkpoint(const char *dir, long step) {
    char path[CHECKPOINT_PATH_LEN], tmp[CHECKPOINT_PATH_LEN];
    snprintf(path, sizeof(path), "%s/latest_checkpoint", dir);
    FILE *f = atomic_open(path, tmp, sizeof(tmp));
    fprintf(f, "%ld\n", step);
    atomic_commit(f, tmp, path);
}

// The step of the last complete checkpoint in dir, or -1 with why there is none in why.
static inline long find_latest_checkpoint(const char *dir, char *why, size_t len) {
    char path[CHECKPOINT_PATH_LEN];
    snprintf(path, sizeof(path), "%s/latest_checkpoint", dir);
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(why, len, "--resume: %s: no checkpoint to resume from: %s", path, strerror(errno));
        return -1;
    }
    FILE *f = fopen_regular(path);
    long step = -1;
    int ok = fscanf(f, "%ld", &step) == 1 && step >= 0;
    fclose(f);
    if (ok) return step;
    snprintf(why, len, "%s: corrupt (expected a step number)", path);
    return -1;
}

// The step a --resume run continues, decided by rank 0 alone and given to every rank: ranks reading the
// pointer themselves could read it on either side of its replacement and resume different steps. The
// caller sums resume_step_proposal over the ranks (rank 0's value, the others' 0) and passes the sum to
// resume_step_agreed, which fails on every rank when rank 0 found none.
static inline double resume_step_proposal(int rank, const char *dir) {
    char why[CHECKPOINT_PATH_LEN + 128];
    return rank == 0 ? (double)find_latest_checkpoint(dir, why, sizeof(why)) : 0.0;
}

static inline long resume_step_agreed(double sum, int rank, const char *dir) {
    if (sum >= 0) return (long)sum;
    char why[CHECKPOINT_PATH_LEN + 128];
    if (rank == 0 && find_latest_checkpoint(dir, why, sizeof(why)) < 0) fail("%s", why);
    fail("--resume: rank %d: rank 0 found no complete checkpoint in %s", rank, dir);
}

// ----------------------------------------------------------------------------
// Digests: a checkpoint is verified before it is trusted
//
// Once written, every file of a checkpoint is read back and digested as it lies on disk, and the digests
// go into manifest_<step>.txt, which rank 0 writes before latest_checkpoint names the step; each state file
// also records its model file's digest (SH_MODEL_DIGEST), so the files of one step belong together. A
// resume checks every file against the manifest, and every value to be finite, before it trusts the
// checkpoint; one that fails (damaged, truncated, a file of another step copied in) falls back to the
// newest checkpoint that passes, with a line. The digest of a file is the sum (mod 2^64) of the FNV hashes
// of its DIGEST_CHUNK_BYTES chunks, each seeded with its index and the file's size, so that the ranks
// digest interleaved chunks in parallel and add their sums (an equal share of the read each).

#define DIGEST_CHUNK_BYTES ((int64_t)64 << 20)
#define MANIFEST_WHY_LEN (CHECKPOINT_PATH_LEN + 160)

// Reads exactly n bytes at offset `at`, or returns -1 (errno set; EIO for a short read).
static inline int pread_all(int fd, void *buf, size_t n, int64_t at) {
    for (size_t done = 0; done < n;) {
        ssize_t r = pread(fd, (char *)buf + done, n - done, (off_t)(at + (int64_t)done));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            if (r == 0) errno = EIO;
            return -1;
        }
        done += (size_t)r;
    }
    return 0;
}

// The part of a file's digest over its chunks i with i % parts == part, with the float32 values from byte
// floats_from on checked to be finite, and the file's size. Returns 0, or -1 with why the file is unusable.
static inline int file_digest_part(const char *path, int64_t floats_from, int part, int parts,
                                   uint64_t *digest, int64_t *size, char *why, size_t len) {
    *digest = 0;
    struct stat st;
    int fd = -1;
    if (stat(path, &st) != 0 || (S_ISREG(st.st_mode) && (fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)) {
        snprintf(why, len, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    if (fd < 0) { // not opened: a FIFO would block until a writer came
        snprintf(why, len, "%s: %s", path,
                 S_ISDIR(st.st_mode) ? "is a directory, not a file"
                                     : "not a regular file (a FIFO, device or socket)");
        return -1;
    }
    *size = st.st_size;
    int64_t chunk = *size < DIGEST_CHUNK_BYTES ? *size : DIGEST_CHUNK_BYTES;
    uint8_t *buf = (uint8_t *)malloc_check((size_t)chunk + 1, "checkpoint digest buffer");
    int status = 0;
    for (int64_t c = part; status == 0 && c * DIGEST_CHUNK_BYTES < *size; c += parts) {
        int64_t at = c * DIGEST_CHUNK_BYTES, n = *size - at < chunk ? *size - at : chunk;
        if (pread_all(fd, buf, (size_t)n, at) != 0) {
            snprintf(why, len, "%s: cannot read: %s", path, strerror(errno));
            status = -1;
            break;
        }
        for (int64_t k = (floats_from > at ? floats_from - at : 0); k + 4 <= n; k += 4) {
            float x;
            memcpy(&x, buf + k, 4);
            if (isfinite(x)) continue;
            snprintf(why, len, "%s: the value at byte %lld is %g", path, (long long)(at + k), (double)x);
            status = -1;
            break;
        }
        uint64_t seed = fnv1a(fnv1a(FNV1A_START, size, sizeof(*size)), &c, sizeof(c));
        *digest += fnv1a_words(seed, buf, (size_t)n);
    }
    free(buf);
    close(fd);
    return status;
}

// Sums n 64-bit values over the ranks, mod 2^64, exactly: as 16-bit limbs in doubles (exact below 2^36
// ranks). A rank that sets only its own slot of an array gathers it.
static inline void rank_sum_u64(RankSum sum, void *ctx, uint64_t *values, int n) {
    double *limbs = (double *)malloc_check(4 * (size_t)n * sizeof(double), "rank sum");
    for (int i = 0; i < n; i++)
        for (int k = 0; k < 4; k++) limbs[4 * i + k] = (double)((values[i] >> (16 * k)) & 0xffff);
    sum(ctx, limbs, 4 * n);
    for (int i = 0; i < n; i++) {
        values[i] = 0;
        for (int k = 0; k < 4; k++) values[i] += (uint64_t)limbs[4 * i + k] << (16 * k);
    }
    free(limbs);
}

// The bytes of a model file before its float32 values: its layout's header, known by its magic.
static inline int64_t model_file_values_from(const char *path) {
    int magic = 0;
    FILE *f = fopen(path, "rb");
    if (f && fread(&magic, sizeof(magic), 1, f) != 1) magic = 0;
    if (f) fclose(f);
    return (int64_t)model_file_header_bytes(magic == LLAMA_MODEL_FILE_MAGIC ? FILE_LLAMA3 : FILE_GPT2);
}

static inline void manifest_path(const char *dir, long step, char *path, size_t len) {
    snprintf(path, len, "%s/manifest_%08ld.txt", dir, step);
}

// Whether name is a manifest, and its step.
static inline int manifest_file_step(const char *name, long *step) {
    int end = 0;
    return sscanf(name, "manifest_%8ld.txt%n", step, &end) == 1 && end == 21 && name[end] == '\0';
}

// What a manifest records: the model file's size and digest, and each rank's state file's.
typedef struct {
    int world;
    int64_t model_size;
    uint64_t model_digest;
    int64_t *state_sizes;
    uint64_t *state_digests;
} Manifest;

static inline void manifest_free(Manifest *m) {
    free(m->state_sizes);
    free(m->state_digests);
    m->state_sizes = NULL;
    m->state_digests = NULL;
}

// The manifest of checkpoint `step`; returns 0, or -1 with why in why.
static inline int manifest_read(const char *dir, long step, Manifest *m, char *why, size_t len) {
    char path[CHECKPOINT_PATH_LEN];
    manifest_path(dir, step, path, sizeof(path));
    memset(m, 0, sizeof(*m));
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(why, len, "%s: %s", path, strerror(errno));
        return -1;
    }
    long got_step = -1, s = -1;
    unsigned long long digest;
    long long size;
    int ok =
        fscanf(f, "checkpoint %ld processes %d model %lld %llx", &got_step, &m->world, &size, &digest) == 4 &&
        got_step == step && m->world >= 1 && m->world <= (1 << 20);
    if (ok) {
        m->model_size = size;
        m->model_digest = digest;
        m->state_sizes = (int64_t *)malloc_check((size_t)m->world * sizeof(int64_t), "manifest");
        m->state_digests = (uint64_t *)malloc_check((size_t)m->world * sizeof(uint64_t), "manifest");
    }
    for (int r = 0; ok && r < m->world; r++) {
        int rank = -1;
        ok = fscanf(f, " state %d %lld %llx", &rank, &size, &digest) == 3 && rank == r;
        m->state_sizes[r] = size;
        m->state_digests[r] = digest;
    }
    ok = ok && fscanf(f, " end %ld", &s) == 1 && s == step;
    fclose(f);
    if (ok) return 0;
    manifest_free(m);
    snprintf(why, len, "%s: corrupt (not the manifest of step %ld)", path, step);
    return -1;
}

// Rank 0 writes the manifest of the checkpoint every rank has just written.
static inline void manifest_write(const char *dir, long step, const Manifest *m) {
    char path[CHECKPOINT_PATH_LEN], tmp[CHECKPOINT_PATH_LEN];
    manifest_path(dir, step, path, sizeof(path));
    FILE *f = atomic_open(path, tmp, sizeof(tmp));
    fprintf(f, "checkpoint %ld processes %d model %lld %016llx\n", step, m->world, (long long)m->model_size,
            (unsigned long long)m->model_digest);
    for (int r = 0; r < m->world; r++)
        fprintf(f, "state %d %lld %016llx\n", r, (long long)m->state_sizes[r],
                (unsigned long long)m->state_digests[r]);
    fprintf(f, "end %ld\n", step);
    atomic_commit(f, tmp, path);
}

// Every rank, once the model file of the checkpoint is published: its digest (and size), each rank reading
// its share of it back. A value that is not finite was never trained into it: the write is refused.
static inline uint64_t checkpoint_model_digest(const char *path, int64_t *size, int rank, int world,
                                               RankSum sum, void *ctx) {
    char why[MANIFEST_WHY_LEN];
    uint64_t digest;
    double barrier = 0.0;
    sum(ctx, &barrier, 1); // rank 0 has renamed the file into place
    if (file_digest_part(path, model_file_values_from(path), rank, world, &digest, size, why, sizeof(why)) !=
        0)
        fail("checkpoint: %s: the model file just written does not read back", why);
    rank_sum_u64(sum, ctx, &digest, 1);
    return digest;
}

// Every rank, once its state file is durable: the state files' digests gathered, and the manifest written by
// rank 0 (before latest_checkpoint names the step).
static inline void checkpoint_manifest(const char *dir, long step, int64_t model_size, uint64_t model_digest,
                                       int rank, int world, RankSum sum, void *ctx) {
    char path[CHECKPOINT_PATH_LEN], why[MANIFEST_WHY_LEN];
    state_file_path(dir, step, rank, path, sizeof(path));
    Manifest m = {world, model_size, model_digest, NULL, NULL};
    uint64_t *gathered = (uint64_t *)calloc(2 * (size_t)world, sizeof(uint64_t)), digest;
    if (!gathered) fail("out of memory for the manifest of %d processes", world);
    int64_t size;
    if (file_digest_part(path, STATE_FILE_HEADER_INTS * sizeof(int64_t), 0, 1, &digest, &size, why,
                         sizeof(why)) != 0)
        fail("checkpoint: %s: the state file just written does not read back", why);
    gathered[2 * rank] = (uint64_t)size;
    gathered[2 * rank + 1] = digest;
    rank_sum_u64(sum, ctx, gathered, 2 * world);
    if (rank == 0) {
        m.state_sizes = (int64_t *)malloc_check((size_t)world * sizeof(int64_t), "manifest");
        m.state_digests = (uint64_t *)malloc_check((size_t)world * sizeof(uint64_t), "manifest");
        for (int r = 0; r < world; r++) {
            m.state_sizes[r] = (int64_t)gathered[2 * r];
            m.state_digests[r] = gathered[2 * r + 1];
        }
        manifest_write(dir, step, &m);
        manifest_free(&m);
    }
    free(gathered);
}

// Whether this rank's share of checkpoint `step` matches its manifest: the model file's size, its values
// finite, every state file of a rank r with r % world == rank whole, of this step, and written with this
// model file. The model's digest is the ranks' sum: rank 0 judges it.
static inline int checkpoint_share_intact(const char *dir, long step, int rank, int world, RankSum sum,
                                          void *ctx, char *why, size_t len) {
    Manifest m;
    int ok = manifest_read(dir, step, &m, why, len) == 0;
    char path[CHECKPOINT_PATH_LEN];
    model_file_path(dir, step, path, sizeof(path));
    uint64_t digest = 0;
    int64_t size = 0;
    if (ok)
        ok = file_digest_part(path, model_file_values_from(path), rank, world, &digest, &size, why, len) == 0;
    if (ok && size != m.model_size)
        ok = 0, snprintf(why, len, "%s: %lld bytes, but the manifest says %lld", path, (long long)size,
                         (long long)m.model_size);
    double failed = !ok;
    sum(ctx, &failed, 1); // every rank joins the model digest's sum, or none
    if (failed == 0) {
        rank_sum_u64(sum, ctx, &digest, 1);
        if (rank == 0 && digest != m.model_digest)
            ok = 0, snprintf(why, len,
                             "%s: digest %016llx, but the manifest says %016llx (damaged, or a model file "
                             "of another step)",
                             path, (unsigned long long)digest, (unsigned long long)m.model_digest);
    }
    for (int r = rank; ok && r < m.world; r += world) {
        state_file_path(dir, step, r, path, sizeof(path));
        ok = file_digest_part(path, STATE_FILE_HEADER_INTS * sizeof(int64_t), 0, 1, &digest, &size, why,
                              len) == 0;
        int64_t h[STATE_FILE_HEADER_INTS];
        int fd = ok ? open(path, O_RDONLY | O_CLOEXEC) : -1;
        if (ok && (fd < 0 || pread_all(fd, h, sizeof(h), 0) != 0))
            ok = 0, snprintf(why, len, "%s: too short for a training state header", path);
        if (fd >= 0) close(fd);
        if (ok && (size != m.state_sizes[r] || digest != m.state_digests[r]))
            ok = 0, snprintf(why, len,
                             "%s: %lld bytes, digest %016llx, but the manifest says %lld, %016llx "
                             "(damaged, or a state file of another step)",
                             path, (long long)size, (unsigned long long)digest, (long long)m.state_sizes[r],
                             (unsigned long long)m.state_digests[r]);
        if (ok && (h[SH_STEP] != step || (uint64_t)h[SH_MODEL_DIGEST] != m.model_digest))
            ok = 0, snprintf(why, len, "%s: written at step %ld with another model file than this step's",
                             path, (long)h[SH_STEP]);
    }
    manifest_free(&m);
    return ok;
}

// The newest manifest's step below `step` in dir, or -1.
static inline long newest_manifest_below(const char *dir, long step) {
    long best = -1, s;
    DIR *d = opendir(dir);
    if (!d) fail("--resume: cannot list %s: %s", dir, strerror(errno));
    for (struct dirent *e = readdir(d); e; e = readdir(d))
        if (manifest_file_step(e->d_name, &s) && s < step && s > best) best = s;
    closedir(d);
    return best;
}

// Every rank, on --resume: the newest intact checkpoint at or below `step` (latest_checkpoint's). One that
// fails its manifest is passed over with a line from the rank that found why, and one from rank 0 naming
// the step it falls back to; none left ends the run on every rank, in one line where the rank found why.
static inline long resume_verified_step(const char *dir, long step, int rank, int world, RankSum sum,
                                        void *ctx) {
    for (long latest = step;;) {
        char why[MANIFEST_WHY_LEN] = "";
        int ok = checkpoint_share_intact(dir, step, rank, world, sum, ctx, why, sizeof(why));
        double damaged = !ok;
        sum(ctx, &damaged, 1);
        if (damaged == 0) return step;
        double next = rank == 0 ? (double)newest_manifest_below(dir, step) : 0.0;
        sum(ctx, &next, 1);
        if (next < 0 && !ok)
            fail("--resume: %s: no intact checkpoint at or below step %ld in %s", why, latest, dir);
        if (next < 0)
            fail("--resume: no intact checkpoint at or below step %ld in %s (another rank says why)", latest,
                 dir);
        if (!ok)
            fprintf(stderr, "warning: --resume: rank %d: %s: the checkpoint of step %ld is not used\n", rank,
                    why, step);
        printf("resume | the checkpoint of step %ld is damaged: falling back to step %ld\n", step,
               (long)next);
        step = (long)next;
    }
}

// Whether a --resume run at checkpoint `step` has steps to train: a run resumed at its last step (a
// requeued job that had finished) says so and has nothing to do; a checkpoint beyond --steps is refused.
static inline int resume_has_work(const TrainOptions *opts, long step) {
    if (step > opts->steps)
        fail("--steps %d: the latest checkpoint in %s is at step %ld, beyond the end of this run",
             opts->steps, opts->output_dir, step);
    if (step < opts->steps) return 1;
    printf("resumed | step %ld | nothing to train: the run in %s is complete at --steps %d\n", step,
           opts->output_dir, opts->steps);
    return 0;
}

// --keep_checkpoints: after checkpoint `latest` is durable and named by latest_checkpoint, the files of
// every older step but the keep - 1 newest are removed (the manifest first and the model file last, so that
// a kill mid-way leaves no step whose state files survive their model). Steps beyond `latest` (files of a
// checkpoint being written, or left by a run killed before naming them) are not touched; neither is anything
// else.
static inline int checkpoint_file_step(const char *name, long *step) {
    int end = 0;
    if (sscanf(name, "model_%8ld.bin%n", step, &end) == 1 && end == 18 && name[end] == '\0') return 1;
    int rank;
    return sscanf(name, "state_%8ld_%5d.bin%n", step, &rank, &end) == 2 && end == 24 && name[end] == '\0';
}

static inline int compare_longs_descending(const void *a, const void *b) {
    long x = *(const long *)a, y = *(const long *)b;
    return (x < y) - (x > y);
}

// The model files' steps below `latest` in dir (n of them, newest first), or NULL when there are none.
static inline long *older_checkpoint_steps(const char *dir, long latest, size_t *n) {
    *n = 0;
    long *steps = NULL;
    for (int pass = 0; pass < 2; pass++) { // count, then collect
        DIR *d = opendir(dir);
        if (!d) fail("--keep_checkpoints: cannot list %s: %s", dir, strerror(errno));
        size_t found = 0;
        for (struct dirent *e = readdir(d); e; e = readdir(d)) {
            long step;
            if (strncmp(e->d_name, "model_", 6) || !checkpoint_file_step(e->d_name, &step) || step >= latest)
                continue;
            if (pass == 1 && found < *n) steps[found] = step;
            found++;
        }
        closedir(d);
        if (pass == 0) {
            if (!found) return NULL;
            *n = found;
            steps = (long *)malloc_check(found * sizeof(long), "checkpoint steps");
        } else if (found < *n) {
            *n = found; // removed meanwhile (by hand)
        }
    }
    qsort(steps, *n, sizeof(long), compare_longs_descending);
    return steps;
}

// Removes the files of dir whose name starts with prefix and whose step is below `below`.
static inline void remove_checkpoint_files_below(const char *dir, const char *prefix, long below) {
    char path[CHECKPOINT_PATH_LEN];
    DIR *d = opendir(dir);
    if (!d) fail("--keep_checkpoints: cannot list %s: %s", dir, strerror(errno));
    for (struct dirent *e = readdir(d); e; e = readdir(d)) {
        long step;
        if (strncmp(e->d_name, prefix, strlen(prefix)) ||
            !(checkpoint_file_step(e->d_name, &step) || manifest_file_step(e->d_name, &step)) ||
            step >= below)
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        if (remove(path) != 0) fail("--keep_checkpoints: cannot remove %s: %s", path, strerror(errno));
    }
    closedir(d);
}

// Called once checkpoint `latest` has verified (its files read back into its manifest): the manifests of
// the removed steps go first, so that a kill mid-way leaves no step a resume would fall back to without
// its files.
static inline void prune_checkpoints(const char *dir, long latest, int keep) {
    size_t n;
    long *steps = keep > 0 ? older_checkpoint_steps(dir, latest, &n) : NULL;
    if (!steps || n < (size_t)keep) { // latest and at most keep - 1 older ones: all kept
        free(steps);
        return;
    }
    long oldest_kept = keep == 1 ? latest : steps[keep - 2];
    remove_checkpoint_files_below(dir, "manifest_", oldest_kept);
    remove_checkpoint_files_below(dir, "state_", oldest_kept);
    char path[CHECKPOINT_PATH_LEN];
    for (size_t i = (size_t)keep - 1; i < n; i++) {
        model_file_path(dir, steps[i], path, sizeof(path));
        if (remove(path) != 0) fail("--keep_checkpoints: cannot remove %s: %s", path, strerror(errno));
    }
    free(steps);
}

#endif // CHECKPOINT_H

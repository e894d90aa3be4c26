// core/train_state.h: what a run needs besides its weights to continue exactly, shared by both trainers.
//  - Training state, one file per rank: a 64 x int64 header (magic, version, position, shapes), then
//    the AdamW moments of this rank's parameters, the FP8 amax histories and the step guard's window
//    of recent losses and norms (health.h). Scales are not stored:
//    they are a function of the histories (fp8_compute_scale of their max).
#ifndef TRAIN_STATE_H
#define TRAIN_STATE_H

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "atomic_file.h"
#include "cli.h"
#include "common.h"
#include "dataloader.h"
#include "fp8_scaling.h"
#include "gpt_model.h"

#define STATE_FILE_MAGIC 20261130
#define STATE_FILE_VERSION                                                                                   \
    4 // 2: with the run identity; 3: its data fingerprint of whole shards; 4: its
      // model file's digest
#define STATE_FILE_HEADER_INTS 64

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

// Continues the training data where the checkpoint left it: the position its state files recorded.
static inline void resume_data_position(DataLoader *loader, const char *dir, const TrainState *st) {
    char path[CHECKPOINT_PATH_LEN];
    state_file_path(dir, (long)st->step, 0, path, sizeof(path));
    dataloader_set_position(loader, st->train_position, path);
}

#endif // TRAIN_STATE_H

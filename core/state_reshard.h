// core/state_reshard.h: a checkpoint's training state read into this run's ranks: each rank's own state
// file when the checkpoint was written with this run's processes, ZeRO stage and shard groups; otherwise
// re-sharded, the moments each rank now owns read from the files of the ranks that held them.
#ifndef STATE_RESHARD_H
#define STATE_RESHARD_H

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "atomic_file.h"
#include "common.h"
#include "dist.h"
#include "gpt_model.h"
#include "train_state.h"

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

#endif // STATE_RESHARD_H

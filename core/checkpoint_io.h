// core/checkpoint_io.h: a run's checkpoint written and read, and the step a --resume continues agreed, the
// one protocol of both trainers. A trainer gives it what differs (CheckpointIO): a sum over its ranks (the
// MPI of the CPU trainer, the NCCL of the CUDA trainer; also the protocol's barrier), its part of the model
// file, and where the state file's arrays live (the CPU trainer's on the host; the CUDA trainer's on the
// device, staged through a host buffer the protocol allocates for the checkpoint's time alone).
//  - Save: the directory checked as the run's own (run_files.h), the model file written by every rank at
//    once (rank 0 creates it at full size, each rank writes its ranges, rank 0 renames it into place once
//    all are durable), its digest, this rank's state file, the manifest of the step's files, and only then
//    the latest_checkpoint pointer and the rotation (checkpoint.h).
//  - Load: the model file, then the state file (re-sharded where the processes differ, state_reshard.h).
#ifndef CHECKPOINT_IO_H
#define CHECKPOINT_IO_H

#include <stdio.h>
#include <stdlib.h>

#include "checkpoint.h"
#include "dist.h"
#include "manifest.h"
#include "model_file.h"
#include "run_files.h"
#include "state_reshard.h"
#include "train_state.h"

typedef struct {
    void *trainer; // what the functions below are given
    RankSum sum;   // a sum over the ranks, also their barrier
    void *sum_ctx;
    int rank, world_size;
    // Writes this rank's ranges of the model file f (model_file_write_range; tmp: its temp name).
    void (*write_model_part)(void *trainer, FILE *f, const char *tmp);
    // Reads the model file at path into the trainer's parameters (checked against the run's shape).
    void (*read_model)(void *trainer, const char *path);
    // The state file's arrays: in place (staging unused), or in staging, staging_floats long.
    size_t staging_floats;
    void (*state_blocks)(void *trainer, float *staging, StateBlock blocks[NUM_STATE_BLOCKS]);
    // Copies the arrays into the blocks before a save, and back after a load (NULL: they are in place).
    void (*state_to_blocks)(void *trainer, StateBlock blocks[NUM_STATE_BLOCKS]);
    void (*state_from_blocks)(void *trainer, const TrainState *state, StateBlock blocks[NUM_STATE_BLOCKS]);
} CheckpointIO;

// The model file of a checkpoint, written by every rank at once (model_file.h's parallel write).
static inline void write_model_parallel(const CheckpointIO *io, const char *path, const GPTConfig *cfg) {
    char tmp[CHECKPOINT_PATH_LEN];
    if (io->rank == 0) model_file_create_sized(path, tmp, sizeof(tmp), cfg);
    rank_sum_barrier(io->sum, io->sum_ctx);
    FILE *f = model_file_open_part(path, tmp, sizeof(tmp));
    io->write_model_part(io->trainer, f, tmp);
    atomic_close(f, tmp, path);
    rank_sum_barrier(io->sum, io->sum_ctx);
    if (io->rank == 0) atomic_publish(tmp, path);
}

static inline float *staging_alloc(const CheckpointIO *io) {
    return io->staging_floats
               ? (float *)malloc_check(io->staging_floats * sizeof(float), "checkpoint staging")
               : NULL;
}

// The checkpoint of state->step, every rank's files durable before latest_checkpoint names it. opts: a
// directory renamed since the run took it is written under its new name, and the run then stops.
static inline void checkpoint_save(const CheckpointIO *io, TrainOptions *opts, TrainState *state,
                                   const GPTConfig *cfg) {
    long step = (long)state->step;
    RunDirState dir = run_dir_check_owned(opts, io->rank, step, io->sum, io->sum_ctx);
    char model_path[CHECKPOINT_PATH_LEN], state_path[CHECKPOINT_PATH_LEN];
    checkpoint_paths(opts->output_dir, step, io->rank, model_path, state_path, sizeof(model_path));
    write_model_parallel(io, model_path, cfg);
    int64_t model_size;
    state->model_digest =
        checkpoint_model_digest(model_path, &model_size, io->rank, io->world_size, io->sum, io->sum_ctx);
    float *staging = staging_alloc(io);
    StateBlock blocks[NUM_STATE_BLOCKS];
    io->state_blocks(io->trainer, staging, blocks);
    if (io->state_to_blocks) io->state_to_blocks(io->trainer, blocks);
    save_state_file(state_path, state, cfg, blocks);
    free(staging);
    checkpoint_manifest(opts->output_dir, step, model_size, state->model_digest, io->rank, io->world_size,
                        io->sum, io->sum_ctx);
    rank_sum_barrier(io->sum, io->sum_ctx); // every rank's files are complete before the pointer moves on
    if (io->rank == 0) {
        write_latest_checkpoint(opts->output_dir, step);
        prune_checkpoints(opts->output_dir, step, opts->keep_checkpoints);
    }
    printf("checkpoint | step %ld | %s\n", step, model_path);
    run_dir_stop_if_taken(dir, opts, step);
}

// The checkpoint of step read back: the model, then this rank's training state into state.
static inline void checkpoint_load(const CheckpointIO *io, const TrainOptions *opts, long step,
                                   TrainState *state, const GPTConfig *cfg) {
    char model_path[CHECKPOINT_PATH_LEN];
    model_file_path(opts->output_dir, step, model_path, sizeof(model_path));
    io->read_model(io->trainer, model_path);
    float *staging = staging_alloc(io);
    StateBlock blocks[NUM_STATE_BLOCKS];
    io->state_blocks(io->trainer, staging, blocks);
    load_training_state(opts->output_dir, step, state, cfg, blocks);
    io->state_from_blocks(io->trainer, state, blocks);
    free(staging);
    printf("resumed | step %ld | %s\n", step, model_path);
}

// The step a --resume run continues: rank 0 reads the pointer, every rank learns it, and the checkpoint's
// files are verified against their manifest (falling back to the newest intact one). -1: a fresh run.
static inline long resume_step_for_run(const TrainOptions *opts, int rank, int world, RankSum sum,
                                       void *ctx) {
    if (!opts->resume) return -1;
    double proposal = resume_step_proposal(rank, opts->output_dir);
    sum(ctx, &proposal, 1);
    return resume_verified_step(opts->output_dir, resume_step_agreed(proposal, rank, opts->output_dir), rank,
                                world, sum, ctx);
}

#endif // CHECKPOINT_IO_H

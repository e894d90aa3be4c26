// core/checkpoint.h: a checkpoint as a whole, shared by both trainers: the step the latest-checkpoint pointer
// names, the step a --resume continues, and the rotation of older checkpoints (--keep_checkpoints). Its files
// are the model file (model_file.h), a training state file per rank (train_state.h, read back by
// state_reshard.h) and the manifest of their digests (manifest.h).
//  - `latest_checkpoint` in the output directory names the step of the last complete checkpoint. It is
//    replaced only after every file of that step is durable, and every file is written to a temp
//    name, fsync'ed and renamed, so a run killed at any moment resumes from a complete checkpoint.
#ifndef CHECKPOINT_H
#define CHECKPOINT_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "atomic_file.h"
#include "cli.h"
#include "common.h"
#include "manifest.h"
#include "train_state.h"

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

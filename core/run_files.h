// core/run_files.h: an output directory belongs to one run, and a run writes only its own files; shared by
// both trainers.
//  - Rank 0 holds an flock on <dir>/.run_lock for the run's life: a second run on the directory (a
//    requeued job started while the first still runs, a typo in a sweep) is refused with the holder's host
//    and pid, before it writes anything. The kernel drops the lock when the holder dies, also on SIGKILL.
//    A filesystem without flock gets a warning, and the run goes on unguarded. The lock is never a symbolic
//    link's target, and the run knows the lock file and the directory by identity (run_dir_check_owned,
//    before each checkpoint): a lock removed is taken again and a directory renamed is written under its
//    new name, where no other run can have written, and the run stops after that checkpoint; a directory
//    removed, or a lock another run holds, stops it before the checkpoint.
//  - A fresh run into a directory that holds a checkpoint (latest_checkpoint, or only checkpoint files) is
//    refused unless --overwrite 1, which also removes the pointer and the manifests so that no later
//    --resume continues the old run.
//  - The ranks read the same training data: each shard's content digest against rank 0's.
//  - Every rank reads back a token rank 0 wrote (<dir>/.run_token, unique to the run) before any
//    training: ranks that see another directory of the same name (node-local paths) are named on every rank
//    in one line, where otherwise they would train to the end and fail at the final checkpoint.
//  - The run tag in that token names this run's temp files (atomic_file.h's temp_path).
//  - --log_file may name no input: it would be truncated or appended to.
#ifndef RUN_FILES_H
#define RUN_FILES_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "atomic_file.h"
#include "checkpoint.h"
#include "cli.h"
#include "common.h"
#include "dataloader.h"
#include "dist.h"
#include "manifest.h"

#define RUN_LOCK_NAME ".run_lock"
#define RUN_TOKEN_NAME ".run_token"

static inline void run_file_path(const char *dir, const char *name, char *path, size_t len) {
    if ((size_t)snprintf(path, len, "%s/%s", dir, name) >= len) fail("--output_dir: %s: path too long", dir);
}

static inline void host_name(char *host, size_t len) {
    if (gethostname(host, len) != 0) snprintf(host, len, "unknown host");
    host[len - 1] = '\0';
}

// Held until the process ends: closing any descriptor of the file would drop the lock. The directory is held
// open too: the run knows both by identity (device and inode), not by name (run_dir_check_owned).
static int run_lock_fd = -1, run_dir_fd = -1;

// The lock file's content, which a run refused on the directory prints: this host and pid. 0 on failure.
static inline int write_lock_holder(int fd) {
    char host[128], line[256];
    host_name(host, sizeof(host));
    int len = snprintf(line, sizeof(line), "host %s, pid %ld\n", host, (long)getpid());
    return ftruncate(fd, 0) == 0 && pwrite(fd, line, (size_t)len, 0) == len;
}

static inline void run_dir_lock(const char *dir) {
    char path[CHECKPOINT_PATH_LEN];
    run_file_path(dir, RUN_LOCK_NAME, path, sizeof(path));
    // O_NOFOLLOW: a symbolic link in the lock's place (to a shard, say) would be truncated and written
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    struct stat st;
    if (fd < 0 && errno == ELOOP)
        fail("--output_dir: the lock file %s is a symbolic link: the run writes its own lock there, not into "
             "what the link names; remove the link",
             path);
    if (fd < 0) fail("--output_dir: cannot open the lock file %s: %s", path, strerror(errno));
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        fail("--output_dir: the lock file %s is not a regular file; remove it", path);
    run_dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (run_dir_fd < 0) fail("--output_dir: cannot open %s: %s", dir, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno == ENOLCK || errno == ENOSYS || errno == EOPNOTSUPP) {
            printf("warning: --output_dir: %s cannot be locked (%s): nothing stops a second run from writing "
                   "this directory at the same time\n",
                   path, strerror(errno));
            close(fd);
            return;
        }
        if (errno != EWOULDBLOCK) fail("--output_dir: cannot lock %s: %s", path, strerror(errno));
        char holder[256] = "";
        ssize_t n = pread(fd, holder, sizeof(holder) - 1, 0);
        holder[n > 0 ? n : 0] = '\0';
        holder[strcspn(holder, "\n")] = '\0';
        fail("--output_dir: %s is in use by another run (%s, lock %s): wait for it to end, or choose another "
             "directory",
             dir, *holder ? holder : "its host and pid not yet written", path);
    }
    if (!write_lock_holder(fd)) fail("--output_dir: cannot write %s: %s", path, strerror(errno));
    run_lock_fd = fd;
}

// Whether path is still the file (or directory) fd holds open.
static inline int path_is_open_file(const char *path, int fd) {
    struct stat by_path, held;
    return fd >= 0 && stat(path, &by_path) == 0 && fstat(fd, &held) == 0 && by_path.st_dev == held.st_dev &&
           by_path.st_ino == held.st_ino;
}

// Whether this rank reads back the token rank 0 wrote.
static inline int sees_run_token(const char *path, const char *expected) {
    char got[64] = "";
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t n = fread(got, 1, sizeof(got) - 1, f);
    fclose(f);
    got[n] = '\0';
    return strcmp(got, expected) == 0;
}

// The run's directory as this rank holds it open, named again through /proc (Linux): into path, 1 where it
// still has a name that leads to it; 0 where it was removed.
static inline int held_dir_path(char *path, size_t len) {
    char link[64];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", run_dir_fd);
    ssize_t n = run_dir_fd >= 0 ? readlink(link, path, len - 1) : -1;
    if (n <= 0 || (size_t)n >= len - 1) return 0;
    path[n] = '\0';
    return path_is_open_file(path, run_dir_fd); // a removed directory's link ends in " (deleted)"
}

// Rank 0, its lock file removed or replaced: the lock taken again where no other run holds it and the
// directory's token is still this run's (a run that took the directory meanwhile wrote its own). 1 if so.
static inline int run_lock_retake(const char *dir) {
    char lock[CHECKPOINT_PATH_LEN], token_path[CHECKPOINT_PATH_LEN], token[64];
    run_file_path(dir, RUN_LOCK_NAME, lock, sizeof(lock));
    run_file_path(dir, RUN_TOKEN_NAME, token_path, sizeof(token_path));
    snprintf(token, sizeof(token), "%s\n", run_tag);
    int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    struct stat st;
    if (fd < 0) return 0;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || flock(fd, LOCK_EX | LOCK_NB) != 0 ||
        !sees_run_token(token_path, token) || !write_lock_holder(fd)) {
        close(fd);
        return 0;
    }
    close(run_lock_fd); // the removed file's lock
    run_lock_fd = fd;
    return 1;
}

// What run_dir_check_owned found: the directory still the run's; taken away but written by this run alone
// (its checkpoint is written, then the run stops); lost (nothing is written).
typedef enum {
    RUN_DIR_OWNED,
    RUN_DIR_LOCK_RETAKEN,
    RUN_DIR_MOVED,
    RUN_DIR_REMOVED,
    RUN_DIR_LOCK_LOST
} RunDirState;

// Where a moved directory was: for run_dir_stop_if_taken's line.
static char run_dir_moved_from[OPTION_STRING_LEN];

// Rank 0: the state of the directory it holds, and in moved the name it now has where it was renamed.
static inline RunDirState run_dir_state(const char *dir, char *moved, size_t len) {
    int renamed = !path_is_open_file(dir, run_dir_fd);
    if (renamed && !held_dir_path(moved, len)) return RUN_DIR_REMOVED;
    const char *now = renamed ? moved : dir;
    char lock[CHECKPOINT_PATH_LEN];
    run_file_path(now, RUN_LOCK_NAME, lock, sizeof(lock));
    int lock_held = path_is_open_file(lock, run_lock_fd);
    if (!lock_held && !run_lock_retake(now)) return RUN_DIR_LOCK_LOST;
    return renamed ? RUN_DIR_MOVED : lock_held ? RUN_DIR_OWNED : RUN_DIR_LOCK_RETAKEN;
}

// Every rank, before a checkpoint is written: rank 0 checks that --output_dir is still the directory it
// locked and its lock file still the one it holds. What was taken away, the run takes back where no other
// run can have written there, so that the step's checkpoint is not lost: a lock file removed or replaced
// is taken again (run_lock_retake); a directory renamed is written under its new name, which every rank
// finds from the directory it holds open (opts->output_dir then names it). A directory removed, a lock
// another run holds, or a rank that cannot find the moved directory stops the run, writing nothing.
static inline RunDirState run_dir_check_owned(TrainOptions *opts, int rank, long step, RankSum sum,
                                              void *ctx) {
    if (!*opts->output_dir) return RUN_DIR_OWNED;
    char moved[OPTION_STRING_LEN] = "";
    double state = RUN_DIR_OWNED;
    if (rank == 0 && run_lock_fd >= 0) // (no lock: a filesystem without flock, warned of at start)
        state = run_dir_state(opts->output_dir, moved, sizeof(moved));
    sum(ctx, &state, 1);
    if (state == RUN_DIR_REMOVED)
        fail("--output_dir: %s was removed since this run took it: stopping, the checkpoint of step %ld "
             "cannot be written",
             opts->output_dir, step);
    if (state == RUN_DIR_LOCK_LOST)
        fail("--output_dir: %s lost its lock file since this run took it, and another run holds the lock or "
             "wrote its %s: stopping before the checkpoint of step %ld, which is not written; the "
             "latest_checkpoint this run wrote there is its last",
             opts->output_dir, RUN_TOKEN_NAME, step);
    if (state == RUN_DIR_MOVED) { // every rank finds the directory it holds: one mount may name it otherwise
        double lost = rank != 0 && !held_dir_path(moved, sizeof(moved));
        sum(ctx, &lost, 1);
        if (lost != 0.0)
            fail("--output_dir: %s was renamed since this run took it, and %d rank(s) cannot find it under "
                 "its new name: stopping before the checkpoint of step %ld, which is not written",
                 opts->output_dir, (int)lost, step);
        snprintf(run_dir_moved_from, sizeof(run_dir_moved_from), "%s", opts->output_dir);
        snprintf(opts->output_dir, sizeof(opts->output_dir), "%s", moved);
    }
    return (RunDirState)state;
}

// After the checkpoint of step: a run whose directory was taken away stops, saying where its checkpoint is.
static inline void run_dir_stop_if_taken(RunDirState state, const TrainOptions *opts, long step) {
    if (state == RUN_DIR_LOCK_RETAKEN)
        fail("--output_dir: the lock file %s/%s was removed or replaced since this run took it; no other run "
             "took the directory, so the lock is taken again, the checkpoint of step %ld is written, and the "
             "run stops: continue it with --resume 1",
             opts->output_dir, RUN_LOCK_NAME, step);
    if (state == RUN_DIR_MOVED)
        fail("--output_dir: %s was renamed to %s since this run took it: the checkpoint of step %ld is "
             "written there, and the run stops: continue it with --output_dir %s --resume 1",
             run_dir_moved_from, opts->output_dir, step, opts->output_dir);
}

// Temp files of a killed run: what atomic_file.h's writes leave in the directory, with any run's tag.
static inline int is_leftover_temp(const char *name) {
    size_t n = strlen(name);
    return n > 4 && strcmp(name + n - 4, ".tmp") == 0 &&
           (!strncmp(name, "model_", 6) || !strncmp(name, "state_", 6) || !strncmp(name, "manifest_", 9) ||
            !strncmp(name, "latest_checkpoint.", 18));
}

static inline void remove_leftover_temps(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) fail("--output_dir: cannot list %s: %s", dir, strerror(errno));
    char path[CHECKPOINT_PATH_LEN];
    for (struct dirent *e = readdir(d); e; e = readdir(d)) {
        if (!is_leftover_temp(e->d_name)) continue;
        run_file_path(dir, e->d_name, path, sizeof(path));
        if (remove(path) != 0 && errno != ENOENT)
            fail("--output_dir: cannot remove %s, left by a killed run: %s", path, strerror(errno));
    }
    closedir(d);
}

// The first file of a checkpoint (a model, state or manifest file) in dir, into name; 0 if there is none.
static inline int find_checkpoint_file(const char *dir, char *name, size_t len) {
    DIR *d = opendir(dir);
    if (!d) fail("--output_dir: cannot list %s: %s", dir, strerror(errno));
    int found = 0;
    long step;
    for (struct dirent *e = readdir(d); e && !found; e = readdir(d))
        if ((found = checkpoint_file_step(e->d_name, &step) || manifest_file_step(e->d_name, &step)))
            snprintf(name, len, "%s", e->d_name);
    closedir(d);
    return found;
}

// --overwrite: the old run's pointer and manifests go, so that neither a --resume nor its fall-back to an
// older checkpoint (checkpoint.h) continues the old run; its other files are overwritten as the new run
// reaches their steps, or stay unread.
static inline void forget_old_checkpoints(const char *dir, const char *pointer) {
    if (remove(pointer) != 0 && errno != ENOENT)
        fail("--overwrite: cannot remove %s: %s", pointer, strerror(errno));
    DIR *d = opendir(dir);
    if (!d) fail("--output_dir: cannot list %s: %s", dir, strerror(errno));
    char path[CHECKPOINT_PATH_LEN];
    long step;
    for (struct dirent *e = readdir(d); e; e = readdir(d)) {
        if (!manifest_file_step(e->d_name, &step)) continue;
        run_file_path(dir, e->d_name, path, sizeof(path));
        if (remove(path) != 0 && errno != ENOENT)
            fail("--overwrite: cannot remove %s: %s", path, strerror(errno));
    }
    closedir(d);
}

// Rank 0, before anything is written into the directory (prepare_output_dir has made it): the lock, the
// refusal of a fresh run over a checkpoint (named by latest_checkpoint, or only its files left: a pointer
// removed by hand), a killed run's temp files removed.
static inline void run_dir_claim(const TrainOptions *opts, int rank) {
    if (rank != 0 || !*opts->output_dir) return;
    const char *dir = opts->output_dir;
    run_dir_lock(dir);
    char pointer[CHECKPOINT_PATH_LEN], name[256];
    run_file_path(dir, "latest_checkpoint", pointer, sizeof(pointer));
    struct stat st;
    if (!opts->resume && !opts->overwrite && stat(pointer, &st) == 0)
        fail("--output_dir: %s holds a checkpoint of another run (%s): continue it with --resume 1, start "
             "over it with --overwrite 1, or choose another directory",
             dir, pointer);
    if (!opts->resume && !opts->overwrite && find_checkpoint_file(dir, name, sizeof(name)))
        fail("--output_dir: %s holds checkpoint files of another run (%s) but no latest_checkpoint: start "
             "over "
             "it with --overwrite 1, or choose another directory",
             dir, name);
    if (opts->overwrite) forget_old_checkpoints(dir, pointer);
    remove_leftover_temps(dir);
}

// A tag unique to this run (the time in microseconds and the pid of rank 0), exact in a double.
static inline double run_tag_proposal(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t t = (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
    return (double)((t ^ ((uint64_t)getpid() << 32)) & ((1ull << 52) - 1));
}

// Every rank, at the same point after run_dir_claim: the run tag agreed, and every rank shown to see the
// directory rank 0 writes. Which ranks do not see it goes over the ranks as bits, 52 to a double (exact).
static inline void run_dir_agree(const TrainOptions *opts, int rank, int world, RankSum sum, void *ctx) {
    double tag = rank == 0 ? run_tag_proposal() : 0.0;
    char token[64] = "", path[CHECKPOINT_PATH_LEN];
    if (*opts->output_dir) run_file_path(opts->output_dir, RUN_TOKEN_NAME, path, sizeof(path));
    if (rank == 0) {
        snprintf(run_tag, sizeof(run_tag), "r%013llx", (unsigned long long)tag);
        snprintf(token, sizeof(token), "%s\n", run_tag);
        if (*opts->output_dir) {
            char tmp[CHECKPOINT_PATH_LEN];
            FILE *f = atomic_open(path, tmp, sizeof(tmp));
            fputs(token, f);
            atomic_commit(f, tmp, path);
        }
    }
    if (world > 1) sum(ctx, &tag, 1); // also the barrier between rank 0's write and the others' reads
    snprintf(run_tag, sizeof(run_tag), "r%013llx", (unsigned long long)tag);
    snprintf(token, sizeof(token), "%s\n", run_tag);
    if (!*opts->output_dir || world == 1) return;
    int blind = !sees_run_token(path, token);
    char ranks[512] = "";
    int missing = 0;
    for (int first = 0; first < world; first += 4 * 52) {
        double bits[4] = {0, 0, 0, 0};
        if (blind && rank >= first && rank < first + 4 * 52)
            bits[(rank - first) / 52] = (double)(1ull << ((rank - first) % 52));
        sum(ctx, bits, 4);
        for (int r = first; r < first + 4 * 52 && r < world; r++) {
            if (!(((uint64_t)bits[(r - first) / 52] >> ((r - first) % 52)) & 1)) continue;
            size_t used = strlen(ranks);
            if (missing++ < 16) snprintf(ranks + used, sizeof(ranks) - used, "%s%d", used ? ", " : "", r);
        }
    }
    if (missing)
        fail("--output_dir: %s: rank(s) %s%s of %d do not see the directory rank 0 writes (its %s): "
             "every rank must name one directory on a filesystem all the nodes share, not a node-local path",
             opts->output_dir, ranks, missing > 16 ? " and more" : "", world, RUN_TOKEN_NAME);
    // held open, as rank 0 holds it: the directory is found again if it is renamed (run_dir_check_owned)
    if (rank != 0 && (run_dir_fd = open(opts->output_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
        fail("--output_dir: cannot open %s: %s", opts->output_dir, strerror(errno));
}

static inline int same_file(const struct stat *a, const char *path) {
    struct stat b;
    return stat(path, &b) == 0 && a->st_dev == b.st_dev && a->st_ino == b.st_ino;
}

static inline void check_log_not(const char *log_path, const struct stat *log, const char *path,
                                 const char *flag) {
    if (same_file(log, path))
        fail("--log_file: %s is the file %s names (%s): the log would overwrite it; name another file",
             log_path, flag, path);
}

// Whether name is a file this run writes in its output directory.
static inline int is_run_file_name(const char *name) {
    long step;
    return checkpoint_file_step(name, &step) || manifest_file_step(name, &step) ||
           !strcmp(name, "latest_checkpoint") || !strcmp(name, RUN_LOCK_NAME) ||
           !strcmp(name, RUN_TOKEN_NAME);
}

// --log_file is opened for writing: it may be no input of the run (a shard, the model it starts from, the
// tokenizer) and no file the run writes in --output_dir. Files are compared as the filesystem knows them
// (device and inode), so another spelling of a path is caught too.
static inline void check_log_file(const TrainOptions *opts, const DataLoader *train, const DataLoader *val) {
    if (!*opts->log_file) return;
    char parent[CHECKPOINT_PATH_LEN];
    snprintf(parent, sizeof(parent), "%s", opts->log_file);
    char *slash = strrchr(parent, '/');
    const char *name = slash ? slash + 1 : opts->log_file;
    if (slash)
        slash[slash == parent ? 1 : 0] = '\0';
    else
        strcpy(parent, ".");
    struct stat dir;
    if (*opts->output_dir && stat(opts->output_dir, &dir) == 0 && same_file(&dir, parent) &&
        is_run_file_name(name))
        fail("--log_file: %s is a file the run writes in --output_dir %s; name another file", opts->log_file,
             opts->output_dir);
    struct stat log;
    if (stat(opts->log_file, &log) != 0) return; // a new file is no input
    if (opts->resume && !S_ISREG(log.st_mode))
        fail("--log_file: %s is not a regular file (a pipe, a device, /dev/stdout): --resume 1 rewrites the "
             "log "
             "to drop the steps it redoes; name a file, or leave --log_file out",
             opts->log_file);
    for (int i = 0; i < train->num_shards; i++)
        check_log_not(opts->log_file, &log, train->shard_paths[i], "--train_data");
    for (int i = 0; val && i < val->num_shards; i++)
        check_log_not(opts->log_file, &log, val->shard_paths[i], "--val_data");
    if (*opts->init_from) check_log_not(opts->log_file, &log, opts->init_from, "--init_from");
    if (*opts->tokenizer) check_log_not(opts->log_file, &log, opts->tokenizer, "--tokenizer");
    if (*opts->debug_state) check_log_not(opts->log_file, &log, opts->debug_state, "--debug_state");
}

// Every rank, once its training data is fingerprinted (train_state_init): each shard's content against rank
// 0's. Ranks whose files have the same names and sizes but other content (node-local copies of another
// version) would train on a mix; every rank refuses, those that differ naming their first such shard.
static inline void check_ranks_same_data(const DataLoader *train, int rank, int world, RankSum sum,
                                         void *ctx) {
    if (world == 1) return;
    int n = train->num_shards; // the same on every rank: check_ranks_agree compared the shard lists
    double *digests = (double *)calloc((size_t)n + 1, sizeof(double));
    if (!digests) fail("out of memory for %d shard digests", n);
    for (int i = 0; rank == 0 && i < n; i++)
        digests[i] = (double)(train->shard_digests[i] & ((1ull << 52) - 1));
    sum(ctx, digests, n);
    int differs = -1;
    for (int i = 0; i < n && differs < 0; i++)
        if (digests[i] != (double)(train->shard_digests[i] & ((1ull << 52) - 1))) differs = i;
    double ranks_differing = differs >= 0;
    sum(ctx, &ranks_differing, 1);
    free(digests);
    if (differs >= 0)
        fail("--train_data: rank %d: %s has other content than rank 0's file of that name (same size): every "
             "rank must read the same data",
             rank, train->shard_paths[differs]);
    if (ranks_differing > 0)
        fail("--train_data: %d rank(s) read other content than rank 0's shards (each names its file): every "
             "rank "
             "must read the same data",
             (int)ranks_differing);
}

// The inputs checked at start where that is cheap: the log names none of them, and every token of the
// validation shards is in the vocabulary (a bad one would otherwise end the run at its final validation).
static inline void check_run_inputs(const TrainOptions *opts, int rank, const DataLoader *train,
                                    const DataLoader *val) {
    if (rank == 0) check_log_file(opts, train, val);
    if (val) dataloader_check_tokens(val, "--val_data");
}

#endif // RUN_FILES_H

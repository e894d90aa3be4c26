// core/atomic_file.h: how both trainers write a file so that no kill or full disk leaves it half-written
// (a temp name, fsync'ed, renamed over the path), and the output directory and the files flags name,
// created and proven writable before any training.
#ifndef ATOMIC_FILE_H
#define ATOMIC_FILE_H

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"

#define CHECKPOINT_PATH_LEN 1200 // fits --output_dir (at most 511 characters) and a file name

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

#endif // ATOMIC_FILE_H

// core/manifest.h: a checkpoint verified before it is trusted, shared by both trainers.
//  - `manifest_<step>.txt`: each file's size and digest, read back from disk once written; a resume checks
//    them before it trusts the checkpoint, and falls back to an older one that passes.
#ifndef MANIFEST_H
#define MANIFEST_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomic_file.h"
#include "common.h"
#include "dist.h"
#include "model_file.h"
#include "train_state.h"

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
    rank_sum_barrier(sum, ctx); // rank 0 has renamed the file into place
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

#endif // MANIFEST_H

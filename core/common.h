// core/common.h: error reporting, checked allocation / file I/O, the monotonic clock and FNV-1a digests,
// shared by both trainers and the tools.
// Every failure ends the process with one line "error: <what>: <why>" on stderr and exit status 1,
// so scripts and users see one clear cause and no partial state is ever written in its place.
#ifndef COMMON_H
#define COMMON_H

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#ifdef FUZZING
// The fuzz harnesses (test/fuzz/fuzz.h) feed the readers one input after another in one process: a refused
// input jumps back to the harness, which then releases what the reader held, so that a million refusals
// exhaust neither file descriptors nor memory. malloc_check, calloc_check and fopen_check record what they
// hand out; free and fclose, redefined for the code below, strike it off.
#include <setjmp.h>
extern jmp_buf fuzz_refused;
void fuzz_hold(void *resource, int is_file);
void fuzz_forget(void *resource);
static inline void fuzz_free(void *p) {
    fuzz_forget(p);
    free(p);
}
static inline int fuzz_fclose(FILE *f) {
    fuzz_forget(f);
    return fclose(f);
}
#define free fuzz_free
#define fclose fuzz_fclose
#define FUZZ_HOLD(resource, is_file) fuzz_hold(resource, is_file)
#else
#define FUZZ_HOLD(resource, is_file) ((void)0)
#endif

// The line is written with one call, so that the errors of several processes sharing a terminal or log
// (mpirun) do not interleave mid-line.
__attribute__((noreturn, format(printf, 1, 2))) static inline void fail(const char *fmt, ...) {
#ifdef FUZZING
    (void)fmt;
    longjmp(fuzz_refused, 1);
#endif
    fflush(stdout);
    char line[2048] = "error: ";
    size_t prefix = strlen(line);
    va_list args;
    va_start(args, fmt);
    vsnprintf(line + prefix, sizeof(line) - prefix - 1, fmt, args);
    va_end(args);
    strcat(line, "\n");
    fputs(line, stderr);
    fflush(stderr);
    exit(1);
}

static inline void *malloc_check(size_t bytes, const char *what) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) fail("%s: out of host memory allocating %zu bytes", what, bytes);
    FUZZ_HOLD(p, 0);
    return p;
}

static inline void *calloc_check(size_t count, size_t size, const char *what) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) fail("%s: out of host memory allocating %zu bytes", what, count * size);
    FUZZ_HOLD(p, 0);
    return p;
}

static inline FILE *fopen_check(const char *path, const char *mode) {
    FILE *f = fopen(path, mode);
    if (!f) fail("%s: cannot open: %s", path, strerror(errno));
    FUZZ_HOLD(f, 1);
    return f;
}

// Opens an input file once it is known to be a regular one: opening a FIFO blocks until a writer comes,
// a device reads forever, and a directory would read as a truncated file.
static inline FILE *fopen_regular(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) fail("%s: cannot open: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) fail("%s: is a directory, not a file", path);
    if (!S_ISREG(st.st_mode))
        fail("%s: not a regular file (a FIFO, device or socket cannot be read as one)", path);
    return fopen_check(path, "rb");
}

// Lines reach a pipe or a file as they are printed (a run piped into tee shows its progress), not when a
// 4 KiB buffer fills.
static inline void line_buffer_stdout(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
}

// Milliseconds on the monotonic clock (POSIX: the trainers build with _GNU_SOURCE): step times, and the
// deadlines of waits on other processes.
static inline double wall_time_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

// Reads exactly count elements or fails naming the file: a short read means a truncated file.
static inline void fread_check(void *dst, size_t size, size_t count, FILE *f, const char *path) {
    if (fread(dst, size, count, f) != count) fail("%s: file is truncated (short read)", path);
}

static inline void fwrite_check(const void *src, size_t size, size_t count, FILE *f, const char *path) {
    if (fwrite(src, size, count, f) != count) fail("%s: write failed: %s", path, strerror(errno));
}

// Size of an open file in bytes, leaving the position at the start.
static inline int64_t file_size_check(FILE *f, const char *path) {
    if (fseek(f, 0, SEEK_END) != 0) fail("%s: cannot seek: %s", path, strerror(errno));
    long size = ftell(f);
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0) fail("%s: cannot seek: %s", path, strerror(errno));
    return (int64_t)size;
}

// FNV-1a, 64 bits: a digest of bytes that needs no table (checkpoint fingerprints, the ranks' agreement).
#define FNV1A_START 0xcbf29ce484222325ull
#define FNV1A_PRIME 0x100000001b3ull
static inline uint64_t fnv1a(uint64_t h, const void *data, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ ((const uint8_t *)data)[i]) * FNV1A_PRIME;
    return h;
}

// The same, 8 bytes a multiply (then the odd tail byte by byte): for bulk data (the training shards'
// fingerprint, checkpoint digests), where the read, not the hash, sets the pace.
static inline uint64_t fnv1a_words(uint64_t h, const void *data, size_t n) {
    const uint8_t *bytes = (const uint8_t *)data;
    size_t k = 0;
    for (; k + 8 <= n; k += 8) {
        uint64_t w;
        memcpy(&w, bytes + k, 8);
        h = (h ^ w) * FNV1A_PRIME;
        h ^= h >> 32;
    }
    return fnv1a(h, bytes + k, n - k);
}

#endif // COMMON_H

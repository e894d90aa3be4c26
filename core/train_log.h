// core/train_log.h: what both trainers tell the user, and the learning-rate schedule they share. The per-step
// line and the JSON-lines records are printed by these functions only, so a CPU and a GPU run of one
// configuration can be diffed line by line.
#ifndef TRAIN_LOG_H
#define TRAIN_LOG_H

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "atomic_file.h"
#include "cli.h"
#include "common.h"

// Learning rate of optimizer step `step` (0-based), as llm.c computes it (llmc/schedulers.h; train_gpt2.py's
// get_lr the same in double), so that a run lines up step for step with llm.c's of the same settings: linear
// warmup from lr/warmup to lr over the first warmup steps, then the decay from lr towards lr * final_lr_frac,
// its progress (step - warmup) / (steps - warmup): it would reach the end at step `steps`, one past the last.
static inline float learning_rate(const TrainOptions *opts, int step) {
    float lr = opts->lr, min_lr = opts->lr * opts->final_lr_frac;
    if (step < opts->warmup_steps) return lr * (float)(step + 1) / (float)opts->warmup_steps;
    if (opts->lr_schedule == LR_CONSTANT) return lr;
    float decay_ratio = (float)(step - opts->warmup_steps) / (float)(opts->steps - opts->warmup_steps);
    if (opts->lr_schedule == LR_LINEAR) return lr - decay_ratio * (lr - min_lr);
    float coeff = 0.5f * (1.0f + cosf((float)(M_PI * decay_ratio))); // llm.c's M_PI product, in double
    return min_lr + coeff * (lr - min_lr);
}

// Whether a periodic action (validation, checkpoint) falls after `steps_done` steps: every `every`
// steps (0: never periodically) and always after the last.
static inline int is_due(int steps_done, int every, int last) {
    return last || (every > 0 && steps_done % every == 0);
}

typedef struct {
    FILE *jsonl;      // NULL: no JSON-lines log
    const char *path; // --log_file
    int failed;       // a write failed: no more records; the run stops after its step (run_control.h)
} RunLog;

// One JSON-lines record, written whole or not at all: formatted first, then written with write(2) (no
// stdio buffer that could flush a piece of it later). A failed write (a full disk) is cut back to the last
// whole record, said once, and stops the run after its step with a checkpoint (run_control.h): the log never
// holds a torn line, and the training since the last checkpoint is kept where the disk still takes it.
__attribute__((format(printf, 2, 3))) static inline void run_log_record(RunLog *log, const char *fmt, ...) {
    if (!log->jsonl || log->failed) return;
    char record[4096];
    va_list args;
    va_start(args, fmt);
    int n = vsnprintf(record, sizeof(record), fmt, args);
    va_end(args);
    if (n < 0 || (size_t)n >= sizeof(record))
        fail("--log_file: %s: a record of %d bytes is too long", log->path, n);
    int fd = fileno(log->jsonl);
    struct stat st;
    off_t before = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? st.st_size : -1;
    ssize_t done = 0;
    while (done < n) {
        ssize_t w = write(fd, record + done, (size_t)(n - done));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        done += w;
    }
    if (done == n) return;
    int err = done < n && errno ? errno : EIO;
    int cut = done == 0 || (before >= 0 && ftruncate(fd, before) == 0);
    fflush(stdout);
    fprintf(
        stderr, "error: --log_file: %s: a write failed: %s (disk full?); %s; the run stops after this step\n",
        log->path, strerror(err), cut ? "the log ends at its last whole record" : "its last record is torn");
    log->failed = 1;
}

// The log file opened for appending (created if missing), and locked: a log another run holds (two runs
// given one --log_file) is refused before anything is written to it, as its directory would be. A FIFO or a
// device (/dev/stdout) has no lock and no size: written as it is. Truncated first where `truncate`.
static inline FILE *run_log_file_open(const char *path, int truncate) {
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) fail("--log_file: cannot open %s: %s", path, strerror(errno));
    if (S_ISREG(st.st_mode) && flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK)
        fail("--log_file: %s is in use by another run: give each run its own log", path);
    if (truncate && S_ISREG(st.st_mode) && ftruncate(fd, 0) != 0)
        fail("--log_file: cannot truncate %s: %s", path, strerror(errno));
    FILE *f = fdopen(fd, "ab");
    if (!f) fail("--log_file: cannot open %s: %s", path, strerror(errno));
    return f;
}

// Opens the JSON-lines log. A resumed run (resume_step > 0) keeps the records up to its checkpoint and
// drops those it is about to redo, so the log reads as one run: the steps after the checkpoint, and the
// validation at its step, which runs after the checkpoint is written (a run killed between the two has
// none) and which a resumed run therefore redoes first (resume_validation). A last line without its newline
// (a run killed mid-write, a copy cut short) is dropped with a line saying so: records are whole lines.
// The kept records go to a temp file that replaces the log only once written in full (atomic_commit), so
// a full disk during the rewrite leaves the log as it was. A log that is a symbolic link is rewritten where
// the link points, and the link stays.
static inline void run_log_open(RunLog *log, const char *path, long resume_step) {
    log->jsonl = NULL;
    log->path = path;
    log->failed = 0;
    if (!*path) return;
    struct stat st;
    if (resume_step <= 0 || stat(path, &st) != 0) {
        log->jsonl = run_log_file_open(path, 1);
        return;
    }
    if (!S_ISREG(st.st_mode)) // check_log_file refused it on --resume; a resume at step 0 writes it as it is
        fail("--log_file: %s is not a regular file: a resumed run rewrites its log", path);
    char real[PATH_MAX], tmp[CHECKPOINT_PATH_LEN];
    if (!realpath(path, real)) fail("--log_file: %s: %s", path, strerror(errno));
    fclose(run_log_file_open(real, 0)); // refused here if another run holds it
    FILE *old = fopen_check(real, "rb");
    FILE *kept = atomic_open(real, tmp, sizeof(tmp));
    char line[4096];
    while (fgets(line, sizeof(line), old)) {
        size_t n = strlen(line);
        if (line[n - 1] != '\n' && feof(old)) {
            printf(
                "resume | --log_file: %s: its last line was cut short (%zu bytes, no newline: a run killed "
                "mid-write, or a copy cut short); the log goes on from its last whole record\n",
                path, n);
            break;
        }
        const char *step = strstr(line, "\"step\":");
        long at = step ? strtol(step + 7, NULL, 10) : 0;
        int redone =
            at > resume_step ||
            (at == resume_step && (strstr(line, "\"type\":\"val\"") || strstr(line, "\"type\":\"eval\"")));
        if (!redone && fputs(line, kept) == EOF)
            fail("--log_file: %s: a write failed (disk full?): %s; %s is left as it was", tmp,
                 strerror(errno), path);
    }
    fclose(old);
    atomic_commit(kept, tmp, real);
    log->jsonl = run_log_file_open(real, 0);
}

// Whether a resumed run starts with the validation of its checkpoint's step (see run_log_open).
static inline int resume_validation(const TrainOptions *opts, long resume_step, int have_val) {
    return opts->resume && resume_step > 0 && have_val && is_due((int)resume_step, opts->val_every, 0);
}

// The same for the --eval_data accuracy, which follows the validation.
static inline int resume_scoring(const TrainOptions *opts, long resume_step) {
    return opts->resume && resume_step > 0 && *opts->eval_data &&
           is_due((int)resume_step, opts->eval_every, 0);
}

static inline void run_log_close(RunLog *log) {
    if (log->jsonl) fclose(log->jsonl);
}

// Why a step was skipped (0: applied): the guards of health.h, on the CPU and on the GPU.
enum { SKIP_NONE = 0, SKIP_NONFINITE = 1, SKIP_LOSS_SPIKE = 2, SKIP_NORM_SPIKE = 3 };

static inline const char *skip_reason_name(int reason) {
    static const char *names[] = {"applied", "non-finite loss or norm", "loss spike", "gradient norm spike"};
    return names[reason];
}

typedef struct {
    int step, steps;
    float loss, lr, grad_norm;
    double ms;
    double tokens_per_second;
    int skipped;            // SKIP_*: why the guard skipped this step's update (0: applied)
    double flops_per_token; // time_plan.h's model_flops_per_token: the field's count, MFU's numerator
} StepRecord;

// A float as a JSON value: JSON has no NaN or infinity, so a non-finite value is written as null.
static inline const char *json_float(char *buf, size_t len, float x) {
    if (isfinite(x))
        snprintf(buf, len, "%.9g", x);
    else
        snprintf(buf, len, "null");
    return buf;
}

static inline void log_step(RunLog *log, const StepRecord *r) {
    // the log's tokens_per_second times flops_per_token: the step line only, so that runs stay comparable
    // line by line once their timings are dropped (test_recompute, test_dist_emu)
    double model_tflops = r->flops_per_token * r->tokens_per_second / 1e12;
    printf("step %5d/%d | loss %.6f | lr %.3e | norm %.4f | %.1f ms | %.0f tok/s | model %.3g TFLOP/s",
           r->step, r->steps, r->loss, r->lr, r->grad_norm, r->ms, r->tokens_per_second, model_tflops);
    if (r->skipped) printf(" | skipped (%s)", skip_reason_name(r->skipped));
    printf("\n");
    char loss[32], norm[32];
    run_log_record(log,
                   "{\"type\":\"step\",\"step\":%d,\"loss\":%s,\"lr\":%.9g,\"grad_norm\":%s,\"ms\":%.3f,"
                   "\"tokens_per_second\":%.1f,\"skipped\":%d,\"skip_reason\":\"%s\"}\n",
                   r->step, json_float(loss, sizeof(loss), r->loss), r->lr,
                   json_float(norm, sizeof(norm), r->grad_norm), r->ms, r->tokens_per_second, r->skipped != 0,
                   skip_reason_name(r->skipped));
    fflush(stdout);
}

static inline void log_val(RunLog *log, int step, float val_loss) {
    printf("val   %5d | loss %.6f | perplexity %.4f\n", step, val_loss, exp(val_loss));
    run_log_record(log, "{\"type\":\"val\",\"step\":%d,\"val_loss\":%.9g,\"perplexity\":%.9g}\n", step,
                   val_loss, exp(val_loss));
    fflush(stdout);
}

// The multiple-choice accuracy of --eval_data (eval_data.h): correct of examples.
static inline void log_eval(RunLog *log, int step, int correct, int examples) {
    double accuracy = (double)correct / examples;
    printf("eval | step %d | accuracy %d/%d (%.4f)\n", step, correct, examples, accuracy);
    run_log_record(log, "{\"type\":\"eval\",\"step\":%d,\"correct\":%d,\"examples\":%d,\"accuracy\":%.9g}\n",
                   step, correct, examples, accuracy);
    fflush(stdout);
}

// A step of many micro-steps (a large --total_batch_size) says how far it is every PROGRESS_EVERY_MS, so a
// long first step is not mistaken for a hang. Called before each micro-step (micro from 0).
#define PROGRESS_EVERY_MS 10000.0

static inline void micro_step_progress(int step, int micro, int micro_steps) {
    static double last_ms;
    double now = wall_time_ms();
    if (micro == 0) {
        last_ms = now;
        return;
    }
    if (now - last_ms < PROGRESS_EVERY_MS) return;
    last_ms = now;
    printf("progress | step %d: micro-step %d/%d\n", step, micro, micro_steps);
    fflush(stdout);
}

#endif // TRAIN_LOG_H

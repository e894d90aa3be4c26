// core/run_control.h: how a run ends before its last step without losing work, shared by both trainers.
//  - Stop requests: SIGTERM (Slurm's preemption and time limit, `kill`), SIGINT (Ctrl-C), SIGHUP (a closed
//    terminal) and --stop_signal (SIGUSR1 by default: Slurm's early warning, `#SBATCH --signal=USR1@180`).
//    The handler only notes the signal; every rank votes in the step's collective (the loss sum carries the
//    votes), so all of them stop after the same step, write a checkpoint and exit EXIT_STOPPED: `--resume 1`
//    then continues bit-exactly. A stop asked for during set-up ends the run before its first step, with
//    EXIT_STOPPED too (stopped_in_set_up). A second signal ends the process at once (128 + the signal, as
//    the default action would): the files of a checkpoint being written are temp files, removed here, and
//    `latest_checkpoint` still names the previous complete one. A SIGTERM that follows a SIGTERM within
//    REPEATED_SIGTERM_MS (2 s) is the same request, not a second one: at a time limit or a preemption's end
//    Slurm sends every task SIGTERM twice, some milliseconds apart.
//  - SIGPIPE (stdout's reader gone: `| head`, a dead `tee`) and SIGXFSZ (a file-size limit) are ignored: the
//    write then fails with EPIPE or EFBIG where it is made, and says so. A checkpoint or log write fails with
//    its line; a failed stdout stops the run with a checkpoint and exit 1 (run_control_vote).
//  - --time_limit_s: a rank votes to stop once the time left would not hold two more steps and a checkpoint
//    as long as the longest so far (two: the CUDA trainer learns of the vote a step late).
//  - The guards (health.h): --max_consecutive_skips skipped steps in a row end the run after a checkpoint
//    with EXIT_UNHEALTHY, and so does a run whose steps were mostly skipped: a run never reports success
//    after training on almost nothing.
//  - Ranks that agree: at start every rank's settings against rank 0's (check_ranks_agree).
//  - --dry_run: the run ends after its plan, before anything is allocated, read or written (dry_run_only).
#ifndef RUN_CONTROL_H
#define RUN_CONTROL_H

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "atomic_file.h"
#include "cli.h"
#include "dataloader.h"
#include "dist.h"
#include "dry_run.h"
#include "train_log.h"

// Exit statuses besides 0 (done) and 1 (an error): a job script requeues on EXIT_STOPPED.
#define EXIT_STOPPED 75   // stopped early on request, the last step checkpointed (sysexits' EX_TEMPFAIL)
#define EXIT_UNHEALTHY 76 // the guards skipped too many steps: the weights are those of the last good step

static volatile sig_atomic_t stop_signal_received;
static volatile sig_atomic_t stop_signal_s, stop_signal_ms; // when it came: CLOCK_MONOTONIC, s and ms

// Slurm's time limit sends each task SIGTERM, SIGCONT and SIGTERM again (slurmd's time-limit request, then
// the job's termination; a preemption's end does the same): a SIGTERM this soon after the first is that one.
#define REPEATED_SIGTERM_MS 2000

// Async-signal-safe: clock_gettime, unlink and write and _exit only.
static inline void on_stop_signal(int signo) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (!stop_signal_received) {
        stop_signal_s = (sig_atomic_t)now.tv_sec;
        stop_signal_ms = (sig_atomic_t)(now.tv_nsec / 1000000);
        stop_signal_received = signo;
        return;
    }
    long long since_ms = 1000LL * (now.tv_sec - stop_signal_s) + now.tv_nsec / 1000000 - stop_signal_ms;
    if (signo == SIGTERM && stop_signal_received == SIGTERM && since_ms < REPEATED_SIGTERM_MS) return;
    for (int i = 0; i < MAX_OPEN_TEMP_FILES; i++)
        if (open_temp_files[i][0]) unlink(open_temp_files[i]);
    static const char line[] = "error: a second stop signal: ending now; latest_checkpoint still names the "
                               "last complete checkpoint\n";
    ssize_t written = write(STDERR_FILENO, line, sizeof(line) - 1);
    (void)written;
    _exit(128 + signo);
}

static inline int stop_signal_number(const TrainOptions *opts) {
    return opts->stop_signal == STOP_SIGNAL_USR1   ? SIGUSR1
           : opts->stop_signal == STOP_SIGNAL_USR2 ? SIGUSR2
                                                   : 0;
}

static inline const char *signal_name(int signo) {
    return signo == SIGTERM   ? "SIGTERM"
           : signo == SIGINT  ? "SIGINT"
           : signo == SIGHUP  ? "SIGHUP"
           : signo == SIGUSR1 ? "SIGUSR1"
           : signo == SIGUSR2 ? "SIGUSR2"
                              : "a signal";
}

// The stop signals' handler (SA_RESTART: a read or write the signal interrupts goes on), with usr_signal
// (SIGUSR1, SIGUSR2 or 0) the --stop_signal; the other user signal keeps its default action. main() calls it
// first, before MPI, CUDA, NCCL or OpenMP start threads, with SIGUSR1 (--stop_signal's default): a signal
// during set-up is then a stop, not a kill. The flags read, it runs again with their choice, and once more
// as the steps begin, after the libraries' set-up (a library that took a stop signal gives it back). The
// handler may run on any thread: it only notes the signal. The signals are unblocked here, since a mask
// inherited from the launching process would hold them back for good.
static inline void stop_signals_install(int usr_signal) {
    struct sigaction action;
    memset(&action, 0, sizeof(action));
    action.sa_handler = on_stop_signal;
    action.sa_flags = SA_RESTART;
    sigemptyset(&action.sa_mask);
    struct sigaction ignore = action, by_default = action;
    ignore.sa_handler = SIG_IGN;
    by_default.sa_handler = SIG_DFL;
    static const int stops[] = {SIGTERM, SIGINT, SIGHUP}, users[] = {SIGUSR1, SIGUSR2},
                     failed_writes[] = {SIGPIPE, SIGXFSZ};
    for (int i = 0; i < 3; i++) sigaction(stops[i], &action, NULL);
    for (int i = 0; i < 2; i++) sigaction(users[i], users[i] == usr_signal ? &action : &by_default, NULL);
    for (int i = 0; i < 2; i++) sigaction(failed_writes[i], &ignore, NULL);
    sigset_t unblock;
    sigemptyset(&unblock);
    for (int i = 0; i < 3; i++) sigaddset(&unblock, stops[i]);
    for (int i = 0; i < 2; i++) sigaddset(&unblock, users[i]);
    pthread_sigmask(SIG_UNBLOCK, &unblock, NULL);
}

typedef struct {
    double start_ms, limit_ms; // limit_ms 0: no --time_limit_s
    double longest_step_ms, longest_checkpoint_ms;
    int consecutive_skips_limit;
    int stopping;       // the ranks agreed to stop: after this step, a checkpoint, EXIT_STOPPED
    int unhealthy;      // the guards ended the run: a checkpoint, EXIT_UNHEALTHY
    int time_limit_hit; // this rank voted for the time limit (the reason it prints)
    int log_failed;     // this rank's log could not be written (train_log.h): stop, then exit 1
    int stdout_failed;  // a write to stdout failed (its reader gone, a full disk): stop, then exit 1
} RunControl;

// Starts the clock; the stop signals' handlers again (stop_signals_install).
static inline void run_control_start(RunControl *rc, const TrainOptions *opts) {
    memset(rc, 0, sizeof(*rc));
    rc->start_ms = wall_time_ms();
    rc->limit_ms = 1e3 * opts->time_limit_s;
    rc->consecutive_skips_limit = opts->max_consecutive_skips;
    stop_signals_install(stop_signal_number(opts));
}

// A stop asked for during set-up (the data indexed, a checkpoint loaded): every rank learns whether any rank
// was asked, so that all of them end here together, before the first step. Nothing is saved: a fresh run
// has no step to save, a resumed one holds its checkpoint's state. 1 where the run ends (EXIT_STOPPED).
static inline int stopped_in_set_up(int rank, int world_size, RankSum sum, void *ctx) {
    double asked = stop_signal_received != 0;
    if (world_size > 1) sum(ctx, &asked, 1);
    if (asked == 0.0) return 0;
    if (rank == 0)
        printf("stopped | during set-up, before the first step | %s | nothing new to save; start the same "
               "command again (exit %d)\n",
               stop_signal_received ? signal_name(stop_signal_received) : "another rank was asked to stop",
               EXIT_STOPPED);
    return 1;
}

// Until a checkpoint has been timed, --time_limit_s reserves the time of one at a disk speed few filesystems
// fall below: this rank's share of the bytes a checkpoint writes and reads back (manifest.h's digests).
// With nothing reserved, the first stop came only once the time left was under two steps, however long the
// checkpoint then took.
#define ASSUMED_DISK_BYTES_PER_S 200e6

static inline void run_control_reserve_checkpoint(RunControl *rc, double bytes_written) {
    if (rc->limit_ms <= 0) return;
    double bytes = 2.0 * bytes_written; // written, then read back
    rc->longest_checkpoint_ms = 1e3 * bytes / ASSUMED_DISK_BYTES_PER_S;
    printf("time limit | %.0f s; a checkpoint's %.1f s reserved until one is timed (%.3g GB written and read "
           "back at an assumed %.0f MB/s)\n",
           rc->limit_ms / 1e3, rc->longest_checkpoint_ms / 1e3, bytes / 1e9, ASSUMED_DISK_BYTES_PER_S / 1e6);
}

// --inject_signal_step: the chosen rank signals itself as step `step` (0-based) starts, as a scheduler would.
static inline void run_control_inject(const TrainOptions *opts, int rank, int step) {
    if (step + 1 == opts->inject_signal_step && rank == opts->inject_signal_rank) raise(SIGTERM);
}

// A failed write to stdout (SIGPIPE ignored: EPIPE where its reader is gone), said once on stderr.
static inline int stdout_failed(RunControl *rc) {
    if (rc->stdout_failed || (fflush(stdout) == 0 && !ferror(stdout))) return rc->stdout_failed;
    fprintf(stderr,
            "error: stdout: a write failed (%s: its reader is gone, or its disk is full): stopping after "
            "this step with a checkpoint; continue with --resume 1\n",
            strerror(errno));
    return rc->stdout_failed = 1;
}

// This rank's vote, taken as a step starts: 1 to stop after it. log_failed: a log write failed (a full
// disk), which stops the run as a signal does, but ends it with exit 1; a failed stdout likewise.
static inline int run_control_vote(RunControl *rc, int log_failed) {
    double elapsed = wall_time_ms() - rc->start_ms;
    if (rc->limit_ms > 0 && elapsed + 2 * rc->longest_step_ms + rc->longest_checkpoint_ms >= rc->limit_ms)
        rc->time_limit_hit = 1;
    rc->log_failed |= log_failed;
    return stop_signal_received || rc->time_limit_hit || rc->log_failed || stdout_failed(rc);
}

static inline void run_control_step_time(RunControl *rc, double ms) {
    if (ms > rc->longest_step_ms) rc->longest_step_ms = ms;
}

static inline void run_control_checkpoint_time(RunControl *rc, double ms) {
    if (ms > rc->longest_checkpoint_ms) rc->longest_checkpoint_ms = ms;
}

// A finished step as every rank sees it alike: stop_votes from the step's collective, whether the guards
// skipped it. consecutive_skips is training state (the state file keeps it).
static inline void run_control_after_step(RunControl *rc, int stop_votes, int skipped,
                                          int64_t *consecutive_skips) {
    *consecutive_skips = skipped ? *consecutive_skips + 1 : 0;
    if (*consecutive_skips >= rc->consecutive_skips_limit) rc->unhealthy = 1;
    if (stop_votes > 0) rc->stopping = 1;
}

static inline int run_control_ends_early(const RunControl *rc) {
    return rc->stopping || rc->unhealthy;
}

// What the end of step `step` (counting from 0) holds, alike on every rank and in both trainers: whether it
// is the run's last, whether the ranks agreed to end early (a signal, the time limit, the guards), and what
// is due. A run that ends early writes its checkpoint and nothing else.
typedef struct {
    int last, ends_early, checkpoint, validate, score, sample; // score: --eval_data's accuracy
} StepEnd;

static inline StepEnd step_end(const TrainOptions *opts, const RunControl *rc, int step, int have_val) {
    StepEnd end;
    end.last = step + 1 == opts->steps;
    end.ends_early = !end.last && run_control_ends_early(rc);
    end.checkpoint = *opts->output_dir && (is_due(step + 1, opts->ckpt_every, end.last) || end.ends_early);
    end.validate = !end.ends_early && have_val && is_due(step + 1, opts->val_every, end.last);
    end.score = !end.ends_early && *opts->eval_data && is_due(step + 1, opts->eval_every, end.last);
    end.sample = !end.ends_early && opts->sample_every > 0 && (step + 1) % opts->sample_every == 0;
    return end;
}

// The last lines of a run (rank 0's) and its exit status. steps_done: the run's steps (all invocations),
// skipped of them; log_failed: a write of this rank's log failed (an exit 1 whose line was printed then).
static inline int run_control_finish(const RunControl *rc, const TrainOptions *opts, int rank,
                                     long steps_done, long skipped, int log_failed) {
    const char *saved =
        *opts->output_dir ? "checkpoint written to --output_dir" : "nothing saved (no --output_dir)";
    if (rc->unhealthy) {
        if (rank == 0)
            fprintf(
                stderr,
                "error: the guards skipped %d steps in a row (step %ld): the updates diverge or the data "
                "changed; %s with the weights of the last applied step: resume with --resume 1 and a lower "
                "--lr, a --grad_clip, other --skip_loss_z/--skip_norm_z, or raise --max_consecutive_skips\n",
                rc->consecutive_skips_limit, steps_done, saved);
        return EXIT_UNHEALTHY;
    }
    if (rc->log_failed || log_failed || rc->stdout_failed) // its error line was printed when the write failed
        return 1;
    if (rc->stopping) {
        printf("stopped | step %ld of %d | %s | %s; continue with --resume 1 (exit %d)\n", steps_done,
               opts->steps,
               rc->time_limit_hit     ? "--time_limit_s reached"
               : stop_signal_received ? signal_name(stop_signal_received)
                                      : "another rank was asked to stop",
               saved, EXIT_STOPPED);
        return EXIT_STOPPED;
    }
    if (2 * skipped > steps_done) {
        if (rank == 0)
            fprintf(
                stderr,
                "error: the guards skipped %ld of the run's %ld steps: it trained on almost nothing; lower "
                "--lr, set a --grad_clip or relax --skip_loss_z/--skip_norm_z\n",
                skipped, steps_done);
        return EXIT_UNHEALTHY;
    }
    return 0;
}

// ----------------------------------------------------------------------------
// Ranks that agree. Every rank must run the same settings: ranks started with different flags would
// otherwise train silently apart (--lr, --seed) or meet in mismatched collectives (--steps, --channels).
// At start each rank digests every flag, the model's shape and the data's shard list; the ranks compare the
// digests with rank 0's through the trainer's sum over the ranks, and every rank refuses a mismatch, naming
// the setting. A digest keeps 52 bits, which a double holds exactly: summing rank 0's digests with zeros from
// the others hands them to every rank whole.

enum { AGREE_MODEL = NUM_OPTION_SPECS, AGREE_TRAIN_DATA, AGREE_VAL_DATA, NUM_AGREED };

static inline double digest52(uint64_t h) {
    return (double)(h >> 12);
}

// The shards of a data set as its loader found them: their names and token counts.
static inline uint64_t shard_list_digest(const DataLoader *loader) {
    uint64_t h = FNV1A_START;
    for (int i = 0; loader && i < loader->num_shards; i++) {
        h = fnv1a(h, loader->shard_paths[i], strlen(loader->shard_paths[i]) + 1);
        h = fnv1a(h, &loader->shard_tokens[i], sizeof(loader->shard_tokens[i]));
    }
    return h;
}

static inline void option_value_text(const TrainOptions *opts, const OptionSpec *spec, char *text,
                                     size_t len) {
    const char *field = (const char *)opts + spec->offset;
    if (spec->kind == OPT_STRING)
        snprintf(text, len, "'%s'", field);
    else if (spec->kind == OPT_FLOAT)
        snprintf(text, len, "%g", *(const float *)field);
    else
        snprintf(text, len, "%d", *(const int *)field);
}

static inline void settings_digests(const TrainOptions *opts, const GPTConfig *cfg, const DataLoader *train,
                                    const DataLoader *val, double digests[NUM_AGREED]) {
    for (int i = 0; i < NUM_OPTION_SPECS; i++) {
        const OptionSpec *spec = &OPTION_SPECS[i];
        const char *field = (const char *)opts + spec->offset;
        size_t bytes = spec->kind == OPT_STRING  ? strlen(field)
                       : spec->kind == OPT_FLOAT ? sizeof(float)
                                                 : sizeof(int);
        digests[i] = digest52(fnv1a(FNV1A_START, field, bytes));
    }
    digests[AGREE_MODEL] = digest52(fnv1a(FNV1A_START, cfg, sizeof(*cfg)));
    digests[AGREE_TRAIN_DATA] = digest52(shard_list_digest(train));
    digests[AGREE_VAL_DATA] = digest52(shard_list_digest(val));
}

// Every rank compares its settings with rank 0's; on a mismatch every rank fails, naming the first setting
// that differs (rank 0 with its value, the others with theirs).
static inline void check_ranks_agree(const TrainOptions *opts, const GPTConfig *cfg, const DataLoader *train,
                                     const DataLoader *val, int rank, int world_size, RankSum sum,
                                     void *ctx) {
    if (world_size == 1) return;
    double mine[NUM_AGREED], values[NUM_AGREED];
    settings_digests(opts, cfg, train, val, mine);
    for (int i = 0; i < NUM_AGREED; i++) values[i] = rank == 0 ? mine[i] : 0.0;
    sum(ctx, values, NUM_AGREED); // rank 0's digests
    for (int i = 0; i < NUM_AGREED; i++) values[i] = values[i] != mine[i];
    sum(ctx, values, NUM_AGREED); // ranks that differ from rank 0, per setting
    for (int i = 0; i < NUM_AGREED; i++) {
        if (values[i] == 0.0) continue;
        char value[OPTION_STRING_LEN + 8] = "";
        if (i < NUM_OPTION_SPECS) option_value_text(opts, &OPTION_SPECS[i], value, sizeof(value));
        const char *what = i == AGREE_MODEL        ? "the model's shape (flags or --init_from)"
                           : i == AGREE_TRAIN_DATA ? "the --train_data shards (names or sizes)"
                           : i == AGREE_VAL_DATA   ? "the --val_data shards (names or sizes)"
                                                   : NULL;
        if (what)
            fail("rank %d: %s differs on %.0f of %d ranks from rank 0's: every rank must run the same "
                 "settings",
                 rank, what, values[i], world_size);
        fail("--%s: rank %d has %s; %.0f of %d ranks have a value other than rank 0's: start every rank with "
             "the same flags",
             OPTION_SPECS[i].name, rank, value, values[i], world_size);
    }
}

// The ranks running stand for --world_size when it is not given.
static inline int dry_run_only(const TrainOptions *opts, const GPTConfig *cfg, int B, int T, Dist *dist) {
    int status = dry_run_report(opts, cfg, B, T, opts->world_size ? opts->world_size : dist->world_size);
    dist_finalize(dist);
    return status;
}

#endif // RUN_CONTROL_H

// core/run_records.h: what a run records around its steps, in the same order in both trainers, which give
// what differs as RunHooks (their validation loss, eval-set score, sample and checkpoint).
//  - Before the first step: the validation and scoring that a resumed checkpoint's step owes (they came
//    after the checkpoint, train_log.h), and --eval_only's losses and score.
//  - At the end of a step, as step_end (run_control.h) decides: the checkpoint first (a validation that
//    fails, on a full disk say, then loses no training), the validation, the eval set's score, a sample.
#ifndef RUN_RECORDS_H
#define RUN_RECORDS_H

#include "cli.h"
#include "health.h"
#include "run_control.h"
#include "train_log.h"

typedef struct {
    void *trainer; // what the functions below are given
    // The mean validation loss over --val_batches, of every rank; bf16: through a float8 model's BF16 path.
    float (*val_loss)(void *trainer, int bf16);
    int (*eval_correct)(void *trainer); // --eval_data's examples scored right, over every rank
    int eval_examples;
    void (*sample)(void *trainer, int step); // a text sampled after step
    void (*checkpoint)(void *trainer);
} RunHooks;

// Before the first step (the checkpoint's step where a run resumes). --eval_only trains no step.
static inline void records_at_start(const RunHooks *h, TrainOptions *opts, RunLog *log, long step,
                                    int have_val) {
    if (resume_validation(opts, step, have_val)) log_val(log, (int)step, h->val_loss(h->trainer, 0));
    if (resume_scoring(opts, step)) log_eval(log, (int)step, h->eval_correct(h->trainer), h->eval_examples);
    if (!opts->eval_only) return;
    if (have_val) {
        float bf16_loss = h->val_loss(h->trainer, 1);
        log_eval_only(log, opts->init_from, bf16_loss, h->val_loss(h->trainer, 0));
    }
    if (*opts->eval_data) log_eval(log, (int)step, h->eval_correct(h->trainer), h->eval_examples);
    opts->steps = 0; // nothing to train
}

// After step, what end holds; 0 where the run ends early.
static inline int records_after_step(const RunHooks *h, const StepEnd *end, RunLog *log, int step) {
    if (end->checkpoint) h->checkpoint(h->trainer);
    if (end->validate) log_val(log, step + 1, h->val_loss(h->trainer, 0));
    if (end->score) log_eval(log, step + 1, h->eval_correct(h->trainer), h->eval_examples);
    if (end->sample) h->sample(h->trainer, step);
    return !end->ends_early;
}

#endif // RUN_RECORDS_H

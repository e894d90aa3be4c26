// gpu/step_params.cuh: what the host and the device exchange each step: the values the host sets before it
// (StepParams) and the results it reads back after it (StepResults).
#ifndef GPU_STEP_PARAMS_CUH
#define GPU_STEP_PARAMS_CUH

#include "../core/health.h"

// Per-step values the host sets before the step (copied from pinned memory, so a captured graph sees the
// new values each replay) and the results it reads back after it. The host sets a step's values before it
// has read the previous step's results: what depends on them (the guard's window, the AdamW step count) is
// kept and updated on the device.
typedef struct {
    float lr, beta1, beta2, eps, weight_decay, grad_clip;
    // 1 - beta^t of this update: step_decide_kernel picks it from the candidates, those for t =
    // updates_known + 1 and + 2 (the previous step, unread by the host, may have been an update)
    float beta1_correction, beta2_correction;
    float beta1_candidates[2], beta2_candidates[2];
    long long updates_known;
    float inv_micro_batches; // 1 / (accumulation steps x ranks): the step's loss is the mean over all of them
    int fp8_margin, history_len;
    long long step;                 // optimizer step index: the slot of the amax ring buffers
    float skip_loss_z, skip_norm_z; // the step guard (health.h), 0 when off
    int guard_window;
    int keep_fp8_counts; // the host reads this step's FP8 telemetry: leave the counts for it to copy and
                         // reset
    int inject_nan;      // test: make this step's gradient NaN
    int stop_vote;       // this rank asks to stop after this step (run_control.h)
} StepParams;

typedef struct {
    float loss_sum;      // sum of the micro-batch mean losses of this step (over all ranks once reduced)
    float stop_votes;    // ranks that asked to stop after this step (run_control.h): reduced with loss_sum
    float val_loss_sum;  // sum of the mean losses of evaluated batches (validation, BF16 shadow check)
    double norm_squared; // of the accumulated FP32 gradients (all of them, over all ranks)
    float loss, grad_norm;
    int skipped;                  // SKIP_* (train_log.h): why the update was not applied, 0 when it was
    long long updates_applied;    // AdamW updates so far, skipped steps not counted
    long long guard_count;        // finite steps recorded in the guard's window so far (health.h)
    SaturationSummary saturation; // float8: this step's saturated values over every FP8 tensor
    double host_values[4]; // host values on their way through a collective (NCCL reduces device memory)
} StepResults;

#endif // GPU_STEP_PARAMS_CUH

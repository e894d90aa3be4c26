// gpu/step_kernels.cuh: the kernels around a step's update on the device: the loss's mean, the decision to
// apply the update (health.h's guard), the FP8 telemetry's sums, this rank's stop vote and the NaN test hook.
#ifndef GPU_STEP_KERNELS_CUH
#define GPU_STEP_KERNELS_CUH

#include <math.h>

#include "../core/health.h"
#include "../core/train_log.h"
#include "common.cuh"
#include "step_params.cuh"

// Adds the mean of losses (N) to *sum, in a fixed order (one block): deterministic.
__global__ void accumulate_mean_kernel(float *sum, const float *losses, int N) {
    __shared__ double partial[256];
    double local = 0.0;
    for (int i = threadIdx.x; i < N; i += blockDim.x) local += losses[i];
    partial[threadIdx.x] = local;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if ((int)threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) *sum += (float)(partial[0] / N);
}

// The step's loss and gradient norm, and whether to apply it: health.h's guard, as on the CPU, on the
// device's copy of its window (2, window) (losses, then norms). A finite step enters the window; an update
// takes this update's bias corrections and counts itself.
__global__ void step_decide_kernel(StepResults *results, StepParams *params, float *guard_history) {
    const float loss = results->loss_sum * params->inv_micro_batches,
                norm = (float)sqrt(results->norm_squared);
    const int window = params->guard_window;
    results->loss = loss;
    results->loss_sum = 0.0f;
    results->grad_norm = norm;
    results->skipped = step_skip_reason(
        loss, norm, guard_threshold(guard_history, results->guard_count, window, params->skip_loss_z),
        guard_threshold(guard_history + window, results->guard_count, window, params->skip_norm_z));
    if (results->skipped != SKIP_NONFINITE)
        guard_record(guard_history, window, &results->guard_count, loss, norm);
    if (results->skipped) return;
    const long long pick = results->updates_applied - params->updates_known; // 0 or 1
    params->beta1_correction = params->beta1_candidates[pick];
    params->beta2_correction = params->beta2_candidates[pick];
    results->updates_applied++;
}

// float8, once a step: the step's saturated values summed up for the host's per-step line, then, unless
// the host reads this step's telemetry whole (it resets what it copied), fresh counts and block-scale
// spreads for the next step. counts: (num_counted, 2) saturated and flushed; block_min/max NULL without
// a block recipe. One block.
__global__ void fp8_step_telemetry_kernel(StepResults *results, unsigned long long *counts, float *block_min,
                                          float *block_max, int num_counted, const StepParams *params) {
    if (threadIdx.x == 0) results->saturation = saturation_summary(counts, 2, num_counted);
    __syncthreads();
    if (params->keep_fp8_counts) return;
    for (int i = threadIdx.x; i < 2 * num_counted; i += blockDim.x) counts[i] = 0;
    if (!block_min) return;
    for (int i = threadIdx.x; i < num_counted; i += blockDim.x) block_min[i] = INFINITY, block_max[i] = 0.0f;
}

// This rank's vote to stop after the step, into the results beside the loss sum, whose all-reduce sums the
// votes of every rank.
__global__ void stop_vote_kernel(StepResults *results, const StepParams *params) {
    results->stop_votes = (float)params->stop_vote;
}

// Test hook (--inject_nan_step): a NaN in the gradient, which the guard must catch.
__global__ void inject_nan_kernel(float *grads, const StepParams *params) {
    if (params->inject_nan) grads[0] = NAN;
}

#endif // GPU_STEP_KERNELS_CUH

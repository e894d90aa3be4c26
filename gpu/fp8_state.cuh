// gpu/fp8_state.cuh: the FP8 scaling state on the device: the views of its one allocation (Fp8DeviceState),
// and the kernels that set the scales from the amax histories, at the start and once per step with
// fp8_scaling.h's ring update, the same code the CPU reference runs.
#ifndef GPU_FP8_STATE_CUH
#define GPU_FP8_STATE_CUH

#include "../core/fp8_scaling.h"
#include "../core/gpt_model.h"
#include "common.cuh"
#include "step_params.cuh"

// Device views of the FP8 scaling state (one allocation, see memory_plan.h's fp8_state_floats). The step's
// measured amaxes (amax_current, then weight_amax) are adjacent: with several ranks one max-all-reduce of
// num_tensors + num_weights floats makes every rank's scales identical.
typedef struct {
    int num_tensors, num_weights, history_len;
    float *amax_history;                  // (num_tensors, history_len)
    float *amax_current;                  // (num_tensors) this step's, recorded by the casts
    float *weight_amax;                   // (num_weights) follows amax_current
    float *scale;                         // (num_tensors)
    float *descale;                       // (num_tensors) 1/scale, what cuBLASLt multiplies by
    float *weight_scale, *weight_descale; // (num_weights)
    float *amax_measure;                  // (num_tensors) current recipe: the amax of the cast about to run
    float *amax_last;                     // (num_tensors) the last step's amax, for telemetry
    float *scale_last;                    // (num_tensors) the scale the last step's casts used, for telemetry
    unsigned long long *counts; // (num_tensors + num_weights, 2) saturated and flushed values this step
} Fp8DeviceState;

static inline void fp8_state_views(Fp8DeviceState *s, float *base, int num_layers, int history_len) {
    s->num_tensors = num_layers * NUM_BLOCK_LINEARS * 2;
    s->num_weights = num_layers * NUM_BLOCK_LINEARS;
    s->history_len = history_len;
    s->amax_history = base;
    s->amax_current = s->amax_history + (size_t)s->num_tensors * history_len;
    s->weight_amax = s->amax_current + s->num_tensors;
    s->scale = s->weight_amax + s->num_weights;
    s->descale = s->scale + s->num_tensors;
    s->weight_scale = s->descale + s->num_tensors;
    s->weight_descale = s->weight_scale + s->num_weights;
    s->amax_measure = s->weight_descale + s->num_weights;
    s->amax_last = s->amax_measure + s->num_tensors;
    s->scale_last = s->amax_last + s->num_tensors;
    s->counts =
        (unsigned long long *)(s->scale_last + s->num_tensors + (s->num_tensors % 2)); // 8-byte aligned
}

// Scales of every delayed tensor from its history (a fresh run: all 1, unused while the history is empty:
// the casts measure), as after a resume.
__global__ void scales_from_history_kernel(Fp8DeviceState s, int margin) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= s.num_tensors) return;
    Fp8Format format = (i % 2) ? FP8_E5M2 : FP8_E4M3;
    s.scale[i] = fp8_compute_scale(fp8_history_max(s.amax_history + (size_t)i * s.history_len, s.history_len),
                                   format, margin);
    s.descale[i] = 1.0f / s.scale[i];
}

// Once per step, after the update decision: the step's amaxes are kept for telemetry and, with the
// delayed recipe, enter the histories (a skipped step's are dropped), and the next step's scales follow.
__global__ void fp8_end_step_kernel(Fp8DeviceState s, int delayed, const StepParams *params,
                                    const StepResults *results) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= s.num_tensors) return;
    s.amax_last[i] = s.amax_current[i];
    s.scale_last[i] = s.scale[i];
    if (!delayed || results->skipped) {
        s.amax_current[i] = 0.0f;
        return;
    }
    Fp8Format format = (i % 2) ? FP8_E5M2 : FP8_E4M3;
    fp8_delayed_update(s.amax_history + (size_t)i * s.history_len, s.history_len, (long)params->step,
                       &s.amax_current[i], &s.scale[i], format, params->fp8_margin);
    s.descale[i] = 1.0f / s.scale[i];
}

#endif // GPU_FP8_STATE_CUH

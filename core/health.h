// core/health.h: what both trainers do to keep an FP8 run trustworthy, on the host side.
//  - The step guard: a step is skipped (no update, counted) when its loss or gradient norm is NaN/Inf,
//    or, with --skip_loss_z / --skip_norm_z, when it lies that many standard deviations above the mean
//    of the last --guard_window steps with a finite loss and norm, the skipped spikes among them: a lasting
//    shift (a shard of other text, a large learning rate) then widens the window within a step or two
//    instead of having every later step skipped. The thresholds are computed before the step, so the GPU
//    trainer decides on the device without waiting for the host. Steps skipped in a row end the run
//    (run_control.h).
//  - FP8 telemetry (--fp8_stats_every): per FP8 tensor the amax, scale, and how many values the cast
//    saturated (|x*s| above the format's maximum) or flushed to zero.
//  - Energy and cost at the end of a run.
#ifndef HEALTH_H
#define HEALTH_H

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "fp8_scaling.h"
#include "gpt_model.h"
#include "train_log.h"

// The decision, the same expression on CPU and GPU: thresholds are +inf when a guard is off.
FP8_HD static inline int step_skip_reason(float loss, float norm, float max_loss, float max_norm) {
    if (!isfinite(loss) || !isfinite(norm)) return SKIP_NONFINITE;
    if (loss > max_loss) return SKIP_LOSS_SPIKE;
    if (norm > max_norm) return SKIP_NORM_SPIKE;
    return SKIP_NONE;
}

// ----------------------------------------------------------------------------
// The moving window of the finite steps' losses and norms. Its contents are training state: they are
// saved in the state file, so a resumed run skips exactly the steps an uninterrupted one would.

#define GUARD_MIN_SAMPLES 8 // fewer finite steps than this: no statistics yet, the z-guards wait

typedef struct {
    int window;
    long long count; // steps recorded so far; slot of the next is count % window
    float *history;  // (2, window): losses then norms
} StepGuard;

static inline void step_guard_init(StepGuard *g, int window) {
    g->window = window;
    g->count = 0;
    g->history = (float *)calloc_check(2 * (size_t)window, sizeof(float), "step guard");
}

static inline void step_guard_free(StepGuard *g) {
    free(g->history);
}

// Double-precision operations that the host and the device round alike: the device spells them as _rn
// intrinsics, which nvcc never contracts into FMAs (ISO C builds do not contract either).
FP8_HD static inline double guard_add(double a, double b) {
#ifdef __CUDA_ARCH__
    return __dadd_rn(a, b);
#else
    return a + b;
#endif
}
FP8_HD static inline double guard_sub(double a, double b) {
#ifdef __CUDA_ARCH__
    return __dsub_rn(a, b);
#else
    return a - b;
#endif
}
FP8_HD static inline double guard_mul(double a, double b) {
#ifdef __CUDA_ARCH__
    return __dmul_rn(a, b);
#else
    return a * b;
#endif
}
FP8_HD static inline double guard_div(double a, double b) {
#ifdef __CUDA_ARCH__
    return __ddiv_rn(a, b);
#else
    return a / b;
#endif
}
FP8_HD static inline double guard_sqrt(double a) {
#ifdef __CUDA_ARCH__
    return __dsqrt_rn(a);
#else
    return sqrt(a);
#endif
}

// mean + z * (sample standard deviation) of one row of a window holding count records so far, +inf when
// the guard is off or waits. The GPU trainer runs it on the device, on its copy of the window, so that it
// decides a step without the host having read the previous one.
FP8_HD static inline float guard_threshold(const float *values, long long count, int window, float z) {
    long long n = count < window ? count : window;
    if (z <= 0.0f || n < GUARD_MIN_SAMPLES) return INFINITY;
    double mean = 0.0, var = 0.0;
    for (long long i = 0; i < n; i++) mean = guard_add(mean, (double)values[i]);
    mean = guard_div(mean, (double)n);
    for (long long i = 0; i < n; i++) {
        double d = guard_sub((double)values[i], mean);
        var = guard_add(var, guard_mul(d, d));
    }
    return (float)guard_add(mean, guard_mul((double)z, guard_sqrt(guard_div(var, (double)(n - 1)))));
}

// A finite step's loss and norm into the window history (2, window), count the records so far.
FP8_HD static inline void guard_record(float *history, int window, long long *count, float loss, float norm) {
    int slot = (int)(*count % window);
    history[slot] = loss;
    history[window + slot] = norm;
    (*count)++;
}

static inline void step_guard_thresholds(const StepGuard *g, const TrainOptions *opts, float *max_loss,
                                         float *max_norm) {
    *max_loss = guard_threshold(g->history, g->count, g->window, opts->skip_loss_z);
    *max_norm = guard_threshold(g->history + g->window, g->count, g->window, opts->skip_norm_z);
}

static inline void step_guard_record(StepGuard *g, float loss, float norm) {
    guard_record(g->history, g->window, &g->count, loss, norm);
}

// ----------------------------------------------------------------------------
// FP8 telemetry. Tensor t < L*4*2 is an activation (even) or output gradient (odd) of linear
// (t/2) % 4 of layer t/8; the L*4 weights follow. Both trainers' scaling state uses the same order for the
// activations and gradients.

static inline int fp8_tensor_index(int layer, int linear, Fp8Role role) {
    return (layer * NUM_BLOCK_LINEARS + linear) * 2 + (role == FP8_ROLE_GRAD_OUTPUT);
}

// The role of activation or gradient tensor t (t < L*4*2).
static inline Fp8Role fp8_tensor_role(int t) {
    return t % 2 ? FP8_ROLE_GRAD_OUTPUT : FP8_ROLE_INPUT;
}

typedef struct {
    int num_layers, num_tensors;  // activations and gradients: L*4*2; then L*4 weights
    int recipe;                   // Fp8Recipe: which format the gradients have
    float *amax, *scale;          // (num_tensors + L*4); a block recipe's scale is that of its largest block
    float *scale_min, *scale_max; // (num_tensors + L*4) the spread of a block recipe's block scales
    unsigned long long *saturated, *flushed, *elements;
} Fp8Stats;

static inline int fp8_stats_count(int num_layers) {
    return num_layers * NUM_BLOCK_LINEARS * 3;
}

static inline void fp8_stats_reset_counts(Fp8Stats *s);
static inline void fp8_stats_alloc(Fp8Stats *s, int num_layers, int recipe) {
    int n = fp8_stats_count(num_layers);
    s->num_layers = num_layers;
    s->num_tensors = num_layers * NUM_BLOCK_LINEARS * 2;
    s->recipe = recipe;
    s->amax = (float *)calloc_check(n, sizeof(float), "fp8 stats");
    s->scale = (float *)calloc_check(n, sizeof(float), "fp8 stats");
    s->scale_min = (float *)calloc_check(n, sizeof(float), "fp8 stats");
    s->scale_max = (float *)calloc_check(n, sizeof(float), "fp8 stats");
    s->saturated = (unsigned long long *)calloc_check(n, sizeof(unsigned long long), "fp8 stats");
    s->flushed = (unsigned long long *)calloc_check(n, sizeof(unsigned long long), "fp8 stats");
    s->elements = (unsigned long long *)calloc_check(n, sizeof(unsigned long long), "fp8 stats");
    fp8_stats_reset_counts(s);
}

static inline void fp8_stats_free(Fp8Stats *s) {
    free(s->amax), free(s->scale), free(s->scale_min), free(s->scale_max);
    free(s->saturated), free(s->flushed), free(s->elements);
}

// Fresh counters, and an empty spread (a block cast widens it from [+inf, 0]).
static inline void fp8_stats_reset_counts(Fp8Stats *s) {
    int n = fp8_stats_count(s->num_layers);
    memset(s->saturated, 0, n * sizeof(unsigned long long));
    memset(s->flushed, 0, n * sizeof(unsigned long long));
    memset(s->elements, 0, n * sizeof(unsigned long long));
    for (int t = 0; t < n; t++) s->scale_min[t] = INFINITY, s->scale_max[t] = 0.0f;
}

static inline void fp8_tensor_name(const Fp8Stats *s, int t, char *out, size_t len) {
    static const char *linears[NUM_BLOCK_LINEARS] = {"qkv", "attproj", "fc", "fcproj"};
    if (t < s->num_tensors)
        snprintf(out, len, "layer %d %s %s", t / 8, linears[(t / 2) % 4], (t % 2) ? "grad_output" : "input");
    else
        snprintf(out, len, "layer %d %s weight", (t - s->num_tensors) / 4, linears[(t - s->num_tensors) % 4]);
}

static inline Fp8Format fp8_stats_format(const Fp8Stats *s, int t) {
    return fp8_role_format(s->recipe, t < s->num_tensors ? fp8_tensor_role(t) : FP8_ROLE_WEIGHT);
}

// One JSON-lines record per tensor. scale_min and scale_max are null when no block had a nonzero amax.
static inline void log_fp8_stats(RunLog *log, int step, const Fp8Stats *s) {
    if (!log->jsonl) return;
    for (int t = 0; t < fp8_stats_count(s->num_layers); t++) {
        char name[64], spread[96] = "\"scale_min\":null,\"scale_max\":null";
        fp8_tensor_name(s, t, name, sizeof(name));
        if (s->scale_min[t] <= s->scale_max[t])
            snprintf(spread, sizeof(spread), "\"scale_min\":%.9g,\"scale_max\":%.9g", s->scale_min[t],
                     s->scale_max[t]);
        run_log_record(
            log,
            "{\"type\":\"fp8_stats\",\"step\":%d,\"tensor\":\"%s\",\"format\":\"%s\",\"amax\":%.9g,"
            "\"scale\":%.9g,%s,\"saturated\":%llu,\"flushed\":%llu,\"elements\":%llu}\n",
            step, name, fp8_format_name(fp8_stats_format(s, t)), s->amax[t], s->scale[t], spread,
            s->saturated[t], s->flushed[t], s->elements[t]);
    }
}

// A step's saturated values over num_tensors tensors, tensor t's count at saturated[t * stride] (the GPU
// trainer sums its device counts, (tensor, 2) saturated and flushed, on the device).
typedef struct {
    unsigned long long total, worst;
    int tensors, worst_tensor;
} SaturationSummary;

FP8_HD static inline SaturationSummary saturation_summary(const unsigned long long *saturated, int stride,
                                                          int num_tensors) {
    SaturationSummary sum = {0, 0, 0, 0};
    for (int t = 0; t < num_tensors; t++) {
        unsigned long long count = saturated[(size_t)t * stride];
        if (!count) continue;
        sum.total += count;
        sum.tensors++;
        if (count > sum.worst) sum.worst = count, sum.worst_tensor = t;
    }
    return sum;
}

// The per-step line that tells the user the scaling lags: printed only when something saturated. s names
// the tensors.
static inline void print_saturation_summary(int step, const Fp8Stats *s, SaturationSummary sum) {
    if (!sum.total) return;
    char name[64];
    fp8_tensor_name(s, sum.worst_tensor, name, sizeof(name));
    printf("fp8   %5d | %llu values saturated in %d tensors (most: %s, %llu)\n", step, sum.total, sum.tensors,
           name, sum.worst);
}

static inline int fp8_stats_due(const TrainOptions *opts, int step) {
    return opts->fp8_stats_every > 0 && step % opts->fp8_stats_every == 0;
}

// After a float8 step whose counts s holds: the saturation line when anything saturated, the JSON-lines
// records every --fp8_stats_every steps, then fresh counters for the next step.
static inline void report_fp8_stats(RunLog *log, const TrainOptions *opts, int step, Fp8Stats *s) {
    print_saturation_summary(step, s, saturation_summary(s->saturated, 1, fp8_stats_count(s->num_layers)));
    if (fp8_stats_due(opts, step)) log_fp8_stats(log, step, s);
    fp8_stats_reset_counts(s);
}

// ----------------------------------------------------------------------------
// Energy and cost

// joules < 0: not measured (no NVML, or the CPU trainer).
static inline void log_energy(RunLog *log, double joules, const TrainOptions *opts, const char *why_not) {
    if (joules < 0) {
        printf("energy | not measured (%s)\n", why_not);
        run_log_record(log, "{\"type\":\"energy\",\"measured\":0}\n");
        return;
    }
    double kwh = joules / 3.6e6, cost = kwh * opts->pue * opts->price_kwh;
    printf("energy | %.1f J | %.6f kWh | cost %.6f (price %.4f per kWh, PUE %.2f)\n", joules, kwh, cost,
           opts->price_kwh, opts->pue);
    run_log_record(log, "{\"type\":\"energy\",\"measured\":1,\"joules\":%.3f,\"kwh\":%.9g,\"cost\":%.9g}\n",
                   joules, kwh, cost);
}

// The run's rental with --price_gpu_hour: every process's GPU for the run's wall time, the measured
// counterpart of --dry_run's cost plan (written before the energy record, the run's last).
static inline void log_rental(RunLog *log, const TrainOptions *opts, int gpus, double wall_ms) {
    if (opts->price_gpu_hour <= 0) return;
    double gpu_hours = gpus * wall_ms / 3.6e6, cost = gpu_hours * opts->price_gpu_hour;
    printf("rental | %.6g GPU-hours (%d GPU(s) x %.6g h) | cost %.6g (price %.4g per GPU-hour)\n", gpu_hours,
           gpus, wall_ms / 3.6e6, cost, opts->price_gpu_hour);
    run_log_record(log, "{\"type\":\"rental\",\"gpu_hours\":%.9g,\"cost\":%.9g}\n", gpu_hours, cost);
}

// ----------------------------------------------------------------------------
// The BF16 shadow check

// Logs the difference between this run's loss on a batch and the BF16 path's on the same batch and
// weights; beyond --bf16_check_tolerance it warns, or with --bf16_check_stop ends the run.
static inline void log_bf16_check(RunLog *log, const TrainOptions *opts, int step, float loss,
                                  float bf16_loss) {
    float diff = loss - bf16_loss;
    printf("bf16  %5d | loss %.6f | bfloat16 loss %.6f | difference %+.6f\n", step, loss, bf16_loss, diff);
    run_log_record(log,
                   "{\"type\":\"bf16_check\",\"step\":%d,\"loss\":%.9g,\"bf16_loss\":%.9g,\"diff\":%.9g}\n",
                   step, loss, bf16_loss, diff);
    if (opts->bf16_check_tolerance > 0.0f && fabsf(diff) > opts->bf16_check_tolerance) {
        if (opts->bf16_check_stop)
            fail("--bf16_check_tolerance: at step %d the loss differs from bfloat16 by %+.6f (tolerance %g)",
                 step, diff, opts->bf16_check_tolerance);
        printf(
            "warning: step %d: the loss differs from bfloat16 by %+.6f, beyond --bf16_check_tolerance %g\n",
            step, diff, opts->bf16_check_tolerance);
    }
}

// --eval_only: one model's validation loss served in BF16 and in FP8 (weights cast as in training,
// activations with current scaling), the known pitfall of FP8-trained weights served in another format.
static inline void log_eval_only(RunLog *log, const char *model_path, float bf16_loss, float fp8_loss) {
    printf("eval  | %s | bfloat16 weights: val loss %.6f (perplexity %.4f) | float8 weights: val loss %.6f "
           "(perplexity %.4f) | difference %+.6f\n",
           model_path, bf16_loss, exp(bf16_loss), fp8_loss, exp(fp8_loss), fp8_loss - bf16_loss);
    run_log_record(log, "{\"type\":\"eval_only\",\"bf16_val_loss\":%.9g,\"fp8_val_loss\":%.9g}\n", bf16_loss,
                   fp8_loss);
}

#endif // HEALTH_H

// test_fp8_stats.c: the FP8 telemetry and the step guard, as units.
//  - quantize() counts, on synthetic tensors built with a known number of values beyond the format's
//    reach (saturated) and of nonzero values far below its smallest subnormal (flushed), exactly those;
//  - the step guard's thresholds equal mean + z * sample std of the window, computed here in long double,
//    the window slides, and a guard is off (infinite) until it has enough samples;
//  - the delayed recipe's first-step rule: a tensor whose history is empty is cast with the exact scale of
//    its own amax, also after a skipped step (which records nothing), and with the history's scale once an
//    applied step has recorded it.
#define TRAIN_GPT_NO_MAIN
#pragma GCC diagnostic ignored "-Wunused-function"
#include "../train_gpt.c"
#include "test_util.h"

// n values: `saturating` at +-4x the max, `flushing` at +-1e-3 of the smallest subnormal, the rest
// uniform in [min normal, max/2] with random sign, all times 1/scale (so x * scale is in those ranges).
static void synthetic(float *x, int n, int saturating, int flushing, Fp8Format f, float scale, Rng *rng) {
    float max = fp8_max_finite(f), min_normal = f == FP8_E4M3 ? 0x1p-6f : 0x1p-14f;
    for (int i = 0; i < n; i++) {
        float sign = (rng_next(rng) & 1) ? -1.0f : 1.0f, v;
        if (i < saturating)
            v = 4.0f * max;
        else if (i < saturating + flushing)
            v = 1e-3f * fp8_min_subnormal(f);
        else
            v = min_normal + (float)rng_uniform(rng) * (0.5f * max - min_normal);
        x[i] = sign * v / scale;
    }
}

static void test_counts(void) {
    Rng rng;
    rng_seed(&rng, 7);
    enum { N = 4096 };
    static float x[N], q[N];
    for (int fi = 0; fi < 2; fi++) {
        Fp8Format f = (Fp8Format)fi;
        for (int trial = 0; trial < 4; trial++) {
            int saturating = (int)(rng_next(&rng) % 50), flushing = (int)(rng_next(&rng) % 50);
            float scale = trial == 0 ? 1.0f : 1.0f / (float)(1 + rng_next(&rng) % 1000);
            synthetic(x, N, saturating, flushing, f, scale, &rng);
            Fp8Stats stats;
            fp8_stats_alloc(&stats, 1, FP8_RECIPE_DELAYED);
            quantize(q, x, N, scale, f, &stats, 3);
            quantize(q, x, N, scale, f, &stats, 3); // a second cast (micro-batch) adds up
            char what[128];
            snprintf(what, sizeof(what),
                     "%s trial %d: %llu saturated (expected %d), %llu flushed (expected %d)",
                     fp8_format_name(f), trial, stats.saturated[3], 2 * saturating, stats.flushed[3],
                     2 * flushing);
            check(stats.saturated[3] == 2ull * saturating && stats.flushed[3] == 2ull * flushing &&
                      stats.elements[3] == 2ull * N,
                  what);
            int others_zero = 1;
            for (int t = 0; t < fp8_stats_count(1); t++)
                if (t != 3)
                    others_zero &= stats.saturated[t] == 0 && stats.flushed[t] == 0 && stats.elements[t] == 0;
            check(others_zero, "only the cast tensor's counters move");
            fp8_stats_free(&stats);
        }
    }
}

static void test_guard(void) {
    TrainOptions opts;
    char *argv[] = {"test", "--skip_loss_z", "2.5", "--skip_norm_z", "0", "--guard_window", "10"};
    parse_options(&opts, 7, argv);
    StepGuard g;
    step_guard_init(&g, opts.guard_window);
    float max_loss, max_norm;
    float losses[25];
    for (int i = 0; i < 25; i++) losses[i] = 3.0f + 0.1f * (float)((i * 7) % 5) - 0.01f * i;
    int ok_wait = 1, ok_values = 1;
    for (int i = 0; i < 25; i++) {
        step_guard_thresholds(&g, &opts, &max_loss, &max_norm);
        int have = i < 10 ? i : 10;
        if (have < GUARD_MIN_SAMPLES)
            ok_wait &= isinf(max_loss) && max_loss > 0;
        else {
            long double mean = 0, var = 0;
            for (int k = i - have; k < i; k++) mean += losses[k];
            mean /= have;
            for (int k = i - have; k < i; k++) var += (losses[k] - mean) * (losses[k] - mean);
            double expected = (double)(mean + 2.5L * sqrtl(var / (have - 1)));
            ok_values &= fabs(max_loss - expected) <= 1e-6 * fabs(expected);
        }
        ok_values &= isinf(max_norm); // z = 0: the norm guard is off
        step_guard_record(&g, losses[i], 1.0f);
    }
    check(ok_wait, "the loss guard waits for GUARD_MIN_SAMPLES accepted steps");
    check(ok_values, "thresholds are mean + z * sample std over the last --guard_window steps");
    check(step_skip_reason(NAN, 1.0f, INFINITY, INFINITY) == SKIP_NONFINITE &&
              step_skip_reason(1.0f, INFINITY, INFINITY, INFINITY) == SKIP_NONFINITE &&
              step_skip_reason(5.0f, 1.0f, 4.0f, INFINITY) == SKIP_LOSS_SPIKE &&
              step_skip_reason(3.0f, 9.0f, 4.0f, 8.0f) == SKIP_NORM_SPIKE &&
              step_skip_reason(3.0f, 1.0f, 4.0f, 8.0f) == SKIP_NONE,
          "skip reasons");
    step_guard_free(&g);
}

// A tensor of n values whose largest magnitude is amax.
static void tensor_with_amax(float *x, int n, float amax) {
    for (int i = 0; i < n; i++) x[i] = amax * (float)((i * 37) % 101) / 100.0f * (i % 2 ? -1.0f : 1.0f);
}

static void test_first_step(void) {
    TrainOptions opts;
    options_defaults(&opts);
    Dist dist = dist_single();
    Fp8State s;
    fp8_state_init(&s, 1, &opts);
    enum { N = 1000 };
    static float x[N], q[N];
    int input = fp8_tensor_index(0, LIN_MLP_UP, FP8_ROLE_INPUT),
        grad = fp8_tensor_index(0, LIN_MLP_UP, FP8_ROLE_GRAD_OUTPUT);
    check(fp8_history_empty(s.amax_history + (size_t)input * s.history_len, s.history_len),
          "a fresh run's histories are empty");
    fp8_scales_from_history(&s);
    tensor_with_amax(x, N, 3e-6f); // a first backward's gradients at llm.c-size batches
    float scale = fp8_cast(&s, &dist, grad, x, N, q, 1);
    expect(scale == fp8_compute_scale(3e-6f, FP8_E5M2, s.margin),
           "empty history: the gradient is cast with its exact "
           "scale (%g), not 1",
           scale);
    int nonzero = 0;
    for (int i = 0; i < N; i++) nonzero += q[i] != 0.0f;
    expect(nonzero >= N * 98 / 100, "and keeps its values (%d of %d nonzero codes)", nonzero, N);
    fp8_end_step(&s, 0, 1); // a skipped step records nothing
    tensor_with_amax(x, N, 5.0f);
    scale = fp8_cast(&s, &dist, input, x, N, q, 1);
    expect(scale == fp8_compute_scale(5.0f, FP8_E4M3, s.margin),
           "after a skipped step the history is still empty: "
           "measured again (%g)",
           scale);
    fp8_end_step(&s, 1, 0); // applied: 5 enters the input's history
    check(!fp8_history_empty(s.amax_history + (size_t)input * s.history_len, s.history_len),
          "an applied step records the amax");
    tensor_with_amax(x, N, 50.0f);
    scale = fp8_cast(&s, &dist, input, x, N, q, 1);
    expect(scale == fp8_compute_scale(5.0f, FP8_E4M3, s.margin),
           "with a history the delayed scale (%g) is the "
           "history's, not this tensor's",
           scale);
    fp8_stats_free(&s.stats);
    free(s.amax_history);
    free(s.amax_current);
    free(s.scale);
    free(s.input_scale_used);
    free(s.weight_scale);
}

int main(void) {
    test_counts();
    test_guard();
    test_first_step();
    return test_summary();
}

// test_gradcheck.c: the analytic gradients of the CPU reference trainer (float32) against central finite
// differences of its own loss, for every parameter tensor of every layer, in each architecture
// (`test_gradcheck gpt2`, `test_gradcheck llama`).
//
// A tiny model (L=2, C=16, V=64 -> Vp=128, maxT=16; GPT-2 NH=2, Llama NH=4 with KVH=2, so that two query
// heads share each key/value head, and F=24) on one random batch (B=2, T=8). The weights are the seeded
// init scaled up (x6), and the norm weights, LayerNorm biases and the linear biases are moved off 1/0 by
// small random values: at the plain init every norm gradient is tiny and many terms of the backward
// (those multiplied by a bias or by weight-1) are invisible, so a wrong formula could hide.
//
// For each (tensor, layer) slice:
//   (a) directional derivative along the normalized gradient of the slice, and along a random unit
//       direction in the slice;
//   (b) the partial derivatives of the 3 largest-magnitude gradient elements of the slice.
// Plus exact properties: the padded vocabulary rows of wte (and Llama's lmhead) and the position rows t >= T
// of wpe get a gradient of exactly zero (the loss does not depend on them).
//
// Tolerance. The loss L is computed in float32. Its rounding error is modelled as
//     |fl(L) - L| <= eps_L = K * FLT_EPSILON * |L|,   K = 64.
// Argument for K: the longest chain of float32 roundings that feeds one token's loss is about
//   per block: LN1 (mean and variance sums, 2*C = 32), qkv dot (C = 16), attention (score dot hs = 8,
//   softmax sum T = 8, weighted sum T = 8), attproj (C = 16), residual (1), LN2 (32), fc (C = 16),
//   GELU (~5), fcproj (4C = 64), residual (1): ~206; x 2 blocks = 412;
//   then lnf (32), logits dot (C = 16), softmax sum over V = 64, exp/log (~3): n ~ 530 roundings.
//   Llama's chain is shorter: per block RMSNorm (C = 16), qkv (16), rotation (2), attention (24), attproj
//   (16), residual, RMSNorm (16), fc (16), SwiGLU (~6), fcproj (F = 24), residual: ~138; x 2 + 118 = 394.
// Each rounding is a relative error <= u = FLT_EPSILON/2 on a quantity whose size, measured where it
// reaches the loss, is at most about |L| (the loss is logsumexp(z) - z_target; LayerNorm renormalises
// the stream between blocks). The worst case n*u ~ 265 FLT_EPSILON is not attained by independent
// roundings: they add like a random walk, and the probabilistic bound of Higham & Mary (SIAM J. Sci.
// Comput. 2019) gives lambda*sqrt(n)*u with failure probability <= 2*exp(-lambda^2/2). lambda = 5
// (failure < 1e-5 per evaluation): 5 * sqrt(530) * u = 57.6 FLT_EPSILON; K = 64 rounds that up.
// The test also MEASURES the noise of L (tiny perturbations whose true effect is known to first order)
// and fails if the model above is violated, so K is checked, not just asserted.
//
// A central difference at step s, fd(s) = (L(x + s d) - L(x - s d)) / (2 s), has rounding error
// <= eps_L / s and truncation error c s^2 + O(s^4). For a pair of steps (h, h/2) we compare fd(h/2) with
// the analytic value a, and require
//     |fd(h/2) - a| <= 2 eps_L / h + trunc + 1e-3 * |g|
// where
//   - 2 eps_L / h is the rounding error of fd(h/2);
//   - trunc = max(|e(h) - e(h/2)|, |e(2h) - e(h)| / 4), e(s) = fd(s) - a(s), is Richardson's estimate:
//     e(h) - e(h/2) = (3/4) c h^2 is 3x the truncation c h^2/4 of fd(h/2), so it bounds it with a factor
//     3 to spare; the second term (the previous pair, scaled by the expected 1/4) keeps one accidental
//     cancellation in one pair from making the estimate small;
//   - 1e-3 * |g| covers the float32 rounding of the analytic gradient itself (|g| the gradient norm of
//     the slice for directions, |g_i| for an element): a worst-case relative error n*u = 530 * 6e-8 =
//     3.2e-5 for the backward's chains, so 1e-3 has a 30x margin and costs only 1/50 of a 5% error.
// a(s) = g . (x+ - x-) / (2 s) is computed in double from the float32 parameters actually written, so
// rounding the perturbed parameters to float32 does not enter the comparison.
// The steps h come from a ladder 1.6 * 2^-j; for each check the pair with the smallest bound is used
// (every pair's bound is valid; the smallest is the most demanding).
//
// Sensitivity: every check must be able to catch an analytic value off by 5% of its scale (|g| for
// directions, |g_i| for elements) in either direction: |fd - (a +- 0.05 scale)| >= 0.05 scale - |fd - a|
// must exceed the bound, i.e. bound + |fd - a| < 0.05 scale. A check too loose for that fails the test.
// The checker is then run on corrupted copies of the gradient (one slice scaled by 1.05, the largest
// element of a slice scaled by 1.05, the two layers of a tensor swapped) and must flag each of them.
#pragma GCC diagnostic ignored "-Wunused-function" // main()-only helpers of train_gpt.c
#define TRAIN_GPT_NO_MAIN
#include "train_gpt.c"

#include <float.h>

enum { GC_B = 2, GC_T = 8, GC_N = GC_B * GC_T, GC_L = 2, GC_V = 64, GC_C = 16, GC_MAXT = 16 };
#define K_ROUNDING 64.0
#define WEIGHT_SCALE 6.0f
#define GRAD_REL_TOL 1e-3
#define DETECT 0.05  // the size of error every check must be able to catch
#define NUM_STEPS 12 // ladder 1.6 * 2^-j, j = 0..11: 1.6 down to 7.8e-4
#define TOP_ELEMENTS 3

#include "test_util.h"

static GPT model;
static int inputs[GC_N], targets[GC_N];
static double eps_L; // rounding bound of the loss

static double loss_now(void) {
    gpt_forward(&model, inputs, targets, 0);
    return (double)model.mean_loss;
}

// Central differences of the loss along direction d (n values, unit norm or one-hot) from the slice at
// params + offset, for every step of the ladder: fd[j] and the analytic a[j] for the same perturbation.
static void fd_ladder(size_t offset, size_t n, const double *d, const float *grads, double *fd, double *an) {
    float *p = model.params + offset;
    float *saved = (float *)malloc_check(n * sizeof(float), "saved");
    memcpy(saved, p, n * sizeof(float));
    for (int j = 0; j < NUM_STEPS; j++) {
        double s = 1.6 * ldexp(1.0, -j);
        double dot = 0.0;
        for (size_t i = 0; i < n; i++)
            if (d[i] != 0.0) p[i] = (float)(saved[i] + s * d[i]);
        for (size_t i = 0; i < n; i++) dot += (double)grads[offset + i] * ((double)p[i] - saved[i]);
        double lp = loss_now();
        for (size_t i = 0; i < n; i++)
            if (d[i] != 0.0) p[i] = (float)(saved[i] - s * d[i]);
        for (size_t i = 0; i < n; i++) dot -= (double)grads[offset + i] * ((double)p[i] - saved[i]);
        double lm = loss_now();
        memcpy(p, saved, n * sizeof(float));
        fd[j] = (lp - lm) / (2.0 * s);
        an[j] = dot / (2.0 * s);
    }
    free(saved);
}

typedef struct {
    double error; // |fd(h/2) - a|
    double bound; // the tolerance of the best pair
    double analytic;
    double h;
} CheckResult;

// Picks the pair (h, h/2) with the smallest bound; scale is |g| (directions) or |g_i| (elements).
static CheckResult best_pair(const double *fd, const double *an, double scale) {
    CheckResult best = {0.0, INFINITY, 0.0, 0.0};
    for (int j = 1; j + 1 < NUM_STEPS; j++) {
        double h = 1.6 * ldexp(1.0, -j);
        double e_prev = fd[j - 1] - an[j - 1], e_h = fd[j] - an[j], e_half = fd[j + 1] - an[j + 1];
        double trunc = fmax(fabs(e_h - e_half), fabs(e_prev - e_h) / 4.0);
        double bound = 2.0 * eps_L / h + trunc + GRAD_REL_TOL * scale;
        if (bound < best.bound) {
            best.bound = bound;
            best.error = fabs(e_half);
            best.analytic = an[j + 1];
            best.h = h;
        }
    }
    return best;
}

typedef struct {
    int checks, flagged;  // checks run, checks whose error exceeded the bound
    int insensitive;      // checks that could not catch an error of DETECT * scale
    double max_rel;       // max |fd - a| / scale
    double max_bound_rel; // max bound / scale
} SliceReport;

static void record(SliceReport *r, CheckResult c, double scale, int verbose, const char *what, int tensor,
                   int layer) {
    r->checks++;
    double rel = c.error / scale, brel = c.bound / scale;
    if (rel > r->max_rel) r->max_rel = rel;
    if (brel > r->max_bound_rel) r->max_bound_rel = brel;
    if (c.error > c.bound) {
        r->flagged++;
        if (verbose)
            printf("  %s %s[%d]: |fd - a| = %.3e > bound %.3e (a = %.6e, h = %.3g)\n", what,
                   PARAM_TENSOR_NAMES[tensor], layer, c.error, c.bound, c.analytic, c.h);
    }
    if (c.bound + c.error >= DETECT * scale) r->insensitive++;
}

// All checks of one slice against the gradient array `grads`.
static SliceReport check_slice(const float *grads, int tensor, int layer, uint64_t seed, int verbose) {
    const GPTConfig *cfg = &model.config;
    size_t offset = param_offset(cfg, tensor, layer), n = param_tensor_size(cfg, tensor);
    const float *g = grads + offset;
    SliceReport r = {0, 0, 0, 0.0, 0.0};
    double gnorm = 0.0;
    for (size_t i = 0; i < n; i++) gnorm += (double)g[i] * g[i];
    gnorm = sqrt(gnorm);
    double *d = (double *)calloc_check(n, sizeof(double), "direction");
    double fd[NUM_STEPS], an[NUM_STEPS];
    if (gnorm == 0.0) {
        printf("  %s[%d]: zero gradient\n", PARAM_TENSOR_NAMES[tensor], layer);
        r.checks++;
        r.flagged++;
        free(d);
        return r;
    }
    // (a) along the normalized gradient
    for (size_t i = 0; i < n; i++) d[i] = g[i] / gnorm;
    fd_ladder(offset, n, d, grads, fd, an);
    record(&r, best_pair(fd, an, gnorm), gnorm, verbose, "gradient direction", tensor, layer);
    // (a) along a random unit direction (scale: the gradient norm, see the header)
    double dn = 0.0;
    for (size_t i = 0; i < n; i++) {
        d[i] = counter_normal(seed, i);
        dn += d[i] * d[i];
    }
    for (size_t i = 0; i < n; i++) d[i] /= sqrt(dn);
    fd_ladder(offset, n, d, grads, fd, an);
    record(&r, best_pair(fd, an, gnorm), gnorm, verbose, "random direction", tensor, layer);
    // (b) the largest elements
    size_t top[TOP_ELEMENTS];
    for (int k = 0; k < TOP_ELEMENTS; k++) {
        size_t best = n;
        for (size_t i = 0; i < n; i++) {
            int taken = 0;
            for (int q = 0; q < k; q++) taken |= top[q] == i;
            if (!taken && (best == n || fabsf(g[i]) > fabsf(g[best]))) best = i;
        }
        top[k] = best;
        memset(d, 0, n * sizeof(double));
        d[best] = 1.0;
        fd_ladder(offset, n, d, grads, fd, an);
        char what[64];
        snprintf(what, sizeof(what), "element %zu", best);
        record(&r, best_pair(fd, an, fabs(g[best])), fabs(g[best]), verbose, what, tensor, layer);
    }
    free(d);
    return r;
}

// The noise of the loss, measured: for single elements changed by a relative 2^-20 (a few ulps), the
// true change of L is g_i * delta to first order (the second-order term is ~delta^2 = 1e-12 relative),
// so |L' - L - g_i delta| is rounding noise of two evaluations, which the model bounds by 2 eps_L.
static double measured_noise(const float *grads) {
    Rng rng;
    rng_seed(&rng, 4242);
    double L0 = loss_now(), worst = 0.0;
    for (int k = 0; k < 2000; k++) {
        size_t i = (size_t)(rng_next(&rng) % model.num_params);
        float saved = model.params[i];
        if (saved == 0.0f) continue;
        model.params[i] = saved * (1.0f + ldexpf(1.0f, -20) * (rng_next(&rng) & 1 ? 1.0f : -1.0f));
        double delta = (double)model.params[i] - saved;
        double noise = fabs(loss_now() - L0 - (double)grads[i] * delta);
        model.params[i] = saved;
        if (noise > worst) worst = noise;
    }
    return worst;
}

typedef struct {
    int checks, flagged, insensitive;
} Totals;

// The layers of tensor `tensor` in the model: 0 for a tensor its architecture does not have.
static int tensor_layers(const GPTConfig *cfg, int tensor) {
    if (!param_tensor_size(cfg, tensor)) return 0;
    return param_is_per_layer(tensor) ? cfg->num_layers : 1;
}

static Totals check_all(const float *grads, int verbose, int print_table) {
    Totals t = {0, 0, 0};
    const GPTConfig *cfg = &model.config;
    if (print_table)
        printf("%-9s %5s %7s %14s %14s\n", "tensor", "layer", "|g|", "max rel err", "max bound/|g|");
    for (int tensor = 0; tensor < NUM_PARAM_TENSORS; tensor++) {
        int layers = tensor_layers(cfg, tensor);
        for (int l = 0; l < layers; l++) {
            SliceReport r = check_slice(grads, tensor, l, 1000 + (uint64_t)(tensor * 16 + l), verbose);
            t.checks += r.checks;
            t.flagged += r.flagged;
            t.insensitive += r.insensitive;
            if (print_table) {
                size_t off = param_offset(cfg, tensor, l), n = param_tensor_size(cfg, tensor);
                double gn = 0.0;
                for (size_t i = 0; i < n; i++) gn += (double)grads[off + i] * grads[off + i];
                printf("%-9s %5d %7.1e %14.2e %14.2e%s\n", PARAM_TENSOR_NAMES[tensor], l, sqrt(gn), r.max_rel,
                       r.max_bound_rel, r.flagged ? "  <- gradient disagrees" : "");
            }
        }
    }
    return t;
}

// If the code under test ends the process (fail() calls exit(1)), still print the summary line.
static int finished, in_child;
static void report_unfinished(void) {
    if (finished || in_child) return;
    printf("FAIL: the process exited before the end of the tests\n%d passed, %d failed\n", passed,
           failed + 1);
    fflush(stdout);
}

int main(int argc, char **argv) {
    atexit(report_unfinished);
    int llama = argc > 1 && strcmp(argv[1], "llama") == 0;
    if (argc != 2 || (!llama && strcmp(argv[1], "gpt2") != 0)) {
        fprintf(stderr, "usage: test_gradcheck gpt2|llama\n");
        return 2;
    }
    char *common[] = {"test_gradcheck",
                      "--model_size",
                      "d2",
                      "--layers",
                      "2",
                      "--channels",
                      "16",
                      "--vocab",
                      "64",
                      "--dtype",
                      "float32",
                      "--seq_len",
                      "8",
                      "--max_seq_len",
                      "16",
                      "--batch_size",
                      "2"};
    char *gpt2[] = {"--heads", "2"};
    char *llama_shape[] = {"--arch", "llama", "--heads", "4", "--kv_heads", "2", "--ffn_dim", "24"};
    int num_common = (int)(sizeof(common) / sizeof(common[0])), num_arch = llama ? 8 : 2;
    char *flags[32];
    memcpy(flags, common, sizeof(common));
    memcpy(flags + num_common, llama ? llama_shape : gpt2, (size_t)num_arch * sizeof(char *));
    TrainOptions opts;
    parse_options(&opts, num_common + num_arch, flags);
    GPTConfig cfg = config_from_options(&opts);
    expect(cfg.num_layers == GC_L && cfg.channels == GC_C && cfg.vocab_size == GC_V &&
               cfg.padded_vocab_size == 128 && cfg.max_seq_len == GC_MAXT &&
               (cfg.arch == ARCH_LLAMA) == llama && cfg.num_heads == (llama ? 4 : 2) &&
               model_kv_heads(&cfg) == 2 && model_ffn_dim(&cfg) == (llama ? 24 : 4 * GC_C),
           "config from options: L %d C %d NH %d KVH %d F %d V %d Vp %d maxT %d", cfg.num_layers,
           cfg.channels, cfg.num_heads, model_kv_heads(&cfg), model_ffn_dim(&cfg), cfg.vocab_size,
           cfg.padded_vocab_size, cfg.max_seq_len);
    Dist one_process = dist_single();
    gpt_alloc(&model, &cfg, DTYPE_FLOAT32, GC_B, GC_T, &opts, &one_process);
    gpt_init_params(model.params, &cfg, 7);

    Rng rng;
    rng_seed(&rng, 99);
    for (int tensor = 0; tensor < NUM_PARAM_TENSORS; tensor++) {
        int layers = tensor_layers(&cfg, tensor);
        for (int l = 0; l < layers; l++) {
            float *p = model.params + param_offset(&cfg, tensor, l);
            size_t n = param_tensor_size(&cfg, tensor);
            int ln_weight = tensor == PT_ATTN_NORM_W || tensor == PT_MLP_NORM_W || tensor == PT_FINAL_NORM_W;
            for (size_t i = 0; i < n; i++) {
                if (ln_weight)
                    p[i] = 1.0f + 0.1f * counter_normal(99, (uint64_t)(p + i - model.params));
                else if (param_is_decayed(tensor))
                    p[i] *= WEIGHT_SCALE;
                else
                    p[i] = 0.1f * counter_normal(
                                      99, (uint64_t)(p + i - model.params)); // LayerNorm and linear biases
            }
        }
    }
    // the padded rows of wte and lmhead stay zero, as the init leaves them (scaling kept them zero)
    for (int i = 0; i < GC_N; i++) {
        inputs[i] = (int)(rng_next(&rng) % GC_V);
        targets[i] = (int)(rng_next(&rng) % GC_V);
    }

    memset(model.grads, 0, model.num_params * sizeof(float));
    gpt_forward(&model, inputs, targets, 0);
    double L0 = model.mean_loss;
    gpt_backward(&model, inputs, targets, 1.0f / GC_N);
    float *grads = (float *)malloc_check(model.num_params * sizeof(float), "gradients");
    memcpy(grads, model.grads, model.num_params * sizeof(float));
    eps_L = K_ROUNDING * FLT_EPSILON * fabs(L0);
    printf("loss %.7f (ln V = %.7f), eps_L = %d * FLT_EPSILON * |L| = %.3e\n", L0, log((double)GC_V),
           (int)K_ROUNDING, eps_L);
    // the loss must not depend on the batch: a second forward gives the same bits
    expect(loss_now() == L0, "forward is not deterministic");

    // exact zeros: padded vocabulary rows of wte and lmhead, position rows t >= T of wpe
    size_t C = (size_t)cfg.channels;
    int nonzero = 0;
    for (int tensor = PT_TOKEN_EMBED; tensor <= PT_LM_HEAD; tensor += PT_LM_HEAD - PT_TOKEN_EMBED) {
        if (!param_tensor_size(&cfg, tensor)) continue;
        for (size_t i = (size_t)cfg.vocab_size * C; i < (size_t)cfg.padded_vocab_size * C; i++)
            nonzero += grads[param_offset(&cfg, tensor, 0) + i] != 0.0f;
    }
    expect(nonzero == 0, "%d gradient elements of the padded vocabulary rows are nonzero", nonzero);
    nonzero = 0;
    for (size_t i = (size_t)GC_T * C; i < (size_t)param_tensor_size(&cfg, PT_POS_EMBED); i++)
        nonzero += grads[param_offset(&cfg, PT_POS_EMBED, 0) + i] != 0.0f;
    expect(nonzero == 0, "%d gradient elements of the wpe rows t >= T are nonzero", nonzero);

    // the rounding model of the loss, measured
    double noise = measured_noise(grads);
    printf("measured loss noise (max over 2000 tiny perturbations) %.3e = %.2f x 2 eps_L\n", noise,
           noise / (2.0 * eps_L));
    expect(noise <= 2.0 * eps_L, "measured loss noise %.3e exceeds the model's 2 eps_L = %.3e", noise,
           2.0 * eps_L);

    // the real gradient
    Totals t = check_all(grads, 1, 1);
    printf("gradient checks: %d run, %d outside the bound, %d unable to catch a %.0f%% error\n", t.checks,
           t.flagged, t.insensitive, 100.0 * DETECT);
    expect(t.flagged == 0, "%d of %d gradient checks disagree with finite differences", t.flagged, t.checks);
    expect(t.insensitive == 0, "%d of %d checks are too loose to catch a 5%% error", t.insensitive, t.checks);

    // self-test of the checker: corrupted copies must be flagged
    float *bad = (float *)malloc_check(model.num_params * sizeof(float), "gradients");
    int slices = 0, caught_scale = 0, caught_element = 0;
    for (int tensor = 0; tensor < NUM_PARAM_TENSORS; tensor++) {
        int layers = tensor_layers(&cfg, tensor);
        for (int l = 0; l < layers; l++) {
            size_t off = param_offset(&cfg, tensor, l), n = param_tensor_size(&cfg, tensor);
            slices++;
            memcpy(bad, grads, model.num_params * sizeof(float));
            for (size_t i = 0; i < n; i++) bad[off + i] *= 1.05f;
            caught_scale += check_slice(bad, tensor, l, 77, 0).flagged > 0;
            memcpy(bad, grads, model.num_params * sizeof(float));
            size_t imax = 0;
            for (size_t i = 1; i < n; i++)
                if (fabsf(grads[off + i]) > fabsf(grads[off + imax])) imax = i;
            bad[off + imax] *= 1.05f;
            caught_element += check_slice(bad, tensor, l, 77, 0).flagged > 0;
        }
    }
    printf("self-test: a slice scaled by 1.05 flagged in %d/%d slices, its largest element x1.05 in %d/%d\n",
           caught_scale, slices, caught_element, slices);
    expect(caught_scale == slices, "checker missed a 5%% scaled gradient in %d slices",
           slices - caught_scale);
    expect(caught_element == slices, "checker missed a 5%% wrong element in %d slices",
           slices - caught_element);
    int caught_swap = 0, swaps = 0;
    for (int tensor = PT_ATTN_NORM_W; tensor <= PT_MLP_DOWN_B; tensor++) {
        size_t o0 = param_offset(&cfg, tensor, 0), o1 = param_offset(&cfg, tensor, 1),
               n = param_tensor_size(&cfg, tensor);
        if (!n) continue;
        memcpy(bad, grads, model.num_params * sizeof(float));
        memcpy(bad + o0, grads + o1, n * sizeof(float));
        memcpy(bad + o1, grads + o0, n * sizeof(float));
        swaps++;
        caught_swap +=
            check_slice(bad, tensor, 0, 77, 0).flagged > 0 && check_slice(bad, tensor, 1, 77, 0).flagged > 0;
    }
    printf("self-test: layers 0 and 1 swapped flagged in %d/%d per-layer tensors\n", caught_swap, swaps);
    expect(caught_swap == swaps, "checker missed a layer swap in %d tensors", swaps - caught_swap);

    free(bad);
    free(grads);
    finished = 1;
    return test_summary();
}

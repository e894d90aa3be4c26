// test_recipe_grads.c: the finite-difference check's sibling for the reduced-precision recipes.
//
// A quantized model has no finite-difference gradient to be checked against: its loss is piecewise constant
// at the scale of a quantization step (and discontinuous where a scale changes), and its backward is by
// design the straight-through one, each cast acting as the identity on the gradient. What its gradient must
// be is the float32 gradient of the same weights and batch (which test_gradcheck checks against finite
// differences) up to the roundings of its formats. So for bfloat16 and every FP8 recipe (delayed, current,
// blockwise, mxfp8) this test measures, per parameter tensor (all layers together), the relative L2
// distance d = |g - g32| / |g32| of its gradient g to the float32 gradient g32.
//
// Bound. A reduced-precision run rounds values at fixed sites: bfloat16 rounds every stored activation and
// every GEMM operand to 8 significant bits (unit roundoff u = 2^-8); an FP8 recipe rounds the same stored
// activations to BF16 and its GEMM operands at the same sites to E4M3 (u = 2^-4) or E5M2 (2^-3) instead.
// Without saturation (the recipes scale to avoid it; block scales are rounded down so that nothing
// saturates) and with the few flushed values counted, the gradient's error is to first order a sum over the
// sites of a coefficient times each site's relative rounding error, the coefficients the same in both runs.
// Scaling every site's unit roundoff by at most 2^5 (E5M2 against BF16) scales that sum, however its terms
// combine, by at most 2^5: d_fp8 <= 32 d_bf16, with d_bf16 measured here on the same weights and batch.
// The measured d_bf16 is itself one draw of random-like roundings, so the bound takes a factor 2 of
// headroom: d <= 64 d_bf16 per tensor. bfloat16 itself is held to d_bf16 <= 2^-4: its errors are a few
// hundred BF16 roundings' worth, far below a gradient that would be wrong.
//
// The bound must not be vacuous: the gradient of another batch (same weights) is far outside it, and so is
// the blockwise recipe's gradient with one of its weight casts' factors doubled (what a wrong scale layout
// or a missing dequantization would do to one tensor).
//
// Model: L=2, C=128 (the blockwise tile), NH=4, V=64 (Vp=128), T=64, B=2 (128 tokens), the seeded init, seed
// 7; `test_recipe_grads gpt2` or `llama` (KVH=2, F=384: every linear's features a multiple of the tile).
#define TRAIN_GPT_NO_MAIN
#pragma GCC diagnostic ignored "-Wunused-function"
#include "../train_gpt.c"
#include "test_util.h"

#define RG_B 2
#define RG_T 64
#define RG_N (RG_B * RG_T)

static int llama; // the architecture under test

static TrainOptions options_for(const char *dtype, const char *recipe) {
    char *argv[] = {"test_recipe_grads",
                    "--model_size",
                    "d2",
                    "--layers",
                    "2",
                    "--channels",
                    "128",
                    "--heads",
                    "4",
                    "--vocab",
                    "64",
                    "--max_seq_len",
                    "64",
                    "--seq_len",
                    "64",
                    "--batch_size",
                    "2",
                    "--dtype",
                    (char *)dtype,
                    "--fp8_recipe",
                    (char *)recipe,
                    "--arch",
                    "llama",
                    "--kv_heads",
                    "2",
                    "--ffn_dim",
                    "384"};
    int argc = (int)(sizeof(argv) / sizeof(argv[0])) - (llama ? 0 : 6); // GPT-2: without the Llama flags
    TrainOptions opts;
    parse_options(&opts, argc, argv);
    return opts;
}

// The gradient of the mean loss of (inputs, targets) at params, in the given precision. With
// double_factor, the blockwise weight cast of layer 0's qkv weight has its dequantization factors doubled
// (a planted defect).
static float *gradient(const GPTConfig *cfg, const float *params, const char *dtype, const char *recipe,
                       const int *inputs, const int *targets, int double_factor) {
    TrainOptions opts = options_for(dtype, recipe);
    Dist one_process = dist_single();
    GPT m;
    memset(&m, 0, sizeof(m));
    gpt_alloc(&m, cfg, opts.dtype, RG_B, RG_T, &opts, &one_process);
    memcpy(m.params, params, m.num_params * sizeof(float));
    refresh_compute_weights(&m);
    if (double_factor) { // the dequantized weight the GEMM multiplies, off by 2x
        size_t offset = param_offset(cfg, PT_QKV_W, 0), n = param_tensor_size(cfg, PT_QKV_W);
        for (size_t i = 0; i < n; i++) m.weights_fp8[offset + i] *= 2.0f;
    }
    memset(m.grads, 0, m.num_params * sizeof(float));
    gpt_forward(&m, inputs, targets, 1);
    gpt_backward(&m, inputs, targets, 1.0f / RG_N);
    float *g = (float *)malloc_check(m.num_params * sizeof(float), "gradient");
    memcpy(g, m.grads, m.num_params * sizeof(float));
    gpt_free(&m);
    return g;
}

// |g - ref| / |ref| over tensor `tensor` of every layer.
static double distance(const GPTConfig *cfg, const float *g, const float *ref, int tensor) {
    int layers = param_is_per_layer(tensor) ? cfg->num_layers : 1;
    double diff = 0.0, norm = 0.0;
    for (int l = 0; l < layers; l++) {
        size_t offset = param_offset(cfg, tensor, l), n = param_tensor_size(cfg, tensor);
        for (size_t i = 0; i < n; i++) {
            double d = (double)g[offset + i] - ref[offset + i];
            diff += d * d;
            norm += (double)ref[offset + i] * ref[offset + i];
        }
    }
    return sqrt(diff / norm);
}

int main(int argc, char **argv) {
    llama = argc == 2 && strcmp(argv[1], "llama") == 0;
    if (argc != 2 || (!llama && strcmp(argv[1], "gpt2") != 0)) {
        fprintf(stderr, "usage: test_recipe_grads gpt2|llama\n");
        return 2;
    }
    TrainOptions base = options_for("float32", "delayed");
    GPTConfig cfg = config_from_options(&base);
    float *params = (float *)malloc_check(param_count(&cfg) * sizeof(float), "parameters");
    gpt_init_params(params, &cfg, 7);
    static int inputs[RG_N], targets[RG_N], other_targets[RG_N];
    Rng rng;
    rng_seed(&rng, 11);
    for (int i = 0; i < RG_N; i++) {
        inputs[i] = (int)(rng_next(&rng) % cfg.vocab_size);
        targets[i] = (int)(rng_next(&rng) % cfg.vocab_size);
        other_targets[i] = (int)(rng_next(&rng) % cfg.vocab_size);
    }
    float *g32 = gradient(&cfg, params, "float32", "delayed", inputs, targets, 0);
    float *g16 = gradient(&cfg, params, "bfloat16", "delayed", inputs, targets, 0);
    static const char *recipes[] = {"delayed", "current", "blockwise", "mxfp8"};
    float *g8[4];
    for (int r = 0; r < 4; r++) g8[r] = gradient(&cfg, params, "float8", recipes[r], inputs, targets, 0);
    float *other = gradient(&cfg, params, "float8", "blockwise", inputs, other_targets, 0);
    float *planted = gradient(&cfg, params, "float8", "blockwise", inputs, targets, 1);

    printf("%-9s %9s %9s | %9s %9s %9s %9s | %9s %9s\n", "tensor", "bf16", "64xbf16", "delayed", "current",
           "blockwise", "mxfp8", "other", "planted");
    int other_outside = 0, planted_outside = 0, tensors = 0;
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        if (!param_tensor_size(&cfg, t)) continue; // not in this architecture
        tensors++;
        double d16 = distance(&cfg, g16, g32, t), bound = 64.0 * d16, d[4];
        expect(d16 <= 0x1p-4, "bfloat16 gradient of %s: %.3e from float32, above 2^-4", PARAM_TENSOR_NAMES[t],
               d16);
        for (int r = 0; r < 4; r++) {
            d[r] = distance(&cfg, g8[r], g32, t);
            expect(d[r] <= bound, "float8 %s gradient of %s: %.3e from float32, above 64 x bfloat16's %.3e",
                   recipes[r], PARAM_TENSOR_NAMES[t], d[r], d16);
        }
        double d_other = distance(&cfg, other, g32, t), d_planted = distance(&cfg, planted, g32, t);
        other_outside += d_other > bound;
        planted_outside += d_planted > bound;
        printf("%-9s %9.2e %9.2e | %9.2e %9.2e %9.2e %9.2e | %9.2e %9.2e\n", PARAM_TENSOR_NAMES[t], d16,
               bound, d[0], d[1], d[2], d[3], d_other, d_planted);
    }
    // another batch changes every tensor's gradient; the planted factor at least the tensors it feeds
    expect(other_outside == tensors, "another batch's gradient is outside the bound in only %d of %d tensors",
           other_outside, tensors);
    expect(planted_outside >= 1, "a doubled weight factor stays inside the bound in every tensor");
    printf("another batch: outside the bound in %d of %d tensors; a doubled factor of layer 0's qkv weight: "
           "%d\n",
           other_outside, tensors, planted_outside);
    for (int r = 0; r < 4; r++) free(g8[r]);
    free(g32), free(g16), free(other), free(planted), free(params);
    return test_summary();
}

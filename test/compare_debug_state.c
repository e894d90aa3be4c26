// compare_debug_state: checks a trainer's --debug_state file against the CPU reference's.
//   compare_debug_state CANDIDATE REFERENCE FLOAT32_REFERENCE   tolerance argued below
//   compare_debug_state --rounding_sites F CANDIDATE REFERENCE FLOAT32_REFERENCE
//                                                                 the same, bounds scaled by F (below)
//   compare_debug_state --exact A B                               bitwise equality (determinism, resume)
// CANDIDATE is typically the CUDA trainer's file, REFERENCE train_cpu's with the same flags and dtype (and
// in float8 --fp8_accumulation hopper, the tensor cores' accumulation), FLOAT32_REFERENCE train_cpu's with
// --dtype float32 from the same weights on the same batch. Each file's first step is compared: a fresh run's
// step 1, or the step after the checkpoint both trainers resumed from (test_gpu.sh checks later steps that
// way, each from the same weights, optimizer and scaling state, rather than along two runs that drift
// apart: AdamW's first update is nearly a sign, so a gradient that differs in the last bit near zero moves
// its weight by 2 lr, and the difference compounds).
//
// Tolerance. The CUDA trainer rounds at exactly the places the CPU reference rounds; the two differ
// only in the order of FP32 sums (GEMMs, reductions, the products inside a tensor core's MMA), a
// relative effect near 1e-6. Such a difference
// changes a BF16 or FP8 rounding only for the few values that lie within it of a rounding boundary,
// and each such flip moves one value by one unit of its format: the same kind of error the rounding
// itself introduces in every value. So the distance between candidate and reference must not exceed
// the distance between the reference and FLOAT32_REFERENCE (the full effect of all roundings), plus
// a floor for the FP32 summation-order differences themselves: 1e-5 relative for logits and losses
// (sums of at most a few thousand terms, 2^-24 * sqrt(terms) * headroom), 1e-4 for gradients, which are
// sums over the whole batch and all positions. Distances are relative L2 norms per tensor.
// In bfloat16 those places include cuBLASLt's epilogues: the GELU of fc's FP32 result, fcproj's input
// gradient rounded once after the GELU's backward; train_gpt.c rounds there too. A GPU whose cuBLASLt
// declines them (the run's `note |` line) rounds once more in each, and no bound derived from the
// reference holds it: the GELU input's rounding alone moves the d2 model's first loss (test_gpu.sh) by
// 1.8e-4, three times the reference's distance from float32 (5.6e-5) -- roundings can cancel.
// --rounding_sites F: for a candidate that rounds in more places than the reference (the GPU's fast
// attention rounds its probabilities and their gradients to BF16, which the CPU keeps in FP32): each added
// site is one more rounding of the same unit roundoff, so with at most (F - 1) times the reference's own
// rounding effect added, the distance stays within F times the reference's distance from float32, or F times
// the floor where that is the larger (the loss: its roundings cancel, and the floor is what bounds it).
// A GPU whose cuBLASLt computes another GELU than the reference's tanh form counts one site more: the erf
// form differs from it by under 5% of one BF16 unit of the GELU's input at every x (test_gpu.sh's
// gelu_sites).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/debug_state.h"

static double rel_l2(const float *a, const float *b, size_t n, const float *scale_of) {
    double diff = 0.0, norm = 0.0;
    for (size_t i = 0; i < n; i++) {
        diff += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        norm += (double)scale_of[i] * scale_of[i];
    }
    return norm > 0.0 ? sqrt(diff / norm) : sqrt(diff);
}

static int passed = 0, failed = 0;

static void check(int ok, const char *what, double value, double bound) {
    printf("%-4s %-28s %.3e (bound %.3e)\n", ok ? "ok" : "FAIL", what, value, bound);
    if (ok)
        passed++;
    else
        failed++;
}

// The same model shape and first batch; with same_steps also the same steps after the same checkpoint.
static void check_same_run(const DebugState *a, const DebugState *b, const char *path, int same_steps) {
    if (a->B != b->B || a->T != b->T || memcmp(&a->config, &b->config, sizeof(GPTConfig)) != 0 ||
        (same_steps && (a->steps != b->steps || a->first_step != b->first_step)))
        fail("%s: describes another run (batch, model shape, steps or the step it starts after differ)",
             path);
    size_t N = (size_t)a->B * a->T;
    if (memcmp(a->inputs, b->inputs, N * sizeof(int)) || memcmp(a->targets, b->targets, N * sizeof(int)))
        fail("%s: the first batch differs: not the same data or seed", path);
}

static int compare_exact(const DebugState *a, const DebugState *b) {
    size_t N = (size_t)a->B * a->T, P = param_count(&a->config);
    check(memcmp(a->logits, b->logits, N * a->config.padded_vocab_size * sizeof(float)) == 0,
          "logits bitwise", 0, 0);
    check(memcmp(&a->loss, &b->loss, sizeof(float)) == 0, "loss bitwise", 0, 0);
    check(memcmp(a->grads, b->grads, P * sizeof(float)) == 0, "gradients bitwise", 0, 0);
    check(memcmp(a->step_losses, b->step_losses, a->steps * sizeof(float)) == 0, "step losses bitwise", 0, 0);
    return failed;
}

// Distance of a tensor (all layers) between two gradient buffers, relative to the reference's norm.
static double tensor_distance(const GPTConfig *cfg, int tensor, const float *a, const float *b,
                              const float *ref) {
    double diff = 0.0, norm = 0.0;
    int layers = param_is_per_layer(tensor) ? cfg->num_layers : 1;
    for (int l = 0; l < layers; l++) {
        size_t offset = param_offset(cfg, tensor, l), n = param_tensor_size(cfg, tensor);
        for (size_t i = 0; i < n; i++) {
            double d = (double)a[offset + i] - b[offset + i];
            diff += d * d;
            norm += (double)ref[offset + i] * ref[offset + i];
        }
    }
    return norm > 0.0 ? sqrt(diff / norm) : sqrt(diff);
}

static int compare_toleranced(const DebugState *cand, const DebugState *ref, const DebugState *ref32,
                              double sites) {
    size_t N = (size_t)ref->B * ref->T, logits = N * ref->config.padded_vocab_size;
    double bound = sites * fmax(rel_l2(ref->logits, ref32->logits, logits, ref->logits), 1e-5);
    check(rel_l2(cand->logits, ref->logits, logits, ref->logits) <= bound, "logits",
          rel_l2(cand->logits, ref->logits, logits, ref->logits), bound);
    bound = sites * fmax(fabs(ref->loss - ref32->loss), 1e-5 * fabs(ref->loss));
    check(fabs(cand->loss - ref->loss) <= bound, "loss", fabs(cand->loss - ref->loss), bound);
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        char what[64];
        snprintf(what, sizeof(what), "gradient %s", PARAM_TENSOR_NAMES[t]);
        double d = tensor_distance(&ref->config, t, cand->grads, ref->grads, ref->grads);
        double b = sites * fmax(tensor_distance(&ref->config, t, ref->grads, ref32->grads, ref->grads), 1e-4);
        check(d <= b, what, d, b);
    }
    return failed;
}

int main(int argc, char **argv) {
    double sites = 1.0;
    if (argc == 6 && strcmp(argv[1], "--rounding_sites") == 0) {
        char *end = NULL;
        sites = strtod(argv[2], &end);
        if (*end != '\0' || !(sites >= 1.0 && sites <= 16.0))
            fail("--rounding_sites: '%s' is not a factor in [1, 16]", argv[2]);
        argc -= 2;
        argv += 2;
    }
    int exact = argc == 4 && strcmp(argv[1], "--exact") == 0;
    if (!exact && argc != 4)
        fail("usage: compare_debug_state [--rounding_sites F] CANDIDATE REFERENCE FLOAT32_REFERENCE | "
             "--exact A B");
    DebugState a, b, c;
    debug_state_read(argv[exact ? 2 : 1], &a);
    debug_state_read(argv[exact ? 3 : 2], &b);
    check_same_run(&a, &b, argv[exact ? 3 : 2], 1);
    if (exact) {
        compare_exact(&a, &b);
    } else {
        debug_state_read(argv[3], &c);
        check_same_run(&b, &c, argv[3], 0);
        compare_toleranced(&a, &b, &c, sites);
        debug_state_free(&c);
    }
    printf("%d passed, %d failed\n", passed, failed);
    debug_state_free(&a);
    debug_state_free(&b);
    return failed ? 1 : 0;
}

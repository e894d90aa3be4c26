// check_state: a trainer's optimizer step against AdamW's definition, and its FP8 scaling state against the
// CPU reference's (test/test_gpu.sh, on the CUDA trainer and, as the control, on train_cpu).
//   check_state BEFORE_DIR STEP AFTER_DIR DEBUG_STATE [REFERENCE_AFTER_DIR] -- TRAINER_FLAGS...
// BEFORE_DIR holds checkpoint STEP (model and state file); AFTER_DIR the checkpoint STEP + 1 that the trainer
// wrote after resuming from it for one step with --debug_state DEBUG_STATE (one process, ZeRO-0); the
// trainer's flags follow "--" (they give the learning rate schedule, AdamW's settings and the recipe).
//
// 1. AdamW, bit for bit. Both trainers update each weight with the same float arithmetic (train_gpt.c's
//    adamw_run, gpu/adamw.cuh's adamw_kernel with _rn intrinsics), from the gradient their debug state holds:
//      m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g g;  w -= lr (m / c1 / (sqrt(v / c2) + eps) + wd w),
//    c1 = 1 - b1^t and c2 = 1 - b2^t (powf, on the host in both), lr the schedule's at this step, wd the
//    weight decay for the 2-D weights (gpt_model.h's param_is_decayed) and 0 for biases and norm gains.
//    Recomputed here from the checkpoint before, that gradient and the flags, every element of every tensor
//    (one-dimensional ones included) of w, m and v must equal the trainer's. The run needs --grad_clip 0: a
//    clip scales the gradient by clip / norm, and the two trainers' norms are sums in different orders.
// 2. With REFERENCE_AFTER_DIR (train_cpu's checkpoint STEP + 1 from the same BEFORE_DIR): each amax the step
//    recorded in the delayed recipe's histories against the reference's. Both trainers measured the same
//    tensors of the same step from the same weights and scales; their values differ by rounding flips only.
//    Layer 0's qkv input is the BF16 LayerNorm of the embeddings, whose elements agree with the reference's
//    to BF16 rounding: its max to 2^-7 relative (one BF16 spacing, 2^-8, of each of the two values). Every
//    later input has passed through an FP8 GEMM, whose E4M3 operands may round a factor the other way, one
//    E4M3 spacing (2^-3 relative), the most a sum moves when one product dominates it: 2^-3. An output
//    gradient has passed through the E5M2 casts of the layers above: one E5M2 spacing, 2^-2. The
//    histories' other entries come from BEFORE_DIR and are equal. It also prints each tensor's relative L2
//    distance of w, m and v from the reference's (the gradients themselves are compare_debug_state's).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/atomic_file.h"
#include "../core/cli.h"
#include "../core/debug_state.h"
#include "../core/model_file.h"
#include "../core/train_log.h"
#include "../core/train_state.h"

typedef struct {
    GPTConfig cfg;
    float *w, *m, *v, *history;
    size_t moments, history_floats;
    int64_t updates;
} Checkpoint;

static void load_checkpoint(const char *dir, long step, Checkpoint *c) {
    char model_path[CHECKPOINT_PATH_LEN], state_path[CHECKPOINT_PATH_LEN];
    model_file_path(dir, step, model_path, sizeof(model_path));
    state_file_path(dir, step, 0, state_path, sizeof(state_path));
    c->w = load_model_file(model_path, &c->cfg);
    int64_t h[STATE_FILE_HEADER_INTS], size;
    FILE *f = open_state_file(state_path, 0, h, &size);
    if (h[SH_WORLD] != 1 || h[SH_ZERO_STAGE] != 0)
        fail("%s: check_state reads checkpoints of one process with ZeRO-0", state_path);
    c->moments = (size_t)h[SH_MOMENTS];
    c->history_floats = (size_t)h[SH_HISTORY_FLOATS];
    c->updates = h[SH_UPDATES];
    if (c->moments != param_count(&c->cfg)) fail("%s: moments for another model", state_path);
    c->m = (float *)malloc_check(c->moments * sizeof(float), state_path);
    c->v = (float *)malloc_check(c->moments * sizeof(float), state_path);
    c->history = (float *)malloc_check((c->history_floats + 1) * sizeof(float), state_path);
    fread_check(c->m, sizeof(float), c->moments, f, state_path);
    fread_check(c->v, sizeof(float), c->moments, f, state_path);
    fread_check(c->history, sizeof(float), c->history_floats, f, state_path);
    fclose(f);
}

static int failures = 0;

typedef struct {
    float lr, b1, b2, eps, c1, c2;
} AdamW;

// Element i of w, m, v after the step, by AdamW's definition in the trainers' float arithmetic.
static void adamw_element(const AdamW *a, const Checkpoint *before, float g, float wd, size_t i,
                          float out[3]) {
    const float m = a->b1 * before->m[i] + (1.0f - a->b1) * g,
                v = a->b2 * before->v[i] + (1.0f - a->b2) * g * g;
    const float m_hat = m / a->c1, v_hat = v / a->c2;
    out[0] = before->w[i] - a->lr * (m_hat / (sqrtf(v_hat) + a->eps) + wd * before->w[i]);
    out[1] = m;
    out[2] = v;
}

// The trainer's w, m, v after the step against AdamW recomputed from `before` and the debug state's gradient.
static void check_adamw(const Checkpoint *before, const Checkpoint *after, const DebugState *debug,
                        const TrainOptions *opts, long step) {
    const GPTConfig *cfg = &before->cfg;
    const float t = (float)after->updates;
    const AdamW a = {
        learning_rate(opts, (int)step), opts->beta1, opts->beta2, opts->eps, 1.0f - powf(opts->beta1, t),
        1.0f - powf(opts->beta2, t)};
    for (int tensor = 0; tensor < NUM_PARAM_TENSORS; tensor++) {
        const size_t n = param_tensor_size(cfg, tensor);
        if (!n) continue;
        const float wd = param_is_decayed(tensor) ? opts->weight_decay : 0.0f;
        size_t wrong[3] = {0, 0, 0}, first = (size_t)-1;
        for (int l = 0; l < (param_is_per_layer(tensor) ? cfg->num_layers : 1); l++) {
            const size_t at = param_offset(cfg, tensor, l);
            for (size_t i = at; i < at + n; i++) {
                float want[3];
                adamw_element(&a, before, debug->grads[i], wd, i, want);
                const float got[3] = {after->w[i], after->m[i], after->v[i]};
                for (int k = 0; k < 3; k++)
                    if (memcmp(&want[k], &got[k], sizeof(float)) != 0) {
                        wrong[k]++;
                        if (first == (size_t)-1) first = i;
                    }
            }
        }
        const int ok = !wrong[0] && !wrong[1] && !wrong[2];
        failures += !ok;
        printf("%-4s AdamW %-8s (weight decay %g): %zu weights, %zu m, %zu v differ from AdamW's bits",
               ok ? "ok" : "FAIL", PARAM_TENSOR_NAMES[tensor], (double)wd, wrong[0], wrong[1], wrong[2]);
        if (!ok) {
            float want[3];
            adamw_element(&a, before, debug->grads[first], wd, first, want);
            printf(" (first at %zu: w %.9g -> %.9g, AdamW's %.9g)", first, (double)before->w[first],
                   (double)after->w[first], (double)want[0]);
        }
        printf("\n");
    }
}

static double rel_l2(const float *a, const float *b, size_t n) {
    double d = 0.0, norm = 0.0;
    for (size_t i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        norm += (double)b[i] * b[i];
    }
    return norm > 0.0 ? sqrt(d / norm) : sqrt(d);
}

// The step's amaxes against the reference's (the bounds above), and the distances of w, m and v.
static void check_reference(const Checkpoint *before, const Checkpoint *after, const Checkpoint *ref,
                            const TrainOptions *opts) {
    const GPTConfig *cfg = &before->cfg;
    if (after->history_floats != ref->history_floats) fail("the reference's amax histories differ in size");
    // only float8 runs keep histories (a bfloat16 run's state file carries the region unused)
    const int len = opts->amax_history;
    const int tensors = opts->dtype == DTYPE_FLOAT8 && len ? (int)(after->history_floats / len) : 0;
    for (int k = 0; k < tensors; k++)
        for (int j = 0; j < len; j++) {
            const size_t i = (size_t)k * len + j;
            const float a = after->history[i], r = ref->history[i];
            if (before->history[i] == a && a == r) continue; // an entry this step did not write
            const int gradient = k % 2; // fp8_tensor_index: inputs even, output gradients odd
            const double bound = (gradient ? 0x1p-2 : k == 0 ? 0x1p-7 : 0x1p-3) * fabs(r);
            const int ok = fabs((double)a - r) <= bound;
            failures += !ok;
            printf("%-4s amax of layer %d %s %s: %.7g against the reference's %.7g (bound %.2g)\n",
                   ok ? "ok" : "FAIL", k / 2 / NUM_BLOCK_LINEARS,
                   (const char *[]){"qkv", "attproj", "fc", "fcproj"}[k / 2 % NUM_BLOCK_LINEARS],
                   gradient ? "grad_output" : "input", (double)a, (double)r, bound);
        }
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        size_t n = param_tensor_size(cfg, t);
        if (!n) continue;
        double w = 0.0, m = 0.0, v = 0.0;
        for (int l = 0; l < (param_is_per_layer(t) ? cfg->num_layers : 1); l++) {
            size_t at = param_offset(cfg, t, l);
            w = fmax(w, rel_l2(after->w + at, ref->w + at, n));
            m = fmax(m, rel_l2(after->m + at, ref->m + at, n));
            v = fmax(v, rel_l2(after->v + at, ref->v + at, n));
        }
        printf("     %-8s from the reference's: w %.3e, m %.3e, v %.3e (relative L2, worst layer)\n",
               PARAM_TENSOR_NAMES[t], w, m, v);
    }
}

int main(int argc, char **argv) {
    int dashes = 0;
    while (dashes < argc && strcmp(argv[dashes], "--") != 0) dashes++;
    if ((dashes != 5 && dashes != 6) || dashes == argc)
        fail("usage: check_state BEFORE_DIR STEP AFTER_DIR DEBUG_STATE [REFERENCE_AFTER_DIR] -- "
             "TRAINER_FLAGS...");
    TrainOptions opts;
    argv[dashes] = argv[0];
    parse_options(&opts, argc - dashes, argv + dashes);
    if (opts.grad_clip != 0.0f)
        fail("check_state: the run needs --grad_clip 0 (a clip scales by the trainer's own norm)");
    const long step = strtol(argv[2], NULL, 10);
    Checkpoint before, after, ref;
    load_checkpoint(argv[1], step, &before);
    load_checkpoint(argv[3], step + 1, &after);
    DebugState debug;
    debug_state_read(argv[4], &debug);
    if (debug.first_step != step || memcmp(&debug.config, &before.cfg, sizeof(GPTConfig)) != 0)
        fail("%s: not the debug state of the step after checkpoint %ld of this model", argv[4], step);
    check_adamw(&before, &after, &debug, &opts, step);
    if (dashes == 6) {
        load_checkpoint(argv[5], step + 1, &ref);
        check_reference(&before, &after, &ref, &opts);
    }
    printf("%s\n", failures ? "FAIL" : "ok");
    return failures ? 1 : 0;
}

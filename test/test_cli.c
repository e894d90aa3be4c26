// test_cli.c: unit tests of the host-side pieces shared by both trainers, with no training:
//   - learning_rate(): warmup, decay and end values of every schedule, against llm.c's get_lr evaluated
//     here in double;
//   - param_count() for GPT-2 124M (the published count with llm.c's padded vocabulary) and that
//     param_offset() tiles [0, param_count) with no gap or overlap, one layer's tensors together;
//   - parse_options(): defaults, "--name value" and "--name=value", later flags overriding earlier ones,
//     range limits at and just past their ends (errors checked in a child process);
//   - config_from_options() presets and overrides, pad_vocab, resolve_seq_len, resolve_grad_accum_steps;
//   - save_model_file / load_model_file: the file is llm.c's tensor-major order (checked against shapes
//     written out here, not against the code's own visitor), the round trip is bit-exact, and a
//     version-5 (bf16) file written here by hand loads to the expected floats; a Llama file is written in
//     the layout of llm.c's train_llama3.cu (its 16 slots written out here), and one in llm.c master's
//     train_llama3.py layout, written here by hand, loads to the same model;
//   - save_state_file / load_state_file round trip and refusal of a state from another run;
//   - load_training_state re-sharding the moments of a padded layout (3 processes, ZeRO-1 and ZeRO-3) for
//     1, 2, 3 and 4 processes with ZeRO 0, 1 and 3 (every owned element its full-vector value, padding
//     zero), and refusing, with one line naming the file, a rank 0 or rank file of another step, a rank 0
//     file of another rank, a missing rank file, a global batch the new processes cannot split.
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../core/atomic_file.h"
#include "../core/cli.h"
#include "../core/gpt_model.h"
#include "../core/model_file.h"
#include "../core/state_reshard.h"
#include "../core/train_log.h"
#include "../core/train_state.h"

#include "test_util.h"

static char tmpdir[256];

// If the code under test ends the process (fail() calls exit(1)), still print the summary line.
static int finished, in_child;
static void report_unfinished(void) {
    if (finished || in_child) return;
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    if (tmpdir[0] && system(cmd) != 0) printf("warning: could not remove %s\n", tmpdir);
    printf("FAIL: the process exited before the end of the tests\n%d passed, %d failed\n", passed,
           failed + 1);
    fflush(stdout);
}

// Runs fn(arg) in a child with stderr captured; expects exit status 1 and exactly one line
// "error: ..." containing `needle`.
static void expect_error(void (*fn)(void *), void *arg, const char *needle, const char *what) {
    int fds[2];
    if (pipe(fds) != 0) {
        expect(0, "%s: pipe failed", what);
        return;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        in_child = 1;
        close(fds[0]);
        dup2(fds[1], 2);
        if (!freopen("/dev/null", "w", stdout)) _exit(3);
        fn(arg);
        _exit(0); // fn returned: no error was raised
    }
    close(fds[1]);
    char buf[4096];
    size_t len = 0;
    ssize_t got;
    while ((got = read(fds[0], buf + len, sizeof(buf) - 1 - len)) > 0) len += (size_t)got;
    buf[len] = '\0';
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    int exited1 = WIFEXITED(status) && WEXITSTATUS(status) == 1;
    char *nl = strchr(buf, '\n');
    int one_line = strncmp(buf, "error: ", 7) == 0 && nl && nl[1] == '\0';
    expect(exited1 && one_line && strstr(buf, needle),
           "%s: expected exit 1 and one line 'error: ...%s...', got status %d, stderr '%s'", what, needle,
           WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status), buf);
}

// ----------------------------------------------------------------------------------------------------
// parse_options

// The options of `train_cpu ARGS...`; no arguments: the defaults parse_options starts from (a bare
// train_cpu prints its short usage instead).
static void parse(TrainOptions *o, int n, ...) {
    if (n == 0) {
        options_defaults(o);
        return;
    }
    char *argv[64];
    argv[0] = "train_cpu";
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++) argv[i + 1] = va_arg(ap, char *);
    va_end(ap);
    parse_options(o, n + 1, argv);
}

typedef struct {
    int argc;
    char *argv[8];
} Args;

static void parse_args_fn(void *p) {
    Args *a = (Args *)p;
    TrainOptions o;
    parse_options(&o, a->argc, a->argv);
}

static void expect_parse_error(const char *flag, const char *value, const char *needle) {
    Args a = {value ? 3 : 2, {"train_cpu", (char *)flag, (char *)value, NULL}};
    char what[160];
    snprintf(what, sizeof(what), "parse %s %s", flag, value ? value : "");
    expect_error(parse_args_fn, &a, needle, what);
}

static void test_parse_options(void) {
    TrainOptions o;
    parse(&o, 0);
    // the defaults the --help table declares
    expect(strcmp(o.train_data, "data/tinyshakespeare_train_*.bin") == 0, "default train_data '%s'",
           o.train_data);
    expect(strcmp(o.output_dir, "out") == 0 && o.log_file[0] == '\0' && o.init_from[0] == '\0',
           "default output_dir/log_file/init_from");
    expect(strcmp(o.model_size, "124M") == 0, "default model_size '%s'", o.model_size);
    expect(o.layers == 0 && o.channels == 0 && o.heads == 0 && o.max_seq_len == 0 && o.vocab == 0 &&
               o.arch == ARCH_CHOICE_AUTO && o.kv_heads == 0 && o.ffn_dim == 0 && o.rope_theta == 0.0f,
           "default model overrides");
    expect(o.dtype == DTYPE_FLOAT8 && o.fp8_recipe == FP8_RECIPE_DELAYED && o.amax_history == 16 &&
               o.fp8_margin == 0,
           "default fp8 settings: dtype %d recipe %d history %d margin %d", o.dtype, o.fp8_recipe,
           o.amax_history, o.fp8_margin);
    expect(o.batch_size == 4 && o.seq_len == 0 && o.total_batch_size == 0 && o.steps == 1000,
           "default batch/steps");
    expect(o.lr == 3e-4f && o.lr_schedule == LR_COSINE && o.warmup_steps == 0 && o.final_lr_frac == 0.0f,
           "default schedule: lr %g schedule %d warmup %d final %g", o.lr, o.lr_schedule, o.warmup_steps,
           o.final_lr_frac);
    expect(o.beta1 == 0.9f && o.beta2 == 0.95f && o.eps == 1e-8f && o.weight_decay == 0.1f &&
               o.grad_clip == 1.0f,
           "default AdamW settings");
    expect(o.val_every == 100 && o.val_batches == 20 && o.sample_every == 0 && o.ckpt_every == 0 &&
               o.resume == 0 && o.seed == 1337 && o.shuffle == 0,
           "default loop settings");

    // both spellings, choices by name, '=' inside a value, an empty value
    parse(&o, 14, "--lr=0.01", "--dtype=bfloat16", "--fp8_recipe", "current", "--model_size=d4",
          "--train_data=dir/a=b_*.bin", "--val_data=", "--batch_size=16", "--lr_schedule", "linear",
          "--eps=1e-30", "--seed", "0", "--final_lr_frac=1");
    expect(o.lr == 0.01f, "--lr=0.01 gave %g", o.lr);
    expect(o.batch_size == 16, "--batch_size=16 gave %d", o.batch_size);
    expect(o.dtype == DTYPE_BFLOAT16 && o.fp8_recipe == FP8_RECIPE_CURRENT && o.lr_schedule == LR_LINEAR,
           "choices: dtype %d recipe %d schedule %d", o.dtype, o.fp8_recipe, o.lr_schedule);
    expect(strcmp(o.model_size, "d4") == 0, "--model_size=d4 gave '%s'", o.model_size);
    expect(strcmp(o.train_data, "dir/a=b_*.bin") == 0, "--train_data with '=' in the value gave '%s'",
           o.train_data);
    expect(o.val_data[0] == '\0', "--val_data= (empty) gave '%s'", o.val_data);
    expect(o.eps == 1e-30f && o.seed == 0 && o.final_lr_frac == 1.0f,
           "range ends accepted: eps %g seed %d frac %g", o.eps, o.seed, o.final_lr_frac);
    parse(&o, 6, "--lr", "10", "--amax_history", "1024", "--seed", "2147483647");
    expect(o.lr == 10.0f && o.amax_history == 1024 && o.seed == 2147483647, "upper range ends accepted");

    expect_parse_error("--lr", "10.5", "--lr");
    expect_parse_error("--lr", "-1", "--lr");
    expect_parse_error("--lr", "nan", "--lr");
    expect_parse_error("--lr", "0.1x", "--lr");
    expect_parse_error("--amax_history", "1025", "--amax_history");
    expect_parse_error("--amax_history", "0", "--amax_history");
    expect_parse_error("--batch_size", "2147483648", "--batch_size");
    expect_parse_error("--steps", "1e3", "--steps");
    expect_parse_error("--steps", "", "--steps");
    expect_parse_error("--seed", "-1", "--seed");
    expect_parse_error("--dtype", "float16", "--dtype");
    expect_parse_error("--dtype", "float", "--dtype"); // a prefix of a choice is not that choice
    expect_parse_error("--resume", "2", "--resume");
    expect_parse_error("--batch_size", NULL, "--batch_size");
    expect_parse_error("--no_such_flag", "1", "no_such_flag");
    expect_parse_error("--lrx=1", NULL, "--lrx"); // a flag whose name extends a real one
    expect_parse_error("lr", "1", "lr");
    expect_parse_error("--lr", "1e-320", "--lr: 1e-320 is too small for a float");
    expect_parse_error("--lr", "1e-400", "--lr: 1e-400 is"); // below a double: ERANGE, never "not a number"
    Args twice = {4, {"train_cpu", "--batch_size", "8", "--batch_size=16", NULL}};
    expect_error(parse_args_fn, &twice, "--batch_size: given twice ('8' and '16')", "a flag given twice");
    // a bare invocation: the short usage on stdout, exit status 2, not a 124M run
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        in_child = 1;
        if (!freopen("/dev/null", "w", stdout)) _exit(3);
        Args bare = {1, {"train_cpu", NULL}};
        parse_args_fn(&bare);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    expect(WIFEXITED(status) && WEXITSTATUS(status) == 2,
           "a bare invocation exits with the usage (status %d)", status);
}

// ----------------------------------------------------------------------------------------------------
// learning_rate

static void test_learning_rate(void) {
    // lr 1e-3, 10 warmup steps, 111 steps; llm.c's get_lr (train_gpt2.py, in double; llmc/schedulers.h the
    // same in float): decay progress (step - 10) / (111 - 10), which reaches 1 at step 111, one past the last
    const double lr = 1e-3, frac = 0.1, min_lr = lr * frac;
    const int warmup = 10, steps = 111;
    // Tolerance: learning_rate is ~8 float32 operations on values of size <= lr (each rounding <= 2^-24
    // relative), cosf within 1 ulp, and its argument rounded to float (relative 2^-24 of an argument <= pi,
    // which moves cos by <= 2^-24 * pi): <= 12 * 2^-24 * lr = 7e-7 lr; we allow 1e-6 * lr.
    const double tol = 1e-6 * lr;
    const char *names[] = {"cosine", "linear", "constant"};
    for (int schedule = 0; schedule < 3; schedule++) {
        TrainOptions o;
        parse(&o, 0);
        o.lr = (float)lr;
        o.final_lr_frac = (float)frac;
        o.warmup_steps = warmup;
        o.steps = steps;
        o.lr_schedule = schedule;
        int probe[] = {0, 4, 9, 10, 35, 60, 85, 109, 110};
        for (size_t k = 0; k < sizeof(probe) / sizeof(probe[0]); k++) {
            int s = probe[k];
            double expected;
            if (s < warmup)
                expected = lr * (s + 1) / warmup;
            else {
                double decay_ratio = (double)(s - warmup) / (steps - warmup);
                if (schedule == LR_CONSTANT)
                    expected = lr;
                else if (schedule == LR_LINEAR)
                    expected = lr - decay_ratio * (lr - min_lr);
                else
                    expected = min_lr + 0.5 * (1.0 + cos(M_PI * decay_ratio)) * (lr - min_lr);
            }
            double got = learning_rate(&o, s);
            expect(fabs(got - expected) <= tol, "%s step %d: lr %.9g, expected %.9g", names[schedule], s, got,
                   expected);
        }
        // the schedule never rises after warmup and never leaves [min_lr, lr]
        double prev = INFINITY;
        int monotone = 1, in_range = 1;
        for (int s = warmup; s < steps; s++) {
            double v = learning_rate(&o, s);
            monotone &= v <= prev;
            in_range &= v >= min_lr - tol && v <= lr + tol;
            prev = v;
        }
        expect(monotone && in_range, "%s: not monotone (%d) or out of [min_lr, lr] (%d)", names[schedule],
               monotone, in_range);
    }
    // the tolerance tells llm.c's progress from one that ends at the last step, (step - 10) / 100: at step 60
    // cosine's two differ by 20 x tol
    double llmc = min_lr + 0.5 * (1.0 + cos(M_PI * 50.0 / 101.0)) * (lr - min_lr),
           at_last = min_lr + 0.5 * (1.0 + cos(M_PI * 50.0 / 100.0)) * (lr - min_lr);
    expect(fabs(llmc - at_last) > 10 * tol,
           "llm.c's and an end-at-last-step cosine differ by %.2g at step 60", fabs(llmc - at_last));
    // no warmup: the first step is at full lr, the last one step short of the end: lr (1 + cos(49/50 pi)) / 2
    TrainOptions o;
    parse(&o, 0);
    o.lr = 2e-3f;
    o.steps = 50;
    expect(fabs(learning_rate(&o, 0) - 2e-3) <= 2e-9, "no warmup: step 0 lr %g", learning_rate(&o, 0));
    double last = 2e-3 * 0.5 * (1.0 + cos(M_PI * 49.0 / 50.0));
    expect(fabs(learning_rate(&o, 49) - last) <= 1e-6 * 2e-3,
           "no warmup, final_lr_frac 0: last step lr %g, not %g", learning_rate(&o, 49), last);
    o.warmup_steps = 5;
    o.steps = 6;
    expect(fabs(learning_rate(&o, 5) - 2e-3) <= 2e-9, "single decay step: lr %g", learning_rate(&o, 5));
}

// ----------------------------------------------------------------------------------------------------
// parameter layout

static GPTConfig make_config(int L, int C, int NH, int V, int maxT) {
    GPTConfig c = {0};
    c.num_layers = L;
    c.channels = C;
    c.num_heads = NH;
    c.vocab_size = V;
    c.padded_vocab_size = pad_vocab(V);
    c.max_seq_len = maxT;
    return c;
}

typedef struct {
    size_t offset, size;
    int tensor, layer;
} Slice;

static int compare_slices(const void *a, const void *b) {
    const Slice *x = (const Slice *)a, *y = (const Slice *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

// llm.c's shape of tensor t for one layer (rows x cols), written out independently of gpt_model.h's sizes:
// GPT-2's 16 tensors, Llama's 10 (llm.c's Llama 3 file; in memory wte and lmhead have Vp rows), 0 for the
// tensors an architecture does not have.
static size_t llmc_tensor_elems(const GPTConfig *c, int t) {
    size_t C = (size_t)c->channels, Vp = (size_t)c->padded_vocab_size;
    if (c->arch == ARCH_LLAMA) {
        size_t hs = C / (size_t)c->num_heads, F = (size_t)c->ffn_dim;
        switch (t) {
        case PT_TOKEN_EMBED:
        case PT_LM_HEAD:
            return Vp * C;
        case PT_ATTN_NORM_W:
        case PT_MLP_NORM_W:
        case PT_FINAL_NORM_W:
            return C;
        case PT_QKV_W:
            return ((size_t)c->num_heads + 2 * (size_t)c->num_kv_heads) * hs * C; // q, k, v heads (QKV, C)
        case PT_ATTN_OUT_W:
            return C * C;
        case PT_MLP_UP_W:
        case PT_MLP_GATE_W:
            return F * C; // up, gate (F, C)
        case PT_MLP_DOWN_W:
            return C * F; // down (C, F)
        default:
            return 0; // no wpe, no biases
        }
    }
    switch (t) {
    case PT_TOKEN_EMBED:
        return Vp * C; // wte (Vp, C)
    case PT_POS_EMBED:
        return (size_t)c->max_seq_len * C; // wpe (maxT, C)
    case PT_QKV_W:
        return 3 * C * C; // qkvw (3C, C)
    case PT_QKV_B:
        return 3 * C; // qkvb (3C)
    case PT_ATTN_OUT_W:
        return C * C; // attprojw (C, C)
    case PT_MLP_UP_W:
        return 4 * C * C; // fcw (4C, C)
    case PT_MLP_UP_B:
        return 4 * C; // fcb
    case PT_MLP_DOWN_W:
        return 4 * C * C; // fcprojw (C, 4C)
    case PT_MLP_GATE_W:
    case PT_LM_HEAD:
        return 0; // Llama's
    default:
        return C; // the LayerNorm weights and biases, attprojb, fcprojb
    }
}

static GPTConfig make_llama_config(int L, int C, int NH, int KVH, int F, int V, int maxT) {
    GPTConfig c = make_config(L, C, NH, V, maxT);
    c.arch = ARCH_LLAMA;
    c.num_kv_heads = KVH;
    c.ffn_dim = F;
    c.rope_theta = 10000.0f;
    return c;
}

static void test_layout(void) {
    // GPT-2 124M with llm.c's padded vocabulary Vp = 50304: 12 L C^2 (qkvw 3C^2 + attprojw C^2 + fcw 4C^2 +
    // fcprojw 4C^2) + 13 L C (qkvb 3C + attprojb C + fcb 4C + fcprojb C + 4 LayerNorm vectors C) + Vp C +
    // maxT C + 2 C (lnf) = 84,934,656 + 119,808 + 38,633,472 + 786,432 + 1,536 = 124,475,904.
    GPTConfig gpt2 = make_config(12, 768, 12, 50257, 1024);
    expect(gpt2.padded_vocab_size == 50304, "pad_vocab(50257) = %d", gpt2.padded_vocab_size);
    size_t formula = 12 * 12 * 768 * 768 + 13 * 12 * 768 + (size_t)50304 * 768 + 1024 * 768 + 2 * 768;
    expect(formula == 124475904, "the 124M formula gives %zu", formula);
    expect(param_count(&gpt2) == 124475904, "param_count(124M) = %zu, expected 124,475,904",
           param_count(&gpt2));
    expect(pad_vocab(256) == 256 && pad_vocab(257) == 384 && pad_vocab(2) == 128 && pad_vocab(128) == 128,
           "pad_vocab rounds up to 128");

    GPTConfig configs[] = {gpt2,
                           make_config(2, 64, 4, 256, 256),
                           make_config(3, 48, 3, 1000, 24),
                           make_config(1, 8, 1, 2, 5),
                           make_llama_config(2, 64, 4, 2, 176, 256, 256),
                           make_llama_config(3, 48, 6, 1, 128, 1000, 24)};
    for (size_t ci = 0; ci < sizeof(configs) / sizeof(configs[0]); ci++) {
        GPTConfig *c = &configs[ci];
        Slice slices[NUM_PARAM_TENSORS * 12];
        int n = 0;
        size_t sum_llmc = 0;
        int sizes_ok = 1;
        for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
            int layers = param_is_per_layer(t) ? c->num_layers : 1;
            for (int l = 0; l < layers; l++) {
                sizes_ok &= param_tensor_size(c, t) == llmc_tensor_elems(c, t);
                sum_llmc += llmc_tensor_elems(c, t);
                if (!llmc_tensor_elems(c, t)) continue; // not in this architecture
                slices[n++] = (Slice){param_offset(c, t, l), param_tensor_size(c, t), t, l};
            }
        }
        expect(sizes_ok, "config %zu: a tensor size differs from llm.c's shape", ci);
        expect(sum_llmc == param_count(c), "config %zu: param_count %zu, llm.c shapes sum to %zu", ci,
               param_count(c), sum_llmc);
        qsort(slices, (size_t)n, sizeof(Slice), compare_slices);
        size_t next = 0;
        int tiles = 1;
        for (int i = 0; i < n; i++) {
            if (slices[i].offset != next) {
                tiles = 0;
                printf("  config %zu: tensor %d layer %d at %zu, expected %zu\n", ci, slices[i].tensor,
                       slices[i].layer, slices[i].offset, next);
            }
            next = slices[i].offset + slices[i].size;
        }
        expect(tiles && next == param_count(c), "config %zu: slices do not tile [0, %zu) (end %zu)", ci,
               param_count(c), next);
        // one layer's tensors together, layers in order, after the global tensors
        int grouped = 1;
        size_t layer_size = 0;
        for (int t = PT_ATTN_NORM_W; t <= PT_MLP_DOWN_B; t++) layer_size += llmc_tensor_elems(c, t);
        size_t global = param_count(c) - (size_t)c->num_layers * layer_size;
        for (int t = PT_ATTN_NORM_W; t <= PT_MLP_DOWN_B; t++)
            for (int l = 0; l < c->num_layers; l++) {
                size_t o = param_offset(c, t, l);
                grouped &= o >= global + l * layer_size &&
                           o + param_tensor_size(c, t) <= global + (l + 1) * layer_size;
            }
        expect(grouped, "config %zu: a layer's tensors are not within its block", ci);
    }
}

// ----------------------------------------------------------------------------------------------------
// presets, sequence length, accumulation

static void config_fn(void *p) {
    config_from_options((TrainOptions *)p);
}

typedef struct {
    TrainOptions opts;
    GPTConfig cfg;
    int T, world;
} ResolveArgs;

static void seq_len_fn(void *p) {
    ResolveArgs *a = (ResolveArgs *)p;
    resolve_seq_len(&a->opts, &a->cfg);
}

static void accum_fn(void *p) {
    ResolveArgs *a = (ResolveArgs *)p;
    resolve_grad_accum_steps(&a->opts, a->T, a->world);
}

// config_from_options of o is a Llama model with these L, C, NH, KVH and F.
static void expect_llama_config(const TrainOptions *o, int L, int C, int NH, int KVH, int F) {
    GPTConfig c = config_from_options(o);
    expect(c.arch == ARCH_LLAMA && c.num_layers == L && c.channels == C && c.num_heads == NH &&
               c.num_kv_heads == KVH && c.ffn_dim == F && c.rope_theta == 10000.0f,
           "llama config: L %d C %d NH %d KVH %d F %d theta %g (expected L %d C %d NH %d KVH %d F %d)",
           c.num_layers, c.channels, c.num_heads, c.num_kv_heads, c.ffn_dim, c.rope_theta, L, C, NH, KVH, F);
}

static void test_config(void) {
    // GPT-2 sizes (Radford et al. 2019: layers, width, heads; context 1024) and the large widths of DESIGN.md
    struct {
        const char *name;
        int L, C, NH, maxT;
    } expected[] = {{"124M", 12, 768, 12, 1024},    {"350M", 24, 1024, 16, 1024},
                    {"774M", 36, 1280, 20, 1024},   {"1.5B", 48, 1600, 25, 1024},
                    {"gpt-7B", 32, 4096, 32, 2048}, {"gpt-13B", 40, 5120, 40, 2048},
                    {"gpt-70B", 80, 8192, 64, 2048}};
    for (size_t i = 0; i < sizeof(expected) / sizeof(expected[0]); i++) {
        TrainOptions o;
        parse(&o, 2, "--model_size", expected[i].name);
        GPTConfig c = config_from_options(&o);
        expect(c.num_layers == expected[i].L && c.channels == expected[i].C &&
                   c.num_heads == expected[i].NH && c.max_seq_len == expected[i].maxT &&
                   c.vocab_size == 50257 && c.padded_vocab_size == 50304,
               "preset %s: L %d C %d NH %d maxT %d V %d Vp %d", expected[i].name, c.num_layers, c.channels,
               c.num_heads, c.max_seq_len, c.vocab_size, c.padded_vocab_size);
    }
    const char *tiny[] = {"d2", "d4", "d6"};
    int tiny_layers[] = {2, 4, 6};
    for (int i = 0; i < 3; i++) {
        TrainOptions o;
        parse(&o, 4, "--model_size", tiny[i], "--vocab", "256");
        GPTConfig c = config_from_options(&o);
        expect(c.num_layers == tiny_layers[i] && c.channels % c.num_heads == 0 && c.vocab_size == 256 &&
                   c.padded_vocab_size == 256 && c.max_seq_len >= 64,
               "preset %s: L %d C %d NH %d maxT %d", tiny[i], c.num_layers, c.channels, c.num_heads,
               c.max_seq_len);
    }
    // Llama 2 (Touvron et al. 2023), Llama 3 and 3.1 (Dubey et al. 2024) shapes: layers, width, heads,
    // key/value heads, FFN, vocabulary, context, rope theta, 3.1's scaled wavelengths; and the parameter
    // counts their model cards give for 7B and 8B (6,738,415,616 and 8,030,261,248; 3.1 8B has 3 8B's
    // shape), which the untied head, RMSNorm and GQA all enter.
    struct {
        const char *name;
        int L, C, NH, KVH, F, V, maxT;
        float theta;
        int scaled;
        size_t params;
    } llama[] = {{"llama2-7B", 32, 4096, 32, 32, 11008, 32000, 4096, 10000.0f, 0, 6738415616u},
                 {"llama2-13B", 40, 5120, 40, 40, 13824, 32000, 4096, 10000.0f, 0, 0},
                 {"llama2-70B", 80, 8192, 64, 8, 28672, 32000, 4096, 10000.0f, 0, 0},
                 {"llama3-8B", 32, 4096, 32, 8, 14336, 128256, 8192, 500000.0f, 0, 8030261248u},
                 {"llama3-70B", 80, 8192, 64, 8, 28672, 128256, 8192, 500000.0f, 0, 0},
                 {"llama3.1-8B", 32, 4096, 32, 8, 14336, 128256, 131072, 500000.0f, 1, 8030261248u},
                 {"llama3.1-70B", 80, 8192, 64, 8, 28672, 128256, 131072, 500000.0f, 1, 0}};
    for (size_t i = 0; i < sizeof(llama) / sizeof(llama[0]); i++) {
        TrainOptions o;
        parse(&o, 2, "--model_size", llama[i].name);
        GPTConfig c = config_from_options(&o);
        expect(c.arch == ARCH_LLAMA && c.num_layers == llama[i].L && c.channels == llama[i].C &&
                   c.num_heads == llama[i].NH && c.num_kv_heads == llama[i].KVH && c.ffn_dim == llama[i].F &&
                   c.vocab_size == llama[i].V && c.padded_vocab_size == llama[i].V &&
                   c.max_seq_len == llama[i].maxT && c.rope_theta == llama[i].theta &&
                   c.scaled_rope == llama[i].scaled &&
                   (!llama[i].params || param_count(&c) == llama[i].params),
               "preset %s: L %d C %d NH %d KVH %d F %d V %d maxT %d theta %g scaled %d, %zu parameters",
               llama[i].name, c.num_layers, c.channels, c.num_heads, c.num_kv_heads, c.ffn_dim, c.vocab_size,
               c.max_seq_len, c.rope_theta, c.scaled_rope, param_count(&c));
    }
    TrainOptions o;
    // 7B, 13B and 70B name LLaMA-2's models (as the same flags with llama2-), the GPT widths with --arch gpt2
    const char *sizes[] = {"7B", "13B", "70B"};
    for (int i = 0; i < 3; i++) {
        char llama_name[16], gpt_name[16];
        snprintf(llama_name, sizeof(llama_name), "llama2-%s", sizes[i]);
        snprintf(gpt_name, sizeof(gpt_name), "gpt-%s", sizes[i]);
        TrainOptions plain, as_llama, as_gpt, gpt;
        parse(&plain, 2, "--model_size", sizes[i]);
        parse(&as_llama, 2, "--model_size", llama_name);
        parse(&as_gpt, 4, "--model_size", sizes[i], "--arch", "gpt2");
        parse(&gpt, 2, "--model_size", gpt_name);
        GPTConfig a = config_from_options(&plain), b = config_from_options(&as_llama);
        GPTConfig g = config_from_options(&as_gpt), h = config_from_options(&gpt);
        expect(a.arch == ARCH_LLAMA && memcmp(&a, &b, sizeof(a)) == 0 && g.arch == ARCH_GPT2 &&
                   memcmp(&g, &h, sizeof(g)) == 0,
               "--model_size %s is %s; with --arch gpt2, %s", sizes[i], llama_name, gpt_name);
    }
    parse(&o, 4, "--model_size", "gpt-70B", "--arch", "llama");
    expect_error(config_fn, &o, "--arch", "a GPT-architecture preset with --arch llama");
    // the tiny presets in Llama's shape: --arch llama; --heads alone gives full heads, --channels the 8C/3
    // rule
    parse(&o, 6, "--model_size", "d4", "--arch", "llama", "--vocab", "256");
    expect_llama_config(&o, 4, 128, 4, 2, 384);
    parse(&o, 8, "--model_size", "d4", "--arch", "llama", "--heads", "8", "--channels", "96");
    expect_llama_config(&o, 4, 96, 8, 8, 256);
    parse(&o, 4, "--model_size", "llama2-7B", "--arch", "gpt2");
    expect_error(config_fn, &o, "--arch", "a llama preset with --arch gpt2");
    parse(&o, 4, "--model_size", "124M", "--arch", "llama");
    expect_error(config_fn, &o, "--arch", "a GPT-2 preset with --arch llama");
    parse(&o, 4, "--model_size", "d2", "--ffn_dim", "100");
    expect_error(config_fn, &o, "--ffn_dim", "--ffn_dim with GPT-2");
    parse(&o, 6, "--model_size", "d4", "--arch", "llama", "--kv_heads", "3");
    expect_error(config_fn, &o, "--kv_heads", "key/value heads that do not divide the heads");
    parse(&o, 12, "--model_size", "d6", "--layers", "3", "--channels", "48", "--heads", "3", "--max_seq_len",
          "40", "--vocab", "1000");
    GPTConfig c = config_from_options(&o);
    expect(c.num_layers == 3 && c.channels == 48 && c.num_heads == 3 && c.max_seq_len == 40 &&
               c.vocab_size == 1000 && c.padded_vocab_size == 1024,
           "overrides: L %d C %d NH %d maxT %d V %d Vp %d", c.num_layers, c.channels, c.num_heads,
           c.max_seq_len, c.vocab_size, c.padded_vocab_size);
    parse(&o, 4, "--model_size", "d2", "--heads", "3");
    expect_error(config_fn, &o, "--heads", "channels not divisible by heads");
    parse(&o, 2, "--model_size", "d3");
    expect_error(config_fn, &o, "--model_size", "unknown preset");

    ResolveArgs a;
    parse(&a.opts, 0);
    a.cfg = make_config(2, 64, 4, 256, 256);
    expect(resolve_seq_len(&a.opts, &a.cfg) == 256, "seq_len 0 -> maxT");
    parse(&a.opts, 2, "--seq_len", "256");
    expect(resolve_seq_len(&a.opts, &a.cfg) == 256, "seq_len = maxT accepted");
    parse(&a.opts, 2, "--seq_len", "257");
    expect_error(seq_len_fn, &a, "--seq_len", "seq_len > maxT");

    parse(&a.opts, 2, "--batch_size", "4");
    expect(resolve_grad_accum_steps(&a.opts, 64, 1) == 1, "total_batch_size 0 -> 1 micro-step");
    parse(&a.opts, 4, "--batch_size", "4", "--total_batch_size", "1024");
    expect(resolve_grad_accum_steps(&a.opts, 64, 1) == 4, "1024 tokens / (4*64) = 4 micro-steps");
    expect(resolve_grad_accum_steps(&a.opts, 64, 2) == 2, "1024 tokens / (4*64*2 ranks) = 2 micro-steps");
    expect(resolve_grad_accum_steps(&a.opts, 256, 1) == 1, "1024 tokens / (4*256) = 1 micro-step");
    a.T = 48;
    a.world = 1;
    expect_error(accum_fn, &a, "--total_batch_size", "total_batch_size not a multiple of B*T");
    a.T = 64;
    a.world = 8; // 4*64*8 = 2048 > 1024
    expect_error(accum_fn, &a, "--total_batch_size", "total_batch_size below B*T*world");
}

// ----------------------------------------------------------------------------------------------------
// model files

static void load_fn(void *p) {
    GPTConfig c;
    free(load_model_file((const char *)p, &c));
}

static void test_model_files(void) {
    GPTConfig c = make_config(3, 32, 4, 100, 24); // Vp 128
    size_t P = param_count(&c);
    float *params = (float *)malloc(P * sizeof(float));
    Rng rng;
    rng_seed(&rng, 5);
    for (size_t i = 0; i < P; i++) params[i] = counter_normal(5, i);
    char path[512];
    snprintf(path, sizeof(path), "%s/model.bin", tmpdir);
    save_model_file(path, params, &c);
    char tmp[600];
    temp_path(path, tmp, sizeof(tmp)); // this process's temp name
    expect(access(tmp, F_OK) != 0, "save_model_file left %s behind", tmp);

    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    expect(size == 1024 + 4 * (long)P, "model file size %ld, expected %ld", size, 1024 + 4 * (long)P);
    int header[256];
    float *file = (float *)malloc(P * sizeof(float));
    expect(fread(header, sizeof(int), 256, f) == 256 && fread(file, sizeof(float), P, f) == P,
           "read model file");
    fclose(f);
    int header_ok = header[0] == 20240326 && header[1] == 3 && header[2] == 24 && header[3] == 100 &&
                    header[4] == 3 && header[5] == 4 && header[6] == 32 && header[7] == 128;
    for (int i = 8; i < 256; i++) header_ok &= header[i] == 0;
    expect(header_ok, "model header: %d %d maxT %d V %d L %d NH %d C %d Vp %d", header[0], header[1],
           header[2], header[3], header[4], header[5], header[6], header[7]);
    // llm.c order: tensor k of the file is the concatenation over layers of our slices of tensor k
    size_t at = 0;
    int order_ok = 1;
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        int layers = param_is_per_layer(t) ? c.num_layers : 1;
        for (int l = 0; l < layers; l++) {
            size_t n = llmc_tensor_elems(&c, t);
            if (memcmp(file + at, params + param_offset(&c, t, l), n * sizeof(float)) != 0) {
                order_ok = 0;
                printf("  file tensor %d layer %d at element %zu differs from our slice\n", t, l, at);
            }
            at += n;
        }
    }
    expect(order_ok && at == P, "model file is not in llm.c order");
    // e.g. all layers' qkvw contiguous: right after wte, wpe, ln1w (L*C), ln1b (L*C)
    size_t qkv_at = (size_t)128 * 32 + 24 * 32 + 2 * 3 * 32;
    int qkv_ok = 1;
    for (int l = 0; l < 3; l++)
        qkv_ok &= memcmp(file + qkv_at + (size_t)l * 3 * 32 * 32, params + param_offset(&c, PT_QKV_W, l),
                         3 * 32 * 32 * sizeof(float)) == 0;
    expect(qkv_ok, "qkvw of the 3 layers is not contiguous at element %zu of the file", qkv_at);

    GPTConfig loaded;
    float *back = load_model_file(path, &loaded);
    expect(memcmp(&loaded, &c, sizeof(c)) == 0, "loaded config differs");
    expect(memcmp(back, params, P * sizeof(float)) == 0, "model round trip is not bit-exact");
    free(back);

    // ranges (what a ZeRO rank reads and writes): random ranges read back equal the parameters, and a file
    // written range by range, last range first, is byte-identical to save_model_file's
    float *range = (float *)malloc(P * sizeof(float));
    int ranges_ok = 1;
    for (int trial = 0; trial < 50; trial++) {
        size_t begin = rng_next(&rng) % P, count = 1 + rng_next(&rng) % (P - begin);
        load_model_range(path, &c, begin, count, range);
        ranges_ok &= memcmp(range, params + begin, count * sizeof(float)) == 0;
    }
    expect(ranges_ok, "load_model_range differs from the parameters");
    char ranged[512], ranged_tmp[600];
    snprintf(ranged, sizeof(ranged), "%s/ranged.bin", tmpdir);
    FILE *out = model_file_create(ranged, ranged_tmp, sizeof(ranged_tmp), &c);
    size_t piece = P / 7 + 1;
    for (size_t end = P; end > 0; end = end > piece ? end - piece : 0) {
        size_t begin = end > piece ? end - piece : 0;
        model_file_write_range(out, ranged_tmp, &c, begin, end - begin, params + begin);
    }
    atomic_commit(out, ranged_tmp, ranged);
    float *ranged_back = load_model_file(ranged, &loaded);
    expect(memcmp(ranged_back, params, P * sizeof(float)) == 0, "a model file written by ranges differs");
    free(ranged_back);
    free(range);

    // version 5: bf16 values, written here by hand in llm.c order
    uint16_t *bf = (uint16_t *)malloc(P * sizeof(uint16_t));
    float *expected = (float *)malloc(P * sizeof(float));
    at = 0;
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        int layers = param_is_per_layer(t) ? c.num_layers : 1;
        for (int l = 0; l < layers; l++) {
            size_t n = llmc_tensor_elems(&c, t);
            for (size_t i = 0; i < n; i++) {
                // a bf16 value from its bits: random sign and mantissa, exponent within [2^-20, 2^7]
                uint16_t bits = (uint16_t)(((rng_next(&rng) & 1) << 15) | ((107 + rng_next(&rng) % 28) << 7) |
                                           (rng_next(&rng) & 0x7F));
                bf[at + i] = bits;
                uint32_t u = (uint32_t)bits << 16;
                memcpy(&expected[param_offset(&c, t, l) + i], &u, sizeof(float));
            }
            at += n;
        }
    }
    char path5[512];
    snprintf(path5, sizeof(path5), "%s/model_bf16.bin", tmpdir);
    f = fopen(path5, "wb");
    header[1] = 5;
    fwrite(header, sizeof(int), 256, f);
    fwrite(bf, sizeof(uint16_t), P, f);
    fclose(f);
    back = load_model_file(path5, &loaded);
    expect(memcmp(&loaded, &c, sizeof(c)) == 0, "bf16 file: loaded config differs");
    expect(memcmp(back, expected, P * sizeof(float)) == 0,
           "bf16 model file does not load to the expected floats");
    free(back);
    // a version-5 header on an fp32-sized payload is refused (its size names the file)
    f = fopen(path5, "wb");
    fwrite(header, sizeof(int), 256, f);
    fwrite(params, sizeof(float), P, f);
    fclose(f);
    expect_error(load_fn, path5, path5, "version 5 header with fp32 payload");
    free(bf);
    free(expected);
    free(file);
    free(params);
}

// ----------------------------------------------------------------------------------------------------
// state files

typedef struct {
    const char *path;
    TrainState st;
    GPTConfig cfg;
} StateArgs;

static void load_state_fn(void *p) {
    StateArgs *a = (StateArgs *)p;
    float m[8], v[8], h[4], g[16];
    StateBlock blocks[NUM_STATE_BLOCKS] = {{m, 8}, {v, 8}, {h, 4}, {g, 16}};
    load_state_file(a->path, &a->st, &a->cfg, blocks);
}

static void test_state_files(void) {
    GPTConfig c = make_config(2, 16, 2, 64, 16);
    TrainState st = {0};
    st.step = 12;
    st.updates_applied = 11;
    st.skipped_steps = 1;
    st.train_position = (DataLoaderPosition){3, 0, 7};
    st.world_size = 1;
    st.dtype = DTYPE_FLOAT8;
    st.fp8_recipe = FP8_RECIPE_CURRENT;
    st.amax_history_len = 2;
    st.batch_size = 4;
    st.seq_len = 8;
    st.seed = 99;
    st.guard_count = 11;
    st.identity.lr = 3e-4f;
    st.identity.data_fingerprint = 0x123456789abcdef0ull;
    float m[8], v[8], h[4], g[16];
    for (int i = 0; i < 16; i++) g[i] = 0.125f * i + 2.0f;
    for (int i = 0; i < 8; i++) {
        m[i] = 0.5f * i - 1.0f;
        v[i] = 0.25f * i;
    }
    for (int i = 0; i < 4; i++) h[i] = 3.0f + i;
    char path[512];
    snprintf(path, sizeof(path), "%s/state.bin", tmpdir);
    StateBlock blocks[NUM_STATE_BLOCKS] = {{m, 8}, {v, 8}, {h, 4}, {g, 16}};
    save_state_file(path, &st, &c, blocks);
    TrainState back = st; // what the resuming run knows: its settings, not yet its position
    back.step = back.updates_applied = back.skipped_steps = 0;
    back.train_position = (DataLoaderPosition){0, 0, 0};
    back.guard_count = 0;
    float m2[8], v2[8], h2[4], g2[16];
    StateBlock blocks2[NUM_STATE_BLOCKS] = {{m2, 8}, {v2, 8}, {h2, 4}, {g2, 16}};
    load_state_file(path, &back, &c, blocks2);
    expect(back.step == 12 && back.updates_applied == 11 && back.skipped_steps == 1 &&
               back.train_position.epoch == 3 && back.train_position.shard_index == 0 &&
               back.train_position.batch_index == 7 && back.seed == 99 && back.guard_count == 11,
           "state round trip: step %ld updates %ld skipped %ld position (%ld %ld %ld)", (long)back.step,
           (long)back.updates_applied, (long)back.skipped_steps, (long)back.train_position.epoch,
           (long)back.train_position.shard_index, (long)back.train_position.batch_index);
    expect(memcmp(m, m2, sizeof(m)) == 0 && memcmp(v, v2, sizeof(v)) == 0 && memcmp(h, h2, sizeof(h)) == 0 &&
               memcmp(g, g2, sizeof(g)) == 0,
           "state round trip: moments, amax histories or guard window differ");
    StateArgs a = {path, st, c};
    a.st.dtype = DTYPE_BFLOAT16;
    expect_error(load_state_fn, &a, path, "state of another dtype");
    a.st = st;
    a.st.identity.lr = 1e-3f;
    expect_error(load_state_fn, &a, "checkpoint was written with --lr 0.0003 but this run has --lr 0.001",
                 "state of another learning rate");
    a.st = st;
    a.st.identity.data_fingerprint ^= 1;
    expect_error(load_state_fn, &a, "for other training data than this run's --train_data",
                 "state of other training data");
    a.st = st;
    a.st.batch_size = 8;
    expect_error(load_state_fn, &a, "batch_size", "state of another batch size");
    a.st = st;
    a.cfg.channels = 32;
    expect_error(load_state_fn, &a, "channels", "state of another model");
}

// ----------------------------------------------------------------------------------------------------
// re-sharding (load_training_state): moment i of the full vector is i + 1 (v: -(i + 1)), padding zero

#define RESHARD_GLOBAL_BATCH 12

static TrainState reshard_state(int world, int zero, int rank) {
    TrainState st;
    memset(&st, 0, sizeof(st));
    st.rank = rank;
    st.world_size = world;
    st.zero_stage = zero;
    st.dtype = DTYPE_FLOAT8;
    st.amax_history_len = 2;
    st.batch_size = RESHARD_GLOBAL_BATCH / world;
    st.seq_len = 8;
    st.seed = 5;
    return st;
}

// Visits the elements rank `rank` owns: offset in its shard buffer, offset in the full vector.
typedef void (*OwnedVisitor)(size_t at, size_t full, void *ctx);
static void visit_owned(const GPTConfig *c, int world, int zero, int rank, OwnedVisitor visit, void *ctx) {
    int ways = shard_ways(zero, world), r = ways == 1 ? 0 : rank;
    for (int u = 0; u < shard_num_units(c, zero); u++) {
        size_t start, size, offset = shard_offset(c, zero, world, u);
        shard_unit_range(c, zero, u, &start, &size);
        size_t first = start + (size_t)r * shard_chunk(size, ways);
        for (size_t k = 0; k < shard_owned(size, ways, r); k++) visit(offset + k, first + k, ctx);
    }
}

typedef struct {
    float *m, *v;
    char *owned; // marks the owned elements (the rest must be padding)
    int wrong;
} Moments;

static void set_moment(size_t at, size_t full, void *ctx) {
    Moments *mo = (Moments *)ctx;
    mo->m[at] = (float)(full + 1);
    mo->v[at] = 0.5f * (float)(full + 1); // a second moment is never negative
}

static void check_moment(size_t at, size_t full, void *ctx) {
    Moments *mo = (Moments *)ctx;
    mo->owned[at] = 1;
    mo->wrong += mo->m[at] != (float)(full + 1) || mo->v[at] != 0.5f * (float)(full + 1);
}

// The state files of checkpoint `step` in dir, as `world` processes with ZeRO `zero` write them.
static void write_reshard_checkpoint(const char *dir, long step, const GPTConfig *c, int world, int zero) {
    size_t S = shard_size(c, zero, world);
    float h[4] = {1, 2, 3, 4}, g[6] = {5, 6, 7, 8, 9, 10};
    Moments mo = {(float *)malloc(S * sizeof(float)), (float *)malloc(S * sizeof(float)), NULL, 0};
    for (int r = 0; r < world; r++) {
        memset(mo.m, 0, S * sizeof(float));
        memset(mo.v, 0, S * sizeof(float));
        visit_owned(c, world, zero, r, set_moment, &mo);
        TrainState st = reshard_state(world, zero, r);
        st.step = step;
        st.updates_applied = step - 1;
        st.skipped_steps = 1;
        st.guard_count = step - 1;
        st.train_position = (DataLoaderPosition){1, 0, 4};
        StateBlock blocks[NUM_STATE_BLOCKS] = {{mo.m, S}, {mo.v, S}, {h, 4}, {g, 6}};
        char path[CHECKPOINT_PATH_LEN];
        state_file_path(dir, step, r, path, sizeof(path));
        save_state_file(path, &st, c, blocks);
    }
    free(mo.m);
    free(mo.v);
}

typedef struct {
    const char *dir;
    long step;
    GPTConfig cfg;
    int world, zero, rank;
} ReshardArgs;

// Loads rank a->rank of the new layout; returns the number of wrong values (-1 with a message).
static int load_resharded(const ReshardArgs *a) {
    size_t S = shard_size(&a->cfg, a->zero, a->world);
    Moments mo = {(float *)malloc(S * sizeof(float)), (float *)malloc(S * sizeof(float)),
                  (char *)calloc(S, 1), 0};
    for (size_t i = 0; i < S; i++) mo.m[i] = mo.v[i] = 99.0f; // what the loader must overwrite
    float h[4], g[6];
    StateBlock blocks[NUM_STATE_BLOCKS] = {{mo.m, S}, {mo.v, S}, {h, 4}, {g, 6}};
    TrainState st = reshard_state(a->world, a->zero, a->rank);
    load_training_state(a->dir, a->step, &st, &a->cfg, blocks);
    visit_owned(&a->cfg, a->world, a->zero, a->rank, check_moment, &mo);
    for (size_t i = 0; i < S; i++) mo.wrong += !mo.owned[i] && (mo.m[i] != 0.0f || mo.v[i] != 0.0f);
    mo.wrong += st.step != a->step || st.updates_applied != a->step - 1 ||
                st.train_position.batch_index != 4 || h[3] != 4 || g[5] != 10;
    free(mo.m);
    free(mo.v);
    free(mo.owned);
    return mo.wrong;
}

static void load_resharded_fn(void *p) {
    load_resharded((const ReshardArgs *)p);
}

static void test_reshard(void) {
    // layers of 3280 and globals of 2336 elements: over 3 ways both units have padded chunks
    GPTConfig c = make_config(2, 16, 2, 64, 16);
    char dir[512], cmd[3 * CHECKPOINT_PATH_LEN];
    for (int old_zero = 1; old_zero <= 3; old_zero += 2) {
        snprintf(dir, sizeof(dir), "%s/reshard_z%d", tmpdir, old_zero);
        make_dir(dir);
        write_reshard_checkpoint(dir, 6, &c, 3, old_zero);
        for (int world = 1; world <= 4; world++) {
            for (int zero = 0; zero <= 3; zero += zero == 1 ? 2 : 1) {
                int wrong = 0;
                for (int rank = 0; rank < world; rank++) {
                    ReshardArgs a = {dir, 6, c, world, zero, rank};
                    wrong += load_resharded(&a);
                }
                expect(wrong == 0, "3 processes ZeRO-%d resumed by %d with ZeRO-%d: %d wrong values",
                       old_zero, world, zero, wrong);
            }
        }
    }
    // refusals, each on a copy of the ZeRO-3 checkpoint with one file replaced
    snprintf(dir, sizeof(dir), "%s/reshard_bad", tmpdir);
    char other[512], from[CHECKPOINT_PATH_LEN], to[CHECKPOINT_PATH_LEN];
    snprintf(other, sizeof(other), "%s/reshard_step3", tmpdir);
    make_dir(other);
    write_reshard_checkpoint(other, 3, &c, 3, 3);
    struct {
        const char *what,
            *copy_from; // copy_from: "other" (step 3's file of the same rank), "rank1", "missing"
        int replaced, world, rank;
        const char *needle;
    } cases[] = {
        {"rank 0 file of another step (re-sharded)", "other", 0, 2, 0,
         "state_00000006_00000.bin: checkpoint has step 3"},
        {"rank 0 file of another step (same layout)", "other", 0, 3, 1,
         "state_00000006_00000.bin: checkpoint has step 3"},
        {"rank 2 file of another step (same layout)", "other", 2, 3, 2,
         "state_00000006_00002.bin: checkpoint has step 3"},
        {"rank 2 file of another step (re-sharded)", "other", 2, 2, 1,
         "state_00000006_00002.bin: checkpoint has step 3"},
        {"rank 0 file holding rank 1's state", "rank1", 0, 2, 0,
         "state_00000006_00000.bin: checkpoint has rank 1"},
        {"missing rank 1 file (re-sharded)", "missing", 1, 2, 0,
         "state_00000006_00001.bin: no state file for rank 1: the checkpoint is incomplete"},
        {"missing rank 1 file (same layout)", "missing", 1, 3, 1,
         "state_00000006_00001.bin: no state file for rank 1: the checkpoint is incomplete"},
        {"a global batch 5 processes cannot split", "", -1, 5, 0, "does not split over 5 processes"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(cmd, sizeof(cmd), "rm -rf '%s' && cp -r '%s/reshard_z3' '%s'", dir, tmpdir, dir);
        if (system(cmd) != 0) expect(0, "%s: could not copy the checkpoint", cases[i].what);
        if (cases[i].replaced >= 0) {
            state_file_path(dir, 6, cases[i].replaced, to, sizeof(to));
            if (!strcmp(cases[i].copy_from, "missing")) {
                remove(to);
            } else {
                if (!strcmp(cases[i].copy_from, "other"))
                    state_file_path(other, 3, cases[i].replaced, from, sizeof(from));
                else
                    state_file_path(dir, 6, 1, from, sizeof(from));
                snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", from, to);
                if (system(cmd) != 0) expect(0, "%s: could not copy %s", cases[i].what, from);
            }
        }
        ReshardArgs a = {dir, 6, c, cases[i].world, 3, cases[i].rank};
        if (cases[i].world == 5) a.world = 5, a.zero = 1; // 12 rows over 5: reshard_state's batch is 2
        expect_error(load_resharded_fn, &a, cases[i].needle, cases[i].what);
    }
}

// llm.c's Llama 3 model file: the header's int and float sections, the tensors in its order with the
// vocabulary unpadded (the padding rows are not in the file and read back as zeros), F through llm.c's
// multiple_of / ffn_dim_multiplier formula.
static void test_llama_model_file(void) {
    // the published shapes through llm.c's formula: Llama 3 8B (1024, 1.3), 70B (4096, 1.3), Llama 2 7B (256)
    expect(llama_ffn_dim_from_header(4096, 1024, 1.3f) == 14336 &&
               llama_ffn_dim_from_header(8192, 4096, 1.3f) == 28672 &&
               llama_ffn_dim_from_header(4096, 256, 1.0f) == 11008,
           "llm.c's FFN formula: 8B %ld, 70B %ld, Llama 2 7B %ld",
           llama_ffn_dim_from_header(4096, 1024, 1.3f), llama_ffn_dim_from_header(8192, 4096, 1.3f),
           llama_ffn_dim_from_header(4096, 256, 1.0f));
    const int L = 2, C = 32, NH = 4, KVH = 2, F = 96, V = 100, Vp = 128, maxT = 24;
    GPTConfig c = make_llama_config(L, C, NH, KVH, F, V, maxT);
    size_t P = param_count(&c), padding = (size_t)(Vp - V) * C;
    float *params = (float *)malloc(P * sizeof(float));
    for (size_t i = 0; i < P; i++) params[i] = counter_normal(6, i);
    for (int t = PT_TOKEN_EMBED; t <= PT_LM_HEAD;
         t += PT_LM_HEAD - PT_TOKEN_EMBED) // the rows the file leaves out are zeros
        memset(params + param_offset(&c, t, 0) + (size_t)V * C, 0, padding * sizeof(float));
    char path[512];
    snprintf(path, sizeof(path), "%s/llama.bin", tmpdir);
    save_model_file(path, params, &c);
    // llm.c's train_llama3.cu layout, written out: GPT-2's 16 slots, the head in wpe's, zeros (-1) in the
    // biases' (one per output feature of the weight before them), each layer's fc slot its up then gate rows
    const size_t hs = (size_t)C / NH, QKV = (NH + 2 * KVH) * hs;
    const struct {
        int tensor, gate, per_layer;
        size_t elems;
    } slots[16] = {{PT_TOKEN_EMBED, 0, 0, (size_t)V * C},
                   {PT_LM_HEAD, 0, 0, (size_t)V * C},
                   {PT_ATTN_NORM_W, 0, 1, C},
                   {-1, 0, 1, C},
                   {PT_QKV_W, 0, 1, QKV * C},
                   {-1, 0, 1, QKV},
                   {PT_ATTN_OUT_W, 0, 1, (size_t)C * C},
                   {-1, 0, 1, C},
                   {PT_MLP_NORM_W, 0, 1, C},
                   {-1, 0, 1, C},
                   {PT_MLP_UP_W, 1, 1, (size_t)F * C},
                   {-1, 0, 1, 2 * (size_t)F},
                   {PT_MLP_DOWN_W, 0, 1, (size_t)C * F},
                   {-1, 0, 1, C},
                   {PT_FINAL_NORM_W, 0, 0, C},
                   {-1, 0, 0, C}};
    size_t file_floats = 0;
    for (int k = 0; k < 16; k++)
        file_floats += (slots[k].per_layer ? L : 1) * (slots[k].gate ? 2 : 1) * slots[k].elems;
    FILE *f = fopen(path, "rb");
    int header[256];
    float floats[256];
    float *file = (float *)malloc((file_floats + 1) * sizeof(float));
    expect(fread(header, sizeof(int), 256, f) == 256 && fread(floats, sizeof(float), 256, f) == 256 &&
               fread(file, sizeof(float), file_floats + 1, f) == file_floats,
           "Llama model file: 2048 header bytes and %zu floats", file_floats);
    fclose(f);
    int header_ok = header[0] == 20240803 && header[1] == 3 && header[2] == maxT && header[3] == V &&
                    header[4] == L && header[5] == NH && header[6] == KVH && header[7] == C &&
                    header[9] == 0 && header[10] == 3 && header[11] == 1 &&
                    llama_ffn_dim_from_header(C, header[8], floats[0]) == F && floats[1] == 1e-5f &&
                    floats[2] == 10000.0f;
    for (int i = 12; i < 256; i++) header_ok &= header[i] == 0 && floats[i - 9] == 0.0f;
    expect(header_ok,
           "Llama header: magic %d version %d maxT %d V %d L %d NH %d KVH %d C %d multiple_of %d "
           "multiplier %g eps %g theta %g",
           header[0], header[1], header[2], header[3], header[4], header[5], header[6], header[7], header[8],
           floats[0], floats[1], floats[2]);
    size_t at = 0;
    int order_ok = 1;
    for (int k = 0; k < 16; k++) {
        for (int l = 0; l < (slots[k].per_layer ? L : 1); l++) {
            for (int part = 0; part <= slots[k].gate; part++, at += slots[k].elems) {
                if (slots[k].tensor < 0) {
                    for (size_t i = 0; i < slots[k].elems; i++) order_ok &= file[at + i] == 0.0f;
                    continue;
                }
                int tensor = part ? PT_MLP_GATE_W : slots[k].tensor;
                order_ok &= memcmp(file + at, params + param_offset(&c, tensor, l),
                                   slots[k].elems * sizeof(float)) == 0;
            }
        }
    }
    expect(order_ok && at == file_floats, "Llama model file is not in llm.c's train_llama3.cu layout");
    GPTConfig loaded;
    float *back = load_model_file(path, &loaded);
    expect(memcmp(&loaded, &c, sizeof(c)) == 0, "loaded Llama config differs");
    expect(memcmp(back, params, P * sizeof(float)) == 0, "Llama model round trip is not bit-exact");
    float *range = (float *)malloc(P * sizeof(float));
    for (size_t i = 0; i < P; i++) range[i] = 1.0f; // the padding must come back as zeros, not as left here
    load_model_range(path, &c, 0, P, range);
    expect(memcmp(range, params, P * sizeof(float)) == 0, "load_model_range of a Llama file differs");
    // llm.c master's layout, written out: its int-only header (ffn_dim_multiplier 1.0 and norm_eps 1e-5 as
    // its writer truncates them, 1 and 0; F = 96 = 32 * ceil(int(8C/3) / 32) only through the file's size),
    // then wte, ln1w, qkvw, attprojw, ln2w, fcw (up), fcgatew, fcprojw, lnfw, lmhead: the same model loads
    const int master_order[] = {PT_TOKEN_EMBED, PT_ATTN_NORM_W, PT_QKV_W,      PT_ATTN_OUT_W,   PT_MLP_NORM_W,
                                PT_MLP_UP_W,    PT_MLP_GATE_W,  PT_MLP_DOWN_W, PT_FINAL_NORM_W, PT_LM_HEAD};
    char master[512];
    snprintf(master, sizeof(master), "%s/llama_master.bin", tmpdir);
    int master_header[256] = {20240803, 3, maxT, V, L, NH, KVH, C, 1, 32, 0, 10000, 0, 4, 3, 1};
    f = fopen(master, "wb");
    fwrite(master_header, sizeof(int), 256, f);
    for (int k = 0; k < 10; k++) {
        int t = master_order[k];
        size_t n = t == PT_TOKEN_EMBED || t == PT_LM_HEAD ? (size_t)V * C : param_tensor_size(&c, t);
        for (int l = 0; l < (param_is_per_layer(t) ? L : 1); l++)
            fwrite(params + param_offset(&c, t, l), sizeof(float), n, f);
    }
    fclose(f);
    GPTConfig from_master;
    float *master_params = load_model_file(master, &from_master);
    expect(memcmp(&from_master, &c, sizeof(c)) == 0 && memcmp(master_params, params, P * sizeof(float)) == 0,
           "llm.c master's Llama layout: config (F %d) or parameters differ from the model written",
           from_master.ffn_dim);
    free(master_params);
    // Llama 3.1's scaled wavelengths: llm.c's flag in header[9], read back into the configuration
    GPTConfig scaled = c;
    scaled.scaled_rope = 1;
    save_model_file(path, params, &scaled);
    f = fopen(path, "rb");
    expect(fread(header, sizeof(int), 256, f) == 256 && header[9] == 1,
           "scaled Llama header: use_scaled_rope %d", header[9]);
    fclose(f);
    free(back);
    back = load_model_file(path, &loaded);
    expect(memcmp(&loaded, &scaled, sizeof(scaled)) == 0, "loaded scaled Llama config: scaled_rope %d",
           loaded.scaled_rope);
    free(range);
    free(back);
    free(file);
    free(params);
}

// Llama 3.1's rotary wavelengths against Meta's rule, stated here in wavelengths (2 pi / frequency) rather
// than in gpt_model.h's turns per context: a pair whose wavelength is under 8192/4 positions keeps its
// angles bit for bit, one over 8192 turns 8 times slower, one between turns at a rate between those two;
// the rate is continuous at both edges. hs = 16 and theta 10000 put pairs 0-5 in the first band (wavelengths
// 6 to 1987), pair 6 between (6283) and pair 7 in the last (19869).
static void test_scaled_rope(void) {
    GPTConfig plain = make_llama_config(1, 64, 4, 2, 192, 256, 64), scaled = plain;
    scaled.scaled_rope = 1;
    const int pairs = 8, T = plain.max_seq_len;
    float *a = (float *)malloc((size_t)T * pairs * 2 * sizeof(float)),
          *b = (float *)malloc((size_t)T * pairs * 2 * sizeof(float));
    rope_table(a, &plain);
    rope_table(b, &scaled);
    const double two_pi = 2 * acos(-1.0);
    int ok = 1;
    for (int i = 0; i < pairs; i++) {
        double frequency = pow(10000.0, -2.0 * i / 16), wavelength = two_pi / frequency;
        double expected_low = frequency / 8, rate = llama31_rope_frequency(frequency);
        int band = wavelength < 8192.0 / 4 ? 0 : wavelength > 8192.0 ? 2 : 1;
        ok &= band == (i <= 5 ? 0 : i == 6 ? 1 : 2);
        for (int t = 0; t < T; t++) {
            const float *pa = a + ((size_t)t * pairs + i) * 2, *pb = b + ((size_t)t * pairs + i) * 2;
            if (band == 0) ok &= memcmp(pa, pb, 2 * sizeof(float)) == 0;
            if (band == 2)
                ok &= pb[0] == (float)cos(t * expected_low) && pb[1] == (float)sin(t * expected_low);
        }
        if (band == 1) ok &= rate > expected_low && rate < frequency;
        if (band == 1) ok &= b[((size_t)(T - 1) * pairs + i) * 2 + 1] == (float)sin((T - 1) * rate);
    }
    expect(ok, "scaled rope table: pairs 0-5 unchanged, pair 6 between f/8 and f, pair 7 at f/8");
    // continuity at the band edges: frequencies of wavelengths just inside and outside 2048 and 8192
    double edge_gap = 0;
    for (int k = 0; k < 2; k++) {
        double edge = two_pi / (k ? 8192.0 : 2048.0), inside = llama31_rope_frequency(edge * (1 + 1e-9)),
               outside = llama31_rope_frequency(edge * (1 - 1e-9));
        double gap = fabs(inside - outside) / edge;
        edge_gap = gap > edge_gap ? gap : edge_gap;
    }
    expect(edge_gap < 1e-8, "scaled rope frequencies jump by %.2e (relative) at a band edge", edge_gap);
    free(a);
    free(b);
}

int main(void) {
    atexit(report_unfinished);
    snprintf(tmpdir, sizeof(tmpdir), "%s", "/tmp/test_cli_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_parse_options();
    test_learning_rate();
    test_layout();
    test_config();
    test_model_files();
    test_llama_model_file();
    test_scaled_rope();
    test_state_files();
    test_reshard();
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) printf("warning: could not remove %s\n", tmpdir);
    finished = 1;
    return test_summary();
}

// dev/bench_kernels.cu: checks the layers' kernels (gpu/encoder.cuh, norms.cuh, activations.cuh,
// crossentropy.cuh, reductions.cuh), both attentions (gpu/attention.cuh) and AdamW
// (gpu/adamw.cuh) against the CPU reference trainer and times them; the FP8 casts that compute the LayerNorm,
// RMSNorm, GELU and SwiGLU outputs (and the GELU's and SwiGLU's backward) on the way against the kernels and
// the casts they replace, and the residual add fused with the LayerNorm after it against the two kernels.
//
// The reference is train_gpt.c itself, included below (its functions are static, so including it is how
// they are reached): the GPU is checked against the oracle the project trusts, not against a second copy of
// it. Only the bias-gradient loop, which is inline in train_gpt.c's linear_backward, is restated here.
// For each kernel family, at the GPT-2 124M shape (B=4, T=1024, C=768, NH=12, Vp=50304) and at small
// shapes picked for the edge cases (T and N not multiples of the row tiles, C and n not multiples of 8,
// V not a multiple of 8, head sizes 32, 64, 96 and 128), it draws random inputs with a fixed seed, rounds
// them to BF16, runs the CPU function and the GPU kernel on the same values, compares, checks that a second
// GPU run gives the same bits (determinism), and times the kernel (median of --reps runs, cudaEvents).
//
// clang-format off
// Build (from the repository root):
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Xcompiler -fopenmp -I. dev/bench_kernels.cu -o build/bench_kernels -lm
// clang-format on
// or: make -f dev/kernels.mk build/bench_kernels
// Run: build/bench_kernels [--small] [--reps N]. --small skips the 124M shape and the attention speed shapes;
// exit status 1 on a failure. In builds with cuDNN the fast attention is checked at every attention shape
// too, and the attention table times both at T = 1024 and 2048, head sizes 64 and 128 (TFLOP/s).
//
// Tolerances. BF16 keeps 8 significant bits: one rounding to nearest moves a value by at most half an ulp,
// 2^-8 relative; two roundings (CPU and GPU) of FP32 values that agree to FP32 precision land at most one
// ulp apart, 2^-7 relative. Hence:
//   exact    tol 0. Encoder forward and backward, residual: the same FP32 operations in the same order,
//            then one rounding, so not one bit may differ.
//   bf16     |gpu - cpu| <= 2^-7 |cpu| + 2^-12 rms(cpu). BF16 outputs of FP32 work that can differ from the
//            CPU in the last FP32 places (CUDA's expf/logf/tanhf against glibc's, sums in another order).
//            The absolute term covers results that are a small difference of larger terms (cancellation),
//            where an FP32-level difference is not small relative to the result: it is ~2^12 times the FP32
//            rounding of the terms and ~2^-12 of what a wrong index or formula produces.
//   sum      |gpu - cpu| <= 2^-16 (|cpu| + rms(cpu)). FP32 sums over rows in another order (LayerNorm
//            mean and rstd, dweight, dbias, bias gradients): reassociating n terms moves a sum by about
//            sqrt(n) 2^-24 of its partial sums (~2^-18 for n = 4096), while a missing or doubled row moves
//            a column by about rms / sqrt(n), far above.
//   loss     |gpu - cpu| <= 2^-12 (1 + |cpu|): the CPU's serial sum of V exponentials carries a relative
//            error of ~sqrt(V) 2^-24, which -log inherits as an absolute one; a wrong max or target is O(1).
//   lse      checked against a double-precision reference (the CPU keeps probabilities, not lse):
//            2^-16 (1 + |ref|), a few FP32 ulps of max + log(sum).
//   fast     the fast attention (cuDNN, --attention fast) against the CPU, as relative L2 distances
//            ||gpu - cpu|| / ||cpu|| over the whole tensor. It rounds the probabilities to BF16 before
//            they multiply V (and, in the backward, P and dS before their GEMMs): each is an independent
//            relative rounding of at most 2^-9 per term, so a sum of them is off by ~2^-9 of its own size
//            per rounding site; with the outputs' own roundings (both sides), out is within ~2^-8 and the
//            gradients (three sites) within ~2^-7.5. Bounds 2^-6 (out) and 2^-5 (dq, dk, dv): 4x headroom,
//            while a wrong mask, scale or layout is off by O(1). lse is FP32 on both sides: 2^-14 (1 + |ref|)
//            against the double reference (the exact kernels' 2^-16, with 4x for cuDNN's exp2
//            approximations).
//   norm     sqrt(out) against the CPU trainer's norm (a serial sum of squares in double, one float
//            rounding of the root): 2^-21 relative (the GPU rounds the square to a float first).

#define TRAIN_GPT_NO_MAIN
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function" // the trainer's own loop and I/O functions
#include "../train_gpt.c"
#pragma GCC diagnostic pop

#include <algorithm>
#include <array>
#include <vector>

#include "../gpu/activations.cuh"
#include "../gpu/adamw.cuh"
#include "../gpu/attention.cuh"
#include "../gpu/crossentropy.cuh"
#include "../gpu/encoder.cuh"
#include "../gpu/fp8_cast.cuh"
#include "../gpu/norms.cuh"
#include "../gpu/reductions.cuh"
#include "../gpu/step_params.cuh"

typedef std::vector<float> Vec;

// ---------------------------------------------------------------------------------------------------------
// Result tables

typedef struct {
    char family[16], shape[24], what[24];
    size_t n;
    double exact, max_abs, worst; // fraction of bit-identical elements; largest |err|; largest |err| / tol
    int ok;
} CheckRow;

typedef struct {
    char family[16], shape[24], what[24];
    float ms;
    double gbps;   // 0: not memory-bound, not reported
    double tflops; // 0: not compute-bound, not reported
} TimeRow;

static std::vector<CheckRow> g_checks;
static std::vector<TimeRow> g_times;
static const char *g_shape = "";
static int g_reps = 20;
static Rng g_rng;
static uint64_t g_normals; // counter of gpt_model.h's counter_normal draws

static void check(const char *family, const char *what, const float *gpu, const float *ref, size_t n,
                  double rtol, double atol) {
    size_t exact = 0;
    double max_abs = 0.0, worst = 0.0;
    int ok = 1;
    for (size_t i = 0; i < n; i++) {
        if (memcmp(&gpu[i], &ref[i], sizeof(float)) == 0) {
            exact++;
            continue;
        }
        const double err = fabs((double)gpu[i] - (double)ref[i]), tol = rtol * fabs((double)ref[i]) + atol;
        if (!(err <= tol)) ok = 0; // also a NaN on one side only
        if (err > max_abs || err != err) max_abs = err;
        const double ratio = tol > 0.0 ? err / tol : INFINITY;
        if (ratio > worst || ratio != ratio) worst = ratio;
    }
    CheckRow row;
    snprintf(row.family, sizeof row.family, "%s", family);
    snprintf(row.shape, sizeof row.shape, "%s", g_shape);
    snprintf(row.what, sizeof row.what, "%s", what);
    row.n = n;
    row.exact = n ? (double)exact / (double)n : 1.0;
    row.max_abs = max_abs;
    row.worst = worst;
    row.ok = ok;
    g_checks.push_back(row);
}

static double rms(const float *x, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return n ? sqrt(s / (double)n) : 0.0;
}

static void check_exact(const char *family, const char *what, const Vec &gpu, const Vec &ref) {
    check(family, what, gpu.data(), ref.data(), ref.size(), 0.0, 0.0);
}

static void check_bf16(const char *family, const char *what, const Vec &gpu, const Vec &ref) {
    check(family, what, gpu.data(), ref.data(), ref.size(), 0x1p-7, 0x1p-12 * rms(ref.data(), ref.size()));
}

static void check_sum(const char *family, const char *what, const Vec &gpu, const Vec &ref) {
    check(family, what, gpu.data(), ref.data(), ref.size(), 0x1p-16, 0x1p-16 * rms(ref.data(), ref.size()));
}

// ||gpu - ref|| / ||ref|| over the whole tensor within bound (the fast attention's check).
static void check_rel_l2(const char *family, const char *what, const Vec &gpu, const Vec &ref, double bound) {
    double diff = 0.0, norm = 0.0;
    size_t exact = 0;
    for (size_t i = 0; i < ref.size(); i++) {
        const double d = (double)gpu[i] - (double)ref[i];
        diff += d * d;
        norm += (double)ref[i] * ref[i];
        exact += memcmp(&gpu[i], &ref[i], sizeof(float)) == 0;
    }
    const double distance = norm > 0.0 ? sqrt(diff / norm) : sqrt(diff);
    CheckRow row;
    snprintf(row.family, sizeof row.family, "%s", family);
    snprintf(row.shape, sizeof row.shape, "%s", g_shape);
    snprintf(row.what, sizeof row.what, "%s (rel L2)", what);
    row.n = ref.size();
    row.exact = ref.empty() ? 1.0 : (double)exact / (double)ref.size();
    row.max_abs = distance;
    row.worst = distance / bound;
    row.ok = distance <= bound; // NaN fails
    g_checks.push_back(row);
}

// A second GPU run from the same inputs must reproduce the first bit for bit.
static void check_rerun(const char *family, const char *what, const Vec &first, const Vec &second) {
    char label[24];
    snprintf(label, sizeof label, "%s rerun", what);
    check(family, label, second.data(), first.data(), first.size(), 0.0, 0.0);
}

// Median time of g_reps launches; bytes: the DRAM traffic the kernel needs at least (0: not reported).
template <typename F>
static void time_kernel(const char *family, const char *what, double bytes, cudaStream_t stream, F launch) {
    cudaEvent_t start, stop;
    cuda_check(cudaEventCreate(&start));
    cuda_check(cudaEventCreate(&stop));
    std::vector<float> ms(g_reps);
    for (int r = 0; r < g_reps; r++) {
        cuda_check(cudaEventRecord(start, stream));
        launch();
        cuda_check(cudaEventRecord(stop, stream));
        cuda_check(cudaEventSynchronize(stop));
        cuda_check(cudaEventElapsedTime(&ms[r], start, stop));
    }
    cuda_check(cudaEventDestroy(start));
    cuda_check(cudaEventDestroy(stop));
    std::sort(ms.begin(), ms.end());
    TimeRow row;
    snprintf(row.family, sizeof row.family, "%s", family);
    snprintf(row.shape, sizeof row.shape, "%s", g_shape);
    snprintf(row.what, sizeof row.what, "%s", what);
    row.ms = ms[g_reps / 2];
    row.gbps = bytes > 0.0 && row.ms > 0.0f ? bytes / row.ms / 1e6 : 0.0;
    row.tflops = 0.0;
    g_times.push_back(row);
}

// time_kernel for a compute-bound launch of `flops` floating-point operations: reports TFLOP/s.
template <typename F>
static void time_flops(const char *family, const char *what, double flops, cudaStream_t stream, F launch) {
    time_kernel(family, what, 0.0, stream, launch);
    TimeRow &row = g_times.back();
    row.tflops = row.ms > 0.0f ? flops / row.ms / 1e9 : 0.0;
}

// ---------------------------------------------------------------------------------------------------------
// Host data and device buffers

static Vec randn(size_t n, float mean, float std, int round_bf16) {
    Vec v(n);
    for (size_t i = 0; i < n; i++) {
        v[i] = mean + std * counter_normal(20261201, g_normals++);
        if (round_bf16) v[i] = bf16_round(v[i]);
    }
    return v;
}

// Uniform in [lo, hi), BF16-rounded: cheaper than randn for the 200M logits of the 124M shape.
static Vec randu_bf16(size_t n, float lo, float hi) {
    Vec v(n);
    for (size_t i = 0; i < n; i++)
        v[i] = bf16_round(lo + (hi - lo) * (float)((rng_next(&g_rng) >> 40) * (1.0 / 16777216.0)));
    return v;
}

static int randint(int n) {
    return (int)(rng_next(&g_rng) % (uint64_t)n);
}

static std::vector<void *> g_allocs; // freed after each family

template <typename T> static T *dev_alloc(size_t n) {
    void *p = NULL;
    cuda_check(cudaMalloc(&p, (n ? n : 1) * sizeof(T)));
    g_allocs.push_back(p);
    return (T *)p;
}

static void dev_free_all(void) {
    for (void *p : g_allocs) cuda_check(cudaFree(p));
    g_allocs.clear();
}

static void to_dev(void *dst, const void *src, size_t bytes) {
    cuda_check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

static void to_host(void *dst, const void *src, size_t bytes) {
    cuda_check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

static void put_bf16(bf16 *dst, const Vec &x) {
    std::vector<uint16_t> bits(x.size());
    for (size_t i = 0; i < x.size(); i++) bits[i] = bf16_from_float(x[i]);
    to_dev(dst, bits.data(), bits.size() * sizeof(uint16_t));
}

static bf16 *new_bf16(const Vec &x) {
    bf16 *d = dev_alloc<bf16>(x.size());
    put_bf16(d, x);
    return d;
}

static Vec get_bf16(const bf16 *src, size_t n) {
    std::vector<uint16_t> bits(n);
    to_host(bits.data(), src, n * sizeof(uint16_t));
    Vec x(n);
    for (size_t i = 0; i < n; i++) x[i] = bf16_to_float(bits[i]);
    return x;
}

static float *new_f32(const Vec &x) {
    float *d = dev_alloc<float>(x.size());
    to_dev(d, x.data(), x.size() * sizeof(float));
    return d;
}

static Vec get_f32(const float *src, size_t n) {
    Vec x(n);
    to_host(x.data(), src, n * sizeof(float));
    return x;
}

static int *new_ints(const std::vector<int> &x) {
    int *d = dev_alloc<int>(x.size());
    to_dev(d, x.data(), x.size() * sizeof(int));
    return d;
}

// ---------------------------------------------------------------------------------------------------------
// Shapes

typedef struct {
    const char *name;
    int B, T, C, NH, V, Vp; // NH 0: no attention at this shape (C has no supported head size)
    int big;                // skipped by --small
} Shape;

static const Shape SHAPES[] = {
    {"124M B4 T1024", 4, 1024, 768, 12, 50257, 50304, 1},
    {"B3 T77 C96 hs32", 3, 77, 96, 3, 1000, 1024, 0},
    {"B2 T100 C256 hs128", 2, 100, 256, 2, 1003, 1008, 0},
    {"B1 T40 C192 hs96", 1, 40, 192, 2, 300, 304, 0},
    {"B2 T300 C128 hs64", 2, 300, 128, 2, 2000, 2048, 0},
    {"B2 T5 C100", 2, 5, 100, 0, 37, 40, 0}, // C % 8 != 0: the one-element paths
};

// ---------------------------------------------------------------------------------------------------------
// Encoder

static void bench_encoder(const Shape *s, cudaStream_t stream) {
    const int B = s->B, T = s->T, C = s->C, V = s->V, Vp = s->Vp, N = B * T;
    const size_t NC = (size_t)N * C;
    // Most rows draw from 17 tokens, so that buckets hold many rows (the ordering matters there).
    std::vector<int> tokens(N);
    for (int i = 0; i < N; i++) tokens[i] = randint(4) == 0 ? randint(V) : randint(17);
    Vec wte = randn((size_t)Vp * C, 0.0f, 1.0f, 1), wpe = randn((size_t)T * C, 0.0f, 1.0f, 1);

    Vec out(NC);
    encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C, DTYPE_BFLOAT16);
    int *d_tokens = new_ints(tokens);
    bf16 *d_wte = new_bf16(wte), *d_wpe = new_bf16(wpe), *d_out = dev_alloc<bf16>(NC);
    encoder_forward(d_out, d_tokens, d_wte, d_wpe, B, T, C, stream);
    cuda_check(cudaStreamSynchronize(stream));
    check_exact("encoder", "out", get_bf16(d_out, NC), out);
    time_kernel("encoder", "forward", 3.0 * NC * 2, stream,
                [&] { encoder_forward(d_out, d_tokens, d_wte, d_wpe, B, T, C, stream); });

    Vec dout = randn(NC, 0.0f, 1.0f, 1), dwte = randn((size_t)Vp * C, 0.0f, 1.0f, 0),
        dwpe = randn((size_t)T * C, 0.0f, 1.0f, 0);
    bf16 *d_dout = new_bf16(dout);
    float *d_dwte = new_f32(dwte), *d_dwpe = new_f32(dwpe);
    encoder_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
    std::vector<int> positions(N), starts(N + 1), bucket_tokens(N);
    int num_buckets = 0;
    encoder_buckets_host(tokens.data(), N, positions.data(), starts.data(), bucket_tokens.data(),
                         &num_buckets);
    int *d_positions = new_ints(positions), *d_starts = new_ints(starts),
        *d_bucket_tokens = new_ints(bucket_tokens);
    // The big shape launches N buckets, as a captured graph would; the small ones the exact count.
    const int launch_buckets = s->big ? N : num_buckets;
    float *scratch = dev_alloc<float>(encoder_backward_scratch_floats(B, T, C));
    auto backward = [&] {
        encoder_backward(d_dwte, d_dwpe, d_dout, d_tokens, d_positions, d_starts, d_bucket_tokens,
                         launch_buckets, B, T, C, scratch, stream);
    };
    backward();
    cuda_check(cudaStreamSynchronize(stream));
    check_exact("encoder", "dwte", get_f32(d_dwte, dwte.size()), dwte);
    check_exact("encoder", "dwpe", get_f32(d_dwpe, dwpe.size()), dwpe);
    time_kernel("encoder", "backward", 2.0 * NC * 2 + 8.0 * num_buckets * C + 8.0 * T * C, stream, backward);
    dev_free_all();
}

// ---------------------------------------------------------------------------------------------------------
// LayerNorm

static Vec get_codes(const fp8 *src, size_t n) {
    std::vector<uint8_t> codes(n);
    to_host(codes.data(), src, n);
    return Vec(codes.begin(), codes.end());
}

// An FP8 cast that computes its input on the way (load: the trainer's float8 steady state) against the cast
// of what the producing kernel stores: produce() runs the producer and returns its output, prepare() what
// the fused path runs first (the LayerNorm's statistics). The same device functions on the same values, so
// not one bit may differ: the codes in both layouts, the amax, the saturation and flush counts, and the
// column sums the cast adds up on the way (a bias gradient) against bias_backward's of the stored tensor.
// The scale 2^6 saturates the values above 7 (448 / 64) and flushes those below 2^-16. bytes: what the
// producer moves besides the cast's own read and writes, and what the fused path moves instead.
template <typename Produce, typename Prepare, typename Load>
static void check_cast_values(const char *family, int rows, int cols, Produce produce, Prepare prepare,
                              Load load, double separate_bytes, double fused_bytes, cudaStream_t stream) {
    const size_t n = (size_t)rows * cols;
    fp8 *q = dev_alloc<fp8>(4 * n);                 // separate, separate^T, fused, fused^T
    float *stats = new_f32(Vec{64.0f, 0.0f, 0.0f}); // the scale, then each path's amax
    float *bias = new_f32(Vec(2 * (size_t)cols, 0.0f)),
          *scratch = dev_alloc<float>(bias_backward_scratch_floats(rows, cols));
    unsigned long long *counts = dev_alloc<unsigned long long>(4);
    cuda_check(cudaMemset(counts, 0, 4 * sizeof(unsigned long long)));
    auto separate = [&](float *amax, unsigned long long *c, float *dbias) {
        const bf16 *x = produce();
        cast_transpose(q, q + n, amax, c, x, rows, cols, &stats[0], FP8_E4M3, stream);
        if (dbias) bias_backward(dbias, x, rows, cols, scratch, stream);
    };
    auto fused = [&](float *amax, unsigned long long *c, float *dbias) {
        prepare();
        cast_transpose_values(q + 2 * n, q + 3 * n, amax, c, dbias ? scratch : NULL, load, rows, cols,
                              &stats[0], FP8_E4M3, stream);
        if (dbias) bias_backward_from_partials(dbias, scratch, rows, cols, stream);
    };
    separate(&stats[1], counts, bias);
    fused(&stats[2], counts + 2, bias + cols);
    cuda_check(cudaStreamSynchronize(stream));
    check_exact(family, "codes", get_codes(q + 2 * n, n), get_codes(q, n));
    check_exact(family, "codes^T", get_codes(q + 3 * n, n), get_codes(q + n, n));
    std::vector<unsigned long long> c(4);
    to_host(c.data(), counts, sizeof(unsigned long long) * 4);
    const Vec st = get_f32(stats, 3);
    check_exact(family, "amax, counts", Vec{st[2], (float)c[2], (float)c[3]},
                Vec{st[1], (float)c[0], (float)c[1]});
    check_exact(family, "column sums", get_f32(bias + cols, cols), get_f32(bias, cols));
    time_kernel(family, "separate", separate_bytes + n * (2.0 + 2), stream,
                [&] { separate(NULL, NULL, NULL); });
    time_kernel(family, "fused", fused_bytes + n * 2.0, stream, [&] { fused(NULL, NULL, NULL); });
}

static void bench_layernorm(const Shape *s, cudaStream_t stream) {
    const int N = s->B * s->T, C = s->C;
    const size_t NC = (size_t)N * C;
    Vec inp = randn(NC, 0.3f, 1.5f, 1), weight = randn(C, 1.0f, 0.1f, 1), bias = randn(C, 0.0f, 0.1f, 1);

    Vec out(NC), mean(N), rstd(N);
    layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(), N, C,
                      DTYPE_BFLOAT16);
    bf16 *d_inp = new_bf16(inp), *d_weight = new_bf16(weight), *d_bias = new_bf16(bias),
         *d_out = dev_alloc<bf16>(NC);
    float *d_mean = dev_alloc<float>(N), *d_rstd = dev_alloc<float>(N);
    auto forward = [&] { layernorm_forward(d_out, d_mean, d_rstd, d_inp, d_weight, d_bias, N, C, stream); };
    forward();
    cuda_check(cudaStreamSynchronize(stream));
    const Vec g_out = get_bf16(d_out, NC);
    check_bf16("layernorm", "out", g_out, out);
    check_sum("layernorm", "mean", get_f32(d_mean, N), mean);
    check_sum("layernorm", "rstd", get_f32(d_rstd, N), rstd);
    time_kernel("layernorm", "forward", 2.0 * NC * 2, stream, forward);
    check_rerun("layernorm", "out", g_out, get_bf16(d_out, NC));
    // qkv's and fc's input: the statistics alone (out NULL), the cast computing the output from them
    float *d_mean2 = dev_alloc<float>(N), *d_rstd2 = dev_alloc<float>(N);
    check_cast_values(
        "layernorm cast", N, C,
        [&] {
            forward();
            return (const bf16 *)d_out;
        },
        [&] { layernorm_forward(NULL, d_mean2, d_rstd2, d_inp, d_weight, d_bias, N, C, stream); },
        LayerNormValues{d_inp, d_mean2, d_rstd2, d_weight, d_bias}, NC * 2.0 * 2, NC * 2.0, stream);
    check_exact("layernorm", "mean alone", get_f32(d_mean2, N), get_f32(d_mean, N));
    check_exact("layernorm", "rstd alone", get_f32(d_rstd2, N), get_f32(d_rstd, N));
    // fc's LayerNorm with the residual add before it: one pass against residual_forward then
    // layernorm_forward
    bf16 *d_add = new_bf16(randn(NC, 0.0f, 0.5f, 1)), *d_sum = dev_alloc<bf16>(NC),
         *d_sum2 = dev_alloc<bf16>(NC), *d_out2 = dev_alloc<bf16>(NC);
    auto separate = [&] {
        residual_forward(d_sum, d_inp, d_add, NC, stream);
        layernorm_forward(d_out, d_mean, d_rstd, d_sum, d_weight, d_bias, N, C, stream);
    };
    auto fused = [&] {
        residual_layernorm_forward(d_out2, d_mean2, d_rstd2, d_sum2, d_inp, d_add, d_weight, d_bias, N, C,
                                   stream);
    };
    separate();
    fused();
    cuda_check(cudaStreamSynchronize(stream));
    check_exact("residual+ln", "sum", get_bf16(d_sum2, NC), get_bf16(d_sum, NC));
    check_exact("residual+ln", "out", get_bf16(d_out2, NC), get_bf16(d_out, NC));
    check_exact("residual+ln", "mean", get_f32(d_mean2, N), get_f32(d_mean, N));
    check_exact("residual+ln", "rstd", get_f32(d_rstd2, N), get_f32(d_rstd, N));
    time_kernel("residual+ln", "separate", NC * 2.0 * 6, stream, separate);
    time_kernel("residual+ln", "fused", NC * 2.0 * 4, stream, fused);
    // Llama's qkv and fc inputs: the RMSNorm (fc's with the residual add before it) writing rstd alone, the
    // cast computing the output from the sum and rstd (bytes: the add's two reads and the sum's write on both
    // sides; the output's write, or the cast's read of the sum)
    check_cast_values(
        "rmsnorm cast", N, C,
        [&] {
            residual_rmsnorm_forward(d_out, d_rstd, d_sum, d_inp, d_add, d_weight, N, C, stream);
            return (const bf16 *)d_out;
        },
        [&] { residual_rmsnorm_forward(NULL, d_rstd2, d_sum2, d_inp, d_add, d_weight, N, C, stream); },
        RmsNormValues{d_sum2, d_rstd2, d_weight}, NC * 2.0 * 4, NC * 2.0 * 4, stream);
    check_exact("rmsnorm", "sum alone", get_bf16(d_sum2, NC), get_bf16(d_sum, NC));
    check_exact("rmsnorm", "rstd alone", get_f32(d_rstd2, N), get_f32(d_rstd, N));

    // The backward gets the CPU's mean and rstd, so that it is checked on its own.
    Vec dout = randn(NC, 0.0f, 0.1f, 1), dres0 = randn(NC, 0.0f, 0.1f, 1), dweight0 = randn(C, 0.0f, 1.0f, 0),
        dbias0 = randn(C, 0.0f, 1.0f, 0);
    Vec dres = dres0, dweight = dweight0, dbias = dbias0;
    layernorm_backward(dres.data(), dweight.data(), dbias.data(), dout.data(), inp.data(), weight.data(),
                       mean.data(), rstd.data(), N, C, DTYPE_BFLOAT16);
    bf16 *d_dout = new_bf16(dout), *d_dres = new_bf16(dres0);
    float *d_dweight = new_f32(dweight0), *d_dbias = new_f32(dbias0);
    to_dev(d_mean, mean.data(), N * sizeof(float));
    to_dev(d_rstd, rstd.data(), N * sizeof(float));
    float *scratch = dev_alloc<float>(layernorm_backward_scratch_floats(N, C));
    auto backward = [&] {
        layernorm_backward(d_dres, d_dweight, d_dbias, d_dout, d_inp, d_weight, d_mean, d_rstd, N, C, scratch,
                           stream);
    };
    backward();
    cuda_check(cudaStreamSynchronize(stream));
    const Vec g_dres = get_bf16(d_dres, NC), g_dweight = get_f32(d_dweight, C), g_dbias = get_f32(d_dbias, C);
    check_bf16("layernorm", "dresidual", g_dres, dres);
    check_sum("layernorm", "dweight", g_dweight, dweight);
    check_sum("layernorm", "dbias", g_dbias, dbias);
    put_bf16(d_dres, dres0);
    to_dev(d_dweight, dweight0.data(), C * sizeof(float));
    to_dev(d_dbias, dbias0.data(), C * sizeof(float));
    backward();
    cuda_check(cudaStreamSynchronize(stream));
    check_rerun("layernorm", "dresidual", g_dres, get_bf16(d_dres, NC));
    check_rerun("layernorm", "dweight", g_dweight, get_f32(d_dweight, C));
    check_rerun("layernorm", "dbias", g_dbias, get_f32(d_dbias, C));
    time_kernel("layernorm", "backward", 6.0 * NC * 2, stream, backward);
    dev_free_all();
}

// ---------------------------------------------------------------------------------------------------------
// Residual and GELU

static void bench_elementwise(const Shape *s, cudaStream_t stream) {
    const size_t NC = (size_t)s->B * s->T * s->C;
    const int odd = s->C % 8 != 0; // then also an element count that is not a multiple of 8
    const size_t n = NC - (odd ? 1 : 0), ng = 4 * NC - (odd ? 3 : 0);

    Vec a = randn(n, 0.0f, 1.0f, 1), b = randn(n, 0.0f, 1.0f, 1), out(n);
    residual_forward(out.data(), a.data(), b.data(), n, DTYPE_BFLOAT16);
    bf16 *d_a = new_bf16(a), *d_b = new_bf16(b), *d_out = dev_alloc<bf16>(n);
    residual_forward(d_out, d_a, d_b, n, stream);
    cuda_check(cudaStreamSynchronize(stream));
    check_exact("residual", "out", get_bf16(d_out, n), out);
    time_kernel("residual", "forward", 3.0 * n * 2, stream,
                [&] { residual_forward(d_out, d_a, d_b, n, stream); });

    Vec x = randn(ng, 0.0f, 2.0f, 1), y(ng);
    gelu_forward(y.data(), x.data(), ng, DTYPE_BFLOAT16);
    bf16 *d_x = new_bf16(x), *d_y = dev_alloc<bf16>(ng);
    gelu_forward(d_y, d_x, ng, stream);
    cuda_check(cudaStreamSynchronize(stream));
    check_bf16("gelu", "out", get_bf16(d_y, ng), y);
    time_kernel("gelu", "forward", 2.0 * ng * 2, stream, [&] { gelu_forward(d_y, d_x, ng, stream); });

    Vec dy = randn(ng, 0.0f, 1.0f, 1), dx = dy;
    gelu_backward(dx.data(), x.data(), ng, DTYPE_BFLOAT16);
    bf16 *d_d = new_bf16(dy);
    gelu_backward(d_d, d_x, ng, stream);
    cuda_check(cudaStreamSynchronize(stream));
    check_bf16("gelu", "dinp", get_bf16(d_d, ng), dx);
    // In place: later runs differentiate the previous result, the same work.
    time_kernel("gelu", "backward", 3.0 * ng * 2, stream, [&] { gelu_backward(d_d, d_x, ng, stream); });

    // fcproj's input: the cast computing the GELU of fc's output
    const int rows = s->B * s->T, cols = 4 * s->C;
    const size_t nf = (size_t)rows * cols;
    bf16 *d_pre = new_bf16(randn(nf, 0.0f, 2.0f, 1)), *d_gelu = dev_alloc<bf16>(nf);
    check_cast_values(
        "gelu cast", rows, cols,
        [&] {
            gelu_forward(d_gelu, d_pre, nf, stream);
            return (const bf16 *)d_gelu;
        },
        [] {}, GeluValues{d_pre}, nf * 2.0 * 2, nf * 2.0, stream);
    // fc's output gradient: the cast computing the GELU's backward from fcproj's input gradient and fc's
    // output
    bf16 *d_grad = new_bf16(randn(nf, 0.0f, 4.0f, 1)), *d_dgelu = dev_alloc<bf16>(nf);
    check_cast_values(
        "gelu bwd cast", rows, cols,
        [&] {
            cuda_check(cudaMemcpyAsync(d_dgelu, d_grad, nf * sizeof(bf16), cudaMemcpyDeviceToDevice, stream));
            gelu_backward(d_dgelu, d_pre, nf, stream);
            return (const bf16 *)d_dgelu;
        },
        [] {}, GeluBackwardValues{d_grad, d_pre}, nf * 2.0 * 4, nf * 2.0, stream);
    // Llama's fcproj input: the cast computing SwiGLU of fc's output (rows [up | gate], 2F wide; F = 3C is
    // not a multiple of 32 for C = 100); fc's output gradient: the cast computing SwiGLU's backward from
    // fcproj's input gradient (N,F) and fc's output
    const int F = 3 * s->C;
    const size_t nh = (size_t)rows * F;
    bf16 *d_fch = new_bf16(randn(2 * nh, 0.0f, 2.0f, 1)), *d_h = dev_alloc<bf16>(nh),
         *d_dh = new_bf16(randn(nh, 0.0f, 4.0f, 1)), *d_dfch = dev_alloc<bf16>(2 * nh);
    check_cast_values(
        "swiglu cast", rows, F,
        [&] {
            swiglu_forward(d_h, d_fch, rows, F, stream);
            return (const bf16 *)d_h;
        },
        [] {}, SwigluValues{d_fch, F}, nh * 2.0 * 3, nh * 2.0 * 2, stream);
    check_cast_values(
        "swiglu bwd cast", rows, 2 * F,
        [&] {
            swiglu_backward(d_dfch, d_dh, d_fch, rows, F, stream);
            return (const bf16 *)d_dfch;
        },
        [] {}, SwigluBackwardValues{d_dh, d_fch, F}, nh * 2.0 * 5, nh * 2.0 * 3, stream);
    dev_free_all();
}

// ---------------------------------------------------------------------------------------------------------
// Attention

// lse of every (b, h, t) in double from the CPU's own FP32 scores (same products, same order, same scale).
static Vec lse_reference(const Vec &qkv, int B, int T, int C, int NH) {
    const int hs = C / NH;
    const float scale = 1.0f / sqrtf((float)hs);
    Vec lse((size_t)B * NH * T);
#pragma omp parallel for collapse(3)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int t = 0; t < T; t++) {
                const float *q = &qkv[((size_t)b * T + t) * 3 * C + h * hs];
                std::vector<float> s(t + 1);
                float maxv = -INFINITY;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *k = &qkv[((size_t)b * T + t2) * 3 * C + C + h * hs];
                    float dot = 0.0f;
                    for (int i = 0; i < hs; i++) dot += q[i] * k[i];
                    s[t2] = dot * scale;
                    maxv = fmaxf(maxv, s[t2]);
                }
                double sum = 0.0;
                for (int t2 = 0; t2 <= t; t2++) sum += exp((double)s[t2] - maxv);
                lse[((size_t)b * NH + h) * T + t] = (float)(maxv + log(sum));
            }
        }
    }
    return lse;
}

// Columns [part * C, part * C + C) of every row of a (N, 3C) tensor.
static Vec qkv_part(const Vec &x, int N, int C, int part) {
    Vec y((size_t)N * C);
    for (int n = 0; n < N; n++)
        memcpy(&y[(size_t)n * C], &x[(size_t)n * 3 * C + (size_t)part * C], C * sizeof(float));
    return y;
}

// FLOPs of causal attention over (B, NH, T, HS): the forward's two GEMMs (QK^T, PV) of 2 T^2 HS each,
// halved by the mask; the backward's five (recomputed S, dV, dP, dQ, dK): 2.5 times the forward. The count
// FlashAttention's and cuDNN's benchmarks report.
static double attention_flops(int B, int NH, int T, int HS, int backward) {
    const double forward = 2.0 * 2.0 * B * NH * (double)T * T * HS / 2.0;
    return backward ? 2.5 * forward : forward;
}

// What the trainer's memory plan gives the fast attention at this shape (memory_plan.h): its workspace.
static AttentionMemory attention_memory(int B, int T, int NH) {
    const size_t bytes = attention_workspace_bytes(B, T, NH);
    return {dev_alloc<char>(bytes), bytes, NULL};
}

// The fast attention at a shape the exact kernels were just checked at, against the same CPU results.
static void bench_fast_attention(const Shape *s, cudaStream_t stream, const Vec &qkv, const Vec &dout,
                                 const Vec &out, const Vec &lse, const Vec &dqkv) {
    const int B = s->B, T = s->T, C = s->C, NH = s->NH, N = B * T;
    const size_t NC = (size_t)N * C, BHT = (size_t)B * NH * T;
    Attention fast;
    const AttentionMemory memory = attention_memory(B, T, NH);
    attention_setup(&fast, ATTENTION_AUTO, B, T, C, NH, NH, &memory);
    if (!fast.fast) {
        printf("  attention fast: not checked: %s\n", fast.description);
        return;
    }
    bf16 *d_qkv = new_bf16(qkv), *d_dout = new_bf16(dout), *d_out = dev_alloc<bf16>(NC),
         *d_dqkv = dev_alloc<bf16>(3 * NC);
    float *d_lse = dev_alloc<float>(BHT);
    auto forward = [&] { attention_forward(&fast, d_out, d_lse, d_qkv, B, T, C, NH, stream); };
    auto backward = [&] {
        attention_backward(&fast, d_dqkv, NULL, d_dout, d_qkv, d_out, d_lse, B, T, C, NH, stream);
    };
    forward();
    backward();
    cuda_check(cudaStreamSynchronize(stream));
    const Vec g_out = get_bf16(d_out, NC), g_lse = get_f32(d_lse, BHT), g_dqkv = get_bf16(d_dqkv, 3 * NC);
    check_rel_l2("attn fast", "out", g_out, out, 0x1p-6);
    check("attn fast", "lse (vs double)", g_lse.data(), lse.data(), BHT, 0x1p-14, 0x1p-14);
    static const char *const parts[3] = {"dq", "dk", "dv"};
    for (int p = 0; p < 3; p++)
        check_rel_l2("attn fast", parts[p], qkv_part(g_dqkv, N, C, p), qkv_part(dqkv, N, C, p), 0x1p-5);
    const int HS = C / NH;
    time_flops("attn fast", "forward", attention_flops(B, NH, T, HS, 0), stream, forward);
    time_flops("attn fast", "backward", attention_flops(B, NH, T, HS, 1), stream, backward);
    backward();
    cuda_check(cudaStreamSynchronize(stream));
    check_rerun("attn fast", "dqkv", g_dqkv, get_bf16(d_dqkv, 3 * NC)); // the deterministic backward
    attention_free(&fast);
}

static void bench_attention(const Shape *s, cudaStream_t stream) {
    if (s->NH == 0) return;
    const int B = s->B, T = s->T, C = s->C, NH = s->NH, N = B * T;
    const size_t NC = (size_t)N * C, BHT = (size_t)B * NH * T;
    Vec qkv = randn(3 * NC, 0.0f, 1.5f, 1);

    Vec out(NC), att(BHT * T);
    attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH, NH, DTYPE_BFLOAT16);
    bf16 *d_qkv = new_bf16(qkv), *d_out = dev_alloc<bf16>(NC);
    float *d_lse = dev_alloc<float>(BHT);
    auto forward = [&] { attention_exact_forward(d_out, d_lse, d_qkv, B, T, C, NH, NH, stream); };
    forward();
    cuda_check(cudaStreamSynchronize(stream));
    const Vec g_out = get_bf16(d_out, NC), g_lse = get_f32(d_lse, BHT), lse = lse_reference(qkv, B, T, C, NH);
    check_bf16("attention", "out", g_out, out);
    check("attention", "lse (vs double)", g_lse.data(), lse.data(), BHT, 0x1p-16, 0x1p-16);
    time_kernel("attention", "forward", 0.0, stream, forward);
    check_rerun("attention", "out", g_out, get_bf16(d_out, NC));
    check_rerun("attention", "lse", g_lse, get_f32(d_lse, BHT));

    Vec dout = randn(NC, 0.0f, 1.0f, 1), dqkv(3 * NC), att_row(BHT);
    attention_backward(dqkv.data(), att_row.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH, NH);
    round_to_storage(dqkv.data(), 3 * NC, DTYPE_BFLOAT16);
    bf16 *d_dout = new_bf16(dout), *d_dqkv = dev_alloc<bf16>(3 * NC);
    float *d_delta = dev_alloc<float>(BHT);
    auto backward = [&] {
        attention_exact_backward(d_dqkv, d_delta, d_dout, d_qkv, d_lse, B, T, C, NH, NH, stream);
    };
    backward();
    cuda_check(cudaStreamSynchronize(stream));
    const Vec g_dqkv = get_bf16(d_dqkv, 3 * NC);
    static const char *const parts[3] = {"dq", "dk", "dv"};
    for (int p = 0; p < 3; p++)
        check_bf16("attention", parts[p], qkv_part(g_dqkv, N, C, p), qkv_part(dqkv, N, C, p));
    time_kernel("attention", "backward", 0.0, stream, backward);
    check_rerun("attention", "dqkv", g_dqkv, get_bf16(d_dqkv, 3 * NC));
    bench_fast_attention(s, stream, qkv, dout, out, lse, dqkv);
    dev_free_all();
}

// Attention speed, exact against fast, at the shapes of the training runs (T 1024 and 2048, head sizes 64
// and 128, 8192 tokens of 768 or 1024 channels). The fast path is checked against the exact one here (the
// CPU would take minutes at these sizes) within the fast tolerances: the exact kernels agree with the CPU
// to BF16 rounding (checked above), well inside them.
static void bench_attention_speed(cudaStream_t stream) {
    static const struct {
        const char *name;
        int B, T, C, NH;
    } shapes[] = {{"T1024 hs64 B8 NH12", 8, 1024, 768, 12},
                  {"T2048 hs64 B4 NH12", 4, 2048, 768, 12},
                  {"T1024 hs128 B8 NH8", 8, 1024, 1024, 8},
                  {"T2048 hs128 B4 NH8", 4, 2048, 1024, 8}};
    for (const auto &shape : shapes) {
        const int B = shape.B, T = shape.T, C = shape.C, NH = shape.NH, HS = C / NH;
        const size_t NC = (size_t)B * T * C, BHT = (size_t)B * NH * T;
        g_shape = shape.name;
        printf("attention speed %s ...\n", shape.name);
        fflush(stdout);
        Attention exact, fast;
        const AttentionMemory memory = attention_memory(B, T, NH), none = {NULL, 0, NULL};
        attention_setup(&exact, ATTENTION_EXACT, B, T, C, NH, NH, &none);
        attention_setup(&fast, ATTENTION_AUTO, B, T, C, NH, NH, &memory);
        const Vec qkv = randn(3 * NC, 0.0f, 1.5f, 1), dout = randn(NC, 0.0f, 1.0f, 1);
        bf16 *d_qkv = new_bf16(qkv), *d_dout = new_bf16(dout);
        bf16 *d_out[2] = {dev_alloc<bf16>(NC), dev_alloc<bf16>(NC)};
        bf16 *d_dqkv[2] = {dev_alloc<bf16>(3 * NC), dev_alloc<bf16>(3 * NC)};
        float *d_lse[2] = {dev_alloc<float>(BHT), dev_alloc<float>(BHT)}, *d_delta = dev_alloc<float>(BHT);
        const Attention *atts[2] = {&exact, &fast};
        for (int i = 0; i < (fast.fast ? 2 : 1); i++) {
            const char *family = i ? "attn fast" : "attention";
            auto forward = [&] {
                attention_forward(atts[i], d_out[i], d_lse[i], d_qkv, B, T, C, NH, stream);
            };
            auto backward = [&] {
                attention_backward(atts[i], d_dqkv[i], d_delta, d_dout, d_qkv, d_out[i], d_lse[i], B, T, C,
                                   NH, stream);
            };
            forward();
            backward();
            time_flops(family, "forward", attention_flops(B, NH, T, HS, 0), stream, forward);
            time_flops(family, "backward", attention_flops(B, NH, T, HS, 1), stream, backward);
        }
        if (fast.fast) {
            cuda_check(cudaStreamSynchronize(stream));
            check_rel_l2("attn fast", "out vs exact", get_bf16(d_out[1], NC), get_bf16(d_out[0], NC), 0x1p-6);
            check_rel_l2("attn fast", "dqkv vs exact", get_bf16(d_dqkv[1], 3 * NC),
                         get_bf16(d_dqkv[0], 3 * NC), 0x1p-5);
        } else {
            printf("  attention fast: not timed: %s\n", fast.description);
        }
        attention_free(&exact);
        attention_free(&fast);
        dev_free_all();
    }
}

// ---------------------------------------------------------------------------------------------------------
// Cross-entropy

static void bench_crossentropy(const Shape *s, cudaStream_t stream) {
    const int N = s->B * s->T, V = s->V, Vp = s->Vp;
    const size_t NV = (size_t)N * Vp;
    // The padded columns get values too: they must be ignored, not assumed zero.
    Vec logits = randu_bf16(NV, -4.0f, 4.0f);
    std::vector<int> targets(N);
    for (int i = 0; i < N; i++) targets[i] = randint(V);
    const float dloss = 1.0f / (float)N;

    Vec probs(NV), losses(N);
    softmax_crossentropy_forward(probs.data(), losses.data(), logits.data(), targets.data(), N, V, Vp);
    softmax_crossentropy_backward(probs.data(), targets.data(), dloss, N, Vp, DTYPE_BFLOAT16);
    bf16 *d_logits = new_bf16(logits);
    float *d_losses = dev_alloc<float>(N);
    int *d_targets = new_ints(targets);
    crossentropy_forward_backward(d_logits, d_losses, d_targets, dloss, N, V, Vp, 1, stream);
    cuda_check(cudaStreamSynchronize(stream));
    const Vec g_losses = get_f32(d_losses, N);
    check("crossentropy", "losses", g_losses.data(), losses.data(), N, 0x1p-12, 0x1p-12);
    check_bf16("crossentropy", "dlogits", get_bf16(d_logits, NV), probs);

    // Loss only: the logits stay as they are, the losses are the same bits.
    put_bf16(d_logits, logits);
    crossentropy_forward_backward(d_logits, d_losses, d_targets, dloss, N, V, Vp, 0, stream);
    cuda_check(cudaStreamSynchronize(stream));
    check_exact("crossentropy", "logits kept", get_bf16(d_logits, NV), logits);
    check_rerun("crossentropy", "losses", g_losses, get_f32(d_losses, N));
    // In place: later runs read the previous gradient as logits, the same work.
    time_kernel("crossentropy", "fwd+bwd", 2.0 * NV * 2, stream, [&] {
        crossentropy_forward_backward(d_logits, d_losses, d_targets, dloss, N, V, Vp, 1, stream);
    });
    dev_free_all();
}

// ---------------------------------------------------------------------------------------------------------
// Bias gradient and gradient norm

static void bench_reductions(const Shape *s, cudaStream_t stream) {
    const int N = s->B * s->T, OC = 3 * s->C; // the qkv bias
    const size_t NOC = (size_t)N * OC;
    Vec dout = randn(NOC, 0.0f, 0.1f, 1), dbias0 = randn(OC, 0.0f, 1.0f, 0), dbias = dbias0;
    // train_gpt.c's linear_backward, bias loop
    for (int o = 0; o < OC; o++)
        for (int n = 0; n < N; n++) dbias[o] += dout[(size_t)n * OC + o];
    bf16 *d_dout = new_bf16(dout);
    float *d_dbias = new_f32(dbias0), *scratch = dev_alloc<float>(bias_backward_scratch_floats(N, OC));
    bias_backward(d_dbias, d_dout, N, OC, scratch, stream);
    cuda_check(cudaStreamSynchronize(stream));
    const Vec g_dbias = get_f32(d_dbias, OC);
    check_sum("bias", "dbias", g_dbias, dbias);
    to_dev(d_dbias, dbias0.data(), OC * sizeof(float));
    bias_backward(d_dbias, d_dout, N, OC, scratch, stream);
    cuda_check(cudaStreamSynchronize(stream));
    check_rerun("bias", "dbias", g_dbias, get_f32(d_dbias, OC));
    time_kernel("bias", "backward", 2.0 * NOC, stream,
                [&] { bias_backward(d_dbias, d_dout, N, OC, scratch, stream); });

    // As many values as wte has, plus an odd tail.
    const size_t n = (size_t)s->Vp * s->C + 13;
    Vec g = randn(n, 0.0f, 1e-3f, 0);
    double cpu_sum_sq = 0.0; // train_gpt.c's grad_norm, on one process
    for (size_t i = 0; i < n; i++) cpu_sum_sq += (double)g[i] * g[i];
    const Vec norm = {(float)sqrt(cpu_sum_sq)};
    float *d_g = new_f32(g);
    double *d_out = dev_alloc<double>(1);
    float *norm_scratch = dev_alloc<float>(global_norm_squared_scratch_floats(n));
    global_norm_squared(d_out, d_g, n, norm_scratch, stream);
    cuda_check(cudaStreamSynchronize(stream));
    double sum_sq = 0.0;
    cuda_check(cudaMemcpy(&sum_sq, d_out, sizeof(double), cudaMemcpyDeviceToHost));
    const Vec g_sq = {(float)sum_sq}, g_norm = {(float)sqrt(sum_sq)};
    check("norm", "sqrt(sum sq)", g_norm.data(), norm.data(), 1, 0x1p-21, 0.0);
    time_kernel("norm", "sum of squares", 4.0 * n, stream,
                [&] { global_norm_squared(d_out, d_g, n, norm_scratch, stream); });
    cuda_check(cudaMemcpy(&sum_sq, d_out, sizeof(double), cudaMemcpyDeviceToHost));
    check_rerun("norm", "sum sq", g_sq, Vec{(float)sum_sq});
    dev_free_all();
}

// ---------------------------------------------------------------------------------------------------------
// AdamW (gpu/adamw.cuh) against the CPU trainer's adamw_run, bit for bit: runs that start at each float
// offset modulo 16 bytes (the kernel's scalar head, 16-byte body and tail), with and without weight decay,
// the gradient clipped (norm 2 against a clip of 1), the BF16 copy written, the elements around the run
// untouched.

static void bench_adamw(cudaStream_t stream, int small_only) {
    StepParams params = {};
    params.lr = 1e-3f, params.beta1 = 0.9f, params.beta2 = 0.95f, params.eps = 1e-8f,
    params.weight_decay = 0.1f;
    params.grad_clip = 1.0f, params.beta1_correction = 1.0f - powf(0.9f, 3.0f);
    params.beta2_correction = 1.0f - powf(0.95f, 3.0f);
    StepResults results = {};
    results.grad_norm = 2.0f;
    const AdamWStep step = {params.lr,
                            params.grad_clip / results.grad_norm,
                            params.beta1,
                            params.beta2,
                            params.eps,
                            params.beta1_correction,
                            params.beta2_correction};
    // (elements, first float offset, decay): every offset and decay on a small run; the timed big run once
    std::vector<std::array<size_t, 3>> runs;
    for (size_t offset = 0; offset < 4; offset++)
        for (size_t decayed = 0; decayed < 2; decayed++) runs.push_back({4099, offset, decayed});
    if (!small_only) runs.push_back({(size_t)1 << 24, 1, 1});
    for (const auto &run : runs) {
        const size_t n = run[0], offset = run[1], decayed = run[2];
        char shape[24];
        snprintf(shape, sizeof shape, "n %zu +%zu%s", n, offset, decayed ? " decay" : "");
        g_shape = shape;
        // offset elements before the run and 4 after it, which must stay as they are
        const size_t total = offset + n + 4;
        Vec p = randn(total, 0.0f, 0.05f, 0), g = randn(total, 0.0f, 1.0f, 0),
            m = randn(total, 0.0f, 0.1f, 0), v = randn(total, 0.0f, 0.1f, 0), copy(total, 0.0f);
        for (float &x : v) x *= x; // second moments are squares
        float *d_p = new_f32(p), *d_g = new_f32(g), *d_m = new_f32(m), *d_v = new_f32(v);
        bf16 *d_copy = new_bf16(copy);
        StepParams *d_params = dev_alloc<StepParams>(1);
        StepResults *d_results = dev_alloc<StepResults>(1);
        to_dev(d_params, &params, sizeof params);
        to_dev(d_results, &results, sizeof results);
        adamw_run(p.data() + offset, g.data() + offset, m.data() + offset, v.data() + offset, n,
                  decayed ? params.weight_decay : 0.0f, &step);
        for (size_t i = offset; i < offset + n; i++) copy[i] = bf16_round(p[i]);
        auto update = [&] {
            launch<adamw_kernel>({elementwise_blocks((n + 3) / 4), 256, 0, stream}, d_p + offset,
                                 d_copy + offset, d_g + offset, d_m + offset, d_v + offset, n, (int)decayed,
                                 d_params, d_results);
        };
        update();
        cuda_check(cudaStreamSynchronize(stream));
        check_exact("adamw", "params", get_f32(d_p, total), p);
        check_exact("adamw", "m", get_f32(d_m, total), m);
        check_exact("adamw", "v", get_f32(d_v, total), v);
        check_exact("adamw", "bf16 copy", get_bf16(d_copy, total), copy);
        if (n > 4099) time_kernel("adamw", "update", (double)n * (7 * 4 + 2), stream, update);
        dev_free_all();
    }
}

// ---------------------------------------------------------------------------------------------------------

int main(int argc, char **argv) {
    int small_only = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--small") == 0)
            small_only = 1;
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc && atoi(argv[i + 1]) > 0)
            g_reps = atoi(argv[++i]);
        else
            fail("usage: %s [--small] [--reps N]", argv[0]);
    }
    cudaDeviceProp prop;
    cuda_check(cudaGetDeviceProperties(&prop, 0));
    printf("bench_kernels | %s | median of %d runs\n", prop.name, g_reps);
    cudaStream_t stream;
    cuda_check(cudaStreamCreate(&stream));
    rng_seed(&g_rng, 20261201);
    const int num_shapes = (int)(sizeof(SHAPES) / sizeof(SHAPES[0]));
    for (int i = 0; i < num_shapes; i++) {
        const Shape *s = &SHAPES[i];
        if (small_only && s->big) continue;
        g_shape = s->name;
        printf("shape %s ...\n", s->name);
        fflush(stdout);
        bench_encoder(s, stream);
        bench_layernorm(s, stream);
        bench_elementwise(s, stream);
        bench_attention(s, stream);
        bench_crossentropy(s, stream);
        bench_reductions(s, stream);
    }
    bench_adamw(stream, small_only);
    if (!small_only) bench_attention_speed(stream);
    cuda_check(cudaStreamDestroy(stream));

    int failures = 0;
    printf("\n%-12s %-20s %-16s %10s %9s %10s %8s  %s\n", "family", "shape", "check", "elements", "bit-exact",
           "max |err|", "err/tol", "result");
    for (const CheckRow &r : g_checks) {
        printf("%-12s %-20s %-16s %10zu %8.3f%% %10.3e %8.3f  %s\n", r.family, r.shape, r.what, r.n,
               100.0 * r.exact, r.max_abs, r.worst, r.ok ? "ok" : "FAIL");
        failures += !r.ok;
    }
    printf("\n%-12s %-20s %-16s %10s %9s %9s\n", "family", "shape", "kernel", "ms", "GB/s", "TFLOP/s");
    for (const TimeRow &r : g_times) {
        char gbps[16] = "-", tflops[16] = "-";
        if (r.gbps > 0.0) snprintf(gbps, sizeof gbps, "%.1f", r.gbps);
        if (r.tflops > 0.0) snprintf(tflops, sizeof tflops, "%.1f", r.tflops);
        printf("%-12s %-20s %-16s %10.4f %9s %9s\n", r.family, r.shape, r.what, r.ms, gbps, tflops);
    }
    printf("\n%d of %zu checks failed\n", failures, g_checks.size());
    return failures ? 1 : 0;
}

// test_cpu_kernels.c: the CPU trainer's fast kernels against their definitions. Built with the trainer's own
// flags (-O3 -march=native, so the vectorised code is what runs), once with the plain-C GEMM and once with
// OpenBLAS when it is installed (test/train_test.mk).
//  - fp8_round_value (fp8_scaling.h, branch-free) equals fp8_round (the bit-level reference) in both formats:
//    every float of every exponent where FP8 rounding happens (from below half the smallest subnormal to past
//    the largest finite value), every infinity and NaN, and the other exponents (which only flush or
//    saturate) at a stride through their mantissas;
//  - quantize() gives fp8_quantize_value's values bit for bit, counts what fp8_is_saturated and
//    fp8_is_flushed count, and returns the NaN-ignoring max |x|, on tensors mixing normal values, subnormals,
//    zeros, huge values, infinities and NaNs, with and without statistics;
//  - gemm() in its four transpose cases, at shapes that leave partial register tiles, cache blocks and
//    blocks of terms, with beta 0 (C, filled with NaN, must not be read), 1 and -0.5, against a double
//    reference. Any summation order of K products, fused or not, is within gamma(K+2) = (K+2)u / (1-(K+2)u),
//    u = 2^-24, of the exact result relative to alpha*sum|a_k b_k| + |beta c| (the standard forward bound;
//    +2 for the scaling by alpha and the add of beta*c); the reference's own error in double is far below it.
//    The plain-C GEMM also gives the same bits with 1 and 2 threads (its sums do not depend on the split);
//  - the block recipes' scale rules against an independent computation in double: blockwise fmax/amax (and
//    its power of two below with --fp8_pow2_scales), mxfp8's 2^ceil(log2(amax / 448)) dequantization factor
//    and its E8M0 code, every E8M0 code's value, and the edge cases (zero, NaN and infinite amax, the clamp);
//  - quantize_blocks() in every tile shape the trainer uses (1x128, 128x1, 128x128, 1x32, 32x1) on shapes
//    that are not multiples of the tile, with an all-zero block, a block holding one huge value among small
//    ones, and blocks holding NaN and infinity: each value is fp8_quantize_value at its block's independently
//    computed scale, times the correctly rounded inverse;
//  - the quantize-dequantize GEMM of each block recipe (the forward's x . W^T) against a float64 sum of
//    code x code / (scale x scale): within gamma(K+2) + 5u of the sum of |terms| (summation, and the
//    rounding of 1/scale and of code x (1/scale) in each operand; exact for mxfp8's powers of two).
#define TRAIN_GPT_NO_MAIN
#pragma GCC diagnostic ignored "-Wunused-function"
#include "../train_gpt.c"
#include "test_util.h"

static float from_bits(uint32_t u) {
    return fp8_bits_to_f32(u);
}

// fp8_round_value against fp8_round for every sign and mantissa of the exponents in [lo, hi], and for the
// others every stride-th mantissa (and the last).
static void test_round_value(Fp8Format f) {
    int mbits = fp8_mantissa_bits(f), emin = 1 - fp8_exponent_bias(f);
    int lo = emin - mbits - 2 + 127, hi = fp8_exponent_bias(f) + 2 + 127; // biased float exponents
    long mismatches = 0, checked = 0;
    uint32_t first_bad = 0;
#pragma omp parallel for schedule(dynamic) reduction(+ : mismatches, checked)
    for (int e = 0; e < 256; e++) {
        uint32_t stride = (e >= lo && e <= hi) || e == 255 ? 1 : 4093;
        for (uint32_t sign = 0; sign < 2; sign++) {
            for (uint32_t m = 0; m < (1u << 23) + stride; m += stride) {
                uint32_t mantissa = m < (1u << 23) ? m : (1u << 23) - 1; // the last one too
                uint32_t u = sign << 31 | (uint32_t)e << 23 | mantissa;
                float x = from_bits(u);
                checked++;
                if (fp8_f32_to_bits(fp8_round_value(x, f)) != fp8_f32_to_bits(fp8_round(x, f))) {
                    if (!mismatches) first_bad = u;
                    mismatches++;
                }
            }
        }
    }
    expect(mismatches == 0,
           "%s: fp8_round_value differs from fp8_round on %ld of %ld floats (e.g. bits 0x%08x)",
           fp8_format_name(f), mismatches, checked, first_bad);
    expect(checked > (long)(hi - lo + 2) * 2 * (1 << 23), "%s: the sweep covered %ld floats",
           fp8_format_name(f), checked);
}

// A tensor of every kind of value quantize() meets, scaled so that x * scale spans the format's range.
static void mixed_tensor(float *x, size_t n, Rng *rng) {
    for (size_t i = 0; i < n; i++) {
        uint32_t kind = (uint32_t)(rng_next(rng) % 16), sign = (uint32_t)(rng_next(rng) & 1) << 31;
        uint32_t bits;
        if (kind == 0)
            bits = (uint32_t)(rng_next(rng) & 0x7FFFFF); // float32 subnormal (or zero)
        else if (kind == 1)
            bits = 0x7F800000u | (uint32_t)(rng_next(rng) % 2 ? 0 : 1 + rng_next(rng) % 0x7FFFFF); // inf, NaN
        else if (kind == 2)
            bits = 0x7F000000u | (uint32_t)(rng_next(rng) & 0x7FFFFF); // huge: saturates
        else                                                           // log-uniform over 2^-40 .. 2^24
            bits = (uint32_t)(87 + rng_next(rng) % 64) << 23 | (uint32_t)(rng_next(rng) & 0x7FFFFF);
        x[i] = from_bits(sign | bits);
    }
}

static void test_quantize(void) {
    enum { N = 100003 };
    static float x[N], q[N];
    Rng rng;
    rng_seed(&rng, 11);
    mixed_tensor(x, N, &rng);
    float scales[] = {1.0f, 0x1p-20f, 0x1p12f, 3.0f, 0x1p120f};
    for (int fi = 0; fi < 2; fi++) {
        Fp8Format f = (Fp8Format)fi;
        for (size_t si = 0; si < sizeof(scales) / sizeof(scales[0]); si++) {
            float scale = scales[si];
            Fp8Stats stats;
            fp8_stats_alloc(&stats, 1, FP8_RECIPE_DELAYED);
            for (int with_stats = 0; with_stats < 2; with_stats++) {
                float amax = quantize(q, x, N, scale, f, with_stats ? &stats : NULL, 2);
                long bad_values = 0;
                unsigned long long saturated = 0, flushed = 0;
                float expected_amax = 0.0f;
                for (size_t i = 0; i < N; i++) {
                    bad_values +=
                        fp8_f32_to_bits(q[i]) != fp8_f32_to_bits(fp8_quantize_value(x[i], scale, f));
                    saturated += fp8_is_saturated(x[i] * scale, f);
                    flushed += fp8_is_flushed(x[i] * scale, f);
                    if (!isnan(x[i]) && fabsf(x[i]) > expected_amax) expected_amax = fabsf(x[i]);
                }
                expect(bad_values == 0, "quantize %s scale %g%s: %ld values differ from fp8_quantize_value",
                       fp8_format_name(f), scale, with_stats ? " (stats)" : "", bad_values);
                expect(amax == expected_amax, "quantize %s scale %g: amax %g, expected %g",
                       fp8_format_name(f), scale, amax, expected_amax);
                if (with_stats)
                    expect(stats.saturated[2] == saturated && stats.flushed[2] == flushed &&
                               stats.elements[2] == N,
                           "quantize %s scale %g: %llu saturated %llu flushed, expected %llu and %llu",
                           fp8_format_name(f), scale, stats.saturated[2], stats.flushed[2], saturated,
                           flushed);
            }
            fp8_stats_free(&stats);
        }
    }
}

// op(X)(r, k) of a row-major X, as gemm() reads it
static double op_at(const float *X, int transposed, int rows, int terms, int r, int k) {
    return transposed ? X[(size_t)k * rows + r] : X[(size_t)r * terms + k];
}

static int gemm_within_bound(const float *C, const float *C0, const float *A, const float *B, int ta, int tb,
                             int M, int N, int K, float alpha, float beta, double *worst) {
    double gamma = (K + 2) * 0x1p-24 / (1.0 - (K + 2) * 0x1p-24);
    int ok = 1;
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
            double exact = 0.0, magnitude = 0.0;
            for (int k = 0; k < K; k++) {
                double p = op_at(A, ta, M, K, i, k) * op_at(B, tb, K, N, k, j);
                exact += p;
                magnitude += fabs(p);
            }
            double c0 = beta == 0.0f ? 0.0 : (double)C0[(size_t)i * N + j];
            exact = alpha * exact + beta * c0;
            double bound = gamma * (fabs(alpha) * magnitude + fabs(beta * c0)) + 0x1p-149;
            double err = fabs(C[(size_t)i * N + j] - exact);
            if (!(err <= bound)) ok = 0;
            if (!(err / bound <= *worst)) *worst = err / bound; // a NaN shows as nan
        }
    }
    return ok;
}

static void test_gemm(void) {
    int shapes[][3] = {{1, 1, 1},      {5, 17, 3},   {7, 33, 300}, {2 * 96 + 5, 2 * 256 + 3, 2 * 256 + 7},
                       {64, 512, 128}, {513, 20, 65}};
    float betas[] = {0.0f, 1.0f, -0.5f};
    Rng rng;
    rng_seed(&rng, 5);
    for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
        int M = shapes[si][0], N = shapes[si][1], K = shapes[si][2];
        size_t widest = (size_t)(M > N ? M : N);
        float *A = (float *)malloc_check((size_t)M * K * sizeof(float), "A");
        float *B = (float *)malloc_check((size_t)K * N * sizeof(float), "B");
        float *C = (float *)malloc_check((size_t)M * N * sizeof(float), "C");
        float *C0 = (float *)malloc_check((size_t)M * N * sizeof(float), "C0");
        float *C1 = (float *)malloc_check((size_t)M * N * sizeof(float), "C1");
        float *pack = (float *)malloc_check((gemm_pack_floats(widest) + 1) * sizeof(float), "pack");
        for (size_t i = 0; i < (size_t)M * K; i++) A[i] = (float)(2.0 * rng_uniform(&rng) - 1.0);
        for (size_t i = 0; i < (size_t)K * N; i++) B[i] = (float)(2.0 * rng_uniform(&rng) - 1.0);
        for (size_t i = 0; i < (size_t)M * N; i++) C0[i] = (float)(2.0 * rng_uniform(&rng) - 1.0);
        for (int ta = 0; ta < 2; ta++) {
            for (int tb = 0; tb < 2; tb++) {
                for (size_t bi = 0; bi < sizeof(betas) / sizeof(betas[0]); bi++) {
                    float beta = betas[bi], alpha = 0.75f;
                    for (size_t i = 0; i < (size_t)M * N; i++) C[i] = beta == 0.0f ? NAN : C0[i];
                    gemm(pack, ta, tb, M, N, K, alpha, A, B, beta, C);
                    double worst = 0.0;
                    int ok = gemm_within_bound(C, C0, A, B, ta, tb, M, N, K, alpha, beta, &worst);
                    expect(ok, "gemm trans %d%d M=%d N=%d K=%d beta %g: error %.2f x the bound gamma(K+2)",
                           ta, tb, M, N, K, beta, worst);
#ifndef USE_BLAS
                    memcpy(C1, C, (size_t)M * N * sizeof(float));
                    for (size_t i = 0; i < (size_t)M * N; i++) C[i] = beta == 0.0f ? NAN : C0[i];
                    omp_set_num_threads(1);
                    gemm(pack, ta, tb, M, N, K, alpha, A, B, beta, C);
                    omp_set_num_threads(2);
                    expect(!memcmp(C, C1, (size_t)M * N * sizeof(float)),
                           "gemm trans %d%d M=%d N=%d K=%d: 1 and 2 threads give different bits", ta, tb, M,
                           N, K);
#endif
                }
            }
        }
        free(A);
        free(B);
        free(C);
        free(C0);
        free(C1);
        free(pack);
    }
}

// The block scale and dequantization factor, computed independently of fp8_block_scale in double.
static void reference_block_scale(float amax, int recipe, Fp8Format f, int pow2, float *scale,
                                  float *descale) {
    double fmax = fp8_max_finite(f);
    if (!(amax > 0.0f) || isinf(amax)) {
        *scale = *descale = 1.0f;
        return;
    }
    if (recipe == FP8_RECIPE_MXFP8) { // X = 2^ceil(log2(amax / fmax)), at least 2^-126
        int e = (int)ceil(log2((double)amax / fmax));
        while (ldexp((double)amax, -e) > fmax) e++; // log2 rounding at exact powers of two
        while (ldexp((double)amax, -(e - 1)) <= fmax) e--;
        if (e < -126) e = -126;
        *descale = (float)ldexp(1.0, e);
        *scale = (float)ldexp(1.0, -e);
        return;
    }
    float s = (float)fmax / amax; // IEEE division: one rounding of the exact quotient
    if (isinf(s)) s = FLT_MAX;
    if (pow2) {
        int e;
        frexpf(s, &e);
        s = ldexpf(1.0f, e - 1);
    }
    *scale = s;
    *descale = 1.0f / s;
}

static void test_block_scales(void) {
    Rng rng;
    rng_seed(&rng, 3);
    long bad = 0;
    for (int i = 0; i < 200000; i++) {
        float amax = i < 8 ? (float[]){0.0f, NAN, INFINITY, 448.0f, 512.0f, 1e-40f, 1e-30f, FLT_MAX}[i]
                           : fp8_bits_to_f32((uint32_t)(rng_next(&rng) % 0x7F800000u));
        for (int recipe = FP8_RECIPE_BLOCKWISE; recipe <= FP8_RECIPE_MXFP8; recipe++)
            for (int pow2 = 0; pow2 < 2; pow2++) {
                if (recipe == FP8_RECIPE_MXFP8 && pow2) continue;
                Fp8Format f = recipe == FP8_RECIPE_MXFP8 ? FP8_E4M3 : (Fp8Format)(i % 2);
                float scale, descale;
                reference_block_scale(amax, recipe, f, pow2, &scale, &descale);
                float got = fp8_block_scale(amax, recipe, f, 0, pow2);
                int ok = got == scale && fp8_block_descale(got) == descale;
                if (recipe == FP8_RECIPE_MXFP8)
                    ok &= fp8_e8m0_to_float(fp8_e8m0_from_pow2(fp8_block_descale(got))) == descale &&
                          fp8_e8m0_from_pow2(descale) >= 1;
                // a power-of-two scale rounds down: no value of the block can exceed fmax
                if ((recipe == FP8_RECIPE_MXFP8 || pow2) && amax <= FLT_MAX)
                    ok &= amax * got <= fp8_max_finite(f);
                if (!ok && bad++ < 3)
                    printf("  amax %g recipe %d pow2 %d: scale %g descale %g, expected %g %g\n", amax, recipe,
                           pow2, got, fp8_block_descale(got), scale, descale);
            }
    }
    expect(bad == 0, "block scales: %ld of 200000 amaxes differ from the independent rule", bad);
    int codes_ok = fp8_e8m0_to_float(FP8_E8M0_NAN) != fp8_e8m0_to_float(FP8_E8M0_NAN); // NaN
    for (int code = 0; code < 255; code++)
        codes_ok &= fp8_e8m0_to_float((uint8_t)code) == ldexpf(1.0f, code - 127);
    check(codes_ok, "E8M0: code c is 2^(c-127), 0xFF is NaN");
}

// quantize_blocks against each value's own block scale, computed independently.
static void test_quantize_blocks(void) {
    enum { ROWS = 260, COLS = 300 };
    static float x[ROWS * COLS], out[ROWS * COLS];
    Rng rng;
    rng_seed(&rng, 9);
    for (int i = 0; i < ROWS * COLS; i++)
        x[i] = (float)(2.0 * rng_uniform(&rng) - 1.0) * ldexpf(1.0f, (int)(rng_next(&rng) % 20) - 10);
    for (int r = 0; r < 128; r++)
        for (int c = 0; c < 128; c++) x[r * COLS + c] = 0.0f; // an all-zero block of every tile shape
    x[200 * COLS + 10] = 3e4f;                                // one huge value among small ones
    x[140 * COLS + 150] = NAN;
    x[250 * COLS + 290] = INFINITY;
    const int shapes[5][3] = {{FP8_RECIPE_BLOCKWISE, 1, 128},
                              {FP8_RECIPE_BLOCKWISE, 128, 1},
                              {FP8_RECIPE_BLOCKWISE, 128, 128},
                              {FP8_RECIPE_MXFP8, 1, 32},
                              {FP8_RECIPE_MXFP8, 32, 1}};
    for (int si = 0; si < 5; si++) {
        int recipe = shapes[si][0], tr = shapes[si][1], tc = shapes[si][2];
        for (int fi = 0; fi < 2; fi++) {
            Fp8Format f = recipe == FP8_RECIPE_MXFP8 ? FP8_E4M3 : (Fp8Format)fi;
            Fp8Stats stats;
            fp8_stats_alloc(&stats, 1, recipe);
            float amax = quantize_blocks(out, x, ROWS, COLS, tr, tc, recipe, f, 0, 0, &stats, 1);
            long bad = 0, nan_ok = 1;
            float expected_amax = 0.0f;
            for (int r0 = 0; r0 < ROWS; r0 += tr)
                for (int c0 = 0; c0 < COLS; c0 += tc) {
                    float block_amax = 0.0f, scale, descale;
                    for (int r = r0; r < r0 + tr && r < ROWS; r++)
                        for (int c = c0; c < c0 + tc && c < COLS; c++)
                            if (!isnan(x[r * COLS + c]))
                                block_amax = fmaxf(block_amax, fabsf(x[r * COLS + c]));
                    expected_amax = fmaxf(expected_amax, block_amax);
                    reference_block_scale(block_amax, recipe, f, 0, &scale, &descale);
                    for (int r = r0; r < r0 + tr && r < ROWS; r++)
                        for (int c = c0; c < c0 + tc && c < COLS; c++) {
                            float want = fp8_quantize_value(x[r * COLS + c], scale, f) * descale;
                            float got = out[r * COLS + c];
                            if (isnan(want) || isnan(got))
                                nan_ok &= isnan(want) && isnan(got);
                            else
                                bad += fp8_f32_to_bits(want) != fp8_f32_to_bits(got);
                        }
                }
            expect(bad == 0 && nan_ok,
                   "quantize_blocks %dx%d %s: %ld values differ from their block's reference", tr, tc,
                   fp8_format_name(f), bad);
            expect(amax == expected_amax && stats.elements[1] == ROWS * COLS && out[0] == 0.0f,
                   "quantize_blocks %dx%d: amax %g (expected %g), all-zero block gives zeros", tr, tc, amax,
                   expected_amax);
            fp8_stats_free(&stats);
        }
    }
}

// The forward GEMM of a block recipe (tiles 1 x b of x along K, weight blocks b x b or 1 x b) against the
// float64 sum over the codes and independently computed scales.
static void test_block_gemm(int recipe) {
    enum { M = 130, N = 200, K = 384 };
    static float x[M * K], w[N * K], xq[M * K], wq[N * K], y[M * N];
    Rng rng;
    rng_seed(&rng, 21);
    for (int i = 0; i < M * K; i++) x[i] = (float)(2.0 * rng_uniform(&rng) - 1.0) * (1.0f + (float)(i % 7));
    for (int i = 0; i < N * K; i++) w[i] = (float)(2.0 * rng_uniform(&rng) - 1.0) * 0.02f;
    int b = fp8_block_size(recipe), w_rows = recipe == FP8_RECIPE_MXFP8 ? 1 : b;
    quantize_blocks(xq, x, M, K, 1, b, recipe, FP8_E4M3, 0, 0, NULL, 0);
    quantize_blocks(wq, w, N, K, w_rows, b, recipe, FP8_E4M3, 0, 0, NULL, 0);
    float *pack = (float *)malloc_check((gemm_pack_floats(N) + 1) * sizeof(float), "pack");
    gemm(pack, 0, 1, M, N, K, 1.0f, xq, wq, 0.0f, y);
    free(pack);
    static float x_scale[M * (K / 32)], w_scale[N * (K / 32)];
    for (int i = 0; i < M; i++)
        for (int kb = 0; kb < K / b; kb++) {
            float amax = 0.0f, descale;
            for (int k = kb * b; k < (kb + 1) * b; k++) amax = fmaxf(amax, fabsf(x[i * K + k]));
            reference_block_scale(amax, recipe, FP8_E4M3, 0, &x_scale[i * (K / b) + kb], &descale);
        }
    for (int j = 0; j < N; j++)
        for (int kb = 0; kb < K / b; kb++) {
            float amax = 0.0f, descale;
            int j0 = j / w_rows * w_rows;
            for (int jj = j0; jj < j0 + w_rows && jj < N; jj++)
                for (int k = kb * b; k < (kb + 1) * b; k++) amax = fmaxf(amax, fabsf(w[jj * K + k]));
            reference_block_scale(amax, recipe, FP8_E4M3, 0, &w_scale[j * (K / b) + kb], &descale);
        }
    double u = 0x1p-24, worst = 0.0;
    int ok = 1;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double exact = 0.0, magnitude = 0.0;
            for (int k = 0; k < K; k++) {
                float sx = x_scale[i * (K / b) + k / b], sw = w_scale[j * (K / b) + k / b];
                double term = (double)fp8_quantize_value(x[i * K + k], sx, FP8_E4M3) *
                              fp8_quantize_value(w[j * K + k], sw, FP8_E4M3) / ((double)sx * sw);
                exact += term;
                magnitude += fabs(term);
            }
            double bound = ((K + 2) * u / (1 - (K + 2) * u) + 5 * u) * magnitude + 0x1p-149;
            double err = fabs(y[i * N + j] - exact);
            ok &= err <= bound;
            if (err / bound > worst) worst = err / bound;
        }
    expect(ok, "%s quantize-dequantize GEMM: error %.2f x the bound (gamma(K+2) + 5u) sum|terms|",
           recipe == FP8_RECIPE_MXFP8 ? "mxfp8" : "blockwise", worst);
}

int main(void) {
#ifndef USE_BLAS
    omp_set_num_threads(2);
#endif
    test_round_value(FP8_E4M3);
    test_round_value(FP8_E5M2);
    test_quantize();
    test_gemm();
    test_block_scales();
    test_quantize_blocks();
    test_block_gemm(FP8_RECIPE_BLOCKWISE);
    test_block_gemm(FP8_RECIPE_MXFP8);
    return test_summary();
}

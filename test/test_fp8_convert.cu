// test_fp8_convert.cu: checks fp8_scaling.h against the host-side conversions of cuda_fp8.h / cuda_bf16.h,
// and the scaling helpers against their definitions. Host code only: it needs no GPU and makes no CUDA
// runtime calls; the one kernel below is never launched and exists so that nvcc compiles (and -Werror
// checks) the device side of every header function.
//
// Strategy: exhaustive. fp8_from_float (both formats) and bf16_from_float are compared with CUDA on every
// one of the 2^32 float32 bit patterns, so every rounding boundary, the saturation thresholds, subnormals,
// signed zeros, infinities and every NaN payload are covered without having to enumerate them. Measured on
// 2 idle cores with OpenMP (-O2): 14-15 s for the whole sweep, 8 conversions per float (ours and CUDA's, E4M3
// and E5M2, and both __float2bfloat16 and __float2bfloat16_rn), ~30 s of CPU time; the rest of the program
// takes under a second.
//
// Prints "N passed, M failed" (test cases, not elements) last; exits 1 on any failure.
#include "../core/fp8_scaling.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define MAX_REPORTED 5

static int g_passed = 0;
static int g_failed = 0;

// One test case: counts element mismatches, prints the first few.
typedef struct {
    const char *name;
    long mismatches;
} Case;

static Case case_begin(const char *name) {
    Case c = {name, 0};
    return c;
}

static void case_end(Case *c) {
    if (c->mismatches == 0) {
        g_passed++;
        printf("PASS %s\n", c->name);
    } else {
        g_failed++;
        printf("FAIL %s: %ld mismatches\n", c->name, c->mismatches);
    }
}

// Record one mismatch; the message is printed only for the first few.
static void mismatch(Case *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void mismatch(Case *c, const char *fmt, ...) {
    long n;
#ifdef _OPENMP
#pragma omp atomic capture
#endif
    n = ++c->mismatches;
    if (n > MAX_REPORTED) return;
    char buf[256];
    va_list args;
    va_start(args, fmt);
    vsnprintf(buf, sizeof buf, fmt, args);
    va_end(args);
#ifdef _OPENMP
#pragma omp critical(report)
#endif
    printf("  %s: %s\n", c->name, buf);
}

static void check(Case *c, int ok, const char *what) {
    if (!ok) mismatch(c, "%s", what);
}

static uint32_t bits_of(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float float_of(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// Uniform over [lo, hi) binades: random exponent and mantissa, so every magnitude is equally represented.
static float random_positive(uint64_t *rng, int lo_exp, int hi_exp) {
    uint64_t r = splitmix64(rng);
    int e = lo_exp + (int)(r % (uint64_t)(hi_exp - lo_exp));
    uint32_t man = (uint32_t)(r >> 32) & 0x7FFFFFu;
    return float_of(((uint32_t)(e + 127) << 23) | man);
}

static __nv_fp8_interpretation_t cuda_fmt(Fp8Format f) {
    return f == FP8_E4M3 ? __NV_E4M3 : __NV_E5M2;
}

static uint8_t cuda_fp8_from_float(float x, Fp8Format f) {
    return (uint8_t)__nv_cvt_float_to_fp8(x, __NV_SATFINITE, cuda_fmt(f));
}

static float cuda_fp8_to_float(uint8_t v, Fp8Format f) {
    __half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)v, cuda_fmt(f));
    return __half2float(__half(h));
}

static uint16_t cuda_bf16_bits(__nv_bfloat16 b) {
    __nv_bfloat16_raw r = (__nv_bfloat16_raw)b;
    return r.x;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// ---------------------------------------------------------------------------------------------------------
// Conversions against CUDA.

static void test_from_float_all_f32(void) {
    Case e4 = case_begin("fp8_from_float e4m3 == __nv_cvt_float_to_fp8 (all 2^32 floats)");
    Case e5 = case_begin("fp8_from_float e5m2 == __nv_cvt_float_to_fp8 (all 2^32 floats)");
    Case bf = case_begin("bf16_from_float == __float2bfloat16 (all 2^32 floats)");
    Case bfrn = case_begin("bf16_from_float == __float2bfloat16_rn (all 2^32 floats)");
    double t0 = now_s();
#ifdef _OPENMP
#pragma omp parallel for schedule(static, 1 << 16)
#endif
    for (int64_t i = 0; i < ((int64_t)1 << 32); i++) {
        const uint32_t u = (uint32_t)i;
        const float x = float_of(u);
        uint8_t ours = fp8_from_float(x, FP8_E4M3), ref = cuda_fp8_from_float(x, FP8_E4M3);
        if (ours != ref) mismatch(&e4, "x=0x%08X (%.9g): ours 0x%02X, cuda 0x%02X", u, x, ours, ref);
        ours = fp8_from_float(x, FP8_E5M2);
        ref = cuda_fp8_from_float(x, FP8_E5M2);
        if (ours != ref) mismatch(&e5, "x=0x%08X (%.9g): ours 0x%02X, cuda 0x%02X", u, x, ours, ref);
        const uint16_t b = bf16_from_float(x);
        const uint16_t rb = cuda_bf16_bits(__float2bfloat16(x));
        const uint16_t rbrn = cuda_bf16_bits(__float2bfloat16_rn(x));
        if (b != rb) mismatch(&bf, "x=0x%08X (%.9g): ours 0x%04X, cuda 0x%04X", u, x, b, rb);
        if (b != rbrn) mismatch(&bfrn, "x=0x%08X (%.9g): ours 0x%04X, cuda 0x%04X", u, x, b, rbrn);
    }
    printf("  (sweep of 2^32 floats took %.1f s)\n", now_s() - t0);
    case_end(&e4);
    case_end(&e5);
    case_end(&bf);
    case_end(&bfrn);
}

static void test_fp8_to_float_all_codes(Fp8Format f) {
    char name[128];
    snprintf(name, sizeof name, "fp8_to_float %s == __nv_cvt_fp8_to_halfraw -> float (all 256 codes)",
             fp8_format_name(f));
    Case c = case_begin(name);
    for (int v = 0; v < 256; v++) {
        const float ours = fp8_to_float((uint8_t)v, f), ref = cuda_fp8_to_float((uint8_t)v, f);
        // Bit equality also pins NaN-ness and the NaN pattern.
        if (bits_of(ours) != bits_of(ref) || isnan(ours) != isnan(ref))
            mismatch(&c, "code 0x%02X: ours 0x%08X (%g), cuda 0x%08X (%g)", v, bits_of(ours), ours,
                     bits_of(ref), ref);
    }
    case_end(&c);
}

static void test_fp8_roundtrip(Fp8Format f) {
    char name[128];
    snprintf(name, sizeof name, "fp8_from_float(fp8_to_float(c)) == c, %s (all non-NaN codes)",
             fp8_format_name(f));
    Case c = case_begin(name);
    for (int v = 0; v < 256; v++) {
        const float x = fp8_to_float((uint8_t)v, f);
        if (isnan(x)) continue;
        // Inf (E5M2 only) saturates instead of coming back.
        const uint8_t want = isinf(x) ? (uint8_t)((v & 0x80) | 0x7B) : (uint8_t)v;
        const uint8_t got = fp8_from_float(x, f);
        if (got != want) mismatch(&c, "code 0x%02X -> %g -> 0x%02X", v, x, got);
        if (!isinf(x) && bits_of(fp8_round(x, f)) != bits_of(x))
            mismatch(&c, "fp8_round(%g) = %g", x, fp8_round(x, f));
    }
    case_end(&c);
}

static void test_bf16_to_float_all(void) {
    Case c = case_begin("bf16_to_float == __bfloat162float (all 65536 codes)");
    for (int v = 0; v < 65536; v++) {
        __nv_bfloat16_raw raw;
        raw.x = (unsigned short)v;
        const float ref = __bfloat162float(__nv_bfloat16(raw));
        const float ours = bf16_to_float((uint16_t)v);
        if (bits_of(ours) != bits_of(ref))
            mismatch(&c, "code 0x%04X: ours 0x%08X, cuda 0x%08X", v, bits_of(ours), bits_of(ref));
        // Every bf16 value is exactly a float, so rounding it again must not move it (NaN -> canonical).
        const uint16_t back = bf16_from_float(ours);
        const uint16_t want = isnan(ours) ? (uint16_t)0x7FFF : (uint16_t)v;
        if (back != want) mismatch(&c, "code 0x%04X round trip gave 0x%04X", v, back);
        if (!isnan(ours) && bits_of(bf16_round(ours)) != bits_of(ours))
            mismatch(&c, "bf16_round moved 0x%04X", v);
    }
    case_end(&c);
}

// The special values spelled out, so that a regression names the case even though the sweep covers them.
static void test_special_values(void) {
    Case c = case_begin("special values (NaN, inf, -0, max, thresholds)");
    const float inf = float_of(0x7F800000u), nan_pos = float_of(0x7FC00000u), nan_neg = float_of(0xFFC00001u);
    check(&c, fp8_from_float(nan_pos, FP8_E4M3) == 0x7F, "e4m3 +NaN -> 0x7F");
    check(&c, fp8_from_float(nan_neg, FP8_E4M3) == 0x7F, "e4m3 -NaN -> 0x7F (sign dropped, like CUDA)");
    check(&c, fp8_from_float(nan_pos, FP8_E5M2) == 0x7F, "e5m2 +NaN -> 0x7F");
    check(&c, fp8_from_float(nan_neg, FP8_E5M2) == 0x7F, "e5m2 -NaN -> 0x7F");
    check(&c, fp8_from_float(inf, FP8_E4M3) == 0x7E && fp8_from_float(-inf, FP8_E4M3) == 0xFE,
          "e4m3 +-inf -> +-448");
    check(&c, fp8_from_float(inf, FP8_E5M2) == 0x7B && fp8_from_float(-inf, FP8_E5M2) == 0xFB,
          "e5m2 +-inf -> +-57344");
    check(&c, fp8_from_float(-0.0f, FP8_E4M3) == 0x80 && fp8_from_float(-0.0f, FP8_E5M2) == 0x80,
          "-0 keeps sign");
    check(&c, fp8_from_float(-1e-30f, FP8_E4M3) == 0x80, "negative underflow -> -0");
    check(&c, fp8_from_float(464.0f, FP8_E4M3) == 0x7E, "e4m3 464 (tie above max) -> 448");
    check(&c, fp8_from_float(1000.0f, FP8_E4M3) == 0x7E, "e4m3 1000 -> 448");
    check(&c, fp8_from_float(61440.0f, FP8_E5M2) == 0x7B, "e5m2 61440 (tie to inf) -> 57344");
    check(&c, fp8_from_float(0.0009765625f, FP8_E4M3) == 0x00, "e4m3 2^-10 (half min subnormal, tie) -> 0");
    check(&c, fp8_from_float(nextafterf(0.0009765625f, 1.0f), FP8_E4M3) == 0x01,
          "e4m3 just above 2^-10 -> 2^-9");
    check(&c, fp8_from_float(0.0029296875f, FP8_E4M3) == 0x02, "e4m3 1.5 * 2^-9 (tie) -> 2 * 2^-9 (even)");
    check(&c, fp8_from_float(1.0f, FP8_E4M3) == 0x38 && fp8_from_float(1.0f, FP8_E5M2) == 0x3C, "1.0 codes");
    check(&c, bits_of(fp8_to_float(0x7F, FP8_E4M3)) == 0x7FFFFFFFu, "e4m3 0x7F -> NaN 0x7FFFFFFF");
    check(&c, bits_of(fp8_to_float(0xFF, FP8_E4M3)) == 0x7FFFFFFFu, "e4m3 0xFF -> NaN 0x7FFFFFFF");
    check(&c, fp8_to_float(0x7C, FP8_E5M2) == inf && fp8_to_float(0xFC, FP8_E5M2) == -inf,
          "e5m2 +-inf codes");
    check(&c, bf16_from_float(nan_neg) == 0x7FFF && bf16_from_float(float_of(0x7F800001u)) == 0x7FFF,
          "bf16 NaN -> 0x7FFF");
    check(&c, bf16_from_float(inf) == 0x7F80 && bf16_from_float(-inf) == 0xFF80, "bf16 +-inf");
    check(&c, bf16_from_float(float_of(0x7F7FFFFFu)) == 0x7F80, "bf16 FLT_MAX rounds to inf");
    check(&c, bf16_from_float(-0.0f) == 0x8000, "bf16 -0");
    case_end(&c);
}

static void test_format_constants(void) {
    Case c = case_begin("format constants, names, roles");
    check(&c, fp8_max_finite(FP8_E4M3) == 448.0f && fp8_max_finite(FP8_E5M2) == 57344.0f, "max finite");
    check(&c, fp8_max_finite(FP8_E4M3) == cuda_fp8_to_float(0x7E, FP8_E4M3), "e4m3 max == code 0x7E");
    check(&c, fp8_max_finite(FP8_E5M2) == cuda_fp8_to_float(0x7B, FP8_E5M2), "e5m2 max == code 0x7B");
    check(&c,
          fp8_min_subnormal(FP8_E4M3) == ldexpf(1.0f, -9) && fp8_min_subnormal(FP8_E5M2) == ldexpf(1.0f, -16),
          "min subnormal");
    check(&c, fp8_min_subnormal(FP8_E4M3) == cuda_fp8_to_float(0x01, FP8_E4M3),
          "e4m3 min subnormal == code 1");
    check(&c, fp8_min_subnormal(FP8_E5M2) == cuda_fp8_to_float(0x01, FP8_E5M2),
          "e5m2 min subnormal == code 1");
    check(&c,
          strcmp(fp8_format_name(FP8_E4M3), "e4m3") == 0 && strcmp(fp8_format_name(FP8_E5M2), "e5m2") == 0,
          "names");
    check(&c, fp8_role_format(FP8_RECIPE_DELAYED, FP8_ROLE_INPUT) == FP8_E4M3, "input -> e4m3");
    check(&c, fp8_role_format(FP8_RECIPE_DELAYED, FP8_ROLE_WEIGHT) == FP8_E4M3, "weight -> e4m3");
    check(&c, fp8_role_format(FP8_RECIPE_DELAYED, FP8_ROLE_GRAD_OUTPUT) == FP8_E5M2, "grad_output -> e5m2");
    check(&c, fp8_role_format(FP8_RECIPE_MXFP8, FP8_ROLE_GRAD_OUTPUT) == FP8_E4M3,
          "mxfp8 grad_output -> e4m3");
    check(&c, FP8_RECIPE_DELAYED == 0 && FP8_RECIPE_CURRENT == 1, "recipe values");
    case_end(&c);
}

// The telemetry predicates against their definitions, over every bf16 value as a float (all magnitudes,
// signs, inf, NaN) plus the values next to the thresholds.
static void test_saturated_flushed(void) {
    Case c = case_begin("fp8_is_saturated / fp8_is_flushed");
    for (int fi = 0; fi < 2; fi++) {
        const Fp8Format f = (Fp8Format)fi;
        // saturated: beyond what round-to-nearest-even reaches, max + half an ulp of the top binade
        // (448 + 16 for E4M3, where the tie rounds down to the even 448; 57344 + 4096 for E5M2, where the
        // tie rounds up past the max)
        const float fmax = fp8_max_finite(f), half_min = 0.5f * fp8_min_subnormal(f);
        const float threshold = f == FP8_E4M3 ? 464.0f : 59392.0f;
        const int tie_saturates = f == FP8_E5M2;
        float probes[65536 + 16];
        int n = 0;
        for (int v = 0; v < 65536; v++) probes[n++] = bf16_to_float((uint16_t)v);
        const float edges[8] = {fmax,
                                nextafterf(fmax, 1e30f),
                                threshold,
                                nextafterf(threshold, 1e30f),
                                half_min,
                                nextafterf(half_min, 1.0f),
                                nextafterf(half_min, 0.0f),
                                0.0f};
        for (int k = 0; k < 8; k++) {
            probes[n++] = edges[k];
            probes[n++] = -edges[k];
        }
        for (int k = 0; k < n; k++) {
            const float x = probes[k];
            const int sat = !isnan(x) && (fabsf(x) > threshold || (tie_saturates && fabsf(x) == threshold));
            const int flush = x != 0.0f && !isnan(x) && fp8_to_float(cuda_fp8_from_float(x, f), f) == 0.0f;
            if (fp8_is_saturated(x, f) != sat)
                mismatch(&c, "%s saturated(0x%08X) != %d", fp8_format_name(f), bits_of(x), sat);
            if (fp8_is_flushed(x, f) != flush)
                mismatch(&c, "%s flushed(0x%08X) != %d", fp8_format_name(f), bits_of(x), flush);
        }
        check(&c,
              !fp8_is_saturated(nextafterf(fmax, 1e30f), f) &&
                  fp8_is_saturated(threshold, f) == tie_saturates &&
                  fp8_is_saturated(nextafterf(threshold, 1e30f), f),
              "saturation edge");
        // the definition agrees with the conversion: below the threshold a value rounds to a finite
        // code at most the max, from it on (E5M2) it would not
        check(&c, fp8_to_float(fp8_from_float(nextafterf(threshold, 0.0f), f), f) == fmax,
              "threshold rounds to max");
        check(&c, fp8_is_flushed(half_min, f) && !fp8_is_flushed(nextafterf(half_min, 1.0f), f),
              "flush edge");
    }
    case_end(&c);
}

static void test_quantize(void) {
    Case c = case_begin("fp8_quantize / fp8_quantize_value == CUDA(x * scale) (10^6 random), subnormal x");
    uint64_t rng = 12345;
    for (int i = 0; i < 1000000; i++) {
        const Fp8Format f = (Fp8Format)(i & 1);
        const float x = float_of((uint32_t)splitmix64(&rng));
        const float scale = random_positive(&rng, -20, 21);
        const uint8_t ref = cuda_fp8_from_float(x * scale, f);
        const uint8_t got = fp8_quantize(x, scale, f);
        if (got != ref)
            mismatch(&c, "x=0x%08X scale=0x%08X: ours 0x%02X, cuda 0x%02X", bits_of(x), bits_of(scale), got,
                     ref);
        const float val = fp8_quantize_value(x, scale, f), ref_val = cuda_fp8_to_float(ref, f);
        if (bits_of(val) != bits_of(ref_val))
            mismatch(&c, "value of x=0x%08X scale=0x%08X", bits_of(x), bits_of(scale));
    }
    case_end(&c);
}

// ---------------------------------------------------------------------------------------------------------
// Scaling.

static void test_scale_degenerate(void) {
    Case c = case_begin("fp8_compute_scale: amax 0 / negative / NaN / inf -> 1");
    const float bad[] = {0.0f,
                         -0.0f,
                         -1.0f,
                         -1e-30f,
                         float_of(0x7FC00000u),
                         float_of(0xFFC00000u),
                         float_of(0x7F800001u),
                         float_of(0x7F800000u),
                         float_of(0xFF800000u)};
    for (int fi = 0; fi < 2; fi++) {
        for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
            for (int margin = -2; margin <= 3; margin++) {
                const float s = fp8_compute_scale(bad[k], (Fp8Format)fi, margin);
                if (s != 1.0f) mismatch(&c, "amax 0x%08X margin %d: scale %g", bits_of(bad[k]), margin, s);
            }
        }
    }
    case_end(&c);
}

// Reference: float division is correctly rounded by double division then rounding to float (53 >= 2*24+2
// bits, so the double rounding is harmless), and the power-of-two multiply is exact in double.
static float reference_scale(float amax, Fp8Format f, int margin) {
    const float flt_max = float_of(0x7F7FFFFFu), flt_min = float_of(0x00800000u);
    float q = (float)((double)fp8_max_finite(f) / (double)amax);
    if (isinf(q)) q = flt_max;
    const float s = (float)((double)q * ldexp(1.0, -margin));
    if (isinf(s)) return flt_max;
    if (s < flt_min) return flt_min;
    return s;
}

static void test_scale_exact(void) {
    Case c = case_begin(
        "fp8_compute_scale == fmax/amax * 2^-margin exactly, amax*scale <= fmax*2^-margin (1 ulp)");
    uint64_t rng = 777;
    for (int i = 0; i < 2000000; i++) {
        const Fp8Format f = (Fp8Format)(i & 1);
        const int margin = (int)(splitmix64(&rng) % 5);
        // Amax over magnitudes a tensor can plausibly have, where no clamp applies.
        const float amax = random_positive(&rng, -40, 41);
        const float s = fp8_compute_scale(amax, f, margin);
        const float ref = reference_scale(amax, f, margin);
        if (bits_of(s) != bits_of(ref))
            mismatch(&c, "amax 0x%08X margin %d: ours 0x%08X, reference 0x%08X", bits_of(amax), margin,
                     bits_of(s), bits_of(ref));
        const float target = ldexpf(fp8_max_finite(f), -margin);
        if ((double)amax * (double)s > (double)nextafterf(target, 1e30f))
            mismatch(&c, "amax 0x%08X margin %d: amax*scale %.9g exceeds %g by more than 1 ulp",
                     bits_of(amax), margin, (double)amax * (double)s, target);
        // The scaled amax must still land on (or next to) the largest fp8 value, never saturate by more.
        if (margin == 0 && fp8_from_float(amax * s, f) != fp8_max_code(f))
            mismatch(&c, "amax 0x%08X: scaled amax is not the max code", bits_of(amax));
    }
    case_end(&c);
}

static void test_scale_clamps(void) {
    Case c = case_begin("fp8_compute_scale clamps to [FLT_MIN, FLT_MAX], margin clamped");
    const float flt_max = float_of(0x7F7FFFFFu), flt_min = float_of(0x00800000u);
    check(&c, fp8_compute_scale(float_of(1u), FP8_E4M3, 0) == flt_max, "smallest subnormal amax -> FLT_MAX");
    check(&c, fp8_compute_scale(1e-37f, FP8_E5M2, 0) == flt_max, "tiny amax -> FLT_MAX");
    check(&c, fp8_compute_scale(1e-37f, FP8_E5M2, -10) == flt_max, "tiny amax, negative margin -> FLT_MAX");
    check(&c, fp8_compute_scale(flt_max, FP8_E4M3, 20) == flt_min, "huge amax with margin -> FLT_MIN, not 0");
    check(&c, fp8_compute_scale(flt_max, FP8_E4M3, 0) == reference_scale(flt_max, FP8_E4M3, 0),
          "FLT_MAX amax");
    check(&c, fp8_compute_scale(1.0f, FP8_E4M3, 1000) == reference_scale(1.0f, FP8_E4M3, 126),
          "margin 1000 -> 126");
    check(&c, fp8_compute_scale(1.0f, FP8_E4M3, -1000) == flt_max,
          "margin -1000 -> -126, overflow -> FLT_MAX");
    check(&c, fp8_compute_scale(448.0f, FP8_E4M3, 0) == 1.0f, "amax 448 e4m3 -> 1");
    check(&c, fp8_compute_scale(1.0f, FP8_E5M2, 2) == 14336.0f, "amax 1 e5m2 margin 2 -> 57344/4");
    // Random amax over the whole positive float range (subnormals included) still never gives 0 or inf.
    uint64_t rng = 99;
    for (int i = 0; i < 1000000; i++) {
        const float amax = float_of((uint32_t)(splitmix64(&rng) % 0x7F800000u) + 1u);
        const int margin = (int)(splitmix64(&rng) % 41) - 20;
        const float s = fp8_compute_scale(amax, (Fp8Format)(i & 1), margin);
        if (!(s >= flt_min && s <= flt_max))
            mismatch(&c, "amax 0x%08X margin %d: scale %g", bits_of(amax), margin, s);
        if (s != reference_scale(amax, (Fp8Format)(i & 1), margin))
            mismatch(&c, "amax 0x%08X margin %d: scale %g != reference", bits_of(amax), margin, s);
    }
    case_end(&c);
}

static void test_history_max(void) {
    Case c = case_begin("fp8_history_max");
    const float h[6] = {1.0f, 5.0f, float_of(0x7FC00000u), -7.0f, 3.0f, 0.0f};
    check(&c, fp8_history_max(h, 6) == 5.0f, "max, NaN and negatives skipped");
    const float hinf[3] = {2.0f, float_of(0x7F800000u), 1.0f};
    check(&c, fp8_history_max(hinf, 3) == 2.0f, "inf skipped");
    check(&c, fp8_history_max(h, 1) == 1.0f, "length 1");
    check(&c, fp8_history_max(h, 0) == 0.0f, "empty -> 0");
    check(&c, fp8_history_max(h + 2, 2) == 0.0f, "only NaN / negative -> 0");
    case_end(&c);
}

static void test_delayed_update(void) {
    Case c = case_begin("fp8_delayed_update: ring of history_len steps, window max, amax_current reset");
    enum { LEN = 4, STEPS = 40 };
    float hist[LEN] = {0};
    float seen[STEPS];
    float scale = 1.0f;
    uint64_t rng = 4242;
    for (long step = 0; step < STEPS; step++) {
        // A spike every 10 steps, to see it dominate for exactly LEN steps and then fall out.
        float amax = (step % 10 == 3) ? 1000.0f : random_positive(&rng, -2, 3);
        seen[step] = amax;
        float cur = amax;
        fp8_delayed_update(hist, LEN, step, &cur, &scale, FP8_E4M3, 1);
        float window = 0.0f;
        for (long k = step - LEN + 1; k <= step; k++)
            if (k >= 0 && seen[k] > window) window = seen[k];
        char what[96];
        snprintf(what, sizeof what, "step %ld: scale from max of last %d amaxes", step, LEN);
        check(&c, scale == fp8_compute_scale(window, FP8_E4M3, 1), what);
        check(&c, cur == 0.0f, "amax_current reset to 0");
        check(&c, hist[step % LEN] == amax, "amax stored in slot step % history_len");
        const int spike_in_window = (step % 10) >= 3 && (step % 10) < 3 + LEN;
        check(&c, (scale == fp8_compute_scale(1000.0f, FP8_E4M3, 1)) == spike_in_window,
              "spike lives LEN steps");
    }
    // Before any measurement the history is zeros and the scale is 1.
    float fresh[LEN] = {0}, zero = 0.0f, s0 = 123.0f;
    fp8_delayed_update(fresh, LEN, 0, &zero, &s0, FP8_E5M2, 0);
    check(&c, s0 == 1.0f, "all-zero history -> scale 1");
    // No ring: the scale follows the current amax.
    float cur = 2.0f, s1 = 0.0f;
    fp8_delayed_update(NULL, 0, 5, &cur, &s1, FP8_E5M2, 0);
    check(&c, s1 == 28672.0f && cur == 0.0f, "history_len 0 -> scale from amax_current");
    // A NaN amax does not poison the window.
    float h2[2] = {4.0f, 0.0f}, nan_amax = float_of(0x7FC00000u), s2 = 0.0f;
    fp8_delayed_update(h2, 2, 1, &nan_amax, &s2, FP8_E4M3, 0);
    check(&c, s2 == 112.0f, "NaN amax skipped: scale from the other entries");
    case_end(&c);
}

// Never launched: makes nvcc compile and warning-check the device side of every function in the header.
__global__ void fp8_device_compile_check(const float *x, uint8_t *codes, float *out, float *hist, float *cur,
                                         float *scale) {
    const Fp8Format f = fp8_role_format(FP8_RECIPE_DELAYED, FP8_ROLE_GRAD_OUTPUT);
    codes[0] = fp8_from_float(x[0], f);
    codes[1] = fp8_quantize(x[1], scale[0], FP8_E4M3);
    out[0] = fp8_to_float(codes[0], f) + fp8_round(x[2], f) + fp8_quantize_value(x[3], scale[0], f);
    out[1] =
        bf16_round(x[4]) + bf16_to_float(bf16_from_float(x[5])) + fp8_max_finite(f) + fp8_min_subnormal(f);
    out[2] = (float)(fp8_is_saturated(x[6], f) + fp8_is_flushed(x[7], f)) + fp8_history_max(hist, 4);
    out[3] = fp8_compute_scale(x[8], FP8_E4M3, 2);
    fp8_delayed_update(hist, 4, 7, cur, scale, FP8_E4M3, 0);
    codes[2] = (uint8_t)fp8_format_name(f)[0];
}

int main(void) {
    test_special_values();
    test_format_constants();
    test_fp8_to_float_all_codes(FP8_E4M3);
    test_fp8_to_float_all_codes(FP8_E5M2);
    test_fp8_roundtrip(FP8_E4M3);
    test_fp8_roundtrip(FP8_E5M2);
    test_bf16_to_float_all();
    test_saturated_flushed();
    test_quantize();
    test_scale_degenerate();
    test_scale_exact();
    test_scale_clamps();
    test_history_max();
    test_delayed_update();
    test_from_float_all_f32();
    printf("%d passed, %d failed\n", g_passed, g_failed);
    return g_failed ? 1 : 0;
}

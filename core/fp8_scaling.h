// core/fp8_scaling.h: FP8 / BF16 number formats and per-tensor FP8 scaling, shared by the CPU reference
// trainer (plain C) and the CUDA trainer (host and device code), so both quantize every value to the same
// bits.
//
// The formats (OCP FP8, as implemented by CUDA's cuda_fp8.h):
//   E4M3: 1 sign, 4 exponent (bias 7), 3 mantissa bits. No infinities; only S.1111.111 (0x7F/0xFF) is NaN,
//         which frees S.1111.000-110 for finite values: max finite 1.75 * 2^8 = 448. Smallest normal 2^-6,
//         subnormals 0.mmm * 2^-6, smallest subnormal 2^-9. More precision, less range: weights, activations.
//   E5M2: 1 sign, 5 exponent (bias 15), 2 mantissa bits, IEEE-like: exponent 11111 is inf (mantissa 0) or
//         NaN. Max finite 1.75 * 2^15 = 57344, smallest normal 2^-14, smallest subnormal 2^-16. More range,
//         less precision: gradients, whose magnitudes spread over many more binades.
//   BF16: the top 16 bits of a float32 (8 exponent bits, 7 mantissa bits), so float32 range.
//
// The conversions are written with integer operations on the bit patterns only. That makes them
// bit-identical on the host and on the device whatever the compiler's float settings (-ffast-math,
// --use_fast_math, flush-to-zero), and bit-identical to the host paths of cuda_fp8.h (saturating mode)
// and cuda_bf16.h, which test/test_fp8_convert.cu checks over every float32 input.
#ifndef FP8_SCALING_H
#define FP8_SCALING_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define FP8_HD __host__ __device__
#else
#define FP8_HD
#endif
// What C++ can evaluate at compile time (a kernel's tile size from the recipe table), plain C at run time.
#ifdef __cplusplus
#define FP8_CONSTEXPR constexpr
#else
#define FP8_CONSTEXPR
#endif

typedef enum { FP8_E4M3 = 0, FP8_E5M2 = 1 } Fp8Format;

// ---------------------------------------------------------------------------------------------------------
// Bit casts. memcpy is the portable C idiom; device code uses the intrinsics, which cost nothing.

FP8_HD static inline uint32_t fp8_f32_to_bits(float x) {
#ifdef __CUDA_ARCH__
    return __float_as_uint(x);
#else
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
#endif
}

FP8_HD static inline float fp8_bits_to_f32(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
#endif
}

// Every quiet NaN that CUDA's host conversions produce, whatever the input NaN's sign and payload.
#define FP8_CANONICAL_NAN_BITS 0x7FFFFFFFu
#define FP8_FLT_MAX_BITS 0x7F7FFFFFu
#define FP8_FLT_MIN_BITS 0x00800000u

// ---------------------------------------------------------------------------------------------------------
// Format parameters (switches rather than tables, so that device code needs no global memory).

FP8_HD static inline int fp8_mantissa_bits(Fp8Format f) {
    return f == FP8_E4M3 ? 3 : 2;
}

FP8_HD static inline int fp8_exponent_bias(Fp8Format f) {
    return f == FP8_E4M3 ? 7 : 15;
}

// Largest finite code (positive sign).
FP8_HD static inline uint8_t fp8_max_code(Fp8Format f) {
    return f == FP8_E4M3 ? 0x7E : 0x7B;
}

FP8_HD static inline float fp8_max_finite(Fp8Format f) {
    return f == FP8_E4M3 ? 448.0f : 57344.0f;
}

FP8_HD static inline float fp8_min_subnormal(Fp8Format f) {
    return f == FP8_E4M3 ? 0.001953125f /* 2^-9 */ : 0.0000152587890625f /* 2^-16 */;
}

FP8_HD static inline const char *fp8_format_name(Fp8Format f) {
    return f == FP8_E4M3 ? "e4m3" : "e5m2";
}

// ---------------------------------------------------------------------------------------------------------
// Conversions.

// Round to nearest, ties to even, saturating: finite values beyond the largest code and infinities become
// +-max finite (an E5M2 infinity or an E4M3 NaN in the middle of a GEMM would poison the whole output).
// Any NaN becomes 0x7F with the sign dropped, as CUDA's host conversion does (it canonicalizes the NaN
// before converting); that code is NaN in both formats.
FP8_HD static inline uint8_t fp8_from_float(float x, Fp8Format f) {
    const uint32_t u = fp8_f32_to_bits(x);
    const uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    const uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return 0x7F;

    const int mbits = fp8_mantissa_bits(f);
    const int bias = fp8_exponent_bias(f);
    const int e = (int)(a >> 23) - 127; // unbiased float exponent
    const int emin = 1 - bias;          // exponent of the smallest fp8 normal
    // Below half the smallest subnormal everything rounds to zero; this also keeps the shift below in
    // range and takes float32 subnormals (whose implicit bit is 0) out of the general path.
    if (e < emin - mbits - 1) return sign;
    // Past the binade of the largest finite value everything saturates; infinities land here too. (Values
    // in that binade above the max are clamped after rounding.)
    if (e > bias + 1) return (uint8_t)(sign | fp8_max_code(f));

    // Count the value in units of the fp8 quantum at its exponent (fixed 2^(emin - mbits) for subnormals)
    // and round that integer. A carry out of the mantissa moves into the exponent field by itself.
    const uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
    const int e_eff = e > emin ? e : emin;
    const int shift = 23 - mbits + (e_eff - e); // 20..24
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u))) r++;
    // Subnormals have e_eff + bias - 1 == 0, so r is the code; normals have the implicit bit of r add the
    // missing 1 to the exponent field.
    uint32_t code = ((uint32_t)(e_eff + bias - 1) << mbits) + r;
    if (code > fp8_max_code(f)) code = fp8_max_code(f);
    return (uint8_t)(sign | code);
}

// NaN codes give the canonical NaN 0x7FFFFFFF (sign dropped), as CUDA's fp8 -> half -> float path does.
FP8_HD static inline float fp8_to_float(uint8_t v, Fp8Format f) {
    const uint32_t sign = (uint32_t)(v & 0x80u) << 24;
    const int mbits = fp8_mantissa_bits(f);
    const int bias = fp8_exponent_bias(f);
    const uint32_t ebits = (uint32_t)(v & 0x7Fu) >> mbits;
    uint32_t man = v & ((1u << mbits) - 1u);
    if (f == FP8_E4M3) {
        if ((v & 0x7Fu) == 0x7Fu) return fp8_bits_to_f32(FP8_CANONICAL_NAN_BITS);
    } else if (ebits == 0x1Fu) {
        return fp8_bits_to_f32(man ? FP8_CANONICAL_NAN_BITS : (sign | 0x7F800000u));
    }
    if (ebits == 0) {
        if (man == 0) return fp8_bits_to_f32(sign);
        // Subnormal: normalize so the leading 1 becomes the implicit bit of the float.
        int e = 1 - bias;
        while (!(man & (1u << mbits))) {
            man <<= 1;
            e--;
        }
        man &= (1u << mbits) - 1u;
        return fp8_bits_to_f32(sign | ((uint32_t)(e + 127) << 23) | (man << (23 - mbits)));
    }
    return fp8_bits_to_f32(sign | ((uint32_t)((int)ebits - bias + 127) << 23) | (man << (23 - mbits)));
}

FP8_HD static inline float fp8_round(float x, Fp8Format f) {
    return fp8_to_float(fp8_from_float(x, f), f);
}

// fp8_round's value computed in the float domain with selects instead of branches, so that the CPU
// trainer's bulk casts vectorise: in the normal range round to nearest even on the dropped mantissa bits
// (a carry moves into the exponent by itself), in the subnormal range let the FPU's own round to nearest
// even snap the value to the fixed grid of 2^(emin - mbits) (adding and removing 2^(emin - mbits + 23)),
// then saturate at the largest finite value. Equal to fp8_round on every one of the 2^32 floats
// (test/test_cpu_kernels.c). Host code; the GPU converts with the hardware.
static inline float fp8_round_value(float x, Fp8Format f) {
    const int mbits = fp8_mantissa_bits(f), emin = 1 - fp8_exponent_bias(f), dropped = 23 - mbits;
    const uint32_t u = fp8_f32_to_bits(x), sign = u & 0x80000000u, a = u ^ sign;
    const uint32_t normal =
        (a + (1u << (dropped - 1)) - 1u + ((a >> dropped) & 1u)) & ~((1u << dropped) - 1u);
    const float grid = fp8_bits_to_f32((uint32_t)(emin - mbits + 23 + 127) << 23);
    const float subnormal = (fp8_bits_to_f32(a) + grid) - grid;
    const float rounded = fp8_bits_to_f32(normal),
                max = fp8_max_finite(f); // a compare, not fminf: no libm call
    const float magnitude = a < ((uint32_t)(emin + 127) << 23) ? subnormal : rounded > max ? max : rounded;
    return fp8_bits_to_f32(a > 0x7F800000u ? FP8_CANONICAL_NAN_BITS : fp8_f32_to_bits(magnitude) | sign);
}

// Round to nearest even on the dropped 16 bits. Finite values past the largest bf16 round to inf, as IEEE
// does; any NaN becomes 0x7FFF, CUDA's canonical bf16 NaN.
FP8_HD static inline uint16_t bf16_from_float(float x) {
    const uint32_t u = fp8_f32_to_bits(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FFF;
    // Adding just under half an ulp, plus one when the kept part is odd, carries exactly when RNE rounds up.
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

FP8_HD static inline float bf16_to_float(uint16_t v) {
    return fp8_bits_to_f32((uint32_t)v << 16);
}

FP8_HD static inline float bf16_round(float x) {
    return bf16_to_float(bf16_from_float(x));
}

// ---------------------------------------------------------------------------------------------------------
// Per-tensor scaling.
//
// A tensor is quantized as fp8(x * scale) and its products are divided by the scales afterwards. The scale
// maps the tensor's absolute maximum (amax) onto the largest fp8 value, less a margin of 2^margin headroom:
// the full range of the format is used without saturating. DELAYED takes the amax from a history of past
// steps (no extra pass over the data, but a sudden growth saturates until the history catches up); CURRENT
// measures the amax of the tensor itself just before quantizing it.

// BLOCKWISE and MXFP8 scale blocks of a tensor instead of the whole (see "Block scaling" below), of these
// sizes (cuBLASLt's block-scaled GEMMs' own).
#define FP8_BLOCKWISE_TILE 128
#define FP8_MX_BLOCK 32

// The recipes, one row each: every property the trainers, the CLI and the refusals read of a recipe.
//   id, name        FP8_RECIPE_<id>, and --fp8_recipe's value (the rows' order is the values' order, which
//                   state files store)
//   tile            elements per scale along the reduction dimension of the GEMM that reads an activation or
//                   gradient: 0 per tensor, else 1 x tile blocks
//   weight_rows     a weight block's rows: tile (square blocks, which serve both GEMMs that read the weight)
//                   or 1 (1-D tiles, so the weight is cast once per GEMM); 0 per tensor
//   scale_format    the format of the factors the GEMM reads: FP32, or E8M0 (powers of two)
//   amax            where an activation's or gradient's scale comes from: a history of past steps, or the
//                   tensor itself, measured before its cast
//   grad_format     the output gradient's FP8 format (inputs and weights are E4M3 in every recipe)
//   fast_accum      whether --fp8_fast_accum applies to its GEMMs (block-scaled GEMMs promote the partial
//                   sums to FP32 at every block, so they have no fast accumulation)
//   min_cc, max_cc  the compute capabilities (10 major + minor) whose cuBLASLt runs the recipe's GEMMs;
//                   max_cc 0: no upper bound
//   cublaslt        the oldest cuBLASLt (10000 major + 100 minor) with those GEMMs; 0: any
//   gemms, gpu      what a refusal names: the GEMMs, and the GPUs they run on
#define FP8_RECIPES(X)                                                                                       \
    X(DELAYED, "delayed", 0, 0, FP8_SCALE_FP32, FP8_AMAX_HISTORY, FP8_E5M2, 1, 89, 0, 0, "FP8 GEMMs",        \
      "FP8 tensor cores")                                                                                    \
    X(CURRENT, "current", 0, 0, FP8_SCALE_FP32, FP8_AMAX_CURRENT, FP8_E5M2, 1, 89, 0, 0, "FP8 GEMMs",        \
      "FP8 tensor cores")                                                                                    \
    X(BLOCKWISE, "blockwise", FP8_BLOCKWISE_TILE, FP8_BLOCKWISE_TILE, FP8_SCALE_FP32, FP8_AMAX_CURRENT,      \
      FP8_E5M2, 0, 90, 99, 120900, "block-scaled GEMMs (1x128/128x128)", "Hopper")                           \
    X(MXFP8, "mxfp8", FP8_MX_BLOCK, 1, FP8_SCALE_E8M0, FP8_AMAX_CURRENT, FP8_E4M3, 0, 100, 0, 120900,        \
      "MXFP8 GEMMs (VEC32_UE8M0)", "Blackwell")

typedef enum { FP8_SCALE_FP32 = 0, FP8_SCALE_E8M0 = 1 } Fp8ScaleFormat;
typedef enum { FP8_AMAX_HISTORY = 0, FP8_AMAX_CURRENT = 1 } Fp8AmaxSource;

#define FP8_RECIPE_ENUM(id, ...) FP8_RECIPE_##id,
typedef enum { FP8_RECIPES(FP8_RECIPE_ENUM) FP8_RECIPE_COUNT } Fp8Recipe;
#undef FP8_RECIPE_ENUM

typedef struct {
    const char *name;
    int tile, weight_rows;
    Fp8ScaleFormat scale_format;
    Fp8AmaxSource amax;
    Fp8Format grad_format;
    int fast_accum;
    int min_cc, max_cc, cublaslt;
    const char *gemms, *gpu;
} Fp8RecipeInfo;

// A recipe's row. A switch rather than an array, so that device code needs no global memory; a value no
// row has reads as the first row (the CLI and the state files only ever hold the rows' values).
#define FP8_RECIPE_CASE(id, ...)                                                                             \
    case FP8_RECIPE_##id: {                                                                                  \
        const Fp8RecipeInfo row = {__VA_ARGS__};                                                             \
        return row;                                                                                          \
    }
FP8_HD static inline FP8_CONSTEXPR Fp8RecipeInfo fp8_recipe(int recipe) {
    switch (recipe) {
    default:
        FP8_RECIPES(FP8_RECIPE_CASE)
    }
}
#undef FP8_RECIPE_CASE

// --fp8_recipe's choices, "delayed|current|...": each row adds "|" and its name, and the first "|" is
// skipped.
#define FP8_RECIPE_CHOICE(id, name, ...) "|" name
#define FP8_RECIPE_CHOICES (&(FP8_RECIPES(FP8_RECIPE_CHOICE))[1])

static inline const char *fp8_recipe_name(int recipe) {
    return fp8_recipe(recipe).name;
}

// Per-tensor recipes scale a whole tensor at once; block recipes scale each block (see "Block scaling").
FP8_HD static inline int fp8_recipe_is_block(int recipe) {
    return fp8_recipe(recipe).tile != 0;
}

// Delayed scaling: an activation's or gradient's scale comes from the amaxes of past steps, recorded as the
// casts run; the other recipes measure each tensor (or block) just before casting it.
FP8_HD static inline int fp8_recipe_uses_history(int recipe) {
    return fp8_recipe(recipe).amax == FP8_AMAX_HISTORY;
}

// Roles of the FP8 operands of a linear layer. The hybrid recipes: forward operands need precision (E4M3),
// gradients need range (E5M2). MXFP8 is E4M3 throughout (the OCP format; each 32-element block has its own
// scale, so gradients need no extra range).
typedef enum { FP8_ROLE_INPUT = 0, FP8_ROLE_WEIGHT = 1, FP8_ROLE_GRAD_OUTPUT = 2 } Fp8Role;

FP8_HD static inline Fp8Format fp8_role_format(int recipe, Fp8Role r) {
    return r == FP8_ROLE_GRAD_OUTPUT ? fp8_recipe(recipe).grad_format : FP8_E4M3;
}

// 2^k as a float, exactly, for k in [-126, 127] (a normal float, so built from its exponent field alone).
FP8_HD static inline float fp8_pow2(int k) {
    if (k < -126) k = -126;
    if (k > 127) k = 127;
    return fp8_bits_to_f32((uint32_t)(k + 127) << 23);
}

// scale = (fmax / amax) * 2^-margin: one correctly rounded division and one multiplication, so the host
// and the device agree bit for bit (the device spells them as _rn intrinsics so that --use_fast_math's
// approximate division cannot change them). An amax that is zero, negative, NaN or infinite carries no
// information (an all-zero tensor, an empty history, a diverged step) and gives 1. The result is clamped to
// [FLT_MIN, FLT_MAX]: a tiny amax would overflow the scale to inf (and inf * 0 = NaN), and a subnormal
// scale (amax above ~1e36 * 2^-margin) would be flushed to zero by flush-to-zero device code. margin is
// clamped to [-126, 126].
FP8_HD static inline float fp8_compute_scale(float amax, Fp8Format f, int margin) {
    const uint32_t u = fp8_f32_to_bits(amax);
    // Bit tests rather than isnan/isinf, which -ffinite-math-only is free to fold away.
    if (u == 0 || (u & 0x80000000u) || u >= 0x7F800000u) return 1.0f;
    if (margin > 126) margin = 126;
    if (margin < -126) margin = -126;
#ifdef __CUDA_ARCH__
    float q = __fdiv_rn(fp8_max_finite(f), amax);
    if (fp8_f32_to_bits(q) > FP8_FLT_MAX_BITS) q = fp8_bits_to_f32(FP8_FLT_MAX_BITS);
    float s = __fmul_rn(q, fp8_pow2(-margin));
#else
    float q = fp8_max_finite(f) / amax;
    if (fp8_f32_to_bits(q) > FP8_FLT_MAX_BITS) q = fp8_bits_to_f32(FP8_FLT_MAX_BITS);
    float s = q * fp8_pow2(-margin);
#endif
    const uint32_t sb = fp8_f32_to_bits(s);
    if (sb > FP8_FLT_MAX_BITS) return fp8_bits_to_f32(FP8_FLT_MAX_BITS);
    if (sb < FP8_FLT_MIN_BITS) return fp8_bits_to_f32(FP8_FLT_MIN_BITS);
    return s;
}

// Largest entry of the history. NaN, infinite and negative entries are skipped, so that one diverged step
// does not pin the scale at 1 for the next history_len steps (the trainer detects a NaN loss on its own).
// An empty history (all zeros, or history_len <= 0) gives 0, which fp8_compute_scale maps to 1. The
// comparison is on bit patterns, which order non-negative floats like their values and cannot be changed
// by -ffinite-math-only (a float compare there may let a NaN through, differently on host and device).
FP8_HD static inline float fp8_history_max(const float *amax_history, int history_len) {
    uint32_t m = 0;
    for (int i = 0; i < history_len; i++) {
        const uint32_t u = fp8_f32_to_bits(amax_history[i]);
        if (u < 0x7F800000u && u > m) m = u; // also rejects the sign bit
    }
    return fp8_bits_to_f32(m);
}

// A ring slot no step has written yet: a fresh run's histories, and what a skipped first step leaves. A
// history of nothing else is empty (fp8_history_empty): the tensor has never been cast in an applied step,
// and the delayed recipe measures it before casting it instead of casting it blind with scale 1 (at
// llm.c-size batches, dloss ~ 2e-6, nearly every E5M2 code of a first backward cast with scale 1 would be
// zero). Checkpoints keep these slots, so a resumed run knows which tensors have a history. Negative, so
// fp8_history_max skips it.
#define FP8_AMAX_UNRECORDED (-1.0f)
#define FP8_AMAX_UNRECORDED_BITS 0xBF800000u

FP8_HD static inline int fp8_history_empty(const float *amax_history, int history_len) {
    for (int i = 0; i < history_len; i++)
        if (fp8_f32_to_bits(amax_history[i]) != FP8_AMAX_UNRECORDED_BITS) return 0;
    return 1;
}

// ---------------------------------------------------------------------------------------------------------
// Block scaling.
//
// BLOCKWISE (DeepSeek-V3): one FP32 scale per 1 x 128 tile of activations and gradients along the reduction
// dimension of the GEMM that reads them, and per 128 x 128 block of weights, from the block's own amax.
// MXFP8 (OCP microscaling): one E8M0 (power-of-two) scale per 32 elements along the reduction dimension, for
// every operand. Each GEMM reduces over another dimension (forward over the input features, data gradient
// over the output features, weight gradient over the tokens), so an activation is cast twice (tiles along
// its features for the forward, along the tokens for the weight gradient), an output gradient twice likewise,
// and an MXFP8 weight twice (along the input features, along the output features); BLOCKWISE's square weight
// blocks serve both of its GEMMs. The GEMM multiplies each block's products by the two blocks' dequantization
// factors (1/scale). Every block is measured: no history.

FP8_HD static inline FP8_CONSTEXPR int fp8_block_size(int recipe) {
    return fp8_recipe(recipe).tile;
}

// The casts of a weight: one, whose scale (per tensor) or square blocks serve both GEMMs that read it (the
// forward and the data gradient); or, in 1-D tiles, one per GEMM, along the reduction dimension of each.
FP8_HD static inline int fp8_weight_casts(int recipe) {
    const Fp8RecipeInfo r = fp8_recipe(recipe);
    return r.weight_rows == r.tile ? 1 : 2;
}

// The largest power of two at or below a positive normal float: its exponent field alone.
FP8_HD static inline float fp8_pow2_floor(float x) {
    return fp8_bits_to_f32(fp8_f32_to_bits(x) & 0x7F800000u);
}

// The quantization scale of a block whose amax is `amax` (elements are cast as fp8(x * scale)):
// fp8_compute_scale, and for MXFP8, or BLOCKWISE with pow2 (--fp8_pow2_scales), the power of two at or below
// it, so that dequantizing is exact. Rounding down keeps amax * scale <= fmax: nothing saturates. (The OCP
// spec's reference rule, 2^(floor(log2 amax) - emax), saturates a block's values in [fmax, 2^(emax+1)) x its
// factor; ours gives up that half binade of range instead.) MXFP8 keeps the scale <= 2^126, so that its
// dequantization factor 2^-k is a normal float (an E8M0 code of 1 or more).
FP8_HD static inline float fp8_block_scale(float amax, int recipe, Fp8Format f, int margin, int pow2) {
    const int e8m0 = fp8_recipe(recipe).scale_format == FP8_SCALE_E8M0;
    float scale = fp8_compute_scale(amax, f, margin);
    if (e8m0 || pow2) scale = fp8_pow2_floor(scale);
    if (e8m0 && scale > fp8_pow2(126)) scale = fp8_pow2(126);
    return scale;
}

// The dequantization factor the GEMM multiplies by: 1/scale, correctly rounded on host and device alike
// (exact for a power of two).
FP8_HD static inline float fp8_block_descale(float scale) {
#ifdef __CUDA_ARCH__
    return __frcp_rn(scale);
#else
    return 1.0f / scale;
#endif
}

// Where cuBLASLt's block-scaled GEMMs (Hopper, cuBLAS 12.9+) read a K-major operand's dequantization
// factors, for the operand stored row-major as (rows, K), reduced over K: 1 x 128 tiles (VEC128_32F) are
// laid out tile column by tile column, each padded to a multiple of 4 rows (16 bytes); 128 x 128 blocks
// (BLK128x128_32F) block row by block row, each padded to a multiple of 4 blocks. (Transformer Engine's
// "GEMM-ready" layouts, which it hands to cuBLASLt unchanged.)
FP8_HD static inline size_t fp8_round_up4(size_t x) {
    return (x + 3) / 4 * 4;
}

FP8_HD static inline size_t fp8_tile_factors(size_t rows, size_t K) {
    return K / FP8_BLOCKWISE_TILE * fp8_round_up4(rows);
}

FP8_HD static inline size_t fp8_tile_factor_index(size_t rows, size_t row, size_t k_tile) {
    return k_tile * fp8_round_up4(rows) + row;
}

FP8_HD static inline size_t fp8_square_factors(size_t rows, size_t K) {
    return (rows + FP8_BLOCKWISE_TILE - 1) / FP8_BLOCKWISE_TILE * fp8_round_up4(K / FP8_BLOCKWISE_TILE);
}

FP8_HD static inline size_t fp8_square_factor_index(size_t K, size_t row, size_t k_tile) {
    return row / FP8_BLOCKWISE_TILE * fp8_round_up4(K / FP8_BLOCKWISE_TILE) + k_tile;
}

// MXFP8 (Blackwell, VEC32_UE8M0): one E8M0 byte per 1 x 32 block of the operand (rows, K), in tiles of 128
// rows x 4 blocks (512 bytes), the tiles row-tile by row-tile with the K tiles contiguous, each tile
// interleaved: row r's block b at (r % 32) * 16 + (r % 128 / 32) * 4 + b % 4. Rows pad to 128, blocks to 4.
FP8_HD static inline size_t fp8_mx_tiles_along_k(size_t K) {
    return (K / FP8_MX_BLOCK + 3) / 4;
}

FP8_HD static inline size_t fp8_mx_factors(size_t rows, size_t K) {
    return (rows + 127) / 128 * fp8_mx_tiles_along_k(K) * 512;
}

FP8_HD static inline size_t fp8_mx_factor_index(size_t K, size_t row, size_t block) {
    size_t tile = row / 128 * fp8_mx_tiles_along_k(K) + block / 4;
    return tile * 512 + row % 32 * 16 + row % 128 / 32 * 4 + block % 4;
}

// Bytes of the dequantization factors of an operand (rows, K) cast in the recipe's 1-D tiles along K, and of
// a weight (rows, K) (BLOCKWISE: its 128 x 128 blocks; MXFP8: 1-D tiles as well).
FP8_HD static inline size_t fp8_tile_factor_bytes(int recipe, size_t rows, size_t K) {
    return fp8_recipe(recipe).scale_format == FP8_SCALE_E8M0 ? fp8_mx_factors(rows, K)
                                                             : fp8_tile_factors(rows, K) * sizeof(float);
}

FP8_HD static inline size_t fp8_weight_factor_bytes(int recipe, size_t rows, size_t K) {
    return fp8_weight_casts(recipe) == 1 ? fp8_square_factors(rows, K) * sizeof(float)
                                         : fp8_tile_factor_bytes(recipe, rows, K);
}

// E8M0, the MX scale format: eight exponent bits, value 2^(code - 127); code 0xFF is NaN. A power-of-two
// factor 2^k, k in [-126, 127], has its float exponent field as its code.
#define FP8_E8M0_NAN 0xFFu

FP8_HD static inline uint8_t fp8_e8m0_from_pow2(float pow2) {
    return (uint8_t)(fp8_f32_to_bits(pow2) >> 23);
}

FP8_HD static inline float fp8_e8m0_to_float(uint8_t code) {
    if (code == FP8_E8M0_NAN) return fp8_bits_to_f32(FP8_CANONICAL_NAN_BITS);
    if (code == 0) return fp8_bits_to_f32(0x00400000u); // 2^-127, a float subnormal
    return fp8_bits_to_f32((uint32_t)code << 23);
}

// Called once per optimizer step after all of its micro-batches: the amax measured during `step` (the max
// over its micro-batches, in *amax_current) replaces the value recorded history_len steps ago in ring slot
// step % history_len, the scale for the next step becomes fp8_compute_scale of the window's max, and
// *amax_current is reset for the next step's measurement. With history_len <= 0 there is no ring and the
// next scale follows *amax_current alone.
FP8_HD static inline void fp8_delayed_update(float *amax_history, int history_len, long step,
                                             float *amax_current, float *scale, Fp8Format f, int margin) {
    float amax;
    if (history_len > 0) {
        long slot = step % history_len;
        if (slot < 0) slot += history_len;
        amax_history[slot] = *amax_current;
        amax = fp8_history_max(amax_history, history_len);
    } else {
        amax = *amax_current;
    }
    *scale = fp8_compute_scale(amax, f, margin);
    *amax_current = 0.0f;
}

// fp8 code of x * scale. The product is spelled __fmul_rn on the device so that it is never fused into a
// neighbouring add. A subnormal x counts as a zero of its sign on the host too: flush-to-zero device code
// (--use_fast_math) reads it so, and with a large enough scale (> 2^116, i.e. amax below ~2^-107) the
// product would otherwise be a nonzero fp8 value on the host only. A subnormal product needs no such care:
// it is far below half the smallest fp8 subnormal, so it gives a signed zero either way.
FP8_HD static inline uint8_t fp8_quantize(float x, float scale, Fp8Format f) {
    const uint32_t u = fp8_f32_to_bits(x);
    if ((u & 0x7F800000u) == 0) return (uint8_t)((u >> 24) & 0x80u);
#ifdef __CUDA_ARCH__
    return fp8_from_float(__fmul_rn(x, scale), f);
#else
    return fp8_from_float(x * scale, f);
#endif
}

// The fp8 value of x * scale as a float, still in the scaled domain (not divided by scale): the CPU
// emulation multiplies these and divides the dot products by the scales, as the FP8 GEMM does.
FP8_HD static inline float fp8_quantize_value(float x, float scale, Fp8Format f) {
    return fp8_to_float(fp8_quantize(x, scale, f), f);
}

// The smallest magnitude that round-to-nearest-even would carry past the largest finite value, so that
// only saturation keeps it finite: max + half an ulp of the top binade, where the tie goes up for E5M2
// (57344 has an odd mantissa) and stays at the max for E4M3 (448 has an even one).
FP8_HD static inline float fp8_saturation_threshold(Fp8Format f) {
    return f == FP8_E4M3 ? 464.0f : 59392.0f;
}

// Telemetry: the scaled value lay beyond what rounding reaches and was clipped to the largest finite
// value. Values between the max and the threshold simply round to the max and are not counted: an
// exact-amax cast (amax * scale a hair above the max after the division) saturates nothing.
FP8_HD static inline int fp8_is_saturated(float scaled_x, Fp8Format f) {
    const uint32_t a = fp8_f32_to_bits(scaled_x) & 0x7FFFFFFFu,
                   t = fp8_f32_to_bits(fp8_saturation_threshold(f));
    return a <= 0x7F800000u && (f == FP8_E4M3 ? a > t : a >= t);
}

// Telemetry: a nonzero scaled value rounded to zero (underflow, information lost).
FP8_HD static inline int fp8_is_flushed(float scaled_x, Fp8Format f) {
    const uint32_t a = fp8_f32_to_bits(scaled_x) & 0x7FFFFFFFu;
    return a != 0 && (fp8_from_float(scaled_x, f) & 0x7Fu) == 0;
}

// ---------------------------------------------------------------------------------------------------------
// How Hopper's FP8 tensor cores accumulate (sm_90), the model both the CPU trainer (--fp8_accumulation
// hopper) and the emulated cuBLASLt compute. Published measurements (sources in docs/emulation.md): an FP8
// MMA adds its K = 32 products, which are exact, to the accumulator and keeps 13 fraction bits of the result,
// the rest truncated (SageAttention2, arXiv:2411.10958: mma.f32.f8.f8.f32 accumulates in "FP22", 1 sign, 8
// exponent, 13 mantissa bits; DeepSeek-V3, arXiv:2412.19437 section 3.3.2: "around 14 bits"). cuBLASLt
// without CUBLASLT_MATMUL_DESC_FAST_ACCUM "periodically promotes" the partial sum to FP32 (its
// documentation): every FP8_PROMOTE_K products the tensor core's partial sum is added to an FP32 accumulator
// in FP32 and the tensor core starts again from zero (DeepSeek-V3's N_C = 128 and CUTLASS's promotion
// interval of four K = 32 MMAs; cuBLASLt's own interval is not documented). Block-scaled GEMMs promote at
// each 128-element block, where the block's factors multiply. With fast accumulation the partial sum is
// never promoted: every product of the dot product passes through the 13-bit accumulator.

#define FP8_MMA_K 32
#define FP8_MMA_FRACTION_BITS 13
#define FP8_PROMOTE_K 128

// The tensor core's partial sum after one MMA: partial + the MMA's sum of products (added in FP32, which
// rounds far below the truncation that follows), truncated toward zero to FP8_MMA_FRACTION_BITS.
FP8_HD static inline float fp8_mma_accumulate(float partial, float products) {
    uint32_t u = fp8_f32_to_bits(partial + products);
    if ((u & 0x7F800000u) == 0x7F800000u) return fp8_bits_to_f32(u); // inf or NaN stays
    return fp8_bits_to_f32(u & ~((1u << (23 - FP8_MMA_FRACTION_BITS)) - 1u));
}

// Whether, after the MMA that ends at product k_end of K, the partial sum goes into the FP32 accumulator.
FP8_HD static inline int fp8_mma_promotes(long k_end, long K, int fast_accum) {
    return k_end >= K || (!fast_accum && k_end % FP8_PROMOTE_K == 0);
}

#endif // FP8_SCALING_H

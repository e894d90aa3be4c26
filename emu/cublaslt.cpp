// emu/cublaslt.cpp: a reference cuBLASLt for the CPU emulation build, written from the documented
// semantics (cuBLAS documentation, cublasLtMatmul; the attribute comments of cublasLt.h):
//   D = alpha * scale_A * scale_B * op(A) op(B) + beta * C [+ bias per row of D], column-major,
// op = transpose when CUBLASLT_MATMUL_DESC_TRANS[AB] is CUBLAS_OP_T, accumulated in FP32, converted to
// D's type once (round to nearest even). Operands are decoded to FP32 exactly (BF16, E4M3, E5M2), so
// the only roundings are those of the FP32 sums and of the result; the sum runs in an order of its own
// (eight partial sums), as the GPU's runs in one of its own. The epilogues apply to that FP32 value v
// before its one rounding (cublasLt.h's descriptions of cublasLtEpilogue_t and of the AUX attributes):
//   - GELU_AUX_BIAS: "apply Bias and then GELU", the GELU input matrix written to the aux: aux = v (bias
//     added) in the aux's type, D = GELU(v); the GELU is gpu/gelu.cuh's tanh form (cuBLASLt documents
//     only x := GELU(x));
//   - DGELU: "apply GELU gradient to matmul output", the aux "the GELU input matrix for backward":
//     D = v * GELU'(aux);
//   - BGRADB: D as without an epilogue, and the bias pointer receives the bias gradient "based on the input
//     matrix B": its "size corresponds to the number of columns of the matrix D", "the reduction happens
//     over the GEMM's k dimension": bias_grad[j] = the FP32 sum over k of op(B)(k, j), overwritten
//     ("stores"), in the output's type ("the same type as the output elements").
//   The aux is a matrix of D's shape with its own leading dimension (EPILOGUE_AUX_LD, "divisible by 8 and no
//   less than the number of rows in the output matrix"), of D's type (EPILOGUE_AUX_DATA_TYPE's default; the
//   other types are FP8 outputs'); only rows [0, m) of each column are read or written.
//
// What the trainer relies on is enforced, with cuBLASLt's status and a line on stderr saying why:
//   - the heuristic: compute type CUBLAS_COMPUTE_32F with scale type CUDA_R_32F; BF16 x BF16 with C and D
//     BF16 or FP32, the bias of D's type; FP8 (E4M3/E5M2) with both operands FP8 but never E5M2 x E5M2,
//     in the "TN" form (A transposed, B not: the only form on sm_89/sm_90, and this device is an H200),
//     leading dimensions of 16-byte multiples, C and D BF16 (bias BF16) or FP32 (bias BF16); layouts
//     that agree with m, n, k; the epilogues above with BF16 operands only, the aux of D's type and its
//     leading dimension as documented, the bias gradient of D's type; the algorithm it returns assumes
//     the preference's minimum alignments of A, B, C, D (256 bytes unless set) and the alignments of the
//     bias and aux pointers set at that time (the heuristic "depends on" their values "to determine
//     expected pointer alignment"), and asks for a workspace of min(max workspace, 4 MiB), as split-K
//     kernels do; with CUDA_EMU_NO_FUSED_EPILOGUES set it finds no algorithm for GELU_AUX_BIAS, DGELU and
//     BGRADB (CUBLAS_STATUS_NOT_SUPPORTED, silently, as a cuBLASLt without them would): how the trainer's
//     fallback to separate kernels is tested;
//   - the matmul: the algorithm was chosen for this kind of problem; every pointer is device memory
//     covering its matrix (the bias its m elements, the bias gradient its n, the aux its columns at its
//     leading dimension), FP8 operands 16-byte aligned, each pointer at least as aligned as the
//     algorithm assumes; A/B scale pointers only with FP8 operands; the workspace at least what the
//     algorithm asks for. It then queues the product on the stream.
//   - block scaling (CUBLASLT_MATMUL_DESC_[AB]_SCALE_MODE, cuBLAS 12.9+), both operands block-scaled, FP8,
//     no fast accumulation, scale tensors 16-byte aligned and covering their layout. On sm_90:
//     VEC128_32F (one FP32 factor per 128 elements of a row along K) and BLK128x128_32F (one per 128 x 128
//     block), never both 2-D, K a multiple of 128; for an operand whose other dimension is R, VEC128's
//     factor of (r, k-block t) at t * roundup(R, 4) + r, BLK128x128's of (r-block, t) at
//     (r / 128) * roundup(K / 128, 4) + t (the layouts Transformer Engine's "GEMM-ready" format hands
//     cuBLASLt). On sm_100 (CUDA_EMU_DEVICE=b200): VEC32_UE8M0 (MXFP8: one E8M0 byte, 2^(code - 127), per
//     32 elements along K), K a multiple of 32, the bytes in tiles of 128 rows x 4 blocks (rows padded to
//     128, blocks to 4), tile (r / 128, t / 4) at ((r / 128) * ceil(K / 128) + t / 4) * 512, byte
//     (r % 32) * 16 + (r % 128 / 32) * 4 + t % 4 within it (cuBLAS's documented MX layout). The product
//     sums each block of K and adds it times the two factors to an FP32 accumulator, as the block-scaled
//     kernels promote each block.
// The FP8 sums on sm_90 are the tensor cores' (fp8_scaling.h's model of Hopper's FP8 MMA, which the CPU
// trainer computes too with --fp8_accumulation hopper): 32 products at a time into a partial sum truncated to
// 13 fraction bits, promoted to the FP32 accumulator every 128 products (every block when block-scaled), or,
// with CUBLASLT_MATMUL_DESC_FAST_ACCUM, only at the end of the dot product. So fast accumulation changes
// results here as on the GPU. BF16 products, and FP8 ones on the emulated B200 (no measurement of
// Blackwell's accumulator was found), are summed in FP32.
// Knobs for tests of the tests (each read when a product runs):
//   - CUDA_EMU_GELU=erf: the GELU epilogues compute the erf GELU and its derivative instead of the tanh form,
//     as a cuBLASLt whose undocumented GELU were the exact one would: test_gpu.sh's bfloat16 comparisons and
//     the first-contact GELU checks must hold against it (their bounds cover either form);
//   - CUDA_EMU_CUBLASLT_FAULT, a planted fault, for showing that a wrong GEMM fails a check on the comparison
//     itself: `b-scale` reads cuBLASLt's B scale (our A's: the scalar or the block factors) as 1, `bias` adds
//     no bias.
// Not emulated (refused with CUBLAS_STATUS_NOT_SUPPORTED): other compute types, FP8 or FP16 outputs,
// epilogues beyond BIAS, GELU_AUX_BIAS, DGELU and BGRADB (and those three with FP8 operands), batches,
// row-major orders, the other scale modes (VEC16_UE4M3, OUTER_VEC_32F).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "cublasLt.h"
#include "cuda_bf16.h"
#include "emu.h"
#include "../core/fp8_scaling.h" // the model of Hopper's FP8 accumulation: one definition with the CPU trainer's
#include "../gpu/gelu.cuh"       // the trainer's GELU: one definition

struct cublasLtContext {
    int live;
};

struct cublasLtMatmulDescOpaque_t {
    cublasComputeType_t compute_type;
    cudaDataType_t scale_type;
    int32_t trans_a, trans_b, pointer_mode;
    uint32_t epilogue;
    const void *bias;  // the bias, or where BGRADB writes the bias gradient
    int32_t bias_type; // -1: the default, D's type
    const void *aux;   // GELU_AUX_BIAS writes it, DGELU reads it
    int64_t aux_ld;
    int32_t aux_type; // -1: the default, D's type
    const void *a_scale, *b_scale, *c_scale, *d_scale, *amax_d;
    int32_t a_scale_mode, b_scale_mode; // cublasLtMatmulMatrixScale_t
    int8_t fast_accum;
};

struct cublasLtMatrixLayoutOpaque_t {
    cudaDataType_t type;
    uint64_t rows, cols;
    int64_t ld;
    int32_t order, batch_count;
};

struct cublasLtMatmulPreferenceOpaque_t {
    uint64_t max_workspace;
    uint32_t min_alignment[4]; // A, B, C, D
};

namespace {

const uint64_t ALGO_MAGIC = 0x656d754c74616c67ull; // "emuLtalg"
const size_t SPLIT_K_WORKSPACE = (size_t)4 << 20;

// What an algorithm from the heuristic holds in cublasLtMatmulAlgo_t's data.
struct Algo {
    uint64_t magic;
    uint64_t problem;        // the kind of problem it was chosen for (problem_key)
    uint32_t alignment[4];   // of A, B, C, D
    uint32_t bias_alignment; // of the bias (or bias gradient) pointer the descriptor had
    uint32_t aux_alignment;  // of its aux pointer
    uint64_t workspace;
};
static_assert(sizeof(Algo) <= sizeof(cublasLtMatmulAlgo_t), "Algo fits the opaque algorithm");

bool is_fp8(cudaDataType_t t) {
    return t == CUDA_R_8F_E4M3 || t == CUDA_R_8F_E5M2;
}

size_t type_size(cudaDataType_t t) {
    return t == CUDA_R_32F ? 4 : t == CUDA_R_16BF ? 2 : 1;
}

const char *type_name(int t) {
    switch (t) {
    case CUDA_R_32F:
        return "CUDA_R_32F";
    case CUDA_R_16BF:
        return "CUDA_R_16BF";
    case CUDA_R_16F:
        return "CUDA_R_16F";
    case CUDA_R_8F_E4M3:
        return "CUDA_R_8F_E4M3";
    case CUDA_R_8F_E5M2:
        return "CUDA_R_8F_E5M2";
    default:
        return "another type";
    }
}

uint32_t pointer_alignment(const void *p) {
    uintptr_t a = (uintptr_t)p;
    uint32_t align = 256;
    while (align > 1 && a % align) align >>= 1;
    return align;
}

// The epilogues: which read the bias pointer's bias, which write a bias gradient there, which use the aux.
bool adds_bias(uint32_t e) {
    return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
bool has_aux(uint32_t e) {
    return e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU;
}
bool is_fused(uint32_t e) {
    return has_aux(e) || e == CUBLASLT_EPILOGUE_BGRADB;
}

// The types and transposes of a problem, so that an algorithm is used only for its kind of problem.
uint64_t problem_key(const cublasLtMatmulDescOpaque_t *d, const cublasLtMatrixLayoutOpaque_t *a,
                     const cublasLtMatrixLayoutOpaque_t *b, const cublasLtMatrixLayoutOpaque_t *c,
                     const cublasLtMatrixLayoutOpaque_t *dl) {
    uint64_t k = (uint64_t)a->type;
    k = k * 64 + (uint64_t)b->type;
    k = k * 64 + (uint64_t)c->type;
    k = k * 64 + (uint64_t)dl->type;
    k = k * 4 + (uint64_t)d->trans_a;
    k = k * 4 + (uint64_t)d->trans_b;
    k = k * 1024 + d->epilogue;
    k = k * 64 + (uint64_t)(d->bias_type + 1);
    k = k * 64 + (uint64_t)(d->aux_type + 1);
    k = k * 8 + (uint64_t)d->a_scale_mode;
    k = k * 8 + (uint64_t)d->b_scale_mode;
    return k;
}

template <typename T> cublasStatus_t set_value(T *field, const void *buf, size_t size) {
    if (!buf || size != sizeof(T)) {
        emu::explain("cuBLASLt attribute of %zu bytes where %zu are expected", size, sizeof(T));
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    memcpy(field, buf, sizeof(T));
    return CUBLAS_STATUS_SUCCESS;
}

// The value of an OCP FP8 code: E4M3 (bias 7, no infinities, S.1111.111 NaN) or E5M2 (bias 15, IEEE-like).
float fp8_value(uint8_t code, bool e4m3) {
    const int mantissa_bits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
    const int exponent = (code & 0x7F) >> mantissa_bits, mantissa = code & ((1 << mantissa_bits) - 1);
    const float sign = (code & 0x80) ? -1.0f : 1.0f;
    if (e4m3 && (code & 0x7F) == 0x7F) return NAN;
    if (!e4m3 && exponent == 31) return mantissa ? NAN : sign * INFINITY;
    if (exponent == 0) return sign * ldexpf((float)mantissa, 1 - bias - mantissa_bits);
    return sign * ldexpf((float)((1 << mantissa_bits) | mantissa), exponent - bias - mantissa_bits);
}

// Element (row, col) of a column-major matrix as FP32.
float element(const void *base, cudaDataType_t type, int64_t ld, uint64_t row, uint64_t col) {
    const size_t i = (size_t)row + (size_t)col * (size_t)ld;
    switch (type) {
    case CUDA_R_32F:
        return ((const float *)base)[i];
    case CUDA_R_16BF:
        return __bfloat162float(((const __nv_bfloat16 *)base)[i]);
    case CUDA_R_8F_E4M3:
        return fp8_value(((const uint8_t *)base)[i], true);
    default:
        return fp8_value(((const uint8_t *)base)[i], false);
    }
}

void store(void *base, cudaDataType_t type, int64_t ld, uint64_t row, uint64_t col, float v) {
    const size_t i = (size_t)row + (size_t)col * (size_t)ld;
    if (type == CUDA_R_32F)
        ((float *)base)[i] = v;
    else
        ((__nv_bfloat16 *)base)[i] = __float2bfloat16_rn(v);
}

// The bytes a column-major layout spans from its first element.
size_t extent(const cublasLtMatrixLayoutOpaque_t *l) {
    if (l->rows == 0 || l->cols == 0) return 0;
    return ((size_t)(l->cols - 1) * (size_t)l->ld + l->rows) * type_size(l->type);
}

bool is_block_mode(int32_t mode) {
    return mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F ||
           mode == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F ||
           mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0;
}

// Elements of K that share one factor.
uint64_t scale_block(int32_t mode) {
    return mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0 ? 32 : 128;
}

uint64_t round_up(uint64_t x, uint64_t to) {
    return (x + to - 1) / to * to;
}

// Bytes of the scale tensor of an operand whose other dimension is `other`, reduced over k.
uint64_t scale_bytes(int32_t mode, uint64_t other, uint64_t k) {
    if (mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0) return round_up(other, 128) * round_up(k / 32, 4);
    if (mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F) return (k / 128) * round_up(other, 4) * 4;
    return (other + 127) / 128 * round_up(k / 128, 4) * 4;
}

// The factor of element (r, k-block t) of such an operand.
float scale_factor(int32_t mode, const void *scales, uint64_t other, uint64_t k, uint64_t r, uint64_t t) {
    if (mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0) {
        uint64_t tile = r / 128 * ((k / 32 + 3) / 4) + t / 4;
        uint8_t code = ((const uint8_t *)scales)[tile * 512 + r % 32 * 16 + r % 128 / 32 * 4 + t % 4];
        return code == 0xFF ? NAN : ldexpf(1.0f, (int)code - 127);
    }
    const float *f = (const float *)scales;
    if (mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F) return f[t * round_up(other, 4) + r];
    return f[r / 128 * round_up(k / 128, 4) + t];
}

// The block-scaling rules of the heuristic (see the top of the file).
cublasStatus_t check_scale_modes(const cublasLtMatmulDescOpaque_t *d, bool fp8, uint64_t k) {
    const int32_t modes[2] = {d->a_scale_mode, d->b_scale_mode};
    if (modes[0] == CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F &&
        modes[1] == CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F)
        return CUBLAS_STATUS_SUCCESS;
    const bool blackwell = emu::compute_capability() >= 100;
    for (int i = 0; i < 2; i++) {
        const bool mx = modes[i] == CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0;
        if (modes[i] != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F &&
            (!is_block_mode(modes[i]) || mx != blackwell)) {
            emu::explain("cuBLASLt: %c scale mode %d is not emulated on this sm_%d device (%s)", "AB"[i],
                         (int)modes[i], emu::compute_capability(),
                         blackwell ? "VEC32_UE8M0 is; VEC128_32F and BLK128x128_32F are sm_90's"
                                   : "VEC128_32F and BLK128x128_32F are; VEC32_UE8M0 needs sm_100");
            return CUBLAS_STATUS_NOT_SUPPORTED;
        }
    }
    if (!fp8 || !is_block_mode(modes[0]) || !is_block_mode(modes[1])) {
        emu::explain("cuBLASLt: scale modes A %d, B %d: block scaling needs FP8 operands, both block-scaled",
                     (int)modes[0], (int)modes[1]);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (modes[0] == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F &&
        modes[1] == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F) {
        emu::explain("cuBLASLt: BLK128x128_32F on both operands: 2-D x 2-D block scaling is not supported "
                     "(1-D x 1-D, 1-D x 2-D and 2-D x 1-D are)");
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (k % scale_block(modes[0])) {
        emu::explain("cuBLASLt: block scaling with k = %llu, not a multiple of its %llu-element blocks",
                     (unsigned long long)k, (unsigned long long)scale_block(modes[0]));
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (d->fast_accum) {
        emu::explain("cuBLASLt: block scaling with CUBLASLT_MATMUL_DESC_FAST_ACCUM: block-scaled kernels "
                     "promote every block, fast accumulation does not apply");
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t check_problem(const cublasLtMatmulDescOpaque_t *d, const cublasLtMatrixLayoutOpaque_t *a,
                             const cublasLtMatrixLayoutOpaque_t *b, const cublasLtMatrixLayoutOpaque_t *c,
                             const cublasLtMatrixLayoutOpaque_t *dl) {
    if (d->compute_type != CUBLAS_COMPUTE_32F || d->scale_type != CUDA_R_32F) {
        emu::explain("cuBLASLt: compute type %d with scale type %s is not emulated (CUBLAS_COMPUTE_32F with "
                     "CUDA_R_32F is)",
                     (int)d->compute_type, type_name(d->scale_type));
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    const cublasLtMatrixLayoutOpaque_t *layouts[4] = {a, b, c, dl};
    for (int i = 0; i < 4; i++)
        if (layouts[i]->order != 0 || layouts[i]->batch_count != 1) {
            emu::explain("cuBLASLt: row-major orders and batches are not emulated");
            return CUBLAS_STATUS_NOT_SUPPORTED;
        }
    const uint32_t e = d->epilogue;
    if (e != CUBLASLT_EPILOGUE_DEFAULT && !adds_bias(e) && !is_fused(e)) {
        emu::explain(
            "cuBLASLt: epilogue %u is not emulated (DEFAULT, BIAS, GELU_AUX_BIAS, DGELU and BGRADB are)", e);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    const bool fp8 = is_fp8(a->type) || is_fp8(b->type);
    if (fp8 && is_fused(e)) {
        emu::explain("cuBLASLt: epilogue %u with FP8 operands is not emulated (DEFAULT and BIAS are)", e);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (fp8 && !(is_fp8(a->type) && is_fp8(b->type))) {
        emu::explain("cuBLASLt: A is %s and B is %s: an FP8 matmul needs both operands in FP8",
                     type_name(a->type), type_name(b->type));
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (!fp8 && (a->type != CUDA_R_16BF || b->type != CUDA_R_16BF)) {
        emu::explain("cuBLASLt: A %s x B %s is not emulated (BF16 x BF16 and FP8 x FP8 are)",
                     type_name(a->type), type_name(b->type));
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (fp8 && a->type == CUDA_R_8F_E5M2 && b->type == CUDA_R_8F_E5M2) {
        emu::explain("cuBLASLt: E5M2 x E5M2 is not a supported FP8 combination (one operand must be E4M3)");
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (dl->type != CUDA_R_16BF && dl->type != CUDA_R_32F) {
        emu::explain("cuBLASLt: D of type %s is not emulated (CUDA_R_16BF and CUDA_R_32F are)",
                     type_name(dl->type));
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (c->type != dl->type) {
        emu::explain("cuBLASLt: C is %s and D is %s: the supported combinations have C of D's type here",
                     type_name(c->type), type_name(dl->type));
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (adds_bias(e) || e == CUBLASLT_EPILOGUE_BGRADB) {
        int bias = d->bias_type < 0 ? (int)dl->type : d->bias_type;
        int expected = fp8 ? CUDA_R_16BF : (int)dl->type;
        if (bias != expected) {
            emu::explain("cuBLASLt: a %s bias%s with %s x %s -> %s: it must be %s", type_name(bias),
                         adds_bias(e) ? "" : " gradient", type_name(a->type), type_name(b->type),
                         type_name(dl->type), type_name(expected));
            return CUBLAS_STATUS_NOT_SUPPORTED;
        }
    }
    if (has_aux(e) && d->aux_type >= 0 && d->aux_type != (int)dl->type) {
        emu::explain(
            "cuBLASLt: a %s aux with a %s D: the GELU input matrix is of D's type (the other aux types "
            "are for FP8 outputs, not emulated)",
            type_name(d->aux_type), type_name(dl->type));
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (fp8 && !(d->trans_a == CUBLAS_OP_T && d->trans_b == CUBLAS_OP_N)) {
        emu::explain(
            "cuBLASLt: an FP8 matmul with transa=%s, transb=%s: on sm_89/sm_90 FP8 runs only in the TN "
            "form (A transposed, B not)",
            d->trans_a == CUBLAS_OP_T ? "T" : "N", d->trans_b == CUBLAS_OP_T ? "T" : "N");
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    const uint64_t m = dl->rows, n = dl->cols;
    const uint64_t k = d->trans_a == CUBLAS_OP_N ? a->cols : a->rows;
    cublasStatus_t status;
    const bool a_ok = d->trans_a == CUBLAS_OP_N ? a->rows == m : a->cols == m;
    const bool b_ok =
        d->trans_b == CUBLAS_OP_N ? (b->rows == k && b->cols == n) : (b->cols == k && b->rows == n);
    if (!a_ok || !b_ok || c->rows != m || c->cols != n) {
        emu::explain(
            "cuBLASLt: the layouts do not agree: A %llux%llu, B %llux%llu, C %llux%llu, D %llux%llu with "
            "transa=%d transb=%d",
            (unsigned long long)a->rows, (unsigned long long)a->cols, (unsigned long long)b->rows,
            (unsigned long long)b->cols, (unsigned long long)c->rows, (unsigned long long)c->cols,
            (unsigned long long)m, (unsigned long long)n, d->trans_a, d->trans_b);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    status = check_scale_modes(d, fp8, k);
    if (status != CUBLAS_STATUS_SUCCESS) return status;
    for (int i = 0; i < 4; i++)
        if (layouts[i]->ld < (int64_t)layouts[i]->rows || layouts[i]->ld < 1) {
            emu::explain("cuBLASLt: matrix %c has leading dimension %lld below its %llu rows", "ABCD"[i],
                         (long long)layouts[i] -> ld, (unsigned long long)layouts[i] -> rows);
            return CUBLAS_STATUS_INVALID_VALUE;
        }
    if (fp8)
        for (int i = 0; i < 2; i++)
            if ((layouts[i]->ld * (int64_t)type_size(layouts[i]->type)) % 16) {
                emu::explain(
                    "cuBLASLt: FP8 matrix %c has a leading dimension of %lld bytes: FP8 needs multiples "
                    "of 16",
                    "AB"[i], (long long)layouts[i] -> ld);
                return CUBLAS_STATUS_NOT_SUPPORTED;
            }
    if (has_aux(e) && (d->aux_ld % 8 != 0 || d->aux_ld < (int64_t)m)) {
        emu::explain(
            "cuBLASLt: the epilogue's aux has leading dimension %lld: it must be divisible by 8 and no "
            "less than D's %llu rows (CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD)",
            (long long)d->aux_ld, (unsigned long long)m);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    return CUBLAS_STATUS_SUCCESS;
}

struct Product {
    cudaDataType_t a_type, b_type, c_type, d_type, bias_type;
    int trans_a, trans_b;
    uint32_t epilogue;
    uint64_t m, n, k;
    int64_t lda, ldb, ldc, ldd, aux_ld;
    const void *A, *B, *C, *bias;  // bias: the one added (BIAS, GELU_AUX_BIAS), else NULL
    void *D, *aux, *bias_grad;     // aux: GELU_AUX_BIAS's output, DGELU's input (D's type); BGRADB's gradient
    const void *a_scale, *b_scale; // FP32 (scalar, VEC128, BLK128x128) or E8M0 bytes (VEC32_UE8M0)
    int32_t a_scale_mode, b_scale_mode;
    float alpha, beta;
    bool tensor_core; // FP8 on sm_90: Hopper's accumulation (fp8_scaling.h), else FP32 sums
    bool fast_accum;  // CUBLASLT_MATMUL_DESC_FAST_ACCUM
};

bool fault_planted(const char *name) {
    const char *fault = getenv("CUDA_EMU_CUBLASLT_FAULT");
    return fault && strcmp(fault, name) == 0;
}

bool erf_gelu() {
    const char *form = getenv("CUDA_EMU_GELU");
    return form && strcmp(form, "erf") == 0;
}

// The erf GELU, x Phi(x), and dout times its derivative Phi(x) + x phi(x), in FP32.
float gelu_erf_value(float x) {
    return 0.5f * x * (1.0f + erff(x * 0.70710678f));
}

float gelu_erf_backward_value(float dout, float x) {
    return dout * (0.5f * (1.0f + erff(x * 0.70710678f)) + x * 0.39894228f * expf(-0.5f * x * x));
}

// The sum of a[i] b[i] over [0, k): in FP32 as eight partial sums, or on Hopper's FP8 tensor cores (32
// products at a time into the 13-bit partial sum, promoted to FP32 as fp8_mma_promotes says).
float dot(const Product &p, const float *a, const float *b, uint64_t k) {
    if (!p.tensor_core) {
        float partial[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        uint64_t kk = 0;
        for (; kk + 8 <= k; kk += 8)
            for (int l = 0; l < 8; l++) partial[l] += a[kk + l] * b[kk + l];
        for (; kk < k; kk++) partial[kk % 8] += a[kk] * b[kk];
        return ((partial[0] + partial[1]) + (partial[2] + partial[3])) +
               ((partial[4] + partial[5]) + (partial[6] + partial[7]));
    }
    float acc = 0.0f, partial = 0.0f;
    for (uint64_t k0 = 0; k0 < k; k0 += FP8_MMA_K) {
        const uint64_t end = std::min<uint64_t>(k, k0 + FP8_MMA_K);
        float products = 0.0f; // exact products (at most 8 significant bits each), summed in FP32
        for (uint64_t kk = k0; kk < end; kk++) products += a[kk] * b[kk];
        partial = fp8_mma_accumulate(partial, products);
        if (fp8_mma_promotes((long)end, (long)k, p.fast_accum)) {
            acc += partial;
            partial = 0.0f;
        }
    }
    return acc;
}

// Block-scaled: the sum of each block of k (128 or 32 elements), times A's factor of (i, block) and B's of
// (j, block), into an FP32 accumulator in block order.
float block_scaled_dot(const Product &p, const float *a, const float *b, uint64_t i, uint64_t j) {
    const uint64_t block = scale_block(p.a_scale_mode);
    float acc = 0.0f;
    for (uint64_t t = 0; t < p.k / block; t++) {
        float sum = dot(p, a + t * block, b + t * block, block);
        float factor =
            scale_factor(p.a_scale_mode, p.a_scale, p.m, p.k, i, t) *
            (fault_planted("b-scale") ? 1.0f : scale_factor(p.b_scale_mode, p.b_scale, p.n, p.k, j, t));
        acc += factor * sum;
    }
    return acc;
}

// Element (i, j) of D from v, the FP32 value of alpha scale op(A) op(B) + beta C: the bias, the epilogue's
// function, one rounding to D's type.
void finish_element(const Product &p, uint64_t i, uint64_t j, float v) {
    if (p.bias && !fault_planted("bias")) v += element(p.bias, p.bias_type, 1, i, 0);
    if (p.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) {
        store(p.aux, p.d_type, p.aux_ld, i, j, v);
        v = erf_gelu() ? gelu_erf_value(v) : gelu_value(v);
    } else if (p.epilogue == CUBLASLT_EPILOGUE_DGELU) {
        const float pre = element(p.aux, p.d_type, p.aux_ld, i, j);
        v = erf_gelu() ? gelu_erf_backward_value(v, pre) : gelu_backward_value(v, pre);
    }
    store(p.D, p.d_type, p.ldd, i, j, v);
}

// The product itself, when the stream reaches it: one column of D per task.
void run_product(const Product &p) {
    const bool block = is_block_mode(p.a_scale_mode);
    const float scale = block
                            ? p.alpha
                            : p.alpha * (p.a_scale ? *(const float *)p.a_scale : 1.0f) *
                                  (p.b_scale && !fault_planted("b-scale") ? *(const float *)p.b_scale : 1.0f);
    std::vector<float> a_rows(p.m * p.k); // op(A) row i, contiguous in k
    for (uint64_t i = 0; i < p.m; i++)
        for (uint64_t kk = 0; kk < p.k; kk++)
            a_rows[i * p.k + kk] = p.trans_a == CUBLAS_OP_N ? element(p.A, p.a_type, p.lda, i, kk)
                                                            : element(p.A, p.a_type, p.lda, kk, i);
    emu::parallel_for(p.n, [&](size_t begin, size_t end) {
        std::vector<float> b_col(p.k);
        for (size_t j = begin; j < end; j++) {
            for (uint64_t kk = 0; kk < p.k; kk++)
                b_col[kk] = p.trans_b == CUBLAS_OP_N ? element(p.B, p.b_type, p.ldb, kk, j)
                                                     : element(p.B, p.b_type, p.ldb, j, kk);
            if (p.bias_grad) { // BGRADB: column j of op(B) summed over k
                float sum = 0.0f;
                for (uint64_t kk = 0; kk < p.k; kk++) sum += b_col[kk];
                store(p.bias_grad, p.d_type, 1, j, 0, sum);
            }
            for (uint64_t i = 0; i < p.m; i++) {
                const float *a = &a_rows[i * p.k];
                if (block) {
                    float v = scale * block_scaled_dot(p, a, b_col.data(), i, j);
                    if (p.beta != 0.0f) v += p.beta * element(p.C, p.c_type, p.ldc, i, j);
                    finish_element(p, i, j, v);
                    continue;
                }
                float v = scale * dot(p, a, b_col.data(), p.k);
                if (p.beta != 0.0f) v += p.beta * element(p.C, p.c_type, p.ldc, i, j);
                finish_element(p, i, j, v);
            }
        }
    });
}

} // namespace

size_t cublasLtGetVersion(void) {
    const char *version = getenv("CUDA_EMU_CUBLASLT_VERSION");
    return version && *version ? (size_t)strtoull(version, NULL, 10) : 130100;
}

cublasStatus_t cublasLtCreate(cublasLtHandle_t *handle) {
    *handle = new cublasLtContext{1};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    cudaDeviceSynchronize(); // as cuBLASLt's: the queued products may still use the handle
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *desc, cublasComputeType_t compute_type,
                                        cudaDataType_t scale_type) {
    cublasLtMatmulDescOpaque_t *d = new cublasLtMatmulDescOpaque_t();
    d->compute_type = compute_type;
    d->scale_type = scale_type;
    d->trans_a = d->trans_b = CUBLAS_OP_N;
    d->epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    d->bias_type = -1;
    d->aux_type = -1;
    *desc = d;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
    delete desc;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t size) {
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE:
        return set_value((int32_t *)&d->compute_type, buf, size);
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE:
        return set_value((int32_t *)&d->scale_type, buf, size);
    case CUBLASLT_MATMUL_DESC_POINTER_MODE:
        return set_value(&d->pointer_mode, buf, size);
    case CUBLASLT_MATMUL_DESC_TRANSA:
        return set_value(&d->trans_a, buf, size);
    case CUBLASLT_MATMUL_DESC_TRANSB:
        return set_value(&d->trans_b, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
        return set_value(&d->epilogue, buf, size);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
        return set_value(&d->bias, buf, size);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
        return set_value(&d->bias_type, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
        return set_value(&d->aux, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
        return set_value(&d->aux_ld, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE:
        return set_value(&d->aux_type, buf, size);
    case CUBLASLT_MATMUL_DESC_A_SCALE_POINTER:
        return set_value(&d->a_scale, buf, size);
    case CUBLASLT_MATMUL_DESC_B_SCALE_POINTER:
        return set_value(&d->b_scale, buf, size);
    case CUBLASLT_MATMUL_DESC_C_SCALE_POINTER:
        return set_value(&d->c_scale, buf, size);
    case CUBLASLT_MATMUL_DESC_D_SCALE_POINTER:
        return set_value(&d->d_scale, buf, size);
    case CUBLASLT_MATMUL_DESC_AMAX_D_POINTER:
        return set_value(&d->amax_d, buf, size);
    case CUBLASLT_MATMUL_DESC_FAST_ACCUM:
        return set_value(&d->fast_accum, buf, size);
    case CUBLASLT_MATMUL_DESC_A_SCALE_MODE:
        return set_value(&d->a_scale_mode, buf, size);
    case CUBLASLT_MATMUL_DESC_B_SCALE_MODE:
        return set_value(&d->b_scale_mode, buf, size);
    default:
        emu::explain("cublasLtMatmulDescSetAttribute: attribute %d is not emulated", (int)attr);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *layout, cudaDataType_t type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
    *layout = new cublasLtMatrixLayoutOpaque_t{type, rows, cols, ld, 0, 1};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
    delete layout;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l,
                                                cublasLtMatrixLayoutAttribute_t attr, const void *buf,
                                                size_t size) {
    switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE:
        return set_value((uint32_t *)&l->type, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_ORDER:
        return set_value(&l->order, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_ROWS:
        return set_value(&l->rows, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_COLS:
        return set_value(&l->cols, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_LD:
        return set_value(&l->ld, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
        return set_value(&l->batch_count, buf, size);
    default:
        emu::explain("cublasLtMatrixLayoutSetAttribute: attribute %d is not emulated", (int)attr);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref) {
    *pref = new cublasLtMatmulPreferenceOpaque_t{0, {256, 256, 256, 256}};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
    delete pref;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void *buf, size_t size) {
    switch (attr) {
    case CUBLASLT_MATMUL_PREF_SEARCH_MODE: {
        uint32_t mode;
        return set_value(&mode, buf, size);
    }
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
        return set_value(&p->max_workspace, buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
        return set_value(&p->min_alignment[0], buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
        return set_value(&p->min_alignment[1], buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
        return set_value(&p->min_alignment[2], buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
        return set_value(&p->min_alignment[3], buf, size);
    default:
        emu::explain("cublasLtMatmulPreferenceSetAttribute: attribute %d is not emulated", (int)attr);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int *returned) {
    *returned = 0;
    if (!handle || !desc || !a || !b || !c || !d || !pref || requested < 1 || !results)
        return CUBLAS_STATUS_INVALID_VALUE;
    cublasStatus_t status = check_problem(desc, a, b, c, d);
    if (status != CUBLAS_STATUS_SUCCESS) return status;
    if (is_fused(desc->epilogue) && getenv("CUDA_EMU_NO_FUSED_EPILOGUES")) return CUBLAS_STATUS_NOT_SUPPORTED;
    Algo algo;
    memset(&algo, 0, sizeof(algo));
    algo.magic = ALGO_MAGIC;
    algo.problem = problem_key(desc, a, b, c, d);
    for (int i = 0; i < 4; i++) algo.alignment[i] = pref->min_alignment[i];
    const bool bias_pointer = adds_bias(desc->epilogue) || desc->epilogue == CUBLASLT_EPILOGUE_BGRADB;
    algo.bias_alignment = bias_pointer ? pointer_alignment(desc->bias) : 1;
    algo.aux_alignment = has_aux(desc->epilogue) ? pointer_alignment(desc->aux) : 1;
    algo.workspace = std::min<uint64_t>(pref->max_workspace, SPLIT_K_WORKSPACE);
    memset(&results[0], 0, sizeof(results[0]));
    memcpy(&results[0].algo, &algo, sizeof(algo));
    results[0].workspaceSize = algo.workspace;
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}

// A pointer of the matmul: device memory covering `bytes`, at least `align`-byte aligned.
static cublasStatus_t check_pointer(const char *which, const void *p, size_t bytes, uint32_t align,
                                    const char *why) {
    if (!p || !emu::is_device_range(p, bytes)) {
        emu::explain("cublasLtMatmul: %s at %s does not hold its %zu bytes in device memory", which,
                     emu::describe_address(p).c_str(), bytes);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (pointer_alignment(p) < align) {
        emu::explain("cublasLtMatmul: %s at %p is %u-byte aligned, but %s %u", which, p, pointer_alignment(p),
                     why, align);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void *alpha,
                              const void *A, cublasLtMatrixLayout_t a, const void *B,
                              cublasLtMatrixLayout_t b, const void *beta, const void *C,
                              cublasLtMatrixLayout_t c, void *D, cublasLtMatrixLayout_t d,
                              const cublasLtMatmulAlgo_t *algo_in, void *workspace, size_t workspace_bytes,
                              cudaStream_t stream) {
    if (!handle || !desc || !a || !b || !c || !d || !alpha || !beta || !algo_in)
        return CUBLAS_STATUS_INVALID_VALUE;
    cublasStatus_t status = check_problem(desc, a, b, c, d);
    if (status != CUBLAS_STATUS_SUCCESS) return status;
    Algo algo;
    memcpy(&algo, algo_in, sizeof(algo));
    if (algo.magic != ALGO_MAGIC || algo.problem != problem_key(desc, a, b, c, d)) {
        emu::explain(
            "cublasLtMatmul: the algorithm was not returned by the heuristic for this kind of problem "
            "(types, transposes, epilogue)");
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (desc->pointer_mode != 0) {
        emu::explain("cublasLtMatmul: device pointer modes are not emulated");
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    const bool fp8 = is_fp8(a->type);
    if (!fp8 && (desc->a_scale || desc->b_scale)) {
        emu::explain("cublasLtMatmul: A/B scale pointers with %s operands: scales are for FP8 operands",
                     type_name(a->type));
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (desc->c_scale || desc->d_scale || desc->amax_d) {
        emu::explain("cublasLtMatmul: C/D scales and the D amax are for FP8 outputs, which are not emulated");
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    Product p;
    memcpy(&p.alpha, alpha, sizeof(float)); // host pointer mode: read at the call
    memcpy(&p.beta, beta, sizeof(float));
    const char *assumed = "the algorithm was chosen (cublasLtMatmulAlgoGetHeuristic's preference) for";
    const void *ptrs[4] = {A, B, C, D};
    const cublasLtMatrixLayoutOpaque_t *layouts[4] = {a, b, c, d};
    static const char *const names[4] = {"A", "B", "C", "D"};
    for (int i = 0; i < 4; i++) {
        if (i == 2 && p.beta == 0.0f) continue; // C is not read
        status = check_pointer(names[i], ptrs[i], extent(layouts[i]), algo.alignment[i], assumed);
        if (status == CUBLAS_STATUS_SUCCESS && i < 2 && fp8)
            status = check_pointer(names[i], ptrs[i], extent(layouts[i]), 16, "FP8 operands need");
        if (status != CUBLAS_STATUS_SUCCESS) return status;
    }
    const uint32_t e = desc->epilogue;
    const char *chosen = "the heuristic chose the algorithm for the pointer set then, which was";
    p.bias_type = desc->bias_type < 0 ? d->type : (cudaDataType_t)desc->bias_type;
    if (adds_bias(e) || e == CUBLASLT_EPILOGUE_BGRADB) {
        const bool grad = e == CUBLASLT_EPILOGUE_BGRADB; // one value per column of D, else per row
        status =
            check_pointer(grad ? "the bias gradient" : "the bias", desc->bias,
                          (grad ? d->cols : d->rows) * type_size(p.bias_type), algo.bias_alignment, chosen);
        if (status != CUBLAS_STATUS_SUCCESS) return status;
    }
    if (has_aux(e)) {
        const cublasLtMatrixLayoutOpaque_t aux = {d->type, d->rows, d->cols, desc->aux_ld, 0, 1};
        status = check_pointer("the aux", desc->aux, extent(&aux), algo.aux_alignment, chosen);
        if (status != CUBLAS_STATUS_SUCCESS) return status;
    }
    const void *scales[2] = {desc->a_scale, desc->b_scale};
    const int32_t modes[2] = {desc->a_scale_mode, desc->b_scale_mode};
    const uint64_t k = desc->trans_a == CUBLAS_OP_N ? a->cols : a->rows, others[2] = {d->rows, d->cols};
    for (int i = 0; i < 2; i++) {
        if (is_block_mode(modes[i])) {
            status = check_pointer(i == 0 ? "A's scale tensor" : "B's scale tensor", scales[i],
                                   scale_bytes(modes[i], others[i], k), 16, "its block scale tensor needs");
            if (status != CUBLAS_STATUS_SUCCESS) return status;
        } else if (scales[i] && !emu::is_device_range(scales[i], sizeof(float))) {
            emu::explain("cublasLtMatmul: the %c scale pointer %s is not device memory", "AB"[i],
                         emu::describe_address(scales[i]).c_str());
            return CUBLAS_STATUS_INVALID_VALUE;
        }
    }
    if (workspace_bytes < algo.workspace ||
        (algo.workspace && !emu::is_device_range(workspace, algo.workspace))) {
        emu::explain(
            "cublasLtMatmul: a workspace of %zu bytes at %s, but the algorithm needs %llu bytes of device "
            "memory",
            workspace_bytes, emu::describe_address(workspace).c_str(), (unsigned long long)algo.workspace);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    p.a_type = a->type, p.b_type = b->type, p.c_type = c->type, p.d_type = d->type;
    p.trans_a = desc->trans_a, p.trans_b = desc->trans_b;
    p.m = d->rows, p.n = d->cols, p.k = desc->trans_a == CUBLAS_OP_N ? a->cols : a->rows;
    p.lda = a->ld, p.ldb = b->ld, p.ldc = c->ld, p.ldd = d->ld;
    p.A = A, p.B = B, p.C = C, p.D = D;
    p.epilogue = e;
    p.bias = adds_bias(e) ? desc->bias : NULL;
    p.bias_grad = e == CUBLASLT_EPILOGUE_BGRADB ? (void *)desc->bias : NULL;
    p.aux = has_aux(e) ? (void *)desc->aux : NULL;
    p.aux_ld = desc->aux_ld;
    p.a_scale = desc->a_scale, p.b_scale = desc->b_scale;
    p.a_scale_mode = desc->a_scale_mode, p.b_scale_mode = desc->b_scale_mode;
    p.tensor_core = fp8 && emu::compute_capability() < 100;
    p.fast_accum = desc->fast_accum != 0;
    cudaError_t err = emu::enqueue(stream, emu::OP_MATMUL, [p] { run_product(p); });
    return err == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

// gpu/gemm.cuh: every matrix multiply of the CUDA trainer, through cuBLASLt, in row-major terms:
//   D (M,N) = op(A) (M,K) . op(B) (K,N)  [+ bias (N) per column]  [+ D when accumulate]
// or, with one of cuBLASLt's fused epilogues (GemmEpilogue below), its GELU, GELU backward or bias
// gradient on the way (bfloat16's fc and fcproj, the weight gradients' bias sums).
// op(A) = A stored (M,K), or A stored (K,M) transposed when trans_a; op(B) = B stored (K,N), or B
// stored (N,K) transposed when trans_b. FP8 operands additionally carry a device pointer to their
// inverse scale: D = (1/s_a)(1/s_b) (A_q . B_q), which undoes the cast's x_q = x * s.
// On Hopper and Ada cuBLASLt runs FP8 only in the "TN" form, both operands K-major: trans_a = 0,
// trans_b = 1. The trainer arranges its FP8 operands (cached W^T, saved x^T, dy^T) accordingly.
// A call names its GEMM's operands, shape and options in a GemmCall (below).
// Every pointer must be 16-byte aligned (checked per call): a plan serves all layers of its shape, so
// its algorithm is chosen for that alignment, not for the (often 256-byte) alignment of the first call.
#ifndef GPU_GEMM_CUH
#define GPU_GEMM_CUH

#include <cublasLt.h>
#include <library_types.h>

#include "common.cuh"

#define cublas_check(call) cublas_check_at((call), #call, __FILE__, __LINE__)
static inline void cublas_check_at(cublasStatus_t status, const char *what, const char *file, int line) {
    if (status != CUBLAS_STATUS_SUCCESS)
        fail("cuBLASLt: %s: status %d (%s:%d)", what, (int)status, file, line);
}

// Block-scaled FP8: descale points to one factor per 1 x 128 tile (CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F)
// or per 128 x 128 block (BLK128x128_32F) of the K-major operand (the blockwise recipe, Hopper), or to one
// E8M0 byte per 1 x 32 block (VEC32_UE8M0: mxfp8, Blackwell), in fp8_scaling.h's layouts; the two
// operands' factors multiply each block of every sum. The scale modes are cuBLAS 12.9's headers' (12.8 has
// only Blackwell's); against older headers the trainer still builds, GEMM_BLOCK_SCALING is 0, the block
// modes are numbers no cuBLASLt call ever receives (gemm_plan refuses them) and the block recipes are refused
// at start (check_versions).
#if CUBLAS_VERSION >= 120900
#define GEMM_BLOCK_SCALING 1
typedef enum {
    GEMM_SCALE_TENSOR = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F,
    GEMM_SCALE_TILE_128 = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F,
    GEMM_SCALE_BLOCK_128x128 = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F,
    GEMM_SCALE_MX_32 = CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0,
} GemmScaleMode;
#else
#define GEMM_BLOCK_SCALING 0
typedef enum {
    GEMM_SCALE_TENSOR = 0,
    GEMM_SCALE_TILE_128,
    GEMM_SCALE_BLOCK_128x128,
    GEMM_SCALE_MX_32
} GemmScaleMode;
#endif

typedef struct {
    const void *data;
    cudaDataType_t type; // CUDA_R_16BF, CUDA_R_8F_E4M3, CUDA_R_8F_E5M2
    const void *descale; // FP8 only: device pointer to 1/scale (FP32), or to the block factors (FP32, E8M0)
    int scale_mode;      // GemmScaleMode: GEMM_SCALE_TENSOR (0) for BF16 and per-tensor FP8
} GemmOperand;

// What the GEMM computes besides the product, in the row-major terms above; cuBLASLt's epilogues (cuBLASLt
// is column-major, so our rows of D are its columns: the bias runs along its rows, our A is its B).
typedef enum {
    GEMM_NO_EPILOGUE, // D = op(A) op(B) [+ D]
    GEMM_BIAS,        // D = op(A) op(B) + bias: BIAS
    // aux = op(A) op(B) + bias rounded to D's type, D = GELU of the same FP32 value (gpu/gelu.cuh's tanh
    // form on the emulation), aux's rows N apart: GELU_AUX_BIAS (the aux is "the GELU input matrix")
    GEMM_GELU_BIAS,
    // D = (op(A) op(B)) * GELU'(aux), aux (M,N) the forward's pre-activation, rows N apart: DGELU
    GEMM_DGELU,
    // D = op(A) op(B) [+ D] and bias_grad (M) = the sums of op(A) over K, overwritten (not accumulated):
    // BGRADB ("the number of columns of the matrix D", the reduction "over the GEMM's k dimension" of its B)
    GEMM_BIAS_GRAD,
} GemmEpilogueKind;

typedef struct {
    GemmEpilogueKind kind;
    const bf16 *bias; // GEMM_BIAS, GEMM_GELU_BIAS: (N), BF16
    bf16 *aux;        // GEMM_GELU_BIAS: written; GEMM_DGELU: read; (M,N), BF16 as D
    float *bias_grad; // GEMM_BIAS_GRAD: (M), FP32 as D ("the same type as the output elements")
} GemmEpilogue;

static inline GemmEpilogue gemm_bias(const bf16 *bias) { // bias NULL: none
    GemmEpilogue e = {bias ? GEMM_BIAS : GEMM_NO_EPILOGUE, bias, NULL, NULL};
    return e;
}

static inline GemmEpilogue gemm_gelu_bias(const bf16 *bias, bf16 *pre_activation) {
    GemmEpilogue e = {GEMM_GELU_BIAS, bias, pre_activation, NULL};
    return e;
}

static inline GemmEpilogue gemm_dgelu(const bf16 *pre_activation) {
    GemmEpilogue e = {GEMM_DGELU, NULL, (bf16 *)pre_activation, NULL}; // read only
    return e;
}

static inline GemmEpilogue gemm_bias_grad(float *bias_grad) {
    GemmEpilogue e = {GEMM_BIAS_GRAD, NULL, NULL, bias_grad};
    return e;
}

// The epilogues that may have no algorithm: the GEMM then declines them (gemm_fused).
static inline int is_fused_epilogue(GemmEpilogueKind kind) {
    return kind == GEMM_GELU_BIAS || kind == GEMM_DGELU || kind == GEMM_BIAS_GRAD;
}

// What the descriptor's bias pointer holds: the bias, or the bias gradient it writes.
static inline const void *epilogue_bias_pointer(const GemmEpilogue *e) {
    return e->kind == GEMM_BIAS_GRAD ? (const void *)e->bias_grad : (const void *)e->bias;
}

// One GEMM, its operands and options named: D (M,N) = op(A) (M,K) . op(B) (K,N) [+ the epilogue] [+ D when
// accumulate]. Each call builds it with designated initializers in the fields' order, e.g.
//   gemm(ctx, {.D = out, .d_type = CUDA_R_16BF, .A = x, .B = w, .trans_b = 1, .M = N, .N = OC, .K = IC,
//              .epilogue = gemm_bias(bias)}, stream);
// A field with a default may be left out (no transpose, no epilogue, D overwritten, the exact accumulation),
// the others not (g++'s -Wmissing-field-initializers says so). The tag: clang's -Wnon-c-typedef-for-linkage
// asks one of a typedef'd struct with default member initializers.
typedef struct GemmCall {
    void *D;
    cudaDataType_t d_type; // CUDA_R_16BF, or CUDA_R_32F for the weight gradients
    GemmOperand A;
    int trans_a = 0; // op(A) = A^T, A stored (K,M)
    GemmOperand B;
    int trans_b = 0; // op(B) = B^T, B stored (N,K)
    int M, N, K;
    GemmEpilogue epilogue = {GEMM_NO_EPILOGUE, NULL, NULL, NULL}; // gemm_bias(bias) and the others above
    int accumulate = 0; // D += the result (the weight gradients across micro-batches); else D = the result
    int fast_accum = 0; // FP8: the tensor cores' fast accumulation (by default the forward's only)
} GemmCall;

// One cached plan per distinct GEMM shape, type and epilogue: descriptors and the algorithm the heuristic
// chose. Pointers (data, bias, aux, scales) are set per call, so a plan serves every layer of the same
// shape, except that the heuristic reads the bias and aux pointers' values for their alignment (cuBLASLt's
// documentation of CUBLASLT_MATMUL_DESC_BIAS_POINTER and _EPILOGUE_AUX_POINTER) and may choose a kernel
// that needs it: both alignments are part of the key. Layer 0's bias can lie 256-byte aligned and layer 1's
// only 64-byte aligned. The aux's leading dimension is N, so the shape keys it. A fused epilogue the
// heuristic has no algorithm for gives a plan without one (has_algo 0): its calls decline, every time alike.
typedef struct {
    int M, N, K, trans_a, trans_b, accumulate, fast_accum, a_scale_mode, b_scale_mode;
    GemmEpilogueKind epilogue;
    unsigned bias_alignment, aux_alignment; // the largest power of two up to 256 dividing the pointer
    cudaDataType_t a_type, b_type, d_type;
    int has_algo;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a_layout, b_layout, d_layout;
    cublasLtMatmulAlgo_t algo;
} GemmPlan;

#define MAX_GEMM_PLANS 64

// What every GEMM pointer is aligned to: every buffer of the plan is 256-byte aligned, and every offset
// into one is a multiple of 16 bytes (row lengths are multiples of C, and C is a multiple of 16 in FP8,
// of 32 in BF16 where the attention needs a head size multiple of 32). cuBLASLt's heuristic assumes
// 256 bytes unless told (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES) and may then pick a kernel that
// faults or fails on layer 1's weights, which lie at 64- or 128-byte offsets in small models.
#define GEMM_MIN_ALIGNMENT 16u

typedef struct {
    cublasLtHandle_t handle;
    void *workspace;
    size_t workspace_bytes;
    GemmPlan plans[MAX_GEMM_PLANS];
    int num_plans;
    unsigned declined; // a bit per GemmEpilogueKind a plan had no algorithm for: the note is said once
} GemmContext;

static inline void gemm_init(GemmContext *ctx, void *workspace, size_t workspace_bytes) {
    memset(ctx, 0, sizeof(*ctx));
    cublas_check(cublasLtCreate(&ctx->handle));
    ctx->workspace = workspace;
    ctx->workspace_bytes = workspace_bytes;
}

static inline void gemm_destroy(GemmContext *ctx) {
    for (int i = 0; i < ctx->num_plans; i++) {
        GemmPlan *p = &ctx->plans[i];
        cublasLtMatmulDescDestroy(p->desc);
        cublasLtMatrixLayoutDestroy(p->a_layout);
        cublasLtMatrixLayoutDestroy(p->b_layout);
        cublasLtMatrixLayoutDestroy(p->d_layout);
    }
    cublasLtDestroy(ctx->handle);
}

// The largest power of two up to 256 that divides p (256 for NULL): what a kernel may assume of p.
static inline unsigned pointer_alignment(const void *p) {
    unsigned alignment = 256;
    while (alignment > 1 && (uintptr_t)p % alignment) alignment >>= 1;
    return alignment;
}

static inline int is_fp8_type(cudaDataType_t t) {
    return t == CUDA_R_8F_E4M3 || t == CUDA_R_8F_E5M2;
}

static inline const char *gemm_type_name(cudaDataType_t t) {
    return t == CUDA_R_8F_E4M3 ? "e4m3" : t == CUDA_R_8F_E5M2 ? "e5m2" : t == CUDA_R_16BF ? "bf16" : "fp32";
}

static inline const char *gemm_epilogue_name(GemmEpilogueKind kind) {
    static const char *const names[] = {"none", "bias", "GELU and bias (GELU_AUX_BIAS)",
                                        "GELU backward (DGELU)", "bias gradient (BGRADB)"};
    return names[kind];
}

static inline void set_desc_attribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute,
                                      const void *value, size_t size) {
    cublas_check(cublasLtMatmulDescSetAttribute(desc, attribute, value, size));
}

// The per-call pointers of a plan's descriptor: the bias or bias gradient, the aux, and the FP8 inverse
// scales (cuBLASLt's A is our B and the other way round).
static inline void gemm_set_pointers(GemmPlan *p, const GemmCall *c) {
    const void *bias = epilogue_bias_pointer(&c->epilogue);
    if (bias) set_desc_attribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
    if (c->epilogue.aux)
        set_desc_attribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &c->epilogue.aux,
                           sizeof(c->epilogue.aux));
    if (is_fp8_type(p->a_type)) {
        set_desc_attribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &c->B.descale,
                           sizeof(c->B.descale));
        set_desc_attribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &c->A.descale,
                           sizeof(c->A.descale));
    }
}

// The descriptor's epilogue: the bias in BF16 (the BF16 copy, for BF16 and FP8 GEMMs alike); the aux of D's
// type (the default), its rows N apart (cuBLASLt's leading dimension: our row length); the bias gradient of
// D's type (the default: FP32 for the weight gradients).
static inline void gemm_set_epilogue(GemmPlan *p) {
    static const cublasLtEpilogue_t epilogues[] = {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_BIAS,
                                                   CUBLASLT_EPILOGUE_GELU_AUX_BIAS, CUBLASLT_EPILOGUE_DGELU,
                                                   CUBLASLT_EPILOGUE_BGRADB};
    if (p->epilogue == GEMM_NO_EPILOGUE) return;
    set_desc_attribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogues[p->epilogue],
                       sizeof(cublasLtEpilogue_t));
    if (p->epilogue == GEMM_BIAS || p->epilogue == GEMM_GELU_BIAS) {
        cudaDataType_t bias_type = CUDA_R_16BF;
        set_desc_attribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type));
    }
    if (p->epilogue == GEMM_GELU_BIAS || p->epilogue == GEMM_DGELU) {
        int64_t aux_ld = p->N;
        set_desc_attribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld));
    }
}

// cuBLASLt is column-major: the row-major D (M,N) is its D^T (N,M) = op(B)^T op(A)^T, so our B is its
// first operand and our A its second, each transposed exactly when ours is. The pointers of the first
// call are set before the heuristic runs, which reads the bias and aux pointers' values for their alignment.
static inline GemmPlan *gemm_plan(GemmContext *ctx, GemmCall c) {
    const int M = c.M, N = c.N, K = c.K, trans_a = c.trans_a, trans_b = c.trans_b;
    const GemmEpilogueKind epilogue = c.epilogue.kind;
    cudaDataType_t a_type = c.A.type, b_type = c.B.type, d_type = c.d_type;
    unsigned bias_alignment = pointer_alignment(epilogue_bias_pointer(&c.epilogue)),
             aux_alignment = pointer_alignment(c.epilogue.aux);
    for (int i = 0; i < ctx->num_plans; i++) {
        GemmPlan *p = &ctx->plans[i];
        if (p->M == M && p->N == N && p->K == K && p->trans_a == trans_a && p->trans_b == trans_b &&
            p->a_type == a_type && p->b_type == b_type && p->d_type == d_type && p->epilogue == epilogue &&
            p->accumulate == c.accumulate && p->fast_accum == c.fast_accum &&
            p->bias_alignment == bias_alignment && p->aux_alignment == aux_alignment &&
            p->a_scale_mode == c.A.scale_mode && p->b_scale_mode == c.B.scale_mode)
            return p;
    }
    if (ctx->num_plans == MAX_GEMM_PLANS) fail("cuBLASLt: more than %d distinct GEMM shapes", MAX_GEMM_PLANS);
    if (is_fp8_type(a_type) != is_fp8_type(b_type))
        fail("cuBLASLt: an FP8 GEMM needs both operands in FP8, got %s x %s", gemm_type_name(a_type),
             gemm_type_name(b_type));
    if (a_type == CUDA_R_8F_E5M2 && b_type == CUDA_R_8F_E5M2)
        fail("cuBLASLt: E5M2 x E5M2 is not an FP8 GEMM cuBLASLt runs (one operand must be E4M3): M=%d N=%d "
             "K=%d",
             M, N, K);
    if (is_fp8_type(a_type) && (trans_a || !trans_b))
        fail("cuBLASLt: FP8 GEMMs need K-major operands (trans_a=0, trans_b=1), got trans_a=%d trans_b=%d",
             trans_a, trans_b);
    GemmPlan *p = &ctx->plans[ctx->num_plans];
    memset(p, 0, sizeof(*p));
    p->M = M, p->N = N, p->K = K, p->trans_a = trans_a, p->trans_b = trans_b;
    p->a_type = a_type, p->b_type = b_type, p->d_type = d_type;
    p->epilogue = epilogue, p->accumulate = c.accumulate, p->fast_accum = c.fast_accum;
    p->bias_alignment = bias_alignment, p->aux_alignment = aux_alignment;
    p->a_scale_mode = c.A.scale_mode, p->b_scale_mode = c.B.scale_mode;
    cublas_check(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t op_first = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;  // our B
    cublasOperation_t op_second = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N; // our A
    set_desc_attribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof(op_first));
    set_desc_attribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof(op_second));
    if (is_fp8_type(a_type)) {
        int8_t fast = (int8_t)c.fast_accum;
        set_desc_attribute(p->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast));
    }
    if (c.A.scale_mode != GEMM_SCALE_TENSOR || c.B.scale_mode != GEMM_SCALE_TENSOR) { // cuBLASLt's A is our B
#if GEMM_BLOCK_SCALING
        int32_t first = c.B.scale_mode, second = c.A.scale_mode;
        set_desc_attribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &first, sizeof(first));
        set_desc_attribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &second, sizeof(second));
#else
        fail("cuBLASLt: a block-scaled GEMM in a build against cuBLAS %d.%d headers, which have no block "
             "scale modes (a bug: check_versions refuses the block recipes at start)",
             CUBLAS_VERSION / 10000, CUBLAS_VERSION / 100 % 100);
#endif
    }
    gemm_set_epilogue(p);
    // column-major shapes: first operand (our B) is N x K (op N: stored N x K, ld N; op T: stored K x N, ld
    // K)
    cublas_check(
        cublasLtMatrixLayoutCreate(&p->a_layout, b_type, trans_b ? K : N, trans_b ? N : K, trans_b ? K : N));
    cublas_check(
        cublasLtMatrixLayoutCreate(&p->b_layout, a_type, trans_a ? M : K, trans_a ? K : M, trans_a ? M : K));
    cublas_check(cublasLtMatrixLayoutCreate(&p->d_layout, d_type, N, M, N));
    cublasLtMatmulPreference_t preference;
    cublas_check(cublasLtMatmulPreferenceCreate(&preference));
    cublas_check(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                      &ctx->workspace_bytes, sizeof(ctx->workspace_bytes)));
    const uint32_t alignment = GEMM_MIN_ALIGNMENT;
    const cublasLtMatmulPreferenceAttributes_t alignment_attributes[] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; i++)
        cublas_check(cublasLtMatmulPreferenceSetAttribute(preference, alignment_attributes[i], &alignment,
                                                          sizeof(alignment)));
    gemm_set_pointers(p, &c);
    cublasLtMatmulHeuristicResult_t heuristic;
    int found = 0;
    cublasStatus_t status =
        cublasLtMatmulAlgoGetHeuristic(ctx->handle, p->desc, p->a_layout, p->b_layout, p->d_layout,
                                       p->d_layout, preference, 1, &heuristic, &found);
    cublasLtMatmulPreferenceDestroy(preference);
    int none = status == CUBLAS_STATUS_NOT_SUPPORTED || (status == CUBLAS_STATUS_SUCCESS && found == 0);
    if (none && is_fused_epilogue(epilogue)) { // the caller runs the separate kernels instead
        if (!(ctx->declined & (1u << epilogue)))
            printf("note | cuBLASLt has no algorithm fusing the %s into a %s GEMM (M=%d N=%d K=%d, the "
                   "first): the separate kernels run instead\n",
                   gemm_epilogue_name(epilogue), gemm_type_name(a_type), M, N, K);
        ctx->declined |= 1u << epilogue;
        ctx->num_plans++;
        return p;
    }
    if (status != CUBLAS_STATUS_SUCCESS || found == 0)
        fail("cuBLASLt: no algorithm for the %s x %s -> %s GEMM M=%d N=%d K=%d (trans_a=%d trans_b=%d, scale "
             "modes %d x %d, epilogue %s)",
             gemm_type_name(a_type), gemm_type_name(b_type), gemm_type_name(d_type), M, N, K, trans_a,
             trans_b, c.A.scale_mode, c.B.scale_mode, gemm_epilogue_name(epilogue));
    p->algo = heuristic.algo;
    p->has_algo = 1;
    ctx->num_plans++;
    return p;
}

// The GEMM c describes; returns 0, queuing nothing, where its epilogue is a fused one the plan has no
// algorithm for.
static inline int gemm_run(GemmContext *ctx, GemmCall c, cudaStream_t stream) {
    const GemmEpilogue e = c.epilogue;
    const void *pointers[6] = {c.A.data, c.B.data, c.D, e.bias, e.aux, e.bias_grad};
    static const char *const names[6] = {"A", "B", "D", "bias", "aux", "bias gradient"};
    for (int i = 0; i < 6; i++)
        if ((uintptr_t)pointers[i] % GEMM_MIN_ALIGNMENT)
            fail("cuBLASLt: %s pointer %p of the GEMM M=%d N=%d K=%d is not %u-byte aligned (a bug)",
                 names[i], pointers[i], c.M, c.N, c.K, GEMM_MIN_ALIGNMENT);
    if (is_fp8_type(c.A.type) && (!c.A.descale || !c.B.descale))
        fail("cuBLASLt: FP8 GEMM M=%d N=%d K=%d without an inverse scale (a bug)", c.M, c.N, c.K);
    // the epilogue's pointers, and the D its aux or bias gradient has the type of
    int aux = e.kind == GEMM_GELU_BIAS || e.kind == GEMM_DGELU, grad = e.kind == GEMM_BIAS_GRAD;
    if ((e.kind == GEMM_GELU_BIAS && !e.bias) || aux != (e.aux != NULL) || grad != (e.bias_grad != NULL) ||
        ((aux && c.d_type != CUDA_R_16BF) || (grad && c.d_type != CUDA_R_32F)))
        fail("cuBLASLt: the %s epilogue of the GEMM M=%d N=%d K=%d without its pointers or with a %s D (a "
             "bug)",
             gemm_epilogue_name(e.kind), c.M, c.N, c.K, gemm_type_name(c.d_type));
    GemmPlan *p = gemm_plan(ctx, c);
    if (!p->has_algo) return 0;
    gemm_set_pointers(p, &c);
    const float alpha = 1.0f, beta = c.accumulate ? 1.0f : 0.0f;
    cublas_check(cublasLtMatmul(ctx->handle, p->desc, &alpha, c.B.data, p->a_layout, c.A.data, p->b_layout,
                                &beta, c.D, p->d_layout, c.D, p->d_layout, &p->algo, ctx->workspace,
                                ctx->workspace_bytes, stream));
    return 1;
}

// The GEMM with no epilogue or a bias (gemm_bias: none where the bias is NULL), which always has an
// algorithm: the fused epilogues, which may not, go through gemm_fused.
static inline void gemm(GemmContext *ctx, GemmCall c, cudaStream_t stream) {
    if (is_fused_epilogue(c.epilogue.kind))
        fail("cuBLASLt: gemm with the %s epilogue, which may have no algorithm: gemm_fused (a bug)",
             gemm_epilogue_name(c.epilogue.kind));
    gemm_run(ctx, c, stream);
}

// The GEMM with a fused epilogue (GEMM_GELU_BIAS and GEMM_DGELU with a BF16 D, GEMM_BIAS_GRAD with an FP32
// D): 1 once queued; 0, queuing nothing, where cuBLASLt's heuristic has no algorithm for it (decided once,
// when the plan is made, and said in one line), so that the caller runs the separate kernels instead.
static inline int gemm_fused(GemmContext *ctx, GemmCall c, cudaStream_t stream) {
    if (!is_fused_epilogue(c.epilogue.kind))
        fail("cuBLASLt: gemm_fused with the %s epilogue (a bug)", gemm_epilogue_name(c.epilogue.kind));
    return gemm_run(ctx, c, stream);
}

#endif // GPU_GEMM_CUH

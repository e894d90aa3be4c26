// train_gpt.c: the CPU reference trainer. GPT-2 and Llama (gpt_model.h) in plain C with FP32 arithmetic,
// which applies, at exactly the places where the CUDA trainer rounds, the same roundings:
//   --dtype bfloat16: every activation and activation gradient is stored in BF16 (round to nearest
//     even after each op), the weights the ops read are a BF16 copy of the FP32 master weights;
//   --dtype float8: as bfloat16, and in addition the four linear layers of every block run their three
//     GEMMs on FP8 operands: forward E4M3 input x E4M3 weight, data gradient E5M2 output gradient x
//     E4M3 weight, weight gradient E5M2 output gradient x E4M3 input, with per-tensor scales, or with
//     per-block scales (--fp8_recipe blockwise, mxfp8; mxfp8 is E4M3 throughout).
// GEMMs then run in FP32, which is what an FP8/BF16 GEMM with FP32 accumulation computes up to
// summation order. Weight gradients, master weights and AdamW moments are FP32 in every dtype.
// Attention scores and softmax, LayerNorm and RMSNorm statistics, the rotary embeddings' rotations, GELU and
// SwiGLU and the cross-entropy are computed in FP32 and only their outputs are rounded, as a fused GPU
// kernel does.
// Several processes (mpirun or srun; dist.h) train data-parallel with the CUDA trainer's algorithm: each
// reads its rows of every batch, gradients are summed over MPI, --zero_stage 1/3 shards the optimizer
// state (and, on the GPU, the weights and gradients), and the FP8 amaxes are max-reduced so that with the
// delayed recipe every rank casts with the same scales (the current recipe scales each rank's cast by its
// own amax). --recompute 1 keeps one layer of activations.
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <sched.h>
#include <unistd.h>
#ifdef USE_BLAS
#include <cblas.h>
#endif

#include "core/atomic_file.h"
#include "core/checkpoint.h"
#include "core/checkpoint_io.h"
#include "core/cli.h"
#include "core/common.h"
#include "core/dataloader.h"
#include "core/debug_state.h"
#include "core/dist.h"
#include "core/dry_run.h"
#include "core/eval_data.h"
#include "core/fp8_scaling.h"
#include "core/gpt_model.h"
#include "core/health.h"
#include "core/manifest.h"
#include "core/model_file.h"
#include "core/run_control.h"
#include "core/run_files.h"
#include "core/run_records.h"
#include "core/sampling.h"
#include "core/state_reshard.h"
#include "core/tokenizer.h"
#include "core/train_log.h"
#include "core/train_state.h"

// ----------------------------------------------------------------------------
// Precision emulation

// x in the storage format of activations in this dtype (BF16 unless float32). The ops that produce a
// tensor round it as they write it; round_to_storage is for what a GEMM or an accumulation produces.
static inline float to_storage(float x, int dtype) {
    return dtype == DTYPE_FLOAT32 ? x : bf16_round(x);
}

static void round_to_storage(float *x, size_t n, int dtype) {
    if (dtype == DTYPE_FLOAT32) return;
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) x[i] = bf16_round(x[i]);
}

static float abs_max(const float *x, size_t n) {
    float amax = 0.0f;
#pragma omp parallel for reduction(max : amax)
    for (size_t i = 0; i < n; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax; // NaN ignored, as by fmaxf
    return amax;
}

// The FP8 value of x * scale as fp8_quantize_value gives it (a subnormal x is a zero of its sign), in the
// vectorisable form.
static inline float quantize_one(float x, float scale, Fp8Format format) {
    uint32_t bits = fp8_f32_to_bits(x);
    float zero = fp8_bits_to_f32(bits & 0x80000000u);
    return (bits & 0x7F800000u) == 0 ? zero : fp8_round_value(x * scale, format);
}

// out[i] = the FP8 value of x[i] * scale (the scale is not divided back out: the GEMM does that); returns
// max |x[i]| (NaN ignored), which the delayed recipe records. With stats, the values saturated and flushed
// to zero by this cast are added to its counters (of the product itself, as fp8_is_flushed counts it).
static float quantize(float *out, const float *x, size_t n, float scale, Fp8Format format, Fp8Stats *stats,
                      int tensor) {
    float amax = 0.0f;
    if (!stats) { // evaluation: no telemetry, no counting
#pragma omp parallel for simd reduction(max : amax)
        for (size_t i = 0; i < n; i++) {
            out[i] = quantize_one(x[i], scale, format);
            amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
        }
        return amax;
    }
    unsigned long long saturated = 0, flushed = 0;
#pragma omp parallel for simd reduction(+ : saturated, flushed) reduction(max : amax)
    for (size_t i = 0; i < n; i++) {
        out[i] = quantize_one(x[i], scale, format);
        amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
        float scaled = x[i] * scale;
        saturated += fp8_is_saturated(scaled, format);
        flushed += (fp8_f32_to_bits(scaled) & 0x7FFFFFFFu) != 0 &&
                   (fp8_f32_to_bits(fp8_round_value(scaled, format)) & 0x7FFFFFFFu) == 0;
    }
    stats->saturated[tensor] += saturated;
    stats->flushed[tensor] += flushed;
    stats->elements[tensor] += n;
    return amax;
}

// Block-scaled cast of x (rows, cols), row-major, in tiles of tile_rows x tile_cols (1 x b along the rows,
// b x 1 down the columns, or b x b; partial tiles at the edges): out = fp8(x * s) * fp8_block_descale(s),
// the dequantized values the GEMM multiplies, s the tile's fp8_block_scale. Returns max |x| (NaN ignored).
// With stats, the saturated and flushed counts and the spread of the scales of the tiles that are not all
// zero go to tensor `tensor`.
static float quantize_blocks(float *out, const float *x, int rows, int cols, int tile_rows, int tile_cols,
                             int recipe, Fp8Format format, int margin, int pow2, Fp8Stats *stats,
                             int tensor) {
    int row_tiles = (rows + tile_rows - 1) / tile_rows, col_tiles = (cols + tile_cols - 1) / tile_cols;
    float amax_all = 0.0f, scale_min = INFINITY, scale_max = 0.0f;
    unsigned long long saturated = 0, flushed = 0;
#pragma omp parallel for collapse(2) reduction(max : amax_all, scale_max) reduction(min : scale_min) \
    reduction(+ : saturated, flushed)
    for (int tr = 0; tr < row_tiles; tr++) {
        for (int tc = 0; tc < col_tiles; tc++) {
            int r0 = tr * tile_rows, r1 = r0 + tile_rows < rows ? r0 + tile_rows : rows;
            int c0 = tc * tile_cols, c1 = c0 + tile_cols < cols ? c0 + tile_cols : cols;
            float amax = 0.0f;
            for (int r = r0; r < r1; r++)
                for (int c = c0; c < c1; c++) {
                    float a = fabsf(x[(size_t)r * cols + c]);
                    amax = a > amax ? a : amax;
                }
            float scale = fp8_block_scale(amax, recipe, format, margin, pow2),
                  descale = fp8_block_descale(scale);
            for (int r = r0; r < r1; r++)
                for (int c = c0; c < c1; c++) {
                    float v = x[(size_t)r * cols + c], scaled = v * scale;
                    out[(size_t)r * cols + c] = quantize_one(v, scale, format) * descale;
                    saturated += fp8_is_saturated(scaled, format);
                    flushed += (fp8_f32_to_bits(scaled) & 0x7FFFFFFFu) != 0 &&
                               (fp8_f32_to_bits(fp8_round_value(scaled, format)) & 0x7FFFFFFFu) == 0;
                }
            amax_all = amax > amax_all ? amax : amax_all;
            if (amax > 0.0f && amax <= FLT_MAX) { // an all-zero block's scale says nothing
                scale_min = scale < scale_min ? scale : scale_min;
                scale_max = scale > scale_max ? scale : scale_max;
            }
        }
    }
    if (stats) {
        stats->saturated[tensor] += saturated;
        stats->flushed[tensor] += flushed;
        stats->elements[tensor] += (unsigned long long)rows * cols;
        stats->scale_min[tensor] = fminf(stats->scale_min[tensor], scale_min);
        stats->scale_max[tensor] = fmaxf(stats->scale_max[tensor], scale_max);
    }
    return amax_all;
}

// ----------------------------------------------------------------------------
// GEMM, row-major: C (M,N) = alpha * op(A) (M,K) . op(B) (K,N) + beta * C, op = transpose when trans_*.
// beta == 0 does not read C. Each element's sum runs over k in the same order whatever the thread count,
// so results do not depend on OMP_NUM_THREADS.

#ifdef USE_BLAS
// OpenBLAS runs single-threaded (main calls openblas_set_num_threads(1)) inside OpenMP's threads, each on
// its band of C: Debian's pthread OpenBLAS spinning beside OpenMP's own threads made some steps 2-10x slower.
static size_t gemm_pack_floats(size_t max_dim) {
    (void)max_dim;
    return 0;
}

static const char *gemm_name(void) {
    static char name[64];
    snprintf(name, sizeof(name), "OpenBLAS %s", openblas_get_corename());
    return name;
}

// OpenBLAS 0.3.21 (Debian 12) takes CPUs newer than it knows, such as recent Xeons in VMs, for a Prescott
// and runs SSE3 kernels there, 2.5x slower than its own AVX-512 ones and slower than the plain-C GEMM.
static void gemm_check_kernels(void) {
    const char *core = openblas_get_corename();
    int old_core = !strcmp(core, "Prescott") || !strcmp(core, "Core2") || !strcmp(core, "Penryn") ||
                   !strcmp(core, "Nehalem") || !strcmp(core, "Atom");
    if (old_core && __builtin_cpu_supports("avx2"))
        printf(
            "note: OpenBLAS chose its %s kernels on a CPU with AVX2: start with OPENBLAS_CORETYPE=%s for its "
            "fast ones\n",
            core, __builtin_cpu_supports("avx512f") ? "SkylakeX" : "Haswell");
}

static void gemm(float *pack, int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                 const float *B, float beta, float *C) {
    (void)pack;
    int lda = trans_a ? M : K, ldb = trans_b ? K : N, bands = omp_get_max_threads(), by_rows = M >= N;
    CBLAS_TRANSPOSE op_a = trans_a ? CblasTrans : CblasNoTrans, op_b = trans_b ? CblasTrans : CblasNoTrans;
#pragma omp parallel for
    for (int band = 0; band < bands; band++) {
        int extent = by_rows ? M : N, begin = (int)((long)extent * band / bands),
            end = (int)((long)extent * (band + 1) / bands);
        if (end == begin) continue;
        if (by_rows) // rows begin..end of op(A) and of C
            cblas_sgemm(CblasRowMajor, op_a, op_b, end - begin, N, K, alpha,
                        A + (trans_a ? (size_t)begin : (size_t)begin * lda), lda, B, ldb, beta,
                        C + (size_t)begin * N, N);
        else // columns begin..end of op(B) and of C
            cblas_sgemm(CblasRowMajor, op_a, op_b, M, end - begin, K, alpha, A, lda,
                        B + (trans_b ? (size_t)begin * ldb : (size_t)begin), ldb, beta, C + begin, N);
    }
}
#else
// Plain C, tiled for registers and caches: for each block of GEMM_KC terms, op(A) is packed into panels of
// GEMM_MR rows and op(B) into panels of GEMM_NR columns, both k-major and zero-padded at the edges, so that
// the micro-kernel reads both with unit stride and keeps its GEMM_MR x GEMM_NR sums in vector registers
// (6 x 16 floats: 12 AVX2 or 6 AVX-512 registers). Tiles of GEMM_MC rows x GEMM_NC columns go to the
// threads; a tile's A panels stay in L2 while it walks its B panels.
#define GEMM_MR 6
#define GEMM_NR 16
#define GEMM_KC 256
#define GEMM_MC (16 * GEMM_MR)
#define GEMM_NC (16 * GEMM_NR)

#ifdef __FMA__
#define GEMM_FMA(a, b, c) fmaf(a, b, c) // one vfmadd once vectorised
#else
#define GEMM_FMA(a, b, c) ((a) * (b) + (c))
#endif

static size_t round_up(size_t n, size_t multiple) {
    return (n + multiple - 1) / multiple * multiple;
}

// The pack buffer of a GEMM whose M and N are at most max_dim: one block of KC terms of op(A) and op(B).
static size_t gemm_pack_floats(size_t max_dim) {
    return GEMM_KC * (round_up(max_dim, GEMM_MR) + round_up(max_dim, GEMM_NR));
}

// op(X) rows [0,rows) x terms [k0,k0+kc) -> panels of `width` rows: panel p, term k, row r at
// dst[(p * kc + k) * width + r], rows past the end zero. op(X)(r,k) = X[r*ld + k], or X[k*ld + r] when
// transposed.
static void gemm_pack(float *dst, int width, int transposed, const float *X, int ld, int rows, int k0,
                      int kc) {
    int panels = (rows + width - 1) / width;
#pragma omp parallel for
    for (int p = 0; p < panels; p++) {
        float *panel = dst + (size_t)p * kc * width;
        int first = p * width, valid = rows - first < width ? rows - first : width;
        for (int r = valid; r < width; r++)
            for (int k = 0; k < kc; k++) panel[(size_t)k * width + r] = 0.0f;
        if (transposed) { // at each term the panel's rows are contiguous in X
            for (int k = 0; k < kc; k++) {
                const float *src = X + (size_t)(k0 + k) * ld + first;
                for (int r = 0; r < valid; r++) panel[(size_t)k * width + r] = src[r];
            }
        } else { // each row's terms are contiguous in X
            for (int r = 0; r < valid; r++) {
                const float *src = X + (size_t)(first + r) * ld + k0;
                for (int k = 0; k < kc; k++) panel[(size_t)k * width + r] = src[k];
            }
        }
    }
}

// The GEMM_MR x GEMM_NR sums over kc terms of an A panel and a B panel.
static void gemm_micro_kernel(int kc, const float *a_panel, const float *b_panel,
                              float sums[GEMM_MR][GEMM_NR]) {
    for (int i = 0; i < GEMM_MR; i++)
        for (int j = 0; j < GEMM_NR; j++) sums[i][j] = 0.0f;
    for (int k = 0; k < kc; k++) {
        const float *a = a_panel + (size_t)k * GEMM_MR, *b = b_panel + (size_t)k * GEMM_NR;
        for (int i = 0; i < GEMM_MR; i++) {
#pragma omp simd
            for (int j = 0; j < GEMM_NR; j++) sums[i][j] = GEMM_FMA(a[i], b[j], sums[i][j]);
        }
    }
}

// C's tile at (row, col), clipped to M x N: beta * C + alpha * sums on the first block of terms, then
// + alpha * sums.
static void gemm_store(float *C, int N, int row, int col, int M, float alpha, float beta, int first_block,
                       float sums[GEMM_MR][GEMM_NR]) {
    int rows = M - row < GEMM_MR ? M - row : GEMM_MR, cols = N - col < GEMM_NR ? N - col : GEMM_NR;
    for (int i = 0; i < rows; i++) {
        float *c = C + (size_t)(row + i) * N + col;
        for (int j = 0; j < cols; j++) {
            float kept = !first_block ? c[j] : beta == 0.0f ? 0.0f : beta * c[j];
            c[j] = kept + alpha * sums[i][j];
        }
    }
}

static const char *gemm_name(void) {
    return "plain C";
}

static void gemm_check_kernels(void) {}

static void gemm(float *pack, int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                 const float *B, float beta, float *C) {
    int lda = trans_a ? M : K, ldb = trans_b ? K : N;
    float *a_packed = pack, *b_packed = pack + GEMM_KC * round_up((size_t)M, GEMM_MR);
    int row_tiles = (M + GEMM_MC - 1) / GEMM_MC, col_tiles = (N + GEMM_NC - 1) / GEMM_NC;
    for (int k0 = 0; k0 < K || k0 == 0; k0 += GEMM_KC) {
        int kc = K - k0 < GEMM_KC ? K - k0 : GEMM_KC;
        gemm_pack(a_packed, GEMM_MR, trans_a, A, lda, M, k0, kc);
        gemm_pack(b_packed, GEMM_NR, !trans_b, B, ldb, N, k0, kc);
#pragma omp parallel for collapse(2)
        for (int rt = 0; rt < row_tiles; rt++) {
            for (int ct = 0; ct < col_tiles; ct++) {
                int row_end = (rt + 1) * GEMM_MC < M ? (rt + 1) * GEMM_MC : M;
                int col_end = (ct + 1) * GEMM_NC < N ? (ct + 1) * GEMM_NC : N;
                for (int col = ct * GEMM_NC; col < col_end; col += GEMM_NR) {
                    const float *b_panel = b_packed + (size_t)(col / GEMM_NR) * kc * GEMM_NR;
                    for (int row = rt * GEMM_MC; row < row_end; row += GEMM_MR) {
                        float sums[GEMM_MR][GEMM_NR];
                        gemm_micro_kernel(kc, a_packed + (size_t)(row / GEMM_MR) * kc * GEMM_MR, b_panel,
                                          sums);
                        gemm_store(C, N, row, col, M, alpha, beta, k0 == 0, sums);
                    }
                }
            }
        }
    }
}
#endif

// ----------------------------------------------------------------------------
// The model

// Per-layer activations are kept for L layers, or with --recompute for one (slot 0): the backward then
// recomputes each layer's forward from its input (residual3 of the layer before, kept for every layer).
// QKV = the qkv row's features (GPT-2 3C), FC = the fc linear's outputs (GPT-2 4C, Llama 2F: up and gate),
// F = the MLP's hidden features (GPT-2 4C). Llama's norms are RMSNorms (the mean buffers unused) and its
// qkv holds the queries and keys after the rotary embeddings.
typedef struct {
    float *encoded;             // (B,T,C)
    float *ln1;                 // (L,B,T,C)
    float *ln1_mean, *ln1_rstd; // (L,B,T)
    float *qkv;                 // (L,B,T,QKV)
    float *atty;                // (L,B,T,C)
    float *att;                 // (L,B,NH,T,T) softmax probabilities, FP32
    float *residual2;           // (L,B,T,C)
    float *ln2;                 // (L,B,T,C)
    float *ln2_mean, *ln2_rstd; // (L,B,T)
    float *fch;                 // (L,B,T,FC)
    float *fch_gelu;            // (L,B,T,F) GELU's output, or SwiGLU's
    float *residual3;           // (L,B,T,C)
    float *lnf;                 // (B,T,C)
    float *lnf_mean, *lnf_rstd; // (B,T)
    float *logits;              // (B,T,Vp)
    float *probs;               // (B,T,Vp), turned into dlogits by the backward
    float *losses;              // (B,T)
    float *proj_out;            // (B,T,C) scratch: attention / MLP projection output before the residual add
    float *rope;                // (maxT,hs/2,2) Llama: the rotary embeddings' cos and sin (gpt_model.h)
    // float8 only: each linear's quantized input, saved by the forward for the weight-gradient GEMM
    float *input_q[NUM_BLOCK_LINEARS]; // (L,B,T,IC)
} Activations;

typedef struct {
    float *dresidual; // (B,T,C) gradient of the residual stream
    float *dc;        // (B,T,C) gradient of a LayerNorm output or of the attention output
    float *dqkv;      // (B,T,QKV)
    float *dfch;    // (B,T,FC) gradient of the GELU output, then (in place) of its input; Llama: of SwiGLU's
                    // input
    float *dhidden; // (B,T,F) Llama: gradient of SwiGLU's output
    float *dout_q;  // (B,T,W) float8: the quantized output gradient of the linear being differentiated
                    // (block recipes: in tiles along its features, and the forward's input tiles too);
                    // W = model_widest_features
    float *dout_qc; // (B,T,W) block recipes: that gradient in tiles along the tokens (weight gradient)
    float *att_row; // (B,NH,T) scratch for the attention backward
} Gradients;

// FP8 scaling state of the activations and gradients: for every layer and linear, one input tensor
// (E4M3) and one output-gradient tensor (E5M2; mxfp8 E4M3). The block recipes measure every block and
// keep only the step's amaxes.
typedef struct {
    int recipe, history_len, margin, pow2_scales;
    int num_tensors;         // L * NUM_BLOCK_LINEARS * 2
    float *amax_history;     // (num_tensors, history_len) ring buffers, slot step % history_len
    float *amax_current;     // (num_tensors) max |x| seen in the current step
    float *scale;            // (num_tensors) scale the current step casts with
    float *input_scale_used; // (L * NUM_BLOCK_LINEARS) scale of each saved quantized input (current recipe
                             // varies)
    float *weight_scale;     // (L * NUM_BLOCK_LINEARS) exact-amax scale of each cached FP8 weight
    Fp8Stats stats;          // telemetry of this step's casts (health.h)
} Fp8State;

// --fp8_accumulation hopper: one MMA's terms of op(A) (M, FP8_MMA_K) and op(B) (FP8_MMA_K, N), packed, and
// the (M,N) sums of the MMA's products, the tensor cores' partial sums and the FP32 accumulators.
typedef struct {
    float *a_terms, *b_terms, *products, *partial, *acc;
} TensorCoreScratch;

typedef struct {
    GPTConfig config;
    int dtype;
    int B, T;      // the micro-batch the buffers are sized for
    int recompute; // 1: per-layer activations for one layer, recomputed in the backward
    size_t num_params;
    float *memory;         // the one allocation every buffer below is carved from
    float *params;         // FP32 master weights
    float *params_compute; // what the ops read: params itself (float32) or its BF16 rounding
    float *weights_fp8;    // float8: FP8 values of the linear weights (scaled by weight_scale), same layout;
                           // block recipes: their dequantized values (blockwise 128x128 blocks, mxfp8 1x32
                           // along the input features)
    float *weights_fp8_t;  // mxfp8: the weights in 32x1 blocks along the output features (data gradient)
    float *grads;          // FP32, accumulated over micro-batches
    float *gemm_pack;      // the GEMM's packed operands (none with BLAS)
    int fp8_accumulation;  // Fp8Accumulation: FP8 GEMMs in FP32, or as Hopper's tensor cores sum them
    int fast_accum;        // FastAccum: which of those skip the promotion to FP32
    TensorCoreScratch tensor_core;
    // ZeRO (dist.h): this rank's shard of the vector, S elements. With one way (ZeRO-0, or one process)
    // the shard is the whole vector and master, grad_shard alias params, grads. The CPU reference keeps
    // the gathered params and full grads at every stage: its stages differ in what is reduced, when, and
    // what each rank updates, which is what the GPU's memory savings rest on (so --keep_gathered, which
    // keeps ZeRO-3's gathered weights through an optimizer step on the GPU, is what it always does).
    const Dist *dist;
    int zero_stage, ways;
    // --grad_reduce_dtype bfloat16: the gradients summed over the ranks in BF16
    int grad_reduce_bf16;
    ShardMap shards;     // this rank's place in the layout
    size_t shard_count;  // S
    float *master;       // (S) FP32 master weights this rank updates
    float *grad_shard;   // (S) the summed gradients of those weights
    float *m, *v;        // (S) AdamW moments
    float *unit_reduced; // (largest chunk) scratch of one unit's reduce-scatter
    Activations acts;
    Gradients dacts;
    Fp8State fp8;
    float mean_loss; // of the last forward with targets
} GPT;

static Fp8Format fp8_tensor_format(const Fp8State *s, int index) {
    return fp8_role_format(s->recipe, fp8_tensor_role(index));
}

static void fp8_state_init(Fp8State *s, int num_layers, const TrainOptions *opts) {
    s->recipe = opts->fp8_recipe;
    s->history_len = opts->amax_history;
    s->margin = opts->fp8_margin;
    s->pow2_scales = opts->fp8_pow2_scales;
    s->num_tensors = num_layers * NUM_BLOCK_LINEARS * 2;
    size_t history_floats = (size_t)s->num_tensors * s->history_len;
    s->amax_history = (float *)malloc_check(history_floats * sizeof(float), "amax history");
    for (size_t i = 0; i < history_floats; i++) s->amax_history[i] = FP8_AMAX_UNRECORDED;
    s->amax_current = (float *)calloc_check(s->num_tensors, sizeof(float), "amax");
    s->scale = (float *)malloc_check(s->num_tensors * sizeof(float), "fp8 scales");
    s->input_scale_used = (float *)malloc_check(num_layers * NUM_BLOCK_LINEARS * sizeof(float), "fp8 scales");
    s->weight_scale = (float *)malloc_check(num_layers * NUM_BLOCK_LINEARS * sizeof(float), "fp8 scales");
    fp8_stats_alloc(&s->stats, num_layers, opts->fp8_recipe);
}

// Scales of the next step from the histories: with an empty history (a fresh run) this is 1, and unused
// (fp8_cast measures such a tensor).
static void fp8_scales_from_history(Fp8State *s) {
    for (int i = 0; i < s->num_tensors; i++) {
        Fp8Format format = fp8_tensor_format(s, i);
        float amax = fp8_history_max(s->amax_history + (size_t)i * s->history_len, s->history_len);
        s->scale[i] = fp8_compute_scale(amax, format, s->margin);
    }
}

// Once per optimizer step: the step's amaxes enter the histories (delayed recipe) and the scales move on.
// A skipped step's amaxes are dropped.
static void fp8_end_step(Fp8State *s, long step, int skipped) {
    if (!fp8_recipe_uses_history(s->recipe) || skipped) {
        memset(s->amax_current, 0, s->num_tensors * sizeof(float));
        return;
    }
    for (int i = 0; i < s->num_tensors; i++) {
        Fp8Format format = fp8_tensor_format(s, i);
        fp8_delayed_update(s->amax_history + (size_t)i * s->history_len, s->history_len, step,
                           &s->amax_current[i], &s->scale[i], format, s->margin);
    }
}

// Casts tensor `index` (x, n elements) into out. delayed: with this step's scale, or while the tensor's
// history is empty with the exact scale of x's amax, the max over the ranks (every rank scales alike, as
// with a history); current: with the exact scale of this rank's x. In training (record) the step's amax
// and the telemetry counts are kept.
static float fp8_cast(Fp8State *s, const Dist *dist, int index, const float *x, size_t n, float *out,
                      int record) {
    Fp8Format format = fp8_tensor_format(s, index);
    int history = fp8_recipe_uses_history(s->recipe),
        unrecorded =
            history && fp8_history_empty(s->amax_history + (size_t)index * s->history_len, s->history_len);
    if (!history || unrecorded) {
        float amax = abs_max(x, n);
        if (unrecorded) dist_max_floats(dist, &amax, 1);
        s->scale[index] = fp8_compute_scale(amax, format, s->margin);
    }
    float amax = quantize(out, x, n, s->scale[index], format, record ? &s->stats : NULL, index);
    if (record) s->amax_current[index] = fmaxf(s->amax_current[index], amax);
    return s->scale[index];
}

// A block recipe's casts of linear `linear`'s weight (OC, IC) at offset: blockwise in 128x128 blocks, which
// serve the forward and the data gradient; mxfp8 in 1x32 blocks along IC (forward) and, into weights_fp8_t,
// 32x1 blocks along OC (data gradient).
static void cast_weight_blocks(GPT *model, int linear, size_t offset, int tensor) {
    const GPTConfig *cfg = &model->config;
    const Fp8State *s = &model->fp8;
    int OC = linear_out_features(cfg, linear), IC = linear_in_features(cfg, linear),
        b = fp8_block_size(s->recipe);
    Fp8Stats *stats = (Fp8Stats *)&s->stats;
    const float *w = model->params + offset;
    int forward_rows = fp8_recipe(s->recipe).weight_rows;
    stats->amax[tensor] = quantize_blocks(model->weights_fp8 + offset, w, OC, IC, forward_rows, b, s->recipe,
                                          FP8_E4M3, s->margin, s->pow2_scales, stats, tensor);
    if (fp8_weight_casts(s->recipe) == 2)
        quantize_blocks(model->weights_fp8_t + offset, w, OC, IC, b, 1, s->recipe, FP8_E4M3, s->margin,
                        s->pow2_scales, stats, tensor);
}

// After every change of the master weights: the BF16 copy and the FP8 weight casts (exact amax).
static void refresh_compute_weights(GPT *model) {
    if (model->dtype == DTYPE_FLOAT32) return;
#pragma omp parallel for
    for (size_t i = 0; i < model->num_params; i++) model->params_compute[i] = bf16_round(model->params[i]);
    if (model->dtype != DTYPE_FLOAT8) return;
    const GPTConfig *cfg = &model->config;
    for (int l = 0; l < cfg->num_layers; l++) {
        for (int lin = 0; lin < NUM_BLOCK_LINEARS; lin++) {
            size_t offset = param_offset(cfg, linear_weight_tensor(lin), l);
            size_t n = linear_weight_size(cfg, lin);
            int w = l * NUM_BLOCK_LINEARS + lin, tensor = model->fp8.num_tensors + w;
            Fp8Stats *stats = &model->fp8.stats;
            if (fp8_recipe_is_block(model->fp8.recipe)) {
                cast_weight_blocks(model, lin, offset, tensor);
                stats->scale[tensor] = fp8_block_scale(stats->amax[tensor], model->fp8.recipe, FP8_E4M3,
                                                       model->fp8.margin, model->fp8.pow2_scales);
                continue;
            }
            float amax = abs_max(model->params + offset, n);
            float scale = fp8_compute_scale(amax, FP8_E4M3, model->fp8.margin);
            model->fp8.weight_scale[w] = scale;
            stats->amax[tensor] = amax;
            stats->scale[tensor] = stats->scale_min[tensor] = stats->scale_max[tensor] = scale;
            quantize(model->weights_fp8 + offset, model->params + offset, n, scale, FP8_E4M3, stats, tensor);
        }
    }
}

// Every buffer of the model is carved from one allocation: a first pass with a NULL base only counts.
typedef struct {
    float *base;
    size_t used;
} Arena;

static float *arena_take(Arena *arena, size_t n) {
    float *p = arena->base ? arena->base + arena->used : NULL;
    arena->used += n;
    return p;
}

static size_t largest_chunk(const GPT *model) {
    size_t largest = 0;
    for (int u = 0; u < shard_num_units(&model->config, model->zero_stage); u++) {
        size_t chunk = shard_map_unit(&model->shards, u).chunk;
        if (chunk > largest) largest = chunk;
    }
    return largest;
}

static void carve_buffers(GPT *model, Arena *arena) {
    const GPTConfig *cfg = &model->config;
    size_t P = model->num_params, L = cfg->num_layers, C = cfg->channels, NH = cfg->num_heads;
    size_t Vp = cfg->padded_vocab_size, B = model->B, T = model->T, BT = B * T;
    size_t QKV = model_qkv_features(cfg), FC = linear_out_features(cfg, LIN_MLP_UP), F = model_ffn_dim(cfg);
    size_t W = model_widest_features(cfg);
    int dtype = model->dtype;
    model->params = arena_take(arena, P);
    model->params_compute = dtype == DTYPE_FLOAT32 ? model->params : arena_take(arena, P);
    model->weights_fp8 = dtype == DTYPE_FLOAT8 ? arena_take(arena, P) : NULL;
    model->weights_fp8_t =
        dtype == DTYPE_FLOAT8 && fp8_weight_casts(model->fp8.recipe) == 2 ? arena_take(arena, P) : NULL;
    model->grads = arena_take(arena, P);
    size_t widest = BT > Vp ? BT : Vp; // every GEMM's M and N: B*T, a layer's features (<= W) or Vp
    model->gemm_pack = arena_take(arena, gemm_pack_floats(widest > W ? widest : W));
    if (dtype == DTYPE_FLOAT8 && model->fp8_accumulation == FP8_ACCUMULATION_HOPPER) {
        // an FP8 GEMM's M and N are B*T or a layer's features (<= W)
        size_t dim = BT > W ? BT : W;
        TensorCoreScratch *t = &model->tensor_core;
        t->a_terms = arena_take(arena, dim * FP8_MMA_K);
        t->b_terms = arena_take(arena, dim * FP8_MMA_K);
        t->products = arena_take(arena, dim * dim);
        t->partial = arena_take(arena, dim * dim);
        t->acc = arena_take(arena, dim * dim);
    }
    size_t S = model->shard_count;
    model->master = model->ways == 1 ? model->params : arena_take(arena, S);
    model->grad_shard = model->ways == 1 ? model->grads : arena_take(arena, S);
    model->m = arena_take(arena, S);
    model->v = arena_take(arena, S);
    model->unit_reduced = model->ways == 1 ? NULL : arena_take(arena, largest_chunk(model));
    Activations *a = &model->acts;
    size_t K = model->recompute ? 1 : L; // layers of per-layer activations kept
    a->encoded = arena_take(arena, BT * C);
    a->ln1 = arena_take(arena, K * BT * C);
    a->ln1_mean = arena_take(arena, K * BT);
    a->ln1_rstd = arena_take(arena, K * BT);
    a->qkv = arena_take(arena, K * BT * QKV);
    a->atty = arena_take(arena, K * BT * C);
    a->att = arena_take(arena, K * B * NH * T * T);
    a->residual2 = arena_take(arena, K * BT * C);
    a->ln2 = arena_take(arena, K * BT * C);
    a->ln2_mean = arena_take(arena, K * BT);
    a->ln2_rstd = arena_take(arena, K * BT);
    a->fch = arena_take(arena, K * BT * FC);
    a->fch_gelu = arena_take(arena, K * BT * F);
    a->residual3 = arena_take(arena, L * BT * C);
    a->lnf = arena_take(arena, BT * C);
    a->lnf_mean = arena_take(arena, BT);
    a->lnf_rstd = arena_take(arena, BT);
    a->logits = arena_take(arena, BT * Vp);
    a->probs = arena_take(arena, BT * Vp);
    a->losses = arena_take(arena, BT);
    a->proj_out = arena_take(arena, BT * C);
    a->rope = model_has_rotary(cfg) ? arena_take(arena, (size_t)cfg->max_seq_len * (C / NH)) : NULL;
    for (int lin = 0; lin < NUM_BLOCK_LINEARS; lin++)
        a->input_q[lin] =
            dtype == DTYPE_FLOAT8 ? arena_take(arena, K * BT * linear_in_features(cfg, lin)) : NULL;
    Gradients *g = &model->dacts;
    g->dresidual = arena_take(arena, BT * C);
    g->dc = arena_take(arena, BT * C);
    g->dqkv = arena_take(arena, BT * QKV);
    g->dfch = arena_take(arena, BT * FC);
    g->dhidden = model_parts(cfg).mlp == MLP_SWIGLU ? arena_take(arena, BT * F) : NULL;
    g->dout_q = dtype == DTYPE_FLOAT8 ? arena_take(arena, BT * W) : NULL;
    g->dout_qc =
        dtype == DTYPE_FLOAT8 && fp8_recipe_is_block(model->fp8.recipe) ? arena_take(arena, BT * W) : NULL;
    g->att_row = arena_take(arena, B * NH * T);
}

static void gpt_alloc(GPT *model, const GPTConfig *cfg, int dtype, int B, int T, const TrainOptions *opts,
                      const Dist *dist) {
    model->config = *cfg;
    model->dtype = dtype;
    model->B = B;
    model->T = T;
    model->num_params = param_count(cfg);
    model->recompute = opts->recompute;
    model->fp8_accumulation = opts->fp8_accumulation;
    model->fast_accum = opts->fp8_fast_accum;
    model->dist = dist;
    model->zero_stage = opts->zero_stage;
    model->grad_reduce_bf16 = opts->grad_reduce_dtype == GRAD_REDUCE_BFLOAT16;
    model->shards = shard_map(cfg, opts->zero_stage, dist->group_size, dist->group_rank);
    model->ways = model->shards.ways;
    model->shard_count = shard_size(cfg, opts->zero_stage, dist->group_size);
    fp8_state_init(&model->fp8, cfg->num_layers, opts); // before the buffers: the recipe decides some
    fp8_scales_from_history(&model->fp8);
    Arena arena = {NULL, 0};
    carve_buffers(model, &arena);
    model->memory = (float *)calloc_check(arena.used, sizeof(float), "model buffers");
    arena.base = model->memory;
    arena.used = 0;
    carve_buffers(model, &arena);
    if (model_has_rotary(cfg)) rope_table(model->acts.rope, cfg);
}

static void gpt_free(GPT *model) {
    free(model->memory);
    free(model->fp8.amax_history);
    free(model->fp8.amax_current);
    free(model->fp8.scale);
    free(model->fp8.input_scale_used);
    free(model->fp8.weight_scale);
    fp8_stats_free(&model->fp8.stats);
}

// ----------------------------------------------------------------------------
// Layers: each forward beside its backward. N = B*T rows.

// out (B,T,C) = wte[token] + wpe[t] (Llama: wpe NULL, no position embedding)
static void encoder_forward(float *out, const int *tokens, const float *wte, const float *wpe, int B, int T,
                            int C, int dtype) {
#pragma omp parallel for
    for (int bt = 0; bt < B * T; bt++) {
        const float *te = wte + (size_t)tokens[bt] * C, *pe = wpe ? wpe + (size_t)(bt % T) * C : NULL;
        for (int c = 0; c < C; c++) out[(size_t)bt * C + c] = to_storage(pe ? te[c] + pe[c] : te[c], dtype);
    }
}

// dwte[token] += dout, dwpe[t] += dout (dwpe NULL: none). Serial over rows: two rows may share a token.
static void encoder_backward(float *dwte, float *dwpe, const float *dout, const int *tokens, int B, int T,
                             int C) {
    for (int bt = 0; bt < B * T; bt++) {
        float *dte = dwte + (size_t)tokens[bt] * C;
        for (int c = 0; c < C; c++) dte[c] += dout[(size_t)bt * C + c];
        if (!dwpe) continue;
        float *dpe = dwpe + (size_t)(bt % T) * C;
        for (int c = 0; c < C; c++) dpe[c] += dout[(size_t)bt * C + c];
    }
}

// (N,C) -> (N,C) in storage, saving the row statistics mean, rstd (N) for the backward
static void layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                              const float *bias, int N, int C, int dtype) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float m = 0.0f, var = 0.0f;
        for (int c = 0; c < C; c++) m += x[c];
        m /= C;
        for (int c = 0; c < C; c++) var += (x[c] - m) * (x[c] - m);
        float s = 1.0f / sqrtf(var / C + 1e-5f);
        for (int c = 0; c < C; c++)
            out[(size_t)n * C + c] = to_storage((x[c] - m) * s * weight[c] + bias[c], dtype);
        mean[n] = m;
        rstd[n] = s;
    }
}

// dinp (N,C) += the input gradient, the sum in storage; dweight, dbias (C) += their gradients
static void layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                               const float *weight, const float *mean, const float *rstd, int N, int C,
                               int dtype) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const float *dy = dout + (size_t)n * C, *x = inp + (size_t)n * C;
        float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
        for (int c = 0; c < C; c++) {
            float norm = (x[c] - mean[n]) * rstd[n];
            dnorm_mean += weight[c] * dy[c];
            dnorm_norm_mean += weight[c] * dy[c] * norm;
        }
        dnorm_mean /= C;
        dnorm_norm_mean /= C;
        for (int c = 0; c < C; c++) {
            float norm = (x[c] - mean[n]) * rstd[n];
            float d = (weight[c] * dy[c] - dnorm_mean - norm * dnorm_norm_mean) * rstd[n];
            dinp[(size_t)n * C + c] = to_storage(dinp[(size_t)n * C + c] + d, dtype);
        }
    }
#pragma omp parallel for
    for (int c = 0; c < C; c++) {
        for (int n = 0; n < N; n++) {
            float norm = (inp[(size_t)n * C + c] - mean[n]) * rstd[n];
            dweight[c] += dout[(size_t)n * C + c] * norm;
            dbias[c] += dout[(size_t)n * C + c];
        }
    }
}

// Llama's RMSNorm: (N,C) -> (N,C) in storage, out = x * rstd * weight, saving rstd (N) =
// 1/sqrt(mean(x^2) + eps) for the backward
static void rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight, int N, int C,
                            int dtype) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float sum_squares = 0.0f;
        for (int c = 0; c < C; c++) sum_squares += x[c] * x[c];
        float s = 1.0f / sqrtf(sum_squares / C + LLAMA_NORM_EPS);
        for (int c = 0; c < C; c++) out[(size_t)n * C + c] = to_storage(x[c] * s * weight[c], dtype);
        rstd[n] = s;
    }
}

// dinp (N,C) += the input gradient, the sum in storage; dweight (C) += its gradient.
// With y = x * s * w and s = (mean(x^2) + eps)^(-1/2): dx = s * (w * dy - x * s^2 * mean(w * dy * x)).
static void rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp,
                             const float *weight, const float *rstd, int N, int C, int dtype) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const float *dy = dout + (size_t)n * C, *x = inp + (size_t)n * C;
        float s = rstd[n], dot = 0.0f;
        for (int c = 0; c < C; c++) dot += weight[c] * dy[c] * x[c];
        float coefficient = s * s * dot / C;
        for (int c = 0; c < C; c++) {
            float d = s * (weight[c] * dy[c] - x[c] * coefficient);
            dinp[(size_t)n * C + c] = to_storage(dinp[(size_t)n * C + c] + d, dtype);
        }
    }
#pragma omp parallel for
    for (int c = 0; c < C; c++)
        for (int n = 0; n < N; n++) dweight[c] += dout[(size_t)n * C + c] * inp[(size_t)n * C + c] * rstd[n];
}

// A block recipe's cast of tensor `index`, x (rows, cols) with the reduction of the GEMM that reads it along
// cols (tiles 1 x b) or, down_rows, along rows (tiles b x 1); in training (record) its amax and telemetry
// are kept.
static void cast_blocks(GPT *model, int index, const float *x, int rows, int cols, int down_rows, float *out,
                        int record) {
    Fp8State *s = &model->fp8;
    int b = fp8_block_size(s->recipe);
    float amax = quantize_blocks(out, x, rows, cols, down_rows ? b : 1, down_rows ? 1 : b, s->recipe,
                                 fp8_tensor_format(s, index), s->margin, s->pow2_scales,
                                 record ? &s->stats : NULL, index);
    if (record) s->amax_current[index] = fmaxf(s->amax_current[index], amax);
}

// An FP8 GEMM operand as the CPU computes with it: the values the GEMM multiplies (a per-tensor cast's FP8
// values, still multiplied by its scale; a block cast's, already divided by their blocks' scales) and the
// scale the product is divided by (1 for a block cast).
typedef struct {
    const float *data;
    float scale;
} Fp8Operand;

// One FP8 GEMM, its operands and options named as the CUDA trainer's GemmCall (gpu/gemm.cuh):
// C (M,N) = op(A) (M,K) . op(B) (K,N) / (A.scale B.scale) [+ C when accumulate]; op(A) = A^T when trans_a
// (A stored (K,M)), op(B) = B^T when trans_b (B stored (N,K)). Initializers name every field, in this order:
// dev/bench_kernels.cu compiles this file as C++, which warns of a designated field left out.
typedef struct {
    float *C;
    Fp8Operand A;
    int trans_a;
    Fp8Operand B;
    int trans_b;
    int M, N, K;
    int accumulate; // C += the result (the weight gradients); else C = the result
    int fast_accum; // --fp8_accumulation hopper: the partial sums are promoted only at the end
} Fp8GemmCall;

// An FP8 GEMM as the GPU's: gemm() in FP32, or with --fp8_accumulation hopper as Hopper's tensor cores sum it
// (fp8_scaling.h): gemm() adds each MMA's FP8_MMA_K products (exact, FP8 values summed in FP32: the one
// rounding the model leaves to FP32, far below its truncation), the partial sums keep 13 fraction bits and go
// into the FP32 accumulators where fp8_mma_promotes says (fast: only at the end). Then alpha * acc + beta * C
// (alpha the inverse scales, beta 1 when accumulating), as cuBLASLt's epilogue.
static void fp8_gemm(const GPT *model, Fp8GemmCall c) {
    const int trans_a = c.trans_a, trans_b = c.trans_b, M = c.M, N = c.N, K = c.K, fast = c.fast_accum;
    const float alpha = 1.0f / (c.A.scale * c.B.scale), beta = c.accumulate ? 1.0f : 0.0f;
    const float *A = c.A.data, *B = c.B.data;
    float *C = c.C;
    if (model->fp8_accumulation != FP8_ACCUMULATION_HOPPER) {
        gemm(model->gemm_pack, trans_a, trans_b, M, N, K, alpha, A, B, beta, C);
        return;
    }
    const TensorCoreScratch *t = &model->tensor_core;
    const size_t MN = (size_t)M * N;
#pragma omp parallel for
    for (size_t i = 0; i < MN; i++) t->partial[i] = t->acc[i] = 0.0f;
    for (int k0 = 0; k0 < K; k0 += FP8_MMA_K) {
        const int kc = K - k0 < FP8_MMA_K ? K - k0 : FP8_MMA_K;
#pragma omp parallel for
        for (int i = 0; i < M; i++)
            for (int k = 0; k < kc; k++)
                t->a_terms[(size_t)i * kc + k] =
                    trans_a ? A[(size_t)(k0 + k) * M + i] : A[(size_t)i * K + k0 + k];
#pragma omp parallel for
        for (int k = 0; k < kc; k++)
            for (int j = 0; j < N; j++)
                t->b_terms[(size_t)k * N + j] =
                    trans_b ? B[(size_t)j * K + k0 + k] : B[(size_t)(k0 + k) * N + j];
        gemm(model->gemm_pack, 0, 0, M, N, kc, 1.0f, t->a_terms, t->b_terms, 0.0f, t->products);
        const int promote = fp8_mma_promotes(k0 + kc, K, fast);
#pragma omp parallel for
        for (size_t i = 0; i < MN; i++) {
            t->partial[i] = fp8_mma_accumulate(t->partial[i], t->products[i]);
            if (promote) {
                t->acc[i] += t->partial[i];
                t->partial[i] = 0.0f;
            }
        }
    }
#pragma omp parallel for
    for (size_t i = 0; i < MN; i++) C[i] = beta == 0.0f ? alpha * t->acc[i] : alpha * t->acc[i] + beta * C[i];
}

// The FP8 operands of a linear's GEMMs in the recipe's scaling. The forward's input: cast into input_q, kept
// for the weight gradient, and, for a block recipe, whose tiles must run along each GEMM's reduction, in
// tiles along IC into the scratch dout_q for this GEMM and along the tokens into input_q. In training
// (record) the casts add to the step's amax and telemetry.
static Fp8Operand cast_linear_input(GPT *model, int layer, int linear, const float *inp, float *input_q,
                                    int N, int record) {
    int IC = linear_in_features(&model->config, linear),
        index = fp8_tensor_index(layer, linear, FP8_ROLE_INPUT);
    if (fp8_recipe_is_block(model->fp8.recipe)) {
        float *x_tiles = model->dacts.dout_q;
        cast_blocks(model, index, inp, N, IC, 0, x_tiles, record);
        cast_blocks(model, index, inp, N, IC, 1, input_q, record);
        return (Fp8Operand){x_tiles, 1.0f};
    }
    float scale = fp8_cast(&model->fp8, model->dist, index, inp, (size_t)N * IC, input_q, record);
    model->fp8.input_scale_used[layer * NUM_BLOCK_LINEARS + linear] = scale;
    return (Fp8Operand){input_q, scale};
}

// That input as the weight gradient reads it.
static Fp8Operand saved_input_operand(const GPT *model, int layer, int linear, const float *input_q) {
    if (fp8_recipe_is_block(model->fp8.recipe)) return (Fp8Operand){input_q, 1.0f};
    return (Fp8Operand){input_q, model->fp8.input_scale_used[layer * NUM_BLOCK_LINEARS + linear]};
}

// The weight (OC,IC): as the forward reads it, or (transposed) as the data gradient does, which a recipe
// with two weight casts reads from its own cast (weights_fp8_t, blocks along OC).
static Fp8Operand weight_operand(const GPT *model, int layer, int linear, int transposed) {
    size_t offset = param_offset(&model->config, linear_weight_tensor(linear), layer);
    if (fp8_recipe_is_block(model->fp8.recipe)) {
        const float *w = transposed && fp8_weight_casts(model->fp8.recipe) == 2 ? model->weights_fp8_t
                                                                                : model->weights_fp8;
        return (Fp8Operand){w + offset, 1.0f};
    }
    return (Fp8Operand){model->weights_fp8 + offset,
                        model->fp8.weight_scale[layer * NUM_BLOCK_LINEARS + linear]};
}

// The output gradient dout (N,OC), cast once (per tensor) into dout_q for both GEMMs, or (block recipes) in
// tiles along OC into dout_q for the data gradient and along the tokens into dout_qc for the weight gradient.
static void cast_linear_output_grad(GPT *model, int layer, int linear, const float *dout, int N,
                                    Fp8Operand *k_oc, Fp8Operand *k_tokens) {
    int OC = linear_out_features(&model->config, linear),
        index = fp8_tensor_index(layer, linear, FP8_ROLE_GRAD_OUTPUT);
    float *dout_q = model->dacts.dout_q, *dout_qc = model->dacts.dout_qc;
    if (fp8_recipe_is_block(model->fp8.recipe)) {
        cast_blocks(model, index, dout, N, OC, 0, dout_q, 1);
        cast_blocks(model, index, dout, N, OC, 1, dout_qc, 1);
        *k_oc = (Fp8Operand){dout_q, 1.0f}, *k_tokens = (Fp8Operand){dout_qc, 1.0f};
        return;
    }
    float scale = fp8_cast(&model->fp8, model->dist, index, dout, (size_t)N * OC, dout_q, 1);
    *k_oc = *k_tokens = (Fp8Operand){dout_q, scale};
}

// Linear layer `linear` of block `layer`: out (N,OC) = inp (N,IC) . W^T (IC,OC) + bias (Llama: none),
// rounded to storage (with keep_fp32 left in FP32 for the caller). In float8 the input is cast to E4M3 into
// input_q (kept for the weight gradient) and the GEMM multiplies FP8 values, its FP32 result divided by both
// scales.
static void linear_forward(GPT *model, int layer, int linear, float *out, const float *inp, float *input_q,
                           int N, int record_amax, int keep_fp32) {
    const GPTConfig *cfg = &model->config;
    int OC = linear_out_features(cfg, linear), IC = linear_in_features(cfg, linear);
    int weight_tensor = linear_weight_tensor(linear);
    size_t weight_offset = param_offset(cfg, weight_tensor, layer);
    const float *bias = param_tensor_size(cfg, weight_tensor + 1)
                            ? model->params_compute + param_offset(cfg, weight_tensor + 1, layer)
                            : NULL;
    if (model->dtype == DTYPE_FLOAT8) {
        fp8_gemm(model,
                 (Fp8GemmCall){.C = out,
                               .A = cast_linear_input(model, layer, linear, inp, input_q, N, record_amax),
                               .trans_a = 0,
                               .B = weight_operand(model, layer, linear, 0),
                               .trans_b = 1,
                               .M = N,
                               .N = OC,
                               .K = IC,
                               .accumulate = 0,
                               .fast_accum = fp8_gemm_fast_accum(model->fp8.recipe, model->fast_accum,
                                                                 FAST_ACCUM_FORWARD)});
    } else {
        gemm(model->gemm_pack, 0, 1, N, OC, IC, 1.0f, inp, model->params_compute + weight_offset, 0.0f, out);
    }
#pragma omp parallel for
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++)
            out[(size_t)n * OC + o] =
                to_storage(bias ? out[(size_t)n * OC + o] + bias[o] : out[(size_t)n * OC + o],
                           keep_fp32 ? DTYPE_FLOAT32 : model->dtype);
}

// dinp (N,IC) = dout . W (rounded to storage, or with keep_fp32 left in FP32 for the caller); dW (OC,IC) +=
// dout^T . inp; dbias (OC) += column sums of dout (Llama: no bias).
// In float8 dout is cast to E5M2 once and serves both GEMMs; the weight gradient uses the forward's
// quantized input.
static void linear_backward(GPT *model, int layer, int linear, float *dinp, const float *dout,
                            const float *inp, const float *input_q, int N, int keep_fp32) {
    const GPTConfig *cfg = &model->config;
    int OC = linear_out_features(cfg, linear), IC = linear_in_features(cfg, linear);
    int weight_tensor = linear_weight_tensor(linear);
    size_t weight_offset = param_offset(cfg, weight_tensor, layer);
    float *dweight = model->grads + weight_offset;
    if (param_tensor_size(cfg, weight_tensor + 1)) {
        float *dbias = model->grads + param_offset(cfg, weight_tensor + 1, layer);
#pragma omp parallel for
        for (int o = 0; o < OC; o++)
            for (int n = 0; n < N; n++) dbias[o] += dout[(size_t)n * OC + o];
    }
    if (model->dtype == DTYPE_FLOAT8) {
        Fp8Operand dout_k_oc, dout_k_tokens; // dout for the GEMMs reducing over OC and over the tokens
        cast_linear_output_grad(model, layer, linear, dout, N, &dout_k_oc, &dout_k_tokens);
        const int fast = fp8_gemm_fast_accum(model->fp8.recipe, model->fast_accum, FAST_ACCUM_ALL);
        fp8_gemm(model, (Fp8GemmCall){.C = dinp,
                                      .A = dout_k_oc,
                                      .trans_a = 0,
                                      .B = weight_operand(model, layer, linear, 1),
                                      .trans_b = 0,
                                      .M = N,
                                      .N = IC,
                                      .K = OC,
                                      .accumulate = 0,
                                      .fast_accum = fast});
        fp8_gemm(model, (Fp8GemmCall){.C = dweight,
                                      .A = dout_k_tokens,
                                      .trans_a = 1,
                                      .B = saved_input_operand(model, layer, linear, input_q),
                                      .trans_b = 0,
                                      .M = OC,
                                      .N = IC,
                                      .K = N,
                                      .accumulate = 1,
                                      .fast_accum = fast});
    } else {
        gemm(model->gemm_pack, 0, 0, N, IC, OC, 1.0f, dout, model->params_compute + weight_offset, 0.0f,
             dinp);
        gemm(model->gemm_pack, 1, 0, OC, IC, N, 1.0f, dout, inp, 1.0f, dweight);
    }
    round_to_storage(dinp, (size_t)N * IC, keep_fp32 ? DTYPE_FLOAT32 : model->dtype);
}

// Causal self-attention with grouped-query heads: qkv (B,T,QKV) -> out (B,T,C) in storage, saving the
// probabilities att (B,NH,T,T). A qkv row is NH query heads, KVH key heads, KVH value heads of hs = C/NH;
// query head h reads key and value head h / (NH/KVH) (GPT-2: KVH = NH, QKV = 3C).
static void attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH, int KVH,
                              int dtype) {
    int hs = C / NH, group = NH / KVH, QKV = (NH + 2 * KVH) * hs;
    float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for collapse(3)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int t = 0; t < T; t++) {
                int key_at = NH * hs + h / group * hs, value_at = (NH + KVH) * hs + h / group * hs;
                const float *q = qkv + ((size_t)b * T + t) * QKV + h * hs;
                float *p = att + (((size_t)b * NH + h) * T + t) * T;
                float maxv = -INFINITY;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *k = qkv + ((size_t)b * T + t2) * QKV + key_at;
                    float dot = 0.0f;
                    for (int i = 0; i < hs; i++) dot += q[i] * k[i];
                    p[t2] = dot * scale;
                    maxv = fmaxf(maxv, p[t2]);
                }
                float sum = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    p[t2] = expf(p[t2] - maxv);
                    sum += p[t2];
                }
                for (int t2 = 0; t2 < T; t2++) p[t2] = t2 <= t ? p[t2] / sum : 0.0f;
                float *o = out + ((size_t)b * T + t) * C + h * hs;
                for (int i = 0; i < hs; i++) o[i] = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *v = qkv + ((size_t)b * T + t2) * QKV + value_at;
                    for (int i = 0; i < hs; i++) o[i] += p[t2] * v[i];
                }
                for (int i = 0; i < hs; i++) o[i] = to_storage(o[i], dtype);
            }
        }
    }
}

// dqkv (B,T,QKV) = gradient of the attention given dout (B,T,C). One thread per (b, key/value head): the
// key and value gradients of a head accumulate over the query rows of its group's heads, head by head.
static void attention_backward(float *dqkv, float *att_row, const float *dout, const float *qkv,
                               const float *att, int B, int T, int C, int NH, int KVH) {
    int hs = C / NH, group = NH / KVH, QKV = (NH + 2 * KVH) * hs;
    float scale = 1.0f / sqrtf((float)hs);
    memset(dqkv, 0, (size_t)B * T * QKV * sizeof(float));
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int kv = 0; kv < KVH; kv++) {
            int key_at = NH * hs + kv * hs, value_at = (NH + KVH) * hs + kv * hs;
            for (int h = kv * group; h < (kv + 1) * group; h++) {
                float *datt = att_row + ((size_t)b * NH + h) * T;
                for (int t = 0; t < T; t++) {
                    const float *p = att + (((size_t)b * NH + h) * T + t) * T;
                    const float *dy = dout + ((size_t)b * T + t) * C + h * hs;
                    const float *q = qkv + ((size_t)b * T + t) * QKV + h * hs;
                    float *dq = dqkv + ((size_t)b * T + t) * QKV + h * hs;
                    float dot_p_datt = 0.0f;
                    for (int t2 = 0; t2 <= t; t2++) {
                        const float *v = qkv + ((size_t)b * T + t2) * QKV + value_at;
                        float *dv = dqkv + ((size_t)b * T + t2) * QKV + value_at;
                        float d = 0.0f;
                        for (int i = 0; i < hs; i++) {
                            d += dy[i] * v[i];
                            dv[i] += p[t2] * dy[i];
                        }
                        datt[t2] = d;
                        dot_p_datt += p[t2] * d;
                    }
                    for (int t2 = 0; t2 <= t; t2++) {
                        float dscore = p[t2] * (datt[t2] - dot_p_datt) * scale;
                        const float *k = qkv + ((size_t)b * T + t2) * QKV + key_at;
                        float *dk = dqkv + ((size_t)b * T + t2) * QKV + key_at;
                        for (int i = 0; i < hs; i++) {
                            dq[i] += dscore * k[i];
                            dk[i] += dscore * q[i];
                        }
                    }
                }
            }
        }
    }
}

// Llama's rotary embeddings, in place on the query and key heads of qkv (B,T,QKV) (the NH + KVH heads before
// the values), in storage: each pair (x0, x1) at position t becomes (x0 cos - x1 sin, x0 sin + x1 cos) with
// rope's (cos, sin) of t and the pair. inverse: the transposed rotation (the backward of the gradients).
static void rope_rotate(float *qkv, const float *rope, int B, int T, int C, int NH, int KVH, int inverse,
                        int dtype) {
    int hs = C / NH, pairs = hs / 2, QKV = (NH + 2 * KVH) * hs;
    float sign = inverse ? -1.0f : 1.0f;
#pragma omp parallel for
    for (int bt = 0; bt < B * T; bt++) {
        const float *table = rope + (size_t)(bt % T) * pairs * 2;
        for (int head = 0; head < NH + KVH; head++) {
            float *x = qkv + (size_t)bt * QKV + head * hs;
            for (int i = 0; i < pairs; i++) {
                float cos_t = table[2 * i], sin_t = sign * table[2 * i + 1], x0 = x[2 * i], x1 = x[2 * i + 1];
                x[2 * i] = to_storage(x0 * cos_t - x1 * sin_t, dtype);
                x[2 * i + 1] = to_storage(x0 * sin_t + x1 * cos_t, dtype);
            }
        }
    }
}

#define GELU_SCALE 0.7978845608028654f // sqrt(2/pi)

// tanh-approximate GELU, elementwise over n, out in storage
static void gelu_forward(float *out, const float *inp, size_t n, int dtype) {
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        out[i] = to_storage(0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + 0.044715f * x * x * x))), dtype);
    }
}

// dinout: the output gradient in, the input gradient (in storage) out
static void gelu_backward(float *dinout, const float *inp, size_t n, int dtype) {
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_SCALE * (x + 0.044715f * x * x * x);
        float th = tanhf(u);
        float sech2 = 1.0f - th * th;
        float local = 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
        dinout[i] = to_storage(dinout[i] * local, dtype);
    }
}

// Llama's SwiGLU: fch (N,2F) holds each row's up projection u, then its gate g; out (N,F) = silu(g) * u in
// storage, silu(g) = g * sigmoid(g).
static void swiglu_forward(float *out, const float *fch, int N, int F, int dtype) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const float *up = fch + (size_t)n * 2 * F, *gate = up + F;
        for (int i = 0; i < F; i++) {
            float g = gate[i];
            out[(size_t)n * F + i] = to_storage(g / (1.0f + expf(-g)) * up[i], dtype);
        }
    }
}

// dfch (N,2F) = the gradients of u and g in storage, given dout (N,F): du = dout * silu(g),
// dg = dout * u * sigmoid(g) * (1 + g * (1 - sigmoid(g))).
static void swiglu_backward(float *dfch, const float *dout, const float *fch, int N, int F, int dtype) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const float *up = fch + (size_t)n * 2 * F, *gate = up + F, *dy = dout + (size_t)n * F;
        float *dup = dfch + (size_t)n * 2 * F, *dgate = dup + F;
        for (int i = 0; i < F; i++) {
            float g = gate[i], sigmoid = 1.0f / (1.0f + expf(-g));
            dup[i] = to_storage(dy[i] * g * sigmoid, dtype);
            dgate[i] = to_storage(dy[i] * up[i] * sigmoid * (1.0f + g * (1.0f - sigmoid)), dtype);
        }
    }
}

// out (N,C) = a + b, rounded to storage
static void residual_forward(float *out, const float *a, const float *b, size_t n, int dtype) {
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) out[i] = to_storage(a[i] + b[i], dtype);
}

// probs (N,Vp) = softmax over the first V logits; losses (N) = -log prob of the target
static void softmax_crossentropy_forward(float *probs, float *losses, const float *logits, const int *targets,
                                         int N, int V, int Vp) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const float *z = logits + (size_t)n * Vp;
        float *p = probs + (size_t)n * Vp;
        float maxv = -INFINITY, sum = 0.0f;
        for (int v = 0; v < V; v++) maxv = fmaxf(maxv, z[v]);
        for (int v = 0; v < V; v++) {
            p[v] = expf(z[v] - maxv);
            sum += p[v];
        }
        for (int v = 0; v < Vp; v++) p[v] = v < V ? p[v] / sum : 0.0f;
        if (targets) losses[n] = -logf(p[targets[n]]);
    }
}

// In place: probs (N,Vp) becomes dlogits = (probs - onehot(target)) * dloss, rounded to storage
static void softmax_crossentropy_backward(float *probs, const int *targets, float dloss, int N, int Vp,
                                          int dtype) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        float *p = probs + (size_t)n * Vp;
        p[targets[n]] -= 1.0f;
        for (int v = 0; v < Vp; v++) p[v] = to_storage(p[v] * dloss, dtype);
    }
}

// ----------------------------------------------------------------------------
// Data parallelism (dist.h): gradients summed over the ranks, each rank updates its shard, the weights
// gathered back. The sums are MPI's, so N processes with batch B compute what one process with batch
// N*B does up to float32 summation order.

// Adds the rank-summed gradients of unit `unit` into this rank's gradient shard, then clears the unit's
// full gradients for the next micro-step.
static void reduce_scatter_unit(GPT *model, int unit) {
    ShardUnit u = shard_map_unit(&model->shards, unit);
    float *full = model->grads + u.start, *shard = model->grad_shard + u.shard;
    if (model->grad_reduce_bf16)
        dist_reduce_scatter_unit_bf16(model->dist, full, u.size, model->unit_reduced);
    else
        dist_reduce_scatter_unit(model->dist, full, u.size, model->unit_reduced);
    for (size_t i = 0; i < u.owned; i++) shard[i] += model->unit_reduced[i];
    memset(full, 0, u.size * sizeof(float));
}

// ZeRO-3 reduces a unit as soon as the backward is done with it (the GPU overlaps this with the next
// layer's backward).
static void unit_gradients_done(GPT *model, int unit) {
    if (model->zero_stage == 3 && model->ways > 1) reduce_scatter_unit(model, unit);
}

// After the last micro-step: ZeRO-0 all-reduces, ZeRO-1 reduce-scatters the one unit within the group;
// with several groups (--shard_group_size) each shard is then summed across them, once a step.
static void reduce_gradients(GPT *model) {
    if (model->dist->world_size == 1) return;
    int bf16 = model->grad_reduce_bf16;
    if (model->zero_stage == 0)
        (bf16 ? dist_sum_floats_bf16 : dist_sum_floats)(model->dist, model->grads, model->num_params);
    if (model->zero_stage == 1) reduce_scatter_unit(model, 0);
    if (model->zero_stage != 0)
        (bf16 ? dist_sum_floats_across_groups_bf16
              : dist_sum_floats_across_groups)(model->dist, model->grad_shard, model->shard_count);
}

// This rank's shard of freshly set full parameters (initialised or loaded).
static void take_shard(GPT *model) {
    if (model->ways == 1) return;
    for (int u = 0; u < shard_num_units(&model->config, model->zero_stage); u++) {
        ShardUnit unit = shard_map_unit(&model->shards, u);
        memcpy(model->master + unit.shard, model->params + shard_unit_begin(&model->shards, &unit),
               unit.owned * sizeof(float));
    }
}

// The full parameters from every rank's updated shard.
static void gather_weights(GPT *model) {
    if (model->ways == 1) return;
    for (int u = 0; u < shard_num_units(&model->config, model->zero_stage); u++) {
        ShardUnit unit = shard_map_unit(&model->shards, u);
        dist_allgather_unit(model->dist, model->master + unit.shard, model->params + unit.start, unit.size);
    }
}

// ----------------------------------------------------------------------------
// Forward and backward of the whole model

static float *param_ptr(float *params, const GPTConfig *cfg, int tensor, int layer) {
    return params + param_offset(cfg, tensor, layer);
}

// The activations of layer l: its slot of the per-layer buffers (slot 0 with --recompute), its input
// and output on the residual stream.
typedef struct {
    const float *residual; // (N,C) the layer's input: encoded or residual3 of the layer before
    float *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *att, *residual2, *ln2, *ln2_mean, *ln2_rstd, *fch,
        *fch_gelu;
    float *residual3;                  // (N,C) the layer's output
    float *input_q[NUM_BLOCK_LINEARS]; // float8: the quantized inputs of its linears
} LayerActs;

static LayerActs layer_acts(GPT *model, int l) {
    const GPTConfig *cfg = &model->config;
    Activations *a = &model->acts;
    size_t N = (size_t)model->B * model->T, NC = N * cfg->channels, k = model->recompute ? 0 : (size_t)l;
    size_t QKV = model_qkv_features(cfg), FC = linear_out_features(cfg, LIN_MLP_UP), F = model_ffn_dim(cfg);
    LayerActs la;
    la.residual = l == 0 ? a->encoded : a->residual3 + (l - 1) * NC;
    la.ln1 = a->ln1 + k * NC;
    la.ln1_mean = a->ln1_mean + k * N;
    la.ln1_rstd = a->ln1_rstd + k * N;
    la.qkv = a->qkv + k * N * QKV;
    la.atty = a->atty + k * NC;
    la.att = a->att + k * (size_t)model->B * cfg->num_heads * model->T * model->T;
    la.residual2 = a->residual2 + k * NC;
    la.ln2 = a->ln2 + k * NC;
    la.ln2_mean = a->ln2_mean + k * N;
    la.ln2_rstd = a->ln2_rstd + k * N;
    la.fch = a->fch + k * N * FC;
    la.fch_gelu = a->fch_gelu + k * N * F;
    la.residual3 = a->residual3 + l * NC;
    for (int lin = 0; lin < NUM_BLOCK_LINEARS; lin++)
        la.input_q[lin] =
            model->dtype == DTYPE_FLOAT8 ? a->input_q[lin] + k * N * linear_in_features(cfg, lin) : NULL;
    return la;
}

// The block's norms: LayerNorm (GPT-2) or RMSNorm (Llama, no bias and no mean), (N,C) -> (N,C).
static void norm_forward(const GPT *model, float *out, float *mean, float *rstd, const float *inp, int weight,
                         int layer) {
    const GPTConfig *cfg = &model->config;
    float *w = model->params_compute;
    int N = model->B * model->T, C = cfg->channels;
    if (model_parts(cfg).norm == NORM_RMSNORM)
        rmsnorm_forward(out, rstd, inp, param_ptr(w, cfg, weight, layer), N, C, model->dtype);
    else
        layernorm_forward(out, mean, rstd, inp, param_ptr(w, cfg, weight, layer),
                          param_ptr(w, cfg, weight + 1, layer), N, C, model->dtype);
}

// dinp += the input gradient of norm `weight` given dout; its weight's (and bias's) gradients accumulate.
static void norm_backward(GPT *model, float *dinp, const float *dout, const float *inp, const float *mean,
                          const float *rstd, int weight, int layer) {
    const GPTConfig *cfg = &model->config;
    float *w = model->params_compute, *dw = model->grads;
    int N = model->B * model->T, C = cfg->channels;
    if (model_parts(cfg).norm == NORM_RMSNORM)
        rmsnorm_backward(dinp, param_ptr(dw, cfg, weight, layer), dout, inp, param_ptr(w, cfg, weight, layer),
                         rstd, N, C, model->dtype);
    else
        layernorm_backward(dinp, param_ptr(dw, cfg, weight, layer), param_ptr(dw, cfg, weight + 1, layer),
                           dout, inp, param_ptr(w, cfg, weight, layer), mean, rstd, N, C, model->dtype);
}

// Block l: residual2 = residual + attproj(attention(qkv(norm1(residual)))), residual3 = residual2 +
// fcproj(act(fc(norm2(residual2)))), all (B,T,C); GPT-2: LayerNorms and GELU, Llama: RMSNorms, rotary
// embeddings on the queries and keys, and SwiGLU. record_amax: as gpt_forward.
static void block_forward(GPT *model, int l, int record_amax) {
    const GPTConfig *cfg = &model->config;
    int B = model->B, T = model->T, C = cfg->channels, NH = cfg->num_heads, KVH = model_kv_heads(cfg);
    int N = B * T, dtype = model->dtype, rotary = model_has_rotary(cfg),
        swiglu = model_parts(cfg).mlp == MLP_SWIGLU;
    size_t NC = (size_t)N * C, NF = (size_t)N * model_ffn_dim(cfg);
    float *proj_out = model->acts.proj_out;
    LayerActs la = layer_acts(model, l);
    norm_forward(model, la.ln1, la.ln1_mean, la.ln1_rstd, la.residual, PT_ATTN_NORM_W, l);
    linear_forward(model, l, LIN_QKV, la.qkv, la.ln1, la.input_q[LIN_QKV], N, record_amax, 0);
    if (rotary) rope_rotate(la.qkv, model->acts.rope, B, T, C, NH, KVH, 0, dtype);
    attention_forward(la.atty, la.att, la.qkv, B, T, C, NH, KVH, dtype);
    linear_forward(model, l, LIN_ATTN_OUT, proj_out, la.atty, la.input_q[LIN_ATTN_OUT], N, record_amax, 0);
    residual_forward(la.residual2, la.residual, proj_out, NC, dtype);
    norm_forward(model, la.ln2, la.ln2_mean, la.ln2_rstd, la.residual2, PT_MLP_NORM_W, l);
    // bfloat16 takes the GELU of fc's FP32 output and rounds that output after, as the GPU's GEMM does in
    // cuBLASLt's epilogue (GELU_AUX_BIAS); float8 of the rounded output, as the GPU's FP8 path does
    int gelu_of_fp32 = dtype == DTYPE_BFLOAT16 && !swiglu;
    linear_forward(model, l, LIN_MLP_UP, la.fch, la.ln2, la.input_q[LIN_MLP_UP], N, record_amax,
                   gelu_of_fp32);
    if (swiglu)
        swiglu_forward(la.fch_gelu, la.fch, N, model_ffn_dim(cfg), dtype);
    else
        gelu_forward(la.fch_gelu, la.fch, NF, dtype);
    if (gelu_of_fp32) round_to_storage(la.fch, NF, dtype);
    linear_forward(model, l, LIN_MLP_DOWN, proj_out, la.fch_gelu, la.input_q[LIN_MLP_DOWN], N, record_amax,
                   0);
    residual_forward(la.residual3, la.residual2, proj_out, NC, dtype);
}

// Forward over inputs (B,T); with targets, the mean loss. record_amax: whether the FP8 casts of
// this forward feed the delayed-scaling histories (training yes, evaluation no).
static void gpt_forward(GPT *model, const int *inputs, const int *targets, int record_amax) {
    const GPTConfig *cfg = &model->config;
    int B = model->B, T = model->T, C = cfg->channels, L = cfg->num_layers;
    int V = cfg->vocab_size, Vp = cfg->padded_vocab_size, N = B * T, dtype = model->dtype;
    size_t NC = (size_t)N * C;
    Activations *a = &model->acts;
    float *w = model->params_compute;
    int head = model_parts(cfg).tied_head ? PT_TOKEN_EMBED : PT_LM_HEAD;
    encoder_forward(a->encoded, inputs, param_ptr(w, cfg, PT_TOKEN_EMBED, 0),
                    param_in_arch(cfg, PT_POS_EMBED) ? param_ptr(w, cfg, PT_POS_EMBED, 0) : NULL, B, T, C,
                    dtype);
    for (int l = 0; l < L; l++) block_forward(model, l, record_amax);
    norm_forward(model, a->lnf, a->lnf_mean, a->lnf_rstd, a->residual3 + (L - 1) * NC, PT_FINAL_NORM_W, 0);
    // LM head, GPT-2's tied to wte, Llama's its own: (B,T,C) -> (B,T,Vp), BF16 compute (the black list keeps
    // it out of FP8)
    gemm(model->gemm_pack, 0, 1, N, Vp, C, 1.0f, a->lnf, param_ptr(w, cfg, head, 0), 0.0f, a->logits);
    round_to_storage(a->logits, (size_t)N * Vp, dtype);
    softmax_crossentropy_forward(a->probs, a->losses, a->logits, targets, N, V, Vp);
    if (!targets) return;
    double sum = 0.0;
    for (int i = 0; i < N; i++) sum += a->losses[i];
    model->mean_loss = (float)(sum / N);
}

// Backward of block l, given the gradient of its output in dresidual (replaced by that of its input).
// With --recompute the block's forward runs again first, with this step's scales and no amax recording,
// so it reproduces the saved activations exactly.
static void block_backward(GPT *model, int l) {
    const GPTConfig *cfg = &model->config;
    int B = model->B, T = model->T, C = cfg->channels, NH = cfg->num_heads, KVH = model_kv_heads(cfg);
    int N = B * T, dtype = model->dtype, rotary = model_has_rotary(cfg),
        swiglu = model_parts(cfg).mlp == MLP_SWIGLU;
    size_t NF = (size_t)N * model_ffn_dim(cfg);
    Gradients *g = &model->dacts;
    if (model->recompute) block_forward(model, l, 0);
    LayerActs la = layer_acts(model, l);
    if (swiglu) {
        linear_backward(model, l, LIN_MLP_DOWN, g->dhidden, g->dresidual, la.fch_gelu,
                        la.input_q[LIN_MLP_DOWN], N, 0);
        swiglu_backward(g->dfch, g->dhidden, la.fch, N, model_ffn_dim(cfg), dtype);
    } else {
        // bfloat16 rounds fcproj's input gradient once, after the GELU's backward, as the GPU's GEMM does in
        // cuBLASLt's epilogue (DGELU); float8 also before it, as the GPU's FP8 path does
        linear_backward(model, l, LIN_MLP_DOWN, g->dfch, g->dresidual, la.fch_gelu, la.input_q[LIN_MLP_DOWN],
                        N, dtype == DTYPE_BFLOAT16);
        gelu_backward(g->dfch, la.fch, NF, dtype);
    }
    linear_backward(model, l, LIN_MLP_UP, g->dc, g->dfch, la.ln2, la.input_q[LIN_MLP_UP], N, 0);
    norm_backward(model, g->dresidual, g->dc, la.residual2, la.ln2_mean, la.ln2_rstd, PT_MLP_NORM_W, l);
    linear_backward(model, l, LIN_ATTN_OUT, g->dc, g->dresidual, la.atty, la.input_q[LIN_ATTN_OUT], N, 0);
    attention_backward(g->dqkv, g->att_row, g->dc, la.qkv, la.att, B, T, C, NH, KVH);
    round_to_storage(g->dqkv, (size_t)N * model_qkv_features(cfg), dtype);
    if (rotary) rope_rotate(g->dqkv, model->acts.rope, B, T, C, NH, KVH, 1, dtype);
    linear_backward(model, l, LIN_QKV, g->dc, g->dqkv, la.ln1, la.input_q[LIN_QKV], N, 0);
    norm_backward(model, g->dresidual, g->dc, la.residual, la.ln1_mean, la.ln1_rstd, PT_ATTN_NORM_W, l);
}

// Backward of the last forward; gradients accumulate into model->grads, the loss gradient scaled by
// dloss (1 / (B*T*micro-steps*processes) for the mean over an optimizer step).
static void gpt_backward(GPT *model, const int *inputs, const int *targets, float dloss) {
    const GPTConfig *cfg = &model->config;
    int B = model->B, T = model->T, C = cfg->channels, L = cfg->num_layers;
    int Vp = cfg->padded_vocab_size, N = B * T, dtype = model->dtype;
    size_t NC = (size_t)N * C;
    Activations *a = &model->acts;
    Gradients *g = &model->dacts;
    float *w = model->params_compute, *dw = model->grads;
    int head = model_parts(cfg).tied_head ? PT_TOKEN_EMBED : PT_LM_HEAD;
    softmax_crossentropy_backward(a->probs, targets, dloss, N, Vp, dtype);
    float *dlogits = a->probs;
    gemm(model->gemm_pack, 0, 0, N, C, Vp, 1.0f, dlogits, param_ptr(w, cfg, head, 0), 0.0f, g->dc);
    round_to_storage(g->dc, NC, dtype);
    gemm(model->gemm_pack, 1, 0, Vp, C, N, 1.0f, dlogits, a->lnf, 1.0f, param_ptr(dw, cfg, head, 0));
    memset(g->dresidual, 0, NC * sizeof(float));
    norm_backward(model, g->dresidual, g->dc, a->residual3 + (L - 1) * NC, a->lnf_mean, a->lnf_rstd,
                  PT_FINAL_NORM_W, 0);
    for (int l = L - 1; l >= 0; l--) {
        block_backward(model, l);
        unit_gradients_done(model, 1 + l);
    }
    encoder_backward(param_ptr(dw, cfg, PT_TOKEN_EMBED, 0),
                     param_in_arch(cfg, PT_POS_EMBED) ? param_ptr(dw, cfg, PT_POS_EMBED, 0) : NULL,
                     g->dresidual, inputs, B, T, C);
    unit_gradients_done(model, 0);
}

// ----------------------------------------------------------------------------
// Optimizer

// Global L2 norm of the summed gradients: this rank's shard in double in a fixed order, then the ranks'
// sums (deterministic; padding is zero).
static float grad_norm(const GPT *model) {
    double sum = 0.0;
    for (size_t i = 0; i < model->shard_count; i++)
        sum += (double)model->grad_shard[i] * model->grad_shard[i];
    if (model->ways > 1) dist_sum_doubles_in_group(model->dist, &sum, 1); // every group holds all the shards
    return (float)sqrt(sum);
}

typedef struct {
    float lr, grad_scale, beta1, beta2, eps, beta1_correction, beta2_correction;
} AdamWStep;

// One run of elements that share a weight decay.
static void adamw_run(float *p, const float *g, float *m, float *v, size_t n, float weight_decay,
                      const AdamWStep *s) {
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) {
        float grad = g[i] * s->grad_scale;
        m[i] = s->beta1 * m[i] + (1.0f - s->beta1) * grad;
        v[i] = s->beta2 * v[i] + (1.0f - s->beta2) * grad * grad;
        float m_hat = m[i] / s->beta1_correction, v_hat = v[i] / s->beta2_correction;
        p[i] -= s->lr * (m_hat / (sqrtf(v_hat) + s->eps) + weight_decay * p[i]);
    }
}

// AdamW on the weights this rank owns, run by run of tensors that share their weight decay.
static void adamw_update(GPT *model, const TrainOptions *opts, float lr, float grad_scale, long t) {
    const GPTConfig *cfg = &model->config;
    AdamWStep step = {lr,
                      grad_scale,
                      opts->beta1,
                      opts->beta2,
                      opts->eps,
                      1.0f - powf(opts->beta1, (float)t),
                      1.0f - powf(opts->beta2, (float)t)};
    for (int u = 0; u < shard_num_units(cfg, model->zero_stage); u++) {
        ShardUnit unit = shard_map_unit(&model->shards, u);
        size_t begin = shard_unit_begin(&model->shards, &unit);
        for (size_t done = 0; done < unit.owned;) {
            int decayed;
            size_t n = param_decay_run(cfg, begin + done, begin + unit.owned, &decayed) - (begin + done);
            size_t i = unit.shard + done;
            adamw_run(model->master + i, model->grad_shard + i, model->m + i, model->v + i, n,
                      decayed ? opts->weight_decay : 0.0f, &step);
            done += n;
        }
    }
}

// ----------------------------------------------------------------------------
// Evaluation and sampling

static float evaluate(GPT *model, DataLoader *loader, int num_batches) {
    dataloader_reset(loader);
    double sum = 0.0;
    for (int i = 0; i < num_batches; i++) {
        dataloader_next_batch(loader);
        gpt_forward(model, loader->inputs, loader->targets, 0);
        sum += model->mean_loss;
    }
    return (float)dist_mean(model->dist, sum / num_batches); // each rank evaluated its own rows
}

// The examples of --eval_data that the model answers correctly (eval_data.h), summed over the ranks.
static int score_eval_set(GPT *model, EvalSet *set) {
    for (int batch = 0; batch < set->num_batches; batch++) {
        eval_set_batch(set, batch);
        gpt_forward(model, set->inputs, set->targets, 0);
        eval_set_take_losses(set, batch, model->acts.losses);
    }
    double correct = eval_set_correct(set);
    dist_sum_doubles(model->dist, &correct, 1);
    return (int)correct;
}

// sampling.h's view of the model: the logits of one position after a forward over tokens.
static const float *cpu_position_logits(void *model_ptr, const int *tokens, int position) {
    GPT *model = (GPT *)model_ptr;
    gpt_forward(model, tokens, NULL, 0);
    return model->acts.logits + (size_t)position * model->config.padded_vocab_size;
}

// ----------------------------------------------------------------------------
// Health: the BF16 shadow check and the FP8 telemetry of a step

// The loss of the loader's current batch through the bfloat16 path on the same weights (the BF16 copy
// that every dtype but float32 keeps). Leaves no trace in the FP8 state.
static float bf16_shadow_loss(GPT *model, const DataLoader *loader) {
    int dtype = model->dtype;
    model->dtype = DTYPE_BFLOAT16;
    gpt_forward(model, loader->inputs, loader->targets, 0);
    model->dtype = dtype;
    return model->mean_loss;
}

// The step's amax and last scale of each activation and gradient tensor, before the step ends.
static void snapshot_fp8_stats(Fp8State *s) {
    Fp8Stats *stats = &s->stats;
    memcpy(stats->amax, s->amax_current, s->num_tensors * sizeof(float));
    for (int t = 0; t < s->num_tensors; t++) {
        if (fp8_recipe_is_block(s->recipe)) // the scale of the block holding the amax
            stats->scale[t] = fp8_block_scale(s->amax_current[t], s->recipe, fp8_tensor_format(s, t),
                                              s->margin, s->pow2_scales);
        else
            stats->scale[t] = stats->scale_min[t] = stats->scale_max[t] = s->scale[t];
    }
}

// Every rank casts its own rows of the activations and gradients: their counters add up. (The weight
// casts are of the full, identical weights on every rank here: those counters are already the run's.)
static void sum_activation_counts(const Dist *dist, Fp8Stats *stats) {
    dist_sum_counts(dist, stats->saturated, stats->num_tensors);
    dist_sum_counts(dist, stats->flushed, stats->num_tensors);
    dist_sum_counts(dist, stats->elements, stats->num_tensors);
}

// ----------------------------------------------------------------------------
// Training

#ifndef TRAIN_GPT_NO_MAIN
// A run from its set-up to its end: what main's phases share.
typedef struct {
    Dist dist;
    TrainOptions opts;
    GPTConfig cfg;
    float *init_params; // --init_from's weights until the model holds them
    int B, T, accum_steps, have_val, have_eval, have_debug, first_step;
    long resume_step;
    DataLoader train_loader, val_loader;
    EvalSet eval;
    Tokenizer tokenizer;
    GPT model;
    TrainState state;
    StepGuard guard;
    RunLog log;
    RunControl control;
    DebugState debug;
    int *sample_tokens; // (B,T)
} Run;

enum { RUN_GOES_ON = -1 }; // a set-up phase's answer where the run goes on (else: its exit status)

// ----------------------------------------------------------------------------
// Checkpoints: what core/checkpoint_io.h's protocol needs of this trainer

// Every rank holds the whole model: each writes an equal share of the file.
static void write_model_part(void *run, FILE *f, const char *tmp) {
    const GPT *model = &((Run *)run)->model;
    size_t begin, count;
    model_file_share(model->num_params, model->dist->rank, model->dist->world_size, &begin, &count);
    model_file_write_range(f, tmp, &model->config, begin, count, model->params + begin);
}

static void read_model(void *run, const char *path) {
    GPT *model = &((Run *)run)->model;
    float *params = load_checkpoint_model(path, &model->config);
    memcpy(model->params, params, model->num_params * sizeof(float));
    free(params);
    take_shard(model);
}

// The state file's arrays, where they live: this rank's moments, the amax histories, the step guard's window.
static void state_blocks(void *run, float *staging, StateBlock blocks[NUM_STATE_BLOCKS]) {
    (void)staging;
    GPT *model = &((Run *)run)->model;
    StepGuard *guard = &((Run *)run)->guard;
    blocks[STATE_ADAM_M] = (StateBlock){model->m, model->shard_count};
    blocks[STATE_ADAM_V] = (StateBlock){model->v, model->shard_count};
    blocks[STATE_AMAX_HISTORY] =
        (StateBlock){model->fp8.amax_history, (size_t)model->fp8.num_tensors * model->fp8.history_len};
    blocks[STATE_GUARD_HISTORY] = (StateBlock){guard->history, 2 * (size_t)guard->window};
}

// After a load: the guard's count and the scales that follow from the histories read.
static void state_from_blocks(void *run, const TrainState *state, StateBlock blocks[NUM_STATE_BLOCKS]) {
    (void)blocks;
    ((Run *)run)->guard.count = state->guard_count;
    fp8_scales_from_history(&((Run *)run)->model.fp8);
}

static CheckpointIO checkpoint_io(Run *r) {
    CheckpointIO io = {
        r, dist_rank_sum, &r->dist, r->dist.rank,     r->dist.world_size, write_model_part, read_model,
        0, state_blocks,  NULL,     state_from_blocks};
    return io;
}

static void checkpoint_now(Run *r) {
    double start = wall_time_ms();
    r->state.train_position = r->train_loader.pos;
    CheckpointIO io = checkpoint_io(r);
    checkpoint_save(&io, &r->opts, &r->state, &r->cfg);
    run_control_checkpoint_time(&r->control, wall_time_ms() - start);
}

// ----------------------------------------------------------------------------
// Records: what core/run_records.h needs of this trainer

static float val_loss(void *run, int bf16) {
    Run *r = (Run *)run;
    if (!bf16) return evaluate(&r->model, &r->val_loader, r->opts.val_batches);
    r->model.dtype = DTYPE_BFLOAT16;
    float loss = evaluate(&r->model, &r->val_loader, r->opts.val_batches);
    r->model.dtype = DTYPE_FLOAT8;
    return loss;
}

static int eval_correct(void *run) {
    return score_eval_set(&((Run *)run)->model, &((Run *)run)->eval);
}

static void sample_after(void *run, int step) {
    Run *r = (Run *)run;
    sample_text(&r->model, cpu_position_logits, &r->tokenizer, r->sample_tokens, r->B, r->T,
                r->cfg.vocab_size, r->opts.sample_len, step);
}

static void checkpoint_hook(void *run) {
    checkpoint_now((Run *)run);
}

static RunHooks run_hooks(Run *r) {
    RunHooks hooks = {
        r, val_loss, eval_correct, r->have_eval ? r->eval.num_examples : 0, sample_after, checkpoint_hook};
    return hooks;
}

// OpenMP's threads bounded by the cores this process may run on: OMP_NUM_THREADS far above them (100000)
// would start that many threads in every parallel region, and crash once their stacks exhaust memory.
static void bound_threads_by_cores(void) {
#ifdef _OPENMP
    cpu_set_t set;
    int cores =
        sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 1) cores = 1;
    if (omp_get_max_threads() <= cores) return;
    printf("threads | OMP_NUM_THREADS asks for %d threads, more than the %d cores this process may run on: "
           "using %d\n",
           omp_get_max_threads(), cores, cores);
    omp_set_num_threads(cores);
#endif
}

// Set-up 1: the processes, the flags and the model's shape; a dry run ends with its plan.
static int read_settings(Run *r, int argc, char **argv) {
    dist_init(&r->dist, &argc, &argv);
    dist_require_mpi(&r->dist, "train_cpu");
    dist_quiet_other_ranks(&r->dist);
    line_buffer_stdout();
    bound_threads_by_cores();
#ifdef USE_BLAS
    openblas_set_num_threads(1); // OpenMP's threads call it (gemm)
#endif
    parse_options(&r->opts, argc, argv);
    validate_options(&r->opts);
    stop_signals_install(stop_signal_number(&r->opts));
    r->dist.timeout_s = r->opts.nccl_timeout_s;
    r->init_params = NULL;
    if (*r->opts.init_from && r->opts.dry_run) // the plan needs the model's shape only, not its 70B values
        r->cfg = model_file_config(r->opts.init_from);
    else if (*r->opts.init_from)
        r->init_params = load_model_file(r->opts.init_from, &r->cfg);
    else
        r->cfg = config_from_options(&r->opts);
    if (*r->opts.init_from) check_init_from_shape(&r->opts, &r->cfg);
    r->B = r->opts.batch_size, r->T = resolve_seq_len(&r->opts, &r->cfg);
    check_fp8_recipe_shape(&r->opts, &r->cfg, r->B, r->T);
    if (!r->opts.dry_run) return RUN_GOES_ON;
    return dry_run_only(&r->opts, &r->cfg, r->B, r->T, &r->dist);
}

// Set-up 2: the output directory, the data, the ranks' agreement and the step to resume from.
static void open_inputs(Run *r) {
    const TrainOptions *opts = &r->opts;
    Dist *dist = &r->dist;
    dist_set_shard_group(dist, resolve_shard_group(opts, dist->world_size));
    prepare_output_dir(opts->output_dir);
    run_dir_claim(opts, dist->rank);
    if (*opts->debug_state) check_writable_file(opts->debug_state, "--debug_state");
    int world = dist->world_size;
    r->accum_steps = resolve_grad_accum_steps(opts, r->T, world);
    if (*opts->debug_state && (r->accum_steps != 1 || world != 1))
        fail("--debug_state: needs a run of one process without gradient accumulation");
    dataloader_init(&r->train_loader, opts->train_data, r->B, r->T, dist->rank, world, opts->shuffle,
                    (uint64_t)opts->seed, r->cfg.vocab_size);
    r->have_val = *opts->val_data != '\0';
    DataLoader *val = r->have_val ? &r->val_loader : NULL;
    if (val) dataloader_init(val, opts->val_data, r->B, r->T, dist->rank, world, 0, 0, r->cfg.vocab_size);
    r->have_eval = *opts->eval_data != '\0';
    if (r->have_eval)
        eval_set_init(&r->eval, opts->eval_data, r->B, r->T, r->cfg.vocab_size, dist->rank, world);
    // before any other collective: ranks with other flags would meet in mismatched ones
    check_ranks_agree(opts, &r->cfg, &r->train_loader, val, dist->rank, world, dist_rank_sum, dist);
    run_dir_agree(opts, dist->rank, world, dist_rank_sum, dist); // before any training
    r->resume_step = resume_step_for_run(opts, dist->rank, world, dist_rank_sum, dist);
}

// Set-up 3: the tokenizer, the model with its weights (fresh, --init_from's or the checkpoint's), the
// training state and the step guard.
static void build_model(Run *r) {
    TrainOptions *opts = &r->opts;
    load_tokenizer_for(&r->tokenizer, opts, &r->cfg);
    check_run_inputs(opts, r->dist.rank, &r->train_loader, r->have_val ? &r->val_loader : NULL);
    if (opts->eval_only &&
        r->have_val) { // the float8 model holds both paths: its BF16 copy and its FP8 casts
        opts->dtype = DTYPE_FLOAT8;
        opts->fp8_recipe = FP8_RECIPE_CURRENT;
    }
    GPT *model = &r->model;
    gpt_alloc(model, &r->cfg, opts->dtype, r->B, r->T, opts, &r->dist);
    if (r->init_params)
        memcpy(model->params, r->init_params, model->num_params * sizeof(float));
    else
        gpt_init_params(model->params, &r->cfg, (uint64_t)opts->seed);
    free(r->init_params);
    take_shard(model);
    r->state = train_state_init(opts, &r->train_loader, r->B, r->T, r->accum_steps, r->dist.rank,
                                r->dist.world_size);
    check_ranks_same_data(&r->train_loader, r->dist.rank, r->dist.world_size, dist_rank_sum, &r->dist);
    step_guard_init(&r->guard, opts->guard_window);
    if (opts->resume) {
        CheckpointIO io = checkpoint_io(r);
        checkpoint_load(&io, opts, r->resume_step, &r->state, &r->cfg);
        resume_data_position(&r->train_loader, opts->output_dir, &r->state);
    }
    refresh_compute_weights(model);
}

static void print_run_line(const Run *r) {
    const GPTConfig *cfg = &r->cfg;
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    char model[160];
    model_description(cfg, model, sizeof(model));
    printf("train_cpu | model %s | %zu parameters | dtype %s | B=%d T=%d accum=%d | %d threads, GEMM %s | %d "
           "processes, ZeRO-%d%s\n",
           model, r->model.num_params, dtype_name(r->opts.dtype), r->B, r->T, r->accum_steps, threads,
           gemm_name(), r->dist.world_size, r->opts.zero_stage, shard_groups_label(&r->dist));
}

// Set-up 4: the run's line and log, the validation a resumed run owes, --eval_only's losses, the debug
// state and the run control.
static void open_records(Run *r) {
    TrainOptions *opts = &r->opts;
    GPT *model = &r->model;
    print_run_line(r);
    gemm_check_kernels();
    run_log_open(&r->log, r->dist.rank == 0 ? opts->log_file : "", (long)r->state.step);
    RunHooks hooks = run_hooks(r);
    records_at_start(&hooks, opts, &r->log, (long)r->state.step, r->have_val);
    r->debug = (DebugState){0};
    r->have_debug = *opts->debug_state != '\0';
    r->first_step = (int)r->state.step;
    if (r->have_debug)
        debug_state_alloc(&r->debug, &r->cfg, r->B, r->T, opts->dtype, r->first_step,
                          opts->steps - r->first_step);
    r->sample_tokens = (int *)malloc_check((size_t)r->B * r->T * sizeof(int), "sample buffer");
    fp8_stats_reset_counts(&model->fp8.stats); // the start-up weight casts belong to no step
    run_control_start(&r->control, opts);
    run_control_reserve_checkpoint(&r->control, 4.0 * (double)model->num_params / r->dist.world_size +
                                                    8.0 * (double)model->shard_count);
    dist_stall_if_chosen(&r->dist, opts->inject_stall_rank);
}

// A run that ends before its first step (a resumed run with nothing left to do, a stop asked for during
// set-up): what set-up allocated freed, and its exit status; model_built: after build_model.
static int end_in_set_up(Run *r, int model_built, int status) {
    if (model_built) {
        step_guard_free(&r->guard);
        if (r->tokenizer.loaded) tokenizer_free(&r->tokenizer);
        gpt_free(&r->model);
    } else {
        free(r->init_params);
    }
    if (r->have_eval) eval_set_free(&r->eval);
    if (r->have_val) dataloader_free(&r->val_loader);
    dataloader_free(&r->train_loader);
    dist_finalize(&r->dist);
    return status;
}

static int set_up_run(Run *r, int argc, char **argv) {
    int status = read_settings(r, argc, argv);
    if (status != RUN_GOES_ON) return status;
    open_inputs(r);
    if (r->opts.resume && !resume_has_work(&r->opts, r->resume_step)) return end_in_set_up(r, 0, 0);
    // a stop asked for while the data was indexed, then while a checkpoint loaded
    if (stopped_in_set_up(r->dist.rank, r->dist.world_size, dist_rank_sum, &r->dist))
        return end_in_set_up(r, 0, EXIT_STOPPED);
    build_model(r);
    if (stopped_in_set_up(r->dist.rank, r->dist.world_size, dist_rank_sum, &r->dist))
        return end_in_set_up(r, 1, EXIT_STOPPED);
    open_records(r);
    return RUN_GOES_ON;
}

// The step's micro-batches, forward and backward, their gradients summed; the sum of their mean losses.
// The first keeps the debug state's first step and --bf16_check_every's shadow loss.
static double micro_steps(Run *r, int step) {
    GPT *model = &r->model;
    DataLoader *loader = &r->train_loader;
    size_t N = (size_t)r->B * r->T;
    float dloss = 1.0f / ((float)N * r->accum_steps * r->dist.world_size);
    int bf16_check = r->opts.bf16_check_every > 0 && (step + 1) % r->opts.bf16_check_every == 0;
    double loss_sum = 0.0;
    for (int micro = 0; micro < r->accum_steps; micro++) {
        micro_step_progress(step + 1, micro, r->accum_steps);
        dataloader_next_batch(loader);
        float bf16_loss = 0.0f;
        if (bf16_check && micro == 0) bf16_loss = (float)dist_mean(&r->dist, bf16_shadow_loss(model, loader));
        gpt_forward(model, loader->inputs, loader->targets, 1);
        if (bf16_check && micro == 0)
            log_bf16_check(&r->log, &r->opts, step + 1, (float)dist_mean(&r->dist, model->mean_loss),
                           bf16_loss);
        if (r->have_debug && step == r->first_step) {
            memcpy(r->debug.inputs, loader->inputs, N * sizeof(int));
            memcpy(r->debug.targets, loader->targets, N * sizeof(int));
            memcpy(r->debug.logits, model->acts.logits, N * r->cfg.padded_vocab_size * sizeof(float));
            r->debug.loss = model->mean_loss;
        }
        gpt_backward(model, loader->inputs, loader->targets, dloss);
        loss_sum += model->mean_loss;
    }
    return loss_sum;
}

// The guards' decision on the step's loss and gradient norm, the FP8 scales' step, and the update where the
// step is applied; the skip reason.
static int apply_step(Run *r, int step, float loss, float norm, float lr) {
    GPT *model = &r->model;
    const TrainOptions *opts = &r->opts;
    float max_loss, max_norm;
    step_guard_thresholds(&r->guard, opts, &max_loss, &max_norm);
    int skip_reason = step_skip_reason(loss, norm, max_loss, max_norm);
    // every rank's amaxes, so that every rank computes the same scales
    dist_max_floats(&r->dist, model->fp8.amax_current, model->fp8.num_tensors);
    snapshot_fp8_stats(&model->fp8);
    fp8_end_step(&model->fp8, step, skip_reason != SKIP_NONE);
    if (skip_reason != SKIP_NONE) {
        r->state.skipped_steps++; // a bad step changes nothing
    } else {
        float grad_scale = (opts->grad_clip > 0.0f && norm > opts->grad_clip) ? opts->grad_clip / norm : 1.0f;
        r->state.updates_applied++;
        adamw_update(model, opts, lr, grad_scale, (long)r->state.updates_applied);
        gather_weights(model);
    }
    if (skip_reason != SKIP_NONFINITE) step_guard_record(&r->guard, loss, norm);
    // also after a skip: the GPU recasts unconditionally, and the telemetry agrees
    refresh_compute_weights(model);
    r->state.step = step + 1;
    r->state.guard_count = r->guard.count;
    return skip_reason;
}

// One optimizer step: its micro-batches, the gradients' reduction, the guards and the update, its records.
static void train_step(Run *r, int step) {
    GPT *model = &r->model;
    const TrainOptions *opts = &r->opts;
    int world = r->dist.world_size;
    double start = wall_time_ms();
    run_control_inject(opts, r->dist.rank, step);
    int stop_vote = run_control_vote(&r->control, r->log.failed);
    memset(model->grads, 0, model->num_params * sizeof(float));
    if (model->ways > 1) memset(model->grad_shard, 0, model->shard_count * sizeof(float)); // else: grads
    double loss_sum = micro_steps(r, step);
    reduce_gradients(model);
    if (step + 1 == opts->inject_nan_step) model->grad_shard[0] = NAN;
    double sums[2] = {loss_sum / r->accum_steps, stop_vote}; // the votes to stop ride on the loss's sum
    dist_sum_doubles(&r->dist, sums, 2);
    float loss = (float)(sums[0] / world), norm = grad_norm(model), lr = learning_rate(opts, step);
    if (r->have_debug && step == r->first_step)
        memcpy(r->debug.grads, model->grads, model->num_params * sizeof(float));
    if (r->have_debug) r->debug.step_losses[step - r->first_step] = loss;
    int skip_reason = apply_step(r, step, loss, norm, lr);
    double ms = wall_time_ms() - start;
    StepRecord record = {step + 1,
                         opts->steps,
                         loss,
                         lr,
                         norm,
                         ms,
                         (double)r->B * r->T * r->accum_steps * world / (ms / 1e3),
                         skip_reason,
                         model_flops_per_token(&r->cfg, r->T)};
    log_step(&r->log, &record);
    if (opts->dtype == DTYPE_FLOAT8) {
        sum_activation_counts(&r->dist, &model->fp8.stats);
        report_fp8_stats(&r->log, opts, step + 1, &model->fp8.stats);
    }
    run_control_step_time(&r->control, ms);
    run_control_after_step(&r->control, (int)sums[1], skip_reason != SKIP_NONE, &r->state.consecutive_skips);
}

// What the end of a step holds (run_records.h); 0 where the run ends early.
static int end_of_step(Run *r, int step) {
    StepEnd end = step_end(&r->opts, &r->control, step, r->have_val);
    RunHooks hooks = run_hooks(r);
    return records_after_step(&hooks, &end, &r->log, step);
}

// The end of the run: the debug state, the last lines and the exit status, everything freed.
static int end_run(Run *r) {
    if (r->have_debug) debug_state_write(r->opts.debug_state, &r->debug);
    if (r->state.skipped_steps) printf("skipped steps: %ld\n", (long)r->state.skipped_steps);
    int status = run_control_finish(&r->control, &r->opts, r->dist.rank, (long)r->state.step,
                                    (long)r->state.skipped_steps, r->log.failed);
    log_energy(&r->log, -1.0, &r->opts, "the CPU trainer reads no energy counter");
    run_log_close(&r->log);
    step_guard_free(&r->guard);
    if (r->have_debug) debug_state_free(&r->debug);
    if (r->have_eval) eval_set_free(&r->eval);
    if (r->have_val) dataloader_free(&r->val_loader);
    dataloader_free(&r->train_loader);
    if (r->tokenizer.loaded) tokenizer_free(&r->tokenizer);
    free(r->sample_tokens);
    gpt_free(&r->model);
    dist_finalize(&r->dist);
    return status;
}

int main(int argc, char **argv) {
    stop_signals_install(SIGUSR1); // first: a stop signal during set-up stops the run (run_control.h)
    Run run;
    int status = set_up_run(&run, argc, argv);
    if (status != RUN_GOES_ON) return status;
    for (int step = (int)run.state.step; step < run.opts.steps; step++) {
        train_step(&run, step);
        if (!end_of_step(&run, step)) break;
    }
    return end_run(&run);
}
#endif

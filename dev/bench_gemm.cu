// bench_gemm.cu: cuBLASLt BF16 vs FP8 on the linear layers of 124M, 1.5B, 7B and 70B, through the trainer's
// own GEMM and cast code (gpu/gemm.cuh, gpu/fp8_cast.cuh, gpu/block_cast.cuh). For each layer's forward GEMM
// (N tokens, OC, IC): TFLOP/s of the BF16 GEMM, of the per-tensor FP8 GEMM alone, and of the FP8 GEMM
// including the cast+transpose+amax of its input (what a training step pays), and the speedups; then the
// block recipe the device runs (Hopper: blockwise, 1 x 128 input tiles and 128 x 128 weight blocks;
// Blackwell: mxfp8, 1 x 32 E8M0 blocks), its block-scaled GEMM alone and with its two input casts (tiles
// along IC, and along the tokens into the saved transpose), and its time over the per-tensor GEMM's ("n/a"
// where IC or OC is not a multiple of the block, as 1.5B's C = 1600 for blockwise).
// A benchmark, not a test: it checks only that FP8 and BF16 results agree to the FP8 precision.
//   make build/bench_gemm && ./build/bench_gemm [tokens=8192]
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "../gpu/block_cast.cuh"
#include "../gpu/common.cuh"
#include "../gpu/fp8_cast.cuh"
#include "../gpu/gemm.cuh"
#include "../core/memory_plan.h"

typedef struct {
    const char *model;
    int channels;
} BenchModel;

static const BenchModel MODELS[] = {{"124M", 768}, {"1.5B", 1600}, {"7B", 4096}, {"70B", 8192}};

__global__ void fill_kernel(bf16 *x, size_t n, unsigned seed, float scale) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)i * 2654435761u ^ seed;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        x[i] = __float2bfloat16_rn(scale * ((float)(h & 0xFFFF) / 32768.0f - 1.0f));
    }
}

static float time_ms(cudaStream_t stream, void (*fn)(void *), void *ctx) {
    cudaEvent_t start, stop;
    cuda_check(cudaEventCreate(&start));
    cuda_check(cudaEventCreate(&stop));
    for (int i = 0; i < 3; i++) fn(ctx);
    const int reps = 20;
    cuda_check(cudaEventRecord(start, stream));
    for (int i = 0; i < reps; i++) fn(ctx);
    cuda_check(cudaEventRecord(stop, stream));
    cuda_check(cudaEventSynchronize(stop));
    float ms = 0.0f;
    cuda_check(cudaEventElapsedTime(&ms, start, stop));
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    return ms / reps;
}

typedef struct {
    GemmContext *gemm;
    cudaStream_t stream;
    int M, N, K;
    bf16 *x, *w, *out_bf16, *out_fp8;
    fp8 *x_q, *x_q_t, *w_q;
    float *state;               // amax, scale, descale for x; then for w
    unsigned long long *counts; // saturated and flushed values, as the trainer's casts count them
    int recipe;                 // the device's block recipe
    void *x_factors, *x_factors_t, *w_factors, *w_factors_t; // its factors
} Bench;

static void run_bf16(void *p) {
    Bench *b = (Bench *)p;
    gemm(b->gemm,
         {.D = b->out_bf16,
          .d_type = CUDA_R_16BF,
          .A = {b->x, CUDA_R_16BF, NULL, 0},
          .B = {b->w, CUDA_R_16BF, NULL, 0},
          .trans_b = 1,
          .M = b->M,
          .N = b->N,
          .K = b->K},
         b->stream);
}

static void run_fp8(void *p) {
    Bench *b = (Bench *)p;
    gemm(b->gemm,
         {.D = b->out_fp8,
          .d_type = CUDA_R_16BF,
          .A = {b->x_q, CUDA_R_8F_E4M3, &b->state[2], 0},
          .B = {b->w_q, CUDA_R_8F_E4M3, &b->state[5], 0},
          .trans_b = 1,
          .M = b->M,
          .N = b->N,
          .K = b->K,
          .fast_accum = 1},
         b->stream);
}

static void run_block(void *p) {
    Bench *b = (Bench *)p;
    int mx = b->recipe == FP8_RECIPE_MXFP8;
    gemm(b->gemm,
         {.D = b->out_fp8,
          .d_type = CUDA_R_16BF,
          .A = {b->x_q, CUDA_R_8F_E4M3, b->x_factors, mx ? GEMM_SCALE_MX_32 : GEMM_SCALE_TILE_128},
          .B = {b->w_q, CUDA_R_8F_E4M3, b->w_factors, mx ? GEMM_SCALE_MX_32 : GEMM_SCALE_BLOCK_128x128},
          .trans_b = 1,
          .M = b->M,
          .N = b->N,
          .K = b->K},
         b->stream);
}

// A block recipe's forward: the input cast twice (tiles along K for this GEMM, along the tokens into the
// saved transpose), recording amax, counts and the scale spread as the trainer does, then the GEMM.
static void run_block_with_cast(void *p) {
    Bench *b = (Bench *)p;
    BlockRecord rec = {&b->state[0], b->counts, &b->state[6], &b->state[7]};
    block_cast<bf16>(b->recipe, b->x_q, b->x_factors, b->x_q_t, b->x_factors_t, rec, b->x, b->M, b->K,
                     FP8_E4M3, 0, 0, b->stream);
    run_block(p);
}

// What the trainer does per linear forward under the delayed recipe: one fused cast of the input
// (writing x_q and the saved x_q^T, recording the amax), then the FP8 GEMM.
static void run_fp8_with_cast(void *p) {
    Bench *b = (Bench *)p;
    cast_transpose<bf16>(b->x_q, b->x_q_t, &b->state[0], b->counts, b->x, b->M, b->K, &b->state[1], FP8_E4M3,
                         b->stream);
    run_fp8(p);
}

static double rel_l2_bf16(const bf16 *a, const bf16 *b, size_t n) {
    bf16 *ha = (bf16 *)malloc_check(n * sizeof(bf16), "bench"),
         *hb = (bf16 *)malloc_check(n * sizeof(bf16), "bench");
    cuda_check(cudaMemcpy(ha, a, n * sizeof(bf16), cudaMemcpyDeviceToHost));
    cuda_check(cudaMemcpy(hb, b, n * sizeof(bf16), cudaMemcpyDeviceToHost));
    double diff = 0.0, norm = 0.0;
    for (size_t i = 0; i < n; i++) {
        double x = __bfloat162float(ha[i]), y = __bfloat162float(hb[i]);
        diff += (x - y) * (x - y);
        norm += y * y;
    }
    free(ha);
    free(hb);
    return sqrt(diff / norm);
}

int main(int argc, char **argv) {
    int tokens = argc > 1 ? atoi(argv[1]) : 8192;
    if (tokens <= 0 || tokens % 16)
        fail("tokens: %s must be a positive multiple of 16", argc > 1 ? argv[1] : "");
    cudaDeviceProp props;
    cuda_check(cudaGetDeviceProperties(&props, 0));
    int recipe = props.major >= 10 ? FP8_RECIPE_MXFP8 : FP8_RECIPE_BLOCKWISE; // what cuBLASLt runs here
    cudaStream_t stream;
    cuda_check(cudaStreamCreate(&stream));
    void *workspace;
    cuda_check(cudaMalloc(&workspace, GEMM_WORKSPACE_BYTES));
    GemmContext ctx;
    gemm_init(&ctx, workspace, GEMM_WORKSPACE_BYTES);
    printf("%-5s %-7s %6s %6s %6s | %8s %8s %8s | %7s %7s | %8s %8s | %7s %7s | %s\n", "model", "linear", "M",
           "N", "K", "bf16", "fp8", "fp8+cast", "x raw", "x cast", "blk", "blk+cast", "blk/fp8", "x blkc",
           "rel err fp8, blk");
    static const char *linear_names[4] = {"qkv", "attproj", "fc", "fcproj"};
    int failures = 0;
    for (int m = 0; m < (int)(sizeof(MODELS) / sizeof(MODELS[0])); m++) {
        int C = MODELS[m].channels;
        int out_features[4] = {3 * C, C, 4 * C, C}, in_features[4] = {C, C, C, 4 * C};
        for (int lin = 0; lin < 4; lin++) {
            Bench b;
            memset(&b, 0, sizeof(b));
            b.gemm = &ctx, b.stream = stream, b.M = tokens, b.N = out_features[lin], b.K = in_features[lin];
            size_t x_n = (size_t)b.M * b.K, w_n = (size_t)b.N * b.K, out_n = (size_t)b.M * b.N;
            cuda_check(cudaMalloc((void **)&b.x, x_n * sizeof(bf16)));
            cuda_check(cudaMalloc((void **)&b.w, w_n * sizeof(bf16)));
            cuda_check(cudaMalloc((void **)&b.out_bf16, out_n * sizeof(bf16)));
            cuda_check(cudaMalloc((void **)&b.out_fp8, out_n * sizeof(bf16)));
            cuda_check(cudaMalloc((void **)&b.x_q, x_n));
            cuda_check(cudaMalloc((void **)&b.x_q_t, x_n));
            cuda_check(cudaMalloc((void **)&b.w_q, w_n));
            cuda_check(cudaMalloc((void **)&b.state, 8 * sizeof(float)));
            cuda_check(cudaMalloc((void **)&b.counts, 2 * sizeof(unsigned long long)));
            launch<fill_kernel>({1024, 256, 0, stream}, b.x, x_n, 17u + lin, 1.0f);
            launch<fill_kernel>({1024, 256, 0, stream}, b.w, w_n, 91u + lin, 0.02f);
            measure_scale<bf16>(&b.state[0], &b.state[1], &b.state[2], b.x, x_n, FP8_E4M3, 0, stream);
            measure_scale<bf16>(&b.state[3], &b.state[4], &b.state[5], b.w, w_n, FP8_E4M3, 0, stream);
            cast_transpose<bf16>(b.w_q, NULL, NULL, NULL, b.w, b.N, b.K, &b.state[4], FP8_E4M3, stream);
            cast_transpose<bf16>(b.x_q, b.x_q_t, NULL, NULL, b.x, b.M, b.K, &b.state[1], FP8_E4M3, stream);
            double flops = 2.0 * b.M * b.N * b.K;
            float t_bf16 = time_ms(stream, run_bf16, &b), t_fp8 = time_ms(stream, run_fp8, &b);
            float t_cast = time_ms(stream, run_fp8_with_cast, &b);
            // E4M3 keeps 3 mantissa bits: each operand is off by at most 2^-4 relative, a product by at most
            // ~2^-3; with independent errors the dot products' relative L2 error stays well below 2^-3.
            double err = rel_l2_bf16(b.out_fp8, b.out_bf16, out_n);
            failures += !(err < 0.125);
            printf("%-5s %-7s %6d %6d %6d | %8.1f %8.1f %8.1f | %6.2fx %6.2fx | ", MODELS[m].model,
                   linear_names[lin], b.M, b.N, b.K, flops / t_bf16 / 1e9, flops / t_fp8 / 1e9,
                   flops / t_cast / 1e9, t_bf16 / t_fp8, t_bf16 / t_cast);
            int tile = fp8_block_size(recipe);
            if (b.K % tile || b.N % tile || b.M % tile) {
                printf("%8s %8s | %7s %7s | %.4f, n/a\n", "n/a", "n/a", "n/a", "n/a", err);
            } else {
                b.recipe = recipe;
                cuda_check(cudaMalloc(&b.x_factors, fp8_tile_factor_bytes(recipe, b.M, b.K)));
                cuda_check(cudaMalloc(&b.x_factors_t, fp8_tile_factor_bytes(recipe, b.K, b.M)));
                cuda_check(cudaMalloc(&b.w_factors, fp8_weight_factor_bytes(recipe, b.N, b.K)));
                cuda_check(cudaMalloc(&b.w_factors_t, fp8_weight_factor_bytes(recipe, b.K, b.N)));
                BlockRecord none = {NULL, NULL, NULL, NULL};
                if (recipe == FP8_RECIPE_MXFP8)
                    block_cast<bf16>(recipe, b.w_q, b.w_factors, NULL, NULL, none, b.w, b.N, b.K, FP8_E4M3, 0,
                                     0, stream);
                else
                    block_cast_square<bf16>(b.w_q, (float *)b.w_factors, (float *)b.w_factors_t, none, b.w,
                                            b.N, b.K, 0, 0, stream);
                run_block_with_cast(&b);
                float t_block = time_ms(stream, run_block, &b),
                      t_block_cast = time_ms(stream, run_block_with_cast, &b);
                double block_err = rel_l2_bf16(b.out_fp8, b.out_bf16, out_n);
                failures += !(block_err < 0.125);
                printf("%8.1f %8.1f | %6.2fx %6.2fx | %.4f, %.4f\n", flops / t_block / 1e9,
                       flops / t_block_cast / 1e9, t_block / t_fp8, t_bf16 / t_block_cast, err, block_err);
                cudaFree(b.x_factors), cudaFree(b.x_factors_t), cudaFree(b.w_factors),
                    cudaFree(b.w_factors_t);
            }
            cudaFree(b.x), cudaFree(b.w), cudaFree(b.out_bf16), cudaFree(b.out_fp8);
            cudaFree(b.x_q), cudaFree(b.x_q_t), cudaFree(b.w_q), cudaFree(b.state), cudaFree(b.counts);
        }
    }
    printf(
        "(TFLOP/s; x raw = FP8 GEMM speedup over BF16, x cast = including the input cast+transpose; blk "
        "= the block recipe's GEMM (%s), blk/fp8 = its time over the per-tensor one, x blkc = BF16 time over "
        "it with its casts)\n",
        recipe == FP8_RECIPE_MXFP8 ? "mxfp8" : "blockwise");
    gemm_destroy(&ctx);
    gemm_destroy(&ctx);
    if (failures) fail("%d FP8 GEMMs disagreed with BF16 beyond FP8 precision", failures);
    return 0;
}

// first_contact.cu: the library calls the CUDA trainer makes, one at a time, each against a CPU reference:
// every GEMM form it issues, through its own wrapper (gpu/gemm.cuh) with its operand types, layouts, scale
// modes, epilogues and accumulation flags; cuDNN's fused-attention plans at the test suite's shapes; an NCCL
// communicator of one rank and a collective on it. scripts/first_contact.sh runs each check in a process of
// its own (a GPU error that poisons the context, or a wrapper's fail(), ends that check alone) and prints the
// table; gpu_check.sh opens with it, and make test runs it on the emulation.
//   first_contact --list      the checks' names, one a line
//   first_contact NAME        one check: a line "PASS|FAIL|SKIP <detail>", exit 0 (PASS, SKIP) or 1 (FAIL)
//
// The GEMM checks. Operands are FP8 or BF16 values drawn at random and decoded exactly on the host (an FP8
// operand's codes are what the GEMM reads, so the reference has no quantization error of its own); the
// reference sums in double. Each element of D must lie within a bound that any correct GEMM meets:
//   - accumulation. FP32 accumulation in any order: (K + 2) u32 S, with S = sum over k of |a_k b_k| times the
//     factors (the classical bound gamma_K for a K-term sum, plus the two roundings that apply the scales).
//     FP8 on Hopper's tensor cores (fp8_scaling.h's model, from the published measurements): each MMA of 32
//     products adds into an accumulator that keeps 13 fraction bits, truncated, so each of the K/32 additions
//     loses less than one unit of that accumulator, 2^-13 |acc| <= 2^-13 S; the bound adds (K/32 + 1) 2^-13
//     S, which covers the fast accumulation (never promoted), the promoted one and the block-scaled one
//     alike. Blackwell's FP8 sums are FP32 (cli.h's fp8_accumulation_of_device): the FP32 bound alone;
//   - the output's rounding: u_D (|ref| + the above), u_D = 2^-8 for BF16 (8 significant bits), 2^-24 for
//     FP32;
//   - the GELU epilogues: cuBLASLt documents no formula, so the reference is the trainer's tanh form and the
//     bound adds the largest difference between it and the erf form over all inputs, 4.8e-4 for GELU
//     and 8.7e-4 for its derivative (times |v|), and the derivative's bound on |GELU'| (1.13) times the
//     accumulation's; the row names the form the device computes (the one within the bound without that
//     allowance).
// A wrong form (an operand transposed, a scale or a block's factor read from the wrong place or not at all, a
// bias dropped, the wrong epilogue) moves elements by a fraction of |ref| itself, far beyond these bounds at
// K <= 256: the planted faults of test/test_first_contact.sh show the rows fail on the comparison.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include <nccl.h>

#include "../core/fp8_scaling.h"
#include "../gpu/common.cuh"
#include "../gpu/gemm.cuh"
#include "../core/memory_plan.h"
#ifdef USE_CUDNN
#include "../gpu/attention_cudnn.h"
#endif

namespace {

enum Precision { BF16, FP8_TENSOR, FP8_BLOCKWISE, FP8_MXFP8 };
enum Form { FORWARD, DATA_GRADIENT, WEIGHT_GRADIENT };

struct GemmCheck {
    const char *name;
    Precision precision;
    Form form;
    GemmEpilogueKind epilogue;
    int fast_accum;
};

// What the trainer issues (train_gpt_fp8.cu's linear_forward, linear_backward, fp8_linear_forward,
// fp8_linear_backward; the LM head's GEMMs are the BF16 forms without bias).
const GemmCheck GEMM_CHECKS[] = {
    {"gemm_bf16_forward_bias", BF16, FORWARD, GEMM_BIAS, 0},
    {"gemm_bf16_forward_gelu_bias", BF16, FORWARD, GEMM_GELU_BIAS, 0},
    {"gemm_bf16_data_gradient", BF16, DATA_GRADIENT, GEMM_NO_EPILOGUE, 0},
    {"gemm_bf16_data_gradient_dgelu", BF16, DATA_GRADIENT, GEMM_DGELU, 0},
    {"gemm_bf16_weight_gradient", BF16, WEIGHT_GRADIENT, GEMM_NO_EPILOGUE, 0},
    {"gemm_bf16_weight_gradient_bias_grad", BF16, WEIGHT_GRADIENT, GEMM_BIAS_GRAD, 0},
    {"gemm_fp8_forward_bias", FP8_TENSOR, FORWARD, GEMM_BIAS, 0},
    {"gemm_fp8_forward_bias_fast", FP8_TENSOR, FORWARD, GEMM_BIAS, 1},
    {"gemm_fp8_data_gradient", FP8_TENSOR, DATA_GRADIENT, GEMM_NO_EPILOGUE, 0},
    {"gemm_fp8_data_gradient_fast", FP8_TENSOR, DATA_GRADIENT, GEMM_NO_EPILOGUE, 1},
    {"gemm_fp8_weight_gradient", FP8_TENSOR, WEIGHT_GRADIENT, GEMM_NO_EPILOGUE, 0},
    {"gemm_fp8_weight_gradient_fast", FP8_TENSOR, WEIGHT_GRADIENT, GEMM_NO_EPILOGUE, 1},
    {"gemm_blockwise_forward_bias", FP8_BLOCKWISE, FORWARD, GEMM_BIAS, 0},
    {"gemm_blockwise_data_gradient", FP8_BLOCKWISE, DATA_GRADIENT, GEMM_NO_EPILOGUE, 0},
    {"gemm_blockwise_weight_gradient", FP8_BLOCKWISE, WEIGHT_GRADIENT, GEMM_NO_EPILOGUE, 0},
    {"gemm_mxfp8_forward_bias", FP8_MXFP8, FORWARD, GEMM_BIAS, 0},
    {"gemm_mxfp8_data_gradient", FP8_MXFP8, DATA_GRADIENT, GEMM_NO_EPILOGUE, 0},
    {"gemm_mxfp8_weight_gradient", FP8_MXFP8, WEIGHT_GRADIENT, GEMM_NO_EPILOGUE, 0},
};
const int NUM_GEMM_CHECKS = (int)(sizeof(GEMM_CHECKS) / sizeof(GEMM_CHECKS[0]));

// A linear of 128 input and 256 output features over 256 tokens: every dimension a multiple of the 128-wide
// blocks, K = 128 or 256, and small enough for the emulation.
const int TOKENS = 256, IN_FEATURES = 128, OUT_FEATURES = 256;

const double U32 = 0x1p-24, U_BF16 = 0x1p-8;
const double GELU_FORM_DIFFERENCE = 4.8e-4, DGELU_FORM_DIFFERENCE = 8.7e-4, GELU_SLOPE_MAX = 1.13;

unsigned long long rng_state = 0x2545F4914F6CDD1DULL;
double uniform() { // [-1, 1)
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) * 0x1p-52 - 1.0;
}

// Random values spread over four binades, stored as the GEMM reads them (FP8 codes or BF16 bits) and decoded.
struct HostMatrix {
    cudaDataType_t type;
    int elements;
    void *bits;     // uint8_t codes or uint16_t BF16 bits
    double *values; // decoded
};

HostMatrix host_matrix(cudaDataType_t type, int elements) {
    HostMatrix m = {type, elements, malloc_check((size_t)elements * 2, "first contact"),
                    (double *)malloc_check((size_t)elements * sizeof(double), "first contact")};
    for (int i = 0; i < elements; i++) {
        float x = (float)(uniform() * exp2(floor(2.0 * uniform())));
        if (type == CUDA_R_16BF) {
            uint16_t b = bf16_from_float(x);
            ((uint16_t *)m.bits)[i] = b, m.values[i] = bf16_to_float(b);
        } else {
            Fp8Format f = type == CUDA_R_8F_E4M3 ? FP8_E4M3 : FP8_E5M2;
            uint8_t c = fp8_from_float(x, f);
            ((uint8_t *)m.bits)[i] = c, m.values[i] = fp8_to_float(c, f);
        }
    }
    return m;
}

size_t type_bytes(cudaDataType_t type) {
    return type == CUDA_R_16BF ? 2 : type == CUDA_R_32F ? 4 : 1;
}

void *to_device(const void *host, size_t bytes) {
    void *d;
    cuda_check(cudaMalloc(&d, bytes));
    cuda_check(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
    return d;
}

// An operand's block factors in fp8_scaling.h's layouts (the trainer's), for the operand stored (rows, K):
// FP32 factors in [0.5, 2) for blockwise, E8M0 powers of two 2^-2 .. 2^2 for mxfp8; and the factor of
// element (row, k) for the reference. Padding stays 1 (never read by a correct GEMM).
struct Factors {
    int mode, rows, K;
    size_t bytes;
    void *host;
};

Factors make_factors(int mode, int rows, int K) {
    Factors f = {mode, rows, K, 0, NULL};
    if (mode == GEMM_SCALE_TENSOR) return f;
    if (mode == GEMM_SCALE_MX_32) {
        f.bytes = fp8_mx_factors(rows, K);
        f.host = malloc_check(f.bytes, "first contact");
        memset(f.host, 127, f.bytes);
        for (int r = 0; r < rows; r++)
            for (int b = 0; b < K / FP8_MX_BLOCK; b++)
                ((uint8_t *)f.host)[fp8_mx_factor_index(K, r, b)] =
                    (uint8_t)(127 + (int)floor(2.5 * uniform()));
        return f;
    }
    int square = mode == GEMM_SCALE_BLOCK_128x128;
    size_t n = square ? fp8_square_factors(rows, K) : fp8_tile_factors(rows, K);
    f.bytes = n * sizeof(float);
    float *h = (float *)malloc_check(f.bytes, "first contact");
    for (size_t i = 0; i < n; i++) h[i] = 1.0f;
    for (int r = 0; r < rows; r += square ? FP8_BLOCKWISE_TILE : 1)
        for (int t = 0; t < K / FP8_BLOCKWISE_TILE; t++)
            h[square ? fp8_square_factor_index(K, r, t) : fp8_tile_factor_index(rows, r, t)] =
                (float)(1.25 + 0.75 * uniform());
    f.host = h;
    return f;
}

double factor_at(const Factors &f, int row, int k) {
    if (f.mode == GEMM_SCALE_MX_32)
        return fp8_e8m0_to_float(((const uint8_t *)f.host)[fp8_mx_factor_index(f.K, row, k / FP8_MX_BLOCK)]);
    int t = k / FP8_BLOCKWISE_TILE;
    if (f.mode == GEMM_SCALE_BLOCK_128x128)
        return ((const float *)f.host)[fp8_square_factor_index(f.K, row, t)];
    return ((const float *)f.host)[fp8_tile_factor_index(f.rows, row, t)];
}

// The shapes, types and flags of a form, in gemm.cuh's row-major terms: D (M,N) = op(A) op(B).
struct Problem {
    int M, N, K, trans_a, trans_b;
    cudaDataType_t a_type, b_type, d_type;
    int a_mode, b_mode, accumulate;
};

Problem problem_of(const GemmCheck &c) {
    Problem p;
    const int fp8 = c.precision != BF16, blockwise = c.precision == FP8_BLOCKWISE;
    const int tile = c.precision == FP8_MXFP8 ? GEMM_SCALE_MX_32
                     : blockwise              ? GEMM_SCALE_TILE_128
                                              : GEMM_SCALE_TENSOR;
    const int weight = c.precision == FP8_MXFP8 ? GEMM_SCALE_MX_32
                       : blockwise              ? GEMM_SCALE_BLOCK_128x128
                                                : GEMM_SCALE_TENSOR;
    // the output gradient's format: E5M2 except in mxfp8 (fp8_role_format)
    const cudaDataType_t grad = c.precision == FP8_MXFP8 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
    p.a_mode = p.b_mode = GEMM_SCALE_TENSOR;
    p.accumulate = 0;
    p.d_type = CUDA_R_16BF;
    if (c.form == FORWARD) { // out (N,OC) = x (N,IC) . W^T, W stored (OC,IC)
        p.M = TOKENS, p.N = OUT_FEATURES, p.K = IN_FEATURES, p.trans_a = 0, p.trans_b = 1;
        p.a_type = p.b_type = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
        p.a_mode = tile, p.b_mode = weight;
    } else if (c.form == DATA_GRADIENT) { // dx (N,IC) = dy (N,OC) . W; FP8: W^T stored (IC,OC), K-major
        p.M = TOKENS, p.N = IN_FEATURES, p.K = OUT_FEATURES, p.trans_a = 0, p.trans_b = fp8;
        p.a_type = fp8 ? grad : CUDA_R_16BF, p.b_type = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
        p.a_mode = tile, p.b_mode = weight;
    } else { // dW (OC,IC) += dy^T . x; FP8: dy^T (OC,N) and x^T (IC,N) K-major; BF16: dy (N,OC), x (N,IC)
        p.M = OUT_FEATURES, p.N = IN_FEATURES, p.K = TOKENS, p.trans_a = !fp8, p.trans_b = fp8;
        p.a_type = fp8 ? grad : CUDA_R_16BF, p.b_type = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
        p.a_mode = p.b_mode = tile;
        p.d_type = CUDA_R_32F, p.accumulate = 1;
    }
    return p;
}

double gelu_tanh(double x) {
    return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

double gelu_tanh_slope(double x) {
    double u = 0.7978845608028654 * (x + 0.044715 * x * x * x), th = tanh(u);
    return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * x * x);
}

double gelu_erf(double x) {
    return 0.5 * x * (1.0 + erf(x * M_SQRT1_2));
}

double gelu_erf_slope(double x) {
    return 0.5 * (1.0 + erf(x * M_SQRT1_2)) + x * exp(-0.5 * x * x) / sqrt(2.0 * M_PI);
}

float read_value(const void *bits, cudaDataType_t type, size_t i) {
    if (type == CUDA_R_32F) return ((const float *)bits)[i];
    return bf16_to_float(((const uint16_t *)bits)[i]);
}

// Why the device or the libraries cannot run the form, or NULL.
const char *gemm_unsupported(const GemmCheck &c, const cudaDeviceProp &props, char *why, size_t n) {
    const int cc = props.major * 10 + props.minor;
    if (c.precision != BF16 && cc < 89) return snprintf(why, n, "sm_%d has no FP8 tensor cores", cc), why;
    if (c.precision == FP8_BLOCKWISE || c.precision == FP8_MXFP8) {
        if (!GEMM_BLOCK_SCALING)
            return snprintf(why, n, "built against cuBLAS %d.%d headers: no block scale modes",
                            CUBLAS_VERSION / 10000, CUBLAS_VERSION / 100 % 100),
                   why;
        if (cublasLtGetVersion() < 120900)
            return snprintf(why, n, "the loaded cuBLASLt %zu has no block-scaled GEMMs (12.9 or newer)",
                            cublasLtGetVersion()),
                   why;
    }
    if (c.precision == FP8_BLOCKWISE && props.major != 9)
        return snprintf(why, n, "sm_%d: the 1x128 and 128x128 block modes are Hopper's", cc), why;
    if (c.precision == FP8_MXFP8 && props.major < 10)
        return snprintf(why, n, "sm_%d: MXFP8 (VEC32_UE8M0) is Blackwell's", cc), why;
    return NULL;
}

int run_gemm_check(const GemmCheck &c, const cudaDeviceProp &props) {
    char why[200];
    if (gemm_unsupported(c, props, why, sizeof why)) return printf("SKIP %s\n", why), 0;
    const Problem p = problem_of(c);
    const int a_rows = p.trans_a ? p.K : p.M, a_cols = p.trans_a ? p.M : p.K;
    const int b_rows = p.trans_b ? p.N : p.K, b_cols = p.trans_b ? p.K : p.N;
    HostMatrix A = host_matrix(p.a_type, a_rows * a_cols), B = host_matrix(p.b_type, b_rows * b_cols);
    // K-major block factors: A stored (M,K), B stored (N,K) (block modes are FP8, hence TN)
    Factors fa = make_factors(p.a_mode, p.M, p.K), fb = make_factors(p.b_mode, p.N, p.K);
    const float descale_a = 0.37f, descale_b = 0.011f; // per-tensor FP8: neither a power of two
    const size_t d_elements = (size_t)p.M * p.N, d_bytes = d_elements * type_bytes(p.d_type);
    void *d_init = malloc_check(d_bytes, "first contact"), *d_out = malloc_check(d_bytes, "first contact");
    for (size_t i = 0; i < d_elements; i++) {
        float x = p.accumulate ? (float)(4.0 * uniform()) : 0.0f;
        if (p.d_type == CUDA_R_32F)
            ((float *)d_init)[i] = x;
        else
            ((uint16_t *)d_init)[i] = bf16_from_float(x);
    }
    // the bias (N) and the DGELU's pre-activation (M,N): BF16, of the outputs' magnitude
    HostMatrix bias = host_matrix(CUDA_R_16BF, p.N), pre = host_matrix(CUDA_R_16BF, p.M * p.N);
    for (int i = 0; i < p.N; i++) {
        uint16_t b = bf16_from_float((float)(8.0 * bias.values[i]));
        ((uint16_t *)bias.bits)[i] = b, bias.values[i] = bf16_to_float(b);
    }

    void *dA = to_device(A.bits, (size_t)A.elements * type_bytes(p.a_type)),
         *dB = to_device(B.bits, (size_t)B.elements * type_bytes(p.b_type)), *dD = to_device(d_init, d_bytes);
    void *d_bias = to_device(bias.bits, (size_t)p.N * 2), *d_pre = to_device(pre.bits, d_elements * 2);
    void *d_aux = to_device(pre.bits, d_elements * 2), *d_bias_grad = to_device(d_init, (size_t)p.M * 4);
    const void *a_scale = fa.host                   ? to_device(fa.host, fa.bytes)
                          : p.a_type == CUDA_R_16BF ? NULL
                                                    : to_device(&descale_a, sizeof descale_a);
    const void *b_scale = fb.host                   ? to_device(fb.host, fb.bytes)
                          : p.b_type == CUDA_R_16BF ? NULL
                                                    : to_device(&descale_b, sizeof descale_b);
    void *workspace;
    cuda_check(cudaMalloc(&workspace, GEMM_WORKSPACE_BYTES));
    cudaStream_t stream;
    cuda_check(cudaStreamCreate(&stream));
    GemmContext ctx;
    gemm_init(&ctx, workspace, GEMM_WORKSPACE_BYTES);
    const GemmOperand a = {dA, p.a_type, a_scale, p.a_mode}, b = {dB, p.b_type, b_scale, p.b_mode};
    const GemmEpilogue e = c.epilogue == GEMM_BIAS ? gemm_bias((const bf16 *)d_bias)
                           : c.epilogue == GEMM_GELU_BIAS
                               ? gemm_gelu_bias((const bf16 *)d_bias, (bf16 *)d_aux)
                           : c.epilogue == GEMM_DGELU     ? gemm_dgelu((const bf16 *)d_pre)
                           : c.epilogue == GEMM_BIAS_GRAD ? gemm_bias_grad((float *)d_bias_grad)
                                                          : gemm_bias(NULL);
    const GemmCall call = {.D = dD,
                           .d_type = p.d_type,
                           .A = a,
                           .trans_a = p.trans_a,
                           .B = b,
                           .trans_b = p.trans_b,
                           .M = p.M,
                           .N = p.N,
                           .K = p.K,
                           .epilogue = e,
                           .accumulate = p.accumulate,
                           .fast_accum = c.fast_accum};
    int ran = 1;
    if (is_fused_epilogue(c.epilogue))
        ran = gemm_fused(&ctx, call, stream);
    else
        gemm(&ctx, call, stream);
    cuda_check(cudaStreamSynchronize(stream));
    cuda_check(cudaGetLastError());
    if (!ran) {
        printf("SKIP cuBLASLt has no algorithm fusing the %s (the trainer runs its separate kernels)\n",
               gemm_epilogue_name(c.epilogue));
        return 0;
    }
    cuda_check(cudaMemcpy(d_out, dD, d_bytes, cudaMemcpyDeviceToHost));
    uint16_t *aux_out = (uint16_t *)malloc_check(d_elements * 2, "first contact");
    float *bias_grad_out = (float *)malloc_check((size_t)p.M * 4, "first contact");
    cuda_check(cudaMemcpy(aux_out, d_aux, d_elements * 2, cudaMemcpyDeviceToHost));
    cuda_check(cudaMemcpy(bias_grad_out, d_bias_grad, (size_t)p.M * 4, cudaMemcpyDeviceToHost));

    const int fp8 = c.precision != BF16;
    // FP8 on a device with Hopper's 13-bit MMA accumulator (cli.h's model of each device) gets its allowance
    const int hopper_sums = fp8 && fp8_accumulation_of_device(props.major) == FP8_ACCUMULATION_HOPPER;
    const double u_d = p.d_type == CUDA_R_32F ? U32 : U_BF16;
    double worst = 0.0; // the largest |error| / bound
    size_t worst_at = 0, failures = 0;
    const char *worst_what = "D";
    auto check = [&](double got, double ref, double bound, size_t at, const char *what) {
        double ratio = fabs(got - ref) / bound;
        if (!(ratio <= 1.0)) failures++;
        if (!(ratio <= worst)) worst = ratio, worst_at = at, worst_what = what;
    };
    // the GELU's form, for the record: the form whose values are within the bound without the allowance
    size_t beyond_tanh = 0, beyond_erf = 0;
    std::vector<double> column_sums(p.M, 0.0), column_abs(p.M, 0.0);
    for (int m = 0; m < p.M; m++)
        for (int n = 0; n < p.N; n++) {
            double sum = 0.0, S = 0.0;
            for (int k = 0; k < p.K; k++) {
                double av = A.values[p.trans_a ? (size_t)k * p.M + m : (size_t)m * p.K + k];
                double bv = B.values[p.trans_b ? (size_t)n * p.K + k : (size_t)k * p.N + n];
                double f = 1.0;
                if (fa.host)
                    f *= factor_at(fa, m, k) * factor_at(fb, n, k);
                else if (fp8)
                    f = (double)descale_a * descale_b;
                sum += av * bv * f, S += fabs(av * bv * f);
                if (n == 0) column_sums[m] += av, column_abs[m] += fabs(av);
            }
            double acc = (p.K + 2) * U32 * S + (hopper_sums ? (p.K / 32 + 1) * 0x1p-13 * S : 0.0);
            const size_t i = (size_t)m * p.N + n;
            if (c.epilogue == GEMM_BIAS || c.epilogue == GEMM_GELU_BIAS)
                sum += bias.values[n], acc += U32 * fabs(sum);
            if (p.accumulate) sum += read_value(d_init, p.d_type, i), acc += U32 * fabs(sum);
            double ref = sum, bound = acc;
            const double got = read_value(d_out, p.d_type, i);
            if (c.epilogue == GEMM_GELU_BIAS || c.epilogue == GEMM_DGELU) {
                const int gelu = c.epilogue == GEMM_GELU_BIAS;
                const double x = gelu ? sum : pre.values[i];
                const double slope = gelu ? GELU_SLOPE_MAX : fabs(gelu_tanh_slope(x)) + DGELU_FORM_DIFFERENCE;
                const double tanh_form = gelu ? gelu_tanh(x) : sum * gelu_tanh_slope(x),
                             erf_form = gelu ? gelu_erf(x) : sum * gelu_erf_slope(x);
                // the device evaluates either form in FP32: a few units of 2^-24 of the terms, |x| or |v| at
                // most
                const double tight = slope * acc + u_d * (fabs(tanh_form) + slope * acc) +
                                     0x1p-20 * fabs(gelu ? x : sum) + 1e-30;
                beyond_tanh += !(fabs(got - tanh_form) <= tight);
                beyond_erf += !(fabs(got - erf_form) <= tight);
                if (gelu)
                    check(bf16_to_float(aux_out[i]), sum, acc + U_BF16 * (fabs(sum) + acc) + 1e-30, i, "aux");
                ref = tanh_form;
                bound = slope * acc + (gelu ? GELU_FORM_DIFFERENCE : fabs(sum) * DGELU_FORM_DIFFERENCE);
            }
            check(got, ref, bound + u_d * (fabs(ref) + bound) + 1e-30, i, "D");
        }
    if (c.epilogue == GEMM_BIAS_GRAD)
        for (int m = 0; m < p.M; m++)
            check(bias_grad_out[m], column_sums[m], (p.K + 1) * U32 * column_abs[m] + 1e-30, m,
                  "bias gradient");
    if (failures) {
        printf(
            "FAIL %zu of %zu values beyond their bound, the worst %s[%zu] %.2fx its bound (M=%d N=%d K=%d)\n",
            failures, d_elements, worst_what, worst_at, worst, p.M, p.N, p.K);
        return 1;
    }
    const char *form = beyond_tanh == 0 ? "the tanh form" : beyond_erf == 0 ? "the erf form" : "neither form";
    if (c.epilogue == GEMM_GELU_BIAS || c.epilogue == GEMM_DGELU)
        printf("PASS M=%d N=%d K=%d, worst error %.3f of its bound (%s); cuBLASLt's GELU: %s (%zu and %zu "
               "values "
               "beyond the tight bound of the tanh and the erf form)\n",
               p.M, p.N, p.K, worst, worst_what, form, beyond_tanh, beyond_erf);
    else
        printf("PASS M=%d N=%d K=%d, worst error %.3f of its bound (%s)\n", p.M, p.N, p.K, worst, worst_what);
    return 0;
}

// cuDNN's fused attention: its forward and deterministic backward plans built on this device at the shapes of
// test_gpu.sh (GPT-2: B 8, T 64, 4 heads of 32; Llama: 4 query heads over 2 key/value heads), in the memory
// plan's workspace.
int run_cudnn_check(int KVH) {
#ifdef USE_CUDNN
    const int B = 8, T = 64, C = 128, NH = 4;
    size_t bytes = attention_workspace_bytes(B, T, NH);
    void *workspace;
    cuda_check(cudaMalloc(&workspace, bytes));
    char why[192];
    AttentionGraphs *graphs = cudnn_attention_create(B, T, C, NH, KVH, workspace, bytes, why, sizeof why);
    if (!graphs) return printf("FAIL cuDNN %s: %s\n", cudnn_attention_version(), why), 1;
    printf("PASS cuDNN %s: B %d T %d, %d heads over %d, plans in %zu of %zu workspace bytes\n",
           cudnn_attention_version(), B, T, NH, KVH, cudnn_attention_workspace_bytes(graphs), bytes);
    cudnn_attention_destroy(graphs);
    return 0;
#else
    (void)KVH;
    printf("SKIP built without cuDNN (the exact attention only)\n");
    return 0;
#endif
}

// An NCCL communicator of one rank, and a sum over it that must leave the data as it was.
int run_nccl_check() {
    int version = 0;
    ncclUniqueId id;
    ncclComm_t comm;
    ncclResult_t r = ncclGetVersion(&version);
    if (r == ncclSuccess) r = ncclGetUniqueId(&id);
    if (r == ncclSuccess) r = ncclCommInitRank(&comm, 1, id, 0);
    if (r != ncclSuccess) return printf("FAIL NCCL %d: %s\n", version, ncclGetErrorString(r)), 1;
    float host[4] = {1.5f, -2.0f, 3.25f, 0.0f}, back[4];
    float *d = (float *)to_device(host, sizeof host);
    cudaStream_t stream;
    cuda_check(cudaStreamCreate(&stream));
    r = ncclAllReduce(d, d, 4, ncclFloat32, ncclSum, comm, stream);
    cuda_check(cudaStreamSynchronize(stream));
    cuda_check(cudaMemcpy(back, d, sizeof back, cudaMemcpyDeviceToHost));
    ncclCommDestroy(comm);
    if (r != ncclSuccess)
        return printf("FAIL NCCL %d: ncclAllReduce: %s\n", version, ncclGetErrorString(r)), 1;
    if (memcmp(host, back, sizeof host) != 0)
        return printf("FAIL NCCL %d: a one-rank sum changed the data\n", version), 1;
    printf("PASS NCCL %d.%d.%d: one rank, an all-reduce\n", version / 10000, version / 100 % 100,
           version % 100);
    return 0;
}

} // namespace

int main(int argc, char **argv) {
    if (argc != 2) fail("usage: first_contact --list | NAME");
    if (strcmp(argv[1], "--list") == 0) {
        for (int i = 0; i < NUM_GEMM_CHECKS; i++) printf("%s\n", GEMM_CHECKS[i].name);
        printf("cudnn_plans_gpt2\ncudnn_plans_llama\nnccl_one_rank\n");
        return 0;
    }
    cudaDeviceProp props;
    cuda_check(cudaGetDeviceProperties(&props, 0));
    for (int i = 0; i < NUM_GEMM_CHECKS; i++)
        if (strcmp(argv[1], GEMM_CHECKS[i].name) == 0) return run_gemm_check(GEMM_CHECKS[i], props);
    if (strcmp(argv[1], "cudnn_plans_gpt2") == 0) return run_cudnn_check(4);
    if (strcmp(argv[1], "cudnn_plans_llama") == 0) return run_cudnn_check(2);
    if (strcmp(argv[1], "nccl_one_rank") == 0) return run_nccl_check();
    fail("first_contact: no check named %s (--list names them)", argv[1]);
}

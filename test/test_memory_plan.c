// test_memory_plan.c: the CUDA trainer's buffer plan (memory_plan.h), checked on the CPU: every buffer
// starts aligned for cuBLASLt, none overlaps another, the sizes follow from the shapes, and float8 keeps
// its GEMM inputs as 1-byte transposes where bfloat16 keeps 2-byte copies. Also the FP8 shape rules.
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../memory_plan.h"
#include "test_util.h"

static GPTConfig preset_config(const char *name, int vocab) {
    const ModelPreset *p = find_model_preset(name);
    GPTConfig cfg = {p->max_seq_len, vocab, pad_vocab(vocab), p->num_layers, p->num_heads, p->channels};
    return cfg;
}

static void check_layout(const MemoryPlan *plan, const char *what) {
    char label[128];
    int aligned = 1, ordered = 1;
    size_t sum = 0;
    for (int i = 0; i < NUM_BUFFERS; i++) {
        aligned &= plan->offset[i] % PLAN_ALIGN == 0;
        if (i + 1 < NUM_BUFFERS) ordered &= plan->offset[i] + plan->bytes[i] <= plan->offset[i + 1];
        sum += plan->bytes[i];
    }
    snprintf(label, sizeof(label), "%s: every buffer 256-byte aligned", what);
    check(aligned, label);
    snprintf(label, sizeof(label), "%s: buffers do not overlap", what);
    check(ordered && plan->offset[NUM_BUFFERS - 1] + plan->bytes[NUM_BUFFERS - 1] <= plan->total, label);
    snprintf(label, sizeof(label), "%s: padding below 256 bytes a buffer", what);
    check(plan->total >= sum && plan->total - sum < (size_t)NUM_BUFFERS * PLAN_ALIGN, label);
}

// Runs check_fp8_shapes in a child; returns its exit status (0: accepted).
static int fp8_shapes_status(const GPTConfig *cfg, int B, int T) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        freopen("/dev/null", "w", stderr);
        check_fp8_shapes(cfg, B, T);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int main(void) {
    GPTConfig small = preset_config("d2", 256), gpt124 = preset_config("124M", 50257);
    MemoryPlan bf, f8;
    int B = 4, T = 64;
    memory_plan_compute(&bf, &small, &(PlanSettings){DTYPE_BFLOAT16, B, T, 16, 1, 0, 0});
    memory_plan_compute(&f8, &small, &(PlanSettings){DTYPE_FLOAT8, B, T, 16, 1, 0, 0});
    check_layout(&bf, "d2 bfloat16");
    check_layout(&f8, "d2 float8");
    size_t P = param_count(&small), L = small.num_layers, C = small.channels, N = (size_t)B * T;
    check(bf.bytes[BUF_PARAMS] == 4 * P && bf.bytes[BUF_PARAMS_BF16] == 2 * P,
          "parameter copies: 4P and 2P bytes");
    check(bf.bytes[BUF_WEIGHTS_FP8] == 0 && bf.bytes[BUF_INPUT_FP8_T] == 0,
          "bfloat16 allocates no FP8 buffer");
    check(f8.bytes[BUF_WEIGHTS_FP8] == L * 12 * C * C && f8.bytes[BUF_WEIGHTS_FP8_T] == L * 12 * C * C,
          "FP8 weights and transposes: one byte per linear weight (12 C^2 per layer)");
    check(f8.bytes[BUF_INPUT_FP8_T] == L * N * 7 * C, "FP8 saved inputs: 7C bytes per token and layer");
    check(bf.bytes[BUF_LN1] + bf.bytes[BUF_ATTY] + bf.bytes[BUF_LN2] + bf.bytes[BUF_FCH_GELU] ==
              L * N * 7 * C * 2,
          "bfloat16 saved GEMM inputs: 14C bytes per token and layer");
    check(f8.bytes[BUF_LN1] == N * C * 2 && f8.bytes[BUF_FCH_GELU] == N * 4 * C * 2,
          "float8 keeps one layer of BF16 GEMM inputs as scratch");
    check(f8.bytes[BUF_FP8_STATE] == 4 * fp8_state_floats(&small, 16) &&
              fp8_state_floats(&small, 16) == L * 8 * (16 + 5) + L * 4 * 3 + (L * 12) * 4,
          "FP8 scaling state: history + 5 floats per tensor, 3 per weight, two 64-bit counters for each");
    // At 124M and a realistic batch, float8 must need less memory than bfloat16 for the activations.
    MemoryPlan bf124, f8124;
    memory_plan_compute(&bf124, &gpt124, &(PlanSettings){DTYPE_BFLOAT16, 16, 1024, 16, 1, 0, 0});
    memory_plan_compute(&f8124, &gpt124, &(PlanSettings){DTYPE_FLOAT8, 16, 1024, 16, 1, 0, 0});
    check_layout(&f8124, "124M float8");
    check(f8124.total < bf124.total, "124M B=16 T=1024: float8 plans less memory than bfloat16");
    check(param_count(&gpt124) * 4 == bf124.bytes[BUF_PARAMS], "124M parameters");
    // FP8 GEMMs need multiples of 16
    check(fp8_shapes_status(&small, B, T) == 0, "d2 with B*T = 256 is accepted");
    GPTConfig odd = small;
    odd.channels = 72;
    odd.num_heads = 2;
    check(fp8_shapes_status(&odd, B, T) == 1, "C = 72 is refused");
    check(fp8_shapes_status(&small, 3, 5) == 1, "B*T = 15 is refused");
    return test_summary();
}

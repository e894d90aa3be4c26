// core/debug_state.h: the file through which the CPU reference checks the CUDA trainer. Either trainer, run
// with --debug_state PATH, writes its run's first step's inputs, targets, logits, loss and accumulated
// gradients, and the loss of every step it ran; test/compare_debug_state reads two (or three) of them. A
// resumed run's first step is the one after its checkpoint, so that both trainers can be checked on a step
// from the same weights, optimizer and FP8 scaling state (test/test_gpu.sh's steps after the first).
//   header: 256 int32 [0]=20261201 [1]=1 [2]=B [3]=T [4]=Vp [5]=steps run [6]=dtype [7]=L [8]=C [9]=V
//   [10]=NH [11]=maxT [12]=arch [13]=KVH [14]=F [15]=rope theta (float bits) [16]=scaled rope (12-16: zero
//   for GPT-2) [17]=the steps before the run's first (0 for a fresh run)
//   then inputs (B*T int32), targets (B*T int32), logits (B*T*Vp float), loss (float),
//   gradients (param_count float, in the trainers' parameter layout), step losses (steps float)
#ifndef DEBUG_STATE_H
#define DEBUG_STATE_H

#include "atomic_file.h"
#include "common.h"
#include "gpt_model.h"

#define DEBUG_STATE_MAGIC 20261201

typedef struct {
    int B, T, dtype, steps, first_step; // the steps this run made, after first_step steps of an earlier one
    GPTConfig config;
    int *inputs, *targets; // (B,T)
    float *logits;         // (B,T,Vp)
    float loss;
    float *grads;       // (P)
    float *step_losses; // (steps)
} DebugState;

static inline void debug_state_alloc(DebugState *d, const GPTConfig *cfg, int B, int T, int dtype,
                                     int first_step, int steps) {
    size_t N = (size_t)B * T;
    d->B = B, d->T = T, d->dtype = dtype, d->first_step = first_step, d->steps = steps, d->config = *cfg;
    d->inputs = (int *)malloc_check(N * sizeof(int), "debug state");
    d->targets = (int *)malloc_check(N * sizeof(int), "debug state");
    d->logits = (float *)malloc_check(N * cfg->padded_vocab_size * sizeof(float), "debug state");
    d->grads = (float *)malloc_check(param_count(cfg) * sizeof(float), "debug state");
    d->step_losses = (float *)calloc_check((size_t)steps, sizeof(float), "debug state");
    d->loss = 0.0f;
}

static inline void debug_state_free(DebugState *d) {
    free(d->inputs);
    free(d->targets);
    free(d->logits);
    free(d->grads);
    free(d->step_losses);
}

static inline void debug_state_write(const char *path, const DebugState *d) {
    char tmp[CHECKPOINT_PATH_LEN];
    FILE *f = atomic_open(path, tmp, sizeof(tmp));
    const GPTConfig *cfg = &d->config;
    int header[256] = {0};
    header[0] = DEBUG_STATE_MAGIC;
    header[1] = 1;
    header[2] = d->B;
    header[3] = d->T;
    header[4] = cfg->padded_vocab_size;
    header[5] = d->steps;
    header[6] = d->dtype;
    header[7] = cfg->num_layers;
    header[8] = cfg->channels;
    header[9] = cfg->vocab_size;
    header[10] = cfg->num_heads;
    header[11] = cfg->max_seq_len;
    header[12] = cfg->arch;
    header[13] = cfg->num_kv_heads;
    header[14] = cfg->ffn_dim;
    memcpy(&header[15], &cfg->rope_theta, sizeof(float));
    header[16] = cfg->scaled_rope;
    header[17] = d->first_step;
    size_t N = (size_t)d->B * d->T;
    fwrite_check(header, sizeof(int), 256, f, tmp);
    fwrite_check(d->inputs, sizeof(int), N, f, tmp);
    fwrite_check(d->targets, sizeof(int), N, f, tmp);
    fwrite_check(d->logits, sizeof(float), N * cfg->padded_vocab_size, f, tmp);
    fwrite_check(&d->loss, sizeof(float), 1, f, tmp);
    fwrite_check(d->grads, sizeof(float), param_count(cfg), f, tmp);
    fwrite_check(d->step_losses, sizeof(float), (size_t)d->steps, f, tmp);
    atomic_commit(f, tmp, path);
}

static inline void debug_state_read(const char *path, DebugState *d) {
    FILE *f = fopen_regular(path);
    int64_t size = file_size_check(f, path);
    int header[256];
    if (size < (int64_t)sizeof(header)) fail("%s: too short for a debug state", path);
    fread_check(header, sizeof(int), 256, f, path);
    if (header[0] != DEBUG_STATE_MAGIC || header[1] != 1)
        fail("%s: not a debug state file (magic/version)", path);
    GPTConfig cfg = {header[11], header[9],  header[4],  header[7], header[10], header[8],
                     header[12], header[13], header[14], 0.0f,      header[16]};
    memcpy(&cfg.rope_theta, &header[15], sizeof(float));
    if (cfg.num_layers <= 0 || cfg.channels <= 0 || cfg.num_heads <= 0 || cfg.arch < 0 ||
        cfg.arch >= NUM_ARCHS || cfg.scaled_rope < 0 || cfg.scaled_rope > 1 ||
        (arch_parts(cfg.arch).grouped_kv &&
         (cfg.num_kv_heads <= 0 || cfg.num_heads % cfg.num_kv_heads || cfg.ffn_dim <= 0)) ||
        cfg.padded_vocab_size < cfg.vocab_size || header[2] <= 0 || header[3] <= 0 || header[5] <= 0 ||
        header[17] < 0)
        fail("%s: debug state header is corrupt", path);
    debug_state_alloc(d, &cfg, header[2], header[3], header[6], header[17], header[5]);
    size_t N = (size_t)d->B * d->T;
    int64_t expected = (int64_t)sizeof(header) + 8 * (int64_t)N +
                       4 * (int64_t)(N * cfg.padded_vocab_size + 1) + 4 * (int64_t)param_count(&cfg) +
                       4 * (int64_t)d->steps;
    if (size != expected)
        fail("%s: size %ld does not match its header (%ld)", path, (long)size, (long)expected);
    fread_check(d->inputs, sizeof(int), N, f, path);
    fread_check(d->targets, sizeof(int), N, f, path);
    fread_check(d->logits, sizeof(float), N * cfg.padded_vocab_size, f, path);
    fread_check(&d->loss, sizeof(float), 1, f, path);
    fread_check(d->grads, sizeof(float), param_count(&cfg), f, path);
    fread_check(d->step_losses, sizeof(float), (size_t)d->steps, f, path);
    fclose(f);
}

#endif // DEBUG_STATE_H

// test/fuzz/fuzz_state.c: the training-state reader (state_reshard.h's load_training_state) on arbitrary
// files, as rank 0 of one process resuming a float8 model L=1 C=16 NH=2 V=256 maxT=16 (B=2, T=16) at step 2:
// the shape the seed corpus (test/test_fuzz.sh) was written with. The run identity is taken from the input's
// own header, so that the fuzzer reaches past those equality checks to the counters and values.
#include <sys/stat.h>

#include "fuzz.h"

#include "../../core/atomic_file.h"
#include "../../core/state_reshard.h"
#include "../../core/train_state.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char dir[64];
    if (!*dir) {
        snprintf(dir, sizeof(dir), "/tmp/fuzz_state_%d", (int)getpid());
        mkdir(dir, 0755);
    }
    char path[CHECKPOINT_PATH_LEN];
    state_file_path(dir, 2, 0, path, sizeof(path));
    FILE *f = fopen_check(path, "wb");
    fwrite_check(data, 1, size, f, path);
    fclose(f);
    GPTConfig cfg = {16, 256, 256, 1, 2, 16, ARCH_GPT2, 0, 0, 0.0f, 0};
    TrainOptions opts;
    options_defaults(&opts);
    opts.dtype = DTYPE_FLOAT8;
    TrainState st;
    memset(&st, 0, sizeof(st));
    st.world_size = 1;
    st.dtype = DTYPE_FLOAT8;
    st.amax_history_len = opts.amax_history;
    st.batch_size = 2;
    st.seq_len = 16;
    st.seed = opts.seed;
    if (size >= STATE_FILE_HEADER_INTS * sizeof(int64_t)) { // the identity the input claims
        int64_t h[STATE_FILE_HEADER_INTS];
        memcpy(h, data, sizeof(h));
        RunIdentity *id = &st.identity;
        float *floats[RUN_IDENTITY_FLOATS] = {&id->lr,        &id->final_lr_frac, &id->beta1,
                                              &id->beta2,     &id->eps,           &id->weight_decay,
                                              &id->grad_clip, &id->skip_loss_z,   &id->skip_norm_z};
        for (int i = 0; i < RUN_IDENTITY_FLOATS; i++) *floats[i] = bits_float(h[SH_LR + i]);
        id->lr_schedule = (int)h[SH_LR_SCHEDULE];
        id->warmup_steps = (int)h[SH_WARMUP_STEPS];
        id->fp8_margin = (int)h[SH_FP8_MARGIN];
        id->fp8_pow2_scales = (int)h[SH_FP8_POW2_SCALES];
        id->tokens_per_step = h[SH_TOKENS_PER_STEP];
        id->data_fingerprint = (uint64_t)h[SH_DATA_FINGERPRINT];
    }
    size_t P = param_count(&cfg), H = (size_t)cfg.num_layers * NUM_BLOCK_LINEARS * 2 * opts.amax_history,
           G = 2 * (size_t)opts.guard_window;
    float *m = (float *)malloc_check(P * sizeof(float), "fuzz m"),
          *v = (float *)malloc_check(P * sizeof(float), "fuzz v");
    float *hist = (float *)malloc_check(H * sizeof(float), "fuzz history"),
          *guard = (float *)malloc_check(G * sizeof(float), "fuzz guard");
    StateBlock blocks[NUM_STATE_BLOCKS] = {{m, P}, {v, P}, {hist, H}, {guard, G}};
    if (!FUZZ_REFUSED()) load_training_state(dir, 2, &st, &cfg, blocks);
    free(m);
    free(v);
    free(hist);
    free(guard);
    fuzz_release_held();
    return 0;
}

// test/fuzz/fuzz_model.c: the model file reader (model_file.h) on arbitrary files: the whole model, then a
// range of it as a ZeRO rank reads its shard, against the shape the header claims.
#include "fuzz.h"

#include "../../core/model_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file(data, size);
    if (!FUZZ_REFUSED()) {
        GPTConfig cfg;
        float *params = load_model_file(path, &cfg);
        size_t count = param_count(&cfg), begin = count / 3, n = count - begin < 1000 ? count - begin : 1000;
        float *range = (float *)malloc_check(n * sizeof(float), "fuzz range");
        load_model_range(path, &cfg, begin, n, range);
        free(range);
        free(params);
    }
    fuzz_release_held();
    return 0;
}

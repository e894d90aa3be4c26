// test/fuzz/fuzz_eval.c: the eval file reader (eval_data.h) on arbitrary files: init for V=128, B=3, T=32 as
// the second of two ranks, every batch filled and scored (losses of zero), the count, free.
#include "fuzz.h"

#include "../../core/eval_data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file(data, size);
    if (!FUZZ_REFUSED()) {
        EvalSet set;
        static float losses[3 * 32];
        eval_set_init(&set, path, 3, 32, 128, 1, 2);
        for (int batch = 0; batch < set.num_batches; batch++) {
            eval_set_batch(&set, batch);
            eval_set_take_losses(&set, batch, losses);
        }
        (void)eval_set_correct(&set);
        eval_set_free(&set);
    }
    fuzz_release_held();
    return 0;
}

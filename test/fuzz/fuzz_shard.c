// test/fuzz/fuzz_shard.c: the token shard reader (dataloader.h) on arbitrary files: init with shuffling
// (B=2, T=8, two ranks' view), a few batches across the shard, the data fingerprint, free.
#include "fuzz.h"

#include "../../core/dataloader.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file(data, size);
    if (!FUZZ_REFUSED()) {
        DataLoader loader;
        dataloader_init(&loader, path, 2, 8, 1, 2, 1, 7, 256);
        for (int i = 0; i < 5; i++) dataloader_next_batch(&loader);
        (void)dataloader_fingerprint(&loader);
        dataloader_free(&loader);
    }
    fuzz_release_held();
    return 0;
}

// test/fuzz/fuzz_tokenizer.c: the tokenizer reader (tokenizer.h) on arbitrary files: load, decode every
// token id and one past the vocabulary, free.
#include "fuzz.h"

#include "../../core/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file(data, size);
    if (!FUZZ_REFUSED()) {
        Tokenizer t;
        tokenizer_init(&t, path);
        size_t bytes = 0;
        for (uint32_t id = 0; id <= t.vocab_size; id++) {
            const char *s = tokenizer_decode(&t, id);
            if (s) bytes += t.token_lengths[id];
        }
        (void)bytes;
        tokenizer_free(&t);
    }
    fuzz_release_held();
    return 0;
}

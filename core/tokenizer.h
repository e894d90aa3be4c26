// core/tokenizer.h: reads an llm.c tokenizer file and turns token ids back into their bytes.
//
// Format: 256 little-endian uint32 header [0]=20240328 [1]=2 [2]=V [3]=eot_token, then for each of the V
// tokens a uint8 length (>= 1) and that many bytes. Version 1 files (no eot in the header) are accepted
// for the GPT-2 vocabulary (V=50257, eot 50256), as llm.c accepts them.
//
// Plain C11, also compiles as C++ (nvcc).
#ifndef TOKENIZER_H
#define TOKENIZER_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

#define TOKENIZER_MAGIC 20240328
#define TOKENIZER_HEADER_BYTES 1024

typedef struct {
    uint32_t vocab_size;
    uint32_t eot_token;
    char **token_bytes;     // token_bytes[id]: the token's bytes, NUL-terminated; all live in one block
                            // that starts at token_bytes[0]
    uint8_t *token_lengths; // byte length of each token (a token may contain a 0 byte)
    int loaded;
} Tokenizer;

static inline uint32_t tokenizer_le_u32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static inline void tokenizer_init(Tokenizer *t, const char *path) {
    memset(t, 0, sizeof(*t));
    FILE *f = fopen_regular(path);
    int64_t size = file_size_check(f, path);
    if (size < TOKENIZER_HEADER_BYTES)
        fail("%s: truncated header: file has %lld bytes, a tokenizer header has %d", path, (long long)size,
             TOKENIZER_HEADER_BYTES);
    uint8_t header[TOKENIZER_HEADER_BYTES];
    fread_check(header, 1, sizeof(header), f, path);
    uint32_t magic = tokenizer_le_u32(header);
    uint32_t version = tokenizer_le_u32(header + 4);
    uint32_t V = tokenizer_le_u32(header + 8);
    if (magic != TOKENIZER_MAGIC)
        fail("%s: bad magic %u, expected %d (not an llm.c tokenizer file)", path, magic, TOKENIZER_MAGIC);
    uint32_t eot;
    if (version == 2) {
        eot = tokenizer_le_u32(header + 12);
    } else if (version == 1 && V == 50257) {
        eot = 50256;
    } else {
        fail("%s: unsupported tokenizer version %u, expected 2", path, version);
    }
    if (V < 1) fail("%s: vocabulary size is 0", path);
    // every token needs at least 2 bytes (length + one byte): a cheap bound before allocating
    if ((int64_t)V * 2 > size - TOKENIZER_HEADER_BYTES)
        fail("%s: file is truncated: %lld bytes cannot hold %u tokens", path, (long long)size, V);
    if (eot >= V) fail("%s: eot token %u is not below the vocabulary size %u", path, eot, V);

    // each token takes 1 + len bytes of the file and len + 1 (with its NUL) of the block
    size_t blob_bytes = (size_t)(size - TOKENIZER_HEADER_BYTES);
    char *blob = (char *)malloc_check(blob_bytes, "tokenizer: token bytes");
    t->token_bytes = (char **)malloc_check((size_t)V * sizeof(char *), "tokenizer: token table");
    t->token_lengths = (uint8_t *)malloc_check(V, "tokenizer: token lengths");
    size_t used = 0;
    for (uint32_t i = 0; i < V; i++) {
        uint8_t len;
        fread_check(&len, 1, 1, f, path);
        if (len == 0) fail("%s: token %u has length 0", path, i);
        if (used + len + 1 > blob_bytes) fail("%s: file is truncated (short read)", path);
        fread_check(blob + used, 1, len, f, path);
        blob[used + len] = '\0';
        t->token_bytes[i] = blob + used;
        t->token_lengths[i] = len;
        used += (size_t)len + 1;
    }
    if (fgetc(f) != EOF) fail("%s: unexpected bytes after the last of %u tokens", path, V);
    fclose(f);
    t->vocab_size = V;
    t->eot_token = eot;
    t->loaded = 1;
}

// The bytes of token_id, NUL-terminated (exact length in token_lengths[token_id]; bytes are returned as they
// are, printable or not). NULL when the tokenizer is not loaded or token_id is not below vocab_size.
static inline const char *tokenizer_decode(const Tokenizer *t, uint32_t token_id) {
    if (!t->loaded || token_id >= t->vocab_size) return NULL;
    return t->token_bytes[token_id];
}

static inline void tokenizer_free(Tokenizer *t) {
    if (t->loaded) free(t->token_bytes[0]);
    free(t->token_bytes);
    free(t->token_lengths);
    memset(t, 0, sizeof(*t));
}

#endif // TOKENIZER_H

// core/dataloader.h: reads llm.c token shards (glob of files), hands out (B,T) batches of inputs and targets.
//
// Shard formats, llm.c's two, told apart by the magic: 256 little-endian int32 header [0]=magic
// [1]=version [2]=ntokens, then ntokens little-endian tokens; the file size is exactly 1024 + width*ntokens.
//   GPT-2:   magic 20240520, version 1, uint16 tokens (width 2)
//   Llama 3: magic 20240801, version 7, uint32 tokens (width 4), for vocabularies over 65536
// The token width is the only difference: one code path reads both. Every shard is validated at init, and
// the shards of one pattern must share a format: a mix would be two tokenizers' tokens in one stream.
//
// Batching, as llm.c does it: a shard of N tokens holds nb = (N-1) / (world_size*B*T) global batches.
// Global batch j, for rank r, reads the B*T+1 tokens starting at token (j*world_size + r)*B*T; inputs are
// the first B*T, targets the same shifted by one. So rank r of W reads exactly rows r*B..(r+1)*B-1 of
// the batch one process with batch W*B reads: W processes with batch B see one process's batch W*B.
//
// Order: shards in name order, batches j = 0..nb-1 within a shard; after the last shard the epoch
// counter grows and reading starts again from the first. With shuffle=1 the order of the shards in each
// epoch and the order of the batches in each shard are permutations drawn from a splitmix64 stream
// seeded only from (seed, epoch, shard): every rank draws the same order, and a position (epoch, index
// of the shard in the epoch's order, index of the batch in the shard's order) names one batch for ever,
// which is what makes dataloader_set_position + dataloader_next_batch reproduce a run exactly.
//
// I/O: one FILE* for the shard being read; each batch is one fseek + one fread of B*T+1 tokens. All
// buffers are allocated at init: dataloader_next_batch allocates nothing (it only reopens a FILE* when
// it crosses into another shard).
//
// Plain C11, also compiles as C++ (nvcc). Needs POSIX.1-2008 (glob, fileno, st_mtim): build with
// -D_GNU_SOURCE, as the Makefile does.
#ifndef DATALOADER_H
#define DATALOADER_H

#include <errno.h>
#include <glob.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common.h"

#define DATALOADER_MAGIC 20240520 // GPT-2 shards, uint16 tokens
#define DATALOADER_VERSION 1
#define DATALOADER_LLAMA3_MAGIC 20240801 // Llama 3 shards, uint32 tokens
#define DATALOADER_LLAMA3_VERSION 7
#define DATALOADER_HEADER_BYTES 1024

typedef struct {
    int32_t magic, version;
    int token_bytes; // width of one token in the file
    const char *name;
} DataLoaderShardFormat;

typedef struct {
    int64_t epoch;       // full passes over all shards completed
    int64_t shard_index; // index, in this epoch's shard order, of the shard being read
    int64_t batch_index; // next batch (global, across ranks), as an index in this shard's batch order
} DataLoaderPosition;

typedef struct {
    // set by dataloader_init
    int B, T, rank, world_size, shuffle, vocab_size;
    uint64_t seed;
    int num_shards;
    const DataLoaderShardFormat *format; // of every shard
    char **shard_paths;                  // sorted by name
    int64_t *shard_tokens;               // ntokens of each shard
    int64_t *shard_batches;              // global batches of each shard: (ntokens-1) / (world_size*B*T)
    struct stat *shard_stats;            // each shard as init found it: a shard changed since is refused
    uint64_t *shard_digests;             // each shard's content, once dataloader_fingerprint has read it
    int64_t batches_per_epoch;
    DataLoaderPosition pos; // the batch the next dataloader_next_batch call loads
    int *inputs;            // (B,T) token ids of the current batch
    int *targets;           // (B,T) next tokens
    // the batch last loaded: shard (index into shard_paths) and global batch j within it; -1 before any
    int current_shard;
    int64_t current_batch;
    // private
    FILE *file;           // open shard, or NULL
    int file_shard;       // index into shard_paths of the open shard, -1 when none
    uint8_t *read_buf;    // format->token_bytes*(B*T+1) bytes: the raw tokens of one batch
    int *shard_order;     // shuffle: this epoch's shard order
    int64_t order_epoch;  // epoch shard_order was drawn for, -1 when none
    int32_t *batch_order; // shuffle: the batch order of one shard (sized for the largest shard)
    int64_t batch_order_epoch;
    int batch_order_shard; // (epoch, shard) batch_order was drawn for; shard -1 when none
} DataLoader;

// ---------------------------------------------------------------------------------------------------
// small seeded PRNG (splitmix64) and the permutations drawn from it

static inline uint64_t dataloader_splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// A generator state that depends on every bit of (seed, epoch, shard, stream) and on nothing else.
static inline uint64_t dataloader_rng_state(uint64_t seed, int64_t epoch, int64_t shard, uint64_t stream) {
    uint64_t s = seed;
    uint64_t h = dataloader_splitmix64(&s);
    s = h ^ (uint64_t)epoch;
    h = dataloader_splitmix64(&s);
    s = h ^ (uint64_t)shard;
    h = dataloader_splitmix64(&s);
    s = h ^ stream;
    return dataloader_splitmix64(&s);
}

// Uniform in [0, n), n >= 1, without modulo bias.
static inline uint64_t dataloader_rng_below(uint64_t *state, uint64_t n) {
    uint64_t reject_below = (0 - n) % n; // 2^64 mod n
    for (;;) {
        uint64_t r = dataloader_splitmix64(state);
        if (r >= reject_below) return r % n;
    }
}

// Makes the shard order of pos.epoch current (shuffle only).
static inline void dataloader_draw_shard_order(DataLoader *loader, int64_t epoch) {
    if (loader->order_epoch == epoch) return;
    uint64_t state = dataloader_rng_state(loader->seed, epoch, -1, 1);
    for (int i = 0; i < loader->num_shards; i++) loader->shard_order[i] = i;
    for (int i = loader->num_shards - 1; i > 0; i--) {
        int k = (int)dataloader_rng_below(&state, (uint64_t)i + 1);
        int tmp = loader->shard_order[i];
        loader->shard_order[i] = loader->shard_order[k];
        loader->shard_order[k] = tmp;
    }
    loader->order_epoch = epoch;
}

// Makes the batch order of shard `shard` (index into shard_paths) in `epoch` current (shuffle only).
static inline void dataloader_draw_batch_order(DataLoader *loader, int64_t epoch, int shard) {
    if (loader->batch_order_epoch == epoch && loader->batch_order_shard == shard) return;
    int32_t nb = (int32_t)loader->shard_batches[shard];
    uint64_t state = dataloader_rng_state(loader->seed, epoch, shard, 2);
    for (int32_t i = 0; i < nb; i++) loader->batch_order[i] = i;
    for (int32_t i = nb - 1; i > 0; i--) {
        int32_t k = (int32_t)dataloader_rng_below(&state, (uint64_t)i + 1);
        int32_t tmp = loader->batch_order[i];
        loader->batch_order[i] = loader->batch_order[k];
        loader->batch_order[k] = tmp;
    }
    loader->batch_order_epoch = epoch;
    loader->batch_order_shard = shard;
}

// The shard (index into shard_paths) at position shard_index of the given epoch's order.
static inline int dataloader_shard_at(DataLoader *loader, int64_t epoch, int64_t shard_index) {
    if (!loader->shuffle) return (int)shard_index;
    dataloader_draw_shard_order(loader, epoch);
    return loader->shard_order[shard_index];
}

// ---------------------------------------------------------------------------------------------------
// shard discovery and validation

static inline char *dataloader_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = (char *)malloc_check(n, "dataloader: shard path");
    memcpy(p, s, n);
    return p;
}

static inline int dataloader_compare_paths(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

// Fills shard_paths / num_shards from a glob pattern or a single path.
static inline void dataloader_find_shards(DataLoader *loader, const char *pattern) {
    if (!pattern || !pattern[0]) fail("dataloader: empty data file pattern");
    struct stat st;
    if (!strpbrk(pattern, "*?[") || stat(pattern, &st) == 0) {
        // one plain path (a file that exists is taken as named, `x[1].bin` too, before it is read as a
        // pattern): say why it cannot be opened rather than "no match"
        fclose(fopen_regular(pattern));
        loader->num_shards = 1;
        loader->shard_paths = (char **)malloc_check(sizeof(char *), "dataloader: shard paths");
        loader->shard_paths[0] = dataloader_strdup(pattern);
        return;
    }
    glob_t g;
    memset(&g, 0, sizeof(g));
    int rc = glob(pattern, 0, NULL, &g);
    if (rc == GLOB_NOMATCH) fail("%s: no file matches this data pattern", pattern);
    if (rc != 0) fail("%s: cannot expand data pattern (glob error %d)", pattern, rc);
    if (g.gl_pathc > (size_t)INT32_MAX) fail("%s: too many shards (%zu)", pattern, (size_t)g.gl_pathc);
    loader->num_shards = (int)g.gl_pathc;
    loader->shard_paths = (char **)malloc_check(g.gl_pathc * sizeof(char *), "dataloader: shard paths");
    for (size_t i = 0; i < g.gl_pathc; i++) loader->shard_paths[i] = dataloader_strdup(g.gl_pathv[i]);
    globfree(&g);
    // byte order, whatever the locale glob sorted by
    qsort(loader->shard_paths, (size_t)loader->num_shards, sizeof(char *), dataloader_compare_paths);
}

// The little-endian unsigned integer of nbytes (1..4) bytes at p: a token, or a header field.
static inline uint32_t dataloader_le_uint(const uint8_t *p, int nbytes) {
    uint32_t v = 0;
    for (int k = 0; k < nbytes; k++) v |= (uint32_t)p[k] << (8 * k);
    return v;
}

static inline int32_t dataloader_le_i32(const uint8_t *p) {
    return (int32_t)dataloader_le_uint(p, 4);
}

// The shard format of this magic, NULL when none.
static inline const DataLoaderShardFormat *dataloader_shard_format(int32_t magic) {
    static const DataLoaderShardFormat formats[2] = {
        {DATALOADER_MAGIC, DATALOADER_VERSION, 2, "GPT-2 shard (uint16 tokens)"},
        {DATALOADER_LLAMA3_MAGIC, DATALOADER_LLAMA3_VERSION, 4, "Llama 3 shard (uint32 tokens)"}};
    for (int i = 0; i < 2; i++)
        if (formats[i].magic == magic) return &formats[i];
    return NULL;
}

// Reads and checks one shard's header and size; returns its token count and sets *format.
static inline int64_t dataloader_check_shard(const char *path, const DataLoaderShardFormat **format) {
    FILE *f = fopen_regular(path);
    int64_t size = file_size_check(f, path);
    if (size < DATALOADER_HEADER_BYTES)
        fail("%s: truncated header: file has %lld bytes, a token shard header has %d", path, (long long)size,
             DATALOADER_HEADER_BYTES);
    uint8_t header[DATALOADER_HEADER_BYTES];
    fread_check(header, 1, sizeof(header), f, path);
    fclose(f);
    int32_t magic = dataloader_le_i32(header);
    int32_t version = dataloader_le_i32(header + 4);
    int32_t ntokens = dataloader_le_i32(header + 8);
    const DataLoaderShardFormat *fmt = dataloader_shard_format(magic);
    if (!fmt)
        fail("%s: bad magic %d, expected %d or %d (not an llm.c token shard)", path, magic, DATALOADER_MAGIC,
             DATALOADER_LLAMA3_MAGIC);
    if (version != fmt->version)
        fail("%s: unsupported token shard version %d, expected %d for magic %d", path, version, fmt->version,
             magic);
    if (ntokens < 0) fail("%s: negative token count %d in header", path, ntokens);
    int64_t expected = DATALOADER_HEADER_BYTES + fmt->token_bytes * (int64_t)ntokens;
    if (size != expected)
        fail("%s: file size %lld does not match its header (1024 + %d*%d tokens = %lld bytes)", path,
             (long long)size, fmt->token_bytes, ntokens, (long long)expected);
    *format = fmt;
    return ntokens;
}

// ---------------------------------------------------------------------------------------------------
// public API

static inline void dataloader_init(DataLoader *loader, const char *pattern, int B, int T, int rank,
                                   int world_size, int shuffle, uint64_t seed, int vocab_size) {
    if (B < 1) fail("dataloader: batch size B=%d must be >= 1", B);
    if (T < 1) fail("dataloader: sequence length T=%d must be >= 1", T);
    if (world_size < 1) fail("dataloader: world_size %d must be >= 1", world_size);
    if (rank < 0 || rank >= world_size) fail("dataloader: rank %d out of range [0, %d)", rank, world_size);
    if (vocab_size < 1) fail("dataloader: vocab_size %d must be >= 1", vocab_size);
    int64_t bt = (int64_t)B * T;
    int64_t global_tokens = bt * world_size; // tokens of one global batch
    if (bt + 1 > INT32_MAX || global_tokens > INT32_MAX)
        fail("dataloader: world_size*B*T = %lld tokens per batch is too large", (long long)global_tokens);

    memset(loader, 0, sizeof(*loader));
    loader->B = B;
    loader->T = T;
    loader->rank = rank;
    loader->world_size = world_size;
    loader->shuffle = shuffle ? 1 : 0;
    loader->vocab_size = vocab_size;
    loader->seed = seed;

    dataloader_find_shards(loader, pattern);
    int n = loader->num_shards;
    loader->shard_tokens = (int64_t *)malloc_check((size_t)n * sizeof(int64_t), "dataloader: shard sizes");
    loader->shard_batches = (int64_t *)malloc_check((size_t)n * sizeof(int64_t), "dataloader: shard sizes");
    loader->shard_stats = (struct stat *)malloc_check((size_t)n * sizeof(struct stat), "dataloader: shards");
    int64_t max_batches = 0;
    for (int i = 0; i < n; i++) {
        const char *path = loader->shard_paths[i];
        const DataLoaderShardFormat *format;
        int64_t ntok = dataloader_check_shard(path, &format);
        if (stat(path, &loader->shard_stats[i]) != 0) fail("%s: cannot open: %s", path, strerror(errno));
        if (i == 0) loader->format = format;
        if (format != loader->format)
            fail("%s: a %s, but %s is a %s: the shards of one data pattern must share a format", path,
                 format->name, loader->shard_paths[0], loader->format->name);
        if (ntok < global_tokens + 1)
            fail("%s: %lld tokens, fewer than the world_size*B*T+1 = %lld one batch needs", path,
                 (long long)ntok, (long long)(global_tokens + 1));
        loader->shard_tokens[i] = ntok;
        loader->shard_batches[i] = (ntok - 1) / global_tokens;
        loader->batches_per_epoch += loader->shard_batches[i];
        if (loader->shard_batches[i] > max_batches) max_batches = loader->shard_batches[i];
    }

    loader->inputs = (int *)malloc_check((size_t)bt * sizeof(int), "dataloader: inputs");
    loader->targets = (int *)malloc_check((size_t)bt * sizeof(int), "dataloader: targets");
    loader->read_buf = (uint8_t *)malloc_check((size_t)(bt + 1) * (size_t)loader->format->token_bytes,
                                               "dataloader: read buffer");
    loader->file = NULL;
    loader->file_shard = -1;
    loader->order_epoch = -1;
    loader->batch_order_epoch = -1;
    loader->batch_order_shard = -1;
    if (loader->shuffle) {
        loader->shard_order = (int *)malloc_check((size_t)n * sizeof(int), "dataloader: shard order");
        loader->batch_order =
            (int32_t *)malloc_check((size_t)max_batches * sizeof(int32_t), "dataloader: batch order");
    }
    loader->current_shard = -1;
    loader->current_batch = -1;
    loader->pos.epoch = 0;
    loader->pos.shard_index = 0;
    loader->pos.batch_index = 0;
}

// A shard is opened again as the reading reaches it: it must be the file init checked (and the run's
// fingerprint read), not one rewritten, replaced or grown since, whose tokens the run would train on unseen.
static inline void dataloader_check_unchanged(const DataLoader *loader, int shard) {
    const struct stat *was = &loader->shard_stats[shard];
    struct stat now;
    if (fstat(fileno(loader->file), &now) != 0)
        fail("%s: cannot stat: %s", loader->shard_paths[shard], strerror(errno));
    if (now.st_dev != was->st_dev || now.st_ino != was->st_ino || now.st_size != was->st_size ||
        now.st_mtim.tv_sec != was->st_mtim.tv_sec || now.st_mtim.tv_nsec != was->st_mtim.tv_nsec)
        fail("%s: changed since the run started (%s): the run stops rather than train on other data than "
             "it checked; put the shard back, or start a new run on the new data",
             loader->shard_paths[shard],
             now.st_ino != was->st_ino || now.st_dev != was->st_dev ? "another file in its place"
             : now.st_size != was->st_size                          ? "another size"
                                                                    : "written to");
}

static inline void dataloader_next_batch(DataLoader *loader) {
    DataLoaderPosition *pos = &loader->pos;
    int shard = dataloader_shard_at(loader, pos->epoch, pos->shard_index);
    int64_t j = pos->batch_index;
    if (loader->shuffle) {
        dataloader_draw_batch_order(loader, pos->epoch, shard);
        j = loader->batch_order[j];
    }
    const char *path = loader->shard_paths[shard];
    if (loader->file_shard != shard) {
        if (loader->file) fclose(loader->file);
        loader->file = fopen_check(path, "rb");
        loader->file_shard = shard;
        dataloader_check_unchanged(loader, shard);
    }
    int64_t bt = (int64_t)loader->B * loader->T;
    int w = loader->format->token_bytes;
    int64_t first = (j * loader->world_size + loader->rank) * bt; // token offset in the shard
    int64_t byte_offset = DATALOADER_HEADER_BYTES + w * first;
    if ((int64_t)(long)byte_offset != byte_offset || fseek(loader->file, (long)byte_offset, SEEK_SET) != 0)
        fail("%s: cannot seek to token %lld: %s", path, (long long)first, strerror(errno));
    fread_check(loader->read_buf, (size_t)w, (size_t)(bt + 1), loader->file, path);
    for (int64_t i = 0; i <= bt; i++) {
        uint32_t token = dataloader_le_uint(loader->read_buf + w * i, w);
        if (token >= (uint32_t)loader->vocab_size)
            fail("%s: token id %u at token offset %lld is >= vocab_size %d", path, (unsigned)token,
                 (long long)(first + i), loader->vocab_size);
        if (i < bt) loader->inputs[i] = (int)token;
        if (i > 0) loader->targets[i - 1] = (int)token;
    }
    loader->current_shard = shard;
    loader->current_batch = j;

    // advance to the next batch, shard, epoch
    if (++pos->batch_index >= loader->shard_batches[shard]) {
        pos->batch_index = 0;
        if (++pos->shard_index >= loader->num_shards) {
            pos->shard_index = 0;
            pos->epoch++;
        }
    }
}

static inline void dataloader_reset(DataLoader *loader) {
    loader->pos.epoch = 0;
    loader->pos.shard_index = 0;
    loader->pos.batch_index = 0;
}

// Continues at pos, which `source` (a state file) recorded: refused, naming the source, unless it is a
// position in this data.
static inline void dataloader_set_position(DataLoader *loader, DataLoaderPosition pos, const char *source) {
    if (pos.epoch < 0) fail("%s: data position: epoch %lld is negative", source, (long long)pos.epoch);
    if (pos.shard_index < 0 || pos.shard_index >= loader->num_shards)
        fail("%s: data position: shard %lld, but the training data has %d shard(s)", source,
             (long long)pos.shard_index, loader->num_shards);
    int shard = dataloader_shard_at(loader, pos.epoch, pos.shard_index);
    if (pos.batch_index < 0 || pos.batch_index >= loader->shard_batches[shard])
        fail("%s: data position: batch %lld, but shard %s holds %lld", source, (long long)pos.batch_index,
             loader->shard_paths[shard], (long long)loader->shard_batches[shard]);
    loader->pos = pos;
}

// A fingerprint of the training data: the shards' count, their sizes and every byte of their tokens, so
// that a checkpoint is not continued on other data by mistake, also where a shard changed in its middle.
// Read once at start, at the disk's speed (0.5 s per GiB from the page cache on a 2-core machine): the
// first and last 4 KiB that version-2 state files hashed missed a change in a shard's middle. Each shard's
// own digest is kept (shard_digests): the ranks compare theirs (run_files.h's check_ranks_same_data).
static inline uint64_t dataloader_fingerprint(DataLoader *loader) {
    uint64_t h = FNV1A_START;
    enum { CHUNK = 1 << 20 };
    uint8_t *buf = (uint8_t *)malloc_check(CHUNK, "dataloader: fingerprint buffer");
    free(loader->shard_digests);
    loader->shard_digests =
        (uint64_t *)malloc_check((size_t)loader->num_shards * sizeof(uint64_t), "dataloader: shard digests");
    for (int i = 0; i < loader->num_shards; i++) {
        const char *path = loader->shard_paths[i];
        int64_t bytes = loader->format->token_bytes * loader->shard_tokens[i];
        uint64_t shard = fnv1a(FNV1A_START, &bytes, sizeof(bytes));
        FILE *f = fopen_regular(path);
        if (fseek(f, DATALOADER_HEADER_BYTES, SEEK_SET) != 0)
            fail("%s: cannot seek: %s", path, strerror(errno));
        for (int64_t done = 0; done < bytes;) {
            size_t n = bytes - done < CHUNK ? (size_t)(bytes - done) : (size_t)CHUNK;
            fread_check(buf, 1, n, f, path);
            shard = fnv1a_words(shard, buf, n);
            done += (int64_t)n;
        }
        fclose(f);
        loader->shard_digests[i] = shard;
        h = fnv1a(h, &shard, sizeof(shard));
    }
    free(buf);
    return h;
}

// Every token of the shards is below the vocabulary size: for validation data, read whole at start, so that
// a bad token ends the run before training rather than at its final validation.
static inline void dataloader_check_tokens(const DataLoader *loader, const char *flag) {
    int w = loader->format->token_bytes;
    enum { CHUNK_TOKENS = 1 << 18 };
    uint8_t *buf = (uint8_t *)malloc_check((size_t)CHUNK_TOKENS * w, "dataloader: token check buffer");
    for (int i = 0; i < loader->num_shards; i++) {
        const char *path = loader->shard_paths[i];
        FILE *f = fopen_regular(path);
        if (fseek(f, DATALOADER_HEADER_BYTES, SEEK_SET) != 0)
            fail("%s: cannot seek: %s", path, strerror(errno));
        for (int64_t done = 0; done < loader->shard_tokens[i];) {
            int64_t left = loader->shard_tokens[i] - done;
            size_t n = left < CHUNK_TOKENS ? (size_t)left : (size_t)CHUNK_TOKENS;
            fread_check(buf, (size_t)w, n, f, path);
            for (size_t k = 0; k < n; k++) {
                uint32_t token = dataloader_le_uint(buf + (size_t)w * k, w);
                if (token < (uint32_t)loader->vocab_size) continue;
                free(buf); // not left to the exit: the leak checker finds no pointer to it in a register
                fail("%s: token id %u at token offset %lld is >= vocab_size %d (%s: every token must be in "
                     "the "
                     "model's vocabulary)",
                     path, (unsigned)token, (long long)(done + (int64_t)k), loader->vocab_size, flag);
            }
            done += (int64_t)n;
        }
        fclose(f);
    }
    free(buf);
}

static inline void dataloader_free(DataLoader *loader) {
    if (loader->file) fclose(loader->file);
    for (int i = 0; i < loader->num_shards; i++) free(loader->shard_paths[i]);
    free(loader->shard_paths);
    free(loader->shard_tokens);
    free(loader->shard_batches);
    free(loader->shard_stats);
    free(loader->shard_digests);
    free(loader->inputs);
    free(loader->targets);
    free(loader->read_buf);
    free(loader->shard_order);
    free(loader->batch_order);
    memset(loader, 0, sizeof(*loader));
    loader->file_shard = -1;
}

#endif // DATALOADER_H

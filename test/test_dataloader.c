// test_dataloader.c: unit tests of dataloader.h and tokenizer.h on small synthetic files in a temp dir.
// Error cases run in a forked child whose stderr goes to a pipe: the child must exit with status 1 after
// writing exactly one line "error: ..." that names the file (or flag) at fault.
#define _POSIX_C_SOURCE 200809L

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../core/dataloader.h"
#include "../core/tokenizer.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#define CHILD_IGNORE_LEAKS() __lsan_disable() // a child that fails exits with its buffers still held
#else
#define CHILD_IGNORE_LEAKS() ((void)0)
#endif

static int passed = 0, failed = 0;
static char dir[64];

#define CHECK(cond, ...)                                                                                     \
    do {                                                                                                     \
        if (cond) {                                                                                          \
            passed++;                                                                                        \
        } else {                                                                                             \
            failed++;                                                                                        \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                                      \
            printf(__VA_ARGS__);                                                                             \
            printf("\n");                                                                                    \
        }                                                                                                    \
    } while (0)

// ---------------------------------------------------------------------------------------------------
// synthetic files

static const char *path_in_dir(const char *name) {
    static char buf[8][256];
    static int next = 0;
    char *p = buf[next++ % 8];
    snprintf(p, 256, "%s/%s", dir, name);
    return p;
}

static void put_i32(uint8_t *p, int32_t v) {
    uint32_t u = (uint32_t)v;
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(u >> (8 * i));
}

// Writes a shard whose header says (magic, version, header_ntokens); the body holds the n tokens given,
// little-endian, `width` bytes each (2 or 4, whatever the header says).
static void write_shard_raw(const char *path, int32_t magic, int32_t version, int32_t header_ntokens,
                            const uint32_t *tokens, int64_t n, int width) {
    uint8_t header[DATALOADER_HEADER_BYTES];
    memset(header, 0, sizeof(header));
    put_i32(header, magic);
    put_i32(header + 4, version);
    put_i32(header + 8, header_ntokens);
    FILE *f = fopen_check(path, "wb");
    fwrite_check(header, 1, sizeof(header), f, path);
    for (int64_t i = 0; i < n; i++) {
        uint8_t b[4];
        put_i32(b, (int32_t)tokens[i]);
        fwrite_check(b, 1, (size_t)width, f, path);
    }
    fclose(f);
}

// Token i of synthetic shard s: unique over all test shards, so a batch tells where it was read.
static int tok(int s, int64_t i) {
    return s * 1000 + (int)i;
}

// A well-formed shard of the format of `magic` holding tokens tok(s, 0..n-1).
static void write_shard(const char *path, int32_t magic, int s, int64_t n) {
    const DataLoaderShardFormat *format = dataloader_shard_format(magic);
    uint32_t *t = (uint32_t *)malloc_check((size_t)n * sizeof(uint32_t), "test tokens");
    for (int64_t i = 0; i < n; i++) t[i] = (uint32_t)tok(s, i);
    write_shard_raw(path, magic, format->version, (int32_t)n, t, n, format->token_bytes);
    free(t);
}

static void remove_dir(void) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        unlink(path_in_dir(e->d_name));
    }
    closedir(d);
    rmdir(dir);
}

// ---------------------------------------------------------------------------------------------------
// error cases in a child process

typedef struct {
    const char *pattern;
    int B, T, rank, world_size, shuffle, vocab_size;
    int next_batches; // batches to load after init
    int set_position; // call dataloader_set_position(pos) after init
    DataLoaderPosition pos;
    const char *tokenizer; // when set: tokenizer_init on this path instead of a loader
    const char *written;   // when set: this file's modification time moved after init (a shard written to)
} FailCase;

static void run_fail_case(const FailCase *c) {
    if (c->tokenizer) {
        Tokenizer t;
        tokenizer_init(&t, c->tokenizer);
        tokenizer_free(&t);
        return;
    }
    DataLoader loader;
    dataloader_init(&loader, c->pattern, c->B, c->T, c->rank, c->world_size, c->shuffle, 1, c->vocab_size);
    if (c->set_position) dataloader_set_position(&loader, c->pos, "the test's position");
    const struct timespec written[2] = {{1000000, 0}, {1000000, 0}}; // atime, mtime: long ago, not init's
    if (c->written && utimensat(AT_FDCWD, c->written, written, 0) != 0) fail("%s: utimensat", c->written);
    for (int i = 0; i < c->next_batches; i++) dataloader_next_batch(&loader);
    dataloader_free(&loader);
}

static FailCase loader_case(const char *pattern, int B, int T, int vocab_size) {
    FailCase c;
    memset(&c, 0, sizeof(c));
    c.pattern = pattern;
    c.B = B;
    c.T = T;
    c.world_size = 1;
    c.vocab_size = vocab_size;
    return c;
}

// Runs the case in a child; it must exit 1 with one stderr line "error: ..." holding both needles.
static void expect_fail(const char *name, const FailCase *c, const char *needle1, const char *needle2) {
    fflush(stdout);
    fflush(stderr);
    int fds[2];
    if (pipe(fds) != 0) fail("pipe: %s", strerror(errno));
    pid_t pid = fork();
    if (pid < 0) fail("fork: %s", strerror(errno));
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        close(fds[1]);
        CHILD_IGNORE_LEAKS();
        run_fail_case(c);
        _exit(0); // it was expected to fail
    }
    close(fds[1]);
    char out[4096];
    size_t len = 0;
    for (;;) {
        ssize_t r = read(fds[0], out + len, sizeof(out) - 1 - len);
        if (r <= 0) break;
        len += (size_t)r;
    }
    out[len] = '\0';
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    int lines = 0;
    for (size_t i = 0; i < len; i++) lines += out[i] == '\n';
    int one_line = lines == 1 && len > 0 && out[len - 1] == '\n';
    int names = strstr(out, needle1) != NULL && (!needle2 || strstr(out, needle2) != NULL);
    CHECK(code == 1 && one_line && strncmp(out, "error: ", 7) == 0 && names,
          "%s: exit code %d, stderr \"%s\", expected one line naming \"%s\"%s%s%s", name, code, out, needle1,
          needle2 ? " and \"" : "", needle2 ? needle2 : "", needle2 ? "\"" : "");
}

static void test_errors(void) {
    uint32_t ten[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    const char *p;

    p = path_in_dir("bad_magic.bin");
    write_shard_raw(p, 20240326, 1, 10, ten, 10, 2);
    FailCase c = loader_case(p, 1, 4, 256);
    expect_fail("wrong magic", &c, "bad_magic.bin", "magic");

    p = path_in_dir("bad_version.bin");
    write_shard_raw(p, DATALOADER_MAGIC, 2, 10, ten, 10, 2);
    c = loader_case(p, 1, 4, 256);
    expect_fail("wrong version", &c, "bad_version.bin", "version");

    p = path_in_dir("bad_size.bin");
    write_shard_raw(p, DATALOADER_MAGIC, 1, 9, ten, 10, 2); // one token more than the header says
    c = loader_case(p, 1, 4, 256);
    expect_fail("size mismatch", &c, "bad_size.bin", "size");

    p = path_in_dir("short_header.bin");
    uint8_t hundred[100];
    memset(hundred, 0, sizeof(hundred));
    put_i32(hundred, DATALOADER_MAGIC);
    put_i32(hundred + 4, DATALOADER_VERSION);
    FILE *f = fopen_check(p, "wb");
    fwrite_check(hundred, 1, sizeof(hundred), f, p);
    fclose(f);
    c = loader_case(p, 1, 4, 256);
    expect_fail("truncated header", &c, "short_header.bin", "header");

    // a shard written to after init: refused when the reading reaches it (the second batch, shard 1)
    write_shard_raw(path_in_dir("written_000000.bin"), DATALOADER_MAGIC, 1, 10, ten, 10, 2);
    write_shard_raw(path_in_dir("written_000001.bin"), DATALOADER_MAGIC, 1, 10, ten, 10, 2);
    c = loader_case(path_in_dir("written_*.bin"), 1, 8, 256);
    c.next_batches = 2;
    c.written = path_in_dir("written_000001.bin");
    expect_fail("a shard written to mid-run", &c, "written_000001.bin: changed since the run started",
                "written to");

    p = path_in_dir("nomatch_*.bin");
    c = loader_case(p, 1, 4, 256);
    expect_fail("empty glob", &c, p, "no file matches");

    p = path_in_dir("missing.bin");
    c = loader_case(p, 1, 4, 256);
    expect_fail("missing file", &c, "missing.bin", "cannot open");

    // a glob that matches one good shard and one bad one: the bad one is named, found at init
    write_shard(path_in_dir("mixed_000.bin"), DATALOADER_MAGIC, 0, 50);
    write_shard_raw(path_in_dir("mixed_001.bin"), DATALOADER_MAGIC, 1, 50, ten, 10, 2);
    c = loader_case(path_in_dir("mixed_*.bin"), 1, 4, 65536);
    expect_fail("every shard validated at init", &c, "mixed_001.bin", "size");

    p = path_in_dir("small.bin");
    write_shard(p, DATALOADER_MAGIC, 0, 16); // needs world_size*B*T+1 = 17
    c = loader_case(p, 2, 4, 65536);
    c.world_size = 2;
    expect_fail("shard smaller than a batch", &c, "small.bin", "17");

    uint32_t with_big[40];
    for (int i = 0; i < 40; i++) with_big[i] = (uint32_t)(i % 200);
    with_big[13] = 300; // read by the second batch (tokens 8..16) with B=2,T=4
    p = path_in_dir("big_token.bin");
    write_shard_raw(p, DATALOADER_MAGIC, 1, 40, with_big, 40, 2);
    c = loader_case(p, 2, 4, 256);
    c.next_batches = 2;
    expect_fail("token >= vocab_size", &c, "big_token.bin", "token id 300 at token offset 13");
    {
        DataLoader loader; // init and the first batch, which does not hold it, succeed
        dataloader_init(&loader, p, 2, 4, 0, 1, 0, 1, 256);
        dataloader_next_batch(&loader);
        CHECK(loader.inputs[7] == 7 && loader.targets[7] == 8, "first batch beside the bad token loads");
        dataloader_free(&loader);
    }

    p = path_in_dir("good.bin");
    write_shard(p, DATALOADER_MAGIC, 0, 41); // B=2,T=4: 5 batches
    c = loader_case(p, 2, 4, 65536);
    c.rank = 1;
    expect_fail("rank >= world_size", &c, "rank", NULL);
    c = loader_case(p, 0, 4, 65536);
    expect_fail("B < 1", &c, "B=0", NULL);
    c = loader_case(p, 2, 4, 0);
    expect_fail("vocab_size < 1", &c, "vocab_size", NULL);
    c = loader_case(p, 2, 4, 65536);
    c.set_position = 1;
    c.pos.batch_index = 5;
    expect_fail("set_position batch out of range", &c, "the test's position: data position: batch 5",
                "good.bin");
    c.pos.batch_index = 0;
    c.pos.shard_index = 1;
    expect_fail("set_position shard out of range", &c, "shard 1, but the training data has 1 shard", NULL);
    c.pos.shard_index = 0;
    c.pos.epoch = -1;
    expect_fail("set_position negative epoch", &c, "epoch -1", NULL);
}

// The Llama 3 format's refusals, and the rule that the shards of one pattern share a format.
static void test_llama3_errors(void) {
    uint32_t ten[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    const char *p;

    p = path_in_dir("l3_bad_version.bin"); // the GPT-2 version with the Llama 3 magic
    write_shard_raw(p, DATALOADER_LLAMA3_MAGIC, DATALOADER_VERSION, 10, ten, 10, 4);
    FailCase c = loader_case(p, 1, 4, 128256);
    expect_fail("Llama 3 wrong version", &c, "l3_bad_version.bin", "version 1, expected 7");

    p = path_in_dir("l3_narrow.bin"); // a Llama 3 header over uint16 tokens
    write_shard_raw(p, DATALOADER_LLAMA3_MAGIC, DATALOADER_LLAMA3_VERSION, 10, ten, 10, 2);
    c = loader_case(p, 1, 4, 128256);
    expect_fail("Llama 3 header, 16-bit tokens", &c, "l3_narrow.bin", "(1024 + 4*10 tokens = 1064 bytes)");

    p = path_in_dir("gpt2_wide.bin"); // a GPT-2 header over uint32 tokens
    write_shard_raw(p, DATALOADER_MAGIC, DATALOADER_VERSION, 10, ten, 10, 4);
    c = loader_case(p, 1, 4, 128256);
    expect_fail("GPT-2 header, 32-bit tokens", &c, "gpt2_wide.bin", "(1024 + 2*10 tokens = 1044 bytes)");

    p = path_in_dir("l3_truncated.bin"); // the header counts one token more than the body holds
    write_shard_raw(p, DATALOADER_LLAMA3_MAGIC, DATALOADER_LLAMA3_VERSION, 11, ten, 10, 4);
    c = loader_case(p, 1, 4, 128256);
    expect_fail("Llama 3 truncated", &c, "l3_truncated.bin", "file size 1064");

    // ids at and far above the vocabulary (the largest a uint32 holds must not wrap to a negative int)
    const uint32_t bad_ids[2] = {128256, UINT32_MAX};
    const char *needles[2] = {"token id 128256 at token offset 13 is >= vocab_size 128256",
                              "token id 4294967295 at token offset 13 is >= vocab_size 128256"};
    for (int k = 0; k < 2; k++) {
        uint32_t toks[40];
        for (int i = 0; i < 40; i++) toks[i] = 128000 + (uint32_t)i;
        toks[13] = bad_ids[k]; // read by the second batch (tokens 8..16) with B=2,T=4
        p = path_in_dir(k ? "l3_huge_token.bin" : "l3_big_token.bin");
        write_shard_raw(p, DATALOADER_LLAMA3_MAGIC, DATALOADER_LLAMA3_VERSION, 40, toks, 40, 4);
        c = loader_case(p, 2, 4, 128256);
        c.next_batches = 2;
        expect_fail("Llama 3 token >= vocab_size", &c, p, needles[k]);
    }
    DataLoader loader; // the first batch, which does not hold it, loads ids above 65535
    dataloader_init(&loader, p, 2, 4, 0, 1, 0, 1, 128256);
    dataloader_next_batch(&loader);
    CHECK(loader.inputs[0] == 128000 && loader.targets[7] == 128008,
          "first batch beside the bad token loads");
    dataloader_free(&loader);

    // one format per pattern, whichever comes first
    write_shard(path_in_dir("mix_a_000.bin"), DATALOADER_MAGIC, 0, 50);
    write_shard(path_in_dir("mix_a_001.bin"), DATALOADER_LLAMA3_MAGIC, 0, 50);
    c = loader_case(path_in_dir("mix_a_*.bin"), 1, 4, 128256);
    expect_fail("GPT-2 then Llama 3 shard", &c, "mix_a_001.bin: a Llama 3 shard (uint32 tokens), but ",
                "mix_a_000.bin is a GPT-2 shard (uint16 tokens): the shards of one data pattern must share");
    write_shard(path_in_dir("mix_b_000.bin"), DATALOADER_LLAMA3_MAGIC, 0, 50);
    write_shard(path_in_dir("mix_b_001.bin"), DATALOADER_MAGIC, 0, 50);
    c = loader_case(path_in_dir("mix_b_*.bin"), 1, 4, 128256);
    expect_fail("Llama 3 then GPT-2 shard", &c, "mix_b_001.bin: a GPT-2 shard", "mix_b_000.bin is a Llama 3");
}

// ---------------------------------------------------------------------------------------------------
// batches

// Three shards of different sizes: with B*T=8 and one rank they hold 5, 3 and 7 batches.
static const int64_t shard_sizes[3] = {41, 30, 60};

// One such set of shards in each format. Shard k of a set holds tokens tok(first_s + k, i): the Llama 3
// set's are all above 65535, so a reader that kept 16 bits of them would be caught.
typedef struct {
    const char *prefix; // the shards are prefix_000000.bin ...
    int32_t magic;
    int first_s;
    int vocab_size;
} ShardSet;
static const ShardSet gpt2_set = {"tiny_train", DATALOADER_MAGIC, 0, 65536};
static const ShardSet llama3_set = {"wide_train", DATALOADER_LLAMA3_MAGIC, 100, 128256};

static const char *shard_path(const ShardSet *d, const char *index) { // index: "000001", or "*"
    char name[64];
    snprintf(name, sizeof(name), "%s_%s.bin", d->prefix, index);
    return path_in_dir(name);
}

static void write_test_shards(const ShardSet *d) {
    for (int s = 0; s < 3; s++) {
        char index[16];
        snprintf(index, sizeof(index), "%06d", s);
        write_shard(shard_path(d, index), d->magic, d->first_s + s, shard_sizes[s]);
    }
}

static int64_t shard_batches_of(int s) { // with B*T = 8 and one rank
    return (shard_sizes[s] - 1) / 8;
}

// Whether the loader's batch is tokens first.. of shard `shard` (index into shard_paths) of set d.
static int batch_matches(const ShardSet *d, const DataLoader *l, int shard, int64_t first) {
    int64_t bt = (int64_t)l->B * l->T;
    int s = d->first_s + shard;
    for (int64_t i = 0; i < bt; i++)
        if (l->inputs[i] != tok(s, first + i) || l->targets[i] != tok(s, first + i + 1)) return 0;
    return 1;
}

static void test_sequential(const ShardSet *d) {
    const char *pattern = shard_path(d, "*");
    DataLoader l;
    dataloader_init(&l, pattern, 2, 4, 0, 1, 0, 0, d->vocab_size);
    CHECK(l.num_shards == 3, "3 shards found, got %d", l.num_shards);
    CHECK(l.format == dataloader_shard_format(d->magic), "%s: format of magic %d", d->prefix, d->magic);
    CHECK(strstr(l.shard_paths[0], "_000000.bin") && strstr(l.shard_paths[2], "_000002.bin"),
          "shards sorted by name");
    CHECK(l.shard_tokens[1] == 30 && l.shard_batches[0] == 5 && l.shard_batches[1] == 3 &&
              l.shard_batches[2] == 7 && l.batches_per_epoch == 15,
          "shard sizes and batch counts");
    int ok = 1, pos_ok = 1;
    for (int epoch = 0; epoch < 3; epoch++) {
        for (int s = 0; s < 3; s++) {
            for (int64_t j = 0; j < l.shard_batches[s]; j++) {
                if (l.pos.epoch != epoch || l.pos.shard_index != s || l.pos.batch_index != j) pos_ok = 0;
                dataloader_next_batch(&l);
                if (l.current_shard != s || l.current_batch != j || !batch_matches(d, &l, s, j * 8)) ok = 0;
            }
        }
    }
    CHECK(ok, "%s: inputs/targets are tokens (j*B*T ...) of each shard in order, over shard and epoch wraps",
          d->prefix);
    CHECK(pos_ok, "position advances batch -> shard -> epoch");
    CHECK(l.pos.epoch == 3 && l.pos.shard_index == 0 && l.pos.batch_index == 0, "three epochs completed");
    dataloader_reset(&l);
    dataloader_next_batch(&l);
    CHECK(l.current_shard == 0 && l.current_batch == 0 && batch_matches(d, &l, 0, 0) && l.pos.epoch == 0,
          "reset returns to the first batch");
    dataloader_free(&l);

    // a single path instead of a glob
    DataLoader one;
    dataloader_init(&one, shard_path(d, "000001"), 1, 29, 0, 1, 0, 0, d->vocab_size);
    dataloader_next_batch(&one);
    // the loader's only shard is the set's shard 1
    CHECK(one.num_shards == 1 && one.shard_batches[0] == 1 && batch_matches(d, &one, 1, 0),
          "one plain path, a batch using every token");
    dataloader_next_batch(&one);
    CHECK(one.pos.epoch == 2 && batch_matches(d, &one, 1, 0), "one-batch epochs wrap");
    dataloader_free(&one);
}

// W loaders of batch B on ranks 0..W-1 read exactly the rows of one loader of batch W*B.
static void test_rank_striding(const ShardSet *d, int W, int B, int T, int shuffle) {
    const char *pattern = shard_path(d, "*");
    DataLoader big;
    dataloader_init(&big, pattern, W * B, T, 0, 1, shuffle, 7, d->vocab_size);
    DataLoader *ranks = (DataLoader *)malloc_check((size_t)W * sizeof(DataLoader), "test loaders");
    for (int r = 0; r < W; r++) dataloader_init(&ranks[r], pattern, B, T, r, W, shuffle, 7, d->vocab_size);
    int64_t steps = 2 * big.batches_per_epoch + 3;
    int same = 1, same_pos = 1, counts = ranks[0].batches_per_epoch == big.batches_per_epoch;
    int64_t bt = (int64_t)B * T;
    for (int64_t step = 0; step < steps; step++) {
        dataloader_next_batch(&big);
        for (int r = 0; r < W; r++) {
            dataloader_next_batch(&ranks[r]);
            for (int64_t i = 0; i < bt; i++) {
                if (ranks[r].inputs[i] != big.inputs[r * bt + i] ||
                    ranks[r].targets[i] != big.targets[r * bt + i])
                    same = 0;
            }
            if (ranks[r].pos.epoch != big.pos.epoch || ranks[r].pos.shard_index != big.pos.shard_index ||
                ranks[r].pos.batch_index != big.pos.batch_index)
                same_pos = 0;
        }
    }
    CHECK(counts, "W=%d: same batches per epoch as one process with batch W*B", W);
    CHECK(same,
          "W=%d B=%d T=%d shuffle=%d: every rank's batch equals its rows of the W*B batch, token by token", W,
          B, T, shuffle);
    CHECK(same_pos, "W=%d shuffle=%d: ranks and the W*B loader keep the same position", W, shuffle);
    for (int r = 0; r < W; r++) dataloader_free(&ranks[r]);
    free(ranks);
    dataloader_free(&big);
}

// The (shard, batch) sequence of one epoch starting at the loader's position.
static void epoch_order(DataLoader *l, int *shards, int64_t *batches) {
    for (int64_t k = 0; k < l->batches_per_epoch; k++) {
        dataloader_next_batch(l);
        shards[k] = l->current_shard;
        batches[k] = l->current_batch;
    }
}

static void test_shuffle(const ShardSet *d) {
    const char *pattern = shard_path(d, "*");
    enum { N = 15 };
    int s_plain[N], s_a[N], s_a1[N], s_b[N], s_c[N];
    int64_t b_plain[N], b_a[N], b_a1[N], b_b[N], b_c[N];
    DataLoader plain, a, b, c;
    dataloader_init(&plain, pattern, 2, 4, 0, 1, 0, 42, d->vocab_size);
    dataloader_init(&a, pattern, 2, 4, 0, 1, 1, 42, d->vocab_size);
    dataloader_init(&b, pattern, 2, 4, 0, 1, 1, 42, d->vocab_size);
    dataloader_init(&c, pattern, 2, 4, 0, 1, 1, 43, d->vocab_size);
    CHECK(a.batches_per_epoch == N, "15 batches per epoch");
    epoch_order(&plain, s_plain, b_plain);

    int values_ok = 1;
    for (int64_t k = 0; k < N; k++) {
        dataloader_next_batch(&a);
        s_a[k] = a.current_shard;
        b_a[k] = a.current_batch;
        if (!batch_matches(d, &a, a.current_shard, a.current_batch * 8)) values_ok = 0;
    }
    CHECK(values_ok, "shuffled batches hold the tokens of the batch they name");
    int seen[3][8];
    memset(seen, 0, sizeof(seen));
    int contiguous = 1;
    for (int k = 0; k < N; k++) {
        seen[s_a[k]][b_a[k]]++;
        if (k > 0 && s_a[k] != s_a[k - 1]) {
            for (int q = 0; q < k - 1; q++)
                if (s_a[q] == s_a[k]) contiguous = 0; // the shard came back: not read shard by shard
        }
    }
    int once = 1;
    for (int s = 0; s < 3; s++)
        for (int j = 0; j < 8; j++) once &= seen[s][j] == (j < shard_batches_of(s) ? 1 : 0);
    CHECK(once, "shuffle visits every batch of every shard exactly once per epoch");
    CHECK(contiguous, "shuffle reads one shard at a time");
    int differs = 0;
    for (int k = 0; k < N; k++) differs |= s_a[k] != s_plain[k] || b_a[k] != b_plain[k];
    CHECK(differs, "shuffled order differs from the plain order");
    int in_shard_permuted = 0;
    for (int k = 1; k < N; k++) in_shard_permuted |= s_a[k] == s_a[k - 1] && b_a[k] != b_a[k - 1] + 1;
    CHECK(in_shard_permuted, "batches within a shard are permuted");

    epoch_order(&b, s_b, b_b);
    int same = 1;
    for (int k = 0; k < N; k++) same &= s_a[k] == s_b[k] && b_a[k] == b_b[k];
    CHECK(same, "same seed, same order");
    epoch_order(&c, s_c, b_c);
    int other = 0;
    for (int k = 0; k < N; k++) other |= s_a[k] != s_c[k] || b_a[k] != b_c[k];
    CHECK(other, "another seed, another order");
    epoch_order(&a, s_a1, b_a1);
    int next_epoch = 0;
    for (int k = 0; k < N; k++) next_epoch |= s_a[k] != s_a1[k] || b_a[k] != b_a1[k];
    CHECK(next_epoch && a.pos.epoch == 2, "the next epoch has another order");
    dataloader_free(&plain);
    dataloader_free(&a);
    dataloader_free(&b);
    dataloader_free(&c);
}

static void test_set_position(const ShardSet *d, int shuffle, int W) {
    const char *pattern = shard_path(d, "*");
    enum { SKIP = 13, NEXT = 25 };
    DataLoader l, resumed;
    int rank = W - 1;
    dataloader_init(&l, pattern, 1, 4, rank, W, shuffle, 1234, d->vocab_size);
    for (int k = 0; k < SKIP; k++) dataloader_next_batch(&l);
    DataLoaderPosition saved = l.pos;
    int *expected = (int *)malloc_check(NEXT * 8 * sizeof(int), "test expected");
    for (int k = 0; k < NEXT; k++) {
        dataloader_next_batch(&l);
        memcpy(expected + k * 8, l.inputs, 4 * sizeof(int));
        memcpy(expected + k * 8 + 4, l.targets, 4 * sizeof(int));
    }
    DataLoaderPosition end = l.pos;
    dataloader_init(&resumed, pattern, 1, 4, rank, W, shuffle, 1234, d->vocab_size);
    dataloader_next_batch(&resumed); // some other state first
    dataloader_set_position(&resumed, saved, "the saved position");
    int same = 1;
    for (int k = 0; k < NEXT; k++) {
        dataloader_next_batch(&resumed);
        same &= memcmp(expected + k * 8, resumed.inputs, 4 * sizeof(int)) == 0 &&
                memcmp(expected + k * 8 + 4, resumed.targets, 4 * sizeof(int)) == 0;
    }
    CHECK(same, "%s shuffle=%d W=%d: set_position reproduces the following %d batches exactly", d->prefix,
          shuffle, W, NEXT);
    CHECK(resumed.pos.epoch == end.epoch && resumed.pos.shard_index == end.shard_index &&
              resumed.pos.batch_index == end.batch_index,
          "shuffle=%d: resumed loader ends at the same position", shuffle);
    CHECK(end.epoch >= 1, "the resumed stretch crosses an epoch boundary");
    // the same loader rewound
    dataloader_set_position(&l, saved, "the saved position");
    dataloader_next_batch(&l);
    CHECK(memcmp(expected, l.inputs, 4 * sizeof(int)) == 0, "shuffle=%d: rewinding the same loader", shuffle);
    free(expected);
    dataloader_free(&l);
    dataloader_free(&resumed);
}

// ---------------------------------------------------------------------------------------------------
// fingerprint

// dataloader_fingerprint by its definition, from the files' bytes: for each shard, an FNV-1a digest of its
// token bytes' length (a little-endian int64), then of every 8 bytes of its tokens as one little-endian word
// (multiply, then the high half folded into the low), the last < 8 bytes one by one; the shards' digests
// then FNV-1a'd in order, each as 8 little-endian bytes. State files (version 4) hold it.
static uint64_t fnv_bytes(uint64_t h, uint64_t x) {
    for (int b = 0; b < 8; b++) h = (h ^ ((x >> (8 * b)) & 0xff)) * 0x100000001b3ull;
    return h;
}

static uint64_t fingerprint_of_files(char *const *paths, int n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < n; i++) {
        FILE *f = fopen_check(paths[i], "rb");
        int64_t bytes = file_size_check(f, paths[i]) - DATALOADER_HEADER_BYTES;
        uint8_t *body = (uint8_t *)malloc_check((size_t)bytes, "test shard body");
        if (fseek(f, DATALOADER_HEADER_BYTES, SEEK_SET) != 0) fail("%s: cannot seek", paths[i]);
        fread_check(body, 1, (size_t)bytes, f, paths[i]);
        fclose(f);
        uint64_t s = fnv_bytes(0xcbf29ce484222325ull, (uint64_t)bytes);
        int64_t k = 0;
        for (; k + 8 <= bytes; k += 8) {
            uint64_t w = 0;
            for (int b = 0; b < 8; b++) w |= (uint64_t)body[k + b] << (8 * b);
            s = (s ^ w) * 0x100000001b3ull;
            s ^= s >> 32;
        }
        for (; k < bytes; k++) s = (s ^ body[k]) * 0x100000001b3ull;
        h = fnv_bytes(h, s);
        free(body);
    }
    return h;
}

static void test_fingerprint(void) {
    // the test sets, and shards longer than the 4 KiB windows in each format
    write_shard(path_in_dir("long_gpt2_000000.bin"), DATALOADER_MAGIC, 0, 3000);
    write_shard(path_in_dir("long_llama3_000000.bin"), DATALOADER_LLAMA3_MAGIC, 100, 3000);
    const char *patterns[4] = {shard_path(&gpt2_set, "*"), shard_path(&llama3_set, "*"),
                               path_in_dir("long_gpt2_*.bin"), path_in_dir("long_llama3_*.bin")};
    uint64_t prints[4];
    for (int k = 0; k < 4; k++) {
        DataLoader l;
        dataloader_init(&l, patterns[k], 1, 4, 0, 1, 0, 0, 128256);
        prints[k] = dataloader_fingerprint(&l);
        CHECK(prints[k] == fingerprint_of_files(l.shard_paths, l.num_shards),
              "%s: the fingerprint hashes the shards' token bytes, whatever their width", patterns[k]);
        dataloader_free(&l);
    }
    CHECK(prints[0] != prints[1] && prints[2] != prints[3], "the two formats' fingerprints differ");
    // one token changed in the middle of a shard, 10 KB from both ends (version 2 read only 4 KiB of each)
    const char *mid = path_in_dir("mid_gpt2_000000.bin");
    write_shard(mid, DATALOADER_MAGIC, 0, 10000);
    DataLoader l;
    dataloader_init(&l, mid, 1, 4, 0, 1, 0, 0, 128256);
    uint64_t before = dataloader_fingerprint(&l);
    dataloader_free(&l);
    FILE *f = fopen_check(mid, "r+b");
    if (fseek(f, DATALOADER_HEADER_BYTES + 2 * 5000, SEEK_SET) != 0) fail("%s: cannot seek", mid);
    int c = fgetc(f);
    if (fseek(f, DATALOADER_HEADER_BYTES + 2 * 5000, SEEK_SET) != 0) fail("%s: cannot seek", mid);
    fputc(c ^ 1, f);
    fclose(f);
    dataloader_init(&l, mid, 1, 4, 0, 1, 0, 0, 128256);
    CHECK(dataloader_fingerprint(&l) != before,
          "a token changed in a shard's middle changes the fingerprint");
    dataloader_free(&l);
}

// A path that exists is taken as named before it is read as a pattern: `lit[1].bin` is that file, not the
// `lit1.bin` the pattern matches.
static void test_literal_path(void) {
    write_shard(path_in_dir("lit[1].bin"), DATALOADER_MAGIC, 0, 100);
    write_shard(path_in_dir("lit1.bin"), DATALOADER_MAGIC, 0, 200);
    DataLoader l;
    dataloader_init(&l, path_in_dir("lit[1].bin"), 1, 4, 0, 1, 0, 0, 256);
    CHECK(l.num_shards == 1 && l.shard_tokens[0] == 100 && strstr(l.shard_paths[0], "lit[1].bin"),
          "an existing path with glob characters is read as named (%d shard(s), %lld tokens)", l.num_shards,
          (long long)l.shard_tokens[0]);
    dataloader_free(&l);
}

// ---------------------------------------------------------------------------------------------------
// tokenizer

static void write_tokenizer(const char *path, uint32_t version, uint32_t V, uint32_t eot, const char **tokens,
                            const uint8_t *lengths, long cut_bytes, int extra_byte) {
    uint8_t header[TOKENIZER_HEADER_BYTES];
    memset(header, 0, sizeof(header));
    put_i32(header, TOKENIZER_MAGIC);
    put_i32(header + 4, (int32_t)version);
    put_i32(header + 8, (int32_t)V);
    put_i32(header + 12, (int32_t)eot);
    uint8_t body[4096];
    size_t n = 0;
    for (uint32_t i = 0; i < V; i++) {
        body[n++] = lengths[i];
        memcpy(body + n, tokens[i], lengths[i]);
        n += lengths[i];
    }
    if (extra_byte) body[n++] = 'x';
    n -= (size_t)cut_bytes;
    FILE *f = fopen_check(path, "wb");
    fwrite_check(header, 1, sizeof(header), f, path);
    fwrite_check(body, 1, n, f, path);
    fclose(f);
}

static void test_tokenizer(void) {
    const char *tokens[5] = {"a", "bc", "\0x", "hello world", "<|endoftext|>"};
    const uint8_t lengths[5] = {1, 2, 2, 11, 13};
    const char *p = path_in_dir("tok.bin");
    write_tokenizer(p, 2, 5, 4, tokens, lengths, 0, 0);
    Tokenizer t;
    tokenizer_init(&t, p);
    CHECK(t.loaded && t.vocab_size == 5 && t.eot_token == 4, "tokenizer header: V=%u eot=%u", t.vocab_size,
          t.eot_token);
    int ok = 1;
    for (uint32_t i = 0; i < 5; i++) {
        const char *s = tokenizer_decode(&t, i);
        ok &= s != NULL && t.token_lengths[i] == lengths[i] && memcmp(s, tokens[i], lengths[i]) == 0 &&
              s[lengths[i]] == '\0';
    }
    CHECK(ok, "every token decodes to its bytes, NUL-terminated (a 0 byte included)");
    CHECK(strcmp(tokenizer_decode(&t, 3), "hello world") == 0, "decode as a C string");
    CHECK(tokenizer_decode(&t, 5) == NULL, "decode of an id >= V is NULL");
    tokenizer_free(&t);
    CHECK(tokenizer_decode(&t, 0) == NULL && !t.loaded, "decode after free is NULL");

    // a byte-level tokenizer as prepare_data.py writes it
    const char *bytes[256];
    uint8_t ones[256];
    static char storage[256];
    for (int i = 0; i < 256; i++) {
        storage[i] = (char)i;
        bytes[i] = storage + i;
        ones[i] = 1;
    }
    p = path_in_dir("byte_tok.bin");
    write_tokenizer(p, 2, 256, 0, bytes, ones, 0, 0);
    tokenizer_init(&t, p);
    CHECK(t.vocab_size == 256 && tokenizer_decode(&t, 'A')[0] == 'A' &&
              tokenizer_decode(&t, 255)[0] == (char)255,
          "byte-level tokenizer");
    tokenizer_free(&t);

    FailCase c;
    memset(&c, 0, sizeof(c));
    c.tokenizer = path_in_dir("tok_truncated.bin");
    write_tokenizer(c.tokenizer, 2, 5, 4, tokens, lengths, 3, 0);
    expect_fail("truncated tokenizer", &c, "tok_truncated.bin", "truncated");
    c.tokenizer = path_in_dir("tok_trailing.bin");
    write_tokenizer(c.tokenizer, 2, 5, 4, tokens, lengths, 0, 1);
    expect_fail("tokenizer with trailing bytes", &c, "tok_trailing.bin", "after the last");
    c.tokenizer = path_in_dir("tok_version.bin");
    write_tokenizer(c.tokenizer, 3, 5, 4, tokens, lengths, 0, 0);
    expect_fail("tokenizer version", &c, "tok_version.bin", "version 3");
    c.tokenizer = path_in_dir("tok_eot.bin");
    write_tokenizer(c.tokenizer, 2, 5, 5, tokens, lengths, 0, 0);
    expect_fail("tokenizer eot out of range", &c, "tok_eot.bin", "eot");
    c.tokenizer = path_in_dir("byte_tok.bin"); // a shard is not a tokenizer, and the other way round
    FailCase as_shard = loader_case(c.tokenizer, 1, 1, 256);
    expect_fail("tokenizer file given as data", &as_shard, "byte_tok.bin", "magic");
    c.tokenizer = path_in_dir("tiny_train_000000.bin");
    expect_fail("shard given as tokenizer", &c, "tiny_train_000000.bin", "magic");
    c.tokenizer = path_in_dir("short_header.bin");
    expect_fail("tokenizer header truncated", &c, "short_header.bin", "header");
    c.tokenizer = path_in_dir("no_tokenizer.bin");
    expect_fail("tokenizer missing", &c, "no_tokenizer.bin", "cannot open");
}

int main(void) {
    snprintf(dir, sizeof(dir), "/tmp/test_dataloader_XXXXXX");
    if (!mkdtemp(dir)) fail("/tmp: cannot create a temp dir: %s", strerror(errno));
    const ShardSet *sets[2] = {&gpt2_set, &llama3_set};
    for (int k = 0; k < 2; k++) write_test_shards(sets[k]);

    test_errors();
    test_llama3_errors();
    for (int k = 0; k < 2; k++) {
        const ShardSet *d = sets[k];
        test_sequential(d);
        test_rank_striding(d, 2, 2, 4, 0);
        test_rank_striding(d, 3, 1, 4, 0);
        test_rank_striding(d, 2, 2, 4, 1);
        test_rank_striding(d, 3, 1, 4, 1);
        test_shuffle(d);
        test_set_position(d, 0, 1);
        test_set_position(d, 1, 1);
        test_set_position(d, 1, 2);
    }
    test_fingerprint();
    test_literal_path();
    test_tokenizer();

    remove_dir();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

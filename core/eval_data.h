// core/eval_data.h: multiple-choice evaluation (HellaSwag) in llm.c's format, scored by llm.c's rule.
//
// The file, as llm.c's dev/data/data_common.py write_evalfile writes it (dev/data/hellaswag.py for HellaSwag;
// scripts/prepare_eval.py here): 256 little-endian int32 header [0]=magic 20240522 [1]=version 1
// [2]=number of examples [3]=the longest example's bytes, then the examples, each a run of uint16:
//   65535 (the delimiter), the example's bytes (these fields included), its index (0, 1, ...), its label (the
//   correct completion), its number of completions, the context's token count and tokens, then for each
//   completion its token count and tokens.
// Every field is checked when the file is read; a file that disagrees with itself is refused whole.
//
// Scoring, llm.c's (train_gpt2.cu with llmc/dataloader.h's evalloader_stat_losses): each completion is one
// row of a batch, the context followed by the completion; its score is the mean of the per-token
// cross-entropy losses of the completion's tokens, each predicted from everything before it (summed in
// float32 in token order, then divided by the count); the completion with the lowest mean wins, the first of
// equal ones (a strict <), and the example counts as correct when that is its label. Rows fill the model's
// (B,T) batches one after the other, so any B works (llm.c packs B/4 whole examples into a batch and refuses
// B < 4). An example whose context and longest completion do not fit in T tokens is refused, as llm.c refuses
// it (it asserts context + completion < T; here the row fits when that sum is at most T). The positions after
// a completion hold token 0: the attention is causal, so they change nothing.
//
// Several processes split the examples as llm.c does: ceil(N / P) consecutive examples each, the last ones
// fewer; every process runs the same number of batches (the most any needs, rows of token 0 padding the
// rest) because a forward pass may be collective (ZeRO-3's gathers), and the correct counts are summed.
//
// Plain C11, also compiles as C++ (nvcc).
#ifndef EVAL_DATA_H
#define EVAL_DATA_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

#define EVAL_MAGIC 20240522
#define EVAL_VERSION 1
#define EVAL_HEADER_INTS 256
#define EVAL_START_EXAMPLE 65535
#define EVAL_EXAMPLE_FIELDS 5 // delimiter, bytes, index, label, number of completions

typedef struct {
    size_t context, completion; // offsets of their tokens in the stream
    int context_len, completion_len;
} EvalRow;

typedef struct {
    const char *path;
    int B, T;
    int num_examples;               // in the file, over all processes
    int first_example, end_example; // this process's examples [first, end)
    int num_rows;                   // this process's completions: a row of a batch each
    int num_batches;                // batches every process runs
    uint16_t *stream;               // the file's examples
    EvalRow *rows;                  // this process's rows
    int *example_first_row;         // this process's example e: rows example_first_row[e] .. [e+1]-1
    int *labels;                    // this process's example e: its label
    float *row_loss;                // a row's completion's mean loss, once its batch is scored
    int *inputs, *targets;          // (B,T): the batch
} EvalSet;

static inline void eval_check_header(const int32_t *header, const char *path) {
    if (header[0] != EVAL_MAGIC)
        fail("%s: not an eval file (magic %d, expected %d as llm.c's write_evalfile writes it)", path,
             header[0], EVAL_MAGIC);
    if (header[1] != EVAL_VERSION)
        fail("%s: eval file version %d is not supported (expected %d)", path, header[1], EVAL_VERSION);
    if (header[2] <= 0) fail("%s: the header says %d examples", path, header[2]);
    if (header[3] <= 0 || header[3] >= 65536)
        fail("%s: the header's longest example of %d bytes is not in 1..65535", path, header[3]);
}

// Checks example `index` at stream[at] (n uint16s left in the file) and returns its length in uint16s; with
// rows, records its completions as rows. The example's own byte count must be what its fields add up to.
static inline int eval_read_example(EvalSet *set, int index, size_t at, size_t n, int32_t longest_bytes,
                                    int vocab_size, int record) {
    const uint16_t *x = set->stream + at;
    const char *path = set->path;
    if (n < EVAL_EXAMPLE_FIELDS + 1) fail("%s: file is truncated in example %d", path, index);
    if (x[0] != EVAL_START_EXAMPLE)
        fail("%s: example %d does not start with the delimiter %d (found %d)", path, index,
             EVAL_START_EXAMPLE, x[0]);
    int bytes = x[1], number = x[2], label = x[3], completions = x[4];
    if (number != index % 65536) fail("%s: example %d is numbered %d", path, index, number);
    if (bytes > longest_bytes)
        fail("%s: example %d has %d bytes, more than the header's longest example (%d)", path, index, bytes,
             longest_bytes);
    if (completions == 0) fail("%s: example %d has no completions", path, index);
    if (label >= completions)
        fail("%s: example %d: label %d is out of range (it has %d completions)", path, index, label,
             completions);
    size_t len = EVAL_EXAMPLE_FIELDS, context_len = x[EVAL_EXAMPLE_FIELDS], context = at + len + 1;
    for (int c = -1; c < completions; c++) { // c = -1: the context
        if (len >= n) fail("%s: file is truncated in example %d", path, index);
        size_t count = x[len];
        if (count == 0) {
            if (c < 0)
                fail("%s: example %d has an empty context (nothing predicts its completions)", path, index);
            fail("%s: example %d: completion %d is empty", path, index, c);
        }
        if (len + 1 + count > n) fail("%s: file is truncated in example %d", path, index);
        for (size_t i = 0; i < count; i++)
            if (x[len + 1 + i] >= vocab_size)
                fail("%s: example %d: token %d is outside the model's vocabulary of %d", path, index,
                     x[len + 1 + i], vocab_size);
        if (c >= 0 && context_len + count > (size_t)set->T)
            fail("%s: example %d: its context and completion %d take %zu tokens, more than the sequence "
                 "length "
                 "T=%d (--seq_len; llm.c refuses such examples too)",
                 path, index, c, context_len + count, set->T);
        if (c >= 0 && record) {
            EvalRow row = {context, at + len + 1, (int)context_len, (int)count};
            set->rows[set->num_rows++] = row;
        }
        len += 1 + count;
    }
    if ((size_t)bytes != 2 * len)
        fail("%s: example %d says it has %d bytes, but its tokens make %zu", path, index, bytes, 2 * len);
    return (int)len;
}

// Reads and checks the whole file for a model of vocab_size tokens and batches of B x T; this process
// (rank of world) scores its share of the examples.
static inline void eval_set_init(EvalSet *set, const char *path, int B, int T, int vocab_size, int rank,
                                 int world) {
    memset(set, 0, sizeof(*set));
    set->path = path;
    set->B = B, set->T = T;
    FILE *f = fopen_regular(path);
    int64_t size = file_size_check(f, path);
    if (size < EVAL_HEADER_INTS * 4) fail("%s: file is truncated (shorter than its header)", path);
    int32_t header[EVAL_HEADER_INTS];
    fread_check(header, sizeof(int32_t), EVAL_HEADER_INTS, f, path);
    eval_check_header(header, path);
    if ((size - EVAL_HEADER_INTS * 4) % 2) fail("%s: odd number of bytes after the header", path);
    size_t n = (size_t)(size - EVAL_HEADER_INTS * 4) / 2;
    set->stream = (uint16_t *)malloc_check(n * sizeof(uint16_t), path);
    fread_check(set->stream, sizeof(uint16_t), n, f, path);
    fclose(f);
    set->num_examples = header[2];
    int64_t per_process = ((int64_t)set->num_examples + world - 1) / world, first = per_process * rank;
    set->first_example = (int)(first < set->num_examples ? first : set->num_examples);
    set->end_example =
        (int)(first + per_process < set->num_examples ? first + per_process : set->num_examples);
    // the rows: a first pass checks every example and counts the completions of every process (the batches
    // all run), before anything is allocated by the header's counts; a second records this process's
    int most_rows = 0, rows = 0;
    size_t at = 0;
    for (int e = 0; e < set->num_examples; e++) {
        if (at >= n)
            fail("%s: file is truncated: the header says %d examples, it holds %d", path, set->num_examples,
                 e);
        int len = eval_read_example(set, e, at, n - at, header[3], vocab_size, 0);
        rows += set->stream[at + 4]; // its completions
        at += len;
        if ((e + 1) % per_process == 0 || e + 1 == set->num_examples) {
            if (rows > most_rows) most_rows = rows;
            rows = 0;
        }
    }
    if (at != n)
        fail("%s: %zu bytes follow the last of its %d examples", path, 2 * (n - at), set->num_examples);
    int mine = set->end_example - set->first_example;
    set->example_first_row = (int *)malloc_check((size_t)(mine + 1) * sizeof(int), path);
    set->labels = (int *)malloc_check((size_t)(mine > 0 ? mine : 1) * sizeof(int), path);
    set->num_batches = (most_rows + B - 1) / B;
    size_t max_rows = (size_t)set->num_batches * B;
    set->rows = (EvalRow *)malloc_check(max_rows * sizeof(EvalRow), path);
    set->row_loss = (float *)malloc_check(max_rows * sizeof(float), path);
    at = 0;
    for (int e = 0; e < set->end_example; e++) {
        int record = e >= set->first_example;
        if (record) {
            set->example_first_row[e - set->first_example] = set->num_rows;
            set->labels[e - set->first_example] = set->stream[at + 3];
        }
        at += eval_read_example(set, e, at, n - at, header[3], vocab_size, record);
    }
    set->example_first_row[mine] = set->num_rows;
    set->inputs = (int *)malloc_check(2 * (size_t)B * T * sizeof(int), path);
    set->targets = set->inputs + (size_t)B * T;
}

// Batch `batch`'s rows into inputs and targets: a row is its context and completion, then token 0; the
// target of a position is the next token (0 past the completion).
static inline void eval_set_batch(EvalSet *set, int batch) {
    int T = set->T;
    memset(set->inputs, 0, 2 * (size_t)set->B * T * sizeof(int));
    for (int b = 0; b < set->B; b++) {
        int row = batch * set->B + b;
        if (row >= set->num_rows) break;
        int *in = set->inputs + (size_t)b * T, *target = set->targets + (size_t)b * T;
        const EvalRow *r = &set->rows[row];
        int len = r->context_len + r->completion_len;
        for (int t = 0; t < r->context_len; t++) in[t] = set->stream[r->context + t];
        for (int t = r->context_len; t < len; t++) in[t] = set->stream[r->completion + t - r->context_len];
        for (int t = 0; t + 1 < len; t++) target[t] = in[t + 1];
    }
}

// The per-token losses (B,T) of batch `batch`'s forward: each row's completion's mean loss, llm.c's sum.
static inline void eval_set_take_losses(EvalSet *set, int batch, const float *losses) {
    for (int b = 0; b < set->B; b++) {
        int row = batch * set->B + b;
        if (row >= set->num_rows) break;
        const float *loss = losses + (size_t)b * set->T;
        int first = set->rows[row].context_len - 1, count = set->rows[row].completion_len;
        float sum = 0.0f;
        for (int t = first; t < first + count; t++) sum += loss[t];
        set->row_loss[row] = sum / (float)count;
    }
}

// This process's correct examples, once every batch is scored.
static inline int eval_set_correct(const EvalSet *set) {
    int correct = 0;
    for (int e = 0; e < set->end_example - set->first_example; e++) {
        int first = set->example_first_row[e], best = first;
        for (int row = first + 1; row < set->example_first_row[e + 1]; row++)
            if (set->row_loss[row] < set->row_loss[best]) best = row;
        correct += best - first == set->labels[e];
    }
    return correct;
}

static inline void eval_set_free(EvalSet *set) {
    free(set->stream);
    free(set->rows);
    free(set->row_loss);
    free(set->example_first_row);
    free(set->labels);
    free(set->inputs);
}

#endif // EVAL_DATA_H

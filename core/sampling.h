// core/sampling.h: text generation every --sample_every steps, shared by both trainers. The trainer supplies
// the logits of one position given a token buffer; the sampling itself (an inverse-CDF draw from the
// softmax, in double) and its generator, seeded from the step so that sampling never changes training,
// are the same in both.
#ifndef SAMPLING_H
#define SAMPLING_H

#include <math.h>
#include <stdio.h>

#include "cli.h"
#include "gpt_model.h"
#include "tokenizer.h"

// Logits (at least V values) of position `position`, after a forward over tokens (B,T) (row 0 used).
typedef const float *(*PositionLogits)(void *model, const int *tokens, int position);

// The tokenizer of --tokenizer, checked against the model's vocabulary; not loaded when the flag is empty.
static inline void load_tokenizer_for(Tokenizer *tokenizer, const TrainOptions *opts, const GPTConfig *cfg) {
    memset(tokenizer, 0, sizeof(*tokenizer));
    if (!*opts->tokenizer) return;
    tokenizer_init(tokenizer, opts->tokenizer);
    if ((int)tokenizer->vocab_size != cfg->vocab_size)
        fail("--tokenizer: %s has %u tokens but the model's vocabulary is %d", opts->tokenizer,
             tokenizer->vocab_size, cfg->vocab_size);
}

static inline int sample_from_logits(const float *logits, int V, double u) {
    double max_logit = logits[0], sum = 0.0, cdf = 0.0;
    for (int v = 1; v < V; v++) max_logit = fmax(max_logit, logits[v]);
    for (int v = 0; v < V; v++) sum += exp(logits[v] - max_logit);
    for (int v = 0; v < V; v++) {
        cdf += exp(logits[v] - max_logit) / sum;
        if (u < cdf) return v;
    }
    return V - 1;
}

// Prints sample_len tokens (at most T-1) generated after an end-of-text token. tokens: a (B,T) buffer.
static inline void sample_text(void *model, PositionLogits logits_at, const Tokenizer *tokenizer, int *tokens,
                               int B, int T, int V, int sample_len, long step) {
    int eot = tokenizer->loaded ? (int)tokenizer->eot_token : 0;
    for (int i = 0; i < B * T; i++) tokens[i] = eot;
    Rng rng;
    rng_seed(&rng, 0x5A4D + (uint64_t)step);
    int steps = sample_len < T - 1 ? sample_len : T - 1;
    printf("sample | ");
    for (int t = 1; t <= steps; t++) {
        int next = sample_from_logits(logits_at(model, tokens, t - 1), V, rng_uniform(&rng));
        tokens[t] = next;
        if (tokenizer->loaded)
            printf("%s", tokenizer_decode(tokenizer, (uint32_t)next));
        else
            printf("%d ", next);
    }
    printf("\n");
    fflush(stdout);
}

#endif // SAMPLING_H
